//! Which way large messages should go: through the ring or by one
//! cross-memory-attach read (long-read). Each side times what it does as it
//! happens: a sender its copies of bulk packets into a peer's ring, the
//! owner its copies out of its ring and its `process_vm_readv` reads, which
//! it publishes in its header (`off::RING_OUT`, `off::CMA_IN`, ticks per
//! KiB). The ring moves no faster than the slower of its two copies; a
//! sender sends messages from `ADAPT_MIN` bytes by long-read while the
//! owner's reads are clearly faster than that, and the 8th and every
//! `PROBE_EVERY`th such message the other way, so that all the times stay
//! fresh when the machine changes.
//!
//! Why: where the two CPUs sit far apart (cross-process cache-line floor
//! ~195 ns instead of ~50 on a 2-core VM whose vCPUs move), the ring's two
//! copies pull every line across and streamed 6.8-7.1 GB/s for 1 MiB
//! messages while one read got 10.4-11.0 (UCX's, the same read: 10.2-10.9);
//! near, the ring streams ~27 GB/s and reads ~11. Timing the owner's copies
//! alone was not enough: far apart, the sender's copy was the slow one.

use std::sync::atomic::Ordering;

use super::{off, Ah, ShmDevice};

/// Packets and reads from this many bytes are timed.
pub(super) const TIMED_MIN: usize = 32 * 1024;

/// Messages from this many bytes follow the timings.
const ADAPT_MIN: usize = 256 * 1024;

/// Every this many messages from `ADAPT_MIN` to one peer, one goes the way
/// not preferred (1 MiB tag_bw near: ~0.6% of the ring's rate)...
const PROBE_EVERY: u32 = 256;

/// ... and the 8th, so that a short run finds out soon.
const FIRST_PROBE: u32 = 8;

/// Reads must be this much faster (their ticks per KiB times 5/4 below the
/// ring's) to be chosen: where both run at the same speed the ring stays.
const MARGIN_NUM: u64 = 5;
const MARGIN_DEN: u64 = 4;

/// A timestamp in ticks: the CPU's counter where there is one (a read
/// costs ~10 ns; the monotonic clock costs more on some VMs, and the
/// counter is the same on every core of a host, so the two processes'
/// figures compare), else nanoseconds. Only differences are used.
pub(super) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// A running average of ticks per KiB (0: none yet) moved an eighth of the
/// way to the sample `dt` ticks for `len` bytes.
pub(super) fn ewma(avg: u32, len: usize, dt: u64) -> u32 {
    let sample = (dt.saturating_mul(1024) / len.max(1) as u64).clamp(1, u64::from(u32::MAX)) as u32;
    if avg == 0 {
        sample
    } else {
        ((u64::from(avg) * 7 + u64::from(sample)) / 8) as u32
    }
}

/// Whether reads at `cma` ticks per KiB beat a ring whose copies take
/// `copy_in` and `copy_out` (0: not timed yet: no).
fn reads_win(copy_in: u32, copy_out: u32, cma: u32) -> bool {
    let ring = u64::from(copy_in.max(copy_out));
    copy_in > 0 && copy_out > 0 && cma > 0 && u64::from(cma) * MARGIN_NUM / MARGIN_DEN < ring
}

impl ShmDevice {
    /// The owner: a bulk packet of `len` bytes handled in `dt` ticks.
    pub(super) fn note_ring_out(&mut self, len: usize, dt: u64) {
        let w = self.map.u32_at(off::RING_OUT);
        w.store(ewma(w.load(Ordering::Relaxed), len, dt), Ordering::Relaxed);
    }

    /// The owner: a cross-memory-attach read of `len` bytes in `dt` ticks.
    pub(super) fn note_cma_in(&mut self, len: usize, dt: u64) {
        let w = self.map.u32_at(off::CMA_IN);
        w.store(ewma(w.load(Ordering::Relaxed), len, dt), Ordering::Relaxed);
    }

    /// Whether a message of `len` bytes to `ah` should go by long-read (see
    /// the module docs).
    pub(super) fn wants_longread(&mut self, ah: Ah, len: usize) -> bool {
        if len < ADAPT_MIN || !self.cma {
            return false;
        }
        let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut) else { return false };
        let out = p.map.u32_at(off::RING_OUT).load(Ordering::Relaxed);
        let cma = p.map.u32_at(off::CMA_IN).load(Ordering::Relaxed);
        let prefer = reads_win(p.copy_in, out, cma);
        p.large_sends = p.large_sends.wrapping_add(1);
        let probe = p.large_sends == FIRST_PROBE || p.large_sends % PROBE_EVERY == 0;
        prefer != probe
    }
}
