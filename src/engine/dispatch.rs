//! Received packets: parse, identify the sender (device handle, raw address
//! header, connid check), answer with a HANDSHAKE on first contact, and
//! dispatch by packet type — REQs of ordered families through the `msg_id`
//! reorder buffer (spec §3.2).

use super::op::{Data, EagerMsg, Unexpected};
use super::peer::{msg_order, MsgOrder, Peer};
use super::rtm::accepts;
use super::{raw_key, Core, CqSink, RecvDone};
use crate::device::Ah;
use crate::mem::UserBuf;
use crate::wire::{self, Category, Packet, PacketType, ReqFamily, ReqInfo, Subprotocol};

impl Core {
    /// Handles one packet as received from the device: the common eager
    /// message inline (it is most packets of small-message traffic),
    /// everything else out of line.
    #[inline(always)]
    pub(crate) fn handle_packet<S: CqSink>(&mut self, from: Option<Ah>, bytes: &[u8], sink: &mut S) {
        if let Some(ah) = from {
            if self.eager_fast(ah, bytes, sink) {
                return;
            }
        }
        self.handle_any_packet(from, bytes);
    }

    /// [`Self::handle_packet`] for what the eager fast path declined. It
    /// reads the header again rather than taking the fast path's reading:
    /// handing that over forces it out of registers on every packet, the
    /// fast path's too (docs/performance.md, "Eager fast path and inject"),
    /// while the second read costs only this path, which does far more
    /// work anyway.
    #[inline(never)]
    fn handle_any_packet(&mut self, from: Option<Ah>, bytes: &[u8]) {
        self.traffic.rx[usize::from(bytes.first().copied().unwrap_or(0))] += 1;
        let pkt = match wire::DataRtm::parse(bytes) {
            Some(d) => Packet::Req(d.to_req()),
            None => match Packet::parse(bytes) {
                Ok(p) => p,
                Err(e) => {
                    self.stats.malformed += 1;
                    crate::log::log!(crate::log::DEBUG, "dropped a malformed packet of {} bytes: {e:?}", bytes.len());
                    return;
                }
            },
        };
        let Some(peer) = self.sender(from, &pkt) else {
            return;
        };
        self.send_handshake(peer);
        match pkt {
            Packet::Handshake(h) => self.handle_handshake(peer, &h),
            Packet::Req(r) => self.handle_req(peer, &r, bytes, true),
            Packet::Cts(c) => self.handle_cts(peer, &c),
            Packet::CtsData(c) => self.handle_ctsdata(peer, &c),
            Packet::ReadRsp(r) => self.handle_readrsp(peer, &r),
            Packet::AtomRsp(a) => self.handle_atomrsp(peer, &a),
            Packet::Receipt(r) => self.handle_receipt(peer, &r),
            Packet::PeerError(e) => self.handle_peer_error(peer, &e, bytes),
            Packet::Eor(e) => self.handle_eor(peer, &e),
            Packet::ReadNack(e) => self.handle_read_nack(peer, &e),
        }
    }

    /// A packet whose payload the device gathered from the sender's buffer
    /// (`Device::send_gather`): the engine gathers only CTSDATA segments, so
    /// anything else arriving this way is malformed.
    pub(crate) fn handle_gathered(&mut self, from: Option<Ah>, hdr: &[u8], payload: UserBuf) {
        self.traffic.rx[PacketType::CtsData as usize] += 1;
        let c = match wire::CtsData::parse_headers_only(hdr) {
            Ok((c, len)) if len == payload.len() as u64 => c,
            _ => {
                self.stats.malformed += 1;
                crate::log::log!(crate::log::DEBUG, "dropped a malformed CTSDATA packet");
                return;
            }
        };
        let Some(peer) = self.sender(from, &Packet::CtsData(c)) else {
            return;
        };
        self.send_handshake(peer);
        self.take_data(peer, c.recv_id, c.seg_offset, Data::Gathered(payload));
    }

