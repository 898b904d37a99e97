//! Emulated atomics (spec §3.3): WRITE_RTA (DC_WRITE_RTA towards peers that
//! offer delivery complete), FETCH_RTA and COMPARE_RTA with ATOMRSP. RTAs
//! share the `msg_id` sequence of messages, so atomics are applied in the
//! order they were posted.

use super::op::{AtomicReq, Awaits, Op, Out, State, Via};
use super::peer::Peer;
use super::{Addr, Core, RemoteBuf};
use crate::atomic_ops::{self, AtomicClass};
use crate::device::{Access, Mapped, RemoteAtomic};
use crate::status::Status;
use crate::wire::{self, Packet, PacketType, ReqInfo, RmaIov, Subprotocol};

impl Core {
    /// An atomic done at once by the device (`Mapped::atomic`: memory a
    /// same-host peer allocated to be mapped), its
    /// completion queued; `None` when the device does not do it (the
    /// caller posts it emulated). Such an atomic takes no `msg_id`: it is
    /// applied when posted, after this endpoint's earlier ones on such
    /// memory, not ordered with emulated ones still under way.
    pub(crate) fn atomic_direct<D: super::Device>(
        &mut self,
        dev: &mut D,
        dest: Addr,
        a: RemoteAtomic,
        remote: RemoteBuf,
        context: u64,
    ) -> Option<Result<(), Status>> {
        let mapped = dev.as_mapped()?;
        let ah = self.peers.get(dest).filter(|p| p.in_av && !p.lost)?.ah?;
        let len = match self.check_atomic(&a, remote) {
            Ok((_, len)) => len,
            Err(e) => return Some(Err(e)),
        };
        let status = match mapped.atomic(ah, remote.addr, remote.key, &a) {
            Ok(()) => Status::Success,
            Err(crate::device::DevError::Failed(Status::NotSup) | crate::device::DevError::Again) => return None,
            Err(crate::device::DevError::Failed(s)) => s,
        };
        let mut flags = super::CqFlags::ATOMIC | super::CqFlags::WRITE;
        if !a.result.is_empty() {
            flags |= super::CqFlags::READ;
        }
        self.done_in_call(context, flags, len as u64, status, super::Proto::AtomicDirect);
        Some(Ok(()))
    }

    /// Checks an atomic's datatype, operation and buffers, and that it fits
    /// one RTA (whichever way it then goes, the limits are the same);
    /// returns its class and length.
    pub(crate) fn check_atomic(&self, a: &RemoteAtomic, remote: RemoteBuf) -> Result<(AtomicClass, usize), Status> {
        let (op_code, operand, compare, result) = (a.op, a.operand, a.compare, a.result);
        let size = atomic_ops::type_size(a.datatype)?;
        let class = atomic_ops::classify(a.datatype, op_code, !result.is_empty())?;
        let len = if op_code == atomic_ops::op::ATOMIC_READ { result.len() } else { operand.len() };
        let shapes_ok = len > 0
            && len % size == 0
            && match class {
                AtomicClass::Write => result.is_empty(),
                AtomicClass::Fetch => {
                    result.len() == len && (op_code == atomic_ops::op::ATOMIC_READ || operand.len() == len)
                }
                AtomicClass::Compare => result.len() == len && compare.len() == len,
            };
        if !shapes_ok {
            return Err(Status::Inval);
        }
        remote.check(len)?;
        let payload = if class == AtomicClass::Compare { 2 * len } else { len };
        if payload > super::tx::req_room(self.caps.mtu, Self::rta_type(class), 1) {
            return Err(Status::Overflow);
        }
        Ok((class, len))
    }

    /// The RTA of an atomic of `class`.
    fn rta_type(class: AtomicClass) -> PacketType {
        match class {
            AtomicClass::Write => PacketType::WriteRta,
            AtomicClass::Fetch => PacketType::FetchRta,
            AtomicClass::Compare => PacketType::CompareRta,
        }
    }

