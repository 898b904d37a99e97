//! The owner's side of its ring: packets are read in place and handed to
//! the engine in batches, and the head, advanced after each batch, hands
//! their bytes back to the producers. Also here: the entries without a
//! packet (close, write-with-immediate and ring-RMA notices, padding), the
//! packets the engine defers (copied aside; producers then hold back new
//! messages), and the reply lines: an endpoint whose last packet was one
//! it sent asks for the lines its reply would take in the sender's ring as
//! soon as the engine has handled a packet, so that their transfer from
//! the peer (which polls them) overlaps the application's work before it
//! answers. The express receive, for whole packets from the last sender
//! only, is `Device::recv_express` (`device.rs`).

use std::sync::atomic::Ordering;

use super::produce::prefetch_pos;
use super::segment::{self, off};
use super::{Parked, ShmDevice, HDR_LEN, SLOT_HDR};
use crate::device::{Ah, DevEvent, Flow};
use crate::mem::UserBuf;

/// Most cache lines of a reply asked for ahead (see [`reply_lines`]): the
/// least cap that does not slow 4 KiB replies; a higher one gains nothing
/// (docs/performance.md, "Reply lines").
pub(super) const REPLY_LINES: usize = 8;

/// How many lines of the reply to the packet just handled to ask for
/// ahead ([`ShmDevice::prefetch_reply`]); 0: none. Only after the first
/// packet of a poll (`first`), and only when `answering`: this endpoint's
/// last packet was one it sent, as in a ping-pong or a request and its
/// response. A receiver of a one-way stream never asks: it would take the
/// line from its sender, which polls it, on every poll. As many lines as
/// the entry just taken spans (`span` bytes; a reply is often as long as
/// what it answers), at most [`REPLY_LINES`].
pub(super) fn reply_lines(answering: bool, first: bool, span: usize) -> usize {
    if answering && first {
        (span / 64).clamp(1, REPLY_LINES)
    } else {
        0
    }
}

impl ShmDevice {
    /// Hands up to `max` waiting packets to `f` (`Device::recv` after its
    /// empty check).
    #[inline(never)]
    pub(super) fn recv_batch<R: Flow>(
        &mut self,
        max: usize,
        mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let mut n = 0;
        // The last packet this endpoint moved was one it sent: packets now
        // are likely answers, which the application answers in turn.
        let answering = self.streaming;
        while n < max {
            let at = self.shape.at(self.head);
            let e = HDR_LEN + at;
            // SAFETY: `at` is a multiple of 64 below `ring` (the head moves
            // by whole lines: `span` below is one), so the entry's header is
            // 8-aligned and inside the ring, which our own valid `shape`
            // puts inside the mapping.
            let h = unsafe { self.map.entry_at(e) };
            if h.seal.load(Ordering::Acquire) != self.shape.sealed(self.head) {
                break;
            }
            let (from, connid) = segment::halves(h.ids.load(Ordering::Relaxed));
            let (len, span, more) = h.sizes();
            // A span no producer writes is a peer scribbling on the segment
            // (which any process of the user can): skip one line and read
            // nothing.
            let sane = self.shape.span_fits(at, span);
            let span = if sane { span } else { 64 };
            let mut next = self.head + span as u64;
            if more && sane && self.trail > 0 && self.trailing(span) {
                break;
            }
            // Whether another entry follows is the next question. After the
            // first packet of a poll its line is fetched while this packet
            // is handled (`at` of any position is within the ring): a
            // ping-pong's receiver then finds it at hand. Not after later
            // ones: a receiver that streams has caught up with the sender,
            // and fetching the line the sender writes next takes it away
            // from the sender every message, which slows 8 B streams
            // (docs/performance.md, "Other prefetches").
            if n == 0 {
                prefetch_pos::<false>(&self.map, &self.shape, self.head + span as u64);
            }
            // Packets are delivered even when their sender has closed since:
            // they were sent while it was open (the device is reliable).
            let mut go_on = true;
            if sane && self.shape.holds(len, span) {
                let ah = match self.last_from {
                    Some((id, ah)) if id == (from, connid) => ah,
                    _ => {
                        let ah = self.by_id.get(&(from, connid)).copied();
                        self.last_from = Some(((from, connid), ah));
                        ah
                    }
                };
                // SAFETY: `SLOT_HDR + len <= span <= ring - at` (`holds` and
                // `span_fits`, above), so the packet ends inside the ring.
                let pkt = unsafe { self.map.bytes(e + SLOT_HDR, len) };
                let verdict = f(ah, pkt, None);
                if verdict.defer() {
                    self.park((from, connid), pkt.to_vec());
                }
                go_on = verdict.go_on();
                let lines = reply_lines(answering, n == 0, span);
                if lines > 0 {
                    self.prefetch_reply(ah, lines);
                }
            } else if sane && len == 0 {
                if let Some(to) = self.notice(e, span, (from, connid)) {
                    next = to;
                }
            }
            self.head = next;
            n += 1;
            if !go_on {
                break;
            }
        }
        if n > 0 {
            self.taken();
        }
        n
    }

