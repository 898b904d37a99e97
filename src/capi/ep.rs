//! Endpoints, address vector, memory registration and completions.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::types::*;
use super::{boundary, c_buf, lookup, EpInner};
use crate::device::shm::ShmDevice;
use crate::device::udp::UdpDevice;
use crate::device::{Access, Device};
use crate::engine::{Config, CqFlags, CqSink, Cqe, Endpoint, ADDR_UNSPEC};
use crate::pcap::PcapFile;
use crate::status::Status;
use crate::wire::RawAddr;

/// An open endpoint (opaque).
pub struct rdm4_ep {
    _opaque: [u8; 0],
}

/// Fills `attr` with the defaults (shared memory device, manual progress)
/// and sets `attr->size`.
///
/// Returns `RDM4_SUCCESS`, or `RDM4_EINVAL` when `attr` is NULL.
/// Thread safety: any thread; `attr` is the caller's and is only written.
#[no_mangle]
pub extern "C" fn rdm4_ep_attr_init(attr: *mut rdm4_ep_attr) -> i32 {
    boundary(|| {
        if attr.is_null() {
            return Err(Status::Inval);
        }
        // SAFETY: non-NULL and, by the contract, points to an rdm4_ep_attr.
        unsafe { attr.write(default_attr()) };
        Ok(0)
    })
}

/// The default attributes (what `rdm4_ep_attr_init` writes).
fn default_attr() -> rdm4_ep_attr {
    rdm4_ep_attr {
        size: std::mem::size_of::<rdm4_ep_attr>(),
        device: RDM4_DEVICE_DEFAULT,
        progress: RDM4_PROGRESS_MANUAL,
        medium_max: 0,
        unexpected_limit: 0,
        max_credits: 0,
        threading: RDM4_THREAD_SAFE,
        flags: 0,
        timeout_ms: 0,
        reserved: [0; 6],
    }
}

/// Reads the caller's attributes, honouring its `size`.
fn read_attr(attr: *const rdm4_ep_attr) -> Result<rdm4_ep_attr, Status> {
    let mut a = default_attr();
    if attr.is_null() {
        return Ok(a);
    }
    // SAFETY: non-NULL; the first field is the size the caller compiled.
    let size = unsafe { attr.cast::<usize>().read_unaligned() };
    let min = std::mem::offset_of!(rdm4_ep_attr, device) + 4;
    if size < min {
        return Err(Status::Inval);
    }
    let n = size.min(std::mem::size_of::<rdm4_ep_attr>());
    // SAFETY: the caller's struct has at least `size` readable bytes; we copy
    // the prefix we both know into our default-initialised struct.
    unsafe { std::ptr::copy_nonoverlapping(attr.cast::<u8>(), (&mut a as *mut rdm4_ep_attr).cast::<u8>(), n) };
    a.size = n;
    if a.progress > RDM4_PROGRESS_AUTO
        || a.threading > RDM4_THREAD_SINGLE
        || (a.threading == RDM4_THREAD_SINGLE && a.progress != RDM4_PROGRESS_MANUAL)
        || a.flags & !(RDM4_EP_LEGACY | RDM4_EP_DELIVERY_COMPLETE) != 0
        || a.reserved.iter().any(|&r| r != 0)
    {
        return Err(Status::Inval);
    }
    Ok(a)
}

/// Opens the engine over the device the attributes and `RDM4_DEVICE` ask for.
/// The variable overrides a valid attribute; an invalid attribute is
/// refused whatever the variable says.
fn open_endpoint(attr: &rdm4_ep_attr, cfg: Config) -> Result<super::CEp, Status> {
    if !matches!(attr.device, RDM4_DEVICE_DEFAULT | RDM4_DEVICE_SHM | RDM4_DEVICE_UDP) {
        return Err(Status::Inval);
    }
    let kind = match crate::env::word("RDM4_DEVICE", &["shm", "udp"])? {
        Some(0) => RDM4_DEVICE_SHM,
        Some(_) => RDM4_DEVICE_UDP,
        None => attr.device,
    };
    let pcap = PcapFile::from_env()?;
    Ok(match kind {
        RDM4_DEVICE_UDP => super::CEp::open_udp(UdpDevice::open()?, cfg, pcap),
        _ => super::CEp::open_shm(ShmDevice::open()?, cfg, pcap),
    })
}

