//! RDMA through the memory owner's ring (`ShmConfig::ring_rma`): a read
//! or write of ordinary registered memory that fits one entry, towards an
//! owner that is polling, goes as a request entry into the owner's ring;
//! the owner's device checks it against its own registrations, copies
//! within its own process, and answers with an entry in the requester's
//! ring. With the owner polling this is several times quicker than a
//! cross-memory-attach system call per operation (docs/performance.md,
//! "one-sided operations on one host (issue 31, second part)").
//!
//! An owner that stops polling must not hold a request up: when the
//! owner's ring head has not moved for [`RESCUE_US`] while a request waits
//! in front of it, the requester takes its waiting requests back and does
//! them by cross-memory attach after all (and sends that owner no request
//! for [`BACKOFF_US`]). The head, not a request's age: a window of 64
//! requests queued behind each other is served in tens of microseconds by
//! an owner that polls. And a quarter of a millisecond: even an owner that
//! polls in a loop stands still now and then while its host runs
//! something else, and a tighter limit takes back requests such an owner
//! was about to serve (docs/performance.md, "one-sided operations on one
//! host (issue 31, second part)"). Only an owner that polled in the last
//! 50 us is sent requests at all, so a request is taken back only when
//! the owner stopped just then. Owner and requester decide who has a
//! request with one compare-and-swap each on the request's token word in
//! the entry: the owner sets [`TAKEN`] before it reads the request, the
//! requester [`VOID`] before it copies; whoever comes second leaves it
//! (the owner skips a void entry). A requester only tries while the
//! owner's head has not passed the entry, so the word is still the
//! request's; tokens are random in their high bits besides.
//!
//! Entries (no packet, length 0; the span's flag says which):
//!
//! ```text
//! request  RDMA_REQ: 0 token u64 | 8 addr u64 | 16 key u64 | 24 len u64 | 32 write u8 | 40 data (writes)
//! answer   RDMA_RSP: 0 token u64 | 8 status i32 | 16 data (reads)
//! ```

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use super::mrtable::read_remote;
use super::segment::{self, off};
use super::{entry_len, ShmDevice, HDR_LEN, SLOT_HDR};
use crate::device::{Access, Ah, DevError, DevEvent};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;

/// Bytes of a request before its data.
const REQ_HEAD: usize = 40;
/// Bytes of an answer before its data.
const RSP_HEAD: usize = 16;
/// How long (µs) the owner's head may stand still in front of a waiting
/// request before the requester takes it back and copies by
/// cross-memory attach.
const RESCUE_US: u64 = 250;
/// After a request was taken back: how long (µs) no request goes to that
/// owner's ring.
const BACKOFF_US: u64 = 20_000;
/// The owner's mark on a token: it has the request.
const TAKEN: u64 = 1 << 63;
/// The requester's mark on a token: it took the request back.
const VOID: u64 = 1 << 62;

/// A request in an owner's ring, not answered yet.
struct Pending {
    wr_id: u64,
    ah: Ah,
    local: UserBuf,
    addr: u64,
    key: u64,
    write: bool,
    /// The request entry's ring position in the owner's ring, and its
    /// offset there (the ring it went into may have grown since).
    pos: u64,
    at: usize,
}

/// An answer that found the requester's ring full: sent at a later poll.
struct Answer {
    ah: Ah,
    token: u64,
    status: Status,
    data: Vec<u8>,
}

/// This endpoint's requests in owners' rings and answers still to send.
#[derive(Default)]
pub(super) struct RingRdma {
    pending: FxHashMap<u64, Pending>,
    /// Tokens in the order sent (answered ones are skipped when met).
    order: VecDeque<u64>,
    next: u64,
    salt: u64,
    backlog: VecDeque<Answer>,
    /// Requests sent, and taken back.
    pub(super) sent: u64,
    pub(super) taken_back: u64,
}

impl RingRdma {
    /// Whether requests wait for answers or answers for room (`events`
    /// then has work).
    pub(super) fn busy(&self) -> bool {
        !self.order.is_empty() || !self.backlog.is_empty()
    }

    /// A fresh token: random high bits, a counter below, the two marks clear.
    fn token(&mut self) -> u64 {
        if self.salt == 0 {
            self.salt = (segment::random_u64() & 0x3FFF_FFFF) << 32 | 1 << 32;
        }
        self.next = self.next.wrapping_add(1) & 0xFFFF_FFFF;
        self.salt | self.next
    }
}

