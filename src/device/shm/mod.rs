//! The shm device: endpoints in processes of one host (DESIGN §2.2).
//!
//! Each endpoint owns a POSIX shared-memory segment, `/dev/shm/<prefix>-<uid>-<epid>`:
//!
//! ```text
//! offset 0    header: magic, layout version, ring size, MTU, owner pid and
//!             start time, endpoint id, connid, closing and sleeping flags,
//!             the ring's seal; the ring's tail (producers; its top bits
//!             say the owner closed, or holds back new messages) and head
//!             (consumer, with the owner's claim note as a producer) on
//!             their own cache lines
//! 256         the ring: a power-of-two number of bytes holding entries
//!             back to back, each a whole number of cache lines: a 24-byte
//!             entry header (sealed position, sender endpoint id and connid,
//!             packet length, entry length and the trail flag) + the packet; an 8-byte message
//!             fits one cache line with its header
//! after it    the registration table: entries (seqlock, key, address,
//!             length, access, claims of accessors) that peers read before
//!             cross-memory attach; a key is random above its low 10 bits,
//!             which name its entry (`mrtable.rs`)
//! ```
//!
//! The ring is a bounded multi-producer, single-consumer queue of
//! variable-length entries; positions count bytes and never wrap. A peer
//! claims the bytes `[pos, pos + n)` with one compare-and-swap on the tail,
//! once the owner's head says they have been read (`pos + n <= head +
//! ring`; producers keep the last head they saw and reread it only when the
//! ring looks full, and after finding it full only every few attempts).
//! `n` is the packet's upper bound, which the engine
//! passes to `send_with`, rounded up to cache lines: small packets sit
//! densely, so the owner reads consecutive cache lines that the hardware
//! prefetches, where fixed MTU-sized slots cost every message a cold line
//! of its own. An entry that would cross the ring's end is preceded by a
//! padding entry up to the end and starts again at offset 0. The producer
//! writes the packet in place and publishes the entry by storing its sealed
//! position, `(pos + 1) ^ seal`, in the entry's first word; the owner reads
//! packets in place and advances the head after each batch. The seal is a
//! random word of the segment with the top bit set: neither zeroed memory
//! nor stale words of earlier laps (positions or packet bytes) pass for a
//! published entry. The owner never writes the ring, so a producer's next
//! lap finds its cache lines without a transfer from the owner. No syscall
//! and no allocation on that path. A full ring is "try again". Packets from
//! one sender arrive in order, which the engine does not rely on.
//!
//! A producer killed between its claim and its seal would leave the head
//! before an entry never published, with every later entry behind it. So
//! producers note their claims in their own headers until the seal, and an
//! owner whose head stands before an unpublished entry for a peer-check
//! interval skips up to the next published one only when no live endpoint
//! notes a claim in its ring: never a live producer's entry, however slow,
//! and never an unsealed one (`claims.rs`).
//!
//! Answers: an endpoint whose last packet was one it sent asks for the
//! lines its reply would take in the sender's ring as soon as the engine has
//! handled a packet, so that their transfer from the peer (which polls
//! them) overlaps the application's work before it answers
//! (`reply_lines`, `prefetch_reply`).
//!
//! Express receive ([`Device::recv_express`]): whole packets from the last
//! sender are handed over by a loop that does only what they need, until
//! the first other packet, which stays for `recv`. Every 64th packet the
//! loop runs the periodic peer check as `events` does, and stops when that
//! found a peer gone.
//!
//! Lag: behind a fast one-way stream of small packets, the express receive
//! takes only what lies a few pages behind the ring's tail, so that it does
//! not read lines the producer is writing (`lag.rs`, [`ShmConfig::lag`]).
//!
//! Trail: a producer marks a bulk packet that has a long stream queued
//! behind it (the engine says so, [`Device::more_follows`]); the owner
//! leaves such a packet at the head while fewer than `trail` bytes were
//! claimed after it and one of those entries is still being written, so
//! that it copies lines the writer's caches have let go (`trail.rs`,
//! [`ShmConfig::trail`]).
//!
//! Raw address: `gid` = the host's boot ID (processes of one boot share
//! memory), `qpn` = endpoint id, `connid` = random per open. A slot carries
//! the sender's endpoint id *and* connid, so packets of an earlier process at
//! the same endpoint id are never attributed to its successor.
//!
//! Two-sided messages move through the ring (eager up to one packet, then
//! long-CTS) unless `longread_min` says otherwise. RMA read and write use
//! cross-memory attach (`process_vm_readv` /
//! `process_vm_writev`) after checking key, bounds and access in the memory
//! owner's published registration table; the owner does nothing. When the OS
//! refuses cross-memory attach (ptrace restrictions, seccomp) or
//! `RDM4_SHM_CMA=0`, the device reports no RDMA and the engine uses the
//! emulated protocols.
//!
//! Lifecycle: the segment (and its wake-up FIFO) is removed on close. A
//! close first sets the closed bit of its ring's tail (`segment::CLOSED`),
//! so that every later claim fails and sends to it fail at once, then
//! writes a close notice (an entry without a packet) into the rings of the
//! peers it knows, which report it lost at their next poll. A segment whose
//! owner died (its pid gone, or reused by another process — the start time
//! differs) is stale: every open removes the stale segments of its prefix.
//! Peers are checked the same way every `peer_check` interval, and a peer
//! whose process an RMA finds gone (`ESRCH`) at once; a dead peer is
//! reported lost, so every operation towards it fails.
//!
//! Blocking: [`ShmDevice::wait`] sets the header's sleeping flag and polls a
//! FIFO beside the segment; a producer that sees the flag writes one byte to
//! it. The FIFO's read end is the pollable file descriptor.
//!
//! Trust: peers are processes of the same user, who could ptrace each other
//! anyway; their packets are still parsed as untrusted input by the engine.
//!
//! Environment: `RDM4_SHM_PREFIX` (name prefix, default `rdm4`),
//! `RDM4_SHM_EPID` (open this endpoint id), `RDM4_SHM_SLOTS` (default 128:
//! the ring holds `slots` × `mtu` bytes, rounded up to a power of two),
//! `RDM4_SHM_MTU` (default 65536), `RDM4_SHM_CMA` (0 disables),
//! `RDM4_SHM_LONGREAD_MIN` (default: never, see [`ShmConfig::longread_min`]),
//! `RDM4_SHM_TRAIL` (default three L2s, see [`ShmConfig::trail`]),
//! `RDM4_SHM_FAR_NS` (default 90, `off` never, 0 always; see
//! [`ShmConfig::far_ns`]), `RDM4_SHM_LAG` (default 16384, 0 never; see
//! [`ShmConfig::lag`]), `RDM4_SHM_PEER_CHECK_MS` (default 100).

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Access, Ah, Caps, DevError, DevEvent, Device, Flow, Sent};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