    /// Validates and queues an atomic.
    pub(crate) fn post_atomic(
        &mut self,
        dest: Addr,
        a: RemoteAtomic,
        remote: RemoteBuf,
        context: u64,
    ) -> Result<(), Status> {
        let peer = self.reachable_peer(dest)?;
        let RemoteAtomic { datatype, op: op_code, operand, compare, result } = a;
        let (class, len) = self.check_atomic(&a, remote)?;
        let ptype = Self::rta_type(class);
        let mut out = Out::new(Some(ptype), Via::Req);
        out.awaits = (class != AtomicClass::Write).then_some(Awaits::AtomRsp);
        let rma = RmaIov::new(remote.addr, len as u64, remote.key);
        let req = AtomicReq { datatype, op: op_code, compare, result };
        let op = Op::new(dest, context, operand, len as u64, State::Atomic { rma, req, msg_id: 0, out });
        // A write atomic waits for the HANDSHAKE (DC or not), and so does
        // any atomic behind an operation that waits: the `msg_id` comes
        // when the wait ends (`withdraw.rs`).
        let known = self.cfg.legacy || peer.known();
        let parks = !peer.waiting_hs.is_empty() || (class == AtomicClass::Write && !known);
        let key = self.new_op(op)?;
        self.time_request(key);
        self.traffic.op(super::Proto::Atomic, len as u64);
        if parks {
            self.park(dest, key);
            self.trigger_handshake(dest);
        } else {
            self.assign_msg_id(key);
            if class == AtomicClass::Write {
                self.start_or_wait_handshake(dest, key);
            } else {
                self.enqueue(key);
            }
        }
        Ok(())
    }

