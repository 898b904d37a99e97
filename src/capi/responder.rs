//! The responder: a thread beside an endpoint in manual progress whose
//! device cannot wait for the application's calls (udp: its peers need
//! acknowledgements, answers to their probes and the RDMA they ask of
//! this endpoint's memory whether or not the application calls).
//!
//! Applications stop calling the library most of the time: they compute,
//! meet at barriers over other channels, sleep on other descriptors, or
//! are done and about to close. The responder stands in for them then and
//! only then. It holds the device alone, never the endpoint
//! ([`Shared`](crate::device::away::Shared)): the application's calls take
//! no part in it but their accesses to that device, and an auto
//! endpoint's calls that stay on shm none at all.
//! - The device counts the application's accesses. The responder looks
//!   every [`TICK`] to [`TICK_MAX`]; when none came since its last look,
//!   and no thread sleeps on the device (`rdm4_wait`, which does the
//!   device's work itself), the device is left alone, and the responder
//!   makes the device's [`respond`](crate::device::Responder::respond)
//!   call, which no access overlaps.
//! - While the device stays alone, the responder sleeps on its descriptor
//!   until a datagram or the device's next timer, and answers at once
//!   (after [`GRACE`], the first turn for an application that sleeps on
//!   the same descriptor through `rdm4_ep_fd`).
//! - Which peers the endpoint's operations await, the device asks the
//!   engine during the application's calls, and keeps the answer while it
//!   is away (`DevEvent::Awaiting`): a peer that died is noticed also
//!   while the application computes or sleeps.
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
//! one counter; a ping-pong never meets the responder in its path
//! (`docs/performance.md`).

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::EpSlot;
use crate::device::away::AwayWork;

/// How often the responder looks whether the application is away: every
/// [`TICK`] after it was, and half as often each time it found the
/// application busy, down to every [`TICK_MAX`] (each look of a thread on
/// the application's CPU costs a busy application a context switch).
pub(crate) const TICK: Duration = Duration::from_millis(1);
const TICK_MAX: Duration = Duration::from_millis(8);
/// After a datagram woke it, how long it leaves the application to take
/// it first.
const GRACE: Duration = Duration::from_micros(200);

/// The responder of the device `away` of the endpoint in `slot`, until the
/// endpoint is closed.
pub(crate) fn run(slot: &'static EpSlot, away: &dyn AwayWork, fds: &[RawFd]) {
    if !private_fd_table(fds) {
        crate::log::log!(crate::log::INFO, "responder: shares the process's descriptor table");
    }
    let mut seen = away.accesses();
    // The device's descriptor and timer while the application is away.
    let mut watch: Option<(RawFd, i32)> = None;
    let mut tick = TICK;
    while !slot.stop.load(Ordering::Acquire) {
        match watch.take() {
            None => std::thread::sleep(tick),
            Some((fd, ms)) => {
                if super::ep::poll_one(fd, ms.max(0)) {
                    std::thread::sleep(GRACE);
                }
            }
        }
        let now = away.accesses();
        // Odd: an access is under way.
        let alone = now == seen && now & 1 == 0 && !away.asleep();
        seen = now;
        tick = if alone { TICK } else { (tick * 2).min(TICK_MAX) };
        if alone {
            watch = away.respond();
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
/// whose device no call holds sends what it owes (its device's responder
/// call).
fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        for (slot, _) in super::open_slots() {
            if let Some(away) = slot.away(false) {
                away.respond();
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
