//! The responder: a thread beside an endpoint in manual progress whose
//! device cannot wait for the application's calls (udp: its peers need
//! acknowledgements, answers to their probes and the RDMA they ask of
//! this endpoint's memory whether or not the application calls).
//!
//! Applications stop calling the library most of the time: they compute,
//! meet at barriers over other channels, sleep on other descriptors, or
//! are done and about to close. The responder stands in for them then and
//! only then:
//! - Every call of the application on the endpoint counts
//!   (`EpSlot::calls`, bumped under the endpoint's lock, or without one
//!   for a single-threaded application: `shared`). The responder
//!   looks every [`TICK`] to [`TICK_MAX`]; when no call came since its
//!   last look, and no
//!   thread sleeps in `rdm4_wait` (which does the device's work itself),
//!   the application is away, and the responder makes the device's
//!   [`respond`](crate::device::Device::respond) call under the lock.
//! - While the application stays away, the responder sleeps on the
//!   device's descriptor until a datagram or the device's next timer, and
//!   answers at once (after [`GRACE`], the first turn for an application
//!   that sleeps on the same descriptor through `rdm4_ep_fd`).
//! - Every [`SCAN_EVERY`] it tells the device which peers the endpoint's
//!   operations await (`Endpoint::keepalive`), whether the application is
//!   away or not, so that a peer that died is noticed even by an
//!   application that only polls.
//!
//! - A process that exits without closing its endpoints (it returns from
//!   `main` right after its last receive) sends the acknowledgements they
//!   owe on its way out ([`at_exit`], registered with `atexit` at the
//!   first open), so that its peers' sends of what it received complete.
//!
//! - It runs with a descriptor table of its own (`unshare(CLONE_FILES)`),
//!   holding only the device's descriptors and the standard ones: it keeps
//!   none of the application's files open (a pipe the application closes
//!   still reaches end-of-file), and the application's system calls on
//!   descriptors stay as cheap as in a process of one thread (the kernel
//!   takes no reference per call on a table nobody shares).
//!
//! A busy application costs a wake-up per tick of a thread that looks at
//! one counter, and a lock taken every [`SCAN_EVERY`]; a ping-pong never
//! meets the responder in its path (`docs/performance.md`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::os::fd::RawFd;

use super::EpSlot;

/// How often the responder looks whether the application is away: every
/// [`TICK`] after it was, and half as often each time it found the
/// application busy, down to every [`TICK_MAX`] (each look of a thread on
/// the application's CPU costs a busy application a context switch).
pub(crate) const TICK: Duration = Duration::from_millis(1);
const TICK_MAX: Duration = Duration::from_millis(8);
/// How often it tells the device which peers the operations await.
pub(crate) const SCAN_EVERY: Duration = Duration::from_millis(100);
/// After a datagram woke it, how long it leaves the application to take
/// it first.
const GRACE: Duration = Duration::from_micros(200);

/// The responder of the endpoint in `slot`, until it is closed.
pub(crate) fn run(slot: &'static EpSlot, handle: u64, fds: &[RawFd]) {
    if !private_fd_table(fds) {
        crate::log::log!(crate::log::INFO, "responder: shares the process's descriptor table");
    }
    let mut seen = slot.calls.load(Ordering::Relaxed);
    let mut next_scan = Instant::now() + SCAN_EVERY;
    // The device's descriptor and timer while the application is away.
    let mut watch: Option<(RawFd, i32)> = None;
    let mut tick = TICK;
    while !slot.stop.load(Ordering::Acquire) {
        match watch.take() {
            None => std::thread::sleep(tick),
            Some((fd, ms)) => {
                let until_scan = next_scan.saturating_duration_since(Instant::now()).as_millis() as i32;
                if super::ep::poll_one(fd, ms.clamp(0, until_scan.max(1))) {
                    std::thread::sleep(GRACE);
                }
            }
        }
        let calls = slot.calls.load(Ordering::Relaxed);
        // Odd: a call of a single-threaded application is under way.
        let away = calls == seen && calls & 1 == 0;
        seen = calls;
        tick = if away { TICK } else { (tick * 2).min(TICK_MAX) };
        let now = Instant::now();
        let scan = now >= next_scan;
        if !away && !scan {
            continue;
        }
        let Some(mut inner) = slot.hold(handle) else {
            continue; // a call holds the endpoint (or it is being closed)
        };
        if scan {
            next_scan = now + SCAN_EVERY;
            inner.ep.keepalive();
        }
        if away && inner.parked == 0 {
            watch = inner.ep.respond();
        }
    }
}

/// Registers [`at_exit`] with the C library, once per process.
pub(crate) fn register_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn flush() {
            at_exit();
        }
        // SAFETY: registers a function without arguments that never unwinds
        // (it catches panics).
        unsafe { libc::atexit(flush) };
    });
}

/// At the process's exit: every endpoint of this process with a responder
/// that no call holds sends what it owes (its device's responder call).
fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let me = std::process::id();
        for (slot, handle) in super::open_slots() {
            let Some(mut inner) = slot.hold(handle) else { continue };
            if inner.pid == me && inner.ep.wants_responder() {
                inner.ep.respond();
            }
        }
    });
}

/// Gives the calling thread a descriptor table of its own that holds only
/// `keep` and descriptors 0 to 2 (see the module docs); false when it
/// could not (it then shares the process's table, as threads do).
fn private_fd_table(keep: &[RawFd]) -> bool {
    // SAFETY: affects the calling thread's descriptor table only.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return false;
    }
    let mut keep: Vec<u32> = keep.iter().filter_map(|&f| u32::try_from(f).ok()).filter(|&f| f > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    // Close the gaps between the kept ones: [3, k0), (k0, k1), ... (kn, max].
    let mut first = 3u32;
    for k in keep.iter().copied().map(Some).chain([None]) {
        let last = k.map_or(u32::MAX, |k| k.saturating_sub(1));
        if first <= last && k != Some(first.wrapping_sub(1)) && !close_range(first, last) {
            return close_listed(&keep);
        }
        first = k.map_or(0, |k| k + 1);
        if k.is_none() {
            break;
        }
    }
    true
}

/// `close_range(2)` of this thread's table; false when the kernel has none.
fn close_range(first: u32, last: u32) -> bool {
    // SAFETY: closes descriptors of this thread's own table, which no one
    // else uses.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) == 0 }
}

/// Without `close_range`: closes every descriptor this thread's table
/// lists but the standard ones and `keep`.
fn close_listed(keep: &[u32]) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc/thread-self/fd") else { return false };
    let fds: Vec<u32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    for fd in fds.into_iter().filter(|&f| f > 2 && !keep.contains(&f)) {
        // SAFETY: as in `close_range`; the directory's own descriptor is
        // already closed (EBADF, harmless).
        unsafe { libc::close(fd as i32) };
    }
    true
}