mod alloc;
mod barrier;
mod claims;
mod cma;
mod config;
mod consume;
mod device;
mod far;
mod lag;
mod life;
mod liveness;
mod mrtable;
mod produce;
mod ringrma;
mod segment;
mod sleep;
mod trail;

use barrier::{producer_fence, sleeper_fence};
pub use config::ShmConfig;
use consume::reply_lines;
use liveness::mono_us;
use mrtable::{MR_ENTRIES, MR_ENTRY_LEN};
use produce::{claim_entry, prefetch_pos, publish, unnote};
pub use segment::remove_stale_segments;
use segment::{entry_len, off, open_existing, seg_name, Mapping, Shape};

const MAGIC: u64 = u64::from_le_bytes(*b"rdm4shm1");
const LAYOUT_VERSION: u32 = 7;
const HDR_LEN: usize = 256;
const SLOT_HDR: usize = 24;

/// The peer of `ah` among `peers`, if it is known and not lost (a free
/// function, so that the caller may still use the device's other fields).
fn peer_of(peers: &mut [Option<Peer>], ah: Ah) -> Result<&mut Peer, DevError> {
    match peers.get_mut(ah as usize).and_then(Option::as_mut) {
        Some(p) if p.lost => Err(DevError::Failed(Status::PeerUnreachable)),
        Some(p) => Ok(p),
        None => Err(DevError::Failed(Status::NoAddr)),
    }
}

