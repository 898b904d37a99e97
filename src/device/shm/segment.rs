//! The shared-memory segment itself: the mapping, the header's field
//! offsets, segment names, and finding and removing the segments of
//! processes that are gone. The ring's shape is `shape.rs`.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::{HDR_LEN, LAYOUT_VERSION, MAGIC};
use crate::status::Status;

pub(super) use super::shape::{entry_len, Shape};

/// A mapped segment.
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    pub(super) len: usize,
}

impl Mapping {
    /// Maps memory that is allocated whole (an allocation peers share,
    /// `alloc.rs`), its page tables filled at once (`MAP_POPULATE`).
    /// Segments, whose rings grow, are mapped by [`Self::map_sparse`] and
    /// filled in parts: either way, where page tables are filled late, the
    /// first pass of packets through the ring takes a minor page fault for
    /// each of its pages, in both processes (every 64th small message,
    /// every 4 KiB one), which shows in a ping-pong's tail latency
    /// (docs/performance.md, "Ring layout").
    pub(super) fn map(fd: RawFd, len: usize) -> Result<Mapping, Status> {
        Self::map_at(fd, len, 0)
    }

    /// [`Self::map`] of `len` bytes from file offset `off` (a multiple of
    /// the page size).
    pub(super) fn map_at(fd: RawFd, len: usize, off: u64) -> Result<Mapping, Status> {
        Self::map_with(fd, len, off, libc::MAP_SHARED | libc::MAP_POPULATE)
    }

    /// Maps a segment whose memory is allocated only in part (a ring
    /// that grows, `grow.rs`): page tables are filled by [`Self::populate`]
    /// for the parts allocated, since filling them for a hole would
    /// allocate it.
    pub(super) fn map_sparse(fd: RawFd, len: usize) -> Result<Mapping, Status> {
        Self::map_with(fd, len, 0, libc::MAP_SHARED)
    }

