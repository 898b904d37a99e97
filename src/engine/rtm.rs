//! Two-sided messages (spec §3.2): posting sends and receives, protocol
//! selection (eager, medium, long-CTS, long-read, runting read), matching
//! (tagged with ignore mask, untagged, directed or any source), unexpected
//! messages. The sender's packets are in `send.rs`, the long-CTS data
//! phase in `longcts.rs`, the long-read one in `longread.rs`, runting
//! read's in `runt.rs`; message numbers withdrawn and operations canceled
//! in `withdraw.rs`.

use super::op::{Awaits, Grant, Msg, Op, Out, Posted, RxVia, State, Unexpected, Via};
use super::{pop_front_hot, Addr, Core, CqFlags, Cqe, RecvDone, RecvOpts, SendOpts};
use super::{ProbeMode, Probed};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::{self, ReqInfo, Subprotocol};

/// Index of the posted/unexpected queue for tagged or untagged messages.
fn q(tagged: bool) -> usize {
    usize::from(tagged)
}

/// Does a receive (`src`, `tag`, `ignore`) accept a message from `peer` with `tag`?
pub(crate) fn accepts(r: &Posted, tagged: bool, peer: u32, tag: u64) -> bool {
    takes(r.src, tagged.then_some((r.tag, r.ignore)), peer, tag)
}

/// Whether a receive from `src` (any source: `None`) with `tag` (tag and
/// ignore mask; `None`: untagged) takes a message from `peer` with `msg_tag`.
fn takes(src: Option<u32>, tag: Option<(u64, u64)>, peer: u32, msg_tag: u64) -> bool {
    src.is_none_or(|s| s == peer) && tag.is_none_or(|(t, ignore)| (t ^ msg_tag) & !ignore == 0)
}

impl Core {
    /// Queues a send; see [`super::Endpoint::send`]. `Some(key)`: a
    /// long-read send whose buffer must be registered with the device.
    /// `dc`: delivery complete ([`super::SendFlags::dc`]).
    pub(crate) fn post_send(
        &mut self,
        dest: Addr,
        buf: UserBuf,
        opts: SendOpts,
        dc: bool,
    ) -> Result<Option<u32>, Status> {
        let peer = self.reachable_peer(dest)?;
        let dc_off = self.my_extra() & wire::extra::DELIVERY_COMPLETE == 0;
        if dc && (dc_off || (peer.known() && !peer.has(wire::extra::DELIVERY_COMPLETE))) {
            return Err(Status::NotSup); // a baseline endpoint or peer has no delivery complete
        }
        let tagged = opts.tag.is_some();
        let len = buf.len();
        let proto = if len <= peer.path.eager_cap[usize::from(tagged)] {
            0
        } else if len <= self.cfg.medium_max {
            1
        } else {
            2
        };
        // Long-read where the device asks for it, medium sizes included
        // (shm's crowded mode: one copy rather than two).
        let longread = if proto > 0 && !dc { self.longread_type(dest, len, tagged) } else { None };
        let parks = !peer.waiting_hs.is_empty() || (dc && !self.cfg.legacy && !peer.known());
        let runt = if longread.is_some() { self.take_runt(dest, len) } else { 0 };
        let longread = if runt > 0 { Core::runtread_type(tagged) } else { longread };
        let ptype = longread.unwrap_or(self.rtm_types[proto][usize::from(tagged)]);
        let via = match (longread, proto) {
            (Some(_), _) => Via::LongRead { mr: None, runt },
            // Over a device that gathers in place, a long-CTS RTM carries no
            // data (as after a READ_NACK, spec §4.7; receivers take RTMs with
            // any amount): every byte then goes by CTSDATA, copied once.
            (None, 2) => Via::LongCts { window_end: 0, nodata: self.caps.gather_in_place, nacked: false },
            (None, _) => Via::Req,
        };
        let mut out = Out::new(Some(ptype), via);
        // A long-read send ends with the receiver's EOR; delivery complete
        // (the DC type once the peer's features are known) with its RECEIPT.
        out.awaits = if longread.is_some() { Some(Awaits::Eor) } else { dc.then_some(Awaits::Receipt) };
        let msg = Msg { tagged, tag: opts.tag.unwrap_or(0), msg_id: 0, cq_data: opts.cq_data, dc };
        let op = Op::new(dest, opts.context, buf, len as u64, State::Send { msg, out, backlog: true });
        // `parks`: behind an operation that waits for the peer's HANDSHAKE,
        // or waiting itself: the `msg_id` comes when the wait ends
        // (`withdraw.rs`).
        let counted = match (runt, longread.is_some(), proto) {
            (1.., _, _) => super::Proto::Runtread,
            (0, true, _) => super::Proto::Longread,
            (_, _, 0) => super::Proto::Eager,
            (_, _, 1) => super::Proto::Medium,
            _ => super::Proto::Longcts,
        };
        let key = match self.new_op(op) {
            Ok(k) => {
                // Eager messages count by their RTMs (`Traffic::ops`).
                if counted == super::Proto::Eager {
                    self.traffic.bytes[counted as usize] += len as u64;
                } else {
                    self.traffic.op(counted, len as u64);
                }
                k
            }
            Err(s) => {
                self.give_back_runt(dest, runt);
                return Err(s);
            }
        };
        if let Some(p) = self.peers.get_mut(dest) {
            p.tx_bytes += len as u64;
        }
        if dc {
            self.time_request(key); // see timeout.rs
        }
        if parks {
            self.park(dest, key);
            if dc {
                self.trigger_handshake(dest);
            }
        } else {
            self.assign_msg_id(key);
            if dc {
                self.start_or_wait_handshake(dest, key);
            } else {
                self.enqueue(key);
            }
        }
        Ok(longread.map(|_| key))
    }