/// Opens an endpoint.
///
/// `attr` may be NULL for the defaults; its device may be overridden with
/// `RDM4_DEVICE=shm|udp` and the device's own `RDM4_SHM_*` / `RDM4_UDP_*`
/// variables. On success `*ep` is the new endpoint, owned by the caller
/// until `rdm4_ep_close`.
///
/// The udp device binds one UDP socket to `RDM4_UDP_ADDR` (default: the
/// host's primary address) and `RDM4_UDP_PORT` (default: any); its sends
/// complete once the peer's device acknowledged them. A peer is given up
/// (`RDM4_EPEER`) only when it is gone: its host reports its port closed
/// (its process ended), it closed, or this endpoint awaits it and nothing
/// at all, not even an answer to a probe, came from it for
/// `RDM4_UDP_GIVEUP_MS` (default 5000). With manual progress the endpoint
/// gets a responder thread that stands in for the application while it
/// makes no call (it computes, sleeps, waits elsewhere): it acknowledges
/// what arrives, answers probes, serves RDMA of registered memory,
/// retransmits, and keeps packets for the next call (making `rdm4_ep_fd`
/// readable). It never runs the protocol: operations that need the
/// application's own progress wait for its next call (`man 7 rdm4`,
/// "Peers that pause, close or die").
///
/// With `attr->threading == RDM4_THREAD_SINGLE` the calls on the endpoint
/// take no lock, and the application must never let two of them overlap
/// (see `RDM4_THREAD_SINGLE`).
///
/// Returns `RDM4_SUCCESS`; `RDM4_EINVAL` (NULL `ep`, bad attributes —
/// unknown progress or threading mode, `RDM4_THREAD_SINGLE` with
/// `RDM4_PROGRESS_AUTO`, unknown flags, non-zero reserved fields — or bad
/// `RDM4_DEVICE` value, or a bad `RDM4_*` setting, `RDM4_LOG` included),
/// `RDM4_EBUSY` (no free
/// shared-memory endpoint id, or the UDP port is taken), `RDM4_ENOADDR`
/// (`RDM4_UDP_ADDR` is not an address of this host),
/// `RDM4_EIO` / `RDM4_ENOMEM` (the device could not be created; `RDM4_EIO`
/// also when the file `RDM4_PCAP` names cannot be created);
/// `RDM4_ENOMEM` also when 4096 endpoints of the process are open.
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_ep_open(attr: *const rdm4_ep_attr, ep: *mut *mut rdm4_ep) -> i32 {
    boundary(|| {
        if ep.is_null() {
            return Err(Status::Inval);
        }
        let a = read_attr(attr)?;
        crate::log::init()?;
        let mut cfg = Config::default();
        if a.medium_max != 0 {
            cfg.medium_max = a.medium_max;
        }
        if a.unexpected_limit != 0 {
            cfg.unexpected_limit = a.unexpected_limit;
        }
        if a.max_credits != 0 {
            cfg.max_credits = a.max_credits;
        }
        cfg.delivery_complete = a.flags & RDM4_EP_DELIVERY_COMPLETE != 0;
        cfg.legacy = match crate::env::word("RDM4_LEGACY", &["0", "1"])? {
            Some(v) => v == 1,
            None => a.flags & RDM4_EP_LEGACY != 0,
        };
        let timeout_ms = match crate::env::number_or_word::<u64>("RDM4_TIMEOUT_MS", 1..=u64::from(u32::MAX), &["off"])?
        {
            Some(Ok(ms)) => ms,
            Some(Err(_)) => RDM4_TIMEOUT_NONE,
            None => a.timeout_ms,
        };
        cfg.request_timeout_ns = match timeout_ms {
            0 => cfg.request_timeout_ns,
            RDM4_TIMEOUT_NONE => 0,
            ms => ms.saturating_mul(1_000_000),
        };
        if let Some(n) = crate::env::number::<usize>("RDM4_RUNT_SIZE", 0..=1 << 30)? {
            cfg.runt_size = n;
        }
        cfg.features_off = crate::env::bits("RDM4_FEATURES_OFF", &FEATURE_NAMES)?.unwrap_or(0);
        cfg.constant_header = crate::env::word("RDM4_CONSTANT_HEADER", &["0", "1"])? == Some(1);
        let mut inner = EpInner::new(open_endpoint(&a, cfg)?);
        inner.modes = (a.progress, a.threading);
        let device = if inner.ep.device_kind() == RDM4_DEVICE_UDP { "udp" } else { "shm" };
        crate::log::log!(crate::log::INFO, "endpoint opened on {device}: {:?}", inner.ep.addr());
        let responder = a.progress == RDM4_PROGRESS_MANUAL && inner.ep.wants_responder();
        if inner.ep.wants_responder() {
            super::responder::register_at_exit();
        }
        // A single-threaded application shares its endpoint with the
        // responder without a lock where the kernel offers the barrier
        // that takes (`capi::shared`); else the endpoint keeps its lock.
        let single = a.threading == RDM4_THREAD_SINGLE && (!responder || super::shared::barrier_available());
        let fds = inner.ep.responder_fds();
        let (slot, handle) = super::install(inner, single, responder).ok_or(Status::NoMem)?;
        if a.progress == RDM4_PROGRESS_AUTO || responder {
            let b = std::thread::Builder::new();
            let spawned = if responder {
                b.name("rdm4-responder".into())
                    .stack_size(256 << 10)
                    .spawn(move || super::responder::run(slot, handle, fds))
            } else {
                b.name("rdm4-progress".into()).spawn(move || progress_thread(slot, handle))
            };
            match spawned {
                Ok(t) => *slot.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t),
                Err(_) => {
                    let handle = handle as usize as *mut rdm4_ep;
                    let _ = super::uninstall(handle);
                    super::release_slot(handle);
                    return Err(Status::NoMem);
                }
            }
        }
        // SAFETY: non-NULL out-pointer.
        unsafe { ep.write(handle as usize as *mut rdm4_ep) };
        Ok(0)
    })
}

