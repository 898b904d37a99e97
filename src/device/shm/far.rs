//! Large packets written past the caches when the two CPUs are far apart
//! ([`ShmConfig::far_ns`]).
//!
//! A producer's plain stores into the ring first fetch each line, and the
//! lines of an 8 MiB ring were last read by the owner, a lap before: when
//! the two CPUs share a last-level cache the fetch is cheap; when they do
//! not (a VM whose vCPUs the host placed apart), every line crosses between
//! the CPUs twice, once to the producer and once back to the owner.
//! Non-temporal stores skip the first crossing (the owner then reads the
//! lines from memory). Where the CPUs are close they are a loss: the owner
//! reads from memory what it would have found in the shared cache.
//!
//! So the producer times, now and then, a load of the owner's head word.
//! When the word holds a value the producer has not seen before (by this
//! load or by the one that checks for room), the owner wrote it since, the
//! line came from the owner's caches, and the time is about one cross-CPU
//! transfer; otherwise the line may have been at hand and the time says
//! nothing (a few such times remain: the line can arrive by other ways).
//! Packets go past the caches while the median of the last [`SAMPLES`]
//! times is above the limit. Measured on a 2-core VM with the timer's own
//! ~20-30 ns included: 30-60 ns (90% of samples at most 50-70) while the
//! cache-line floor was ~50 ns; 120-160 ns, with a few of 30, while it was
//! ~160-190 ns.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[cfg(doc)]
use super::ShmConfig;

/// Payloads at least this large may be written past the caches (the bulk
/// packets of long messages; the owner copies smaller ones out while they
/// are still in the producer's caches).
pub(super) const NT_MIN: usize = 32 << 10;

/// One timed load per this many large packets to a peer (64 KiB packets:
/// one per MiB).
const PROBE_EVERY: u32 = 16;

/// Times kept per peer (the decision takes their median).
const SAMPLES: usize = 5;

/// What a producer knows of how far a peer's CPU is.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// Large packets sent.
    count: u32,
    /// The last load times (ns), `filled` of them valid.
    samples: [u32; SAMPLES],
    next: usize,
    filled: usize,
    /// The peer counts as far: large packets go past the caches.
    far: bool,
}

impl Placement {
    /// Whether a payload of `len` bytes goes past the caches; `limit`:
    /// [`ShmConfig::far_ns`]; `head`: the peer's head word; `seen`: its
    /// value as last loaded (updated when this loads it).
    pub(super) fn nt(&mut self, limit: Option<u32>, len: usize, head: &AtomicU64, seen: &mut u64) -> bool {
        match limit {
            _ if len < NT_MIN => false,
            None => false,
            Some(0) => true,
            Some(limit) => {
                if self.count % PROBE_EVERY == 0 {
                    self.probe(limit, head, seen);
                }
                self.count = self.count.wrapping_add(1);
                self.far
            }
        }
    }

    /// Times one load of `head`. A value already `seen` says the line may
    /// still be in this CPU's cache: no sample.
    fn probe(&mut self, limit: u32, head: &AtomicU64, seen: &mut u64) {
        let t = Instant::now();
        let h = head.load(Ordering::Acquire);
        let ns = u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX);
        if h == *seen {
            return;
        }
        *seen = h;
        self.record(limit, ns);
    }

    /// Keeps one sample and decides again.
    fn record(&mut self, limit: u32, ns: u32) {
        self.samples[self.next] = ns;
        self.next = (self.next + 1) % SAMPLES;
        self.filled = (self.filled + 1).min(SAMPLES);
        if self.filled == SAMPLES {
            let mut s = self.samples;
            s.sort_unstable();
            self.far = s[SAMPLES / 2] > limit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Option<u32> = Some(120);

    #[test]
    fn small_payloads_and_the_off_switch_keep_plain_stores() {
        let (head, mut seen) = (AtomicU64::new(1), 0);
        let mut p = Placement { far: true, ..Placement::default() };
        assert!(!p.nt(LIMIT, NT_MIN - 1, &head, &mut seen), "below NT_MIN");
        assert!(!p.nt(None, 1 << 20, &head, &mut seen), "None: never");
        assert!(Placement::default().nt(Some(0), NT_MIN, &head, &mut seen), "Some(0): always");
        assert_eq!(p.count, 0, "no probe for what never goes past the caches");
    }

    #[test]
    fn far_while_the_median_of_the_last_five_times_is_over_the_limit() {
        let mut p = Placement::default();
        for ns in [500, 500, 500, 30] {
            p.record(90, ns);
            assert!(!p.far, "four samples are not enough");
        }
        p.record(90, 91);
        assert!(p.far, "500 500 500 30 91: median 500");
        p.record(90, 40);
        assert!(p.far, "500 500 30 91 40: median 91, two near times are outliers");
        p.record(90, 40);
        assert!(!p.far, "500 30 91 40 40: median 40");
        p.record(90, 300);
        assert!(!p.far, "30 91 40 40 300: median 40");
        p.record(90, 300);
        assert!(p.far, "91 40 40 300 300: median 91");
        for _ in 0..3 {
            p.record(90, 90);
        }
        assert!(!p.far, "300 300 90 90 90: median 90, at the limit is not over it");
    }

    #[test]
    fn the_head_is_timed_once_per_sixteen_packets_and_only_when_it_moved() {
        let (head, mut seen) = (AtomicU64::new(7), 0);
        let mut p = Placement::default();
        for k in 0..PROBE_EVERY * 3 {
            if k > 0 && k % PROBE_EVERY == 0 {
                head.fetch_add(1, Ordering::Relaxed);
            }
            p.nt(LIMIT, NT_MIN, &head, &mut seen);
        }
        // Probes at packets 0, 16 and 32; the head moved before each.
        assert_eq!(p.filled, 3);
        assert_eq!(seen, 9);
        // An unmoved head gives no sample, nor one the room check has
        // already loaded.
        for _ in 0..PROBE_EVERY {
            p.nt(LIMIT, NT_MIN, &head, &mut seen);
        }
        head.store(10, Ordering::Relaxed);
        seen = 10;
        for _ in 0..PROBE_EVERY {
            p.nt(LIMIT, NT_MIN, &head, &mut seen);
        }
        assert_eq!(p.filled, 3);
    }
}
