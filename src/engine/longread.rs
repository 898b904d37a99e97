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
//!
//! As libfabric's EFA provider behaves on the wire (issue 42; the
//! functions of `prov/efa/src/rdm/` that show it):
//! - After a READ_NACK of a runting read, the long-CTS data go on from the
//!   end of the runt, which the receiver keeps (`efa_rdm_pke_init_longcts_msgrtm`).
//! - A READ_NACK of a LONGREAD_RTW: the writer writes again by a new
//!   (DC_)LONGCTS_RTW, with data and without the READ_NACK flag
//!   (`efa_rdm_pke_handle_read_nack_recv`, 2.0 on); rdm4 does the same,
//!   and as the target nacks such a write to a writer with READ_NACK.
//! - READ_NACK and PEER_ERROR go to a peer only once its HANDSHAKE says it
//!   takes them (libfabric's releases before those types treat an unknown
//!   type as an error); a failed read waits for the sender's HANDSHAKE.
//! - A sender with neither (libfabric 1.14–1.19) waits for an EOR only:
//!   libfabric's own receiver sends it nothing after a failed read and the
//!   send waits for ever. rdm4 reads the bytes by emulated reads instead
//!   (SHORT/LONGCTS_RTR on the `read_iov`, which libfabric serves from its
//!   domain's registrations), then sends the EOR. It never sends an EOR for
//!   bytes it does not have: should those reads fail too, the receive fails
//!   and the sender is told nothing it could take for a delivery.
//!   Long-read send buffers are in the registration table for as long as
//!   the send lasts, so rdm4 serves such reads of its own sends.

use super::op::{Awaits, Grant, RxVia, State, Via};
use super::{Core, Proto, Status};
use crate::device::{Access, DevError, Device};
use crate::wire::{self, IdsHdr, Packet, PacketType, ReqFamily, RmaIov, Subprotocol};

impl Core {
    /// The long-read RTM type for a send of `len` bytes to `peer`, if the
    /// protocol applies.
    pub(crate) fn longread_type(&self, peer: u32, len: usize, tagged: bool) -> Option<PacketType> {
        let p = self.peers.get(peer)?;
        let usable = self.both(p, wire::extra::RDMA_READ)
            && len >= self.cfg.longread_min.max(p.path.longread_min).max(1)
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
                // A receiver whose read fails may read by emulated reads
                // instead (`Core::read_failed`): the key serves those too.
                let buf = op.buf;
                self.mrs.insert(k, super::Mr { buf, access: Access::REMOTE_READ, busy: 0 });
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
        let target = op.len.min(op.room());
        let max = self.peers.get(op.peer).map_or(0, |p| p.path.max_rdma_size).max(1);
        let wr = u64::from(key) + 1;
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
                // Within one local region (a write may name several).
                let Some(local) = op.span(pos, n as usize).filter(|l| !l.is_empty()) else {
                    failed = true;
                    break 'iovs;
                };
                let n = local.len() as u64;
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
        let target = op.len.min(op.room());
        if op.inflight > 0 || op.sent < target || !self.lr_iovs.contains_key(&key) {
            return;
        }
        op.received = op.len;
        let (peer, send_id) = (op.peer, op.remote_id);
        let eor = self.ids_hdr(send_id, key);
        self.lr_iovs.remove(&key);
        self.queue_ctrl(peer, &Packet::Eor(eor));
        self.check_done(key);
    }

    /// Receiver (of a long-read or runting message, or the target of a
    /// long-read write): a read failed. What goes back depends on what the
    /// sender understands, so it waits for the sender's HANDSHAKE when that
    /// has not arrived (it overtook the RTM): a READ_NACK or PEER_ERROR to a
    /// peer that does not know the type is fatal in libfabric's older
    /// releases. Then:
    /// - both sides have READ_NACK: READ_NACK (spec §4.7). A message comes
    ///   again by long-CTS into the same receive; a write comes again as a
    ///   new (DC_)LONGCTS_RTW, so the target's entry ends here silently;
    /// - else the bytes are read by emulated reads (SHORT/LONGCTS_RTR on
    ///   the sender's `read_iov`, which every v4 peer serves, registered
    ///   as its buffer is for the RDMA read): a baseline sender waits for
    ///   an EOR and would otherwise wait for ever; its EOR when they are
    ///   in. Should those fail too, PEER_ERROR where the sender takes it.
    fn read_failed(&mut self, key: u32) {
        let Some(iovs) = self.lr_iovs.remove(&key) else {
            return; // handled already (several reads failed)
        };
        let Some(op) = self.ops.get(key) else { return };
        let peer = op.peer;
        if !self.peers.get(peer).is_some_and(|p| p.known()) {
            self.after_hs.push((peer, super::AfterHs::FailedRead { key, iovs }));
            self.trigger_handshake(peer);
            return;
        }
        self.answer_failed_read(key, iovs);
    }