/// The extra features `RDM4_FEATURES_OFF` names (`Config::features_off`).
const FEATURE_NAMES: [(&str, u64); 7] = {
    use crate::wire::extra::*;
    [
        ("rdma_read", RDMA_READ),
        ("delivery_complete", DELIVERY_COMPLETE),
        ("connid_header", CONNID_HEADER),
        ("runt", RUNT),
        ("rdma_write", RDMA_WRITE),
        ("read_nack", READ_NACK),
        ("peer_error", PEER_ERROR),
    ]
};

/// The shortest and longest spin of the progress thread before it sleeps.
const SPIN_MIN: Duration = Duration::from_micros(50);
const SPIN_MAX: Duration = Duration::from_millis(2);

/// The automatic progress thread of the endpoint in `slot`, until it is
/// closed. While packets come or completions are made it polls on; with
/// work queued that only polling moves (the device refused packets for
/// now) it polls every 20 us; otherwise, after a spin (50 us to 2 ms:
/// doubled when a sleep is cut short within a millisecond, as in steady
/// traffic, halved when a sleep runs its course), it sleeps outside the
/// lock on the device's wake-up descriptor until a packet arrives, another
/// call wakes it (`EpInner::parked`) or the device's periodic work is due
/// (the shm peer check: `RDM4_SHM_PEER_CHECK_MS`). An idle endpoint so
/// costs a wake-up per peer check, not a core.
fn progress_thread(slot: &'static super::EpSlot, handle: u64) {
    let mut spin = SPIN_MIN;
    let mut idle_since: Option<Instant> = None;
    let mut next_scan = Instant::now();
    while !slot.stop.load(Ordering::Acquire) {
        // Ends when the endpoint is closed.
        let Some(mut g) = slot.lock_raw(handle) else { break };
        let Some(inner) = g.as_deref_mut() else { break };
        if Instant::now() >= next_scan {
            // As the responder does beside manual progress.
            next_scan = Instant::now() + super::responder::SCAN_EVERY;
            inner.ep.keepalive();
        }
        let rx = inner.ep.packets_in();
        let busy = inner.progress_once() || inner.ep.packets_in() != rx;
        if busy {
            idle_since = None;
            continue;
        }
        if inner.ep.has_queued_work() {
            drop(g);
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        if idle_since.get_or_insert_with(Instant::now).elapsed() < spin {
            drop(g);
            std::thread::yield_now();
            continue;
        }
        let Some((fd, ms)) = inner.ep.sleep_begin() else { continue };
        inner.parked += 1;
        drop(g);
        let t = Instant::now();
        poll_one(fd, ms);
        let slept = t.elapsed();
        let Some(mut g) = slot.lock_raw(handle) else { break };
        if let Some(inner) = g.as_deref_mut() {
            inner.parked -= 1;
            // The last sleeper out ends the sleep (another may still poll).
            if inner.parked == 0 {
                inner.ep.sleep_end();
            }
        }
        idle_since = None;
        spin = if slept < Duration::from_millis(1) { (spin * 2).min(SPIN_MAX) } else { (spin / 2).max(SPIN_MIN) };
    }
}

/// Waits up to `ms` milliseconds for `fd` to poll readable (or report an
/// error); true when it did.
pub(super) fn poll_one(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; the descriptor stays open while the
    // endpoint is (its close wakes the sleepers and waits for the thread;
    // `rdm4_wait` callers must not overlap `rdm4_ep_close`).
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// Closes an endpoint: stops its progress thread, cancels its operations
/// (their buffers are no longer used by the library when this returns),
/// removes its device resources. The handle is invalid afterwards.
///
/// Returns `RDM4_SUCCESS` or `RDM4_EBADHANDLE` (NULL, unknown or already
/// closed). Thread safety: any thread, but no other call may use `ep`
/// concurrently or afterwards.
#[no_mangle]
pub extern "C" fn rdm4_ep_close(ep: *mut rdm4_ep) -> i32 {
    boundary(|| {
        let (inner, thread) = super::uninstall(ep)?;
        if let Some(t) = thread {
            // It may sleep: wake it to see the endpoint gone.
            inner.ep.wake_sleeper();
            let _ = t.join();
        }
        let addr = inner.ep.addr();
        drop(inner);
        super::release_slot(ep);
        crate::log::log!(crate::log::INFO, "endpoint closed: {addr:?}");
        Ok(0)
    })
}

/// Copies the endpoint's raw address (`RDM4_ADDR_LEN` bytes) into `addr`.
/// `*len` holds the buffer size on entry and the address length on return.
/// As `rdm4_av_straddr`: a NULL `addr` asks for the size.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `len`);
/// `RDM4_ETOOSMALL` when `addr` is NULL or `*len < RDM4_ADDR_LEN` (then
/// `*len` is set to `RDM4_ADDR_LEN` and nothing is copied). Thread safety:
/// any thread.
#[no_mangle]
pub extern "C" fn rdm4_ep_getname(ep: *mut rdm4_ep, addr: *mut c_void, len: *mut usize) -> i32 {
    boundary(|| {
        let g = lookup(ep)?;
        if len.is_null() {
            return Err(Status::Inval);
        }
        let raw = g.ep.addr().to_bytes();
        // SAFETY: `len` is non-NULL; `addr`, when non-NULL, has `*len` bytes.
        unsafe {
            let have = len.read();
            len.write(RDM4_ADDR_LEN);
            if addr.is_null() || have < RDM4_ADDR_LEN {
                return Err(Status::TooSmall);
            }
            std::ptr::copy_nonoverlapping(raw.as_ptr(), addr.cast::<u8>(), RDM4_ADDR_LEN);
        }
        Ok(0)
    })
}

/// Inserts `count` raw addresses (`count * RDM4_ADDR_LEN` bytes at `addrs`)
/// and writes their handles to `out[0..count]`. Inserting an address twice
/// gives the same handle. All or nothing: on failure no address stays inserted.
///
/// Returns the number inserted (`count`); `RDM4_EBADHANDLE`; `RDM4_EINVAL`
/// (NULL `addrs` or `out` with `count > 0`); `RDM4_ENOADDR` (an address no
/// device of this endpoint can reach, e.g. another host's shared memory or a
/// closed endpoint); `RDM4_ENOTSUP` (a shm peer whose MTU is smaller than
/// this endpoint's: `RDM4_SHM_MTU` must not be larger here than there).
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_av_insert(ep: *mut rdm4_ep, addrs: *const c_void, count: usize, out: *mut rdm4_addr) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        if count == 0 {
            return Ok(0);
        }
        if addrs.is_null() || out.is_null() || count > i32::MAX as usize / RDM4_ADDR_LEN {
            return Err(Status::Inval);
        }
        // SAFETY: the caller gives `count` addresses of RDM4_ADDR_LEN bytes.
        let bytes = unsafe { std::slice::from_raw_parts(addrs.cast::<u8>(), count * RDM4_ADDR_LEN) };
        let mut done: Vec<u32> = Vec::with_capacity(count);
        let mut fresh: Vec<u32> = Vec::new();
        for chunk in bytes.chunks(RDM4_ADDR_LEN) {
            let raw = RawAddr::from_bytes(chunk).ok_or(Status::Inval)?;
            let known = g.ep.av_contains(&raw);
            match g.ep.av_insert(&raw) {
                Ok(a) => {
                    done.push(a);
                    if !known {
                        fresh.push(a);
                    }
                }
                Err(e) => {
                    // Undo only what this call added.
                    for a in fresh {
                        let _ = g.ep.av_remove(a);
                    }
                    return Err(e);
                }
            }
        }
        for (i, a) in done.iter().enumerate() {
            // SAFETY: `out` has room for `count` handles.
            unsafe { out.add(i).write(u64::from(*a)) };
        }
        Ok(count as i32)
    })
}

