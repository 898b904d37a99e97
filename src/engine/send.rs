//! The sender's side of two-sided messages: the REQ packets (RTMs and
//! medium segments) built into the device's buffer, the eager fast path
//! (`send_now`) and eager sends queued without an entry.

use super::op::{Msg, Op, QueuedEager, State, Tx, Via};
use super::peer::Peer;
use super::{send_flags, Addr, Core, Cqe, SendOpts};
use crate::device::{DevError, Device, Sent};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::{self, PacketType, ReqFamily, Subprotocol};

impl Core {
    /// Builds an RTM carrying the message bytes from `a.sent` on (as many as fit).
    pub(crate) fn rtm_packet(&self, a: &RtmArgs, peer: &Peer, out: &mut [u8]) -> Option<(usize, u64)> {
        let (raw_addr, connid) = self.req_opts(peer);
        if raw_addr.is_none()
            && matches!(a.ptype.req_info(), Some(i) if i.family == ReqFamily::Rtm && !i.dc && matches!(i.proto, Subprotocol::Eager | Subprotocol::Medium))
        {
            return self.data_rtm_packet(a, connid, peer.path.mtu, out);
        }
        let r = self.rtm_req(a, peer);
        let room = peer.path.mtu.saturating_sub(r.hdr_len() + r.opt_hdr_len()) as u64;
        let chunk = if a.nodata { 0 } else { a.chunk().min(room) as usize };
        a.buf.with_slice(|s| {
            let data = s.get(a.sent as usize..a.sent as usize + chunk)?;
            wire::Req { data, ..r }.emit(out).ok().map(|n| (n, chunk as u64))
        })
    }

    /// The RTM of long-CTS send `key` as its headers and the message bytes
    /// it carries, for [`Device::send_gather`] on a device that copies
    /// gathered bytes into the packet (not `Caps::gather_in_place`). The
    /// packet is the same byte for byte; what changes is who copies the
    /// bytes: the device copies them as it copies CTSDATA payloads, past
    /// the caches when the receiver is far (`Device::gather_nt`), where the
    /// packet builder's copy goes through them and slows far-apart streams
    /// (docs/performance.md, "Non-temporal stores"). The RTM's headers are
    /// [`Self::rtm_packet`] of the returned args (marked `nodata`) for the
    /// returned peer, at most the returned length. `None`: any other packet
    /// (built whole).
    pub(crate) fn longcts_rtm_gather(&self, key: u32) -> Option<(RtmArgs, &Peer, usize, UserBuf)> {
        if self.caps.gather_in_place {
            return None;
        }
        let op = self.ops.get(key)?;
        let State::Send { msg, out, .. } = &op.state else { return None };
        let Via::LongCts { nodata: false, nacked, .. } = out.via else { return None };
        let ptype = out.ptype?;
        if out.started {
            return None;
        }
        let a = RtmArgs::of(key, ptype, op, msg, false, nacked);
        let peer = self.peers.get(op.peer)?;
        let r = self.rtm_req(&a, peer);
        let hdr = r.hdr_len() + r.opt_hdr_len();
        let chunk = a.chunk().min(peer.path.mtu.saturating_sub(hdr) as u64) as usize;
        let payload = op.buf.slice(a.sent as usize, chunk).filter(|p| !p.is_empty())?;
        Some((RtmArgs { nodata: true, ..a }, peer, hdr, payload))
    }

    /// The length of the packet [`Self::rtm_packet`] builds for `a` (at
    /// most the MTU): the bound the device reserves.
    pub(crate) fn rtm_len(&self, a: &RtmArgs, peer: &Peer) -> usize {
        let (raw_addr, connid) = self.req_opts(peer);
        let hdr = a.ptype.req_info().map_or(0, |i| i.fixed_len())
            + raw_addr.map_or(0, |r| r.wire_len())
            + a.cq_data.map_or(0, |_| 8)
            + connid.map_or(0, |_| 4);
        let data = if a.nodata { 0 } else { a.chunk() };
        (hdr as u64).saturating_add(data).min(peer.path.mtu as u64) as usize
    }

    /// The REQ of RTM `a` without data: the fields every RTM type draws
    /// from (each type writes those its layout has).
    pub(crate) fn rtm_req<'a>(&'a self, a: &RtmArgs, peer: &'a Peer) -> wire::Req<'a> {
        let (raw_addr, connid) = self.req_opts(peer);
        let mut r = wire::Req::new(a.ptype);
        r.raw_addr = raw_addr;
        r.connid = connid;
        r.cq_data = a.cq_data;
        r.fields.msg_id = a.msg_id;
        r.fields.tag = a.tag;
        r.fields.msg_length = a.len;
        r.fields.seg_offset = a.sent;
        r.fields.send_id = a.send_id;
        r.fields.credit_request = self.cfg.credit_request;
        if a.nacked {
            r.flags |= wire::req_flags::READ_NACK;
        }
        r
    }

