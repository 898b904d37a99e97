//! Entries claimed by producers that died before publishing them.
//!
//! A producer claims ring bytes with one compare-and-swap on the tail and
//! publishes its entry with the seal, its last store; killed in between,
//! it leaves an entry that is never sealed, and the owner's head, which
//! reads entries in order, would wait before it for ever, with the entries
//! of live producers behind it. The owner cannot tell from the entry who
//! claimed it (the claimer writes its ids with the seal), so every producer
//! notes its claim in its own segment header ([`off::NOTE`]): the claimed
//! entry's start as the target ring seals it, written before the
//! compare-and-swap (which releases it) and cleared after the seal.
//!
//! At every peer check the owner looks at its head: when the entry there
//! is unsealed although claimed (the tail is past it), and the head stood
//! there at the previous check too, it reads the notes of every endpoint
//! of its prefix. A note that names a position of its ring within a lap
//! before the tail, of an endpoint whose process lives, may be the
//! claimer's (or that of a claim after it, still being written): the
//! owner waits. With none, everything unsealed from the head up to the
//! next sealed entry (or the tail) was claimed by producers that are gone,
//! and the head skips it. So a live producer's entry is never skipped,
//! however slow it is, and no unsealed entry is ever read: the skip reads
//! seals only. Notes are one word each, so they are read whole; a word
//! that only looks like one of this ring's notes makes the owner wait a
//! check longer, never skip.

use std::sync::atomic::Ordering;

use super::segment::{self, alive, off};
use super::{ShmDevice, HDR_LEN};

/// What the owner remembers of claims that died.
#[derive(Default)]
pub(super) struct DeadClaims {
    /// The head, when it stood before an unsealed claimed entry at the
    /// last peer check.
    blocked_at: Option<u64>,
    /// Times the head skipped entries of dead producers.
    skips: u64,
}

impl ShmDevice {
    /// At a peer check: whether the head stands before an unsealed entry
    /// that was claimed, since the last check; if so, skips it when its
    /// producer is gone. Also clears a hold that no parked packet explains.
    #[cold]
    pub(super) fn check_head(&mut self) {
        let head = self.head;
        let word = self.map.hdr_u64::<{ off::TAIL }>().load(Ordering::Acquire);
        if word & segment::HELD != 0 && self.parked.is_empty() {
            // This owner holds messages back only while it keeps parked
            // packets (`consume.rs`): a hold without any is a peer
            // scribbling, which would stall every producer for good.
            self.map.hdr_u64::<{ off::TAIL }>().fetch_and(!segment::HELD, Ordering::AcqRel);
        }
        let tail = segment::tail_pos(word);
        if tail <= head || self.ready() {
            self.dead_claims.blocked_at = None;
        } else if self.dead_claims.blocked_at != Some(head) {
            self.dead_claims.blocked_at = Some(head);
        } else {
            self.skip_dead_claims(tail);
        }
    }

    /// Skips the unsealed entries from the head on, up to the next sealed
    /// one or `tail` (loaded before), unless a live endpoint notes a claim
    /// in this ring.
    #[cold]
    #[inline(never)]
    fn skip_dead_claims(&mut self, tail: u64) {
        let head = self.head;
        let ring = self.shape.ring as u64;
        let seal = self.shape.seal;
        let live = segment::claim_notes(&self.cfg.prefix).into_iter().any(|(pid, start, note)| {
            // The position this ring would have sealed as `note`.
            let pos = (note ^ seal).wrapping_sub(1);
            pos >= head.saturating_sub(ring) && pos < tail && alive(pid, start)
        });
        // Sealed meanwhile: its producer was only slow.
        if live || self.ready() {
            return;
        }
        // Producers claim at most a ring past the head: a tail further on is
        // a peer scribbling, and the search stops a ring ahead (a tail of
        // 2^58 would take it years).
        let end = tail.min(head + ring);
        let mut to = head + 64;
        while to < end && !self.sealed_at(to) {
            to += 64;
        }
        self.head = to.min(end);
        self.held = 0;
        self.dead_claims.blocked_at = None;
        self.dead_claims.skips += 1;
        self.map.u64_at(off::HEAD).store(self.head, Ordering::Release);
        if self.fd_mode {
            // The entries behind the skipped ones may have woken it before.
            self.drain_fifo_kept();
        }
    }