    /// The common eager case, handled without the general machinery: a known
    /// sender that already has our HANDSHAKE, its next `msg_id`, and the oldest
    /// posted receive takes it — or no receive is posted, and it joins the
    /// unexpected messages. False: nothing done, take the general path.
    #[inline(always)]
    fn eager_fast<S: CqSink>(&mut self, ah: Ah, bytes: &[u8], sink: &mut S) -> bool {
        // Two copies of the work below: the usual layout's, where the
        // header's options are constants, and any other eager RTM's.
        if let Some(e) = wire::DataRtm::parse_eager_usual(bytes) {
            return self.eager_take::<S, false>(ah, e, sink);
        }
        let Some(e) = wire::DataRtm::parse_eager(bytes) else { return false };
        self.eager_take::<S, false>(ah, e, sink)
    }

    /// The express receive's packet ([`super::Endpoint::progress_express`]):
    /// [`Self::eager_take`] for the usual layout, when the message goes
    /// straight into the oldest posted receive. False: nothing done.
    #[inline(always)]
    pub(crate) fn eager_express<S: CqSink>(&mut self, ah: Ah, bytes: &[u8], sink: &mut S) -> bool {
        let Some(e) = wire::DataRtm::parse_eager_usual(bytes) else { return false };
        self.eager_take::<S, true>(ah, e, sink)
    }

    /// [`Self::eager_fast`] once the packet is read. `EXPRESS`: only when a
    /// posted receive takes the message and no later message waits for it
    /// in the reorder buffer; else false, with nothing done.
    #[inline(always)]
    fn eager_take<S: CqSink, const EXPRESS: bool>(&mut self, ah: Ah, e: wire::DataRtm<'_>, sink: &mut S) -> bool {
        let Some(p) = self.by_ah.get(ah) else { return false };
        let Some(peer) = self.peers.get_mut(p) else { return false };
        if peer.ours == super::peer::OurHandshake::Unsent
            || e.msg_id != peer.rx_msg_id
            || e.connid.is_some_and(|c| c != peer.raw.connid())
        {
            return false;
        }
        let drain = !peer.reorder.is_empty();
        if EXPRESS && drain {
            return false;
        }
        let qi = usize::from(e.tagged());
        let Some(&r) = self.posted[qi].front() else {
            if EXPRESS {
                // The usual message, but no receive yet: the express call
                // may end here (see `Endpoint::progress_express`).
                self.rx_stop = true;
                return false;
            }
            self.traffic.rx_eager(e.tagged());
            if !self.unexpected_room(e.data.len()) {
                self.defer_packet(p);
                return true;
            }
            // The fields, not the parsed header: a reference would keep the
            // whole header in memory on every packet.
            self.eager_unexpected(p, e.tagged(), e.tag, e.cq_data, e.data);
            return true;
        };
        if !accepts(&r, e.tagged(), p, e.tag) {
            return false;
        }
        peer.rx_msg_id = peer.rx_msg_id.wrapping_add(1);
        if peer.deferred {
            // Its next messages, deferred behind this one, may come now.
            self.redeliver_due = true;
        }
        self.traffic.rx_eager(e.tagged());
        // `r`, a copy of the front, is what leaves the queue.
        self.posted[qi].skip_front();
        // The whole message is here: into the buffer (truncated to it) and
        // completed, without an operation entry.
        let n = r.buf.len().min(e.data.len());
        r.buf.write_at(0, &e.data[..n]);
        let len = e.data.len() as u64;
        let done = RecvDone { tagged: e.tagged(), len, buf: r.buf, tag: e.tag, cq_data: e.cq_data };
        let entry = done.entry(r.context, p);
        // Only into an empty queue's sink: entries keep their order.
        if !(self.cq.is_empty() && sink.offer(&entry)) {
            self.cq.push_back(entry);
        }
        if drain {
            self.drain_reorder(p);
        }
        true
    }

