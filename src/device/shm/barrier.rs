//! Memory ordering between a ring's producers and its sleeping owner, and
//! cache-line prefetch hints.

use std::sync::atomic::{compiler_fence, fence, Ordering};

// Wake-ups are a Dekker handshake: a producer publishes a packet, then reads
// the owner's sleeping flag; an owner going to sleep sets the flag, then
// rechecks its ring. Each side needs a store-load barrier. A full fence per
// packet would stall every send until its slot's cache line arrives, so the
// cost is moved to the sleeper where the kernel allows it: processes
// register for `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, producers then
// need only a compiler barrier, and a sleeper's membarrier call puts a full
// barrier in every running registered thread before it rechecks its ring.
// Where registration fails, producers use the full fence, and sleepers both
// fence and call membarrier (which then covers the registered producers).

const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// This process is registered for expedited global membarrier.
pub(super) fn asymmetric_barriers() -> bool {
    static REGISTERED: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
        // SAFETY: membarrier takes no pointers; failure only returns -1.
        unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 }
    });
    *REGISTERED
}

/// The producer's barrier between publishing a packet and reading the
/// owner's sleeping flag.
pub(super) fn producer_fence() {
    if asymmetric_barriers() {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// Hints the CPU to fetch the cache line at `p`, for writing (PREFETCHW,
/// a no-op on CPUs without it) or for reading. Only a hint: `p` is never
/// dereferenced, and any address will do.
#[inline(always)]
pub(super) fn prefetch<const FOR_WRITE: bool>(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and cannot fault.
    unsafe {
        if FOR_WRITE {
            std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
        } else {
            std::arch::asm!("prefetcht0 [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The sleeper's barrier between setting its sleeping flag and rechecking its ring.
pub(super) fn sleeper_fence() {
    fence(Ordering::SeqCst);
    // SAFETY: as above. With no registered process it is a cheap no-op; an
    // error (old kernel) means no producer relies on it (none registered).
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) };
}