    /// Whether the line at ring position `pos` starts a published entry.
    fn sealed_at(&self, pos: u64) -> bool {
        let word = self.map.u64_at(HDR_LEN + self.shape.at(pos)).load(Ordering::Acquire);
        word == self.shape.sealed(pos)
    }

    /// Times the head skipped entries claimed by producers that died
    /// before publishing them.
    pub fn dead_claims_skipped(&self) -> u64 {
        self.dead_claims.skips
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::tests_life::dead_pid;
    use super::super::*;

    fn cfg(name: &str) -> ShmConfig {
        ShmConfig {
            prefix: format!("rdm4c{}{name}", std::process::id()),
            slots: 4,
            mtu: 256,
            peer_check: Duration::from_millis(1),
            ..ShmConfig::default()
        }
    }

    /// Claims an entry for a packet of `len` bytes in `to`'s ring as a
    /// send of `dev` would, and leaves it unpublished: its position.
    fn claim_only(dev: &mut ShmDevice, to: Ah, len: usize) -> u64 {
        let ids = (dev.epid, dev.connid);
        let note = dev.map.hdr_u64::<{ off::NOTE }>();
        let p = peer_of(&mut dev.peers, to).unwrap();
        claim_entry(p, entry_len(len), false, ids, note).unwrap()
    }

    /// Writes and publishes `pkt` in the entry `dev` claimed at `pos` in
    /// `to`'s ring for `len` bytes ([`claim_only`]), as the send would have.
    fn publish_claimed(dev: &mut ShmDevice, to: Ah, (pos, len): (u64, usize), pkt: &[u8]) {
        let ids = (dev.epid, dev.connid);
        let note = dev.map.hdr_u64::<{ off::NOTE }>();
        let p = peer_of(&mut dev.peers, to).unwrap();
        // SAFETY: the claimed entry, in bounds (see `claim`), with room
        // for `pkt` after its header.
        let entry = unsafe { p.map.ptr_at(HDR_LEN + p.shape.at(pos)) };
        unsafe { std::ptr::copy_nonoverlapping(pkt.as_ptr(), entry.add(SLOT_HDR), pkt.len()) };
        publish(&p.shape, entry, pos, ids, pkt.len(), entry_len(len) as u32);
        unnote(note);
    }

    /// Makes `dev`'s segment name a process that has ended, as if its
    /// owner had been killed.
    fn kill(dev: &ShmDevice) {
        dev.map.u32_at(off::PID).store(dead_pid(), Ordering::Relaxed);
    }

    /// Polls `dev` (receives and events, so its peer checks too) for `ms`
    /// milliseconds: the packets it took.
    fn poll_for(dev: &mut ShmDevice, ms: u64) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut ev = Vec::new();
        let t = Instant::now();
        loop {
            dev.recv(8, |_, p: &[u8], _| got.push(p.to_vec()));
            dev.events(&mut ev);
            if t.elapsed() >= Duration::from_millis(ms) {
                return got;
            }
        }
    }

    #[test]
    fn an_entry_claimed_by_a_producer_that_died_is_skipped_and_the_entries_behind_it_are_delivered() {
        let c = cfg("dead");
        let mut s = ShmDevice::open_with(c.clone()).unwrap();
        let mut v = ShmDevice::open_with(c.clone()).unwrap();
        let mut t = ShmDevice::open_with(c).unwrap();
        let v_to_s = v.insert(&s.local_addr()).unwrap();
        let t_to_s = t.insert(&s.local_addr()).unwrap();
        t.send(t_to_s, b"before", 0).unwrap();
        claim_only(&mut v, v_to_s, 100);
        t.send(t_to_s, b"behind", 0).unwrap();
        // While its producer lives, the entry is waited for.
        assert_eq!(poll_for(&mut s, 30), vec![b"before".to_vec()]);
        assert_eq!(s.dead_claims_skipped(), 0);
        // Killed (and its segment removed, as the next open of the prefix
        // does): the head skips its entry, never reading it.
        kill(&v);
        assert_eq!(remove_stale_segments(&s.cfg.prefix), 1);
        assert_eq!(poll_for(&mut s, 30), vec![b"behind".to_vec()]);
        assert_eq!(s.dead_claims_skipped(), 1);
        // The ring goes on, laps and all.
        for k in 0..40u8 {
            t.send(t_to_s, &[k; 200], 0).unwrap();
            assert_eq!(poll_for(&mut s, 0), vec![vec![k; 200]]);
        }
        assert_eq!(s.dead_claims_skipped(), 1);
    }

