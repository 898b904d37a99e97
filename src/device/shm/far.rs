//! Large packets written past the caches when the two CPUs are far apart,
//! or when a stream to a close peer laps the ring quicker that way
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
//! [`SAMPLES`] times are above the limit. Close, only a few of the times
//! (the timer's own cost included) are above the default limit; far
//! apart, from a minority to most of them, the rest finding the line at
//! hand (the producer's own accesses to the neighbouring tail line can
//! bring it in). So a far placement is told by a few high times, not by
//! their median or most of them: a far packet written through the caches
//! crosses much slower, and a few percent of such packets cost a stream
//! much of its rate (docs/performance.md, "Non-temporal stores").
//!
//! Close, plain stores usually win, but not always: in spells that come and
//! go for seconds, streams through the ring with plain stores run slower
//! than with non-temporal ones. Timing the producer's own
//! copies cannot tell these spells: a plain copy among non-temporal ones is
//! slow even where plain stores win (the owner, slower then, holds the
//! lines just behind the producer). What tells them is the stream's pace.
//! So, close, a producer streaming to a peer times each lap of the ring
//! (the ring's size, by its tail) written without a pause (every bulk
//! packet marked "more follows", [`crate::device::Device::more_follows`];
//! laps with a pause are passed over). Every [`TRIAL_LAPS`] laps (the
//! first time after [`FIRST_TRIAL`]) it writes two laps the other way; at
//! once, too, when the last [`RECENT`] laps all took over 3/2 of the
//! quickest since the last trial (a spell began). If the second lap of the
//! trial took under 7/8 of the quickest of the last [`RECENT`] laps the
//! usual way, the other way becomes the usual one, until a trial says
//! otherwise or the peer is found far.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[cfg(doc)]
use super::ShmConfig;

/// Payloads at least this large may be written past the caches (the bulk
/// packets of long messages; the owner copies smaller ones out while they
/// are still in the producer's caches).
pub(super) const NT_MIN: usize = 32 << 10;

/// Payloads from this size are counted for the timed loads (below
/// [`NT_MIN`] they still go through the caches): a job whose messages are
/// all medium-sized (a 64 KiB message is segments of about 11 KiB) finds
/// its far peers too, and moves such messages by long-read to them
/// (`ShmConfig::far_longread_min`).
pub(super) const PROBE_MIN: usize = 4 << 10;

/// One timed load per this many packets of [`PROBE_MIN`] bytes or more to
/// a peer (64 KiB packets: one per MiB).
const PROBE_EVERY: u32 = 16;

/// Times the decision looks at (the newest of a peer's).
const SAMPLES: u32 = 32;

/// How many of them above the limit make the peer far. By the shares of
/// high times measured close and far, a close peer reaches it by chance
/// rarely and a far one misses it more rarely still, which suits the two
/// errors' costs: a close packet past the caches takes a little less than
/// its plain time, a far packet through them several times its
/// non-temporal time (docs/performance.md, "Non-temporal stores").
const FAR_COUNT: u32 = 3;

/// Laps the usual way between trials of the other (8 MiB laps: 2 GiB),
/// unless the usual way slows down.
const TRIAL_LAPS: u32 = 256;

/// Laps the usual way before a peer's first trial (a stream's first laps
/// are slow either way: a trial among them tells nothing).
const FIRST_TRIAL: u32 = 16;

/// Laps the usual way a trial is held against: the quickest of the last
/// four (the spells come and go within a stream).
const RECENT: usize = 4;

/// Paused laps that end a trial.
const TRIAL_PAUSES: u8 = 4;

/// A close peer's laps and trials (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Laps {
    /// When the current lap's first packet was written, and the ring's
    /// tail then (sends refused for want of room count for nothing).
    start: Option<(Instant, u64)>,
    /// A packet of the current lap was not marked "more follows".
    paused: bool,
    /// Unpaused laps the usual way since the last trial (paused ones pass).
    laps: u32,
    /// A trial has been made.
    tried: bool,
    /// The quickest unpaused lap the usual way since the last trial.
    best: u64,
    /// Laps of the trial under way (0: none), and paused laps met in it.
    trial: u8,
    trial_pauses: u8,
    /// The last [`RECENT`] unpaused laps the usual way (ns), the newest at
    /// `(laps - 1) % RECENT`.
    recent: [u64; RECENT],
    /// Non-temporal stores are the usual way.
    swapped: bool,
}