    /// Posts a receive, matching the oldest acceptable unexpected message
    /// first. The common case — nothing unexpected waiting — is decided
    /// inline, with or without a source filter.
    ///
    /// `Ok(true)`: an unexpected message took it, which may have queued
    /// packets (a CTS, reads) to flush; `Ok(false)`: it only joined the
    /// posted receives, and there is nothing new to send.
    #[inline(always)]
    pub(crate) fn post_recv(&mut self, buf: UserBuf, opts: RecvOpts) -> Result<bool, Status> {
        self.recvs_posted = true;
        // A deferred message may go into it, or into the room it frees.
        self.may_take_deferred();
        if let Some(src) = opts.src {
            self.live_peer(src)?;
        }
        if !self.unexpected[q(opts.tag.is_some())].is_empty() {
            return self.post_recv_matching(buf, opts).map(|()| true);
        }
        self.queue_posted(buf, opts).map(|()| false)
    }

    /// Looks for the oldest unexpected message that a receive with `opts`'
    /// source and tag filter would take; see [`super::Endpoint::probe`].
    pub(crate) fn probe(&mut self, opts: RecvOpts, mode: ProbeMode) -> Result<Option<Probed>, Status> {
        if let Some(src) = opts.src {
            self.live_peer(src)?;
        }
        let tagged = opts.tag.is_some();
        let pos = self.unexpected[q(tagged)].iter().position(|u| match u {
            Unexpected::Op(k) => self.ops.get(*k).is_some_and(|u| takes(opts.src, opts.tag, u.peer, u.tag())),
            Unexpected::Eager(m) => takes(opts.src, opts.tag, m.peer, m.tag),
        });
        let Some(pos) = pos else { return Ok(None) };
        if mode == ProbeMode::Claim && self.claimed.contains_key(&opts.context) {
            return Err(Status::Inval); // the context holds a claimed message already
        }
        let (peer, tag, len, cq_data) = match &self.unexpected[q(tagged)][pos] {
            Unexpected::Op(k) => match self.ops.get(*k) {
                Some(o) => (o.peer, o.tag(), o.len, o.msg().and_then(|m| m.cq_data)),
                None => return Ok(None),
            },
            Unexpected::Eager(m) => (m.peer, m.tag, m.data.len() as u64, m.cq_data),
        };
        let mut found = Probed { src: self.src_of(peer), tagged, tag, len, cq_data, claim: 0 };
        if mode == ProbeMode::Peek {
            return Ok(Some(found));
        }
        let Some(u) = self.unexpected[q(tagged)].remove(pos) else { return Ok(None) };
        if mode == ProbeMode::Discard {
            self.discard_unexpected(u, tagged);
            return Ok(Some(found));
        }
        found.claim = opts.context;
        self.claimed.insert(opts.context, (u, tagged));
        Ok(Some(found))
    }

