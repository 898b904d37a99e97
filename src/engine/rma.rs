//! Emulated one-sided operations (spec §3.3): eager and long-CTS write
//! (their DC variants towards peers that offer delivery complete, §4.2),
//! short and long-CTS read; requester and responder sides, RECEIPT and
//! PEER_ERROR answers.

use super::op::{Op, OpKind};
use super::peer::Peer;
use super::{Addr, Core, Proto, RemoteBuf};
use crate::device::{Access, InCall};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::{self, Packet, PacketType, ReqFamily, ReqInfo, RmaIov, Subprotocol};

impl Core {
    /// Queues a write; it waits for the peer's HANDSHAKE when that decides
    /// between the baseline and the DC protocol.
    pub(crate) fn post_write(
        &mut self,
        dest: Addr,
        buf: UserBuf,
        remote: RemoteBuf,
        cq_data: Option<u64>,
        context: u64,
    ) -> Result<(), Status> {
        self.reachable_peer(dest)?;
        remote.check(buf.len())?;
        let mut op = Op::new(OpKind::Write, dest, context, buf);
        op.rma = RmaIov::new(remote.addr, buf.len() as u64, remote.key);
        op.len = buf.len() as u64;
        op.cq_data = cq_data;
        let key = self.new_op(op)?;
        self.time_request(key);
        self.start_or_wait_handshake(dest, key);
        Ok(())
    }

    /// Queues `key` now if the peer's features are known, else parks it
    /// until the peer's HANDSHAKE (which it asks for).
    pub(crate) fn start_or_wait_handshake(&mut self, dest: Addr, key: u32) {
        let known =
            self.cfg.legacy || self.peers.get(dest).is_some_and(|p| p.known()) || self.direct_without_handshake(key);
        if known {
            self.choose_rma_protocol(key);
            self.enqueue(key);
        } else {
            self.park(dest, key);
            self.trigger_handshake(dest);
        }
    }

    /// A read or write that goes direct whatever the peer's HANDSHAKE
    /// says: the device reaches every peer's memory ([`InCall::any_peer`]).
    fn direct_without_handshake(&self, key: u32) -> bool {
        let Some(op) = self.ops.get(key) else { return false };
        self.any_peer && self.peers.get(op.peer).is_some_and(|p| self.direct_ok(p, op.kind, op.len, op.cq_data))
    }

    /// Whether a read or write (`kind`) of `len` bytes (with `cq_data`) to
    /// `peer` goes by the device's RDMA (spec §4.1, §4.6): both sides offer
    /// it — or the device reaches every peer's memory
    /// ([`InCall::any_peer`]) and the peer's HANDSHAKE has not said
    /// otherwise yet —, it fits one RDMA, and CQ data, if any, fits the
    /// immediate data of RDMA write with immediate data.
    pub(crate) fn direct_ok(&self, peer: &Peer, kind: OpKind, len: u64, cq_data: Option<u64>) -> bool {
        let bit = match kind {
            OpKind::Read => wire::extra::RDMA_READ,
            OpKind::Write => wire::extra::RDMA_WRITE,
            _ => return false,
        };
        let offered = self.my_extra() & bit != 0 && (peer.has(bit) || (self.any_peer && !peer.known()));
        let imm_ok = cq_data.is_none_or(|d| self.caps.rdma_write_imm && d <= u64::from(u32::MAX));
        offered && len <= self.caps.max_rdma_size && imm_ok
    }

    /// Parks `key` until `dest`'s HANDSHAKE.
    pub(crate) fn park(&mut self, dest: Addr, key: u32) {
        if let Some(p) = self.peers.get_mut(dest) {
            p.waiting_hs.push_back(key);
        }
    }

