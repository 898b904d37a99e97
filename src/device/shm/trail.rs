//! The owner trailing a streaming producer ([`ShmConfig::trail`]).
//!
//! A packet marked [`super::segment::MORE`] is left at the head while fewer than
//! `trail` bytes were claimed after it and one of the entries in those bytes
//! is still unsealed (a producer is writing it). The owner never waits for
//! a producer that is not writing: one that stopped (its window used up, its
//! application idle, the ring full) has nothing unsealed, and the packet is
//! read at once. A producer that died between its claim and its seal would
//! hold the head for ever; after `HOLD_MAX` polls the packet is read anyway.
//! Why: [`ShmConfig::trail`], and docs/performance.md, "Trail".

use std::sync::atomic::Ordering;

use super::{off, ShmDevice, HDR_LEN};

#[cfg(doc)]
use super::ShmConfig;

/// Polls one packet may be held back for (a million: milliseconds of a
/// busy poll loop; a live producer writes a trail's worth in well under
/// that).
const HOLD_MAX: u32 = 1 << 20;

/// Entries looked at after the head's: a trail of 64 KiB packets is ~24;
/// past this many small entries the packet is simply read.
const WALK_MAX: usize = 64;

impl ShmDevice {
    /// Whether to leave the marked packet at the head (its entry `span`
    /// bytes, sane) for a later poll.
    pub(super) fn trailing(&mut self, span: usize) -> bool {
        let mut p = self.head + span as u64;
        let tail = super::segment::tail_pos(self.map.u64_at(off::TAIL).load(Ordering::Relaxed));
        if tail.saturating_sub(p) >= self.trail || self.held >= HOLD_MAX {
            return false;
        }
        for _ in 0..WALK_MAX {
            if p >= tail {
                return false; // everything claimed is written: nobody to wait for
            }
            let at = self.shape.at(p);
            // SAFETY: `p` is the head plus whole entries of whole cache lines,
            // so `at` is a multiple of 64 below `ring`, whose `Shape` is valid
            // for the mapping (as in `recv_batch`).
            let h = unsafe { self.map.entry_at(HDR_LEN + at) };
            if h.seal.load(Ordering::Acquire) != self.shape.sealed(p) {
                self.held += 1;
                return true; // claimed, still being written
            }
            let (_, span, _) = h.sizes();
            if h.flags() & super::segment::GROW_NOTICE != 0 {
                return false; // the ring grows here: entries after it are read in the grown ring
            }
            if !self.shape.span_fits(at, span) {
                return false; // a scribbled entry: read on, as recv_batch will
            }
            p += span as u64;
        }
        false
    }
}
