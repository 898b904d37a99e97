//! An endpoint that a single-threaded application shares with its
//! responder (`RDM4_THREAD_SINGLE` over a device that needs one: udp).
//!
//! The application promised that its calls never overlap, so they take no
//! lock; the responder, which acts only while the application makes no
//! call, must still never run during one. They exclude each other by two
//! words of the slot, as Dekker's algorithm does, with the costly half on
//! the responder's side:
//! - the application, entering a call, makes `calls` odd, then (after a
//!   compiler barrier only) reads `responding`: while it is set, it makes
//!   `calls` even again and waits; leaving, it makes `calls` even;
//! - the responder sets `responding`, has every thread of the process
//!   execute a full memory barrier (`membarrier(2)`,
//!   `MEMBARRIER_CMD_PRIVATE_EXPEDITED`), then reads `calls`: odd, a call
//!   is under way and it clears `responding` and lets go.
//!
//! After the barrier, either the application's odd `calls` is visible to
//! the responder, or the application's read of `responding` comes after
//! it and sees it set. A call so costs two plain stores and a load instead
//! of a lock's two atomic read-modify-writes. Where the kernel has no such
//! barrier, the endpoint takes its lock as a thread-safe one does.

use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};

use super::slots::SHARED;
use super::{EpInner, EpSlot};

/// Whether this process may use `membarrier(2)`'s private expedited
/// barrier (registered once; false when the kernel refuses).
pub(crate) fn barrier_available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;
        // SAFETY: a system call without pointers.
        unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
    })
}

/// Every thread of the process executes a full memory barrier.
fn barrier() {
    const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    // SAFETY: a system call without pointers; registered before any
    // endpoint is shared (`barrier_available`).
    unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED, 0, 0) };
    fence(Ordering::SeqCst);
}

/// The application enters a call on the shared endpoint of `slot` (inlined
/// into every call: two plain stores and a load when the responder is out).
#[inline(always)]
pub(crate) fn enter(slot: &EpSlot) {
    if let Err(c) = try_enter(slot) {
        enter_after_responder(slot, c);
    }
    // The responder is out and the application's calls do not overlap.
}

/// Makes the count odd, then looks for the responder: `Err` with the count
/// before when it is in.
#[inline(always)]
fn try_enter(slot: &EpSlot) -> Result<(), u64> {
    let c = slot.calls.load(Ordering::Relaxed);
    slot.calls.store(c | 1, Ordering::Relaxed);
    compiler_fence(Ordering::SeqCst);
    if slot.responding.load(Ordering::Acquire) {
        Err(c)
    } else {
        Ok(())
    }
}

/// [`enter`] when it met the responder: steps back, waits until it is out,
/// and enters again.
#[cold]
#[inline(never)]
fn enter_after_responder(slot: &EpSlot, mut c: u64) {
    loop {
        slot.calls.store((c | 1) + 1, Ordering::Release);
        wait_out(&slot.responding);
        match try_enter(slot) {
            Ok(()) => return,
            Err(again) => c = again,
        }
    }
}

/// The endpoint of the tagged word `way` of a shared slot.
pub(crate) fn endpoint_of(way: usize) -> *mut EpInner {
    (way & !SHARED) as *mut EpInner
}

#[cold]
fn wait_out(responding: &AtomicBool) {
    let mut n = 0u32;
    while responding.load(Ordering::Acquire) {
        n += 1;
        if n < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A call of the application leaves the shared endpoint of `slot`: the
/// count turns even.
#[inline(always)]
pub(crate) fn leave(slot: &EpSlot) {
    slot.calls.store(slot.calls.load(Ordering::Relaxed) + 1, Ordering::Release);
}

/// The responder's hold on an endpoint: its lock, or (shared) the
/// `responding` flag.
pub(crate) enum Hold<'a> {
    Locked(std::sync::MutexGuard<'a, Option<Box<EpInner>>>),
    Shared(&'a EpSlot, &'a mut EpInner),
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if let Hold::Shared(slot, _) = self {
            slot.responding.store(false, Ordering::Release);
        }
    }
}

impl std::ops::Deref for Hold<'_> {
    type Target = EpInner;
    fn deref(&self) -> &EpInner {
        match self {
            Hold::Locked(g) => g.as_deref().expect("held slot is filled"),
            Hold::Shared(_, e) => e,
        }
    }
}

impl std::ops::DerefMut for Hold<'_> {
    fn deref_mut(&mut self) -> &mut EpInner {
        match self {
            Hold::Locked(g) => g.as_deref_mut().expect("held slot is filled"),
            Hold::Shared(_, e) => e,
        }
    }
}

impl EpSlot {
    /// The responder takes the endpoint of `handle` when no call holds it;
    /// `None` when one does, or the endpoint is closed.
    pub(crate) fn hold(&self, handle: u64) -> Option<Hold<'_>> {
        let Some(way) = self.shared_way() else {
            let g = self.try_lock_raw(handle)?;
            return Some(Hold::Locked(g));
        };
        self.responding.store(true, Ordering::SeqCst);
        barrier();
        let busy = self.calls.load(Ordering::Acquire) & 1 != 0;
        if busy || self.handle() != handle || self.shared_way() != Some(way) {
            self.responding.store(false, Ordering::Release);
            return None;
        }
        let inner = endpoint_of(way);
        // SAFETY: the endpoint is open (handle and word unchanged, and a
        // close enters as a call does before it takes the endpoint), and no
        // call of the application runs or can start until `responding` is
        // cleared (the module docs).
        Some(Hold::Shared(self, unsafe { &mut *inner }))
    }
}