    /// Receives the message a probe claimed; see [`super::Endpoint::recv_claimed`].
    /// (A claimed message whose sender is lost leaves `claimed` then.)
    pub(crate) fn recv_claimed(&mut self, claim: u64, buf: UserBuf, context: u64) -> Result<(), Status> {
        let (u, tagged) = self.claimed.remove(&claim).ok_or(Status::NoEnt)?;
        // The message's own tag: it matches by construction.
        let tag = match &u {
            Unexpected::Op(k) => self.ops.get(*k).map_or(0, |o| o.tag()),
            Unexpected::Eager(m) => m.tag,
        };
        let opts = RecvOpts { tag: tagged.then_some((tag, 0)), src: None, context };
        self.take_unexpected(u, tagged, buf, opts)
    }

    /// Drops an unexpected message out of its queue: what is here is freed,
    /// what is still to come is received into nothing, no completion.
    fn discard_unexpected(&mut self, u: Unexpected, tagged: bool) {
        match u {
            Unexpected::Eager(m) => {
                self.unexpected_bytes -= m.data.len().min(self.unexpected_bytes);
                self.recycle_bounce(m.data);
            }
            Unexpected::Op(k) => {
                self.discarding.insert(k, ());
                let _ = self.take_unexpected(u, tagged, UserBuf::empty(), RecvOpts::default());
            }
        }
    }

    /// Takes back the posted receive with `context` that no message has
    /// begun to fill (the oldest, when several have it) and queues its
    /// completion with `Canceled`. `NoEnt` when there is none: it matched
    /// already, completed, or never was.
    pub(crate) fn cancel_recv(&mut self, context: u64) -> Result<(), Status> {
        for tagged in [false, true] {
            let pos = self.posted[q(tagged)].iter().position(|p| p.context == context);
            if let Some(p) = pos.and_then(|pos| self.posted[q(tagged)].remove(pos)) {
                self.recv_canceled(&p, tagged);
                return Ok(());
            }
        }
        Err(Status::NoEnt)
    }

    /// Cancels every posted receive that accepts only `peer` (its address
    /// was removed: no message can match it any more).
    pub(crate) fn cancel_recvs_from(&mut self, peer: u32) {
        for tagged in [false, true] {
            loop {
                let pos = self.posted[q(tagged)].iter().position(|p| p.src == Some(peer));
                let Some(p) = pos.and_then(|pos| self.posted[q(tagged)].remove(pos)) else { break };
                self.recv_canceled(&p, tagged);
            }
        }
    }

    /// The completion of a posted receive that was canceled.
    fn recv_canceled(&mut self, p: &Posted, tagged: bool) {
        let flags = CqFlags::RECV | if tagged { CqFlags::TAGGED } else { CqFlags::MSG };
        let mut e = Cqe::new(p.context, flags, 0, Status::Canceled);
        e.buf = p.buf.addr();
        self.cq.push_back(e);
    }

    /// Queues a receive that no unexpected message takes.
    #[inline(always)]
    fn queue_posted(&mut self, buf: UserBuf, opts: RecvOpts) -> Result<(), Status> {
        if self.outstanding() >= self.cfg.max_ops {
            return Err(Status::Again);
        }
        let (tag, ignore) = opts.tag.unwrap_or((0, 0));
        self.posted[q(opts.tag.is_some())].push_back(Posted { buf, context: opts.context, tag, ignore, src: opts.src });
        Ok(())
    }

    /// [`Self::post_recv`] with unexpected messages to look through (the
    /// source filter already checked).
    #[inline(never)]
    fn post_recv_matching(&mut self, buf: UserBuf, opts: RecvOpts) -> Result<(), Status> {
        let tagged = opts.tag.is_some();
        let found = if self.unexpected[q(tagged)].is_empty() {
            None
        } else {
            self.unexpected[q(tagged)].iter().position(|u| match u {
                Unexpected::Op(k) => self.ops.get(*k).is_some_and(|u| takes(opts.src, opts.tag, u.peer, u.tag())),
                Unexpected::Eager(m) => takes(opts.src, opts.tag, m.peer, m.tag),
            })
        };
        let Some(pos) = found else { return self.queue_posted(buf, opts) };
        let queue = &mut self.unexpected[q(tagged)];
        let taken = if pos == 0 { pop_front_hot(queue) } else { queue.remove(pos) };
        match taken {
            Some(u) => self.take_unexpected(u, tagged, buf, opts),
            None => Ok(()),
        }
    }

