//! The engine's public settings and per-operation options: the
//! endpoint's [`Config`], its counters ([`Stats`]), what a send, receive,
//! probe or remote operation takes, and the identity a HANDSHAKE sends.

use crate::device::Access;
use crate::mem::UserBuf;
use crate::status::Status;

use super::Addr;

/// The `device_version` rdm4 sends: the version of its device contract
/// (an EFA NIC would send its hardware version).
pub const DEVICE_VERSION: u32 = 1;

/// This host's identifier: a hash of `/etc/machine-id`, else of the host
/// name; never 0.
pub fn host_id() -> u64 {
    use std::hash::Hasher;
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        let name = std::fs::read("/etc/machine-id")
            .ok()
            .filter(|b| !b.is_empty())
            .or_else(|| std::fs::read("/proc/sys/kernel/hostname").ok())
            .unwrap_or_default();
        let mut h = crate::fxhash::FxHasher::default();
        h.write(&name);
        h.finish() | 1
    })
}

/// Per-endpoint tunables (protocol selection thresholds and limits).
#[derive(Debug, Clone)]
pub struct Config {
    /// Messages longer than one packet and up to this many bytes use the
    /// medium protocol; longer ones use long-CTS.
    pub medium_max: usize,
    /// Messages up to this many bytes use eager when they fit one packet;
    /// longer ones up to `medium_max` use medium, in segments that let the
    /// receiver copy while the sender copies (see `send::medium_segment`).
    pub eager_max: usize,
    /// CTSDATA packets a receiver grants per CTS at most.
    pub max_credits: u32,
    /// CTSDATA packets a sender asks for (`credit_request`).
    pub credit_request: u32,
    /// Bytes of unexpected message data held at most (one message is
    /// always taken when none is held); new messages beyond it are left
    /// with the device, which holds the senders back (see the module docs).
    pub unexpected_limit: usize,
    /// How far ahead of the next expected `msg_id` REQs are held (and so at
    /// most this many packets per peer). The devices bound reordering to their
    /// in-flight window, far below this; a REQ beyond it is a protocol error.
    /// Held REQs do not count against `unexpected_limit`: the missing message
    /// they wait for must still be taken from the device.
    pub reorder_window: u32,
    /// Outstanding operations at most: posts past it give `Again`, and new
    /// unexpected messages that need an entry wait with their sender
    /// (messages already held for `msg_id` order may go past it, by at most
    /// what the reorder buffer holds).
    pub max_ops: usize,
    /// Peers at most, inserted and learnt: an insert past it gives
    /// `NoMem`, and a packet from a new sender past it is dropped and
    /// counted (`Stats::refused_peers`), so that packets from forged
    /// addresses cannot grow the endpoint's memory without bound.
    pub max_peers: usize,
    /// Memory registrations at most (allocations and the long-read sends'
    /// own registrations included): a registration past it gives `NoMem`.
    pub max_mrs: usize,
    /// Packets taken from the device per progress call at most.
    pub rx_batch: usize,
    /// The `msg_id` of the first message to and from every peer. Always 0 on
    /// the wire between real endpoints; tests set it near 2^32 to exercise
    /// wrap-around (both sides must agree).
    pub first_msg_id: u32,
    /// Behave as a baseline-only peer: advertise no extra feature or request
    /// (for interoperability tests).
    pub legacy: bool,
    /// This host's identifier, sent in the HANDSHAKE (`host_id`; 0: not
    /// sent). Default: a hash of `/etc/machine-id` (else the host name),
    /// the same for every process of the host.
    pub host_id: u64,
    /// Sent as the HANDSHAKE's `device_version` (0: not sent). Default:
    /// [`DEVICE_VERSION`].
    pub device_version: u32,
    /// Every send is delivery complete ([`SendFlags::dc`]).
    pub delivery_complete: bool,
    /// Messages of at least this many bytes that would use long-CTS use
    /// long-read instead when both sides can RDMA-read (one copy, by the
    /// receiver's device).
    pub longread_min: usize,
    /// Runting read (spec §4.5): of messages that go by long-read, the
    /// first bytes travel in packets, up to this many bytes in flight per
    /// peer (0: never; see `engine/runt.rs`).
    pub runt_size: usize,
    /// Extra feature bits (`wire::extra`) this endpoint neither advertises
    /// nor uses, as if it lacked them: each protocol's fallback can be run
    /// against a full peer (`RDM4_FEATURES_OFF`).
    pub features_off: u64,
    /// Ask peers for a constant header length (spec §4.3): they keep the
    /// raw address header in every REQ. rdm4 parses any header length and
    /// receives no message into the application's buffer in place, so the
    /// request buys it nothing and costs every REQ 40 bytes: off by
    /// default, for interoperability tests and peers' zero-copy studies
    /// (`RDM4_CONSTANT_HEADER`).
    pub constant_header: bool,
    /// A write, read or atomic not done this many nanoseconds after its
    /// post (by the clock given to `Endpoint::expire`) ends with
    /// `TimedOut` (0: never). See `engine/timeout.rs`.
    pub request_timeout_ns: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            medium_max: 64 * 1024,
            eager_max: 16 * 1024,
            max_credits: 64,
            credit_request: 64,
            unexpected_limit: 64 << 20,
            reorder_window: 1 << 14,
            max_ops: 1 << 16,
            max_peers: 1 << 16,
            max_mrs: 1 << 16,
            rx_batch: 64,
            first_msg_id: 0,
            legacy: false,
            host_id: host_id(),
            device_version: DEVICE_VERSION,
            delivery_complete: false,
            longread_min: 0,
            runt_size: 256 * 1024,
            features_off: 0,
            constant_header: false,
            request_timeout_ns: 60_000_000_000,
        }
    }
}