    /// [`Self::eager_fast`] when no receive is posted: the message is kept
    /// whole in a reused buffer, without an operation entry.
    fn eager_unexpected(&mut self, p: u32, tagged: bool, tag: u64, cq_data: Option<u64>, bytes: &[u8]) {
        self.rx_stop = self.recvs_posted;
        let mut data = self.rx_pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        self.unexpected_bytes += data.len();
        let m = EagerMsg { peer: p, tag, cq_data, data };
        self.unexpected[usize::from(tagged)].push_back(Unexpected::Eager(m));
        let Some(peer) = self.peers.get_mut(p) else { return };
        peer.rx_msg_id = peer.rx_msg_id.wrapping_add(1);
        if peer.deferred {
            self.redeliver_due = true;
        }
        if !peer.reorder.is_empty() {
            self.drain_reorder(p);
        }
    }

    /// The peer that sent `pkt`, learning it from the raw address header
    /// when the device does not know it; `None` drops the packet.
    fn sender(&mut self, from: Option<Ah>, pkt: &Packet<'_>) -> Option<u32> {
        let raw = match pkt {
            Packet::Req(r) => r.raw_addr.map(|h| h.addr()),
            _ => None,
        };
        if let Some(p) = from.and_then(|ah| self.by_ah.get(ah)) {
            let known = self.peers.get(p)?.raw;
            match (pkt.sender_connid(), raw) {
                // A new incarnation at the same device address: a new peer.
                (Some(c), Some(r)) if c != known.connid() => return self.learn(r),
                (Some(c), _) if c != known.connid() => {
                    self.stats.stale_connid += 1;
                    let had = known.connid();
                    crate::log::log!(
                        crate::log::DEBUG,
                        "dropped a packet of peer {p} for connid {c:#x} (it has {had:#x})"
                    );
                    return None;
                }
                _ => return Some(p),
            }
        }
        let Some(raw) = raw else {
            self.stats.unknown_sender += 1;
            crate::log::log!(crate::log::DEBUG, "dropped a packet from an unknown sender without its address");
            return None;
        };
        // A device address we do not know whose raw address header names a
        // peer the device reaches at its own: another host or process
        // passing itself off as that peer. (A peer being learnt, not yet
        // inserted in the device, has no handle: its packets are its own.)
        if let Some(&p) = self.by_raw.get(&raw_key(&raw)) {
            if self.peers.get(p).is_some_and(|peer| peer.ah.is_some()) {
                self.stats.unknown_sender += 1;
                crate::log::log!(crate::log::DEBUG, "dropped a packet of an unknown sender naming peer {p}");
                return None;
            }
        }
        self.learn(raw)
    }

    /// The peer of raw address `raw`, a new one (inserted in the device at
    /// the next flush) unless known; `None` at the peer limit.
    pub(super) fn learn(&mut self, raw: crate::wire::RawAddr) -> Option<u32> {
        if let Some(&p) = self.by_raw.get(&raw_key(&raw)) {
            return Some(p);
        }
        if self.peers.len() >= self.cfg.max_peers {
            self.stats.refused_peers += 1;
            crate::log::log!(
                crate::log::DEBUG,
                "dropped a packet from a new sender: {} peers, the limit",
                self.peers.len()
            );
            return None;
        }
        let path = self.path(&self.caps, &self.local);
        let p = self.peers.insert(Peer::new(raw, None, self.cfg.first_msg_id, path))?;
        self.by_raw.insert(raw_key(&raw), p);
        self.pending_insert.push(p);
        Some(p)
    }