    /// Receives unexpected message `taken` (out of its queue) into `buf`.
    fn take_unexpected(&mut self, taken: Unexpected, tagged: bool, buf: UserBuf, opts: RecvOpts) -> Result<(), Status> {
        let key = match taken {
            Unexpected::Op(key) => key,
            Unexpected::Eager(m) => {
                self.took_unexpected = true;
                // The whole message is here: complete at once.
                let n = m.data.len().min(buf.len());
                buf.write_at(0, &m.data[..n]);
                self.unexpected_bytes -= m.data.len().min(self.unexpected_bytes);
                let done = RecvDone { tagged, len: m.data.len() as u64, buf, tag: m.tag, cq_data: m.cq_data };
                self.cq.push_back(done.entry(opts.context, self.src_of(m.peer)));
                self.recycle_bounce(m.data);
                return Ok(());
            }
        };
        let Some(u) = self.ops.get_mut(key) else {
            return Ok(());
        };
        // The unexpected entry becomes the receive: same key, so later
        // segments and CTSDATA keep finding it.
        let State::Unexpected { msg, via, bounce } = &mut u.state else {
            return Ok(());
        };
        let (msg, via, bounce) = (*msg, *via, std::mem::take(bounce));
        u.state = State::Recv { msg, via };
        u.buf = buf;
        u.context = opts.context;
        let n = bounce.len().min(buf.len());
        buf.write_at(0, &bounce[..n]);
        self.unexpected_bytes -= bounce.len().min(self.unexpected_bytes);
        let peer = u.peer;
        self.recycle_bounce(bounce);
        match via {
            RxVia::Eager if !msg.dc => {
                // All of it was in the bounce buffer: nothing else to release.
                self.complete_eager_recv(key, peer);
                return Ok(());
            }
            RxVia::Eager | RxVia::Medium => {}
            RxVia::LongCts(_) => self.grant(key),
            RxVia::LongRead { runt: 0 } => {
                if self.lr_iovs.contains_key(&key) {
                    self.enqueue(key); // the reads start now
                }
            }
            RxVia::LongRead { .. } => {
                self.runt_progress(key); // the reads start once the runt is in
                return Ok(());
            }
        }
        self.check_done(key);
        Ok(())
    }

