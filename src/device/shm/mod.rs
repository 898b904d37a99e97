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
use std::sync::atomic::{AtomicU64, Ordering};
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
mod device;
mod far;
mod lag;
mod mrtable;
mod ringrma;
mod segment;
mod trail;

use barrier::{asymmetric_barriers, prefetch, producer_fence, sleeper_fence};
use cma::cma_works;
pub use config::ShmConfig;
use mrtable::{MR_ENTRIES, MR_ENTRY_LEN};
pub use segment::remove_stale_segments;
use segment::{
    alive, cstr, entry_len, fifo_path, free_shm_bytes, host_gid, is_stale, off, open_existing, random_u64,
    remove_stale_locked, seg_name, start_time, unlink_segment, Mapping, OpenLock, Shape,
};

const MAGIC: u64 = u64::from_le_bytes(*b"rdm4shm1");
const LAYOUT_VERSION: u32 = 7;
const HDR_LEN: usize = 256;
const SLOT_HDR: usize = 24;
/// Most sends refused without a look at a full ring's head (see `Peer::full_skip`).
const FULL_WAIT_MAX: u32 = 16;
/// Endpoint ids scanned for a free one when none is asked for.
const EPID_SCAN: u32 = 4096;
/// Most cache lines of a reply asked for ahead (see [`reply_lines`]): the
/// least cap that does not slow 4 KiB replies; a higher one gains nothing
/// (docs/performance.md, "Reply lines").
const REPLY_LINES: usize = 8;

/// How many lines of the reply to the packet just handled to ask for
/// ahead ([`ShmDevice::prefetch_reply`]); 0: none. Only after the first
/// packet of a poll (`first`), and only when `answering`: this endpoint's
/// last packet was one it sent, as in a ping-pong or a request and its
/// response. A receiver of a one-way stream never asks: it would take the
/// line from its sender, which polls it, on every poll. As many lines as
/// the entry just taken spans (`span` bytes; a reply is often as long as
/// what it answers), at most [`REPLY_LINES`].
fn reply_lines(answering: bool, first: bool, span: usize) -> usize {
    if answering && first {
        (span / 64).clamp(1, REPLY_LINES)
    } else {
        0
    }
}

/// Asks for the cache line of ring position `pos` in the ring that `map`
/// holds, for writing or for reading ([`prefetch`]; any position will do).
#[inline(always)]
fn prefetch_pos<const FOR_WRITE: bool>(map: &Mapping, shape: &Shape, pos: u64) {
    prefetch::<FOR_WRITE>(map.base().wrapping_add(HDR_LEN + shape.at(pos)));
}

/// `CLOCK_MONOTONIC_COARSE`: milliseconds-grained, and cheap enough to read
/// on every poll.
/// `CLOCK_MONOTONIC` in microseconds: the same clock in every process.
pub(super) fn mono_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// A peer whose progress stamp is at most this old (µs) and that does not
/// sleep is taken to be polling (`ShmDevice::progressing`). The stamp is
/// written every 64th poll or packet, so a polling loop refreshes it every
/// few microseconds, a busy one (64 packets) within tens. Short, because
/// an operation sent through the ring of a target that has just stopped
/// calling the library waits for its next call.
const PROGRESS_RECENT_US: u64 = 50;

