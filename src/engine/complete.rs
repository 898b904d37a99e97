//! Completions: when an operation is done, its completion entry, and what
//! ending it sends (RECEIPT, PEER_ERROR) or releases (registrations, the
//! medium-segment and long-read state).

use super::op::{self, Ended, RxVia, State};
use super::{Addr, Core, CqFlags, Cqe, ADDR_UNSPEC};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire;

/// What a receive's completion entry says beyond its context and status.
pub(crate) struct RecvDone {
    pub tagged: bool,
    pub len: u64,
    pub buf: UserBuf,
    pub tag: u64,
    pub cq_data: Option<u64>,
}

/// The flags of a send's completion entry.
pub(crate) fn send_flags(tagged: bool) -> CqFlags {
    CqFlags::SEND | if tagged { CqFlags::TAGGED } else { CqFlags::MSG }
}

impl RecvDone {
    /// The completion entry of a successful receive with `context`, from `src`.
    pub(crate) fn entry(&self, context: u64, src: Addr) -> Cqe {
        let mut e = Cqe::new(context, CqFlags::empty(), 0, Status::Success);
        self.fill(&mut e, src);
        e
    }

    /// Fills the receive part of `e`; a message longer than the buffer
    /// turns a success into a truncation that reports both lengths.
    pub(crate) fn fill(&self, e: &mut Cqe, src: Addr) {
        e.flags = CqFlags::RECV | if self.tagged { CqFlags::TAGGED } else { CqFlags::MSG };
        e.len = self.len.min(self.buf.len() as u64);
        e.buf = self.buf.addr();
        e.tag = self.tag;
        e.src = src;
        if let Some(d) = self.cq_data {
            e.flags |= CqFlags::REMOTE_CQ_DATA;
            e.data = d;
        }
        if e.status == Status::Success && self.len > self.buf.len() as u64 {
            e.status = Status::Trunc;
            e.olen = self.len;
        }
    }
}

impl Core {
    /// Completes an operation whose transfer may be finished.
    pub(crate) fn check_done(&mut self, key: u32) {
        let Some(op) = self.ops.get(key) else { return };
        let done = match &op.state {
            State::Send { out, .. }
            | State::Write { out, .. }
            | State::Atomic { out, .. }
            | State::ServeRead { out, .. } => {
                out.started && op.sent >= op.len && op.inflight == 0 && out.awaits.is_none()
            }
            State::Recv { .. } | State::ServeWrite { .. } => op.received >= op.len,
            State::Read { out, .. } => out.started && op.inflight == 0 && out.awaits.is_none() && op.received >= op.len,
            State::Unexpected { .. } => false,
        };
        if done {
            self.complete(key, Status::Success);
        }
    }

    /// Completes receive `key` that an eager packet from `src` filled at
    /// once (`dispatch::eager_fast`): such a receive holds nothing else to
    /// release (no registration, no medium or long-read state, no receipt),
    /// so its entry is built straight from the operation.
    pub(crate) fn complete_eager_recv(&mut self, key: u32, src: u32) {
        let src = self.src_of(src);
        let e = self.ops.remove_with(key, |op| {
            let m = op.msg().copied().unwrap_or_default();
            RecvDone { tagged: m.tagged, len: op.len, buf: op.buf, tag: m.tag, cq_data: m.cq_data }
                .entry(op.context, src)
        });
        if !self.discarding.is_empty() && self.discarding.remove(&key).is_some() {
            return; // a probe discarded the message
        }
        if let Some(e) = e {
            self.cq.push_back(e);
        }
    }