    fn map_with(fd: RawFd, len: usize, off: u64, flags: libc::c_int) -> Result<Mapping, Status> {
        let off = libc::off_t::try_from(off).map_err(|_| Status::Inval)?;
        // SAFETY: a fresh shared mapping of an open descriptor; checked for failure.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(Status::Io);
        }
        NonNull::new(p.cast()).map(|ptr| Mapping { ptr, len }).ok_or(Status::Io)
    }

    pub(super) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Fills the page tables of the `len` bytes at `off` (widened to whole
    /// pages, within the mapping) for writing, where the memory is
    /// allocated: a hole would be allocated, or refused where a store
    /// would raise SIGBUS, which is why the memory is allocated first
    /// (`posix_fallocate`). Only saves the first pass through the pages
    /// its minor faults: kernels before 5.14 refuse it, which is no error.
    pub(super) fn populate(&self, off: usize, len: usize) {
        let page = page_size();
        let start = off / page * page;
        let end = (off + len).next_multiple_of(page).min(self.len);
        if start < end {
            // SAFETY: a range of our own mapping; MADV_POPULATE_WRITE
            // changes no contents.
            unsafe { libc::madvise(self.base().add(start).cast(), end - start, libc::MADV_POPULATE_WRITE) };
        }
    }

    /// The `len` bytes at `off` (8-aligned, in bounds: checked once here)
    /// for field accesses without a check each.
    #[inline(always)]
    pub(super) fn block(&self, off: usize, len: usize) -> Block<'_> {
        assert!(off % 8 == 0 && off.checked_add(len).is_some_and(|end| end <= self.len));
        Block { at: self.base().wrapping_add(off), len, _map: std::marker::PhantomData }
    }

    /// An atomic u64 at `off` (8-aligned, in bounds).
    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds and aligned (mmap is page-aligned); shared memory
        // is accessed only through atomics or after publication.
        unsafe { &*self.base().add(off).cast::<AtomicU64>() }
    }

    /// The header's atomic u64 at `OFF`, without a run-time bounds check:
    /// every mapping holds a whole header (`open_existing` and `create`
    /// check the length first), and `OFF` is checked against it at compile
    /// time. For the send path's fields (the tail).
    pub(super) fn hdr_u64<const OFF: usize>(&self) -> &AtomicU64 {
        const { assert!(OFF % 8 == 0 && OFF + 8 <= super::HDR_LEN) };
        // SAFETY: within the header, which every mapping holds; aligned.
        unsafe { &*self.base().add(OFF).cast::<AtomicU64>() }
    }

    /// [`Self::hdr_u64`] for a u32 field (the sleeping flag).
    pub(super) fn hdr_u32<const OFF: usize>(&self) -> &AtomicU32 {
        const { assert!(OFF % 4 == 0 && OFF + 4 <= super::HDR_LEN) };
        // SAFETY: as `hdr_u64`.
        unsafe { &*self.base().add(OFF).cast::<AtomicU32>() }
    }

    /// An atomic u32 at `off` (4-aligned, in bounds).
    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as `u64_at`.
        unsafe { &*self.base().add(off).cast::<AtomicU32>() }
    }

    /// The header of the ring entry at `off`, unchecked: the receive path
    /// reads every packet's header through it, and the ring's arithmetic
    /// already keeps entries aligned and inside the ring.
    ///
    /// # Safety
    /// `off` must be 8-aligned with the whole header within the mapping
    /// (an entry's offset in a ring whose [`Shape`] is valid for it).
    pub(super) unsafe fn entry_at(&self, off: usize) -> &EntryHdr {
        debug_assert!(off % 8 == 0 && off + std::mem::size_of::<EntryHdr>() <= self.len);
        // SAFETY: in bounds and aligned by the caller's promise; `EntryHdr`
        // is atomics only.
        unsafe { &*self.base().add(off).cast::<EntryHdr>() }
    }

    /// The address of byte `off`, unchecked: for the ring's hot paths,
    /// whose offsets are in bounds by the ring's arithmetic.
    ///
    /// # Safety
    /// `off` must be within the mapping.
    #[inline(always)]
    pub(super) unsafe fn ptr_at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.len);
        // SAFETY: in bounds by the caller's promise.
        unsafe { self.base().add(off) }
    }

    /// `len` bytes at `off`.
    ///
    /// # Safety
    /// `off + len` must be within the mapping.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn bytes(&self, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: in bounds by the caller's promise; the ring protocol gives
        // one side at a time the slot these bytes belong to.
        unsafe { std::slice::from_raw_parts_mut(self.base().add(off), len) }
    }
}

/// The header of a ring entry (`SLOT_HDR` bytes; layout at the top of
/// `mod.rs`): the seal word, then sender id and sender connid, then packet
/// length and the entry's span, each pair one little-endian word (low half
/// first), so that a producer writes the header in three stores.
#[repr(C)]
pub(super) struct EntryHdr {
    pub seal: AtomicU64,
    /// Sender endpoint id | sender connid << 32.
    pub ids: AtomicU64,
    /// Packet length | entry span << 32; the span's low bit is [`MORE`].
    pub sizes: AtomicU64,
}

/// The entry span's flag (spans are whole cache lines, so bit 0 is free):
/// the producer has a long stream queued behind this packet, and the owner
/// may leave it for a later poll while the producer writes on (the trail).
pub(super) const MORE: u32 = 1;

/// The entry span's flag of a close notice: an entry without a packet
/// that a closing endpoint writes into the rings of the peers it knows,
/// after its last packet to each, so that they fail their operations
/// towards it at once rather than at their next peer check.
pub(super) const CLOSE_NOTICE: u32 = 2;

/// The entry span's flag of a write-with-immediate notice: an entry
/// without a packet (length 0) whose payload bytes hold the immediate
/// data (u32) and the bytes written (u64), which a producer publishes
/// after its cross-memory-attach write into the owner's memory ended
/// (`Device::rdma_write_imm`).
pub(super) const WRITE_IMM: u32 = 4;

