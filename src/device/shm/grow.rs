//! The ring grows: an endpoint opens with a small ring in use
//! ([`ShmConfig::start_slots`]) in a segment sized for the whole one
//! ([`ShmConfig::slots`]), and has memory only for the part in use; the
//! ring doubles whenever a producer finds it full, until it is whole.
//!
//! How many times the ring in use is halved from the whole is in its
//! tail word ([`segment::SHRINK`]), which producers load and swap to
//! claim, so a claim always uses the ring of the moment it succeeds. A
//! producer that finds the ring full marks [`off::GROW`]; the owner looks
//! at the mark after each batch it takes, and grows from ring `a` to `2a`:
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
//!    `p` in the old ring, where no producer can claim any more. Only when
//!    the old ring has a line of room after `p`; else it waits for a
//!    later batch, before the swap.
//!
//! The entries before `p` are read in the old ring; the notice moves the
//! head to `p2` and switches the owner to the grown ring. Until then the
//! head is below `p`, so producers, who claim up to the head plus `2a`,
//! write only `[p2, p2 + a)`: the grown ring's offsets `a` to `2a`,
//! which the old ring (offsets below `a`) does not use. Positions
//! between `p` and `p2` are never used.
//!
//! A ring shrinks only by closing: growth follows a peak of use, which an
//! HPC job's phases repeat.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::produce::publish;
use super::segment::{self, off, GROW_NOTICE};
use super::{Peer, ShmConfig, ShmDevice, HDR_LEN};

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
    /// A growth whose notice is not read yet: the notice's position, the
    /// grown ring's first position, and its bytes.
    pub(super) pending: Option<(u64, u64, usize)>,
    /// Times the ring grew.
    pub(super) count: u32,
}

impl Growth {
    pub(super) fn new(fd: RawFd, ring: usize, cap: usize) -> Growth {
        Growth { fd, open: ring < cap, limit: cap, pending: None, count: 0 }
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

/// The first position at least `p + a` that a ring of `2a` bytes puts at
/// offset `a` (`a` a power of two).
fn grown_start(p: u64, a: u64) -> u64 {
    let q = p + a;
    q + (a.wrapping_sub(q) & (2 * a - 1))
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
    /// After a batch: grows the ring if a producer asked and it may.
    #[inline(always)]
    pub(super) fn grow_if_asked(&mut self) {
        if self.grow.open && self.map.hdr_u64::<{ off::GROW }>().load(Ordering::Relaxed) != 0 {
            self.grow();
        }
    }

    /// Steps 1-3 of the module's docs, or nothing now (the ring is full:
    /// at a later batch).
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let (a, n) = (self.shape.ring, self.shape.ring * 2);
        let mark = self.map.hdr_u64::<{ off::GROW }>();
        // SAFETY: allocating a range of the segment this endpoint created.
        let allocated = unsafe { libc::posix_fallocate(self.grow.fd, (HDR_LEN + a) as libc::off_t, a as libc::off_t) };
        if allocated != 0 {
            crate::log::log!(crate::log::WARN, "shm ring stays at {a} bytes: /dev/shm has no room for more");
            self.grow.limit = a;
            self.grow.open = false;
            mark.store(0, Ordering::Relaxed);
            return;
        }
        self.map.populate(HDR_LEN + a, a);
        let tail = self.map.hdr_u64::<{ off::TAIL }>();
        let word = tail.load(Ordering::Acquire);
        let p = segment::tail_pos(word);
        if word & segment::CLOSED != 0 || p + 64 > self.head + a as u64 {
            return;
        }
        let p2 = grown_start(p, a as u64);
        let mut grown = self.shape;
        grown.ring = n;
        let new = p2 | (word & segment::TAIL_FLAGS) | grown.shrink_bits();
        if tail.compare_exchange(word, new, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return;
        }
        // SAFETY: the line at `p` in the ring in use: within it (an
        // offset below `a`, a multiple of 64), free (`p + 64` is within
        // the head plus the ring) and no producer's (the tail moved past it).
        let entry = unsafe { self.map.ptr_at(HDR_LEN + self.shape.at(p)) };
        publish(&self.shape, entry, p, (self.epid, self.connid), 0, 64 | GROW_NOTICE);
        self.grow.pending = Some((p, p2, n));
        self.grow.open = false;
        mark.store(0, Ordering::Relaxed);
    }

    /// A grow notice at the head: the next entry's position in the grown
    /// ring, which is now the one in use. `None` for a notice this owner
    /// did not write there (a peer scribbling): skipped like padding.
    #[cold]
    pub(super) fn grow_noticed(&mut self) -> Option<u64> {
        let (p, p2, n) = self.grow.pending.filter(|g| g.0 == self.head)?;
        self.grow.pending = None;
        self.shape.ring = n;
        self.trail = trail(&self.cfg, n);
        self.lag = lag(&self.cfg, n);
        self.grow.count += 1;
        self.grow.open = n < self.grow.limit;
        debug_assert!(p < p2);
        Some(p2)
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
    fn a_grown_ring_starts_in_its_new_half_at_least_a_ring_past_the_tail() {
        let a = 1u64 << 20;
        for p in [0, 64, a - 64, a, a + 64, 3 * a + 192, 5 * a - 64, (1 << 40) + 4096] {
            let p2 = grown_start(p, a);
            assert!(p2 >= p + a && p2 < p + 3 * a, "p {p}: p2 {p2}");
            assert_eq!(p2 & (2 * a - 1), a, "p {p}: p2 {p2} is not at offset a of the grown ring");
        }
    }
}