/// A peer's segment as mapped by this endpoint.
struct Peer {
    map: Mapping,
    shape: Shape,
    epid: u32,
    connid: u32,
    pid: u32,
    start: u64,
    lost: bool,
    fifo: Option<RawFd>,
    name: String,
    /// The peer's ring head as last read (see the module docs).
    head_seen: u64,
    /// Sends to refuse without reading the head again, after the ring was
    /// found full: `full_wait`, the current wait, doubles (up to
    /// `FULL_WAIT_MAX`) while the ring stays full and resets when a send
    /// finds room. The owner writes its head after every batch, and a
    /// sender that rereads it on every attempt takes that line from the
    /// owner each time, which slows streams through a small ring
    /// (docs/performance.md, "Ring layout").
    full_skip: u32,
    full_wait: u32,
    /// How far the peer's CPU is (see `far.rs`).
    placement: far::Placement,
    /// No RDMA request into this peer's ring before this time (`mono_us`):
    /// one had to be taken back (`ringrma.rs`).
    ring_off_until: u64,
    /// The peer's ring head as last seen by `ringrma.rs`, and since when
    /// (`mono_us`).
    ring_head: (u64, u64),
    /// Requests of this endpoint waiting in the peer's ring: while there
    /// are any, every other RDMA to the peer waits too (`ringrma.rs`).
    ring_pending: u32,
}

/// One endpoint's shared-memory device.
pub struct ShmDevice {
    map: Mapping,
    shape: Shape,
    name: String,
    fifo: RawFd,
    epid: u32,
    connid: u32,
    gid: [u8; 16],
    head: u64,
    cma: bool,
    cfg: ShmConfig,
    peers: Vec<Option<Peer>>,
    by_id: FxHashMap<(u32, u32), Ah>,
    /// The last `by_id` look-up of `recv_batch` (a stream comes from one
    /// peer at a time): cleared whenever `by_id` changes.
    last_from: Option<((u32, u32), Option<Ah>)>,
    events: Vec<DevEvent>,
    mrs: FxHashMap<u64, usize>,
    /// Table entries of registrations whose deregistration answered
    /// `Busy` (withdrawn, an access still under way): not reused yet.
    mrs_closing: Vec<usize>,
    /// This endpoint's allocations peers may map (`alloc.rs`), by key.
    allocs: FxHashMap<u64, alloc::Alloc>,
    /// Descriptors of registrations of memory the application shares
    /// (`alloc.rs`, `reg_shared`), by key.
    shared_fds: FxHashMap<u64, RawFd>,
    /// Peers' allocations mapped here, by (peer, key).
    peer_maps: alloc::PeerMaps,
    /// RDMA through owners' rings (`ringrma.rs`).
    ring: ringrma::RingRdma,
    /// RDMA reads and writes done as copies through such a mapping.
    mapped_copies: u64,
    /// When the peers were last checked (`coarse_now`).
    last_check: Duration,
    /// The FIFO was handed out for polling: keep it signalled.
    fd_mode: bool,
    /// `events` calls and packets taken by the express receive, for
    /// `check_peers`.
    polls: u32,
    /// The last packet this endpoint moved was one it sent: a stream of
    /// sends, whose next entry is worth fetching ahead (see `send_with`).
    streaming: bool,
    /// Random registration keys drawn ahead (one system call per 32: a
    /// long-read send registers its buffer for every message).
    keys: Vec<u64>,
    /// How far the owner trails a streaming producer (0: not at all).
    trail: u64,
    /// Polls the packet at the head has been held back for (see `trail.rs`).
    held: u32,
    /// The engine's hint for the next packet sent ([`Device::more_follows`]).
    more: bool,
    /// How far (bytes) the owner stays behind a fast one-way stream of
    /// small packets (0: not at all; `lag.rs`), and what it remembers.
    lag: u64,
    lag_state: lag::Lag,
    /// Ended by [`ShmDevice::vanish`].
    vanished: bool,
    /// The engine's hint for the next packet sent ([`Device::control_next`]).
    control: bool,
    /// Packets the engine deferred, copied out of the ring in arrival
    /// order, and whether to hand them over again ([`Device::redeliver`]).
    /// While any are kept, the header's hold word makes producers refuse
    /// new messages, which bounds them by what was in flight then.
    parked: std::collections::VecDeque<Parked>,
    redeliver: bool,
    /// Claims of dead producers skipped, and where the head stood before
    /// an unpublished claimed entry at the last peer check (`claims.rs`).
    dead_claims: claims::DeadClaims,
}

/// A packet the engine deferred: its sender's ids and its bytes.
struct Parked {
    from: (u32, u32),
    pkt: Vec<u8>,
}

impl ShmDevice {
    fn peer(&mut self, ah: Ah) -> Result<&mut Peer, DevError> {
        peer_of(&mut self.peers, ah)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_life;
