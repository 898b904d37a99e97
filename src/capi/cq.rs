//! Completions: polling them, and waiting for them (in the library, or on
//! the endpoint's descriptor in the application's own event loop).

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use super::types::*;
use super::{boundary, lookup, rdm4_ep};
use crate::device::Device;
use crate::engine::{CqFlags, CqSink, Cqe, Endpoint, ADDR_UNSPEC};
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
                super::ep::poll_one(fd, ms);
                let mut g = lookup(ep)?;
                g.parked -= 1;
                if g.parked == 0 {
                    g.ep.sleep_end();
                }
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
