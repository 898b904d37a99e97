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
//! Packets go past the caches while at least [`FAR_COUNT`] of the last
//! [`SAMPLES`] times are above the limit. Measured on a 2-core VM, the
//! timer's own ~20-30 ns included, share of times above 90 ns: 0-1% while
//! the cache-line floor was ~50 ns; 61-86% while it was ~200 ns. The rest
//! of the far times are 20-30 ns: the line was at hand after all (the
//! producer's own accesses to the neighbouring tail line can bring it in).
//! So a far placement is told by a few high times, not by their median: a
//! median of five said "close" for about a third of the packets of a far
//! stream, and those plain-stored packets crossed at a third of the speed
//! (1 MiB tag_bw 6.6-13 GB/s against 13-15 with every packet past the
//! caches, paired rounds).

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

/// Times the decision looks at (the newest of a peer's).
const SAMPLES: u32 = 16;

/// How many of them above the limit make the peer far: a quarter. With
/// the shares measured (above; 1% and 61% of times high), a close peer
/// reaches it by chance about once in 60,000 decisions, and a far one
/// misses it about once in 1,400.
const FAR_COUNT: u32 = 4;

/// What a producer knows of how far a peer's CPU is.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// Large packets sent.
    count: u32,
    /// One bit per recorded time, newest lowest: set when it was above
    /// the limit (only the low [`SAMPLES`] bits count).
    over: u32,
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
        self.over = (self.over << 1) | u32::from(ns > limit);
        self.far = (self.over & ((1 << SAMPLES) - 1)).count_ones() >= FAR_COUNT;
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
    fn far_while_a_quarter_of_the_last_sixteen_times_is_over_the_limit() {
        let mut p = Placement::default();
        for ns in [500, 500, 500] {
            p.record(90, ns);
            assert!(!p.far, "three high times are not enough");
        }
        p.record(90, 91);
        assert!(p.far, "the fourth time over the limit");
        // A far placement where most loads find the line at hand.
        for k in 0..12 {
            p.record(90, 30);
            assert!(p.far, "four high among the last sixteen ({k} low since)");
        }
        p.record(90, 30);
        assert!(!p.far, "the first high time is now seventeenth: three left");
        p.record(90, 90);
        assert!(!p.far, "at the limit is not over it");
        // Close: rare high outliers never add up to four in sixteen.
        let mut p = Placement::default();
        for k in 0..200 {
            p.record(90, if k % 6 == 0 { 200 } else { 40 });
            assert!(!p.far, "one high time in six stays close (time {k})");
        }
        p.record(90, 200);
        assert!(p.far, "one more high time makes four in sixteen");
    }

    #[test]
    fn the_head_is_timed_once_per_sixteen_packets_and_only_when_it_moved() {
        let (head, mut seen) = (AtomicU64::new(7), 0);
        let mut p = marked();
        for k in 0..PROBE_EVERY * 3 {
            if k > 0 && k % PROBE_EVERY == 0 {
                head.fetch_add(1, Ordering::Relaxed);
            }
            p.nt(LIMIT, NT_MIN, &head, &mut seen);
        }
        // Probes at packets 0, 16 and 32; the head moved before each.
        assert_eq!(recorded(&p), 3);
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
        assert_eq!(recorded(&p), 3);
    }

    /// How many times were recorded since `p` was made by [`marked`]:
    /// each shifted its mark up one bit.
    fn recorded(p: &Placement) -> u32 {
        p.over.ilog2()
    }

    /// A placement whose history holds only a mark bit.
    fn marked() -> Placement {
        Placement { over: 1, ..Placement::default() }
    }
}