impl Laps {
    /// Whether a bulk packet, marked `more` follows, goes past the caches;
    /// `tail`: the ring's tail before it; `ring`: the ring's bytes; `now`:
    /// the clock.
    pub(super) fn nt(&mut self, more: bool, tail: u64, ring: usize, now: impl Fn() -> Instant) -> bool {
        let (start, from) = *self.start.get_or_insert_with(|| (now(), tail));
        if tail.wrapping_sub(from) >= ring as u64 {
            // This packet starts the next lap.
            let t = now();
            let ns = u64::try_from(t.duration_since(start).as_nanos()).unwrap_or(u64::MAX);
            let paused = std::mem::take(&mut self.paused);
            self.start = Some((t, tail));
            self.lap_done(ns, paused);
        }
        self.paused |= !more;
        self.swapped != (self.trial > 0)
    }

    /// Keeps the time of a lap just written, `paused` or not. A paused lap
    /// says nothing of either way and is passed over (a benchmark's window
    /// of sends drains at its end: every few laps); a trial that meets
    /// [`TRIAL_PAUSES`] of them ends without a verdict.
    fn lap_done(&mut self, ns: u64, paused: bool) {
        if paused {
            if self.trial > 0 {
                self.trial_pauses += 1;
                if self.trial_pauses >= TRIAL_PAUSES {
                    self.trial = 0;
                }
            }
            return;
        }
        match self.trial {
            0 => {
                self.recent[self.laps as usize % RECENT] = ns;
                self.best = if self.laps == 0 { ns } else { self.best.min(ns) };
                self.laps += 1;
                let slowed =
                    self.laps as usize >= RECENT && self.recent_best().saturating_mul(2) > self.best.saturating_mul(3);
                if slowed || self.laps >= if self.tried { TRIAL_LAPS } else { FIRST_TRIAL } {
                    (self.laps, self.trial, self.tried, self.trial_pauses) = (0, 1, true, 0);
                }
            }
            1 => self.trial = 2, // the first lap only turns the ring over
            _ => {
                self.trial = 0;
                if ns.saturating_mul(8) < self.recent_best().saturating_mul(7) {
                    self.swapped = !self.swapped;
                }
            }
        }
    }

    /// The quickest of the last [`RECENT`] laps the usual way. A trial
    /// starts only after at least that many (`FIRST_TRIAL`, `TRIAL_LAPS`
    /// or the slowdown's `RECENT`), so all are of the way now usual.
    fn recent_best(&self) -> u64 {
        self.recent.iter().copied().min().unwrap_or(0)
    }
}

/// The words of a peer's ring that [`Placement::nt`] reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring<'a> {
    /// The owner's head (read position) and the producers' tail.
    pub(super) head: &'a AtomicU64,
    pub(super) tail: &'a AtomicU64,
    /// The ring's bytes.
    pub(super) len: usize,
}

/// What a producer knows of how far a peer's CPU is.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// Packets of [`PROBE_MIN`] bytes or more sent.
    count: u32,
    /// One bit per recorded time, newest lowest: set when it was above
    /// the limit (only the low [`SAMPLES`] bits count).
    over: u64,
    /// The peer counts as far: large packets go past the caches.
    far: bool,
    /// While it is close, its laps and trials.
    laps: Laps,
}

impl Placement {
    /// Whether a payload of `len` bytes goes past the caches; `limit`:
    /// [`ShmConfig::far_ns`]; `ring`: the peer's ring; `seen`: its head's
    /// value as last loaded (updated when this loads it); `more`: the
    /// packet is marked "more follows".
    pub(super) fn nt(&mut self, limit: Option<u32>, len: usize, ring: Ring, seen: &mut u64, more: bool) -> bool {
        match limit {
            None => false,
            Some(0) => len >= NT_MIN,
            _ if len < PROBE_MIN => false,
            Some(limit) => {
                if self.count % PROBE_EVERY == 0 {
                    self.probe(limit, ring.head, seen);
                }
                self.count = self.count.wrapping_add(1);
                if len < NT_MIN {
                    return false;
                }
                if self.far {
                    self.laps = Laps::default();
                    return true;
                }
                self.laps.nt(more, super::segment::tail_pos(ring.tail.load(Ordering::Relaxed)), ring.len, Instant::now)
            }
        }
    }

