//! The ring grows: an endpoint opens with a small ring in use
//! ([`ShmConfig::start_slots`]) in a segment sized for the whole one
//! ([`ShmConfig::slots`]), and has memory only for the part in use; the
//! ring doubles whenever a producer finds it full, until it is whole.
//!
//! How many times the ring in use is halved from the whole is in its
//! tail word ([`segment::SHRINK`]), which producers load and swap to
//! claim, so a claim always uses the ring of the moment it succeeds.
//!
//! The ring grows when it is used: when a producer finds it full (it
//! marks [`off::GROW`]), and when its owner reads an eighth of it at more
//! than [`FAST_MBPS`]. Not only full rings: a stream of small
//! messages through a ring that stays in the caches runs at half the rate
//! it has in the whole ring, whose lines no cache holds any more when the
//! producer comes round to them again (docs/performance.md, "Ring
//! growth"). The owner looks after each batch it takes, and grows from
//! ring `a` to `n`: twice the ring found full; the whole ring after a
//! quick lap (a stream is on, and each lap in a ring too small for it
//! runs at the lower rate):
//!
//! 1. It has the new half's memory allocated (`posix_fallocate` on the
//!    segment's descriptor, which the owner keeps: a full `/dev/shm`
//!    refuses cleanly here, and the ring then stays as it is) and its page
//!    tables filled.
//! 2. With one compare-and-swap it moves the tail from position `p` to
//!    `p2`, the first position at least `p + a` that the grown ring puts
//!    at offset `a`, with the new shrink bits. A claim whose swap then
//!    fails reloads the word and claims in the grown ring.
//! 3. It publishes a grow notice (an entry of its own, [`GROW_NOTICE`]) at
//!    `p` in the old ring, where no producer can claim any more. This is
//!    done after a batch, before the head is handed back: producers claim
//!    up to the old head plus `a`, so the lines just read leave room for
//!    the notice after `p` even in a ring that streams full.
//!
//! The entries before `p` are read in the old ring; the notice moves the
//! head to `p2` and switches the owner to the grown ring (at once, with no
//! notice, when nothing waits before `p`: the head is `p`). Until then the
//! head is below `p`, so producers, who claim up to the head plus `n`,
//! write only `[p2, p2 + n - a)`: the grown ring's offsets `a` to `n`,
//! which the old ring (offsets below `a`) does not use. Positions
//! between `p` and `p2` are never used.
//!
//! A ring shrinks only by closing: growth follows a peak of use, which an
//! HPC job's phases repeat.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::liveness::mono_us;
use super::produce::publish;
use super::segment::{self, off, GROW_NOTICE};
use super::{Peer, ShmConfig, ShmDevice, HDR_LEN};

/// An eighth of the ring read at more than this many MB/s is use enough
/// to grow it: 1.6 M small messages a second; an endpoint that talks less
/// keeps its small ring. Timed by an eighth, so that a stream finds the
/// whole ring after 128 KiB of a 1 MiB one.
pub(super) const FAST_MBPS: u64 = 100;

/// An owner's growth state.
#[derive(Debug)]
pub(super) struct Growth {
    /// The segment's descriptor (closed on drop).
    fd: RawFd,
    /// Whether the ring may grow now: smaller than `limit`, and no growth
    /// waits for its notice.
    open: bool,
    /// Most ring bytes: the whole ring, or the ring in use once memory
    /// for more was refused.
    limit: usize,
    /// The ring bytes asked for (0: none), and allocated.
    want: usize,
    allocated: usize,
    /// A growth whose notice is not read yet: the notice's position, the
    /// grown ring's first position, and its bytes.
    pub(super) pending: Option<(u64, u64, usize)>,
    /// Times the ring grew.
    pub(super) count: u32,
    /// The head's position at the end of the eighth being read, and when
    /// that eighth began (`mono_us`; 0: not yet, the first poll that takes
    /// packets starts it).
    next_lap: u64,
    lap_start: u64,
}

