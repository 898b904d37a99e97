//! A producer's side of a peer's ring: claiming an entry, publishing it,
//! and the notices (entries without a packet) it writes.
//!
//! A producer claims the bytes `[pos, pos + n)` with one compare-and-swap
//! on the tail, once the owner's head says they have been read (`pos + n
//! <= head + ring`; producers keep the last head they saw and reread it
//! only when the ring looks full, and after finding it full only every few
//! attempts). `n` is the packet's upper bound, which the engine passes to
//! `send_with`, rounded up to cache lines: small packets sit densely, so
//! the owner reads consecutive cache lines that the hardware prefetches,
//! where fixed MTU-sized slots cost every message a cold line of its own.
//! An entry that would cross the ring's end is preceded by a padding entry
//! up to the end and starts again at offset 0. The producer writes the
//! packet in place and publishes the entry by storing its sealed position,
//! `(pos + 1) ^ seal`, in the entry's first word. The seal is a random
//! word of the segment with the top bit set: neither zeroed memory nor
//! stale words of earlier laps (positions or packet bytes) pass for a
//! published entry. The owner never writes the ring, so a producer's next
//! lap finds its cache lines without a transfer from the owner. From the
//! claim to the seal, the claim is noted in the producer's own header
//! (`claims.rs`); an owner that sleeps is then woken (`sleep.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::barrier::{prefetch, producer_fence};
use super::segment::{self, off, Mapping, Shape};
use super::{grow, Peer, ShmDevice, HDR_LEN};
use crate::device::{Ah, DevError, DevEvent};
use crate::status::Status;

/// Most sends refused without a look at a full ring's head (see `Peer::full_skip`).
pub(super) const FULL_WAIT_MAX: u32 = 16;

/// Asks for the cache line of ring position `pos` in the ring that `map`
/// holds, for writing or for reading ([`prefetch`]; any position will do).
#[inline(always)]
pub(super) fn prefetch_pos<const FOR_WRITE: bool>(map: &Mapping, shape: &Shape, pos: u64) {
    prefetch::<FOR_WRITE>(map.base().wrapping_add(HDR_LEN + shape.at(pos)));
}

/// Claims an entry of `need` bytes in `p`'s ring, and the padding up to
/// the ring's end before it when it would cross that end: returns the
/// position of the claim and the padding's length (the entry follows it).
/// `Again` when the ring is full, or when the packet is a new message
/// (`control` false) and the owner holds them back ([`segment::HELD`]);
/// `Failed(PeerUnreachable)` (and `p` marked
/// lost) when its owner has closed: the owner's close sets
/// [`segment::CLOSED`] in the tail with the same compare-and-swap word
/// that claims take, so no claim succeeds after it.
///
/// The claimed bytes are the caller's until it publishes them. The claim is
/// noted in `note` (this endpoint's [`off::NOTE`]) before the
/// compare-and-swap that makes it, and stays noted until the caller has
/// published its entry and clears the note; a claim that fails leaves it
/// clear (`claims.rs`). Offsets:
/// `at` is below `ring`, and the claim keeps an entry from crossing the
/// ring's end, so `HDR_LEN + at + span` stays within `HDR_LEN + ring`,
/// which `Shape::valid` bounds by the mapping.
#[inline(always)]
fn claim(p: &mut Peer, need: usize, control: bool, note: &AtomicU64) -> Result<(u64, usize), DevError> {
    let tail = p.map.hdr_u64::<{ off::TAIL }>();
    let mut word = tail.load(Ordering::Relaxed);
    // The entry most likely goes at `pos`: its line is asked for in
    // exclusive state now, so that the transfer from the owner (who
    // polls it) overlaps the claim and the packet's building instead
    // of waiting for the first store (docs/performance.md, "Other
    // prefetches").
    prefetch_pos::<true>(&p.map, &p.shape, word);
    loop {
        let meta = word & segment::TAIL_META;
        let flags = meta & segment::TAIL_FLAGS;
        if flags != 0 {
            if flags & segment::CLOSED != 0 {
                p.lost = true;
                unnote(note);
                return Err(DevError::Failed(Status::PeerUnreachable));
            }
            if !control {
                // A new message to an owner that holds them back.
                unnote(note);
                return Err(DevError::Again);
            }
        }
        let pos = word ^ meta;
        // The ring in use now (`grow.rs`).
        let ring = p.shape.in_use(word);
        let left = ring - (pos as usize & (ring - 1));
        let pad = if need <= left { 0 } else { left };
        let end = pos + (pad + need) as u64;
        if end > p.head_seen + ring as u64 {
            if p.full_skip > 0 {
                p.full_skip -= 1;
                unnote(note);
                return Err(DevError::Again);
            }
            // Looks full: has the owner read further since?
            p.head_seen = p.map.u64_at(off::HEAD).load(Ordering::Acquire);
            if end > p.head_seen + ring as u64 {
                if ring < p.shape.cap {
                    grow::ask_to_grow(p);
                }
                p.full_wait = (p.full_wait * 2 + 1).min(FULL_WAIT_MAX);
                p.full_skip = p.full_wait;
                unnote(note);
                return Err(DevError::Again);
            }
            p.full_wait = 0;
        }
        // Noted before the claim is made (released by the exchange): an
        // owner that sees the claim in its tail sees the note, or the
        // entry published.
        note.store(p.shape.sealed(pos), Ordering::Release);
        match tail.compare_exchange_weak(word, end | meta, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => {
                if ring != p.shape.ring {
                    grow::ring_changed(p, ring);
                }
                return Ok((pos, pad));
            }
            Err(now) => word = now,
        }
    }
}

