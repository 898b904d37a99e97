//! The owner lagging behind a fast one-way stream of small packets
//! ([`ShmConfig::lag`]).
//!
//! A receiver that keeps up with a stream of 8-byte messages reads (itself
//! or by its hardware prefetcher, most likely) the cache lines its producer
//! is about to write, or has just asked for: they move to the reader and
//! back, and the producer waits for them. Such a stream settles well below
//! the rate of the spells in which the receiver happens to fall behind
//! (docs/performance.md, "Lag").
//!
//! So, in a fast one-way stream, the express receive reads the ring's tail
//! once per poll and takes only the packets that lie more than `lag` bytes
//! behind it. When fewer are there, it leaves the ring alone for
//! [`HOLD`] (polls in that time return at once, without reading it); the
//! first poll after that takes what lies beyond the lag by then, or, when
//! nothing does, everything there; and a poll takes everything there when
//! the last that did is [`WAIT_MAX`] (10 us) ago. So a packet waits until
//! the stream has written `lag` bytes after it, 10 us at most, or, when
//! the stream pauses, one hold. A stream that stops is read to its end.
//! The bound costs a little of the 8 B rate; without it, a packet of the
//! slowest stream that counts could wait a run's worth of gaps (64 us;
//! docs/performance.md, "Lag").
//!
//! A fast one-way stream: the express receive took at least [`STREAM_RUN`]
//! packets in a row without this endpoint sending anything between them,
//! at a rate of at least one per [`STREAM_GAP`]. Sending ends it (a
//! ping-pong, a request and its reply: every packet is answered and none is
//! held), and so does a slower run, or a pause of a run's worth of gaps
//! (64 us). A receiver of sparse one-way traffic therefore never holds a
//! packet back, and one of a trickle after a fast stream only within
//! those 64 us.

use std::time::{Duration, Instant};

use super::{off, ShmDevice};

#[cfg(doc)]
use super::ShmConfig;

/// How long a lagging receiver leaves the ring alone once it has caught up.
pub(super) const HOLD: Duration = Duration::from_nanos(1500);

/// How long a lagging receiver goes at most without taking everything
/// there (so that no packet is left behind longer).
pub(super) const WAIT_MAX: Duration = Duration::from_micros(10);

/// Packets in a row, none answered, before a stream counts as one.
pub(super) const STREAM_RUN: u32 = 256;

/// The slowest mean gap between a run's packets for it to count as fast.
pub(super) const STREAM_GAP: Duration = Duration::from_nanos(250);

/// A run's worth of the slowest gaps: marks further apart than this are
/// not a fast stream, and a stream that reached no mark for this long is
/// over.
const RUN_SPAN: Duration = Duration::from_nanos(250 * STREAM_RUN as u64);
const _: () = assert!(RUN_SPAN.as_nanos() == STREAM_GAP.as_nanos() * STREAM_RUN as u128);

/// What the lag needs to remember between polls.
#[derive(Debug)]
pub(super) struct Lag {
    /// In a fast one-way stream, or holding: polls take the slow path.
    on: bool,
    /// Packets to the next mark of the current run (none answered).
    left: u32,
    /// Polls leave the ring alone until then.
    hold: Option<Instant>,
    /// The last poll held: the next takes everything there.
    held: bool,
    /// When the current run last reached a mark (every [`STREAM_RUN`]).
    mark: Option<Instant>,
    /// The current run is a fast one-way stream: lag behind it.
    stream: bool,
    /// When a poll last took everything there.
    drained: Option<Instant>,
}

impl Default for Lag {
    fn default() -> Lag {
        Lag { on: false, left: STREAM_RUN, hold: None, held: false, mark: None, stream: false, drained: None }
    }
}

impl ShmDevice {
    /// Whether polls leave the ring alone for now (a hold; see the module
    /// docs). One branch outside fast one-way streams.
    #[inline(always)]
    pub(super) fn holding(&mut self) -> bool {
        self.lag_state.on && self.hold_goes_on()
    }

    fn hold_goes_on(&mut self) -> bool {
        if self.lag_state.hold.is_some_and(|t| Instant::now() < t) {
            return true;
        }
        self.lag_state.hold = None;
        false
    }