    /// The first REQ of a message, in `msg_id` order.
    pub(crate) fn handle_rtm(&mut self, peer: u32, r: &wire::Req<'_>, info: ReqInfo) {
        let msg_length = match info.proto {
            Subprotocol::Eager => r.data.len() as u64,
            Subprotocol::Medium | Subprotocol::Longcts => r.fields.msg_length,
            Subprotocol::Longread if Core::read_iov_ok(r) => r.fields.msg_length,
            Subprotocol::Runtread if self.mine(peer) & wire::extra::RUNT != 0 && Core::runt_ok(r) => {
                r.fields.msg_length
            }
            // A malformed long-read or runting RTM (or runting this
            // endpoint did not offer); the rest are not RTM protocols, or
            // runting CTS, which the reference implementation defines only.
            Subprotocol::Longread
            | Subprotocol::Runtread
            | Subprotocol::Runtcts
            | Subprotocol::ShortRead
            | Subprotocol::LongctsRead
            | Subprotocol::WriteAtomic
            | Subprotocol::FetchAtomic
            | Subprotocol::CompareAtomic => {
                self.stats.protocol_errors += 1;
                return;
            }
        };
        if info.proto == Subprotocol::Longcts && r.data.len() as u64 > msg_length {
            self.stats.protocol_errors += 1;
            return;
        }
        let offset = match info.proto {
            Subprotocol::Medium | Subprotocol::Runtread => r.fields.seg_offset,
            _ => 0,
        };
        let qi = q(info.tagged);
        let tag = r.fields.tag;
        let msg = Msg { tagged: info.tagged, tag, msg_id: r.fields.msg_id, cq_data: r.cq_data, dc: info.dc };
        let via = match info.proto {
            Subprotocol::Eager => RxVia::Eager,
            Subprotocol::Medium => RxVia::Medium,
            Subprotocol::Longcts => RxVia::LongCts(Grant { credits: r.fields.credit_request, end: 0 }),
            Subprotocol::Runtread => RxVia::LongRead { runt: r.fields.runt_length },
            _ => RxVia::LongRead { runt: 0 },
        };
        let found = self.posted[qi].iter().position(|r| accepts(r, info.tagged, peer, tag));
        // The receive needs an entry now (its place under `max_ops` was
        // taken when it was posted).
        let matched = found
            .and_then(|pos| self.posted[qi].remove(pos))
            .map(|r| self.ops.insert(r.into_op(info.tagged, peer, msg_length, msg, via)));
        let key = match matched {
            Some(Some(key)) => key,
            Some(None) => {
                self.stats.protocol_errors += 1;
                return;
            }
            None => {
                // Unexpected: buffer what arrived (medium: room for the
                // whole message). Fresh packets that did not fit were
                // deferred before (`Core::rtm_fits`); one from the reorder
                // buffer is taken whatever its size (it is held already).
                let cap = match info.proto {
                    Subprotocol::Medium => msg_length,
                    Subprotocol::Runtread => r.fields.runt_length,
                    _ => r.data.len() as u64,
                };
                // Only REQs that passed that check reach the reorder
                // buffer: this refuses none a peer sent in good faith.
                let bound = self.cfg.unexpected_limit.max(self.cfg.medium_max).max(self.caps.mtu);
                let Some(cap) = usize::try_from(cap).ok().filter(|&c| c <= bound) else {
                    self.stats.protocol_errors += 1;
                    return;
                };
                let mut bounce = self.rx_pool.pop().unwrap_or_default();
                bounce.clear();
                bounce.resize(cap, 0);
                let op = Op::new(peer, 0, UserBuf::empty(), msg_length, State::Unexpected { msg, via, bounce });
                // Fresh packets were checked against `max_ops` before
                // (`Core::rtm_fits`); one from the reorder buffer is held
                // already, and takes its entry even past the limit.
                let Some(key) = self.ops.insert(op) else {
                    self.stats.protocol_errors += 1;
                    return;
                };
                self.unexpected_bytes += cap;
                self.unexpected[qi].push_back(Unexpected::Op(key));
                key
            }
        };
        let Some(op) = self.ops.get_mut(key) else {
            return;
        };
        op.remote_id = r.fields.send_id;
        // The message's first data: it cannot overlap anything.
        op.place(offset, r.data);
        let recv = matches!(op.state, State::Recv { .. });
        let incomplete = op.received < op.len;
        if info.proto == Subprotocol::Longread {
            self.lr_iovs.insert(key, r.read_iov.to_vec());
            if recv {
                self.enqueue(key);
            }
            return;
        }
        if info.proto == Subprotocol::Runtread {
            // The reads go from the runt's end on, once the runt is in.
            op.sent = r.fields.runt_length;
            self.lr_iovs.insert(key, r.read_iov.to_vec());
            self.medium_rx.insert((peer, r.fields.msg_id), key);
            return self.runt_progress(key);
        }
        if info.proto == Subprotocol::Medium && incomplete {
            self.medium_rx.insert((peer, r.fields.msg_id), key);
        }
        if recv {
            if info.proto == Subprotocol::Longcts {
                self.grant(key);
            }
            self.check_done(key);
        }
    }

    /// A later segment of a medium message.
    pub(crate) fn handle_medium_segment(&mut self, peer: u32, r: &wire::Req<'_>) {
        let Some(&key) = self.medium_rx.get(&(peer, r.fields.msg_id)) else {
            self.stats.protocol_errors += 1;
            return;
        };
        let Some(op) = self.ops.get_mut(key) else {
            return;
        };
        let off = r.fields.seg_offset;
        if off + r.data.len() as u64 > op.len {
            self.stats.protocol_errors += 1;
            return;
        }
        if !op.place(off, r.data) {
            self.stats.protocol_errors += 1;
            return;
        }
        if matches!(op.rx_via(), Some(RxVia::LongRead { runt: 1.. })) {
            // A runting read's later packet: within the runt.
            return self.runt_progress(key);
        }
        if op.received >= op.len {
            self.medium_rx.remove(&(peer, r.fields.msg_id));
        }
        self.check_done(key);
    }
}