impl Growth {
    pub(super) fn new(fd: RawFd, ring: usize, cap: usize) -> Growth {
        Growth {
            fd,
            open: ring < cap,
            limit: cap,
            want: 0,
            allocated: ring,
            pending: None,
            count: 0,
            next_lap: 0,
            lap_start: 0,
        }
    }
}

impl Drop for Growth {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this owns; the mapping stays valid.
        unsafe { libc::close(self.fd) };
    }
}

/// The trail for a ring of `ring` bytes (see [`ShmConfig::trail`]).
pub(super) fn trail(cfg: &ShmConfig, ring: usize) -> u64 {
    cfg.trail_bytes().min(ring / 4) as u64
}

/// The lag for a ring of `ring` bytes (see [`ShmConfig::lag`]).
pub(super) fn lag(cfg: &ShmConfig, ring: usize) -> u64 {
    cfg.lag.min(ring / 8).next_multiple_of(64) as u64
}

/// The first position at least `p + a` that a ring of `n` bytes puts at
/// offset `a` (`a` and `n` powers of two, `n` > `a`).
fn grown_start(p: u64, a: u64, n: u64) -> u64 {
    let q = p + a;
    q + (a.wrapping_sub(q) & (n - 1))
}

/// A producer found `p`'s ring full while it may grow: marks it for the
/// owner (once: the mark's line is the head's, just read).
#[cold]
pub(super) fn ask_to_grow(p: &Peer) {
    let mark = p.map.hdr_u64::<{ off::GROW }>();
    if mark.load(Ordering::Relaxed) == 0 {
        mark.store(1, Ordering::Relaxed);
    }
}

/// A producer's claim succeeded in a ring of `ring` bytes, not the one
/// it knew: page tables for the part it has not used yet.
#[cold]
#[inline(never)]
pub(super) fn ring_changed(p: &mut Peer, ring: usize) {
    if ring > p.shape.ring {
        p.map.populate(HDR_LEN + p.shape.ring, ring - p.shape.ring);
    }
    p.shape.ring = ring;
}

impl ShmDevice {
    /// After a batch: grows the ring if it may, and a producer asked or
    /// the owner just read a lap quickly.
    #[inline(always)]
    pub(super) fn grow_if_used(&mut self) {
        if self.grow.open
            && (self.head >= self.grow.next_lap || self.map.hdr_u64::<{ off::GROW }>().load(Ordering::Relaxed) != 0)
        {
            self.grow_if_asked();
        }
    }

    /// [`Self::grow_if_used`] past its quick test: a lap that ended is
    /// timed, and a quick one asks as a producer would.
    #[cold]
    #[inline(never)]
    fn grow_if_asked(&mut self) {
        let mark = self.map.hdr_u64::<{ off::GROW }>();
        if mark.load(Ordering::Relaxed) != 0 {
            self.grow.want = self.grow.want.max(2 * self.shape.ring);
            mark.store(0, Ordering::Relaxed);
        }
        if self.head >= self.grow.next_lap {
            let now = mono_us();
            let eighth = self.shape.ring as u64 / 8;
            if self.grow.lap_start > 0 && (now - self.grow.lap_start) * FAST_MBPS < eighth {
                self.grow.want = self.shape.cap;
            }
            self.grow.lap_start = now;
            self.grow.next_lap = self.head + eighth;
        }
        if self.grow.want > 0 {
            self.grow();
        }
    }

