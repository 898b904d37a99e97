//! A poll: the engine's progress steps in their order, with the
//! completions written straight into the caller's array (the C API's
//! `rdm4_poll`).

use super::{CqSink, Cqe, Endpoint};
use crate::device::Device;

impl<D: Device> Endpoint<D> {
    /// Makes progress and hands up to `room` completions to `put`, oldest
    /// first, as `put(i, entry)` with `i` counting from 0 (always below
    /// `room`); returns how many it handed out.
    ///
    /// The steps, in their order:
    /// 1. after a receive took an unexpected message, the queued entries
    ///    first (entries keep their order), so that the express path may
    ///    run ([`Self::took_unexpected`]);
    /// 2. the usual receives by the express path
    ///    ([`Self::progress_express`]), their entries made straight into
    ///    the room: done when no other packet waits;
    /// 3. otherwise the general path ([`Self::progress_timed`], which asks
    ///    `clock` only while requests are timed), its common receives'
    ///    entries also made into the room;
    /// 4. the rest of the room from the queue.
    ///
    /// A caller with entries of its own to merge (the C API's copies)
    /// calls [`Self::progress_timed`] and takes the queue instead.
    ///
    /// `put` is a writer into the caller's array, copied into each step:
    /// each copy keeps the array's address at hand, where one reached
    /// through a reference costs a load per entry (docs/performance.md,
    /// "the C API's boundary").
    #[inline(always)]
    pub fn poll_into<F>(&mut self, room: usize, clock: impl FnOnce() -> u64, put: F) -> usize
    where
        F: Fn(usize, &Cqe) + Copy,
    {
        let k0 = if self.took_unexpected() { self.drain_cq(room, put) } else { 0 };
        let mut sink = Put { put, at: k0, room };
        let (n, more) = self.progress_express(&mut sink, room - k0);
        if n > 0 && !more {
            return k0 + n;
        }
        if more {
            self.progress_timed(clock, &mut sink);
        }
        let k = sink.at;
        k + self.drain_cq(room - k, |i, e| put(k + i, e))
    }
}

/// [`Endpoint::poll_into`]'s room as a completion sink: entries go to
/// `put` at `at` on, while there is room.
struct Put<F> {
    put: F,
    at: usize,
    room: usize,
}

impl<F: Fn(usize, &Cqe)> CqSink for Put<F> {
    #[inline(always)]
    fn offer(&mut self, e: &Cqe) -> bool {
        if self.at == self.room {
            return false;
        }
        (self.put)(self.at, e);
        self.at += 1;
        true
    }
}