    /// [`Self::read_failed`] once the sender's features are known.
    pub(crate) fn answer_failed_read(&mut self, key: u32, iovs: Vec<RmaIov>) {
        let Some(op) = self.ops.get(key) else { return };
        let (peer, send_id) = (op.peer, op.remote_id);
        let nackable = self.peers.get(peer).is_some_and(|p| self.both(p, wire::extra::READ_NACK));
        if !nackable {
            crate::log::log!(crate::log::INFO, "a read from peer {peer} failed: emulated reads");
            self.read_emulated(key, &iovs);
            return;
        }
        let nack = self.ids_hdr(send_id, key);
        let Some(op) = self.ops.get_mut(key) else { return };
        match &mut op.state {
            State::ServeWrite { .. } => {
                crate::log::log!(crate::log::INFO, "a long-read write of peer {peer} failed to read: READ_NACK");
                self.queue_ctrl(peer, &Packet::ReadNack(nack));
                self.drop_served_write(key);
            }
            State::Recv { msg, via } => {
                // A runting read's runt is in: the sender goes on from its
                // end (libfabric's `efa_rdm_pke_init_longcts_msgrtm`).
                let runt = match *via {
                    RxVia::LongRead { runt } => runt,
                    _ => 0,
                };
                *via = RxVia::LongCts(Grant::default());
                let msg_id = msg.msg_id;
                op.sent = 0;
                op.received = runt;
                self.nacked.insert((peer, msg_id), key);
                crate::log::log!(
                    crate::log::INFO,
                    "a read of message {msg_id} from peer {peer} failed: READ_NACK, long-CTS"
                );
                self.queue_ctrl(peer, &Packet::ReadNack(nack));
            }
            _ => {}
        }
    }

    /// Ends served write `key` without a word to its requester (it was
    /// answered otherwise): its registration released.
    fn drop_served_write(&mut self, key: u32) {
        let keys = self.ops.remove_with(key, |op| match &mut op.state {
            State::ServeWrite { keys, .. } => std::mem::take(keys),
            _ => Box::default(),
        });
        self.mr_release(&keys.unwrap_or_default());
    }

    /// Receiver `key`: reads by emulated reads what its RDMA reads were to
    /// read (from the runt's end, at most its buffer's length), one read
    /// per `read_iov` entry; each counts in its `inflight`.
    fn read_emulated(&mut self, key: u32, iovs: &[RmaIov]) {
        let Some(op) = self.ops.get(key) else { return };
        let start = match op.state {
            State::Recv { via: RxVia::LongRead { runt }, .. } => runt,
            _ => 0,
        };
        let (peer, target) = (op.peer, op.len.min(op.room()));
        let mut reads = Vec::new();
        let mut at = 0u64;
        for v in iovs {
            let (mut lo, hi) = (at.max(start), at.saturating_add(v.len()).min(target));
            // One read per piece within a local region.
            while lo < hi {
                let Some(local) = op.span(lo, (hi - lo) as usize).filter(|l| !l.is_empty()) else { break };
                let n = local.len() as u64;
                reads.push((local, RmaIov::new(v.addr() + (lo - at), n, v.key())));
                lo += n;
            }
            at = at.saturating_add(v.len());
        }
        let mut posted = 0;
        let mut failed = false;
        for (local, rma) in reads {
            match self.post_emulated_read(peer, local, rma, key) {
                Ok(()) => posted += 1,
                Err(_) => failed = true,
            }
        }
        if let Some(op) = self.ops.get_mut(key) {
            op.inflight += posted;
            op.sent = target;
            if failed && op.status == Status::Success {
                op.status = Status::RemoteAccess;
            }
        }
        self.emulated_read_done(key, None);
    }

