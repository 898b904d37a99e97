//! Which way large messages should come: through the ring or by one
//! cross-memory-attach read (long-read). The owner times both as they
//! happen — its copies of bulk packets out of the ring, its
//! `process_vm_readv` reads — and publishes in its header (`off::PREFER`)
//! whether reads are the faster; senders send messages from
//! `ADAPT_MIN` bytes by long-read while it says so, and the 8th and every
//! `PROBE_EVERY`th such message the other way, so that both times stay
//! fresh when the machine changes.
//!
//! Why: where the two CPUs sit far apart (cross-process cache-line floor
//! ~195 ns instead of ~60 on a 2-core VM whose vCPUs move), the ring's two
//! copies pull every line across and streamed 6.8-7.1 GB/s for 1 MiB
//! messages while one read got 10.4-11.0 (UCX's, the same read: 10.2-10.9);
//! near, the ring streams ~27 GB/s and reads ~11.

use std::sync::atomic::Ordering;

use super::{off, Ah, ShmDevice};

/// Packets and reads from this many bytes are timed.
pub(super) const TIMED_MIN: usize = 32 * 1024;

/// Messages from this many bytes follow the owner's preference.
const ADAPT_MIN: usize = 256 * 1024;

/// Every this many messages from `ADAPT_MIN` to one peer, one goes the way
/// not preferred (1 MiB tag_bw near: ~0.6% of the ring's rate).
const PROBE_EVERY: u32 = 256;

/// The large message that probes first.
const FIRST_PROBE: u32 = 8;

/// Reads must be this much faster (ticks per KiB times 5/4 below the
/// ring's) before the owner asks for them: in spells where both run at the
/// same speed the ring stays.
const MARGIN_NUM: u64 = 5;
const MARGIN_DEN: u64 = 4;

/// Running averages of ticks per KiB (0: not measured yet).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Rates {
    pub ring: u64,
    pub cma: u64,
}

/// A timestamp in ticks: the CPU's counter where there is one (a read
/// costs ~10 ns; the monotonic clock costs more on some VMs), else
/// nanoseconds. Only differences are used, and both rates in the same unit.
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

/// `avg` moved an eighth of the way to `sample` (or set to it first).
fn ewma(avg: u64, sample: u64) -> u64 {
    if avg == 0 {
        sample.max(1)
    } else {
        (avg * 7 + sample) / 8
    }
}

impl ShmDevice {
    /// Records a bulk packet of `len` bytes handled in `dt` ticks.
    pub(super) fn note_ring(&mut self, len: usize, dt: u64) {
        self.rates.ring = ewma(self.rates.ring, dt * 1024 / len.max(1) as u64);
        self.publish_preference();
    }

    /// Records a cross-memory-attach read of `len` bytes in `dt` ticks.
    pub(super) fn note_cma(&mut self, len: usize, dt: u64) {
        self.rates.cma = ewma(self.rates.cma, dt * 1024 / len.max(1) as u64);
        self.publish_preference();
    }

    /// Says in the header whether reads are the faster way in, once both
    /// have been timed.
    pub(super) fn publish_preference(&mut self) {
        let Rates { ring, cma } = self.rates;
        let want = ring > 0 && cma > 0 && cma * MARGIN_NUM / MARGIN_DEN < ring;
        if want != self.prefer_reads {
            self.prefer_reads = want;
            self.map.u32_at(off::PREFER).store(u32::from(want), Ordering::Relaxed);
        }
    }

    /// Whether a message of `len` bytes to `ah` should go by long-read: the
    /// peer's preference, with a probe the other way every `PROBE_EVERY`.
    pub(super) fn wants_longread(&mut self, ah: Ah, len: usize) -> bool {
        if len < ADAPT_MIN || !self.cma {
            return false;
        }
        let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut) else { return false };
        let prefer = p.map.u32_at(off::PREFER).load(Ordering::Relaxed) == 1;
        p.large_sends = p.large_sends.wrapping_add(1);
        // The first probe early: a short run finds out soon.
        let probe = p.large_sends == FIRST_PROBE || p.large_sends % PROBE_EVERY == 0;
        prefer != probe
    }
}