    /// Picks the REQ type of a write or atomic once the peer's features are known.
    pub(crate) fn choose_rma_protocol(&mut self, key: u32) {
        let Some(op) = self.ops.get(key) else { return };
        if op.kind == OpKind::Send {
            return self.choose_dc_send(key);
        }
        let peer = self.peers.get(op.peer);
        let has = |bit| peer.is_some_and(|p| self.both(p, bit));
        let dc = has(wire::extra::DELIVERY_COMPLETE);
        // Direct read / write: the device moves the bytes and the target
        // does nothing. A write with CQ data goes by RDMA write with
        // immediate data (the target's device reports it, and the target
        // writes the completion); else emulated: the target must see a
        // packet to write its completion.
        let direct = peer.is_some_and(|p| self.direct_ok(p, op.kind, op.len, op.cq_data));
        // Emulated long-read write (spec §4.1): the target reads the bytes
        // from the requester's buffer in one RDMA read, for writes that would
        // go by long-CTS, when both sides read. It has no DC type and needs
        // none: the target sends its EOR once the bytes are in its memory.
        let longread = op.kind == OpKind::Write
            && has(wire::extra::RDMA_READ)
            && op.len as usize >= self.cfg.longread_min.max(self.caps.longread_min).max(1)
            && op.len as usize > self.req_data_cap(PacketType::EagerRtw, 1);
        let ptype = match op.kind {
            _ if direct => None,
            OpKind::Write if longread => Some(PacketType::LongreadRtw),
            OpKind::Write => {
                let eager = if dc { PacketType::DcEagerRtw } else { PacketType::EagerRtw };
                let proto = if op.len as usize <= self.req_data_cap(eager, 1) {
                    Subprotocol::Eager
                } else {
                    Subprotocol::Longcts
                };
                PacketType::req_type(ReqFamily::Rtw, proto, false, dc)
            }
            OpKind::Atomic => match op.ptype {
                Some(PacketType::WriteRta) if dc => Some(PacketType::DcWriteRta),
                other => other,
            },
            _ => op.ptype,
        };
        let awaiting = match op.kind {
            _ if direct => false,
            OpKind::Read => true,
            // It ends with the target's EOR.
            OpKind::Write if longread => true,
            OpKind::Atomic => dc || ptype != Some(PacketType::WriteRta),
            _ => dc,
        };
        let counted = match (op.kind, ptype) {
            (OpKind::Write, _) if direct => Some(Proto::WriteDirect),
            (OpKind::Read, _) if direct => Some(Proto::ReadDirect),
            (_, Some(PacketType::LongreadRtw)) => Some(Proto::WriteLongread),
            (_, Some(PacketType::EagerRtw | PacketType::DcEagerRtw)) => Some(Proto::WriteEager),
            (_, Some(PacketType::LongctsRtw | PacketType::DcLongctsRtw)) => Some(Proto::WriteLongcts),
            (_, Some(PacketType::ShortRtr)) => Some(Proto::ReadShort),
            (_, Some(PacketType::LongctsRtr)) => Some(Proto::ReadLongcts),
            _ => None, // atomics count at their post
        };
        let len = op.len;
        if let Some(p) = counted {
            self.traffic.op(p, len);
        }
        if let Some(op) = self.ops.get_mut(key) {
            op.ptype = ptype;
            op.awaiting = awaiting;
            op.direct = direct;
        }
    }