/// Removes `count` address handles. Operations towards them, and posted
/// receives that accept only one of them, complete with `RDM4_ECANCELED`.
/// All handles are checked first: nothing is removed when one is unknown.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `addrs`
/// with `count > 0`); `RDM4_ENOADDR` (an unknown handle).
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_av_remove(ep: *mut rdm4_ep, addrs: *const rdm4_addr, count: usize) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        if count == 0 {
            return Ok(0);
        }
        if addrs.is_null() {
            return Err(Status::Inval);
        }
        // SAFETY: `count` handles at `addrs`.
        let list = unsafe { std::slice::from_raw_parts(addrs, count) };
        let handles: Result<Vec<u32>, Status> = list
            .iter()
            .map(|&a| u32::try_from(a).ok().filter(|&a| g.ep.av_lookup(a).is_ok()).ok_or(Status::NoAddr))
            .collect();
        for a in handles? {
            g.ep.av_remove(a)?;
        }
        Ok(0)
    })
}

/// Writes a readable form of a raw address (`RDM4_ADDR_LEN` bytes at `addr`)
/// as a NUL-terminated string into `buf`; `*len` holds the buffer size on
/// entry and the needed size (NUL included) on return. As
/// `rdm4_ep_getname`: a NULL `buf` asks for the size.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EINVAL` (NULL `addr` or `len`, or an
/// address no endpoint could have); `RDM4_ETOOSMALL` when `buf` is NULL or
/// `*len` is short (nothing written, `*len` set to the size needed).
/// Thread safety: any thread; no endpoint needed.
#[no_mangle]
pub extern "C" fn rdm4_av_straddr(addr: *const c_void, buf: *mut c_char, len: *mut usize) -> i32 {
    boundary(|| {
        if addr.is_null() || len.is_null() {
            return Err(Status::Inval);
        }
        // SAFETY: RDM4_ADDR_LEN readable bytes at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), RDM4_ADDR_LEN) };
        let raw = RawAddr::from_bytes(bytes).ok_or(Status::Inval)?;
        let gid: Vec<String> = raw.gid.chunks(2).map(|p| format!("{:02x}{:02x}", p[0], p[1])).collect();
        let text = format!("rdm4://[{}]:{}/{:#010x}", gid.join(":"), raw.qpn(), raw.connid());
        // SAFETY: `len` is non-NULL.
        let have = unsafe { len.read() };
        if buf.is_null() || have < text.len() + 1 {
            // SAFETY: as above.
            unsafe { len.write(text.len() + 1) };
            return Err(Status::TooSmall);
        }
        // SAFETY: as above.
        unsafe { len.write(text.len() + 1) };
        // SAFETY: `buf` has `have` >= text.len() + 1 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
            buf.add(text.len()).write(0);
        }
        Ok(0)
    })
}