/// Counters of what the engine dropped or refused from the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handled.
    pub rx_packets: u64,
    /// Packets that failed to parse.
    pub malformed: u64,
    /// Packets whose connid did not match the known peer (stale QP).
    pub stale_connid: u64,
    /// Packets from an unknown sender without a raw address, or whose raw
    /// address names a peer the device reaches at another address.
    pub unknown_sender: u64,
    /// Packets that parse but break the protocol (bad IDs, lengths, order).
    pub protocol_errors: u64,
    /// Remote requests refused for key, bounds or access.
    pub access_errors: u64,
    /// Packets left with the device for later (unexpected limit reached).
    pub deferred: u64,
    /// Packets sent, by type byte.
    pub tx_packets: u64,
    /// Requests ended by their timeout (`Config::request_timeout_ns`).
    pub timeouts: u64,
    /// Packets from new senders dropped at `Config::max_peers`.
    pub refused_peers: u64,
}

/// A registered memory region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mr {
    pub buf: UserBuf,
    pub access: Access,
    /// Remote operations in progress on it.
    pub busy: u32,
}

/// Options of a two-sided send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendOpts {
    /// Tagged send with this tag.
    pub tag: Option<u64>,
    /// Remote CQ data for the receiver's completion.
    pub cq_data: Option<u64>,
    /// Returned in the completion.
    pub context: u64,
}

/// Flags of a send ([`super::Endpoint::send_flagged`]). Kept apart from
/// [`SendOpts`], which every send builds and copies: in it, they would make
/// the 8 B path read the struct back wider than it was written, a
/// store-forwarding stall per message (docs/performance.md, "the shm 8 B
/// path after the issue 30 APIs").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendFlags {
    /// More sends follow at once: the device may hold this one's packets
    /// until a call without it ([`crate::device::Device::doorbell`]).
    pub more: bool,
    /// Delivery complete: the send completes once the receiver has the
    /// whole message (the DC_* RTMs and their RECEIPT), not once it left.
    /// A peer without the feature fails it with `NotSup`.
    pub dc: bool,
}

/// What [`super::Endpoint::probe`] does with the message it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeMode {
    /// Leave it for a receive.
    Peek,
    /// Take it out of matching; [`super::Endpoint::recv_claimed`] receives it.
    Claim,
    /// Take it out of matching and drop it (no completion).
    Discard,
}

/// A message found by [`super::Endpoint::probe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    /// Its sender.
    pub src: Addr,
    /// Tagged, and its tag.
    pub tagged: bool,
    pub tag: u64,
    /// Its whole length (bytes may still be arriving).
    pub len: u64,
    /// Its remote CQ data.
    pub cq_data: Option<u64>,
    /// With [`ProbeMode::Claim`]: the probe's context, which
    /// [`super::Endpoint::recv_claimed`] names the message by (0 otherwise).
    pub claim: u64,
}

/// Options of a receive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvOpts {
    /// Tagged receive: (tag, ignore mask).
    pub tag: Option<(u64, u64)>,
    /// Receive only from this address.
    pub src: Option<Addr>,
    /// Returned in the completion.
    pub context: u64,
}

/// The remote side of an RMA or atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Address in the target's memory.
    pub addr: u64,
    /// Key of the target's registration.
    pub key: u64,
}

impl RemoteBuf {
    /// `Inval` when `len` bytes from `addr` wrap around 2^64: no target
    /// memory can hold them, so the request is refused before it is sent.
    pub(crate) fn check(&self, len: usize) -> Result<(), Status> {
        self.addr.checked_add(len as u64).map(|_| ()).ok_or(Status::Inval)
    }
}