    /// Receiver `key`: one of its emulated reads ended with `status`
    /// (`None`: none ended, look whether all are done).
    pub(crate) fn emulated_read_done(&mut self, key: u32, status: Option<Status>) {
        let Some(op) = self.ops.get_mut(key) else { return };
        if let Some(s) = status {
            op.inflight = op.inflight.saturating_sub(1);
            if s != Status::Success && op.status == Status::Success {
                op.status = s;
            }
        }
        if op.inflight > 0 {
            return;
        }
        let (peer, send_id, status) = (op.peer, op.remote_id, op.status);
        if op.closing {
            return self.complete(key, status);
        }
        if status != Status::Success {
            crate::log::log!(crate::log::INFO, "emulated reads from peer {peer} failed too: PEER_ERROR");
            self.send_peer_error(peer, send_id, status);
            return self.complete(key, status);
        }
        op.received = op.len;
        let eor = self.ids_hdr(send_id, key);
        self.queue_ctrl(peer, &Packet::Eor(eor));
        self.check_done(key);
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
        // A DC_LONGCTS RTM: the sender (which may have asked no delivery
        // complete of its long-read RTM) now waits for a RECEIPT.
        if let (State::Recv { msg, .. }, Some(info)) = (&mut op.state, r.ptype.req_info()) {
            msg.dc |= info.dc;
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
        let dc = self.peers.get(peer).is_some_and(|p| self.both(p, wire::extra::DELIVERY_COMPLETE));
        // The long-CTS type, whether its REQ answers the nack, and what it waits for.
        let (longcts, nacked, awaits, proto) = match self.ops.get(key).filter(|op| op.peer == peer).map(|op| &op.state)
        {
            Some(State::Send { msg, out, .. }) if Self::reads_pending(out) => {
                (self.rtm_types[2][usize::from(msg.tagged)], true, None, Proto::Longcts)
            }
            // A long-read write: again as a new long-CTS write, as libfabric
            // does (its DC type where both sides offer delivery complete, as
            // `choose_rma_protocol` would have chosen), an ordinary request
            // any target serves.
            Some(State::Write { out, .. }) if Self::reads_pending(out) => {
                let t = if dc { PacketType::DcLongctsRtw } else { PacketType::LongctsRtw };
                (t, false, dc.then_some(Awaits::Receipt), Proto::WriteLongcts)
            }
            _ => {
                self.stats.protocol_errors += 1;
                return;
            }
        };
        crate::log::log!(crate::log::INFO, "peer {peer} could not read: long-CTS");
        // A runting read's runt is with the receiver: the CTSDATA go on from
        // its end, as libfabric's receivers expect.
        let runt = match self.ops.get(key).and_then(|op| op.out()).map(|o| o.via) {
            Some(Via::LongRead { runt, .. }) => runt,
            _ => 0,
        };
        self.release_runt(key);
        let Some(op) = self.ops.get_mut(key) else { return };
        op.sent = runt;
        let len = op.len;
        let Some(out) = op.out_mut() else { return };
        let mr = match out.via {
            Via::LongRead { mr, .. } => mr,
            _ => None,
        };
        out.ptype = Some(longcts);
        // A message's RTM after a nack carries no data (spec §4.7).
        out.via = Via::LongCts { window_end: 0, nodata: nacked, nacked };
        out.awaits = awaits;
        out.started = false;
        if let Some(mr) = mr {
            self.drop_longread_mr(mr);
        }
        self.traffic.op(proto, len);
        self.enqueue(key);
    }

    /// A long-read sender or writer whose REQ is out and whose peer reads.
    fn reads_pending(out: &super::op::Out) -> bool {
        matches!(out.via, Via::LongRead { mr: Some(_), .. }) && out.awaits == Some(Awaits::Eor)
    }

    /// The header of an EOR or READ_NACK from receiver `recv_id` to the
    /// sender's operation `send_id`.
    fn ids_hdr(&self, send_id: u32, recv_id: u32) -> IdsHdr {
        IdsHdr { flags: 0, send_id, recv_id, connid: self.my_connid(), padding: 0 }
    }

    /// The long-read registration `mr` of a send or write that ended (or
    /// goes on by long-CTS): no emulated read is served from it any more;
    /// the device's registration goes at the next flush.
    pub(crate) fn drop_longread_mr(&mut self, mr: u64) {
        self.mrs.remove(&mr);
        self.dereg.push(mr);
    }

    /// Drops the registrations of finished long-read sends.
    pub(crate) fn release_registrations<D: Device>(&mut self, dev: &mut D) {
        for mr in self.dereg.drain(..) {
            let _ = dev.dereg(mr);
        }
    }
}