/// Registers `len` bytes at `buf` with `RDM4_ACCESS_*` rights; `*key` is the
/// key peers use for RMA and atomics on it. The memory must stay valid until
/// `rdm4_mr_close`.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `key`,
/// NULL `buf` with `len > 0`, unknown access bits); `RDM4_ENOMEM` (the
/// registration table is full). Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_mr_reg(ep: *mut rdm4_ep, buf: *mut c_void, len: usize, access: u64, key: *mut u64) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        if key.is_null() {
            return Err(Status::Inval);
        }
        let access = c_access(access)?;
        let b = c_buf(buf, len)?;
        let k = g.ep.mr_reg(b, access)?;
        // SAFETY: non-NULL out-pointer.
        unsafe { key.write(k) };
        Ok(0)
    })
}

/// Registers `len` bytes at `buf` as `rdm4_mr_reg` does, memory the
/// application maps from the file descriptor `fd` (a `memfd_create` or
/// `shm_open` file, mapped `MAP_SHARED`) at file offset `offset`: on shm,
/// peers of this host map that file too (through `/proc/<pid>/fd`, with
/// the permission cross-memory attach needs), so that their writes, reads
/// and atomics on it are copies and CPU atomics in their own process, as
/// on memory of `rdm4_mr_alloc`; elsewhere it is an ordinary registration.
/// Unlike an allocation, such memory stays the application's after
/// `rdm4_mr_close`: a peer's access under way is waited for as for
/// `rdm4_mr_close` of any memory. The library keeps a duplicate of `fd`
/// until `rdm4_mr_close` (the caller may close its own).
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (as
/// `rdm4_mr_reg`; on shm also a negative or unusable `fd`, a file shorter
/// than `offset + len`, or `buf` and `offset` at different places of a
/// page, which one mapping of the file cannot be); `RDM4_ENOMEM` (the
/// registration table is full, no descriptor left). Thread safety: any
/// thread.
#[no_mangle]
pub extern "C" fn rdm4_mr_reg_fd(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    fd: i32,
    offset: u64,
    access: u64,
    key: *mut u64,
) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        if key.is_null() || fd < 0 {
            return Err(Status::Inval);
        }
        let access = c_access(access)?;
        let b = c_buf(buf, len)?;
        let k = g.ep.mr_reg_fd(b, fd, offset, access)?;
        // SAFETY: non-NULL out-pointer.
        unsafe { key.write(k) };
        Ok(0)
    })
}

/// `RDM4_ACCESS_*` bits as the engine's, `Inval` for unknown ones.
fn c_access(access: u64) -> Result<Access, Status> {
    if access & !(RDM4_ACCESS_LOCAL | RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE) != 0 {
        return Err(Status::Inval);
    }
    Ok(Access::from_bits_truncate(access as u32))
}

/// Allocates `len` bytes (zeroed) registered with `RDM4_ACCESS_*` rights:
/// `*ptr` is the memory, `*key` the key peers use for RMA and atomics on
/// it (as `ucp_mem_map` with allocation, `MPI_Win_allocate`,
/// `shmem_malloc`). On shm the memory lives in a file of its own that
/// peers of this host map on their first access: their writes and reads
/// of it are copies in their own process, with no system call; on udp it
/// is ordinary memory, registered. The memory is the endpoint's: valid
/// until `rdm4_mr_free` of `*key` or `rdm4_ep_close`; never pass it to
/// `free`. `rdm4_mr_close` refuses such a key (`RDM4_EINVAL`).
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `ptr`
/// or `key`, unknown access bits, `len` past `RDM4_MSG_MAX`);
/// `RDM4_ENOMEM` (no memory, the registration table is full);
/// `RDM4_EIO` (the shared file could not be made). On failure `*ptr` and
/// `*key` are not written. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_mr_alloc(
    ep: *mut rdm4_ep,
    len: usize,
    access: u64,
    ptr: *mut *mut c_void,
    key: *mut u64,
) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        if ptr.is_null() || key.is_null() || len as u64 > RDM4_MSG_MAX {
            return Err(Status::Inval);
        }
        let access = c_access(access)?;
        let (buf, k) = g.ep.mr_alloc(len, access)?;
        // SAFETY: non-NULL out-pointers.
        unsafe {
            ptr.write(buf.addr() as usize as *mut c_void);
            key.write(k);
        }
        Ok(0)
    })
}