    #[test]
    fn a_slow_producer_is_never_skipped_nor_one_that_claims_behind_a_dead_one() {
        let c = cfg("slow");
        let mut s = ShmDevice::open_with(c.clone()).unwrap();
        let mut v = ShmDevice::open_with(c.clone()).unwrap();
        let mut t = ShmDevice::open_with(c.clone()).unwrap();
        let mut u = ShmDevice::open_with(c).unwrap();
        let v_to_s = v.insert(&s.local_addr()).unwrap();
        let t_to_s = t.insert(&s.local_addr()).unwrap();
        let u_to_s = u.insert(&s.local_addr()).unwrap();
        // T claims first and is slow; V claims behind it and dies.
        let slow = claim_only(&mut t, t_to_s, 50);
        claim_only(&mut v, v_to_s, 100);
        kill(&v);
        assert_eq!(poll_for(&mut s, 30), Vec::<Vec<u8>>::new());
        // T publishes at last: delivered; then V's entry is skipped.
        publish_claimed(&mut t, t_to_s, (slow, 50), b"slow but alive");
        u.send(u_to_s, b"after both", 0).unwrap();
        assert_eq!(poll_for(&mut s, 30), vec![b"slow but alive".to_vec(), b"after both".to_vec()]);
        assert_eq!(s.dead_claims_skipped(), 1);
        // A dead claim, then a live one behind it still being written: the
        // head waits for the live one, then skips exactly up to it.
        claim_only(&mut u, u_to_s, 30);
        kill(&u);
        let behind = claim_only(&mut t, t_to_s, 60);
        assert_eq!(poll_for(&mut s, 30), Vec::<Vec<u8>>::new());
        assert_eq!(s.dead_claims_skipped(), 1);
        publish_claimed(&mut t, t_to_s, (behind, 60), b"behind the dead");
        t.send(t_to_s, b"last", 0).unwrap();
        assert_eq!(poll_for(&mut s, 30), vec![b"behind the dead".to_vec(), b"last".to_vec()]);
        assert_eq!(s.dead_claims_skipped(), 2);
    }

    #[test]
    fn a_claim_that_died_across_the_rings_end_is_skipped_padding_and_all() {
        let c = cfg("wrap");
        let mut s = ShmDevice::open_with(c.clone()).unwrap();
        let mut v = ShmDevice::open_with(c.clone()).unwrap();
        let mut t = ShmDevice::open_with(c).unwrap();
        let v_to_s = v.insert(&s.local_addr()).unwrap();
        let t_to_s = t.insert(&s.local_addr()).unwrap();
        // Up to a line before the ring's end (1 KiB), read.
        for _ in 0..3 {
            t.send(t_to_s, &[1; 200], 0).unwrap();
        }
        t.send(t_to_s, &[1; 150], 0).unwrap();
        assert_eq!(poll_for(&mut s, 0).len(), 4);
        assert_eq!(s.head, 1024 - 64);
        // V's claim needs padding to the end, then starts at 0 (the second
        // lap); V dies having published the padding only.
        assert_eq!(claim_only(&mut v, v_to_s, 100), 1024);
        kill(&v);
        t.send(t_to_s, b"over the end", 0).unwrap();
        assert_eq!(poll_for(&mut s, 30), vec![b"over the end".to_vec()]);
        assert_eq!(s.dead_claims_skipped(), 1);
    }
}