    /// Whether the peer counts as far now.
    pub(super) fn far(&self) -> bool {
        self.far
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
        self.over = (self.over << 1) | u64::from(ns > limit);
        self.far = (self.over & ((1 << SAMPLES) - 1)).count_ones() >= FAR_COUNT;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::*;

    const LIMIT: Option<u32> = Some(120);
    const RING: usize = 1000;
    const PKT: u64 = 100;

    #[test]
    fn small_payloads_and_the_off_switch_keep_plain_stores() {
        let (head, mut seen, tail) = (AtomicU64::new(1), 0, AtomicU64::new(0));
        let mut p = Placement { far: true, ..Placement::default() };
        assert!(!p.nt(LIMIT, PROBE_MIN - 1, ring(&head, &tail), &mut seen, true), "below PROBE_MIN");
        assert!(!p.nt(None, 1 << 20, ring(&head, &tail), &mut seen, true), "None: never");
        assert!(Placement::default().nt(Some(0), NT_MIN, ring(&head, &tail), &mut seen, true), "Some(0): always");
        assert!(
            !Placement::default().nt(Some(0), NT_MIN - 1, ring(&head, &tail), &mut seen, true),
            "Some(0): bulk only"
        );
        assert_eq!(p.count, 0, "small packets are not counted for the timed loads");
        assert!(!p.nt(LIMIT, NT_MIN - 1, ring(&head, &tail), &mut seen, true), "below NT_MIN, even far");
        assert_eq!(p.count, 1, "medium packets are");
    }

    #[test]
    fn medium_packets_alone_find_a_far_peer() {
        // Every timed load finds a new head value and is over a limit of
        // 1 ns.
        let (head, mut seen, tail) = (AtomicU64::new(1), 0, AtomicU64::new(0));
        let mut p = Placement::default();
        let mut k = 0u64;
        while !p.far() && k < u64::from(PROBE_EVERY) * 8 {
            head.store(k + 2, Ordering::Relaxed);
            assert!(!p.nt(Some(1), 11 << 10, ring(&head, &tail), &mut seen, false), "medium: plain stores");
            k += 1;
        }
        assert!(p.far(), "far after {k} medium packets");
    }

    #[test]
    fn far_while_three_of_the_last_thirty_two_times_are_over_the_limit() {
        let mut p = Placement::default();
        for ns in [500, 500] {
            p.record(90, ns);
            assert!(!p.far, "two high times are not enough");
        }
        p.record(90, 91);
        assert!(p.far, "the third time over the limit");
        // A far placement where most loads find the line at hand.
        for k in 0..29 {
            p.record(90, 30);
            assert!(p.far, "three high among the last 32 ({k} low since)");
        }
        p.record(90, 30);
        assert!(!p.far, "the first high time is now the 33rd: two left");
        p.record(90, 90);
        assert!(!p.far, "at the limit is not over it");
        // Close: rare high outliers never add up to three in 32.
        let mut p = Placement::default();
        for k in 0..376 {
            p.record(90, if k % 16 == 0 { 200 } else { 40 });
            assert!(!p.far, "one high time in sixteen stays close (time {k})");
        }
        p.record(90, 200);
        assert!(p.far, "one more high time (8 after the last) makes three in 32");
    }

    #[test]
    fn the_head_is_timed_once_per_sixteen_packets_and_only_when_it_moved() {
        let (head, mut seen, tail) = (AtomicU64::new(7), 0, AtomicU64::new(0));
        let mut p = marked();
        for k in 0..PROBE_EVERY * 3 {
            if k > 0 && k % PROBE_EVERY == 0 {
                head.fetch_add(1, Ordering::Relaxed);
            }
            p.nt(LIMIT, NT_MIN, ring(&head, &tail), &mut seen, true);
        }
        // Probes at packets 0, 16 and 32; the head moved before each.
        assert_eq!(recorded(&p), 3);
        assert_eq!(seen, 9);
        // An unmoved head gives no sample, nor one the room check has
        // already loaded.
        for _ in 0..PROBE_EVERY {
            p.nt(LIMIT, NT_MIN, ring(&head, &tail), &mut seen, true);
        }
        head.store(10, Ordering::Relaxed);
        seen = 10;
        for _ in 0..PROBE_EVERY {
            p.nt(LIMIT, NT_MIN, ring(&head, &tail), &mut seen, true);
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

    /// The ring of `RING` bytes with these words.
    fn ring<'a>(head: &'a AtomicU64, tail: &'a AtomicU64) -> Ring<'a> {
        Ring { head, tail, len: RING }
    }

    /// One packet of `PKT` bytes through `l`, marked `more` or not, taking
    /// `plain` or `nt` ns by the way it went: that way.
    fn send(l: &mut Laps, clock: &Cell<Instant>, tail: &mut u64, more: bool, plain: u64, nt: u64) -> bool {
        let way = l.nt(more, *tail, RING, || clock.get());
        clock.set(clock.get() + Duration::from_nanos(if way { nt } else { plain }));
        *tail += PKT;
        way
    }

    /// `n` packets marked "more follows", as [`send`]: the ways, in order.
    fn stream(l: &mut Laps, clock: &Cell<Instant>, tail: &mut u64, n: usize, plain: u64, nt: u64) -> Vec<bool> {
        (0..n).map(|_| send(l, clock, tail, true, plain, nt)).collect()
    }

    /// Laps of ten packets: `FIRST_TRIAL` laps plain, then the trial.
    const TRIAL_AT: usize = FIRST_TRIAL as usize * 10;

    #[test]
    fn close_a_trial_of_two_laps_makes_a_quicker_way_usual() {
        let (clock, mut tail, mut l) = (Cell::new(Instant::now()), 0, Laps::default());
        let ways = stream(&mut l, &clock, &mut tail, TRIAL_AT + 21, 200, 170);
        assert!(ways[..TRIAL_AT].iter().all(|w| !w), "plain stores first");
        assert!(ways[TRIAL_AT..TRIAL_AT + 20].iter().all(|w| *w), "two laps of trial");
        assert!(ways[TRIAL_AT + 20], "1700 ns a lap against 2000: non-temporal stores now usual");
        // The next trial, of plain stores, comes TRIAL_LAPS laps later and
        // finds them still slower.
        let ways = stream(&mut l, &clock, &mut tail, TRIAL_LAPS as usize * 10 + 21, 200, 170);
        let n = TRIAL_LAPS as usize * 10 - 1;
        assert!(ways[..n].iter().all(|w| *w));
        assert!(ways[n..n + 20].iter().all(|w| !w), "the trial of plain stores");
        assert!(ways[n + 20], "back to non-temporal stores");
    }

    #[test]
    fn close_a_slowdown_of_the_usual_way_brings_the_trial_forward() {
        let (clock, mut tail) = (Cell::new(Instant::now()), 0);
        let mut l = Laps { tried: true, ..Laps::default() };
        let ways = stream(&mut l, &clock, &mut tail, 100, 100, 170);
        assert!(!ways.iter().any(|w| *w), "plain laps of 1000 ns");
        // Plain laps now take 2000 ns: after four of them, the trial.
        let ways = stream(&mut l, &clock, &mut tail, 61, 200, 170);
        assert!(!ways[..40].iter().any(|w| *w));
        assert!(ways[40..].iter().all(|w| *w), "the trial, then non-temporal stores as usual");
        assert!(l.swapped);
    }

    #[test]
    fn close_a_way_not_quicker_by_an_eighth_stays_unused() {
        let (clock, mut tail, mut l) = (Cell::new(Instant::now()), 0, Laps::default());
        let ways = stream(&mut l, &clock, &mut tail, TRIAL_AT + 40, 200, 180);
        assert_eq!(ways.iter().filter(|w| **w).count(), 20, "only the trial");
        assert!(!ways[TRIAL_AT + 20..].iter().any(|w| *w), "1800 ns is not under 7/8 of 2000");
    }

    #[test]
    fn paused_laps_and_refused_sends_count_for_nothing() {
        let (clock, mut tail, mut l) = (Cell::new(Instant::now()), 0, Laps::default());
        let mut send = |l: &mut Laps, more: bool| send(l, &clock, &mut tail, more, 200, 170);
        // One packet of every lap not marked "more follows": never a trial.
        for k in 0..TRIAL_AT * 3 {
            assert!(!send(&mut l, k % 10 != 3), "packet {k}");
        }
        // Six laps without a pause, two with one (a benchmark's window):
        // the trial comes after FIRST_TRIAL unpaused laps all the same.
        let mut l = Laps::default();
        let ways: Vec<bool> = (0..TRIAL_AT * 2).map(|k| send(&mut l, k % 80 < 60 || k % 10 != 0)).collect();
        let first = ways.iter().position(|w| *w).expect("a trial");
        assert_eq!(first / 10, FIRST_TRIAL as usize / 6 * 8 + FIRST_TRIAL as usize % 6, "after 16 unpaused laps");
        // A trial whose laps keep pausing ends without a verdict.
        let mut l = Laps { laps: FIRST_TRIAL - 1, ..Laps::default() };
        let ways: Vec<bool> = (0..100).map(|k| send(&mut l, k < 10)).collect();
        assert!(ways[10..50].iter().all(|w| *w), "the trial holds through paused laps");
        assert!(!ways[50..].iter().any(|w| *w), "until the fourth ends it");
        // Refused sends ask again at the same tail: no lap ends.
        let mut l = Laps::default();
        for _ in 0..TRIAL_AT * 3 {
            assert!(!l.nt(true, 0, RING, || clock.get()));
        }
        assert_eq!(l.laps, 0);
    }

    #[test]
    fn far_resets_the_laps() {
        let (head, mut seen, tail) = (AtomicU64::new(1), 0, AtomicU64::new(0));
        let laps = Laps { swapped: true, ..Laps::default() };
        let mut p = Placement { far: true, count: 1, laps, ..Placement::default() };
        assert!(p.nt(LIMIT, NT_MIN, ring(&head, &tail), &mut seen, true), "far: past the caches");
        assert!(!p.laps.swapped, "a close spell after this one starts afresh");
    }
}