    /// Keeps a packet the engine deferred; the first one makes producers
    /// hold back new messages.
    #[cold]
    fn park(&mut self, from: (u32, u32), pkt: Vec<u8>) {
        if self.parked.is_empty() {
            self.map.hdr_u64::<{ off::TAIL }>().fetch_or(segment::HELD, Ordering::AcqRel);
        }
        self.parked.push_back(Parked { from, pkt });
    }

    /// Hands the parked packets to `f` again, up to `max`, in their order;
    /// those it defers again stay, in order. When none is left, producers
    /// may send new messages again.
    #[cold]
    pub(super) fn recv_parked<R: Flow>(
        &mut self,
        max: usize,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let by_id = &self.by_id;
        let (n, rest) =
            crate::device::redeliver_parked(&mut self.parked, max, |p| by_id.get(&p.from).copied(), |p| &p.pkt, f);
        self.redeliver = rest;
        if self.parked.is_empty() {
            self.map.hdr_u64::<{ off::TAIL }>().fetch_and(!segment::HELD, Ordering::AcqRel);
        }
        n
    }

    /// An entry without a packet at ring offset `e` (its `span` checked)
    /// from endpoint `epid` of `connid`: a close notice, a write-with-
    /// immediate notice, an RDMA request or answer (`ringrma.rs`), a help
    /// notice (`help.rs`), a grow
    /// notice (`grow.rs`: returns where the head goes next), or padding.
    #[cold]
    #[inline(never)]
    fn notice(&mut self, e: usize, span: usize, (epid, connid): (u32, u32)) -> Option<u64> {
        // SAFETY: as in `recv_batch`: an entry header inside the ring.
        let h = unsafe { self.map.entry_at(e) };
        let flags = h.flags();
        if flags & segment::GROW_NOTICE != 0 {
            return self.grow_noticed();
        }
        if flags & segment::HELP == segment::HELP {
            self.help_noticed(e, span, (epid, connid));
        } else if flags & segment::RDMA_REQ != 0 {
            self.serve_ring_rdma(e, span, (epid, connid));
        } else if flags & segment::RDMA_RSP != 0 {
            self.ring_rdma_answered(e, span, (epid, connid));
        } else if h.close_notice() {
            self.close_noticed(epid, connid);
        } else if h.write_imm() {
            // SAFETY: `SLOT_HDR + 12 <= 64 <=` the entry's span (checked
            // by the caller), inside the ring.
            let b = unsafe { self.map.bytes(e + SLOT_HDR, 12) };
            let imm = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let len = u64::from_le_bytes([b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]]);
            let ah = self.by_id.get(&(epid, connid)).copied();
            let raw = self.raw_of(epid, connid);
            self.events.push(DevEvent::WriteImm { ah, raw, imm, len });
        }
        None
    }

    /// A close notice from endpoint `epid` of `connid`: the peer is lost
    /// (its packets before the notice have all been handed over).
    #[cold]
    fn close_noticed(&mut self, epid: u32, connid: u32) {
        let Some(&ah) = self.by_id.get(&(epid, connid)) else { return };
        if let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut).filter(|p| !p.lost) {
            p.lost = true;
            self.events.push(DevEvent::PeerLost { ah });
        }
    }

    /// After a call that took packets: hands the slots read back to the
    /// producers, and notes that the last packet moved was a received one.
    #[inline(always)]
    pub(super) fn taken(&mut self) {
        self.streaming = false;
        self.held = 0;
        // Before the head is handed back: the lines just read are room for
        // the grow notice that producers cannot take meanwhile (`grow.rs`).
        self.grow_if_used();
        self.map.u64_at(off::HEAD).store(self.head, Ordering::Release);
        if self.fd_mode {
            self.drain_fifo_kept();
        }
    }

    /// Asks, in exclusive state, for the first `lines` cache lines of
    /// `ah`'s ring where a packet to it would go now ([`reply_lines`]
    /// says when and how many). The transfer of those lines from the peer,
    /// which polls the first of them, then overlaps the application's
    /// handling of the packet just taken and its call to send, where
    /// `send_with` would ask only after its claim. Right after the packet,
    /// not earlier or after the whole poll: a peer that polls the line
    /// takes it back within a few polls (docs/performance.md, "Reply
    /// lines").
    #[inline(always)]
    pub(super) fn prefetch_reply(&self, ah: Option<Ah>, lines: usize) {
        if let Some(Some(p)) = ah.and_then(|a| self.peers.get(a as usize)) {
            let pos = segment::tail_pos(p.map.u64_at(off::TAIL).load(Ordering::Relaxed));
            for line in 0..lines {
                prefetch_pos::<true>(&p.map, &p.shape, pos + (line * 64) as u64);
            }
        }
    }

    /// True when a packet waits in the ring.
    #[inline(always)]
    pub(super) fn ready(&self) -> bool {
        let word = self.map.u64_at(HDR_LEN + self.shape.at(self.head)).load(Ordering::Acquire);
        word == self.shape.sealed(self.head)
    }
}
