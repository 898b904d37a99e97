//! Emulated one-sided operations (spec §3.3): eager and long-CTS write
//! (their DC variants towards peers that offer delivery complete, §4.2),
//! short and long-CTS read; requester and responder sides, RECEIPT and
//! PEER_ERROR answers.

use super::op::RxVia;
use super::op::{Awaits, Grant, Op, Out, State, Via};
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
        let len = buf.len() as u64;
        let rma = RmaIov::new(remote.addr, len, remote.key);
        let op = Op::new(dest, context, buf, len, State::Write { rma, cq_data, out: Out::new(None, Via::Req) });
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
        let (write, cq_data) = match op.state {
            State::Write { cq_data, .. } => (true, cq_data),
            State::Read { .. } => (false, None),
            _ => return false,
        };
        self.any_peer && self.peers.get(op.peer).is_some_and(|p| self.direct_ok(p, write, op.len, cq_data))
    }

    /// Whether a read or write (`write`) of `len` bytes (with `cq_data`) to
    /// `peer` goes by the device's RDMA (spec §4.1, §4.6): both sides offer
    /// it — or the device reaches every peer's memory
    /// ([`InCall::any_peer`]) and the peer's HANDSHAKE has not said
    /// otherwise yet —, it fits one RDMA, and CQ data, if any, fits the
    /// immediate data of RDMA write with immediate data.
    pub(crate) fn direct_ok(&self, peer: &Peer, write: bool, len: u64, cq_data: Option<u64>) -> bool {
        let bit = if write { wire::extra::RDMA_WRITE } else { wire::extra::RDMA_READ };
        let offered = peer.path.mine & bit != 0 && (peer.has(bit) || (self.any_peer && !peer.known()));
        let imm_ok = cq_data.is_none_or(|d| peer.path.rdma_write_imm && d <= u64::from(u32::MAX));
        offered && len <= peer.path.max_rdma_size && imm_ok
    }

    /// Parks `key` until `dest`'s HANDSHAKE.
    pub(crate) fn park(&mut self, dest: Addr, key: u32) {
        if let Some(p) = self.peers.get_mut(dest) {
            p.waiting_hs.push_back(key);
        }
    }

    /// Picks the protocol of a write, read or atomic (or a DC send's
    /// type) once the peer's features are known.
    pub(crate) fn choose_rma_protocol(&mut self, key: u32) {
        let Some(op) = self.ops.get(key) else { return };
        let peer = self.peers.get(op.peer);
        let has = |bit| peer.is_some_and(|p| self.both(p, bit));
        let dc = has(wire::extra::DELIVERY_COMPLETE);
        let len = op.len;
        // Direct read / write: the device moves the bytes and the target
        // does nothing. A write with CQ data goes by RDMA write with
        // immediate data (the target's device reports it, and the target
        // writes the completion); else emulated: the target must see a
        // packet to write its completion.
        let direct = |write, cq_data| peer.is_some_and(|p| self.direct_ok(p, write, len, cq_data));
        let (ptype, via, counted) = match &op.state {
            State::Send { .. } => return self.choose_dc_send(key),
            State::Write { cq_data, .. } if direct(true, *cq_data) => (None, Via::Direct, Some(Proto::WriteDirect)),
            // Emulated long-read write (spec §4.1): the target reads the
            // bytes from the requester's buffer in one RDMA read, for
            // writes that would go by long-CTS, when both sides read. It
            // has no DC type and needs none: the target sends its EOR once
            // the bytes are in its memory.
            State::Write { .. }
                if has(wire::extra::RDMA_READ)
                    && len as usize
                        >= self.cfg.longread_min.max(peer.map_or(usize::MAX, |p| p.path.longread_min)).max(1)
                    && len as usize > self.req_data_cap(op.peer, PacketType::EagerRtw, 1) =>
            {
                let via = Via::LongRead { mr: None, runt: 0 };
                (Some(PacketType::LongreadRtw), via, Some(Proto::WriteLongread))
            }
            State::Write { .. } => {
                let eager = if dc { PacketType::DcEagerRtw } else { PacketType::EagerRtw };
                let (proto, via, counted) = if len as usize <= self.req_data_cap(op.peer, eager, 1) {
                    (Subprotocol::Eager, Via::Req, Proto::WriteEager)
                } else {
                    let via = Via::LongCts { window_end: 0, nodata: false, nacked: false };
                    (Subprotocol::Longcts, via, Proto::WriteLongcts)
                };
                (PacketType::req_type(ReqFamily::Rtw, proto, false, dc), via, Some(counted))
            }
            State::Read { .. } if direct(false, None) => (None, Via::Direct, Some(Proto::ReadDirect)),
            State::Read { out, .. } => {
                let counted =
                    if out.ptype == Some(PacketType::ShortRtr) { Proto::ReadShort } else { Proto::ReadLongcts };
                (out.ptype, Via::Req, Some(counted))
            }
            // Atomics count at their post.
            State::Atomic { out, .. } => match out.ptype {
                Some(PacketType::WriteRta) if dc => (Some(PacketType::DcWriteRta), Via::Req, None),
                other => (other, Via::Req, None),
            },
            State::Recv { .. } | State::Unexpected { .. } | State::ServeWrite { .. } | State::ServeRead { .. } => {
                return
            }
        };
        let awaits = match (&op.state, via) {
            (_, Via::Direct) => None,
            (State::Read { .. }, _) => Some(Awaits::ReadRsp),
            // It ends with the target's EOR.
            (_, Via::LongRead { .. }) => Some(Awaits::Eor),
            (State::Atomic { .. }, _)
                if ptype != Some(PacketType::WriteRta) && ptype != Some(PacketType::DcWriteRta) =>
            {
                Some(Awaits::AtomRsp)
            }
            _ => dc.then_some(Awaits::Receipt),
        };
        if let Some(p) = counted {
            self.traffic.op(p, len);
        }
        if let Some(out) = self.ops.get_mut(key).and_then(|op| op.out_mut()) {
            out.ptype = ptype;
            out.via = via;
            out.awaits = awaits;
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
        if !self.direct_ok(p, write, len as u64, None) {
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
        let rma = RmaIov::new(remote.addr, buf.len() as u64, remote.key);
        let (op, proto) = self.emulated_read(dest, buf, rma, context, None);
        let key = self.new_op(op)?;
        self.time_request(key);
        if self.peers.get(dest).is_some_and(|p| p.path.rdma_read) {
            // Direct read if the peer offers RDMA read: that needs its HANDSHAKE.
            self.start_or_wait_handshake(dest, key);
        } else {
            self.traffic.op(proto, buf.len() as u64);
            self.enqueue(key);
        }
        Ok(())
    }

    /// The entry of an emulated read of `rma` on `peer` into `buf` (SHORT
    /// or LONGCTS_RTR by its length), and what it counts as.
    fn emulated_read(&self, peer: Addr, buf: UserBuf, rma: RmaIov, context: u64, into: Option<u32>) -> (Op, Proto) {
        let len = buf.len() as u64;
        let short = buf.len() <= self.mtu(peer) - wire::ReadRsp::HDR_LEN;
        let (ptype, proto) =
            if short { (PacketType::ShortRtr, Proto::ReadShort) } else { (PacketType::LongctsRtr, Proto::ReadLongcts) };
        let mut out = Out::new(Some(ptype), Via::Req);
        out.awaits = Some(Awaits::ReadRsp);
        let end = if short { len } else { self.first_read_window(peer, len) };
        let grant = Grant { credits: self.cfg.credit_request, end };
        (Op::new(peer, context, buf, len, State::Read { rma, out, grant, into }), proto)
    }

    /// The READRSP of served read `key`: its first window's bytes.
    pub(crate) fn readrsp_packet(&self, key: u32, op: &Op, o: &Out, out: &mut [u8]) -> Option<(usize, u64)> {
        let Via::LongCts { window_end, .. } = o.via else { return None };
        let chunk = window_end.min((self.mtu(op.peer) - wire::ReadRsp::HDR_LEN) as u64) as usize;
        // Within the first region (the CTSDATA carry on from there).
        let first = op.span(0, chunk)?;
        let chunk = first.len();
        first.with_slice(|s| {
            let r = wire::ReadRsp {
                flags: 0,
                connid: self.my_connid(),
                padding: 0,
                recv_id: op.remote_id,
                send_id: key,
                data: s.get(..chunk)?,
            };
            r.emit(out).ok().map(|n| (n, chunk as u64))
        })
    }

    /// An emulated read of `rma` on `peer` into `buf` for long-read
    /// receiver `into` (`Core::read_failed`): SHORT or LONGCTS_RTR
    /// whatever the peer's features (its RDMA read just failed).
    pub(crate) fn post_emulated_read(
        &mut self,
        peer: Addr,
        buf: UserBuf,
        rma: RmaIov,
        into: u32,
    ) -> Result<(), Status> {
        let (op, proto) = self.emulated_read(peer, buf, rma, 0, Some(into));
        // Past `max_ops`: it finishes what the receive holds already.
        let key = self.ops.insert(op).ok_or(Status::Again)?;
        self.time_request(key);
        self.traffic.op(proto, buf.len() as u64);
        self.enqueue(key);
        Ok(())
    }

    /// The REQ of an RMA request `key` on `rma` (`ptype`), without data.
    fn rma_req<'a>(
        &'a self,
        key: u32,
        ptype: PacketType,
        len: u64,
        rma: &'a [RmaIov; 1],
        peer: &'a Peer,
    ) -> wire::Req<'a> {
        let (raw_addr, connid) = self.req_opts(peer);
        let mut r = wire::Req::new(ptype);
        r.raw_addr = raw_addr;
        r.connid = connid;
        r.fields.msg_length = len;
        r.fields.send_id = key;
        r.fields.recv_id = key;
        r.fields.credit_request = self.cfg.credit_request;
        r.rma_iov = rma;
        r
    }

    /// The RTR of read `key`; the request is all a read sends, so it
    /// counts as the whole length.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rtr_packet(
        &self,
        key: u32,
        op: &Op,
        rma: RmaIov,
        o: &Out,
        grant: &Grant,
        peer: &Peer,
        out: &mut [u8],
    ) -> Option<(usize, u64)> {
        let ptype = o.ptype?;
        let iov = [rma];
        let mut r = self.rma_req(key, ptype, op.len, &iov, peer);
        r.fields.recv_length = if ptype == PacketType::ShortRtr { op.len as u32 } else { grant.end as u32 };
        r.emit(out).ok().map(|n| (n, op.len))
    }

    /// The RTW of write `key`: its bytes (eager, long-CTS's first ones),
    /// or, for long-read, the buffer's `read_iov` (the target reads it all).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rtw_packet(
        &self,
        key: u32,
        op: &Op,
        rma: RmaIov,
        cq_data: Option<u64>,
        o: &Out,
        peer: &Peer,
        out: &mut [u8],
    ) -> Option<(usize, u64)> {
        let iov = [rma];
        let mut r = self.rma_req(key, o.ptype?, op.len, &iov, peer);
        r.cq_data = cq_data;
        match o.via {
            Via::LongRead { mr, .. } => {
                let read = [RmaIov::new(op.buf.addr(), op.len, mr?)];
                r.read_iov = &read;
                r.emit(out).ok().map(|n| (n, op.len))
            }
            Via::Req | Via::LongCts { .. } => {
                let room = peer.path.mtu.saturating_sub(r.hdr_len() + r.opt_hdr_len()) as u64;
                let chunk = op.len.min(room) as usize;
                op.buf.with_slice(|s| wire::Req { data: &s[..chunk], ..r }.emit(out).ok().map(|n| (n, chunk as u64)))
            }
            Via::Direct => None,
        }
    }

    /// An RTW: apply an eager write, or start receiving a long one.
    pub(crate) fn handle_rtw(&mut self, peer: u32, r: &wire::Req<'_>, info: ReqInfo) {
        // The id to answer with: DC types and the other protocols carry the
        // requester's send_id (a baseline eager write has nothing to answer).
        let answer_id = (info.dc || info.proto != Subprotocol::Eager).then_some(r.fields.send_id);
        let total = match info.proto {
            Subprotocol::Eager => r.data.len() as u64,
            Subprotocol::Longcts => r.fields.msg_length,
            Subprotocol::Longread if self.mine(peer) & wire::extra::RDMA_READ != 0 && Core::read_iov_ok(r) => {
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
        let (Some(target), Some(id)) = (bufs.first().copied(), answer_id) else {
            if let Some(id) = answer_id {
                self.send_peer_error(peer, id, Status::NotSup);
            }
            return;
        };
        // Several regions (libfabric's `fi_writemsg` with an iov): filled in order.
        let regions = (bufs.len() > 1).then(|| bufs.into_boxed_slice());
        if r.data.len() as u64 > total {
            self.stats.protocol_errors += 1;
            self.send_peer_error(peer, id, Status::Proto);
            return;
        }
        let via = if info.proto == Subprotocol::Longread {
            RxVia::LongRead { runt: 0 }
        } else {
            RxVia::LongCts(Grant { credits: r.fields.credit_request, end: 0 })
        };
        let keys = self.mr_hold(r.rma_iov);
        let state = State::ServeWrite { via, cq_data: r.cq_data, dc: info.dc, keys: keys.clone(), regions };
        let mut op = Op::new(peer, 0, target, total, state);
        op.remote_id = id;
        let Ok(key) = self.new_op(op) else {
            self.mr_release(&keys);
            self.send_peer_error(peer, id, Status::Again);
            return;
        };
        if info.proto == Subprotocol::Longread {
            // Served like a long-read receive: the reads, then the EOR.
            self.lr_iovs.insert(key, r.read_iov.to_vec());
            self.enqueue(key);
            return;
        }
        if let Some(op) = self.ops.get_mut(key) {
            op.place(0, r.data); // the write's first data: nothing to overlap
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
            if total as usize > self.mtu(peer) - wire::ReadRsp::HDR_LEN {
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
        let Some(source) = bufs.first().copied() else {
            return self.send_peer_error(peer, id, Status::NotSup);
        };
        // Several regions (libfabric's `fi_readmsg` with an iov): read in order.
        let regions = (bufs.len() > 1).then(|| bufs.into_boxed_slice());
        if r.fields.recv_length == 0 {
            self.stats.protocol_errors += 1;
            return self.send_peer_error(peer, id, Status::Proto);
        }
        let window_end = u64::from(r.fields.recv_length).min(total);
        let out = Out::new(None, Via::LongCts { window_end, nodata: false, nacked: false });
        let keys = self.mr_hold(r.rma_iov);
        let mut op = Op::new(peer, 0, source, total, State::ServeRead { out, keys: keys.clone(), regions });
        op.remote_id = id;
        let Ok(key) = self.new_op(op) else {
            self.mr_release(&keys);
            return self.send_peer_error(peer, id, Status::Again);
        };
        self.enqueue(key);
    }

    /// A RECEIPT: the DC write (or atomic) was applied.
    pub(crate) fn handle_receipt(&mut self, peer: u32, r: &wire::Receipt) {
        let out = self.ops.get_mut(r.send_id).filter(|op| op.peer == peer).and_then(|op| match &mut op.state {
            State::Send { out, .. } | State::Write { out, .. } | State::Atomic { out, .. } => Some(out),
            _ => None,
        });
        match out {
            Some(out) if out.awaits == Some(Awaits::Receipt) => {
                out.awaits = None;
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
        let info = op.out().and_then(|o| o.ptype).and_then(|t| t.req_info());
        let dc_type = info.and_then(|i| PacketType::req_type(ReqFamily::Rtm, i.proto, i.tagged, true));
        match dc_type {
            Some(t) if dc => {
                if let Some(out) = self.ops.get_mut(key).and_then(|op| op.out_mut()) {
                    out.ptype = Some(t);
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
        let ours = self.ops.get(e.op_id).is_some_and(|op| op.peer == peer && op.is_request());
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