    /// A write (`write`) or read done at once by the device
    /// (`InCall::rdma_now`: shm copies in the call), its completion queued
    /// without an operation entry; `None` when the device does not do it
    /// (the caller posts it the usual way: the device's asynchronous RDMA,
    /// which shm sends through the ring of a target that is polling for
    /// small operations on memory it does not map, `ringrma.rs`). Like the
    /// device's other direct RMA it is not ordered with operations still
    /// under way.
    pub(crate) fn rma_now<D: super::Device>(
        &mut self,
        dev: &mut D,
        dest: Addr,
        buf: UserBuf,
        remote: RemoteBuf,
        write: bool,
        context: u64,
    ) -> Option<Result<(), Status>> {
        let in_call = dev.as_in_call()?;
        let ah = self.direct_ah(dest, write, buf.len()).ok()?;
        if let Err(e) = remote.check(buf.len()) {
            return Some(Err(e));
        }
        let status = match in_call.rdma_now(ah, buf, remote.addr, remote.key, write) {
            Ok(()) => Status::Success,
            Err(crate::device::DevError::Failed(Status::NotSup) | crate::device::DevError::Again) => return None,
            Err(crate::device::DevError::Failed(s)) => s,
        };
        let (flags, proto) = if write {
            (super::CqFlags::RMA | super::CqFlags::WRITE, Proto::WriteDirect)
        } else {
            (super::CqFlags::RMA | super::CqFlags::READ, Proto::ReadDirect)
        };
        self.done_in_call(context, flags, buf.len() as u64, status, proto);
        Some(Ok(()))
    }

    /// The device address of `dest` for a direct read or write (`write`) of
    /// `len` bytes without CQ data: the same choice as
    /// `choose_rma_protocol` (a legacy peer gets the emulated protocol).
    /// `NotSup` when it does not go direct; the errors of `reachable_peer`.
    pub(crate) fn direct_ah(&self, dest: Addr, write: bool, len: usize) -> Result<crate::device::Ah, Status> {
        let p = self.reachable_peer(dest)?;
        let kind = if write { OpKind::Write } else { OpKind::Read };
        if !self.direct_ok(p, kind, len as u64, None) {
            return Err(Status::NotSup);
        }
        p.ah.ok_or(Status::NoAddr)
    }

    /// The completion of an operation the device did in the call
    /// (`rma_now`, `atomic_direct`): queued at once, counted under `proto`.
    pub(crate) fn done_in_call(&mut self, context: u64, flags: super::CqFlags, len: u64, status: Status, proto: Proto) {
        let mut e = super::Cqe::new(context, flags, len, status);
        if status == Status::RemoteAccess {
            // The device checked the target's registration: the detail the
            // target's own answer carries (as `handle_events` does).
            e.detail = status.code().unsigned_abs();
        }
        self.cq.push_back(e);
        self.traffic.op(proto, len);
    }

    /// Queues a read.
    pub(crate) fn post_read(
        &mut self,
        dest: Addr,
        buf: UserBuf,
        remote: RemoteBuf,
        context: u64,
    ) -> Result<(), Status> {
        self.reachable_peer(dest)?;
        remote.check(buf.len())?;
        let mut op = Op::new(OpKind::Read, dest, context, buf);
        op.rma = RmaIov::new(remote.addr, buf.len() as u64, remote.key);
        op.len = buf.len() as u64;
        let short = buf.len() <= self.caps.mtu - wire::ReadRsp::HDR_LEN;
        op.ptype = Some(if short { PacketType::ShortRtr } else { PacketType::LongctsRtr });
        op.window_end = if short { op.len } else { self.first_read_window(&op) };
        op.credits = self.cfg.credit_request;
        op.awaiting = true;
        let key = self.new_op(op)?;
        self.time_request(key);
        if self.caps.rdma_read {
            // Direct read if the peer offers RDMA read: that needs its HANDSHAKE.
            self.start_or_wait_handshake(dest, key);
        } else {
            self.traffic.op(if short { Proto::ReadShort } else { Proto::ReadLongcts }, buf.len() as u64);
            self.enqueue(key);
        }
        Ok(())
    }

