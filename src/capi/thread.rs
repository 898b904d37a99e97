//! The thread of an endpoint (its responder, or its automatic progress),
//! started with `pthread_create` on the endpoint's slot rather than with
//! `std::thread`.
//!
//! `std::thread::spawn` boxes the thread's closure, and the thread's stack
//! holds the only pointer to that box. A process that forks while the thread
//! runs hands its child the box but not the thread: the child has memory
//! that nothing it runs can reach or free, which valgrind reports as a
//! definite leak of every program that forks after opening an endpoint (and
//! the same when the process exits before the thread first ran). Here the
//! thread's argument is the slot itself, static, and what the thread is to
//! do waits in the slot ([`EpSlot::job`]) without heap memory, so a fork or
//! an early exit leaves nothing unreachable.

use std::os::fd::RawFd;

use super::EpSlot;

/// Descriptors the responder keeps at most (the device's: udp has two).
pub(crate) const MAX_FDS: usize = 8;

/// What the thread of an endpoint does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Job {
    /// Stands in for the application while it leaves the device the slot
    /// shares with it alone (`super::responder`), keeping only `fds` open.
    Responder { fds: [RawFd; MAX_FDS], nfds: usize },
    /// Progresses the endpoint (`RDM4_PROGRESS_AUTO`).
    Progress { handle: u64 },
}

/// A started thread, to join.
#[derive(Debug)]
pub(crate) struct EpThread(libc::pthread_t);

impl EpThread {
    /// Starts the thread of `slot` on `job` with a stack of `stack` bytes
    /// (0: the C library's default); `None` when no thread could be made.
    pub(crate) fn spawn(slot: &'static EpSlot, job: Job, stack: usize, name: &std::ffi::CStr) -> Option<EpThread> {
        *slot.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        // SAFETY: `attr` is initialised before use and destroyed after;
        // `start` takes the static slot as its argument.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_attr_init(&mut attr) != 0 {
                return None;
            }
            if stack > 0 {
                libc::pthread_attr_setstacksize(&mut attr, stack.max(libc::PTHREAD_STACK_MIN));
            }
            let mut tid: libc::pthread_t = 0;
            let arg = slot as *const EpSlot as *mut libc::c_void;
            let rc = libc::pthread_create(&mut tid, &attr, start, arg);
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                slot.job.lock().unwrap_or_else(|e| e.into_inner()).take();
                return None;
            }
            libc::pthread_setname_np(tid, name.as_ptr());
            Some(EpThread(tid))
        }
    }

    /// Waits for the thread to end (it ends once the endpoint is closed).
    pub(crate) fn join(self) {
        // SAFETY: a thread this process started and nobody joined yet.
        unsafe { libc::pthread_join(self.0, std::ptr::null_mut()) };
    }
}

extern "C" fn start(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `spawn` passes a slot of the static table.
    let slot: &'static EpSlot = unsafe { &*(arg as *const EpSlot) };
    let job = slot.job.lock().unwrap_or_else(|e| e.into_inner()).take();
    let _ = std::panic::catch_unwind(|| match job {
        Some(Job::Responder { fds, nfds }) => {
            if let Some(away) = slot.away(true) {
                super::responder::run(slot, &*away, &fds[..nfds]);
            }
        }
        Some(Job::Progress { handle }) => super::ep::progress_thread(slot, handle),
        None => {}
    });
    std::ptr::null_mut()
}
