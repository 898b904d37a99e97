//! A ring's shape: its size in use and whole, its MTU and seal, and the
//! arithmetic of positions, offsets and entries that every side of the
//! ring shares.

use super::help::HELP_LEN;
use super::segment::{SHRINK, SHRINK_SHIFT};
use super::{HDR_LEN, MR_ENTRIES, MR_ENTRY_LEN, SLOT_HDR};

/// A segment's shape, from its header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    /// Ring bytes in use (a power of two, at most `cap`): what positions
    /// wrap at. The owner's is its own; a producer's is the one of its
    /// last claim ([`Shape::in_use`]).
    pub(super) ring: usize,
    /// Ring bytes the segment has room for (a power of two): the ring
    /// grows up to it (`grow.rs`).
    pub(super) cap: usize,
    pub(super) mtu: usize,
    /// XORed into published positions (top bit set).
    pub(super) seal: u64,
    /// Most halvings of `cap` to a ring in use that still holds two
    /// full-size entries (at most [`MAX_SHRINK`]).
    shrink_max: u32,
}

/// Most halvings of a ring's capacity to the ring in use ([`SHRINK`]).
pub(super) const MAX_SHRINK: u32 = 7;

impl Shape {
    /// The shape of a ring for `slots` packets of `mtu` bytes, all in use.
    pub(super) fn new(slots: u32, mtu: u32, seal: u64) -> Shape {
        let mtu = mtu as usize;
        let ring = (slots as usize * mtu).max(Self::least(mtu)).next_power_of_two();
        Self::with_cap(ring, mtu, seal)
    }

    /// The shape of a ring of `cap` bytes (a power of two), all in use.
    pub(super) fn with_cap(cap: usize, mtu: usize, seal: u64) -> Shape {
        let shrink_max = cap.trailing_zeros().saturating_sub(Self::least(mtu).trailing_zeros()).min(MAX_SHRINK);
        Shape { ring: cap, cap, mtu, seal, shrink_max }
    }

    /// The least ring for packets of `mtu` bytes: two full-size entries
    /// (an entry and the padding before it).
    fn least(mtu: usize) -> usize {
        (2 * entry_len(mtu)).next_power_of_two()
    }

    /// This shape with a ring of `slots` packets in use (at least two
    /// full-size entries and `cap` / 2^[`MAX_SHRINK`], at most `cap`).
    pub(super) fn starting(self, slots: u32) -> Shape {
        let ring = (slots as usize * self.mtu).next_power_of_two().clamp(self.cap >> self.shrink_max, self.cap);
        Shape { ring, ..self }
    }

    /// The tail's shrink bits for the ring in use.
    pub(super) fn shrink_bits(&self) -> u64 {
        u64::from(self.cap.trailing_zeros() - self.ring.trailing_zeros()) << SHRINK_SHIFT
    }

    /// The ring in use that tail word `word` gives, bounded to what this
    /// segment holds whatever the word says (a peer may scribble on it).
    #[inline(always)]
    pub(super) fn in_use(&self, word: u64) -> usize {
        let shrink = ((word & SHRINK) >> SHRINK_SHIFT) as u32;
        self.cap >> shrink.min(self.shrink_max)
    }

    /// Whether a mapped segment's shape is usable: a whole number of cache
    /// lines, room for two full-size entries (an entry and the padding
    /// before it) in the capacity and in the ring in use, sealed.
    pub(super) fn valid(&self, map_len: usize) -> bool {
        self.cap.is_power_of_two()
            && self.ring.is_power_of_two()
            && self.ring <= self.cap
            && self.mtu % 64 == 0
            && self.ring >= 2 * entry_len(self.mtu)
            && self.seal >> 63 == 1
            && self.total() <= map_len
    }

    pub(super) fn mr_off(&self) -> usize {
        HDR_LEN + self.cap
    }

    /// The slot of this endpoint's two-handed read (`help.rs`), after the
    /// registration table.
    pub(super) fn help_off(&self) -> usize {
        self.mr_off() + MR_ENTRIES * MR_ENTRY_LEN
    }

    pub(super) fn total(&self) -> usize {
        self.help_off() + HELP_LEN
    }

    /// Offset in the ring of byte position `pos`.
    pub(super) fn at(&self, pos: u64) -> usize {
        pos as usize & (self.ring - 1)
    }

    /// The first word of a published entry at `pos`.
    pub(super) fn sealed(&self, pos: u64) -> u64 {
        (pos + 1) ^ self.seal
    }

    /// Whether an entry at ring offset `at` may span `span` bytes: whole
    /// cache lines that end by the ring's end, as producers write them.
    /// Anything else is a peer scribbling on the segment.
    pub(super) fn span_fits(&self, at: usize, span: usize) -> bool {
        span % 64 == 0 && span > 0 && span <= self.ring - at
    }

    /// Whether an entry of `span` bytes (one that fits) holds a packet of
    /// `len` bytes: not empty, at most an MTU, inside the entry after its
    /// header. Anything else is delivered to no one.
    #[inline(always)]
    pub(super) fn holds(&self, len: usize, span: usize) -> bool {
        len > 0 && len <= self.mtu && SLOT_HDR + len <= span
    }
}

/// Ring bytes an entry of a packet of up to `len` bytes takes.
pub(super) fn entry_len(len: usize) -> usize {
    (SLOT_HDR + len).next_multiple_of(64)
}
