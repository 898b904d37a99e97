//! The shm device: endpoints in processes of one host (DESIGN §2.2).
//!
//! Each endpoint owns a POSIX shared-memory segment,
//! `/dev/shm/<prefix>-<uid>-<epid>`, and a wake-up FIFO beside it:
//!
//! ```text
//! offset 0    header: magic, layout version, ring size, MTU, owner pid and
//!             start time, endpoint id, connid, closing and sleeping flags,
//!             the ring's seal; then, each on cache lines of their own, the
//!             ring's tail (producers; its top bits say the owner closed,
//!             or holds back new messages), its head (consumer) with the
//!             owner's claim note as a producer, and the owner's progress
//!             stamp (`segment::off`)
//! 256         the ring: a power-of-two number of bytes (of which a part,
//!             also a power of two, is in use and allocated: `grow.rs`) holding entries
//!             back to back, each a whole number of cache lines: a 24-byte
//!             entry header (sealed position, sender endpoint id and connid,
//!             packet length, entry length and its flags) + the packet; an
//!             8-byte message fits one cache line with its header
//! after it    the registration table (`mrtable.rs`), then the slot of
//!             the owner's two-handed read (`help.rs`)
//! ```
//!
//! The ring is a bounded multi-producer, single-consumer queue of
//! variable-length entries; positions count bytes and never wrap. A peer
//! claims an entry with one compare-and-swap on the tail, writes its packet
//! in place and publishes it by sealing it (`produce.rs`); the owner reads
//! packets in place and moves its head past them (`consume.rs`). No
//! syscall and no allocation on that path; a full ring is "try again".
//! Packets from one sender arrive in order, which the engine does not rely
//! on. The rest of the device, by file:
//!
//! - `device.rs`: the device contract ([`Device`]), the express receive
//!   among it.
//! - `life.rs`: open and close; `liveness.rs`: the periodic peer check and
//!   the progress stamp; `sleep.rs`: blocking on the FIFO.
//! - `claims.rs`: entries claimed by producers that died before sealing.
//! - `grow.rs`: the ring in use, small at open, doubles when found full.
//! - `trail.rs`, `lag.rs`, `far.rs`: how owner and producer pace streams
//!   ([`ShmConfig::trail`], [`ShmConfig::lag`], [`ShmConfig::far_ns`]).
//! - `mrtable.rs`, `alloc.rs`, `cma.rs`, `ringrma.rs`: registration and RMA.
//! - `segment.rs`, `barrier.rs`, `config.rs`: the segment's bytes, memory
//!   ordering, settings ([`ShmConfig`], from the `RDM4_SHM_*` variables).
//!
//! RMA: read, write and atomics check key, bounds and access in the
//! memory owner's registration table, and take the first way that fits:
//! - memory the owner shares by mapping (`Device::alloc`, `reg_shared`): a
//!   copy (or atomic) through this process's own mapping of it
//!   (`alloc.rs`); atomics on other memory are the engine's emulation;
//! - a read or write of other memory that fits one entry, towards an owner
//!   that polls: a request into the owner's ring, served by the owner's
//!   device and answered in the requester's ring; one the owner leaves
//!   standing is taken back (`ringrma.rs`, [`ShmConfig::ring_rma`]). While
//!   requests of ours wait in an owner's ring, any other operation to it
//!   but a mapped copy waits behind them;
//! - otherwise cross-memory attach (`process_vm_readv` /
//!   `process_vm_writev`, `cma.rs`); a large read asks an owner that
//!   polls to copy part of it too (`help.rs`), else the owner does nothing. A write
//!   with immediate data goes by mapping or cross-memory attach and is then
//!   announced by a notice in the owner's ring.
//!
//! When the OS refuses cross-memory attach (ptrace restrictions, seccomp)
//! or `RDM4_SHM_CMA=0`, the device reports no RDMA and the engine uses the
//! emulated protocols. Two-sided messages move through the ring (eager up
//! to one packet, then long-CTS) unless [`ShmConfig::longread_min`] says
//! otherwise, or the endpoint is crowded (more endpoints than CPUs:
//! `crowd.rs`), when messages above the eager size go by long-read.
//!
//! Raw address: `gid` = the host's boot ID (processes of one boot share
//! memory), `qpn` = endpoint id, `connid` = random per open. An entry
//! carries the sender's endpoint id *and* connid, so packets of an earlier
//! process at the same endpoint id are never attributed to its successor.
//!
//! Lifecycle: a close sets the closed bit of its ring's tail, so that sends
//! to it fail at once, writes a close notice into the rings of the peers it
//! knows, and removes its segment and FIFO. A segment whose owner died (its
//! pid gone, or reused by another process: the start time differs) is
//! stale, and every open removes the stale segments of its prefix. Peers
//! are checked the same way every `peer_check` interval, and a peer whose
//! process an RMA finds gone at once; a dead peer is reported lost, and
//! every operation towards it fails.
//!
//! Trust: peers are processes of the same user, who could ptrace each other
//! anyway; their packets are still parsed as untrusted input by the engine.
//! What the owner's device does itself it checks against its own state, not
//! the segment's words that peers write: RDMA requests in its ring against
//! its own record of its registrations (the table is the peers' copy), a
//! hold on its tail against its parked packets; a scribbled entry or tail
//! costs a skipped line or a bounded search, never a stray write or a hang
//! (`tests/shm_hostile.rs` says what each scribble does).

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
mod crowd;
mod device;
mod far;
mod grow;
mod help;
mod lag;
mod life;
mod liveness;
mod mrtable;
mod produce;
mod ringrma;
mod segment;
mod shape;
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
const LAYOUT_VERSION: u32 = 9;
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
    /// The peer's ring head as last read (see `produce.rs`).
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
    /// This endpoint's registrations, by key: their table entries and
    /// what they grant, kept here as well as in the table, which any
    /// process of the user can write (`mrtable::Own`).
    mrs: FxHashMap<u64, mrtable::Own>,
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
    /// The ring's growth (`grow.rs`).
    grow: grow::Growth,
    /// Crowded mode (`crowd.rs`).
    crowd: crowd::Crowd,
    /// Changes whenever a peer starts or stops counting as far (its
    /// long-read size with it: `Device::caps_epoch`).
    far_epoch: u32,
    /// Two-handed reads (`help.rs`).
    help: help::Help,
    /// Peers found lost at the last peer check (they count for no crowd).
    lost_peers: usize,
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

    /// The raw address of endpoint `epid` of `connid` on this host.
    fn raw_of(&self, epid: u32, connid: u32) -> RawAddr {
        RawAddr::new(self.gid, epid as u16, connid)
    }

    /// The peers inserted but this endpoint itself and those found lost
    /// (crowded mode's count).
    fn others(&self) -> usize {
        let me = usize::from(self.by_id.contains_key(&(self.epid, self.connid)));
        self.by_id.len().saturating_sub(me + self.lost_peers)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_grow;
#[cfg(test)]
mod tests_help;
#[cfg(test)]
mod tests_life;
