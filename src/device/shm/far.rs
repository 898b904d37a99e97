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
//! So the producer times, now and then, a load of the owner's head word
//! (which the owner rewrites after every batch it takes, so the load
//! fetches the line from the owner's caches): the time is about one
//! cross-CPU transfer. Packets go past the caches while the least of the
//! last [`SAMPLES`] times is above the limit.

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

/// Times kept per peer.
const SAMPLES: usize = 4;

/// What a producer knows of how far a peer's CPU is.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// Large packets sent.
    count: u32,
    /// The head word's value at the last timed load.
    head: u64,
    /// The last load times (ns), `filled` of them valid.
    samples: [u32; SAMPLES],
    next: usize,
    filled: usize,
    /// The peer counts as far: large packets go past the caches.
    pub far: bool,
}

impl Placement {
    /// Whether a payload of `len` bytes goes past the caches; `limit`:
    /// [`ShmConfig::far_ns`]; `head`: the peer's head word.
    pub(super) fn nt(&mut self, limit: Option<u32>, len: usize, head: &AtomicU64) -> bool {
        match limit {
            _ if len < NT_MIN => false,
            None => false,
            Some(0) => true,
            Some(limit) => {
                if self.count % PROBE_EVERY == 0 {
                    self.probe(limit, head);
                }
                self.count = self.count.wrapping_add(1);
                self.far
            }
        }
    }

    /// Times one load of `head`. A value unchanged since the last load
    /// says the line may still be in this CPU's cache: no sample.
    fn probe(&mut self, limit: u32, head: &AtomicU64) {
        let t = Instant::now();
        let h = head.load(Ordering::Acquire);
        let ns = u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX);
        if h == self.head {
            return;
        }
        self.head = h;
        self.record(limit, ns);
    }

    /// Keeps one sample and decides again.
    pub(super) fn record(&mut self, limit: u32, ns: u32) {
        self.samples[self.next] = ns;
        self.next = (self.next + 1) % SAMPLES;
        self.filled = (self.filled + 1).min(SAMPLES);
        if self.filled == SAMPLES {
            self.far = self.samples.iter().min().is_some_and(|&m| m > limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Option<u32> = Some(120);

    #[test]
    fn small_payloads_and_the_off_switch_keep_plain_stores() {
        let head = AtomicU64::new(1);
        let mut p = Placement { far: true, ..Placement::default() };
        assert!(!p.nt(LIMIT, NT_MIN - 1, &head), "below NT_MIN");
        assert!(!p.nt(None, 1 << 20, &head), "None: never");
        assert!(Placement::default().nt(Some(0), NT_MIN, &head), "Some(0): always");
        assert_eq!(p.count, 0, "no probe for what never goes past the caches");
    }

    #[test]
    fn far_only_while_the_least_of_the_last_four_times_is_over_the_limit() {
        let mut p = Placement::default();
        for ns in [500, 500, 500] {
            p.record(120, ns);
            assert!(!p.far, "three samples are not enough");
        }
        p.record(120, 121);
        assert!(p.far);
        p.record(120, 60);
        assert!(!p.far, "one near time among the last four");
        for _ in 0..3 {
            p.record(120, 300);
            assert!(!p.far, "the near time is still among the last four");
        }
        p.record(120, 300);
        assert!(p.far);
        p.record(120, 120);
        assert!(!p.far, "at the limit is not over it");
    }

    #[test]
    fn the_head_is_timed_once_per_sixteen_packets_and_only_when_it_moved() {
        let head = AtomicU64::new(7);
        let mut p = Placement::default();
        for k in 0..PROBE_EVERY * 3 {
            if k > 0 && k % PROBE_EVERY == 0 {
                head.fetch_add(1, Ordering::Relaxed);
            }
            p.nt(LIMIT, NT_MIN, &head);
        }
        // Probes at packets 0, 16 and 32; the head moved before each.
        assert_eq!(p.filled, 3);
        assert_eq!(p.head, 9);
        // An unmoved head gives no sample.
        for _ in 0..PROBE_EVERY {
            p.nt(LIMIT, NT_MIN, &head);
        }
        assert_eq!(p.filled, 3);
    }
}
