//! The handshake subprotocol (spec ch. 2): a HANDSHAKE goes back on the
//! first packet from a peer; the peer's extra feature/request bits are
//! recorded; the raw address header is dropped from REQs once the peer's
//! HANDSHAKE arrived. Operations that need the peer's features wait for it.

use super::peer::{OurHandshake, TheirHandshake};
use super::Core;
use crate::wire::{self, LeU64, Packet, PacketType, Req};

impl Core {
    /// The extra features/requests this endpoint advertises.
    #[inline(always)]
    pub(crate) fn my_extra(&self) -> u64 {
        self.extra
    }

    /// [`Self::my_extra`] as the settings and the device's capabilities
    /// `caps` (towards every peer, or one: [`super::peer::Path`]) make it
    /// (computed once per path: neither changes after).
    pub(crate) fn extra_bits(&self, caps: &crate::device::Caps) -> u64 {
        if self.cfg.legacy {
            return 0;
        }
        let mut bits = wire::extra::DELIVERY_COMPLETE | wire::extra::CONNID_HEADER | wire::extra::PEER_ERROR;
        if caps.rdma_read {
            // Reading, this endpoint also nacks a read it cannot do and
            // answers a nack of its own long-read sends (spec §4.7), and
            // sends and receives runting reads (§4.5).
            bits |= wire::extra::RDMA_READ | wire::extra::READ_NACK | wire::extra::RUNT;
        }
        if caps.rdma_write && caps.rdma_write_imm {
            // A peer with RDMA write moves a write with CQ data by RDMA
            // write with immediate data: both must be there.
            bits |= wire::extra::RDMA_WRITE;
        }
        if self.cfg.constant_header {
            bits |= wire::extra::CONSTANT_HEADER_LENGTH;
        }
        bits & !self.cfg.features_off
    }

    /// Both this endpoint and `peer` (by its HANDSHAKE) have extra
    /// feature `bit`: the protocol it names may run between them.
    pub(crate) fn both(&self, peer: &super::peer::Peer, bit: u64) -> bool {
        peer.path.mine & bit == bit && peer.has(bit)
    }

    /// Our extra bits towards `peer` ([`Self::my_extra`] for one unknown).
    pub(crate) fn mine(&self, peer: u32) -> u64 {
        self.peers.get(peer).map_or(self.my_extra(), |p| p.path.mine)
    }

    /// The path to a peer whose device capabilities are `caps` and which
    /// knows this endpoint as `local`.
    pub(crate) fn path(&self, caps: &crate::device::Caps, local: &crate::wire::RawAddr) -> super::peer::Path {
        super::peer::Path {
            mtu: caps.mtu,
            eager_cap: self.eager_caps(caps.mtu),
            sync_send: caps.sync_send && !self.cfg.delivery_complete,
            longread_min: caps.longread_min,
            runt: caps.runt,
            max_rdma_size: caps.max_rdma_size,
            rdma_read: caps.rdma_read,
            rdma_write_imm: caps.rdma_write_imm,
            mine: self.extra_bits(caps),
            raw_body: local.to_req_hdr_body(),
        }
    }

    /// The path to a peer the device reaches as `ah` (packet buffers grow
    /// to its MTU: [`Core::mtu_max`]).
    pub(crate) fn path_of<D: crate::device::Device>(&mut self, dev: &D, ah: crate::device::Ah) -> super::peer::Path {
        let path = self.path(&dev.peer_caps(ah), &dev.local_addr_for(ah));
        self.mtu_max = self.mtu_max.max(path.mtu);
        path
    }

    /// Applies a switch of the device's per-peer capabilities
    /// ([`crate::device::Device::caps_epoch`]) to every placed peer: what
    /// may change in the middle of a stream (the long-read size, the runt).
    pub(crate) fn follow_caps<D: crate::device::Device>(&mut self, dev: &D) {
        let epoch = dev.caps_epoch();
        if epoch == self.caps_epoch {
            return;
        }
        self.caps_epoch = epoch;
        for p in self.peers.values_mut() {
            if let Some(ah) = p.ah {
                let caps = dev.peer_caps(ah);
                (p.path.longread_min, p.path.runt) = (caps.longread_min, caps.runt);
            }
        }
    }

    /// Queues our HANDSHAKE for `peer` once.
    pub(crate) fn send_handshake(&mut self, peer: u32) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        if p.ours == OurHandshake::Sent {
            return;
        }
        p.ours = OurHandshake::Sent;
        let words = [LeU64::new(p.path.mine)];
        let mut h = wire::Handshake::new(&words);
        h.connid = self.my_connid();
        if !self.cfg.legacy {
            h.host_id = (self.cfg.host_id != 0).then_some(self.cfg.host_id);
            h.device_version = (self.cfg.device_version != 0).then_some(self.cfg.device_version);
        }
        self.queue_ctrl(peer, &Packet::Handshake(h));
    }

    /// Records the peer's HANDSHAKE and releases what waited for it.
    pub(crate) fn handle_handshake(&mut self, peer: u32, h: &wire::Handshake<'_>) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        let extra = h.extra_info.first().map_or(0, |w| w.get());
        p.theirs = TheirHandshake::Known { extra, host_id: h.host_id, device_version: h.device_version };
        let waiting: Vec<u32> = p.waiting_hs.drain(..).collect();
        if !self.after_hs.is_empty() {
            let (now, later): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.after_hs).into_iter().partition(|(p, _)| *p == peer);
            self.after_hs = later;
            for (_, answer) in now {
                match answer {
                    super::AfterHs::FailedRead { key, iovs } => self.answer_failed_read(key, iovs),
                    super::AfterHs::PeerError { op_id, status } => self.send_peer_error(peer, op_id, status),
                }
            }
        }
        for key in waiting {
            // A plain send parked only behind another keeps its protocol.
            let plain =
                self.ops.get(key).is_some_and(|op| matches!(op.state, super::op::State::Send { msg, .. } if !msg.dc));
            if !plain {
                self.choose_rma_protocol(key);
            }
            // Those that failed there (the peer lacks the feature) take no `msg_id`.
            self.assign_msg_id(key);
            self.enqueue(key);
        }
    }

    /// Asks `peer` for its HANDSHAKE with a zero-length EAGER_RTW, as the
    /// reference implementation does (the write names no memory).
    pub(crate) fn trigger_handshake(&mut self, peer: u32) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        if p.theirs != TheirHandshake::Unknown {
            return;
        }
        p.theirs = TheirHandshake::Asked;
        let body = p.path.raw_body;
        let mut r = Req::new(PacketType::EagerRtw);
        r.raw_addr = wire::RawAddrHdr::new(&body).ok();
        self.queue_ctrl(peer, &Packet::Req(r));
    }
}