    /// [`Self::rtm_packet`] for an eager or medium RTM after the handshake:
    /// the fixed-offset header writer.
    fn data_rtm_packet(&self, a: &RtmArgs, connid: Option<u32>, mtu: usize, out: &mut [u8]) -> Option<(usize, u64)> {
        let d = wire::DataRtm {
            ptype: a.ptype,
            flags: a.ptype.default_req_flags(),
            msg_id: a.msg_id,
            tag: a.tag,
            msg_length: a.len,
            seg_offset: a.sent,
            cq_data: a.cq_data,
            connid,
            data: &[],
        };
        let room = mtu.saturating_sub(d.buffer_len()) as u64;
        let chunk = a.chunk().min(room) as usize;
        a.buf.with_slice(|s| {
            let data = s.get(a.sent as usize..a.sent as usize + chunk)?;
            wire::DataRtm { data, ..d }.emit(out).ok().map(|n| (n, chunk as u64))
        })
    }

    /// Queues eager send `opts` of `buf` to `dest` (its `msg_id` taken now)
    /// when the fast path could not send it; false: it needs an operation
    /// entry (a device whose sends complete later, or not an eager message).
    pub(crate) fn queue_eager(&mut self, dest: Addr, buf: UserBuf, opts: SendOpts) -> Result<bool, Status> {
        let peer = self.reachable_peer(dest)?;
        if buf.len() > peer.path.eager_cap[usize::from(opts.tag.is_some())] {
            return Ok(false);
        }
        if !peer.path.sync_send || !peer.waiting_hs.is_empty() {
            return Ok(false); // its sends complete later, or behind an operation that waits for the HANDSHAKE
        }
        if self.outstanding() >= self.cfg.max_ops {
            return Err(Status::Again);
        }
        let Some(p) = self.peers.get_mut(dest) else { return Err(Status::NoAddr) };
        let msg_id = p.tx_msg_id;
        p.tx_msg_id = p.tx_msg_id.wrapping_add(1);
        let e = QueuedEager { peer: dest, buf, tag: opts.tag, cq_data: opts.cq_data, context: opts.context, msg_id };
        self.traffic.bytes[super::Proto::Eager as usize] += buf.len() as u64;
        self.txq.push_back(Tx::Eager(e));
        self.queued_eager += 1;
        Ok(true)
    }

    /// Tries to send queued eager message `e`; false when the device pushed
    /// back (it stays queued). Otherwise it has completed, sent or failed.
    pub(crate) fn pump_eager<D: Device>(&mut self, dev: &mut D, e: &QueuedEager) -> bool {
        let Some(peer) = self.peers.get(e.peer).filter(|p| !p.lost) else {
            self.eager_sent(e, Status::PeerUnreachable);
            return true;
        };
        let Some(ah) = peer.ah else {
            self.eager_sent(e, Status::PeerUnreachable);
            return true;
        };
        let args = RtmArgs {
            ptype: self.rtm_types[0][usize::from(e.tag.is_some())],
            send_id: 0,
            msg_id: e.msg_id,
            tag: e.tag.unwrap_or(0),
            cq_data: e.cq_data,
            len: e.buf.len() as u64,
            sent: 0,
            buf: e.buf,
            nodata: false,
            nacked: false,
        };
        let mut built = false;
        let core: &Core = self;
        let max_len = self.rtm_len(&args, peer);
        let sent = dev.send_with(ah, 0, max_len, |slot: &mut [u8]| match core.rtm_packet(&args, peer, slot) {
            Some((n, _)) => {
                built = true;
                n
            }
            None => 0,
        });
        let status = match sent {
            Err(DevError::Again) => return false,
            Err(DevError::Failed(s)) => s,
            Ok(_) if !built => Status::Internal,
            Ok(_) => {
                self.traffic.tx[args.ptype as usize] += 1;
                Status::Success
            }
        };
        self.eager_sent(e, status);
        true
    }

    /// The completion of queued eager message `e`.
    pub(crate) fn eager_sent(&mut self, e: &QueuedEager, status: Status) {
        self.cq.push_back(Cqe::new(e.context, send_flags(e.tag.is_some()), e.buf.len() as u64, status));
    }