    /// Ends operation `key` with `status`: its completion entry (if the
    /// application owns it), RECEIPT for DC, registrations released.
    pub(crate) fn complete(&mut self, key: u32, status: Status) {
        if let Some(op) = self.ops.get_mut(key).filter(|op| op.inflight > 0) {
            // The device may still read (or write) the buffer: the entry
            // completes on the last `SendDone` (see `handle_events`).
            if op.status == Status::Success {
                op.status = status;
            }
            op.closing = true;
            if let Some(out) = op.out_mut() {
                out.awaits = None;
            }
            return;
        }
        // Copy what the completion needs and drop the entry in place.
        let Some(op) = self.ops.remove_with(key, |op| op::Finished::from(op)) else {
            return;
        };
        if !self.lr_iovs.is_empty() {
            self.lr_iovs.remove(&key);
        }
        if !self.nacked.is_empty() {
            self.nacked.retain(|_, k| *k != key);
        }
        // What the end releases.
        match &op.what {
            &Ended::Send { runt, mr, .. } => {
                self.give_back_runt(op.peer, runt);
                if let Some(mr) = mr {
                    self.drop_longread_mr(mr);
                }
            }
            &Ended::Write { mr: Some(mr) } => self.drop_longread_mr(mr),
            Ended::Write { mr: None } => {}
            Ended::ServeWrite { keys, .. } | Ended::ServeRead { keys } => self.mr_release(keys),
            &Ended::Recv { msg, via, unexpected } => {
                if let Some(bounce_len) = unexpected {
                    self.unexpected_bytes -= bounce_len.min(self.unexpected_bytes);
                    self.may_take_deferred();
                }
                if via == RxVia::Medium && self.medium_rx.get(&(op.peer, msg.msg_id)) == Some(&key) {
                    self.medium_rx.remove(&(op.peer, msg.msg_id));
                }
                if status != Status::Success {
                    // Failed before a receive took it.
                    for q in &mut self.unexpected {
                        q.retain(|u| !matches!(u, op::Unexpected::Op(k) if *k == key));
                    }
                    if !self.claimed.is_empty() {
                        self.claimed.retain(|_, (u, _)| !matches!(u, op::Unexpected::Op(k) if *k == key));
                    }
                }
            }
            Ended::Read { .. } | Ended::Atomic { .. } => {}
        }
        // A message a probe discarded: everything but the completion.
        let discarded = !self.discarding.is_empty() && self.discarding.remove(&key).is_some();
        let status = if op.status != Status::Success { op.status } else { status };
        let src = self.src_of(op.peer);
        let mut e = Cqe { detail: op.detail, ..Cqe::new(op.context, CqFlags::empty(), 0, status) };
        match op.what {
            Ended::Send { msg, .. } => {
                e.flags = send_flags(msg.tagged);
                e.len = op.len;
            }
            Ended::Recv { unexpected: Some(_), .. } => return,
            Ended::Recv { msg, .. } => {
                let done =
                    RecvDone { tagged: msg.tagged, len: op.len, buf: op.buf, tag: msg.tag, cq_data: msg.cq_data };
                done.fill(&mut e, src);
                if msg.dc && status == Status::Success {
                    self.send_receipt(op.peer, op.remote_id, msg.msg_id);
                } else if msg.dc && status != Status::PeerUnreachable {
                    // Its sender waits for a RECEIPT: the error instead.
                    self.send_peer_error(op.peer, op.remote_id, status);
                }
            }
            Ended::ServeWrite { cq_data, dc, .. } => {
                if dc && status == Status::Success {
                    self.send_receipt(op.peer, op.remote_id, 0);
                } else if status != Status::Success && dc {
                    self.send_peer_error(op.peer, op.remote_id, status);
                }
                if let (Some(d), Status::Success) = (cq_data, status) {
                    self.remote_write_cqe(op.peer, op.len, d);
                }
                return;
            }
            Ended::Write { .. } => {
                e.flags = CqFlags::RMA | CqFlags::WRITE;
                e.len = op.len;
            }
            Ended::Read { into: Some(k) } => return self.emulated_read_done(k, Some(status)),
            Ended::Read { into: None } => {
                e.flags = CqFlags::RMA | CqFlags::READ;
                e.len = op.len;
            }
            Ended::Atomic { fetches } => {
                e.flags = CqFlags::ATOMIC | CqFlags::WRITE;
                if fetches {
                    e.flags |= CqFlags::READ;
                }
                e.len = op.len;
            }
            Ended::ServeRead { .. } => return,
        }
        if !discarded {
            self.cq.push_back(e);
        }
    }

    /// The target-side completion of a write that carried CQ data.
    pub(crate) fn remote_write_cqe(&mut self, peer: u32, len: u64, data: u64) {
        let flags = CqFlags::RMA | CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA;
        self.cq.push_back(Cqe { data, src: self.src_of(peer), ..Cqe::new(0, flags, len, Status::Success) });
    }

    /// What a completion names as the source `peer`: its handle, also for
    /// a sender the application never inserted (learnt from its raw
    /// address header: the handle `av_insert` of its address returns), or
    /// `ADDR_UNSPEC` when there is no such peer.
    pub(crate) fn src_of(&self, peer: u32) -> Addr {
        if self.peers.get(peer).is_some() {
            peer
        } else {
            ADDR_UNSPEC
        }
    }

    pub(crate) fn send_receipt(&mut self, peer: u32, send_id: u32, msg_id: u32) {
        let r = wire::Receipt { flags: 0, send_id, msg_id, connid: self.my_connid(), padding: 0 };
        self.queue_ctrl(peer, &wire::Packet::Receipt(r));
    }

    /// Tells `peer` that its operation `op_id` failed with `status`, where
    /// both sides have PEER_ERROR; before the peer's HANDSHAKE, once it is
    /// in (and asked for).
    pub(crate) fn send_peer_error(&mut self, peer: u32, op_id: u32, status: Status) {
        if self.my_extra() & wire::extra::PEER_ERROR == 0 {
            return;
        }
        let Some(p) = self.peers.get(peer) else { return };
        if !p.known() {
            // Bounded: a sender that never shakes hands cannot grow it.
            if self.after_hs.len() >= self.cfg.max_ops {
                self.stats.protocol_errors += 1;
                return;
            }
            self.after_hs.push((peer, super::AfterHs::PeerError { op_id, status }));
            self.trigger_handshake(peer);
            return;
        }
        if !p.has(wire::extra::PEER_ERROR) {
            return;
        }
        let e = wire::PeerError {
            flags: 0,
            op_id,
            ref_kind: wire::peer_error_ref::OPE_INDEX,
            prov_errno: status.code().unsigned_abs(),
            connid: self.my_connid(),
            padding: 0,
        };
        self.queue_ctrl(peer, &wire::Packet::PeerError(e));
    }
}