/// The entry span's flag of an RDMA request into the owner's ring, and of
/// its answer (`ringrma.rs`): entries without a packet.
pub(super) const RDMA_REQ: u32 = 8;
pub(super) const RDMA_RSP: u32 = 16;

/// The entry span's flag of a grow notice: the owner's own entry at the
/// position where it grew its ring (`grow.rs`); the next entry is at the
/// position the owner noted then, in the grown ring.
pub(super) const GROW_NOTICE: u32 = 32;

/// The entry span's flags of a help notice (`help.rs`): a reader asks the
/// owner of the memory it reads to copy chunks of it too. Both RDMA flags,
/// which no other entry carries together (the span has no free bit left).
pub(super) const HELP: u32 = RDMA_REQ | RDMA_RSP;

/// The span's low bits that are flags.
const SPAN_FLAGS: u32 = 63;

/// Bit 63 of a ring's tail: its owner has closed. Set with the same
/// atomic word that producers claim entries with, so that every claim
/// either precedes the close or fails (ring positions never reach 2^62).
pub(super) const CLOSED: u64 = 1 << 63;

/// Bit 62 of a ring's tail: its owner holds back new messages (it
/// deferred packets); producers claim only control packets meanwhile.
/// In the tail itself, so that a producer's one load of the word it
/// claims with tells it (no other line or word on the send path).
pub(super) const HELD: u64 = 1 << 62;

/// The tail's flag bits.
pub(super) const TAIL_FLAGS: u64 = CLOSED | HELD;

/// Bits 59-61 of a ring's tail: how many times the ring in use is halved
/// from the segment's capacity ([`Shape::in_use`]). In the tail, so that a
/// producer's one load tells it, and its claim's compare-and-swap fails
/// should the owner grow the ring meanwhile (ring positions stay below
/// 2^59: 18 years of a 1 GB/s stream).
pub(super) const SHRINK_SHIFT: u32 = 59;
pub(super) const SHRINK: u64 = 7 << SHRINK_SHIFT;

/// The tail's bits that are not its position.
pub(super) const TAIL_META: u64 = TAIL_FLAGS | SHRINK;

/// The ring position of a tail word (its flags and shrink cleared).
pub(super) fn tail_pos(word: u64) -> u64 {
    word & !TAIL_META
}

impl EntryHdr {
    /// The packet length, the entry's span as written (unchecked: see
    /// [`Shape::span_fits`]) and its [`MORE`] flag.
    #[inline(always)]
    pub(super) fn sizes(&self) -> (usize, usize, bool) {
        let (len, span) = halves(self.sizes.load(Ordering::Relaxed));
        (len as usize, (span & !SPAN_FLAGS) as usize, span & MORE != 0)
    }

    /// Whether the entry is a [`CLOSE_NOTICE`].
    pub(super) fn close_notice(&self) -> bool {
        halves(self.sizes.load(Ordering::Relaxed)).1 & CLOSE_NOTICE != 0
    }

    /// The flags of the entry's span.
    pub(super) fn flags(&self) -> u32 {
        halves(self.sizes.load(Ordering::Relaxed)).1 & SPAN_FLAGS
    }

    /// Whether the entry is a [`WRITE_IMM`] notice.
    pub(super) fn write_imm(&self) -> bool {
        halves(self.sizes.load(Ordering::Relaxed)).1 & WRITE_IMM != 0
    }
}

/// Two u32 halves of a header word.
pub(super) fn halves(w: u64) -> (u32, u32) {
    (w as u32, (w >> 32) as u32)
}

/// The header word of two u32 halves.
pub(super) fn word(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | u64::from(hi) << 32
}

const _: () = assert!(std::mem::size_of::<EntryHdr>() == super::SLOT_HDR);

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `map` mapped.
        unsafe { libc::munmap(self.base().cast(), self.len) };
    }
}

