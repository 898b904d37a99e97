//! Peers: the address vector's entries, their handshake state and the
//! `msg_id` reorder buffer (spec §2, §3.2 "msg_id").

use std::collections::VecDeque;

use crate::fxhash::FxHashMap;

use crate::device::Ah;
use crate::wire::RawAddr;

/// Our HANDSHAKE to a peer (spec §4.1): sent once, before our first
/// answer to a REQ of its.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OurHandshake {
    Unsent,
    Sent,
}

/// The peer's HANDSHAKE: until it arrives, REQs to the peer carry our raw
/// address and nothing that needs its features is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TheirHandshake {
    /// Not arrived.
    Unknown,
    /// Not arrived; we asked for it (zero-length EAGER_RTW).
    Asked,
    /// Arrived: the peer's extra feature/request bits (`extra_info[0]`),
    /// `host_id` and `device_version`.
    Known { extra: u64, host_id: Option<u64>, device_version: Option<u32> },
}

/// How the device reaches one peer: the capabilities the engine uses per
/// peer ([`crate::device::Device::peer_caps`]), our extra feature bits
/// towards it and our raw address as its device knows it. The same for
/// every peer but on a device with several paths (auto).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Path {
    /// The largest packet to the peer (auto: its device's, where the
    /// endpoint's `Caps::mtu` is the smaller of both).
    pub mtu: usize,
    /// The largest eager message to the peer, untagged and tagged (by its
    /// MTU and `Config::eager_max`).
    pub eager_cap: [usize; 2],
    pub sync_send: bool,
    pub longread_min: usize,
    /// `Caps::runt`: a long-read to the peer may start with a runt.
    pub runt: bool,
    pub max_rdma_size: u64,
    pub rdma_read: bool,
    pub rdma_write_imm: bool,
    /// Our extra feature/request bits towards the peer (our HANDSHAKE).
    pub mine: u64,
    /// Our raw address header's body for REQs to the peer.
    pub raw_body: [u8; 36],
}

/// What the engine knows of one peer.
#[derive(Debug)]
pub(crate) struct Peer {
    pub raw: RawAddr,
    /// How the device reaches it.
    pub path: Path,
    /// The device handle; `None` until a learnt sender is inserted.
    pub ah: Option<Ah>,
    /// Inserted by the application (not only learnt from a packet).
    pub in_av: bool,
    pub ours: OurHandshake,
    pub theirs: TheirHandshake,
    /// The device gave up on this peer.
    pub lost: bool,
    /// Next `msg_id` to send.
    pub tx_msg_id: u32,
    /// Next `msg_id` to process.
    pub rx_msg_id: u32,
    /// REQ packets whose `msg_id` is ahead of `rx_msg_id`, by `msg_id`.
    pub reorder: FxHashMap<u32, Vec<Vec<u8>>>,
    /// Bytes held in `reorder`.
    pub reorder_bytes: usize,
    /// Operations waiting for the peer's HANDSHAKE (they need its features).
    pub waiting_hs: VecDeque<u32>,
    /// Bytes of the send operations to the peer (entries: not the eager
    /// fast path's) that have not yet handed their last byte to the device:
    /// what a device streaming to the peer has ahead
    /// ([`crate::device::Device::more_follows`]). A long-read send hands
    /// its last byte over with its RTM. A send that fails before (its peer
    /// lost) stays counted: no send goes to a lost peer again.
    pub tx_bytes: u64,
    /// Packets of this peer were deferred (left with the device) since the
    /// last redelivery: taking its next message may let them in.
    pub deferred: bool,
    /// Runt bytes of runting-read sends to the peer not yet ended
    /// (bounded by `Config::runt_size`).
    pub runt_inflight: u64,
}

impl Peer {
    pub fn new(raw: RawAddr, ah: Option<Ah>, first_msg_id: u32, path: Path) -> Peer {
        Peer {
            raw,
            path,
            ah,
            in_av: false,
            ours: OurHandshake::Unsent,
            theirs: TheirHandshake::Unknown,
            lost: false,
            tx_msg_id: first_msg_id,
            rx_msg_id: first_msg_id,
            reorder: FxHashMap::default(),
            reorder_bytes: 0,
            waiting_hs: VecDeque::new(),
            tx_bytes: 0,
            deferred: false,
            runt_inflight: 0,
        }
    }

    /// True when the peer's HANDSHAKE advertised extra bit(s) `bits`.
    pub fn has(&self, bits: u64) -> bool {
        matches!(self.theirs, TheirHandshake::Known { extra, .. } if extra & bits == bits)
    }

    /// The peer's HANDSHAKE has arrived: its features are known (and REQs
    /// to it stop carrying our raw address).
    pub fn known(&self) -> bool {
        matches!(self.theirs, TheirHandshake::Known { .. })
    }
}

/// Where a received `msg_id` lies relative to the next expected one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MsgOrder {
    /// The next message: process now.
    Now,
    /// Ahead within the window: hold it.
    Ahead,
    /// Already processed (a later segment of a medium message, or stale).
    Past,
    /// Beyond the window: a protocol violation.
    TooFar,
}

/// Classifies `msg_id` against `expected`, with wrap-around at 2^32.
pub(crate) fn msg_order(msg_id: u32, expected: u32, window: u32) -> MsgOrder {
    let d = msg_id.wrapping_sub(expected);
    if d == 0 {
        MsgOrder::Now
    } else if d >= 1 << 31 {
        MsgOrder::Past
    } else if d < window {
        MsgOrder::Ahead
    } else {
        MsgOrder::TooFar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_order_wraps_around_2_pow_32() {
        assert_eq!(msg_order(0, u32::MAX, 16), MsgOrder::Ahead);
        assert_eq!(msg_order(u32::MAX, 0, 16), MsgOrder::Past);
        assert_eq!(msg_order(5, 5, 16), MsgOrder::Now);
        assert_eq!(msg_order(5 + 16, 5, 16), MsgOrder::TooFar);
        assert_eq!(msg_order(2, u32::MAX - 1, 16), MsgOrder::Ahead);
    }
}