fn coarse_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The peer of `ah` among `peers`, if it is known and not lost (a free
/// function, so that the caller may still use the device's other fields).
fn peer_of(peers: &mut [Option<Peer>], ah: Ah) -> Result<&mut Peer, DevError> {
    match peers.get_mut(ah as usize).and_then(Option::as_mut) {
        Some(p) if p.lost => Err(DevError::Failed(Status::PeerUnreachable)),
        Some(p) => Ok(p),
        None => Err(DevError::Failed(Status::NoAddr)),
    }
}

/// Claims an entry of `need` bytes in `p`'s ring, and the padding up to
/// the ring's end before it when it would cross that end: returns the
/// position of the claim and the padding's length (the entry follows it).
/// `Again` when the ring is full, or when the packet is a new message
/// (`control` false) and the owner holds them back ([`segment::HELD`]);
/// `Failed(PeerUnreachable)` (and `p` marked
/// lost) when its owner has closed: the owner's close sets
/// [`segment::CLOSED`] in the tail with the same compare-and-swap word
/// that claims take, so no claim succeeds after it.
///
/// The claimed bytes are the caller's until it publishes them. The claim is
/// noted in `note` (this endpoint's [`off::NOTE`]) before the
/// compare-and-swap that makes it, and stays noted until the caller has
/// published its entry and clears the note; a claim that fails leaves it
/// clear (`claims.rs`). Offsets:
/// `at` is below `ring`, and the claim keeps an entry from crossing the
/// ring's end, so `HDR_LEN + at + span` stays within `HDR_LEN + ring`,
/// which `Shape::valid` bounds by the mapping.
#[inline(always)]
fn claim(p: &mut Peer, need: usize, control: bool, note: &AtomicU64) -> Result<(u64, usize), DevError> {
    let tail = p.map.hdr_u64::<{ off::TAIL }>();
    let ring = p.shape.ring;
    let mut word = tail.load(Ordering::Relaxed);
    // The entry most likely goes at `pos`: its line is asked for in
    // exclusive state now, so that the transfer from the owner (who
    // polls it) overlaps the claim and the packet's building instead
    // of waiting for the first store (docs/performance.md, "Other
    // prefetches").
    prefetch_pos::<true>(&p.map, &p.shape, word);
    loop {
        let flags = word & segment::TAIL_FLAGS;
        if flags != 0 {
            if flags & segment::CLOSED != 0 {
                p.lost = true;
                unnote(note);
                return Err(DevError::Failed(Status::PeerUnreachable));
            }
            if !control {
                // A new message to an owner that holds them back.
                unnote(note);
                return Err(DevError::Again);
            }
        }
        let pos = word ^ flags;
        let left = ring - p.shape.at(pos);
        let pad = if need <= left { 0 } else { left };
        let end = pos + (pad + need) as u64;
        if end > p.head_seen + ring as u64 {
            if p.full_skip > 0 {
                p.full_skip -= 1;
                unnote(note);
                return Err(DevError::Again);
            }
            // Looks full: has the owner read further since?
            p.head_seen = p.map.u64_at(off::HEAD).load(Ordering::Acquire);
            if end > p.head_seen + ring as u64 {
                p.full_wait = (p.full_wait * 2 + 1).min(FULL_WAIT_MAX);
                p.full_skip = p.full_wait;
                unnote(note);
                return Err(DevError::Again);
            }
            p.full_wait = 0;
        }
        // Noted before the claim is made (released by the exchange): an
        // owner that sees the claim in its tail sees the note, or the
        // entry published.
        note.store(p.shape.sealed(pos), Ordering::Release);
        match tail.compare_exchange_weak(word, end | flags, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return Ok((pos, pad)),
            Err(now) => word = now,
        }
    }
}

/// [`claim`] of an entry of `need` bytes with the padding before it, if
/// any, published: the entry's position. The claim stays noted in `note`
/// until the caller has published the entry ([`unnote`]).
#[inline(always)]
fn claim_entry(p: &mut Peer, need: usize, control: bool, ids: (u32, u32), note: &AtomicU64) -> Result<u64, DevError> {
    let (mut pos, pad) = claim(p, need, control, note)?;
    if pad > 0 {
        // SAFETY: the padding's entry, in bounds (see `claim`).
        publish(&p.shape, unsafe { p.map.ptr_at(HDR_LEN + p.shape.at(pos)) }, pos, ids, 0, pad as u32);
        pos += pad as u64;
    }
    Ok(pos)
}

/// Publishes the claimed entry at `entry` (ring position `pos`): the
/// sender's ids (`me`, `connid`), packet length and span (with its
/// flags), then the seal.
#[inline(always)]
fn publish(shape: &Shape, entry: *mut u8, pos: u64, (me, connid): (u32, u32), len: usize, span: u32) {
    // SAFETY: a claimed entry, in bounds (see `claim`); 8-aligned (entries
    // are whole cache lines); `EntryHdr` is atomics only.
    let h = unsafe { &*entry.cast::<segment::EntryHdr>() };
    h.ids.store(segment::word(me, connid), Ordering::Relaxed);
    h.sizes.store(segment::word(len as u32, span), Ordering::Relaxed);
    h.seal.store(shape.sealed(pos), Ordering::Release);
}

/// Clears this endpoint's claim note (`note`): after the entry it claimed
/// was published (after its seal, so that an owner that reads the note
/// cleared finds the entry sealed), or when the claim failed.
#[inline(always)]
fn unnote(note: &AtomicU64) {
    note.store(0, Ordering::Release);
}

/// The most slots, `slots` halved as often as needed, whose segment fits
/// in `free` bytes; `None` when not even a ring of two full-size packets
/// (or of `slots`, if fewer) fits.
fn fitting_slots(slots: u32, mtu: u32, free: u64) -> Option<u32> {
    let mut slots = slots.max(1);
    loop {
        let total = Shape::new(slots, mtu, 1 << 63).total() as u64;
        if total <= free {
            return Some(slots);
        }
        if slots <= 2 {
            return None;
        }
        slots /= 2;
    }
}

impl ShmDevice {
    /// A fresh random registration key.
    fn next_key(&mut self) -> u64 {
        if self.keys.is_empty() {
            let mut b = [0u8; 32 * 8];
            // SAFETY: writes at most `b.len()` bytes into `b`.
            let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
            if n == b.len() as isize {
                self.keys.extend(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))));
            } else {
                self.keys.push(random_u64());
            }
        }
        self.keys.pop().unwrap_or_else(random_u64)
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
    /// Opens an endpoint with the settings of the environment
    /// (`Status::Inval` when one is not valid, see [`ShmConfig::from_env`]).
    pub fn open() -> Result<ShmDevice, Status> {
        ShmDevice::open_with(ShmConfig::from_env()?)
    }

    /// Opens an endpoint: removes the segments of the prefix whose owners
    /// are gone (killed, or ended without closing), then creates its own.
    pub fn open_with(cfg: ShmConfig) -> Result<ShmDevice, Status> {
        if !cfg.valid() {
            return Err(Status::Inval);
        }
        asymmetric_barriers(); // register now, not on the first send
        let ids: Vec<u32> = match cfg.epid {
            Some(id) => vec![id],
            None => (0..EPID_SCAN).collect(),
        };
        let _lock = OpenLock::take();
        remove_stale_locked(&cfg.prefix);
        for epid in ids {
            let name = seg_name(&cfg.prefix, epid);
            match Self::create(&cfg, &name, epid) {
                Ok(dev) => return Ok(dev),
                Err(Status::Busy) if is_stale(&name) => {
                    unlink_segment(&name);
                    if let Ok(dev) = Self::create(&cfg, &name, epid) {
                        return Ok(dev);
                    }
                }
                Err(Status::Busy) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Status::Busy)
    }

    /// Sizes the new segment and has its memory allocated now: a tmpfs that
    /// runs out (a container's small `/dev/shm`) fails here, cleanly, rather
    /// than with SIGBUS when the ring first reaches a page it cannot have.
    /// The ring is first sized to the free space of `/dev/shm` (halved
    /// until it fits, down to two full-size packets), so that nothing is
    /// allocated that cannot be had; then, should the allocation still fail
    /// (another process took the space meanwhile), halved again. `None`
    /// when not even the smallest ring fits.
    fn size_segment(fd: RawFd, cfg: &ShmConfig) -> Option<Shape> {
        let seal = random_u64() | 1 << 63;
        let mut slots = fitting_slots(cfg.slots, cfg.mtu, free_shm_bytes())?;
        loop {
            let shape = Shape::new(slots, cfg.mtu, seal);
            let len = shape.total() as libc::off_t;
            // SAFETY: sizing and allocating the descriptor we created.
            let ok = unsafe { libc::ftruncate(fd, len) == 0 && libc::posix_fallocate(fd, 0, len) == 0 };
            if ok {
                return Some(shape);
            }
            slots = fitting_slots(slots / 2, cfg.mtu, shape.total() as u64 - 1)?;
        }
    }

    fn create(cfg: &ShmConfig, name: &str, epid: u32) -> Result<ShmDevice, Status> {
        let c = cstr(&format!("/{name}"));
        // SAFETY: valid name; exclusive creation.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) };
        if fd < 0 {
            return Err(if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                Status::Busy
            } else {
                Status::Io
            });
        }
        let shape = Self::size_segment(fd, cfg);
        let map = match shape {
            Some(shape) => Mapping::map(fd, shape.total()).map(|m| (m, shape)),
            None => Err(Status::NoMem),
        };
        // SAFETY: closing our descriptor; the mapping keeps the memory.
        unsafe { libc::close(fd) };
        let (map, shape) = match map {
            Ok(m) => m,
            Err(e) => {
                unlink_segment(name);
                return Err(e);
            }
        };
        let pid = std::process::id();
        let connid = random_u64() as u32;
        let set32 = |o, v| map.u32_at(o).store(v, Ordering::Relaxed);
        set32(off::VERSION, LAYOUT_VERSION);
        set32(off::RING_SHIFT, shape.ring.trailing_zeros());
        set32(off::MTU, cfg.mtu);
        set32(off::PID, pid);
        set32(off::EPID, epid);
        set32(off::CONNID, connid);
        map.u64_at(off::START).store(start_time(pid).unwrap_or(0), Ordering::Relaxed);
        map.u64_at(off::SEAL).store(shape.seal, Ordering::Relaxed);
        // The FIFO for wake-ups.
        let fpath = cstr(&fifo_path(name));
        // Opened for reading and writing: the owner then always holds a
        // writer, so the read end never reports POLLHUP when a peer that
        // woke it closes its own writer (a read-only end would poll ready
        // forever after the first such peer, spinning every poll/epoll
        // loop and `rdm4_wait`). Linux opens a FIFO O_RDWR without blocking.
        // SAFETY: valid path; a leftover FIFO of a dead owner is replaced.
        let fifo = unsafe {
            libc::unlink(fpath.as_ptr());
            libc::mkfifo(fpath.as_ptr(), 0o600);
            libc::open(fpath.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
        };
        if fifo < 0 {
            unlink_segment(name);
            return Err(Status::Io);
        }
        map.u64_at(off::MAGIC).store(MAGIC, Ordering::Release);
        Ok(ShmDevice {
            map,
            shape,
            name: name.to_string(),
            fifo,
            epid,
            connid,
            gid: host_gid(),
            head: 0,
            cma: cfg.cma && cma_works(),
            cfg: cfg.clone(),
            peers: Vec::new(),
            by_id: FxHashMap::default(),
            last_from: None,
            events: Vec::new(),
            mrs: FxHashMap::default(),
            mrs_closing: Vec::new(),
            allocs: FxHashMap::default(),
            shared_fds: FxHashMap::default(),
            peer_maps: alloc::PeerMaps::default(),
            ring: ringrma::RingRdma::default(),
            mapped_copies: 0,
            last_check: coarse_now(),
            fd_mode: false,
            keys: Vec::new(),
            polls: 0,
            streaming: false,
            trail: cfg.trail_bytes().min(shape.ring / 4) as u64,
            held: 0,
            more: false,
            lag: cfg.lag.min(shape.ring / 8).next_multiple_of(64) as u64,
            lag_state: lag::Lag::default(),
            vanished: false,
            control: false,
            parked: std::collections::VecDeque::new(),
            redeliver: false,
            dead_claims: claims::DeadClaims::default(),
        })
    }

    /// Ends the endpoint as peers see a process that dies without closing:
    /// marked closing for their next peer check, but with no close notice
    /// and no closed tail (for tests of that check).
    #[doc(hidden)]
    pub fn vanish(mut self) {
        self.map.u32_at(off::CLOSING).store(1, Ordering::Release);
        self.vanished = true;
    }

    /// This endpoint's id (its `qpn`).
    pub fn epid(&self) -> u32 {
        self.epid
    }

    /// The segment's name under `/dev/shm`.
    pub fn segment_name(&self) -> &str {
        &self.name
    }

    /// Hands up to `max` waiting packets to `f` (`Device::recv` after its
    /// empty check).
    #[inline(never)]
    fn recv_batch<R: Flow>(&mut self, max: usize, mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        let mut n = 0;
        // The last packet this endpoint moved was one it sent: packets now
        // are likely answers, which the application answers in turn.
        let answering = self.streaming;
        while n < max {
            let at = self.shape.at(self.head);
            let e = HDR_LEN + at;
            // SAFETY: `at` is a multiple of 64 below `ring` (the head moves
            // by whole lines: `span` below is one), so the entry's header is
            // 8-aligned and inside the ring, which our own valid `shape`
            // puts inside the mapping.
            let h = unsafe { self.map.entry_at(e) };
            if h.seal.load(Ordering::Acquire) != self.shape.sealed(self.head) {
                break;
            }
            let (from, connid) = segment::halves(h.ids.load(Ordering::Relaxed));
            let (len, span, more) = h.sizes();
            // A span no producer writes is a peer scribbling on the segment
            // (which any process of the user can): skip one line and read
            // nothing.
            let sane = self.shape.span_fits(at, span);
            let span = if sane { span } else { 64 };
            if more && sane && self.trail > 0 && self.trailing(span) {
                break;
            }
            // Whether another entry follows is the next question. After the
            // first packet of a poll its line is fetched while this packet
            // is handled (`at` of any position is within the ring): a
            // ping-pong's receiver then finds it at hand. Not after later
            // ones: a receiver that streams has caught up with the sender,
            // and fetching the line the sender writes next takes it away
            // from the sender every message, which slows 8 B streams
            // (docs/performance.md, "Other prefetches").
            if n == 0 {
                prefetch_pos::<false>(&self.map, &self.shape, self.head + span as u64);
            }
            // Packets are delivered even when their sender has closed since:
            // they were sent while it was open (the device is reliable).
            let mut go_on = true;
            if sane && self.shape.holds(len, span) {
                let ah = match self.last_from {
                    Some((id, ah)) if id == (from, connid) => ah,
                    _ => {
                        let ah = self.by_id.get(&(from, connid)).copied();
                        self.last_from = Some(((from, connid), ah));
                        ah
                    }
                };
                // SAFETY: `SLOT_HDR + len <= span <= ring - at` (`holds` and
                // `span_fits`, above), so the packet ends inside the ring.
                let pkt = unsafe { self.map.bytes(e + SLOT_HDR, len) };
                let verdict = f(ah, pkt, None);
                if verdict.defer() {
                    self.park((from, connid), pkt.to_vec());
                }
                go_on = verdict.go_on();
                let lines = reply_lines(answering, n == 0, span);
                if lines > 0 {
                    self.prefetch_reply(ah, lines);
                }
            } else if sane && len == 0 {
                self.notice(e, span, (from, connid));
            }
            self.head += span as u64;
            n += 1;
            if !go_on {
                break;
            }
        }
        if n > 0 {
            self.taken();
        }
        n
    }

    /// A claim on `ah`'s ring failed with `e`: when the owner has closed
    /// (the peer is marked lost), every operation towards it fails now.
    #[cold]
    #[inline(never)]
    fn claim_failed(&mut self, ah: Ah, e: DevError) -> DevError {
        if self.peers.get(ah as usize).and_then(Option::as_ref).is_some_and(|p| p.lost) {
            self.events.push(DevEvent::PeerLost { ah });
        }
        e
    }

    /// Keeps a packet the engine deferred; the first one makes producers
    /// hold back new messages.
    #[cold]
    fn park(&mut self, from: (u32, u32), pkt: Vec<u8>) {
        if self.parked.is_empty() {
            self.map.hdr_u64::<{ off::TAIL }>().fetch_or(segment::HELD, Ordering::AcqRel);
        }
        self.parked.push_back(Parked { from, pkt });
    }

    /// Hands the parked packets to `f` again, up to `max`, in their order;
    /// those it defers again stay, in order. When none is left, producers
    /// may send new messages again.
    #[cold]
    fn recv_parked<R: Flow>(
        &mut self,
        max: usize,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let by_id = &self.by_id;
        let (n, rest) = super::redeliver_parked(&mut self.parked, max, |p| by_id.get(&p.from).copied(), |p| &p.pkt, f);
        self.redeliver = rest;
        if self.parked.is_empty() {
            self.map.hdr_u64::<{ off::TAIL }>().fetch_and(!segment::HELD, Ordering::AcqRel);
        }
        n
    }

    /// An entry without a packet at ring offset `e` (its `span` checked)
    /// from endpoint `epid` of `connid`: a close notice, a write-with-
    /// immediate notice, an RDMA request or answer (`ringrma.rs`), or
    /// padding.
    #[cold]
    #[inline(never)]
    fn notice(&mut self, e: usize, span: usize, (epid, connid): (u32, u32)) {
        // SAFETY: as in `recv_batch`: an entry header inside the ring.
        let h = unsafe { self.map.entry_at(e) };
        let flags = h.flags();
        if flags & segment::RDMA_REQ != 0 {
            self.serve_ring_rdma(e, span, (epid, connid));
        } else if flags & segment::RDMA_RSP != 0 {
            self.ring_rdma_answered(e, span, (epid, connid));
        } else if h.close_notice() {
            self.close_noticed(epid, connid);
        } else if h.write_imm() {
            // SAFETY: `SLOT_HDR + 12 <= 64 <=` the entry's span (checked
            // by the caller), inside the ring.
            let b = unsafe { self.map.bytes(e + SLOT_HDR, 12) };
            let imm = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let len = u64::from_le_bytes([b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]]);
            let ah = self.by_id.get(&(epid, connid)).copied();
            self.events.push(DevEvent::WriteImm { ah, imm, len });
        }
    }

    /// A close notice from endpoint `epid` of `connid`: the peer is lost
    /// (its packets before the notice have all been handed over).
    #[cold]
    fn close_noticed(&mut self, epid: u32, connid: u32) {
        let Some(&ah) = self.by_id.get(&(epid, connid)) else { return };
        if let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut).filter(|p| !p.lost) {
            p.lost = true;
            self.events.push(DevEvent::PeerLost { ah });
        }
    }

    /// After a call that took packets: hands the slots read back to the
    /// producers, and notes that the last packet moved was a received one.
    #[inline(always)]
    fn taken(&mut self) {
        self.streaming = false;
        self.held = 0;
        self.map.u64_at(off::HEAD).store(self.head, Ordering::Release);
        if self.fd_mode {
            self.drain_fifo_kept();
        }
    }

    /// Asks, in exclusive state, for the first `lines` cache lines of
    /// `ah`'s ring where a packet to it would go now ([`reply_lines`]
    /// says when and how many). The transfer of those lines from the peer,
    /// which polls the first of them, then overlaps the application's
    /// handling of the packet just taken and its call to send, where
    /// `send_with` would ask only after its claim. Right after the packet,
    /// not earlier or after the whole poll: a peer that polls the line
    /// takes it back within a few polls (docs/performance.md, "Reply
    /// lines").
    #[inline(always)]
    fn prefetch_reply(&self, ah: Option<Ah>, lines: usize) {
        if let Some(Some(p)) = ah.and_then(|a| self.peers.get(a as usize)) {
            let pos = segment::tail_pos(p.map.u64_at(off::TAIL).load(Ordering::Relaxed));
            for line in 0..lines {
                prefetch_pos::<true>(&p.map, &p.shape, pos + (line * 64) as u64);
            }
        }
    }

    /// True when a packet waits in the ring.
    #[inline(always)]
    fn ready(&self) -> bool {
        let word = self.map.u64_at(HDR_LEN + self.shape.at(self.head)).load(Ordering::Acquire);
        word == self.shape.sealed(self.head)
    }

    /// Blocks until a packet may be waiting or `timeout_ms` passed (negative:
    /// forever). Returns true when woken (or data was already there).
    pub fn wait(&mut self, timeout_ms: i32) -> bool {
        let sleeping = self.map.u32_at(off::SLEEPING);
        sleeping.store(1, Ordering::SeqCst);
        sleeper_fence();
        if self.ready() {
            if !self.fd_mode {
                sleeping.store(0, Ordering::SeqCst);
            }
            return true;
        }
        let mut pfd = libc::pollfd { fd: self.fifo, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        self.drain_fifo();
        if !self.fd_mode {
            self.map.u32_at(off::SLEEPING).store(0, Ordering::SeqCst);
        }
        n > 0 || self.ready()
    }

    fn drain_fifo(&self) {
        let mut sink = [0u8; 64];
        // SAFETY: reading into a local buffer from our non-blocking FIFO.
        while unsafe { libc::read(self.fifo, sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
    }

    /// In fd mode (the descriptor handed out is level-triggered): empties
    /// the FIFO, then leaves one wake-up in it if a packet waits. A wake-up
    /// whose packet a poll already took is so not left behind (the fd would
    /// poll readable with nothing to do, for ever), and one drained while
    /// its packet still waits is put back. A packet published after the
    /// check writes its own wake-up after it.
    fn drain_fifo_kept(&self) {
        self.drain_fifo();
        if self.ready() || (self.redeliver && !self.parked.is_empty()) {
            self.wake_own();
        }
    }

    /// Writes one wake-up into this endpoint's own FIFO.
    fn wake_own(&self) {
        // SAFETY: writing one byte from a local to our own FIFO (opened
        // read-write); a full FIFO (EAGAIN) already wakes.
        unsafe { libc::write(self.fifo, [1u8].as_ptr().cast(), 1) };
    }

    /// A descriptor that polls readable when [`ShmDevice::wait`] would wake.
    /// Set the sleeping flag with [`ShmDevice::arm`] before polling it.
    pub fn fd(&self) -> RawFd {
        self.fifo
    }

    /// Asks producers to signal the FIFO; returns false if a packet is already
    /// waiting (then do not block).
    pub fn arm(&mut self) -> bool {
        self.map.u32_at(off::SLEEPING).store(1, Ordering::SeqCst);
        sleeper_fence();
        !self.ready()
    }

    /// Publishes the notice entry claimed at `pos` in `p`'s ring (`need`
    /// bytes, span flags `flag`; 0: padding), clears the claim's `note`
    /// and wakes the owner if it sleeps.
    fn publish_notice(p: &mut Peer, pos: u64, ids: (u32, u32), need: usize, flag: u32, note: &AtomicU64) {
        // SAFETY: the claimed entry, in bounds (see `claim`).
        let entry = unsafe { p.map.ptr_at(HDR_LEN + p.shape.at(pos)) };
        publish(&p.shape, entry, pos, ids, 0, need as u32 | flag);
        unnote(note);
        producer_fence();
        if p.map.hdr_u32::<{ off::SLEEPING }>().load(Ordering::SeqCst) != 0 {
            Self::wake(p);
        }
    }

    /// Signals a peer whose sleeping flag the caller saw set.
    #[cold]
    fn wake(peer: &mut Peer) {
        if peer.fifo.is_none() {
            let p = cstr(&fifo_path(&peer.name));
            // Opened read-write (Linux keeps such a FIFO open whatever the
            // other side does): a wake-up written after its owner died
            // then neither fails with EPIPE nor raises SIGPIPE, which would
            // end the application's process; it stays in the pipe (at most
            // its 64 KiB, then EAGAIN) until the peer is dropped.
            // SAFETY: valid path.
            let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
            if fd >= 0 {
                peer.fifo = Some(fd);
            }
        }
        if let Some(fd) = peer.fifo {
            // SAFETY: writing one byte from a local; a full FIFO (EAGAIN) already wakes.
            unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
        }
    }

    /// The periodic peer check. Every 64th call looks at the coarse clock
    /// (a plain read of the kernel's tick; the precise clock would cost a
    /// timer read on every poll) and checks the peers when `peer_check`
    /// has passed. Returns whether this was such a call (it may have
    /// queued events: a peer found gone).
    #[inline(always)]
    fn check_peers(&mut self) -> bool {
        self.polls = self.polls.wrapping_add(1);
        let due = self.polls % 64 == 0;
        if due {
            self.check_peers_now();
        }
        due
    }

    #[inline(never)]
    fn check_peers_now(&mut self) {
        self.stamp_progress();
        let now = coarse_now();
        if now.saturating_sub(self.last_check) < self.cfg.peer_check {
            return;
        }
        self.last_check = now;
        self.check_head();
        for (ah, slot) in self.peers.iter_mut().enumerate() {
            let Some(p) = slot.as_mut().filter(|p| !p.lost) else { continue };
            let closing = p.map.u32_at(off::CLOSING).load(Ordering::Acquire) != 0;
            if closing || !alive(p.pid, p.start) {
                p.lost = true;
                self.events.push(DevEvent::PeerLost { ah: ah as Ah });
            }
        }
    }

    fn peer(&mut self, ah: Ah) -> Result<&mut Peer, DevError> {
        peer_of(&mut self.peers, ah)
    }

    /// Publishes that this endpoint is polling now ([`off::PROGRESS`]):
    /// called every 64th poll or packet (`check_peers`), a clock read each.
    fn stamp_progress(&self) {
        self.map.u64_at(off::PROGRESS).store(mono_us(), Ordering::Relaxed);
    }

    /// Whether peer `ah` polled in the last [`PROGRESS_RECENT_US`] µs and
    /// is not asleep in a wait (`Device::peer_progressing`); never with
    /// [`ShmConfig::ring_rma`] off.
    pub(super) fn progressing(&mut self, ah: Ah) -> bool {
        if !self.cfg.ring_rma {
            return false;
        }
        let Ok(p) = self.peer(ah) else { return false };
        let stamp = p.map.u64_at(off::PROGRESS).load(Ordering::Relaxed);
        let asleep = p.map.hdr_u32::<{ off::SLEEPING }>().load(Ordering::Relaxed) != 0;
        !asleep && stamp != 0 && mono_us().saturating_sub(stamp) <= PROGRESS_RECENT_US
    }
}

impl Drop for ShmDevice {
    fn drop(&mut self) {
        if self.vanished {
            unlink_segment(&self.name);
            // SAFETY: closing descriptors we own.
            unsafe { libc::close(self.fifo) };
            return;
        }
        // From here on no producer claims an entry: sends to this endpoint
        // fail at once (`claim`).
        self.map.hdr_u64::<{ off::TAIL }>().fetch_or(segment::CLOSED, Ordering::AcqRel);
        self.release_all();
        self.map.u32_at(off::CLOSING).store(1, Ordering::Release);
        // Tell the peers it knows, after its last packet to each: they
        // fail their operations towards it at their next poll. A peer
        // whose ring is full learns it at its next send or peer check.
        let ids = (self.epid, self.connid);
        let need = entry_len(0);
        let note = self.map.hdr_u64::<{ off::NOTE }>();
        for p in self.peers.iter_mut().flatten().filter(|p| !p.lost) {
            p.full_skip = 0;
            if let Ok(pos) = claim_entry(p, need, true, ids, note) {
                Self::publish_notice(p, pos, ids, need, segment::CLOSE_NOTICE, note);
            }
        }
        unlink_segment(&self.name);
        // SAFETY: closing descriptors we own.
        unsafe {
            libc::close(self.fifo);
            for p in self.peers.iter().flatten() {
                if let Some(fd) = p.fifo {
                    libc::close(fd);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_life;