// SAFETY: the mapping is plain shared memory accessed through atomics and
// the ring protocol; moving it between threads is fine.
unsafe impl Send for Mapping {}

/// Bytes of a [`Mapping`] checked once ([`Mapping::block`]): its atomic
/// fields at offsets inside it.
pub(super) struct Block<'a> {
    at: *mut u8,
    len: usize,
    _map: std::marker::PhantomData<&'a Mapping>,
}

impl Block<'_> {
    /// The atomic u64 at `off` of the block (8-aligned, inside it: the
    /// callers' offsets are constants of the block's layout).
    #[inline(always)]
    pub(super) fn u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: inside the block, which `Mapping::block` checked to lie
        // in the mapping; 8-aligned (the block is, and `off` is); shared
        // memory is accessed through atomics only.
        unsafe { &*self.at.add(off).cast::<AtomicU64>() }
    }

    /// [`Self::u64`] for a u32 field.
    #[inline(always)]
    pub(super) fn u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as `u64`.
        unsafe { &*self.at.add(off).cast::<AtomicU32>() }
    }
}

/// Header field offsets.
pub(super) mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const RING_SHIFT: usize = 12;
    pub const MTU: usize = 20;
    pub const PID: usize = 24;
    pub const EPID: usize = 28;
    pub const CONNID: usize = 32;
    pub const CLOSING: usize = 36;
    pub const START: usize = 40;
    pub const SLEEPING: usize = 48;
    pub const SEAL: usize = 56;
    pub const TAIL: usize = 64;
    pub const HEAD: usize = 128;
    /// The owner's claim note as a producer: the entry it is claiming or
    /// writing in a peer's ring, as that ring would seal its start
    /// ([`super::Shape::sealed`]), 0 when none (`claims.rs`). Beside the
    /// head, a line only the owner writes.
    pub const NOTE: usize = 136;
    /// Nonzero: a producer found the ring full while it may still grow
    /// (`grow.rs`). Beside the head, which that producer has just read.
    pub const GROW: usize = 144;
    /// The owner's clock (`CLOCK_MONOTONIC`, µs) at one of its recent polls
    /// (`ShmDevice::stamp_progress`); a line of its own.
    pub const PROGRESS: usize = 192;
}

pub(super) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

pub(super) fn seg_name(prefix: &str, epid: u32) -> String {
    format!("{prefix}-{}-{epid}", uid())
}

pub(super) fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

pub(super) fn fifo_path(name: &str) -> String {
    format!("/dev/shm/{name}.fifo")
}

/// A process's start time (clock ticks since boot), to tell a pid's owner
/// from a later process that reused the pid.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The owner `pid` started at `start` still runs (a zombie does not count).
pub(super) fn alive(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
    let mut fields = after.split_whitespace();
    let state = fields.next();
    pid != 0 && state != Some("Z") && fields.nth(18).and_then(|t| t.parse().ok()) == Some(start)
}

/// Serialises endpoint creation and stale-segment removal between processes
/// (two opens that meet the same stale segment must not both remove it: the
/// second would remove the first's new segment). Held while open.
pub(super) struct OpenLock(RawFd);

impl OpenLock {
    pub(super) fn take() -> OpenLock {
        let dir = cstr("/dev/shm");
        // SAFETY: valid path; flock on the directory descriptor; failures
        // leave the lock untaken (creation is then only as safe as O_EXCL).
        unsafe {
            let fd = libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::flock(fd, libc::LOCK_EX);
            }
            OpenLock(fd)
        }
    }
}

impl Drop for OpenLock {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: closing our descriptor releases the lock.
            unsafe { libc::close(self.0) };
        }
    }
}

pub(super) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        // Fall back to the clock and the pid; keys then are only hard to guess.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        return t ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    }
    u64::from_le_bytes(b)
}