    /// The REQ of a write or read, or the READRSP of a read responder
    /// (their CTSDATA go by `Core::pump`'s gather path).
    pub(crate) fn rma_next_packet(&self, key: u32, op: &Op, peer: &Peer, out: &mut [u8]) -> Option<(usize, u64)> {
        if op.started {
            return None;
        }
        if op.kind == OpKind::ReadResponder {
            let chunk = op.window_end.min((self.caps.mtu - wire::ReadRsp::HDR_LEN) as u64) as usize;
            return op.buf.with_slice(|s| {
                let r = wire::ReadRsp {
                    flags: 0,
                    connid: self.my_connid(),
                    padding: 0,
                    recv_id: op.remote_id,
                    send_id: key,
                    data: s.get(..chunk)?,
                };
                r.emit(out).ok().map(|n| (n, chunk as u64))
            });
        }
        let ptype = op.ptype?;
        let (raw_addr, connid) = self.req_opts(peer);
        let iov = [op.rma];
        let mut r = wire::Req::new(ptype);
        r.raw_addr = raw_addr;
        r.connid = connid;
        r.cq_data = op.cq_data;
        r.rma_iov = &iov;
        r.fields.msg_length = op.len;
        r.fields.send_id = key;
        r.fields.recv_id = key;
        r.fields.credit_request = self.cfg.credit_request;
        if op.kind == OpKind::Read {
            r.fields.recv_length = if ptype == PacketType::ShortRtr { op.len as u32 } else { op.window_end as u32 };
            // The request is all a read sends: count its whole length as sent.
            return r.emit(out).ok().map(|n| (n, op.len));
        }
        if ptype == PacketType::LongreadRtw {
            // The target reads the whole buffer: no data beside it.
            let read = [RmaIov::new(op.buf.addr(), op.len, op.lr_mr?)];
            r.read_iov = &read;
            return r.emit(out).ok().map(|n| (n, op.len));
        }
        let room = self.caps.mtu.saturating_sub(r.hdr_len() + r.opt_hdr_len()) as u64;
        let chunk = op.len.min(room) as usize;
        op.buf.with_slice(|s| wire::Req { data: &s[..chunk], ..r }.emit(out).ok().map(|n| (n, chunk as u64)))
    }

    /// An RTW: apply an eager write, or start receiving a long one.
    pub(crate) fn handle_rtw(&mut self, peer: u32, r: &wire::Req<'_>, info: ReqInfo) {
        // The id to answer with: DC types and the other protocols carry the
        // requester's send_id (a baseline eager write has nothing to answer).
        let answer_id = (info.dc || info.proto != Subprotocol::Eager).then_some(r.fields.send_id);
        let total = match info.proto {
            Subprotocol::Eager => r.data.len() as u64,
            Subprotocol::Longcts => r.fields.msg_length,
            Subprotocol::Longread if self.my_extra() & wire::extra::RDMA_READ != 0 && Core::read_iov_ok(r) => {
                r.fields.msg_length
            }
            _ => {
                // A write protocol this endpoint does not serve: say so.
                self.stats.protocol_errors += 1;
                if let Some(id) = answer_id {
                    self.send_peer_error(peer, id, Status::NotSup);
                }
                return;
            }
        };
        if r.rma_iov.is_empty() && total == 0 {
            return; // a handshake trigger
        }
        let bufs = match self.mr_check_all(r.rma_iov, Access::REMOTE_WRITE, total) {
            Ok(b) => b,
            Err(s) => {
                if let Some(id) = answer_id {
                    self.send_peer_error(peer, id, s);
                }
                return;
            }
        };
        if info.proto == Subprotocol::Eager {
            let mut at = 0;
            for b in &bufs {
                b.write_at(0, &r.data[at..at + b.len()]);
                at += b.len();
            }
            if let Some(d) = r.cq_data {
                self.remote_write_cqe(peer, total, d);
            }
            if info.dc {
                self.send_receipt(peer, r.fields.send_id, 0);
            }
            return;
        }
        let ([target], Some(id)) = (bufs.as_slice(), answer_id) else {
            // A long write into several regions: rdm4 writes one region per request.
            if let Some(id) = answer_id {
                self.send_peer_error(peer, id, Status::NotSup);
            }
            return;
        };
        if r.data.len() as u64 > total {
            self.stats.protocol_errors += 1;
            self.send_peer_error(peer, id, Status::Proto);
            return;
        }
        let mut op = Op::new(OpKind::RemoteWrite, peer, 0, *target);
        op.len = total;
        op.remote_id = id;
        op.dc = info.dc;
        op.cq_data = r.cq_data;
        op.credits = r.fields.credit_request;
        op.mr_key = r.rma_iov.first().map(|v| v.key());
        let Ok(key) = self.new_op(op) else {
            self.send_peer_error(peer, id, Status::Again);
            return;
        };
        if let Some(k) = r.rma_iov.first().map(|v| v.key()) {
            self.mr_hold(k);
        }
        if info.proto == Subprotocol::Longread {
            // Served like a long-read receive: the reads, then the EOR.
            self.lr_iovs.insert(key, r.read_iov.to_vec());
            self.enqueue(key);
            return;
        }
        if let Some(op) = self.ops.get_mut(key) {
            op.place(0, r.data);
        }
        self.grant(key);
        self.check_done(key);
    }