    /// Steps 1-3 of the module's docs, after a batch and before the head
    /// is handed back.
    fn grow(&mut self) {
        let (a, n) = (self.shape.ring, self.grow.want.min(self.grow.limit));
        if n <= a {
            self.grow.want = 0;
            return;
        }
        if n > self.grow.allocated {
            let (from, len) =
                ((HDR_LEN + self.grow.allocated) as libc::off_t, (n - self.grow.allocated) as libc::off_t);
            // SAFETY: allocating a range of the segment this endpoint created.
            if unsafe { libc::posix_fallocate(self.grow.fd, from, len) } != 0 {
                crate::log::log!(crate::log::WARN, "shm ring stays at {a} bytes: /dev/shm has no room for {n}");
                self.grow.limit = a;
                self.grow.open = false;
                self.grow.want = 0;
                return;
            }
            self.map.populate(HDR_LEN + self.grow.allocated, n - self.grow.allocated);
            self.grow.allocated = n;
        }
        let mut grown = self.shape;
        grown.ring = n;
        let tail = self.map.hdr_u64::<{ off::TAIL }>();
        let mut word = tail.load(Ordering::Acquire);
        // Each failed swap is a producer's claim, which the head not yet
        // handed back bounds: a few at most.
        let p = loop {
            let p = segment::tail_pos(word);
            if word & segment::CLOSED != 0 || p + 64 > self.head + a as u64 {
                return; // closed, or (unless a peer scribbled) never
            }
            let new = grown_start(p, a as u64, n as u64) | (word & segment::TAIL_FLAGS) | grown.shrink_bits();
            match tail.compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break p,
                Err(now) => word = now,
            }
        };
        let p2 = grown_start(p, a as u64, n as u64);
        self.grow.pending = Some((p, p2, n));
        self.grow.open = false;
        self.grow.want = 0;
        if p == self.head {
            // Nothing left to read in the old ring: grown now, the head
            // handed back at `p2` (the caller's next step).
            self.head = p2;
            self.grown(n);
            return;
        }
        // SAFETY: the line at `p` in the ring in use: within it (an
        // offset below `a`, a multiple of 64), free (`p + 64` is within
        // the head plus the ring) and no producer's (the tail moved past it).
        let entry = unsafe { self.map.ptr_at(HDR_LEN + self.shape.at(p)) };
        publish(&self.shape, entry, p, (self.epid, self.connid), 0, 64 | GROW_NOTICE);
    }

    /// A grow notice at the head: the next entry's position in the grown
    /// ring, which is now the one in use. `None` for a notice this owner
    /// did not write there (a peer scribbling): skipped like padding.
    #[cold]
    pub(super) fn grow_noticed(&mut self) -> Option<u64> {
        let (_, p2, n) = self.grow.pending.filter(|g| g.0 == self.head)?;
        self.head = p2;
        self.grown(n);
        Some(p2)
    }

    /// The owner's head has passed into the grown ring of `n` bytes.
    fn grown(&mut self, n: usize) {
        self.grow.pending = None;
        self.shape.ring = n;
        self.trail = trail(&self.cfg, n);
        self.lag = lag(&self.cfg, n);
        self.grow.count += 1;
        self.grow.open = n < self.grow.limit;
        self.grow.next_lap = self.head + n as u64 / 8;
        self.grow.lap_start = mono_us();
        crate::log::log!(crate::log::INFO, "shm ring grew to {n} bytes");
    }

    /// The bytes of the ring in use, and how many times it grew.
    pub fn ring_in_use(&self) -> (usize, u32) {
        (self.shape.ring, self.grow.count)
    }

    /// The most bytes the ring may grow to: the whole ring, or the ring in
    /// use once memory for more was refused.
    pub fn ring_limit(&self) -> usize {
        self.grow.limit
    }
}

#[cfg(test)]
mod tests {
    use super::grown_start;

    #[test]
    fn a_grown_ring_starts_at_offset_a_at_least_a_ring_past_the_tail() {
        let a = 1u64 << 20;
        for n in [2 * a, 4 * a, 128 * a] {
            for p in [0, 64, a - 64, a, a + 64, 3 * a + 192, 5 * a - 64, (1 << 40) + 4096] {
                let p2 = grown_start(p, a, n);
                assert!(p2 >= p + a && p2 < p + a + n, "p {p}: p2 {p2}");
                assert_eq!(p2 & (n - 1), a, "p {p}: p2 {p2} is not at offset a of the grown ring");
            }
        }
    }
}
