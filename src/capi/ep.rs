//! Endpoints: attributes, open and close, name and query, and the
//! automatic progress thread.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::types::*;
use super::{boundary, ep_call, read_sized, required, write_sized, EpInner};
use crate::device::auto::AutoDevice;
use crate::device::shm::ShmDevice;
use crate::device::udp::UdpDevice;
use crate::engine::Config;
use crate::pcap::PcapFile;
use crate::status::Status;

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
        let attr = required(attr)?;
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
        max_ops: 0,
        max_peers: 0,
        max_mrs: 0,
        reserved32: 0,
        reserved: [0; 4],
    }
}

/// Reads the caller's attributes (NULL: the defaults), honouring its
/// `size`.
fn read_attr(attr: *const rdm4_ep_attr) -> Result<rdm4_ep_attr, Status> {
    if attr.is_null() {
        return Ok(default_attr());
    }
    let a = read_sized(attr, default_attr())?;
    if a.progress > RDM4_PROGRESS_AUTO
        || a.threading > RDM4_THREAD_SINGLE
        || (a.threading == RDM4_THREAD_SINGLE && a.progress != RDM4_PROGRESS_MANUAL)
        || a.flags & !(RDM4_EP_LEGACY | RDM4_EP_DELIVERY_COMPLETE) != 0
        || a.reserved.iter().any(|&r| r != 0)
        || a.reserved32 != 0
    {
        return Err(Status::Inval);
    }
    Ok(a)
}

/// Opens the engine over the device the attributes and `RDM4_DEVICE` ask for.
/// The variable overrides a valid attribute; an invalid attribute is
/// refused whatever the variable says.
fn open_endpoint(attr: &rdm4_ep_attr, cfg: Config) -> Result<super::CEp, Status> {
    if !matches!(attr.device, RDM4_DEVICE_DEFAULT | RDM4_DEVICE_SHM | RDM4_DEVICE_UDP | RDM4_DEVICE_AUTO) {
        return Err(Status::Inval);
    }
    let kind = match crate::env::word("RDM4_DEVICE", &["shm", "udp", "auto"])? {
        Some(0) => RDM4_DEVICE_SHM,
        Some(1) => RDM4_DEVICE_UDP,
        Some(_) => RDM4_DEVICE_AUTO,
        None => attr.device,
    };
    let pcap = PcapFile::from_env()?;
    Ok(match kind {
        RDM4_DEVICE_UDP => super::CEp::open_udp(UdpDevice::open()?, cfg, pcap),
        RDM4_DEVICE_SHM => super::CEp::open_shm(ShmDevice::open()?, cfg, pcap),
        _ => super::CEp::open_auto(AutoDevice::open()?, cfg, pcap),
    })
}