    /// An RTR: answer a short read with one READRSP, serve a long one as a sender.
    pub(crate) fn handle_rtr(&mut self, peer: u32, r: &wire::Req<'_>) {
        let id = r.fields.recv_id;
        let total = r.fields.msg_length;
        let bufs = match self.mr_check_all(r.rma_iov, Access::REMOTE_READ, total) {
            Ok(b) => b,
            Err(s) => return self.send_peer_error(peer, id, s),
        };
        if r.ptype == PacketType::ShortRtr {
            if total as usize > self.caps.mtu - wire::ReadRsp::HDR_LEN {
                self.stats.protocol_errors += 1;
                return self.send_peer_error(peer, id, Status::Proto);
            }
            let mut data = vec![0u8; total as usize];
            let mut at = 0;
            for b in &bufs {
                b.read_at(0, &mut data[at..at + b.len()]);
                at += b.len();
            }
            let rsp =
                wire::ReadRsp { flags: 0, connid: self.my_connid(), padding: 0, recv_id: id, send_id: 0, data: &data };
            self.queue_ctrl(peer, &Packet::ReadRsp(rsp));
            return;
        }
        let [source] = bufs.as_slice() else {
            return self.send_peer_error(peer, id, Status::NotSup);
        };
        if r.fields.recv_length == 0 {
            self.stats.protocol_errors += 1;
            return self.send_peer_error(peer, id, Status::Proto);
        }
        let mut op = Op::new(OpKind::ReadResponder, peer, 0, *source);
        op.len = total;
        op.remote_id = id;
        op.window_end = u64::from(r.fields.recv_length).min(total);
        op.mr_key = r.rma_iov.first().map(|v| v.key());
        let Ok(key) = self.new_op(op) else {
            return self.send_peer_error(peer, id, Status::Again);
        };
        if let Some(k) = r.rma_iov.first().map(|v| v.key()) {
            self.mr_hold(k);
        }
        self.enqueue(key);
    }

    /// A RECEIPT: the DC write (or atomic) was applied.
    pub(crate) fn handle_receipt(&mut self, peer: u32, r: &wire::Receipt) {
        match self.ops.get_mut(r.send_id) {
            Some(op)
                if op.peer == peer
                    && op.awaiting
                    && (matches!(op.kind, OpKind::Write | OpKind::Atomic) || (op.kind == OpKind::Send && op.dc)) =>
            {
                op.awaiting = false;
                self.check_done(r.send_id);
            }
            _ => self.stats.protocol_errors += 1,
        }
    }