/// Frees memory of `rdm4_mr_alloc` by its key. When it returns
/// `RDM4_SUCCESS`, the pointer is invalid and no peer reads or writes the
/// memory any more: accesses that start later are refused with
/// `RDM4_EREMOTEACCESS`. The free does not wait for a peer's copy or
/// atomic under way on shm: one that checked the registration before the
/// free may end after it, in the freed pages, which nothing reaches any
/// more (each allocation has pages of its own), so it took effect before
/// the free as far as anyone can tell.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (no allocation
/// has this key: unknown, freed already, or an `rdm4_mr_reg` key);
/// `RDM4_EBUSY` as `rdm4_mr_close` (the memory stays; call again). Thread
/// safety: any thread; the call may block up to 2 s.
#[no_mangle]
pub extern "C" fn rdm4_mr_free(ep: *mut rdm4_ep, key: u64) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        g.ep.mr_free(key)?;
        Ok(0)
    })
}

/// Removes a registration. When it returns `RDM4_SUCCESS`, no peer reads
/// or writes the memory any more, by any path: a peer's cross-memory-attach
/// copy under way (or copy through its mapping of memory of
/// `rdm4_mr_reg_fd`) is waited for (up to 2 s), and requests that arrive later
/// are refused with `RDM4_EREMOTEACCESS`. The memory may then be freed.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (unknown key,
/// or one of `rdm4_mr_alloc`: `rdm4_mr_free` frees those);
/// `RDM4_EBUSY` in two cases, after which the memory must stay valid and
/// the call be repeated: a peer's emulated long read or write (one that
/// moves through this endpoint's progress) is using it (the registration
/// stays as it was; try again after progress), or a peer's
/// cross-memory-attach copy into or out of it was still under way after 2 s
/// (the registration takes no new access; the next call waits again).
/// Thread safety: any thread; the call may block up to 2 s.
#[no_mangle]
pub extern "C" fn rdm4_mr_close(ep: *mut rdm4_ep, key: u64) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        g.ep.mr_dereg(key)?;
        Ok(0)
    })
}

// The engine's completion flags are the C API's, bit for bit: a completion
// entry's flags are copied, not translated.
const _: () = {
    let pairs = [
        (CqFlags::SEND, RDM4_CQ_SEND),
        (CqFlags::RECV, RDM4_CQ_RECV),
        (CqFlags::MSG, RDM4_CQ_MSG),
        (CqFlags::TAGGED, RDM4_CQ_TAGGED),
        (CqFlags::RMA, RDM4_CQ_RMA),
        (CqFlags::READ, RDM4_CQ_READ),
        (CqFlags::WRITE, RDM4_CQ_WRITE),
        (CqFlags::ATOMIC, RDM4_CQ_ATOMIC),
        (CqFlags::REMOTE_CQ_DATA, RDM4_CQ_REMOTE_CQ_DATA),
        (CqFlags::REMOTE_WRITE, RDM4_CQ_REMOTE_WRITE),
    ];
    let mut all = 0;
    let mut i = 0;
    while i < pairs.len() {
        assert!(pairs[i].0.bits() == pairs[i].1);
        all |= pairs[i].1;
        i += 1;
    }
    assert!(CqFlags::all().bits() == all);
};

fn to_c(e: &Cqe) -> rdm4_cqe {
    rdm4_cqe {
        context: e.context as usize as *mut c_void,
        flags: e.flags.bits(),
        len: e.len,
        buf: e.buf as usize as *mut c_void,
        data: e.data,
        tag: e.tag,
        src: if e.src == ADDR_UNSPEC { RDM4_ADDR_UNSPEC } else { u64::from(e.src) },
        status: e.status.code(),
        detail: e.detail,
        olen: e.olen,
        reserved: [0; 2],
    }
}

/// Makes progress (sends, receives, serves peers' remote operations) and
/// moves up to `max` completions into `entries`. Failed operations are
/// entries too, with a non-zero `status`. A buffer of an operation belongs
/// to the caller again once its completion has been returned here.
///
/// Returns the number of entries written (0 when none); `RDM4_EBADHANDLE`;
/// `RDM4_EINVAL` (NULL `entries` with `max > 0`). Thread safety: any
/// thread; concurrent callers each get distinct entries.
#[no_mangle]
pub extern "C" fn rdm4_poll(ep: *mut rdm4_ep, entries: *mut rdm4_cqe, max: usize) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        if entries.is_null() && max > 0 {
            return Err(Status::Inval);
        }
        let max = max.min(i32::MAX as usize);
        let out = |at: usize| {
            move |i: usize, e: &Cqe| {
                // SAFETY: `entries` has room for `max` entries; `at + i < max`.
                unsafe { entries.add(at + i).write(to_c(e)) };
            }
        };
        // Progress leaves the C API's own queues alone, so whether entries
        // pass through is decided once for the call.
        let pass = g.passes_through();
        // One match on the device, then that device's engine all the way.
        let (k, done) = match &mut g.ep {
            super::CEp::Shm(e) => poll_engine(e, entries, max, pass),
            super::CEp::Udp(e) => poll_engine(e, entries, max, pass),
            super::CEp::Captured(c) => poll_captured(c, entries, max, pass),
        };
        if done {
            return Ok(k as i32);
        }
        let n = g.take_completions(max - k, pass, out(k));
        Ok((k + n) as i32)
    })
}