/// The host identity: the boot ID, as 16 bytes.
pub(super) fn host_gid() -> [u8; 16] {
    let mut gid = [0u8; 16];
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let hex: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        for (i, pair) in hex.chunks(2).take(16).enumerate() {
            let txt = std::str::from_utf8(pair).unwrap_or("0");
            gid[i] = u8::from_str_radix(txt, 16).unwrap_or(0);
        }
    }
    gid
}

/// Opens an existing segment read-write and maps it whole; checks its header.
pub(super) fn open_existing(name: &str) -> Result<(Mapping, Shape), Status> {
    let c = cstr(&format!("/{name}"));
    // SAFETY: valid NUL-terminated name.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR, 0) };
    if fd < 0 {
        return Err(Status::NoAddr);
    }
    let result = (|| {
        // SAFETY: fstat into a zeroed struct of the right type.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 || (st.st_size as usize) < HDR_LEN {
            return Err(Status::NoAddr);
        }
        let m = Mapping::map_sparse(fd, st.st_size as usize)?;
        if m.u64_at(off::MAGIC).load(Ordering::Acquire) != MAGIC
            || m.u32_at(off::VERSION).load(Ordering::Relaxed) != LAYOUT_VERSION
        {
            return Err(Status::NoAddr);
        }
        let shift = m.u32_at(off::RING_SHIFT).load(Ordering::Relaxed);
        let cap = 1usize.checked_shl(shift).filter(|_| shift < 40).unwrap_or(0);
        let mtu = m.u32_at(off::MTU).load(Ordering::Relaxed) as usize;
        let mut shape = Shape::with_cap(cap, mtu, m.u64_at(off::SEAL).load(Ordering::Relaxed));
        if !shape.valid(m.len) {
            return Err(Status::NoAddr);
        }
        shape.ring = shape.in_use(m.hdr_u64::<{ off::TAIL }>().load(Ordering::Acquire));
        // Page tables for what the owner has allocated (the header, the
        // ring in use, the registration table); the rest of the ring as it
        // grows (`grow.rs`).
        m.populate(0, HDR_LEN + shape.ring);
        m.populate(shape.mr_off(), shape.total() - shape.mr_off());
        Ok((m, shape))
    })();
    // SAFETY: closing the descriptor we opened; the mapping stays valid.
    unsafe { libc::close(fd) };
    result
}

/// The owner (pid, start time) of segment `name` (of any layout version),
/// from its header alone ([`header`]). `None` when it has no valid header.
fn owner(name: &str) -> Option<(u32, u64)> {
    let m = header(name)?;
    Some((m.u32_at(off::PID).load(Ordering::Relaxed), m.u64_at(off::START).load(Ordering::Relaxed)))
}

/// The header of segment `name`, mapped read-only, when it has the magic
/// word (of any layout version): only the header is mapped, so a huge
/// segment (or one whose owner died while allocating it) costs no more
/// than a small one.
fn header(name: &str) -> Option<Mapping> {
    let c = cstr(&format!("/{name}"));
    // SAFETY: valid NUL-terminated name.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDONLY, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fstat into a zeroed struct of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let big_enough = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as usize >= HDR_LEN;
    // SAFETY: a read-only shared mapping of the header of an open
    // descriptor (at least HDR_LEN bytes long); checked for failure.
    let p = if big_enough {
        unsafe { libc::mmap(std::ptr::null_mut(), HDR_LEN, libc::PROT_READ, libc::MAP_SHARED, fd, 0) }
    } else {
        libc::MAP_FAILED
    };
    // SAFETY: closing the descriptor we opened; the mapping stays valid.
    unsafe { libc::close(fd) };
    let ptr = NonNull::new(p.cast::<u8>()).filter(|_| p != libc::MAP_FAILED)?;
    let m = Mapping { ptr, len: HDR_LEN };
    // Every layout version keeps the owner at the same offsets: a live
    // endpoint of another rdm4 version is not taken for a dead one.
    (m.u64_at(off::MAGIC).load(Ordering::Acquire) == MAGIC).then_some(m)
}

