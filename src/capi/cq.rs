//! Completions: polling them, and waiting for them (in the library, or on
//! the endpoint's descriptor in the application's own event loop).

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use super::types::*;
use super::{array, boundary, ep_call, rdm4_ep, slots};
use crate::device::Device;
use crate::engine::{CqFlags, Cqe, Endpoint, ADDR_UNSPEC};
use crate::status::Status;

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
    ep_call(ep, |g| {
        let entries = array(entries, max)?;
        let max = max.min(i32::MAX as usize);
        // Progress leaves the C API's own queues alone, so whether entries
        // pass through is decided once for the call.
        let pass = g.passes_through();
        // One match on the device, then that device's engine all the way.
        let done = match &mut g.ep {
            super::CEp::Shm(e) => poll_engine(e, entries, max, pass),
            super::CEp::Udp(e) => poll_engine(e, entries, max, pass),
            super::CEp::Auto(e) => poll_engine(e, entries, max, pass),
            super::CEp::Captured(c) => poll_captured(c, entries, max, pass),
        };
        let n = match done {
            Some(n) => n,
            None => g.take_completions(max, writer(entries)),
        };
        Ok(n as i32)
    })
}

/// Writes entry `i` into `entries` in the C layout.
#[inline(always)]
fn writer(entries: *mut rdm4_cqe) -> impl Fn(usize, &Cqe) + Copy {
    move |i, e| {
        // SAFETY: `entries` has room for `rdm4_poll`'s `max` entries, and
        // the engine hands out entries below the room it was given.
        unsafe { entries.add(i).write(to_c(e)) }
    }
}

/// [`poll_engine`] on a captured device, out of line (see `CEp`).
#[inline(never)]
fn poll_captured(c: &mut super::CapEp, entries: *mut rdm4_cqe, max: usize, pass: bool) -> Option<usize> {
    match c {
        super::CapEp::Shm(e) => poll_engine(e, entries, max, pass),
        super::CapEp::Udp(e) => poll_engine(e, entries, max, pass),
        super::CapEp::Auto(e) => poll_engine(e, entries, max, pass),
    }
}

/// `rdm4_poll`'s progress on engine `e`: with `pass` the engine's entries
/// go straight into `entries` and their number is returned
/// (`Endpoint::poll_into`); without, the engine only makes progress and
/// the C API's queue fills the room (`None`).
#[inline(always)]
fn poll_engine<D: Device>(e: &mut Endpoint<D>, entries: *mut rdm4_cqe, max: usize, pass: bool) -> Option<usize> {
    if pass {
        return Some(e.poll_into(max, super::now_ns, writer(entries)));
    }
    e.progress_timed(super::now_ns, &mut ());
    None
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
            // Entered again after every sleep: a close in between ends the
            // wait. `None`: completions wait.
            let sleep = slots::on_ep(ep, |g| {
                g.progress_once();
                if g.has_completions() {
                    return Ok(None);
                }
                if left.is_some_and(|l| l.is_zero()) {
                    return Err(Status::TimedOut);
                }
                let timer =
                    g.ep.next_timeout(super::now_ns()).map(|ns| (ns / 1_000_000 + 1).min(i32::MAX as u64) as i32);
                Ok(Some(match g.ep.sleep_begin() {
                    Some((fd, ms)) => {
                        g.parked += 1;
                        Some((fd, ms, timer))
                    }
                    // A packet waits (or the device cannot block): go on.
                    None => None,
                }))
            })?;
            let Some(sleep) = sleep else { return Ok(0) };
            if let Some((fd, ms, timer)) = sleep {
                let ms = left.map_or(ms, |l| (l.as_millis().max(1) as i32).min(ms));
                // Woken in time for the next request timeout.
                let ms = timer.map_or(ms, |t| if ms < 0 { t } else { ms.min(t) });
                super::ep::poll_one(fd, ms);
                slots::on_ep(ep, |g| {
                    g.parked -= 1;
                    if g.parked == 0 {
                        g.ep.sleep_end();
                    }
                    Ok(())
                })?;
            }
        }
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
    ep_call(ep, |g| {
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
    ep_call(ep, |g| {
        let fd = g.ep.wait_fd().ok_or(Status::NotSup)?;
        Ok(fd)
    })
}