/// Opens an endpoint.
///
/// `attr` may be NULL for the defaults; its device may be overridden with
/// `RDM4_DEVICE=shm|udp|auto` and the device's own `RDM4_SHM_*` / `RDM4_UDP_*`
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
/// leaves the udp device alone (it computes, sleeps, waits elsewhere, or
/// talks only to peers of its host through auto): it acknowledges
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
/// A child made by `fork()` inherits no endpoint: in it, every handle of
/// the parent gives `RDM4_EBADHANDLE` (`rdm4_ep_close` too), nothing of
/// the parent's endpoints is touched, and the parent's go on undisturbed.
/// The child may open endpoints of its own.
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
        let ep = required(ep)?;
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
        // A limit: the variable, else the attribute, else the default.
        let limit = |var: Option<usize>, attr: u32, default: usize| match var {
            Some(n) => n,
            None if attr > 0 => attr as usize,
            None => default,
        };
        const MOST: std::ops::RangeInclusive<usize> = 1..=1 << 20;
        cfg.max_ops = limit(crate::env::number("RDM4_MAX_OPS", MOST)?, a.max_ops, cfg.max_ops);
        cfg.max_peers = limit(crate::env::number("RDM4_MAX_PEERS", MOST)?, a.max_peers, cfg.max_peers);
        cfg.max_mrs = limit(crate::env::number("RDM4_MAX_MRS", MOST)?, a.max_mrs, cfg.max_mrs);
        if let Some(n) = crate::env::number::<usize>("RDM4_RUNT_SIZE", 0..=1 << 30)? {
            cfg.runt_size = n;
        }
        cfg.features_off = crate::env::bits("RDM4_FEATURES_OFF", &FEATURE_NAMES)?.unwrap_or(0);
        cfg.constant_header = crate::env::word("RDM4_CONSTANT_HEADER", &["0", "1"])? == Some(1);
        super::slots::forget_endpoints_in_forked_children();
        let mut inner = EpInner::new(open_endpoint(&a, cfg)?);
        inner.modes = (a.progress, a.threading);
        let device = match inner.ep.device_kind() {
            RDM4_DEVICE_UDP => "udp",
            RDM4_DEVICE_AUTO => "auto",
            _ => "shm",
        };
        let name = inner.ep.name();
        let (shm, udp) = inner.ep.devices();
        crate::log::log!(
            crate::log::INFO,
            "endpoint opened on {device} (shm {shm}, udp {udp}): {name:?}, locator {:#x}",
            name.reserved()
        );
        if inner.ep.wants_responder() {
            super::responder::register_at_exit();
        }
        // The responder shares the device only, not the endpoint
        // (`crate::device::away`): a single-threaded endpoint takes no lock.
        let single = a.threading == RDM4_THREAD_SINGLE;
        let fds = inner.ep.responder_fds();
        let away = if a.progress == RDM4_PROGRESS_MANUAL { inner.ep.away() } else { None };
        let responder = away.is_some();
        let (slot, handle) = super::install(inner, single).ok_or(Status::NoMem)?;
        slot.set_away(away);
        if a.progress == RDM4_PROGRESS_AUTO || responder {
            use super::thread::{EpThread, Job, MAX_FDS};
            let spawned = if responder {
                let mut keep = [-1; MAX_FDS];
                let nfds = fds.len().min(MAX_FDS);
                keep[..nfds].copy_from_slice(&fds[..nfds]);
                let job = Job::Responder { fds: keep, nfds };
                EpThread::spawn(slot, job, 256 << 10, c"rdm4-responder")
            } else {
                EpThread::spawn(slot, Job::Progress { handle }, 0, c"rdm4-progress")
            };
            match spawned {
                Some(t) => *slot.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t),
                None => {
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
pub(crate) fn progress_thread(slot: &'static super::EpSlot, handle: u64) {
    let mut spin = SPIN_MIN;
    let mut idle_since: Option<Instant> = None;
    while !slot.stop.load(Ordering::Acquire) {
        // Ends when the endpoint is closed.
        let Some(mut g) = slot.lock_raw(handle) else { break };
        let Some(inner) = g.as_deref_mut() else { break };
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
            t.join();
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
    ep_call(ep, |g| super::av::copy_name(&g.ep.name(), addr, len))
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
    ep_call(ep, |g| {
        let info = required(info)?;
        let device = g.ep.device_kind();
        let (cfg, caps) = (g.ep.config(), g.ep.caps());
        let full = rdm4_ep_info {
            size: std::mem::size_of::<rdm4_ep_info>(),
            device,
            progress: g.modes.0,
            threading: g.modes.1,
            rdma: u32::from(caps.rdma_read) | u32::from(caps.rdma_write) << 1,
            max_msg_size: RDM4_MSG_MAX,
            inject_size: super::msg::INJECT_MAX as u64,
            mtu: caps.mtu as u64,
            eager_max: g.ep.eager_max(true) as u64,
            eager_max_untagged: g.ep.eager_max(false) as u64,
            medium_max: cfg.medium_max as u64,
            unexpected_limit: cfg.unexpected_limit as u64,
            max_credits: u64::from(cfg.max_credits),
            timeout_ms: cfg.request_timeout_ns / 1_000_000,
            longread_min: cfg.longread_min.max(caps.longread_min).max(1) as u64,
            runt_size: cfg.runt_size as u64,
            devices: {
                let (s, u) = g.ep.devices();
                u64::from(s) | u64::from(u) << 1
            },
            reserved: [0; 4],
        };
        write_sized(info, full)?;
        Ok(0)
    })
}