    /// A REQ: RTMs and RTAs in `msg_id` order, RTWs and RTRs at once.
    /// `fresh`: it came from the device (not from the reorder buffer), so
    /// it may be deferred, and held REQs behind it are processed after it.
    pub(crate) fn handle_req(&mut self, peer: u32, r: &crate::wire::Req<'_>, bytes: &[u8], fresh: bool) {
        let Category::Req(info) = r.ptype.category() else {
            return;
        };
        match info.family {
            ReqFamily::Rtw => return self.handle_rtw(peer, r, info),
            ReqFamily::Rtr => return self.handle_rtr(peer, r),
            ReqFamily::Rtm | ReqFamily::Rta => {}
        }
        let window = self.cfg.reorder_window;
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        match msg_order(r.fields.msg_id, p.rx_msg_id, window) {
            MsgOrder::Now => {
                if fresh && info.family == ReqFamily::Rtm && !self.rtm_fits(peer, r, info) {
                    return self.defer_packet(peer);
                }
                let Some(p) = self.peers.get_mut(peer) else { return };
                p.rx_msg_id = p.rx_msg_id.wrapping_add(1);
                if p.deferred {
                    self.redeliver_due = true;
                }
                match info.family {
                    ReqFamily::Rta => self.handle_rta(peer, r, info),
                    _ => self.handle_rtm(peer, r, info),
                }
                if fresh && self.peers.get(peer).is_some_and(|p| !p.reorder.is_empty()) {
                    self.drain_reorder(peer);
                }
            }
            // Behind a deferred message, or past the limit: deferred too,
            // rather than copied (the device holds it).
            MsgOrder::Ahead if fresh && (self.deferred || !self.unexpected_room(Core::rtm_need(r, info))) => {
                self.defer_packet(peer)
            }
            MsgOrder::Ahead => {
                let mut copy = self.pool.pop().unwrap_or_default();
                copy.clear();
                copy.extend_from_slice(bytes);
                let Some(p) = self.peers.get_mut(peer) else {
                    return;
                };
                p.reorder_bytes += copy.len();
                self.reorder_bytes += copy.len();
                p.reorder.entry(r.fields.msg_id).or_default().push(copy);
            }
            MsgOrder::Past if matches!(info.proto, Subprotocol::Medium | Subprotocol::Runtread) => {
                self.handle_medium_segment(peer, r)
            }
            MsgOrder::Past if info.proto == Subprotocol::Longcts && info.family == ReqFamily::Rtm => {
                self.handle_nacked_longcts(peer, r)
            }
            MsgOrder::Past | MsgOrder::TooFar => self.stats.protocol_errors += 1,
        }
    }

    /// Whether RTM `r` from `peer` can be taken now: a posted receive takes
    /// it, or there is room to buffer what arrived of it (a medium message
    /// needs room for all of it) and an operation entry to hold it
    /// (`Config::max_ops`).
    fn rtm_fits(&self, peer: u32, r: &crate::wire::Req<'_>, info: ReqInfo) -> bool {
        (self.unexpected_room(Core::rtm_need(r, info)) && self.outstanding() < self.cfg.max_ops)
            || self.posted[usize::from(info.tagged)].iter().any(|p| accepts(p, info.tagged, peer, r.fields.tag))
    }

    /// Bytes an unexpected RTM `r` needs buffered: a medium message all of
    /// it, others what the packet carries.
    fn rtm_need(r: &crate::wire::Req<'_>, info: ReqInfo) -> usize {
        match info.proto {
            Subprotocol::Medium => usize::try_from(r.fields.msg_length).unwrap_or(usize::MAX),
            Subprotocol::Runtread => usize::try_from(r.fields.runt_length).unwrap_or(usize::MAX),
            _ => r.data.len(),
        }
    }

    /// Processes held REQs whose turn has come (and tombstones: a
    /// PEER_ERROR MSG_ID_SKIP held for its number moves past it).
    pub(crate) fn drain_reorder(&mut self, peer: u32) {
        loop {
            let Some(p) = self.peers.get_mut(peer) else {
                return;
            };
            let Some(list) = p.reorder.remove(&p.rx_msg_id) else {
                return;
            };
            for pkt in list {
                if let Some(p) = self.peers.get_mut(peer) {
                    p.reorder_bytes -= pkt.len().min(p.reorder_bytes);
                }
                self.reorder_bytes -= pkt.len().min(self.reorder_bytes);
                match Packet::parse(&pkt) {
                    Ok(Packet::Req(r)) => self.handle_req(peer, &r, &pkt, false),
                    Ok(Packet::PeerError(_)) => {
                        if let Some(p) = self.peers.get_mut(peer) {
                            p.rx_msg_id = p.rx_msg_id.wrapping_add(1);
                        }
                    }
                    _ => {}
                }
                self.pool.push(pkt);
            }
        }
    }
}