    /// The RTA of an atomic.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rta_packet(
        &self,
        key: u32,
        op: &Op,
        rma: RmaIov,
        a: &AtomicReq,
        msg_id: u32,
        o: &Out,
        peer: &Peer,
        out: &mut [u8],
    ) -> Option<(usize, u64)> {
        let ptype = o.ptype?;
        let (raw_addr, connid) = self.req_opts(peer);
        let iov = [rma];
        let mut r = wire::Req::new(ptype);
        r.raw_addr = raw_addr;
        r.connid = connid;
        r.rma_iov = &iov;
        r.fields.msg_id = msg_id;
        r.fields.atomic_datatype = a.datatype;
        r.fields.atomic_op = a.op;
        r.fields.recv_id = key;
        r.fields.send_id = key;
        if a.op == atomic_ops::op::ATOMIC_READ {
            // An atomic read carries count × size operand bytes, which the
            // target ignores: libfabric sends them
            // (`efa_rdm_pke_init_rta_common`; the golden FETCH_RTA vector,
            // op 10) and its target reads operands at the payload's offset
            // whatever the packet's length (`efa_rdm_pke_proc_fetch_rta`).
            // Zeros: the application gives no operand.
            let n = r.emit(out).ok()?;
            out.get_mut(n..n + op.len as usize)?.fill(0);
            return Some((n + op.len as usize, op.len));
        }
        let n = op.buf.with_slice(|s| wire::Req { data: s, ..r }.emit(out).ok())?;
        // COMPARE_RTA: the compare values follow the operands (spec §3.3).
        let cmp = if ptype == PacketType::CompareRta { a.compare.len() } else { 0 };
        let tail = out.get_mut(n..n + cmp)?;
        a.compare.read_at(0, tail);
        Some((n + cmp, op.len))
    }

    /// An RTA, in `msg_id` order: validate, apply, answer.
    pub(crate) fn handle_rta(&mut self, peer: u32, r: &wire::Req<'_>, info: ReqInfo) {
        let id = if info.dc { r.fields.send_id } else { r.fields.recv_id };
        let answers = info.dc || info.proto != Subprotocol::WriteAtomic;
        match self.apply_rta(r, info) {
            Ok(old) => match info.proto {
                Subprotocol::WriteAtomic if info.dc => self.send_receipt(peer, id, r.fields.msg_id),
                Subprotocol::WriteAtomic => {}
                _ => {
                    let rsp = wire::AtomRsp {
                        flags: 0,
                        connid: self.my_connid(),
                        padding: 0,
                        reserved: 0,
                        recv_id: id,
                        data: &old,
                    };
                    self.queue_ctrl(peer, &Packet::AtomRsp(rsp));
                }
            },
            Err(s) if answers => self.send_peer_error(peer, id, s),
            Err(_) => {}
        }
    }

    /// Checks an RTA against the registrations and applies it; the old values.
    fn apply_rta(&mut self, r: &wire::Req<'_>, info: ReqInfo) -> Result<Vec<u8>, Status> {
        let (dt, code) = (r.fields.atomic_datatype, r.fields.atomic_op);
        let size = atomic_ops::type_size(dt)?;
        let fetch = info.proto != Subprotocol::WriteAtomic;
        let class = atomic_ops::classify(dt, code, fetch)?;
        let expect = match info.proto {
            Subprotocol::WriteAtomic => AtomicClass::Write,
            Subprotocol::FetchAtomic => AtomicClass::Fetch,
            _ => AtomicClass::Compare,
        };
        if class != expect {
            return Err(Status::NotSup);
        }
        let total = r.rma_iov.iter().try_fold(0u64, |t, v| t.checked_add(v.len())).ok_or(Status::RemoteAccess)?;
        let need = if fetch { Access::REMOTE_WRITE | Access::REMOTE_READ } else { Access::REMOTE_WRITE };
        let bufs = self.mr_check_all(r.rma_iov, need, total)?;
        if bufs.is_empty() {
            return Err(Status::NotSup);
        }
        // Several regions (libfabric's atomic msgs with an iov): the
        // operands and compare values follow the regions in order.
        let len = total as usize;
        let data_len = match class {
            AtomicClass::Compare => 2 * len,
            _ => len,
        };
        // An atomic read's operand bytes are ignored; rdm4 before issue 42
        // sent none, libfabric sends them: both are taken.
        let read_without = code == atomic_ops::op::ATOMIC_READ && r.data.is_empty();
        if bufs.iter().any(|b| b.len() % size != 0) || (r.data.len() != data_len && !read_without) {
            self.stats.protocol_errors += 1;
            return Err(Status::Proto);
        }
        let (operand, compare) = if read_without { (&[][..], &[][..]) } else { r.data.split_at(len) };
        let mut old = if fetch { vec![0u8; len] } else { Vec::new() };
        let mut at = 0;
        for target in &bufs {
            let n = target.len();
            let (opnd, cmp) = (operand.get(at..at + n).unwrap_or(&[]), compare.get(at..at + n).unwrap_or(&[]));
            let out = if fetch { &mut old[at..at + n] } else { &mut [][..] };
            // By the CPU's atomics, as peers that map the memory apply theirs.
            target.atomic_apply(dt, code, opnd, cmp, out)?;
            at += n;
        }
        Ok(old)
    }

    /// An ATOMRSP: the old values of a fetch or compare atomic.
    pub(crate) fn handle_atomrsp(&mut self, peer: u32, a: &wire::AtomRsp<'_>) {
        let Some(op) = self.ops.get_mut(a.recv_id) else {
            self.stats.protocol_errors += 1;
            return;
        };
        let State::Atomic { req, out, .. } = &mut op.state else {
            self.stats.protocol_errors += 1;
            return;
        };
        if op.peer != peer || out.awaits != Some(Awaits::AtomRsp) {
            self.stats.protocol_errors += 1;
            return;
        }
        out.awaits = None;
        if a.data.len() != req.result.len() {
            self.stats.protocol_errors += 1;
            op.status = Status::Proto;
        } else {
            req.result.write_at(0, a.data);
        }
        self.check_done(a.recv_id);
    }
}
