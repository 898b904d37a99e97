//! The long-read message subprotocol (spec §4.1) and its nack fallback
//! (spec §4.7): a large message moves in one RDMA read by the receiver,
//! straight from the send buffer into the receive buffer.
//!
//! - Sender: chosen for messages of at least `Config::longread_min` bytes
//!   (and the device's `Caps::longread_min`) to
//!   a peer whose HANDSHAKE offers RDMA read, when the device can read too.
//!   The send buffer is registered with the device for remote read for the
//!   life of the send; the LONGREAD_RTM carries its `read_iov` and no data.
//!   The send completes on the receiver's EOR.
//! - Receiver: once the RTM matches a receive (at once, or later from the
//!   unexpected queue — it holds no data meanwhile), the reads are issued
//!   into the receive buffer (at most its length: a shorter buffer completes
//!   with a truncation error, like the other protocols). When they are done
//!   the receive completes and the EOR goes out.
//! - Nack: when a read fails (the device refuses, the key is stale, the
//!   peer's memory is gone), the receiver sends READ_NACK and waits; the
//!   sender answers with a LONGCTS_RTM without data (same `msg_id`), and the
//!   message moves by long-CTS into the same receive. A sender that cannot
//!   register its buffer uses long-CTS from the start.

use super::op::{Awaits, Grant, RxVia, State, Via};
use super::{Core, Proto, Status};
use crate::device::{Access, DevError, Device};
use crate::wire::{self, IdsHdr, Packet, PacketType, ReqFamily, Subprotocol};

impl Core {
    /// The long-read RTM type for a send of `len` bytes to `peer`, if the
    /// protocol applies.
    pub(crate) fn longread_type(&self, peer: u32, len: usize, tagged: bool) -> Option<PacketType> {
        let p = self.peers.get(peer)?;
        let usable = self.both(p, wire::extra::RDMA_READ)
            && len >= self.cfg.longread_min.max(self.caps.longread_min).max(1)
            && len as u64 <= u64::from(u32::MAX);
        usable.then(|| PacketType::req_type(ReqFamily::Rtm, Subprotocol::Longread, tagged, false)).flatten()
    }

    /// Registers the buffer of long-read send (or write) `key` for remote
    /// read; on failure it falls back to long-CTS.
    pub(crate) fn register_longread<D: Device>(&mut self, dev: &mut D, key: u32) {
        let Some(op) = self.ops.get(key) else { return };
        let reg = dev.reg(op.buf, Access::REMOTE_READ);
        let (fallback, proto) = match &op.state {
            State::Write { .. } => (PacketType::LongctsRtw, Proto::WriteLongcts),
            State::Send { msg, .. } => (self.rtm_types[2][usize::from(msg.tagged)], Proto::Longcts),
            _ => return,
        };
        let Some(op) = self.ops.get_mut(key) else { return };
        let len = op.len;
        let Some(out) = op.out_mut() else { return };
        match reg {
            Ok(k) => {
                if let Via::LongRead { mr, .. } = &mut out.via {
                    *mr = Some(k);
                }
            }
            Err(_) => {
                crate::log::log!(crate::log::INFO, "a buffer could not be registered for long-read: long-CTS");
                self.release_runt(key);
                let Some(out) = self.ops.get_mut(key).and_then(|op| op.out_mut()) else { return };
                out.ptype = Some(fallback);
                out.via = Via::LongCts { window_end: 0, nodata: false, nacked: false };
                out.awaits = None;
                self.traffic.op(proto, len);
            }
        }
    }

    /// A received LONGREAD_RTM's `read_iov` is usable: not empty, its
    /// lengths adding up to the message, no data beside it.
    pub(crate) fn read_iov_ok(r: &wire::Req<'_>) -> bool {
        let total = r.read_iov.iter().try_fold(0u64, |acc, v| acc.checked_add(v.len()));
        !r.read_iov.is_empty() && total == Some(r.fields.msg_length) && r.data.is_empty()
    }