/// [`poll_engine`] on a captured device, out of line (see `CEp`).
#[inline(never)]
fn poll_captured(c: &mut super::CapEp, entries: *mut rdm4_cqe, max: usize, pass: bool) -> (usize, bool) {
    match c {
        super::CapEp::Shm(e) => poll_engine(e, entries, max, pass),
        super::CapEp::Udp(e) => poll_engine(e, entries, max, pass),
    }
}

/// `rdm4_poll`'s progress on engine `e`: writes entries from `entries[0]`
/// on and returns how many, and whether the call is done (else the C API's
/// queue fills the rest of the room).
#[inline(always)]
fn poll_engine<D: Device>(e: &mut Endpoint<D>, entries: *mut rdm4_cqe, max: usize, pass: bool) -> (usize, bool) {
    let out = |at: usize| {
        move |i: usize, c: &Cqe| {
            // SAFETY: `entries` has room for `max` entries; `at + i < max`.
            unsafe { entries.add(at + i).write(to_c(c)) };
        }
    };
    // After a receive took an unexpected message, the queued completions
    // go first (entries keep their order), so that the express path below
    // may run (`Endpoint::took_unexpected`).
    let k0 = if pass && e.took_unexpected() { e.drain_cq(max, out(0)) } else { 0 };
    // The common receive's entry goes straight into `entries` during
    // progress; the rest of the room is then filled from the queue.
    let room = if pass { max - k0 } else { 0 };
    let mut direct = Direct { out: entries.wrapping_add(k0), room, n: 0 };
    // The usual receives first, by the express path: with every queue
    // empty, done when no other packet waits.
    let (n, more) = if pass { e.progress_express(&mut direct, room) } else { (0, true) };
    if n > 0 && !more {
        return (k0 + n, true);
    }
    if more {
        e.progress_timed(super::now_ns, &mut direct);
    }
    let k = k0 + direct.n;
    if pass {
        // Nothing to filter or rewrite: straight from the engine's queue.
        return (k + e.drain_cq(max - k, out(k)), true);
    }
    (k, false)
}

/// `rdm4_poll`'s array as the engine's completion sink: entries are written
/// in the C layout as they are made, while there is room.
struct Direct {
    out: *mut rdm4_cqe,
    room: usize,
    n: usize,
}

impl CqSink for Direct {
    #[inline(always)]
    fn offer(&mut self, e: &Cqe) -> bool {
        if self.n == self.room {
            return false;
        }
        // SAFETY: `out` has room for `room` entries (rdm4_poll's `max`).
        unsafe { self.out.add(self.n).write(to_c(e)) };
        self.n += 1;
        true
    }
}

/// Waits until a completion is available or `timeout_ms` milliseconds pass
/// (negative: no limit), making progress meanwhile. Entries are then
/// collected with `rdm4_poll`.
///
/// It sleeps without holding the endpoint (other threads' calls go on
/// meanwhile) until a packet arrives, another thread's call leaves work
/// for progress, or the device's periodic peer check is due; waiting costs
/// no CPU to speak of.
///
/// Returns `RDM4_SUCCESS` (completions available); `RDM4_ETIMEDOUT`;
/// `RDM4_EBADHANDLE`. Thread safety: any thread, but not overlapping
/// `rdm4_ep_close` of the same endpoint.
#[no_mangle]
pub extern "C" fn rdm4_wait(ep: *mut rdm4_ep, timeout_ms: c_int) -> i32 {
    boundary(|| {
        let start = Instant::now();
        let limit = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        loop {
            let left = limit.map(|l| l.saturating_sub(start.elapsed()));
            let sleep = {
                // Looked up again after every sleep: a close in between ends the wait.
                let mut g = lookup(ep)?;
                g.progress_once();
                if g.has_completions() {
                    return Ok(0);
                }
                if left.is_some_and(|l| l.is_zero()) {
                    return Err(Status::TimedOut);
                }
                let timer =
                    g.ep.next_timeout(super::now_ns()).map(|ns| (ns / 1_000_000 + 1).min(i32::MAX as u64) as i32);
                match g.ep.sleep_begin() {
                    Some((fd, ms)) => {
                        g.parked += 1;
                        Some((fd, ms, timer))
                    }
                    // A packet waits (or the device cannot block): go on.
                    None => None,
                }
            };
            if let Some((fd, ms, timer)) = sleep {
                let ms = left.map_or(ms, |l| (l.as_millis().max(1) as i32).min(ms));
                // Woken in time for the next request timeout.
                let ms = timer.map_or(ms, |t| if ms < 0 { t } else { ms.min(t) });
                poll_one(fd, ms);
                let mut g = lookup(ep)?;
                g.parked -= 1;
                if g.parked == 0 {
                    g.ep.sleep_end();
                }
            }
        }
    })
}