    /// The eager fast path: when nothing is queued before it and the device
    /// completes sends at once, the message goes out now and completes
    /// without an operation entry. `None`: take the queued path.
    /// `COMPLETE`: queue the send's completion (false for an inject, which
    /// has none: its bytes are in the device when this returns).
    pub(crate) fn send_now<D: Device, const COMPLETE: bool>(
        &mut self,
        dev: &mut D,
        dest: Addr,
        buf: UserBuf,
        opts: SendOpts,
    ) -> Option<Result<(), Status>> {
        let tagged = opts.tag.is_some();
        if !self.txq.is_empty() || !self.ctrl.is_empty() {
            return None;
        }
        let peer = self.peers.get(dest).filter(|p| p.in_av && !p.lost && p.path.sync_send)?;
        if buf.len() > peer.path.eager_cap[usize::from(tagged)] {
            return None;
        }
        let ah = peer.ah?;
        let (raw_addr, connid) = self.req_opts(peer);
        if raw_addr.is_some() {
            return None; // before the peer's HANDSHAKE: the general RTM builder
        }
        // The device reserves exactly the packet: the fixed-offset header
        // and the payload.
        let (msg_id, tag, cq_data) = (peer.tx_msg_id, opts.tag.unwrap_or(0), opts.cq_data);
        let max_len = wire::DataRtm::eager_hdr_len(tagged, cq_data.is_some(), connid.is_some()) + buf.len();
        let mut built = false;
        let sent = dev.send_with(
            ah,
            0,
            max_len,
            // Both closures always inlined: behind the auto device's
            // dispatch the optimiser otherwise keeps them calls
            // (docs/performance.md, 2026-11-28).
            #[inline(always)]
            |slot: &mut [u8]| {
                let n = buf.with_slice(
                    #[inline(always)]
                    |data| wire::DataRtm::emit_eager(slot, tagged, msg_id, tag, cq_data, connid, data),
                );
                built = n > 0;
                n
            },
        );
        if !(built && sent == Ok(Sent::Done)) {
            return None; // nothing went out: queue it
        }
        self.traffic.tx_eager(tagged, buf.len());
        self.ring(dev);
        if let Some(p) = self.peers.get_mut(dest) {
            p.tx_msg_id = p.tx_msg_id.wrapping_add(1);
        }
        if COMPLETE {
            self.cq.push_back(Cqe::new(opts.context, send_flags(tagged), buf.len() as u64, Status::Success));
        }
        Some(Ok(()))
    }
}

/// What an RTM packet is built from.
pub(crate) struct RtmArgs {
    pub ptype: PacketType,
    pub send_id: u32,
    pub msg_id: u32,
    pub tag: u64,
    pub cq_data: Option<u64>,
    pub len: u64,
    pub sent: u64,
    pub buf: UserBuf,
    /// The RTM carries no data (long-CTS after a READ_NACK).
    pub nodata: bool,
    /// The long-CTS RTM answers a READ_NACK (REQ flag 0x2000).
    pub nacked: bool,
}

/// Payload bytes per packet of a medium message of `len` bytes (before
/// the MTU's own limit): about sqrt(2 KiB × `len`), at least 4 KiB. A
/// receiver copies segment k while the sender copies segment k+1, so more
/// segments shorten a lone message's trip (the copying takes
/// `len` × (1 + 1/k) for k segments) while each costs a packet's overhead
/// (about what 2 KiB take to copy): the sum of the two is least near this
/// size (docs/performance.md, "Medium segments"). Streams of messages
/// pipeline across messages anyway.
fn medium_segment(len: u64) -> u64 {
    ((len.saturating_mul(2048).isqrt() + 63) & !63).max(4096)
}

impl RtmArgs {
    /// Message bytes the next packet carries at most (the MTU aside).
    fn chunk(&self) -> u64 {
        let left = self.len - self.sent;
        match self.ptype.req_info() {
            Some(i) if i.proto == Subprotocol::Medium => left.min(medium_segment(self.len)),
            _ => left,
        }
    }

    /// The next RTM of send operation `key` (of message `msg`), of type `ptype`.
    pub fn of(key: u32, ptype: PacketType, op: &Op, msg: &Msg, nodata: bool, nacked: bool) -> RtmArgs {
        RtmArgs {
            ptype,
            send_id: key,
            msg_id: msg.msg_id,
            tag: msg.tag,
            cq_data: msg.cq_data,
            len: op.len,
            sent: op.sent,
            buf: op.buf,
            nodata,
            nacked,
        }
    }
}