    /// A delivery-complete send once the peer's features are known: its
    /// DC_* RTM type, or `NotSup` when the peer lacks the feature (never
    /// a weaker guarantee).
    fn choose_dc_send(&mut self, key: u32) {
        let Some(op) = self.ops.get(key) else { return };
        let dc = self.peers.get(op.peer).is_some_and(|p| self.both(p, wire::extra::DELIVERY_COMPLETE));
        let info = op.ptype.and_then(|t| t.req_info());
        let dc_type = info.and_then(|i| PacketType::req_type(ReqFamily::Rtm, i.proto, i.tagged, true));
        match dc_type {
            Some(t) if dc => {
                if let Some(op) = self.ops.get_mut(key) {
                    op.ptype = Some(t);
                }
            }
            _ => {
                let peer = op.peer;
                crate::log::log!(
                    crate::log::INFO,
                    "peer {peer} has no delivery complete: a DC send fails (RDM4_ENOTSUP)"
                );
                self.complete(key, Status::NotSup)
            }
        }
    }

    /// A PEER_ERROR naming one of our operations: it fails with the status.
    pub(crate) fn handle_peer_error(&mut self, peer: u32, e: &wire::PeerError, bytes: &[u8]) {
        if e.ref_kind != wire::peer_error_ref::OPE_INDEX {
            return self.handle_msg_error(peer, e, bytes);
        }
        let ours = self.ops.get(e.op_id).is_some_and(|op| {
            op.peer == peer && matches!(op.kind, OpKind::Send | OpKind::Write | OpKind::Read | OpKind::Atomic)
        });
        if !ours {
            self.stats.protocol_errors += 1;
            return;
        }
        let status = peer_status(e.prov_errno);
        if let Some(op) = self.ops.get_mut(e.op_id) {
            op.detail = e.prov_errno;
        }
        self.complete(e.op_id, status);
    }
}

/// The status a peer's PEER_ERROR reports with `prov_errno` (an rdm4
/// peer's negated status code; `Remote` for a number rdm4 does not know).
pub(crate) fn peer_status(prov_errno: u32) -> Status {
    let code = i32::try_from(prov_errno).map_or(i32::MIN, |c| -c);
    Status::from_code(code).filter(|s| *s != Status::Success).unwrap_or(Status::Remote)
}

impl<D: super::Device> super::Endpoint<D> {
    /// Writes `buf` to `remote` on `dest`; `cq_data` also gives the target a completion.
    pub fn write(
        &mut self,
        dest: Addr,
        buf: UserBuf,
        remote: RemoteBuf,
        cq_data: Option<u64>,
        context: u64,
    ) -> Result<(), Status> {
        if self.core.any_peer && cq_data.is_none() {
            if let Some(r) = self.core.rma_now(&mut self.dev, dest, buf, remote, true, context) {
                return r;
            }
        }
        self.core.post_write(dest, buf, remote, cq_data, context)?;
        self.core.flush(&mut self.dev);
        Ok(())
    }

    /// Reads `buf.len()` bytes from `remote` on `dest` into `buf`.
    pub fn read(&mut self, dest: Addr, buf: UserBuf, remote: RemoteBuf, context: u64) -> Result<(), Status> {
        if self.core.any_peer {
            if let Some(r) = self.core.rma_now(&mut self.dev, dest, buf, remote, false, context) {
                return r;
            }
        }
        self.core.post_read(dest, buf, remote, context)?;
        self.core.flush(&mut self.dev);
        Ok(())
    }

    /// An atomic on `remote`: `operand` holds the operands (whole elements of
    /// `datatype`); `compare` the compare values (compare ops only); `result`
    /// receives the old values (fetch and compare ops; empty for none).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        dest: Addr,
        datatype: u32,
        op: u32,
        operand: UserBuf,
        compare: UserBuf,
        result: UserBuf,
        remote: RemoteBuf,
        context: u64,
    ) -> Result<(), Status> {
        let a = crate::device::RemoteAtomic { datatype, op, operand, compare, result };
        if self.core.any_peer {
            if let Some(r) = self.core.atomic_direct(&mut self.dev, dest, a, remote, context) {
                return r;
            }
        }
        self.core.post_atomic(dest, a, remote, context)?;
        self.core.flush(&mut self.dev);
        Ok(())
    }
}