    /// How many packets the express receive may take now: any number
    /// (`usize::MAX`) unless in a fast one-way stream, where as many lines
    /// as lie more than `lag` bytes behind the tail (the packets there, when
    /// each takes one line, as the small packets of such a stream do);
    /// `None`: none (a hold, begun or going on). `answering`: this endpoint
    /// sent since its last receive, which ends any run (and its hold).
    #[inline(always)]
    pub(super) fn lag_limit(&mut self, answering: bool) -> Option<usize> {
        if !self.lag_state.on {
            if answering {
                self.lag_state.left = STREAM_RUN;
            }
            return Some(usize::MAX);
        }
        self.stream_limit(answering)
    }

    #[inline(never)]
    fn stream_limit(&mut self, answering: bool) -> Option<usize> {
        if answering {
            self.lag_state = Lag::default();
            return Some(usize::MAX);
        }
        if self.hold_goes_on() {
            return None;
        }
        if !self.lag_state.stream {
            // The hold that kept the slow path on is over.
            self.lag_state.on = false;
            return Some(usize::MAX);
        }
        // A peer may store anything in the tail: a wrong value only moves
        // the limit, and packets are still read only once sealed.
        let tail =
            super::segment::tail_pos(self.map.hdr_u64::<{ off::TAIL }>().load(std::sync::atomic::Ordering::Relaxed));
        if tail > self.head.saturating_add(self.lag) {
            self.lag_state.held = false;
            let now = Instant::now();
            if self.lag_state.drained.is_none_or(|t| now.duration_since(t) > WAIT_MAX) {
                self.lag_state.drained = Some(now);
                return Some(usize::MAX);
            }
            // At least one: a stream that stops a few bytes past the lag
            // is still read to its end.
            let lines = ((tail - self.lag - self.head) / 64).max(1);
            return Some(lines.try_into().unwrap_or(usize::MAX));
        }
        if self.lag_state.held {
            self.lag_state.held = false;
            return Some(usize::MAX);
        }
        // A stream that has not reached its next mark for a run's worth of
        // gaps is over: a trickle after it is not held.
        let now = Instant::now();
        if self.mark_age(now).is_some_and(|a| a > RUN_SPAN) {
            self.lag_state.stream = false;
            self.lag_state.on = false;
            return Some(usize::MAX);
        }
        self.lag_state.held = true;
        self.lag_state.hold = Some(now + HOLD);
        None
    }

    /// Counts `n` packets the express receive took (none answered since the
    /// run began), and decides at every [`STREAM_RUN`] whether the run is
    /// a fast stream.
    #[inline(always)]
    pub(super) fn count_run(&mut self, n: usize) {
        let left = self.lag_state.left.saturating_sub(n as u32);
        self.lag_state.left = left;
        if left == 0 {
            self.mark_run();
        }
    }

    #[inline(never)]
    fn mark_run(&mut self) {
        if self.lag == 0 {
            // No lag, no stream to find: count on without reading the clock.
            self.lag_state.left = u32::MAX;
            return;
        }
        let now = Instant::now();
        let fast = self.mark_age(now).is_some_and(|a| a <= RUN_SPAN);
        self.lag_state.stream = fast;
        self.lag_state.on = self.lag_state.stream || self.lag_state.hold.is_some();
        self.lag_state.mark = Some(now);
        self.lag_state.left = STREAM_RUN;
    }

    /// How long ago the current run last reached a mark.
    fn mark_age(&self, now: Instant) -> Option<Duration> {
        self.lag_state.mark.map(|t| now.duration_since(t))
    }
}

#[cfg(test)]
impl ShmDevice {
    /// Whether the current run counts as a fast one-way stream.
    pub(super) fn in_stream(&self) -> bool {
        self.lag_state.stream
    }

    /// Makes the current run a fast one-way stream, as `mark_run` would
    /// after two quick marks; its last mark, and the last poll that took
    /// everything, `age` ago (`None`: times that do not get old).
    pub(super) fn enter_stream(&mut self, age: Option<Duration>) {
        let now = Instant::now();
        let mark = match age {
            Some(a) => now.checked_sub(a),
            None => now.checked_add(Duration::from_secs(3600)),
        };
        self.lag_state = Lag { on: true, stream: true, mark, drained: mark, ..Lag::default() };
    }
}
