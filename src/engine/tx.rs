//! The transmit side of an endpoint: the control-packet and transmit
//! queues, the sizes of the packets built into the device's buffers, and
//! `flush`, which hands the device what is queued until it pushes back.

use super::op::{self, State, Via};
use super::peer::Peer;
use super::{pop_front_hot, send, Core};
use crate::device::{DevError, Device, Doorbell, MoreFollows, Sent};
use crate::status::Status;
use crate::wire::{self, PacketType, RawAddrHdr, ReqFamily, Subprotocol};

impl Core {
    /// Puts an operation in the transmit queue (once).
    pub(crate) fn enqueue(&mut self, key: u32) {
        if let Some(op) = self.ops.get_mut(key) {
            if !op.queued {
                op.queued = true;
                self.txq.push_back(op::Tx::Op(key));
            }
        }
    }

    /// A pooled packet buffer for a control packet.
    pub(crate) fn take_buf(&mut self) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_default();
        b.resize(self.mtu_max, 0); // pooled buffers keep their length: no clearing
        b
    }

    /// Builds a control packet for `peer` and queues it.
    pub(crate) fn queue_ctrl(&mut self, peer: u32, pkt: &wire::Packet<'_>) {
        let mut b = self.take_buf();
        match pkt.emit(&mut b) {
            Ok(n) => self.ctrl.push_back((peer, b, n)),
            Err(_) => {
                self.stats.protocol_errors += 1;
                self.pool.push(b);
            }
        }
    }

    /// The connid to put in non-REQ packets (always, like the reference
    /// implementation), unless acting as a legacy peer.
    pub(crate) fn my_connid(&self) -> Option<u32> {
        (!self.cfg.legacy).then_some(self.local.connid())
    }

    /// The optional headers a REQ to `peer` carries: the raw address until
    /// the peer's HANDSHAKE (or always, if it asked for a constant header
    /// length), else the connid header if it asked for it (spec §2.2, §4.3, §4.4).
    pub(crate) fn req_opts<'a>(&self, peer: &'a Peer) -> (Option<RawAddrHdr<'a>>, Option<u32>) {
        if !peer.known() || peer.has(wire::extra::CONSTANT_HEADER_LENGTH) {
            (RawAddrHdr::new(&peer.path.raw_body).ok(), None)
        } else if peer.has(wire::extra::CONNID_HEADER) && !self.cfg.legacy {
            (None, Some(self.local.connid()))
        } else {
            (None, None)
        }
    }

    /// The largest packet to `peer` (its path's; the device's for a peer
    /// not in the table).
    #[inline]
    pub(crate) fn mtu(&self, peer: u32) -> usize {
        self.peers.get(peer).map_or(self.caps.mtu, |p| p.path.mtu)
    }

    /// The most application bytes a REQ of `ptype` to `peer` can carry in
    /// any state (raw address and CQ data headers both present).
    pub(crate) fn req_data_cap(&self, peer: u32, ptype: PacketType, rma_count: usize) -> usize {
        req_room(self.mtu(peer), ptype, rma_count)
    }

    /// The largest eager message, [untagged, tagged], in packets of `mtu`
    /// bytes (at most `Config::eager_max`).
    pub(crate) fn eager_caps(&self, mtu: usize) -> [usize; 2] {
        self.rtm_types[0].map(|t| req_room(mtu, t, 0).min(self.cfg.eager_max))
    }

    /// Application bytes one CTSDATA to or from `peer` carries.
    pub(crate) fn ctsdata_cap(&self, peer: u32) -> usize {
        self.mtu(peer) - wire::CtsData::HDR_LEN - 8
    }

    /// Sends queued control packets, then operations' packets, until the
    /// device pushes back.
    #[inline(always)]
    pub(crate) fn flush<D: Device>(&mut self, dev: &mut D) {
        // The common case on every post and poll: nothing to do, decided
        // inline.
        if !(self.ctrl.is_empty() && self.txq.is_empty() && self.pending_insert.is_empty() && self.dereg.is_empty()) {
            self.flush_queued(dev);
        }
        // Every call that may have sent ends here (or rings itself).
        self.ring(dev);
    }

    /// Rings the device's doorbell unless the call is a send that more
    /// follow ([`crate::engine::SendFlags::more`]).
    #[inline(always)]
    pub(crate) fn ring<D: Device>(&self, dev: &mut D) {
        if let Some(d) = dev.as_doorbell() {
            if !self.more_follows {
                d.doorbell();
            }
        }
    }

    /// [`Self::flush`] when something is queued. A peer whose device
    /// queue pushes back ("try again") is skipped for the rest of the call,
    /// its entries kept in their order; the other peers' entries go on
    /// (a peer that holds back new messages must not stall the traffic to
    /// the others, nor the responses it is waiting for).
    #[inline(never)]
    fn flush_queued<D: Device>(&mut self, dev: &mut D) {
        self.resolve_inserts(dev);
        if !self.dereg.is_empty() {
            self.release_registrations(dev);
        }
        // Peers that pushed back: for every packet, or (`held`) for new
        // messages only, which a peer that defers holds back while it
        // still takes the rest.
        let mut blocked: Vec<u32> = Vec::new();
        let mut held: Vec<u32> = Vec::new();
        let mut n = self.ctrl.len();
        while n > 0 {
            n -= 1;
            let Some((peer, pkt, len)) = pop_front_hot(&mut self.ctrl) else {
                break;
            };
            if blocked.contains(&peer) {
                self.ctrl.push_back((peer, pkt, len));
                continue;
            }
            let ah = self.peers.get(peer).filter(|p| !p.lost).and_then(|p| p.ah);
            let sent = match ah {
                Some(ah) => {
                    // Control packets are taken by a peer that defers.
                    dev.control_next();
                    dev.send(ah, &pkt[..len], 0)
                }
                None => Ok(Sent::Done), // the peer is gone: drop it
            };
            if sent.is_err_and(|e| e == DevError::Again) {
                blocked.push(peer);
                self.ctrl.push_back((peer, pkt, len));
                continue;
            }
            if let Err(DevError::Failed(s)) = sent {
                // Never expected (the packet fits the peer's MTU): said, not
                // counted as sent; the peer's operation ends by its timeout.
                crate::log::log!(crate::log::WARN, "control packet type {} to peer {peer} refused: {s:?}", pkt[0]);
            }
            self.traffic.tx[usize::from(pkt[0])] += u64::from(ah.is_some() && sent.is_ok());
            self.pool.push(pkt);
        }
        let mut n = self.txq.len();
        while n > 0 {
            n -= 1;
            let Some(tx) = pop_front_hot(&mut self.txq) else {
                break;
            };
            let (peer, opens) = match tx {
                op::Tx::Op(key) => self.ops.get(key).map_or((None, false), |o| (Some(o.peer), Core::opens(o))),
                op::Tx::Eager(e) => (Some(e.peer), true),
            };
            if peer.is_some_and(|p| blocked.contains(&p) || (opens && held.contains(&p))) {
                self.txq.push_back(tx);
                continue;
            }
            let sent = match tx {
                op::Tx::Op(key) => self.pump(dev, key),
                op::Tx::Eager(e) => self.pump_eager(dev, &e),
            };
            if !sent {
                if opens {
                    held.extend(peer);
                } else {
                    blocked.extend(peer);
                }
                self.txq.push_back(tx);
                continue;
            }
            self.queued_eager -= usize::from(matches!(tx, op::Tx::Eager(_)));
        }
    }

    /// Tells a device that takes hints ([`MoreFollows`]) whether enough
    /// bytes to op `key`'s peer wait behind its next packet, of `len` bytes
    /// of the op's message: the rest of the message and the other sends to
    /// the peer.
    fn hint_backlog<D: Device>(&self, dev: &mut D, key: u32, len: u64) {
        let Some(h) = dev.as_more_follows() else { return };
        let min = h.backlog_min();
        let Some(op) = self.ops.get(key).filter(|_| min > 0) else { return };
        let rest = op.len.saturating_sub(op.sent + len);
        let mine = if matches!(op.state, State::Send { backlog: true, .. }) { op.len } else { 0 };
        let others = self.peers.get(op.peer).map_or(0, |p| p.tx_bytes.saturating_sub(mine));
        h.more_follows(rest + others >= min);
    }

    /// Sends the packets `key` may send now. False when the device pushed back.
    pub(crate) fn pump<D: Device>(&mut self, dev: &mut D, key: u32) -> bool {
        let my_connid = self.my_connid();
        let cap = self.ops.get(key).map_or(0, |op| self.ctsdata_cap(op.peer));
        loop {
            let Some(op) = self.ops.get_mut(key) else {
                return true;
            };
            let step = match &op.state {
                State::Recv { .. } => Step::Reads,
                State::ServeWrite { .. } if self.lr_iovs.contains_key(&key) => Step::Reads,
                State::Unexpected { .. } | State::ServeWrite { .. } => Step::Idle,
                State::Send { out, .. }
                | State::Write { out, .. }
                | State::Read { out, .. }
                | State::Atomic { out, .. }
                | State::ServeRead { out, .. } => match out.via {
                    // A long-read send or write: its buffer registered for the peer's read.
                    Via::LongRead { mr: None, .. } if !out.started => Step::Register,
                    _ if op.closing || (out.started && op.sent >= op.len) => Step::Idle,
                    Via::Direct => Step::Rdma,
                    Via::LongCts { .. } if out.started => Step::CtsData,
                    Via::Req | Via::LongCts { .. } | Via::LongRead { .. } => Step::Packet,
                },
            };
            match step {
                Step::Reads => return self.pump_longread(dev, key),
                Step::Register => {
                    self.register_longread(dev, key);
                    continue;
                }
                Step::Idle => {
                    op.queued = false; // everything handed to the device
                    return true;
                }
                Step::Rdma => return self.pump_direct(dev, key),
                Step::CtsData | Step::Packet => {}
            }
            let Some(ah) = self.peers.get(op.peer).filter(|p| !p.lost).and_then(|p| p.ah) else {
                self.complete(key, Status::PeerUnreachable);
                return true;
            };
            let wr_id = u64::from(key) + 1;
            let mut built = None;
            // The type byte of the packet built (for the traffic counters).
            let mut ptype = 0u8;
            let opens = Core::opens(op);
            let sent = if step == Step::CtsData {
                // CTSDATA: the headers in the device's buffer, the bytes
                // gathered by the device from the operation's buffer.
                let seg = Core::ctsdata_segment(op, cap).and_then(|(off, n)| Some((off, op.span(off, n)?)));
                let Some((off, payload)) = seg else {
                    op.queued = false; // window used up: the next CTS re-queues it
                    return true;
                };
                // The connid block only for a peer that asked for it (extra
                // request 3): an older peer would read it as payload.
                let asked = self.peers.get(op.peer).is_some_and(|p| p.has(wire::extra::CONNID_HEADER));
                let hdr = Core::ctsdata_hdr(op, off, my_connid.filter(|_| asked));
                let len = payload.len() as u64;
                self.hint_backlog(dev, key, len);
                dev.control_next(); // data of a message already begun
                dev.send_gather(
                    ah,
                    wr_id,
                    wire::CtsData::HDR_LEN + 8,
                    |slot: &mut [u8]| {
                        let n = hdr.emit_headers_only(slot, len).unwrap_or(0);
                        built = (n > 0).then_some((n, len));
                        ptype = wire::PacketType::CtsData as u8;
                        n
                    },
                    payload,
                )
            } else if let Some((args, peer, hdr_len, payload)) = self.longcts_rtm_gather(key) {
                // A long-CTS RTM: its headers in the device's buffer, its
                // bytes copied by the device (`Core::longcts_rtm_gather`).
                let len = payload.len() as u64;
                self.hint_backlog(dev, key, len);
                dev.send_gather(
                    ah,
                    wr_id,
                    hdr_len,
                    |slot: &mut [u8]| {
                        built = self.rtm_packet(&args, peer, slot).map(|(n, _)| (n, len));
                        ptype = args.ptype as u8;
                        built.map_or(0, |(n, _)| n)
                    },
                    payload,
                )
            } else {
                // The packet is built straight into the device's buffer.
                if !opens {
                    dev.control_next();
                }
                let core: &Core = self;
                let max_len = self.packet_bound(key);
                dev.send_with(ah, wr_id, max_len, |slot: &mut [u8]| {
                    built = core.next_packet(key, slot);
                    ptype = slot.first().copied().unwrap_or(0);
                    built.map_or(0, |(n, _)| n)
                })
            };
            match (sent, built) {
                (Ok(how), Some((_, bytes))) => {
                    self.traffic.tx[usize::from(ptype)] += 1;
                    let Some(op) = self.ops.get_mut(key) else { return true };
                    op.sent += bytes;
                    if let Some(out) = op.out_mut() {
                        out.started = true;
                    }
                    if let State::Send { backlog: backlog @ true, .. } = &mut op.state {
                        if op.sent >= op.len {
                            // Its last byte is the device's: nothing of it waits now.
                            *backlog = false;
                            if let Some(p) = self.peers.get_mut(op.peer) {
                                p.tx_bytes = p.tx_bytes.saturating_sub(op.len);
                            }
                        }
                    }
                    if how == Sent::Pending {
                        op.inflight += 1;
                    } else if op.sent >= op.len {
                        // Completed at once and nothing more to send.
                        op.queued = false;
                        self.check_done(key);
                        return true;
                    }
                }
                (Ok(_), None) => {
                    if let Some(op) = self.ops.get_mut(key) {
                        op.queued = false;
                    }
                    return true;
                }
                (Err(DevError::Again), _) => return false,
                (Err(DevError::Failed(s)), _) => {
                    self.complete(key, s);
                    return true;
                }
            }
        }
    }

    /// Whether `op`'s next packet opens something new at the peer: a
    /// message's first packet (RTM) or an atomic (RTA). RMA requests, read
    /// responses and later segments do not, and a peer that defers still
    /// takes them ([`Device::control_next`]).
    pub(crate) fn opens(op: &op::Op) -> bool {
        match &op.state {
            State::Send { out, .. } => !out.started,
            State::Atomic { .. } => true,
            _ => false,
        }
    }

    /// Starts the RDMA of a direct read or write. False when the device pushed back.
    pub(crate) fn pump_direct<D: Device>(&mut self, dev: &mut D, key: u32) -> bool {
        let Some(op) = self.ops.get(key) else { return true };
        let Some(ah) = self.peers.get(op.peer).filter(|p| !p.lost).and_then(|p| p.ah) else {
            self.complete(key, Status::PeerUnreachable);
            return true;
        };
        let (buf, wr) = (op.buf, u64::from(key) + 1);
        let r = match op.state {
            // Fits 32 bits: `choose_rma_protocol` made it direct only then.
            State::Write { rma, cq_data: Some(d), .. } => {
                dev.rdma_write_imm(ah, buf, rma.addr(), rma.key(), d as u32, wr)
            }
            State::Write { rma, cq_data: None, .. } => dev.rdma_write(ah, buf, rma.addr(), rma.key(), wr),
            State::Read { rma, .. } => dev.rdma_read(ah, buf, rma.addr(), rma.key(), wr),
            _ => Err(DevError::Failed(Status::Internal)),
        };
        match r {
            Ok(()) => {
                if let Some(op) = self.ops.get_mut(key) {
                    if let Some(out) = op.out_mut() {
                        out.started = true;
                    }
                    op.sent = op.len;
                    op.inflight += 1;
                    op.queued = false;
                }
                true
            }
            Err(DevError::Again) => false,
            Err(DevError::Failed(s)) => {
                self.complete(key, s);
                true
            }
        }
    }

    /// Builds the next packet of operation `key` into `out`: its length and
    /// the application bytes it carries; `None` when it has nothing to send
    /// now. The one place that asks each state for its packet (CTSDATA
    /// aside: `Core::pump` gathers them).
    pub(crate) fn next_packet(&self, key: u32, out: &mut [u8]) -> Option<(usize, u64)> {
        let op = self.ops.get(key)?;
        let peer = self.peers.get(op.peer)?;
        match &op.state {
            State::Send { msg, out: o, .. } => {
                let ptype = o.ptype?;
                match o.via {
                    Via::Req if o.started && op.sent >= op.len => None,
                    Via::Req => self.rtm_packet(&send::RtmArgs::of(key, ptype, op, msg, false, false), peer, out),
                    Via::LongCts { .. } if o.started => None,
                    Via::LongCts { nodata, nacked, .. } => {
                        self.rtm_packet(&send::RtmArgs::of(key, ptype, op, msg, nodata, nacked), peer, out)
                    }
                    Via::LongRead { mr: Some(mr), runt } if op.sent < op.len => {
                        self.read_rtm(key, op, msg, ptype, mr, runt, peer, out)
                    }
                    Via::LongRead { .. } | Via::Direct => None,
                }
            }
            State::Write { rma, cq_data, out: o } if !o.started => {
                self.rtw_packet(key, op, *rma, *cq_data, o, peer, out)
            }
            State::Read { rma, out: o, grant, .. } if !o.started => self.rtr_packet(key, op, *rma, o, grant, peer, out),
            State::ServeRead { out: o, .. } if !o.started => self.readrsp_packet(key, op, o, out),
            State::Atomic { rma, req, msg_id, out: o } if !o.started => {
                self.rta_packet(key, op, *rma, req, *msg_id, o, peer, out)
            }
            State::Write { .. } | State::Read { .. } | State::ServeRead { .. } | State::Atomic { .. } => None,
            State::Recv { .. } | State::Unexpected { .. } | State::ServeWrite { .. } => None,
        }
    }

    /// A bound on the next packet of operation `key`: exact for the packets
    /// of eager and medium sends (a device packs packets by their size), the
    /// MTU otherwise.
    pub(crate) fn packet_bound(&self, key: u32) -> usize {
        let Some(op) = self.ops.get(key) else { return self.caps.mtu };
        let mtu = self.mtu(op.peer);
        let exact = |t: &PacketType| {
            t.req_info().is_some_and(|i| {
                i.family == ReqFamily::Rtm && matches!(i.proto, Subprotocol::Eager | Subprotocol::Medium)
            })
        };
        let State::Send { msg, out, .. } = &op.state else { return mtu };
        let Some(ptype) = out.ptype.filter(exact) else {
            return mtu;
        };
        match self.peers.get(op.peer) {
            Some(peer) if !out.started || op.sent < op.len => {
                self.rtm_len(&send::RtmArgs::of(key, ptype, op, msg, false, false), peer)
            }
            _ => mtu,
        }
    }

    /// Inserts senders learnt from raw address headers into the device.
    pub(crate) fn resolve_inserts<D: Device>(&mut self, dev: &mut D) {
        if self.pending_insert.is_empty() {
            return;
        }
        for p in std::mem::take(&mut self.pending_insert) {
            let Some(raw) = self.peers.get(p).filter(|peer| peer.ah.is_none()).map(|peer| peer.raw) else {
                continue;
            };
            let inserted = dev.insert(&raw);
            let path = inserted.as_ref().ok().map(|&ah| self.path_of(dev, ah));
            let Some(peer) = self.peers.get_mut(p) else { continue };
            match (inserted, path) {
                (Ok(ah), Some(path)) => {
                    peer.ah = Some(ah);
                    peer.path = path;
                    self.by_ah.insert(ah, p);
                }
                _ => peer.lost = true,
            }
        }
        self.follow_caps(dev);
    }
}

/// What an operation in the transmit queue does next (`Core::pump`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A long-read receiver (or served write): issue its reads.
    Reads,
    /// Register a long-read sender's buffer.
    Register,
    /// Nothing to send now.
    Idle,
    /// Start a direct read or write.
    Rdma,
    /// The next CTSDATA within the window.
    CtsData,
    /// The next REQ or response, built by `Core::next_packet`.
    Packet,
}

/// The most application bytes a REQ of `ptype` in packets of `mtu` bytes
/// can carry in any state (raw address and CQ data headers both present).
pub(crate) fn req_room(mtu: usize, ptype: PacketType, rma_count: usize) -> usize {
    let fixed = wire::Req::new(ptype).hdr_len();
    mtu.saturating_sub(fixed + rma_count * wire::RmaIov::LEN + 40 + 8 + 4)
}