/// Reports what `ep` runs with: its device and modes, its limits and the
/// protocol thresholds that its settings and device give (as `fi_getinfo`
/// reports a provider's). Set `info->size` to `sizeof(rdm4_ep_info)`
/// first; the library writes at most that many bytes, so a program built
/// against an older, shorter struct keeps working.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `info`,
/// or `info->size` too small for `size` and `device`). Thread safety: any
/// thread.
#[no_mangle]
pub extern "C" fn rdm4_ep_query(ep: *mut rdm4_ep, info: *mut rdm4_ep_info) -> i32 {
    boundary(|| {
        if info.is_null() {
            return Err(Status::Inval);
        }
        // SAFETY: non-null; the caller's struct begins with its size.
        let room = unsafe { info.cast::<usize>().read_unaligned() };
        if room < std::mem::size_of::<usize>() + 4 {
            return Err(Status::Inval);
        }
        let g = lookup(ep)?;
        let device = g.ep.device_kind();
        let (cfg, caps) = (g.ep.config(), g.ep.caps());
        let full = rdm4_ep_info {
            size: room.min(std::mem::size_of::<rdm4_ep_info>()),
            device,
            progress: g.modes.0,
            threading: g.modes.1,
            rdma: u32::from(caps.rdma_read) | u32::from(caps.rdma_write) << 1,
            max_msg_size: RDM4_MSG_MAX,
            inject_size: super::data::INJECT_MAX as u64,
            mtu: caps.mtu as u64,
            eager_max: g.ep.eager_max(true) as u64,
            eager_max_untagged: g.ep.eager_max(false) as u64,
            medium_max: cfg.medium_max as u64,
            unexpected_limit: cfg.unexpected_limit as u64,
            max_credits: u64::from(cfg.max_credits),
            timeout_ms: cfg.request_timeout_ns / 1_000_000,
            longread_min: cfg.longread_min.max(caps.longread_min).max(1) as u64,
            runt_size: cfg.runt_size as u64,
            reserved: [0; 5],
        };
        let n = room.min(std::mem::size_of::<rdm4_ep_info>());
        // SAFETY: the caller's struct holds `room` bytes; `n` is at most that.
        unsafe { std::ptr::copy_nonoverlapping((&full as *const rdm4_ep_info).cast::<u8>(), info.cast::<u8>(), n) };
        Ok(0)
    })
}

/// Tells whether it is safe to sleep on `rdm4_ep_fd`'s descriptor now (as
/// libfabric's `fi_trywait`, UCX's `ucp_worker_arm`): no completion waits
/// to be polled, and nothing waits for a progress call that the descriptor
/// would not announce. An event loop calls it after `rdm4_poll` returned
/// 0 and sleeps only on `RDM4_SUCCESS`; so it neither misses a wake-up nor
/// spins. `RDM4_EAGAIN` also while sends wait for room at their peer:
/// poll until they leave. It asks for the descriptor as `rdm4_ep_fd` does.
///
/// Returns `RDM4_SUCCESS` (sleep until the descriptor is readable or
/// another thread calls on the endpoint); `RDM4_EAGAIN` (call `rdm4_poll`
/// first); `RDM4_EBADHANDLE`; `RDM4_ENOTSUP` (the device has no
/// descriptor). Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_trywait(ep: *mut rdm4_ep) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        g.ep.wait_fd().ok_or(Status::NotSup)?;
        if !g.ready.is_empty() || !g.ep.trywait() {
            return Err(Status::Again);
        }
        Ok(0)
    })
}

/// A file descriptor that polls readable (poll/epoll) while a packet waits
/// for the endpoint; then call `rdm4_poll`. Level-triggered: it stays
/// readable until a `rdm4_poll` has taken what waits, and a poll that finds
/// nothing clears it, so an epoll loop never spins. (Use it with
/// `EPOLLET` only if each wake-up is followed by polls until one returns
/// 0.) On shm, once asked for, peers signal it on every packet (a system
/// call on their side). On udp it is an epoll descriptor that is also
/// readable while the device's own work is due (a retransmission, an
/// acknowledgement owed: about every millisecond while anything sent
/// awaits its acknowledgement), so that a sleeper gets to resend what the
/// network lost; the `rdm4_poll` that follows does that work. The
/// descriptor belongs to the endpoint: do not close it.
///
/// Returns the descriptor (>= 0); `RDM4_EBADHANDLE`; `RDM4_ENOTSUP` (the
/// device has none). Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_ep_fd(ep: *mut rdm4_ep) -> i32 {
    boundary(|| {
        let mut g = lookup(ep)?;
        let fd = g.ep.wait_fd().ok_or(Status::NotSup)?;
        Ok(fd)
    })
}