impl ShmDevice {
    /// Whether a read or write of `len` bytes to `ah` goes through its ring:
    /// on, it fits an entry, the owner polls (`progressing`), and no request
    /// to it had to be taken back lately.
    pub(super) fn ring_rdma_ok(&mut self, ah: Ah, len: usize) -> bool {
        if !self.cfg.ring_rma || !self.cma || !self.ring_fits(len) {
            return false;
        }
        let backoff = self.peers.get(ah as usize).and_then(Option::as_ref).map_or(0, |p| p.ring_off_until);
        backoff <= super::mono_us() && self.progressing(ah)
    }

    /// Whether an RDMA of `len` bytes fits one request (or its answer).
    pub(super) fn ring_fits(&self, len: usize) -> bool {
        len + REQ_HEAD <= self.shape.mtu
    }

    /// Whether requests of ours wait in `ah`'s ring: every other RDMA to it
    /// then goes behind them (through the ring, or once they are done), so
    /// that a read after a write, or a write after a write, to the same
    /// place sees the order in which they were posted.
    pub(super) fn ring_waiting(&self, ah: Ah) -> bool {
        self.peers.get(ah as usize).and_then(Option::as_ref).is_some_and(|p| p.ring_pending > 0)
    }

    /// Counts a request to `ah` in or out of its `ring_pending`.
    fn ring_count(&mut self, ah: Ah, more: bool) {
        if let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut) {
            p.ring_pending = if more { p.ring_pending + 1 } else { p.ring_pending.saturating_sub(1) };
        }
    }

    /// Sends a request for RDMA `wr_id` into `ah`'s ring; `Err` when it
    /// could not be claimed (the caller copies by cross-memory attach).
    pub(super) fn ring_request(
        &mut self,
        ah: Ah,
        local: UserBuf,
        (addr, key): (u64, u64),
        wr_id: u64,
        write: bool,
    ) -> Result<(), DevError> {
        let token = self.ring.token();
        let data = if write { local.len() } else { 0 };
        let mut head = [0u8; REQ_HEAD];
        head[..8].copy_from_slice(&token.to_le_bytes());
        head[8..16].copy_from_slice(&addr.to_le_bytes());
        head[16..24].copy_from_slice(&key.to_le_bytes());
        head[24..32].copy_from_slice(&(local.len() as u64).to_le_bytes());
        head[32] = u8::from(write);
        let (pos, at) = self.send_notice(ah, REQ_HEAD + data, segment::RDMA_REQ, |body| {
            body[..REQ_HEAD].copy_from_slice(&head);
            if write {
                local.with_slice(|s| body[REQ_HEAD..].copy_from_slice(s));
            }
        })?;
        self.ring.pending.insert(token, Pending { wr_id, ah, local, addr, key, write, pos, at });
        self.ring.order.push_back(token);
        self.ring.sent += 1;
        self.ring_count(ah, true);
        Ok(())
    }

    /// Claims an entry for a notice of `len` payload bytes with `flag` in
    /// `ah`'s ring, fills its payload with `fill`, publishes it and wakes
    /// the owner if it sleeps: returns the entry's ring position and offset.
    pub(super) fn send_notice(
        &mut self,
        ah: Ah,
        len: usize,
        flag: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(u64, usize), DevError> {
        let ids = (self.epid, self.connid);
        let need = entry_len(len);
        let note = self.map.hdr_u64::<{ off::NOTE }>();
        let p = super::peer_of(&mut self.peers, ah)?;
        let pos = match super::claim_entry(p, need, true, ids, note) {
            Ok(pos) => pos,
            Err(e) => return Err(self.claim_failed(ah, e)),
        };
        // SAFETY: the claimed entry's payload: `SLOT_HDR + len <= need`
        // bytes from its start, in bounds (see `claim`); ours until published.
        let at = p.shape.at(pos);
        fill(unsafe { p.map.bytes(HDR_LEN + at + SLOT_HDR, len) });
        Self::publish_notice(p, pos, ids, need, flag, note);
        Ok((pos, at))
    }

    /// Serves a request entry at ring offset `e` (`span` bytes, checked)
    /// from endpoint `epid` of `connid`: taken (unless the requester took
    /// it back, or is not a peer here: then left for it to take back),
    /// checked against this endpoint's registrations, copied, answered.
    pub(super) fn serve_ring_rdma(&mut self, e: usize, span: usize, (epid, connid): (u32, u32)) {
        let Some(&ah) = self.by_id.get(&(epid, connid)) else { return };
        if span < SLOT_HDR + REQ_HEAD {
            return;
        }
        let word = self.map.u64_at(e + SLOT_HDR);
        let token = word.load(Ordering::Acquire);
        if token & (TAKEN | VOID) != 0
            || word.compare_exchange(token, token | TAKEN, Ordering::SeqCst, Ordering::Relaxed).is_err()
        {
            return;
        }
        // SAFETY: the request's head, inside the entry (`span` checked).
        let h = unsafe { self.map.bytes(e + SLOT_HDR, REQ_HEAD) };
        let u = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        let (addr, key, len, write) = (u(8), u(16), u(24) as usize, h[32] == 1);
        let room = span - SLOT_HDR - REQ_HEAD;
        let fits = if write { len <= room } else { len.checked_add(RSP_HEAD).is_some_and(|n| n <= self.shape.mtu) };
        let need = if write { Access::REMOTE_WRITE } else { Access::REMOTE_READ };
        // By this endpoint's own record of its registrations: the table in
        // the segment is only the peers' copy, which any of them can write;
        // and by the table too, whose key a deregistration clears first.
        let granted = fits
            && self.own_grants(key, addr, len as u64, need)
            && read_remote(&self.map, &self.shape, key, addr, len as u64, need).is_ok();
        // SAFETY: this endpoint registered `len` bytes at `addr` for this
        // access and has not deregistered them (the deregistration runs on
        // this endpoint, not during this call).
        let mine = granted.then(|| unsafe { UserBuf::from_raw(addr as *mut u8, len) }).flatten();
        let Some(mine) = mine else {
            return self.answer(Answer { ah, token, status: Status::RemoteAccess, data: Vec::new() });
        };
        if write {
            // SAFETY: the request's data, inside the entry (`len <= room`).
            let data = unsafe { self.map.bytes(e + SLOT_HDR + REQ_HEAD, len) };
            mine.with_slice_mut(|m| m.copy_from_slice(data));
            return self.answer(Answer { ah, token, status: Status::Success, data: Vec::new() });
        }
        let sent = mine.with_slice(|m| self.answer_now(ah, token, Status::Success, m));
        if sent == Err(DevError::Again) {
            let data = mine.with_slice(<[u8]>::to_vec);
            self.ring.backlog.push_back(Answer { ah, token, status: Status::Success, data });
        }
    }

    /// Sends `a`, or keeps it for a later poll while the requester's ring
    /// is full (behind those kept before it).
    fn answer(&mut self, a: Answer) {
        if self.ring.backlog.is_empty() && self.answer_now(a.ah, a.token, a.status, &a.data) != Err(DevError::Again) {
            return;
        }
        self.ring.backlog.push_back(a);
    }

    fn answer_now(&mut self, ah: Ah, token: u64, status: Status, data: &[u8]) -> Result<u64, DevError> {
        self.send_notice(ah, RSP_HEAD + data.len(), segment::RDMA_RSP, |b| {
            b[..8].copy_from_slice(&token.to_le_bytes());
            b[8..12].copy_from_slice(&status.code().to_le_bytes());
            b[12..16].fill(0);
            b[RSP_HEAD..].copy_from_slice(data);
        })
        .map(|(pos, _)| pos)
    }

    /// An answer entry at ring offset `e` (`span` bytes, checked) from
    /// endpoint `epid` of `connid`: ends the request it names, when that
    /// endpoint is the one asked; anything else is dropped.
    pub(super) fn ring_rdma_answered(&mut self, e: usize, span: usize, (epid, connid): (u32, u32)) {
        if span < SLOT_HDR + RSP_HEAD {
            return;
        }
        // SAFETY: the answer's head, inside the entry (`span` checked).
        let h = unsafe { self.map.bytes(e + SLOT_HDR, RSP_HEAD) };
        let token = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8]));
        let code = i32::from_le_bytes(h[8..12].try_into().unwrap_or([0; 4]));
        let from = self.by_id.get(&(epid, connid)).copied();
        let Some(p) = self.ring.pending.get(&token).filter(|p| Some(p.ah) == from) else { return };
        let len = p.local.len();
        let mut status = Status::from_code(code).unwrap_or(Status::Remote);
        if !p.write && status == Status::Success {
            if span - SLOT_HDR - RSP_HEAD < len {
                status = Status::Remote;
            } else {
                // SAFETY: the answer's data, inside the entry (checked).
                let data = unsafe { self.map.bytes(e + SLOT_HDR + RSP_HEAD, len) };
                p.local.with_slice_mut(|l| l.copy_from_slice(data));
            }
        }
        let (wr_id, ah) = (p.wr_id, p.ah);
        self.ring.pending.remove(&token);
        self.ring_count(ah, false);
        let status = if status == Status::Success { Ok(()) } else { Err(status) };
        self.events.push(DevEvent::SendDone { wr_id, ah, status });
    }

    /// Sends the answers kept back, and takes back the untaken requests in
    /// front of an owner's head that has stood still for [`RESCUE_US`]
    /// (from `events`, while `busy`).
    pub(super) fn ring_rdma_progress(&mut self) {
        while let Some(a) = self.ring.backlog.pop_front() {
            if self.answer_now(a.ah, a.token, a.status, &a.data) == Err(DevError::Again) {
                self.ring.backlog.push_front(a);
                break;
            }
        }
        if self.ring.order.is_empty() {
            return;
        }
        let now = super::mono_us();
        while let Some(&token) = self.ring.order.front() {
            let Some(pd) = self.ring.pending.get(&token) else {
                self.ring.order.pop_front();
                continue;
            };
            let (ah, pos, at) = (pd.ah, pd.pos, pd.at);
            match self.owner_stuck(ah, pos, now) {
                // The owner has taken it: its answer comes.
                None => {
                    self.ring.order.pop_front();
                    continue;
                }
                Some(false) => break,
                Some(true) => {}
            }
            // Taken by an owner that has not moved its head yet (it serves
            // it now, or was stopped in the middle): its answer comes, and
            // no request after it is taken back meanwhile (it would pass
            // this one). It stays in front until answered.
            if !self.take_back(ah, at, token, now) {
                break;
            }
            self.ring.order.pop_front();
            self.ring.taken_back += 1;
            let Some(pd) = self.ring.pending.remove(&token) else { continue };
            self.ring_count(ah, false);
            let status = match self.copy(ah, pd.local, pd.addr, pd.key, pd.write) {
                Ok(s) => s,
                Err(DevError::Again) => Err(Status::Again),
                Err(DevError::Failed(s)) => Err(s),
            };
            self.events.push(DevEvent::SendDone { wr_id: pd.wr_id, ah, status });
        }
    }

    /// For a request at ring position `pos` of `ah`'s ring: `None` when the
    /// owner's head has passed it (taken, or skipped as void); else whether
    /// the head has stood still for [`RESCUE_US`] (a lost or removed peer:
    /// at once).
    fn owner_stuck(&mut self, ah: Ah, pos: u64, now: u64) -> Option<bool> {
        let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut) else { return Some(true) };
        if p.lost {
            return Some(true);
        }
        let head = p.map.u64_at(off::HEAD).load(Ordering::Acquire);
        if head > pos {
            return None;
        }
        if head != p.ring_head.0 || p.ring_head.1 == 0 {
            p.ring_head = (head, now);
        }
        Some(now.saturating_sub(p.ring_head.1) >= RESCUE_US)
    }

    /// Voids request `token` (at ring offset `at`) in `ah`'s ring if
    /// the owner has not taken it: true when it is this side's now (also
    /// for a peer lost or removed). The owner then gets no request for a
    /// while. Called only while the owner's head has not passed the entry,
    /// so the word is still the request's.
    fn take_back(&mut self, ah: Ah, at: usize, token: u64, now: u64) -> bool {
        let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut) else { return true };
        if p.lost {
            return true;
        }
        let w = p.map.u64_at(HDR_LEN + at + SLOT_HDR);
        let mine = w.compare_exchange(token, token | VOID, Ordering::SeqCst, Ordering::Relaxed).is_ok();
        if mine {
            p.ring_off_until = now + BACKOFF_US;
        }
        mine
    }

    /// Requests to peer `ah` (removed) end: their completions fail.
    pub(super) fn ring_rdma_forget(&mut self, ah: Ah) {
        let gone: Vec<u64> = self.ring.pending.iter().filter(|(_, p)| p.ah == ah).map(|(&t, _)| t).collect();
        for t in gone {
            if let Some(p) = self.ring.pending.remove(&t) {
                self.ring_count(ah, false);
                self.events.push(DevEvent::SendDone { wr_id: p.wr_id, ah, status: Err(Status::PeerUnreachable) });
            }
        }
        self.ring.backlog.retain(|a| a.ah != ah);
    }
}