/// The claim notes ([`off::NOTE`]) of the endpoints of `prefix` (of this
/// user and layout version) whose notes are set, each with its owner's pid
/// and start time; read after the caller's load of its ring's tail.
pub(super) fn claim_notes(prefix: &str) -> Vec<(u32, u64, u64)> {
    let lead = format!("{prefix}-{}-", uid()).len();
    segment_names(prefix)
        .iter()
        // Segments only (their names end in the endpoint id), not FIFOs
        // or allocations.
        .filter(|name| name.len() > lead && name.bytes().skip(lead).all(|b| b.is_ascii_digit()))
        .filter_map(|name| header(name))
        .filter(|m| m.u32_at(off::VERSION).load(Ordering::Relaxed) == LAYOUT_VERSION)
        .map(|m| {
            let note = m.u64_at(off::NOTE).load(Ordering::Acquire);
            (m.u32_at(off::PID).load(Ordering::Relaxed), m.u64_at(off::START).load(Ordering::Relaxed), note)
        })
        .filter(|&(_, _, note)| note != 0)
        .collect()
}

/// The names in `/dev/shm` of `prefix` (of this user): segments, their
/// FIFOs and their allocations' files.
fn segment_names(prefix: &str) -> Vec<String> {
    let lead = format!("{prefix}-{}-", uid());
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|name| name.starts_with(&lead)).collect()
}

/// True when the segment `name` exists and its owner is gone (or it was
/// never finished and is old); such a segment may be removed.
pub(super) fn is_stale(name: &str) -> bool {
    match owner(name) {
        Some((pid, start)) => !alive(pid, start),
        // No valid header (another layout, or its owner died while creating
        // it): stale unless someone is creating it right now.
        None => std::fs::metadata(format!("/dev/shm/{name}"))
            .and_then(|md| md.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(5)),
    }
}

pub(super) fn unlink_segment(name: &str) {
    let c = cstr(&format!("/{name}"));
    // SAFETY: valid NUL-terminated names; failure (already gone) is fine.
    unsafe {
        libc::shm_unlink(c.as_ptr());
        let f = cstr(&fifo_path(name));
        libc::unlink(f.as_ptr());
    }
}

/// Removes every stale segment of `prefix` (of this user), and wake-up
/// FIFOs left without their segment; returns how many segments.
pub fn remove_stale_segments(prefix: &str) -> usize {
    let _lock = OpenLock::take();
    remove_stale_locked(prefix)
}

/// [`remove_stale_segments`] with the [`OpenLock`] held (every open calls
/// it: the segments of processes that were killed or ended without
/// closing go at the next open of the prefix).
pub(super) fn remove_stale_locked(prefix: &str) -> usize {
    let names = segment_names(prefix);
    let mut n = 0;
    for name in &names {
        // A FIFO, or an allocation's file (`alloc.rs`), of a segment: it
        // goes with its segment (below, when that is stale, or now, when
        // its owner died between the unlinks).
        let owner = name.strip_suffix(".fifo").or_else(|| name.rsplit_once(".m").map(|(seg, _)| seg));
        match owner {
            Some(seg) if !names.iter().any(|m| m == seg) || is_stale(seg) => {
                let f = cstr(&format!("/dev/shm/{name}"));
                // SAFETY: valid NUL-terminated path; failure is fine.
                unsafe { libc::unlink(f.as_ptr()) };
            }
            Some(_) => {}
            None if is_stale(name) => {
                unlink_segment(name);
                n += 1;
            }
            None => {}
        }
    }
    n
}

/// The page size.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096)
}

/// Bytes `/dev/shm` has free for this user (`u64::MAX` when unknown).
pub(super) fn free_shm_bytes() -> u64 {
    let dir = cstr("/dev/shm");
    // SAFETY: statvfs into a zeroed struct of the right type.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(dir.as_ptr(), &mut st) } != 0 {
        return u64::MAX;
    }
    (st.f_bavail as u64).saturating_mul(st.f_frsize as u64)
}