    /// Receiver: issues the reads of long-read receive `key` (from where it
    /// stopped last time). False when the device pushed back.
    pub(crate) fn pump_longread<D: Device>(&mut self, dev: &mut D, key: u32) -> bool {
        let Some(op) = self.ops.get(key) else { return true };
        let Some(iovs) = self.lr_iovs.get(&key) else { return true };
        let Some(ah) = self.peers.get(op.peer).filter(|p| !p.lost).and_then(|p| p.ah) else {
            self.complete(key, Status::PeerUnreachable);
            return true;
        };
        let target = op.len.min(op.buf.len() as u64);
        let max = self.caps.max_rdma_size.max(1);
        let (buf, wr) = (op.buf, u64::from(key) + 1);
        let mut sent = op.sent;
        let mut issued = 0u32;
        let mut failed = false;
        let mut pushed_back = false;
        let mut at = 0u64;
        'iovs: for v in iovs {
            let mut off = 0u64;
            while off < v.len() && at + off < target {
                let pos = at + off;
                if pos < sent {
                    // Read already (or, for a runting read, the runt).
                    off += (sent - pos).min(v.len() - off);
                    continue;
                }
                let n = (v.len() - off).min(target - pos).min(max);
                let Some(local) = buf.slice(pos as usize, n as usize) else {
                    failed = true;
                    break 'iovs;
                };
                match dev.rdma_read(ah, local, v.addr() + off, v.key(), wr) {
                    Ok(()) => {
                        issued += 1;
                        sent = pos + n;
                    }
                    Err(DevError::Again) => {
                        pushed_back = true;
                        break 'iovs;
                    }
                    Err(DevError::Failed(_)) => {
                        failed = true;
                        break 'iovs;
                    }
                }
                off += n;
            }
            at += v.len();
        }
        if let Some(op) = self.ops.get_mut(key) {
            op.sent = sent;
            op.inflight += issued;
            op.queued = pushed_back;
        }
        if failed {
            self.read_failed(key);
        } else if !pushed_back {
            self.longread_progress(key);
        }
        !pushed_back
    }

    /// Receiver: a read of long-read receive `key` completed.
    pub(crate) fn longread_read_done(&mut self, key: u32, ok: bool) {
        let Some(op) = self.ops.get_mut(key) else { return };
        op.inflight = op.inflight.saturating_sub(1);
        if !ok {
            self.read_failed(key);
        } else {
            self.longread_progress(key);
        }
    }

    /// Receiver: when every read is done, the EOR and the completion.
    fn longread_progress(&mut self, key: u32) {
        let Some(op) = self.ops.get_mut(key) else { return };
        let target = op.len.min(op.buf.len() as u64);
        if op.inflight > 0 || op.sent < target || !self.lr_iovs.contains_key(&key) {
            return;
        }
        op.received = op.len;
        let (peer, send_id) = (op.peer, op.remote_id);
        let eor = IdsHdr { flags: 0, send_id, recv_id: key, connid: self.my_connid(), padding: 0 };
        self.lr_iovs.remove(&key);
        self.queue_ctrl(peer, &Packet::Eor(eor));
        self.check_done(key);
    }

    /// Receiver: a read failed: READ_NACK, then wait for the sender's
    /// LONGCTS_RTM (spec §4.7) — when the sender advertised READ_NACK.
    /// A sender without it would not understand the nack: the receive
    /// fails (`RemoteAccess`), and so does the send, by PEER_ERROR where
    /// the sender takes it (else by its request timeout). A sender whose
    /// HANDSHAKE has not arrived yet (it overtook the RTM) is nacked: only
    /// a sender of protocol v4 with read support sends long-read, and the
    /// reference implementation nacks since 1.20.
    fn read_failed(&mut self, key: u32) {
        if self.lr_iovs.remove(&key).is_none() {
            return; // already nacked (several reads failed)
        }
        if let Some(op) = self.ops.get(key).filter(|op| matches!(op.state, State::ServeWrite { .. })) {
            // A long-read write: the requester's write fails (no nack: it
            // has no long-CTS fallback of the same write on the wire).
            let (peer, id) = (op.peer, op.remote_id);
            crate::log::log!(crate::log::INFO, "a long-read write of peer {peer} failed to read: PEER_ERROR");
            self.send_peer_error(peer, id, Status::RemoteAccess);
            self.complete(key, Status::RemoteAccess);
            return;
        }
        let peer = self.ops.get(key).and_then(|op| self.peers.get(op.peer));
        let nackable = peer.is_some_and(|p| {
            self.my_extra() & wire::extra::READ_NACK != 0 && (!p.known() || p.has(wire::extra::READ_NACK))
        });
        if !nackable {
            let Some(op) = self.ops.get(key) else { return };
            let (peer, send_id) = (op.peer, op.remote_id);
            self.send_peer_error(peer, send_id, Status::RemoteAccess);
            self.complete(key, Status::RemoteAccess);
            return;
        }
        let connid = self.my_connid();
        let Some(op) = self.ops.get_mut(key) else { return };
        let nack = IdsHdr { flags: 0, send_id: op.remote_id, recv_id: key, connid, padding: 0 };
        let State::Recv { msg, via } = &mut op.state else { return };
        *via = RxVia::LongCts(Grant::default());
        let msg_id = msg.msg_id;
        op.sent = 0;
        op.received = 0;
        let peer = op.peer;
        self.nacked.insert((peer, msg_id), key);
        crate::log::log!(crate::log::INFO, "a read of message {msg_id} from peer {peer} failed: READ_NACK, long-CTS");
        self.queue_ctrl(peer, &Packet::ReadNack(nack));
    }

    /// Receiver: the LONGCTS_RTM that answers our READ_NACK; the message
    /// goes on by long-CTS into the same receive.
    pub(crate) fn handle_nacked_longcts(&mut self, peer: u32, r: &wire::Req<'_>) {
        let Some(key) = self.nacked.remove(&(peer, r.fields.msg_id)) else {
            self.stats.protocol_errors += 1;
            return;
        };
        let Some(op) = self.ops.get_mut(key) else { return };
        if r.fields.msg_length != op.len || !r.data.is_empty() {
            self.stats.protocol_errors += 1;
            self.complete(key, Status::Proto);
            return;
        }
        op.remote_id = r.fields.send_id;
        if let Some(g) = op.grant_mut() {
            g.credits = r.fields.credit_request;
        }
        self.grant(key);
    }

    /// Sender: the EOR of long-read send (or long-read write) `send_id`.
    pub(crate) fn handle_eor(&mut self, peer: u32, e: &IdsHdr) {
        let out = self.ops.get_mut(e.send_id).filter(|op| op.peer == peer).and_then(|op| match &mut op.state {
            State::Send { out, .. } | State::Write { out, .. } => Some(out),
            _ => None,
        });
        match out {
            Some(out) if matches!(out.via, Via::LongRead { mr: Some(_), .. }) && out.awaits == Some(Awaits::Eor) => {
                out.awaits = None;
                self.check_done(e.send_id);
            }
            _ => self.stats.protocol_errors += 1,
        }
    }

    /// Sender: the receiver could not read; send again by long-CTS, the
    /// LONGCTS_RTM without data.
    pub(crate) fn handle_read_nack(&mut self, peer: u32, e: &IdsHdr) {
        let key = e.send_id;
        let longcts = match self.ops.get(key).filter(|op| op.peer == peer).map(|op| &op.state) {
            Some(State::Send { msg, out, .. })
                if matches!(out.via, Via::LongRead { mr: Some(_), .. }) && out.awaits == Some(Awaits::Eor) =>
            {
                self.rtm_types[2][usize::from(msg.tagged)]
            }
            _ => {
                self.stats.protocol_errors += 1;
                return;
            }
        };
        crate::log::log!(crate::log::INFO, "peer {peer} could not read a message: it goes by long-CTS");
        self.release_runt(key);
        let Some(op) = self.ops.get_mut(key) else { return };
        op.sent = 0;
        let len = op.len;
        let Some(out) = op.out_mut() else { return };
        if let Via::LongRead { mr: Some(mr), .. } = out.via {
            self.dereg.push(mr);
        }
        out.ptype = Some(longcts);
        out.via = Via::LongCts { window_end: 0, nodata: true, nacked: true };
        out.awaits = None;
        out.started = false;
        self.traffic.op(Proto::Longcts, len);
        self.enqueue(key);
    }

    /// Drops the registrations of finished long-read sends.
    pub(crate) fn release_registrations<D: Device>(&mut self, dev: &mut D) {
        for mr in self.dereg.drain(..) {
            let _ = dev.dereg(mr);
        }
    }
}