/// [`claim`] of an entry of `need` bytes with the padding before it, if
/// any, published: the entry's position. The claim stays noted in `note`
/// until the caller has published the entry ([`unnote`]).
#[inline(always)]
pub(super) fn claim_entry(
    p: &mut Peer,
    need: usize,
    control: bool,
    ids: (u32, u32),
    note: &AtomicU64,
) -> Result<u64, DevError> {
    let (mut pos, pad) = claim(p, need, control, note)?;
    if pad > 0 {
        // SAFETY: the padding's entry, in bounds (see `claim`).
        publish(&p.shape, unsafe { p.map.ptr_at(HDR_LEN + p.shape.at(pos)) }, pos, ids, 0, pad as u32);
        pos += pad as u64;
    }
    Ok(pos)
}

/// Publishes the claimed entry at `entry` (ring position `pos`): the
/// sender's ids (`me`, `connid`), packet length and span (with its
/// flags), then the seal.
#[inline(always)]
pub(super) fn publish(shape: &Shape, entry: *mut u8, pos: u64, (me, connid): (u32, u32), len: usize, span: u32) {
    // SAFETY: a claimed entry, in bounds (see `claim`); 8-aligned (entries
    // are whole cache lines); `EntryHdr` is atomics only.
    let h = unsafe { &*entry.cast::<segment::EntryHdr>() };
    h.ids.store(segment::word(me, connid), Ordering::Relaxed);
    h.sizes.store(segment::word(len as u32, span), Ordering::Relaxed);
    h.seal.store(shape.sealed(pos), Ordering::Release);
}

/// Clears this endpoint's claim note (`note`): after the entry it claimed
/// was published (after its seal, so that an owner that reads the note
/// cleared finds the entry sealed), or when the claim failed.
#[inline(always)]
pub(super) fn unnote(note: &AtomicU64) {
    note.store(0, Ordering::Release);
}

impl ShmDevice {
    /// A claim on `ah`'s ring failed with `e`: when the owner has closed
    /// (the peer is marked lost), every operation towards it fails now.
    #[cold]
    #[inline(never)]
    pub(super) fn claim_failed(&mut self, ah: Ah, e: DevError) -> DevError {
        if self.peers.get(ah as usize).and_then(Option::as_ref).is_some_and(|p| p.lost) {
            self.events.push(DevEvent::PeerLost { ah });
        }
        e
    }

    /// Publishes the notice entry claimed at `pos` in `p`'s ring (`need`
    /// bytes, span flags `flag`; 0: padding), clears the claim's `note`
    /// and wakes the owner if it sleeps.
    pub(super) fn publish_notice(p: &mut Peer, pos: u64, ids: (u32, u32), need: usize, flag: u32, note: &AtomicU64) {
        // SAFETY: the claimed entry, in bounds (see `claim`).
        let entry = unsafe { p.map.ptr_at(HDR_LEN + p.shape.at(pos)) };
        publish(&p.shape, entry, pos, ids, 0, need as u32 | flag);
        unnote(note);
        producer_fence();
        if p.map.hdr_u32::<{ off::SLEEPING }>().load(Ordering::SeqCst) != 0 {
            Self::wake(p);
        }
    }
}
