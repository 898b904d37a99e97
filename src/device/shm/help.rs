//! Two-handed reads: a large cross-memory-attach read that the memory's
//! owner helps with while it polls.
//!
//! A long-read message (or an application's `rdm4_read`) of
//! [`ShmConfig::help_min`](super::ShmConfig::help_min) bytes or more is
//! one `process_vm_readv` by the reader, while its sender, in a
//! ping-pong or a blocking send, polls idly on another CPU waiting for the
//! message to be taken. The reader now splits the copy into chunks
//! ([`chunk_len`]) and asks the owner to take some: the owner pushes its
//! chunks into the reader's buffer by `process_vm_writev` while the reader
//! pulls the others. Two CPUs copy at once, each about half of the bytes;
//! on a machine whose two vCPUs are far apart a 1 MiB ping-pong went from
//! about 100 µs to about 50 (docs/performance.md, "Two-handed reads").
//!
//! - **The job** lives in the reader's own segment, in a slot after the
//!   registration table ([`Shape::help_off`](super::Shape::help_off)): the
//!   owner's source address and key, the reader's destination, the length
//!   and chunk size, and the words both sides change: `next` (the job's
//!   generation in its high half, the next chunk to take in its low half),
//!   `done` (chunks copied), `failed`, `open` (a job runs) and `busy`
//!   (helpers at work). A reader
//!   runs one job at a time: its read is one call of its device, which
//!   returns only once every chunk is in.
//! - **Asking**: the reader publishes the job (the generation last) and
//!   sends the owner a help notice ([`segment::HELP`]) with the generation;
//!   it does not wait for an answer. It takes a first chunk itself; when
//!   no helper took one meanwhile (an owner that polls joins within a
//!   chunk's time), it takes all the rest in one copy, else one chunk at a
//!   time (compare-and-swap on `next`).
//! - **Helping**: an owner that meets the notice in its ring notes it and
//!   helps at the start of its next poll, after the work the packets
//!   before the notice gave it: in an exchange, where each side reads the
//!   other's message, its own read comes first (helping before it was
//!   measured slower than not helping). It checks the job against its own
//!   record of its registrations (the source must be memory it registered
//!   for remote reads, as a read by the reader would be checked), then
//!   takes chunks with a compare-and-swap that names the generation: a
//!   notice that comes late, after the job ended or when a later one runs,
//!   takes nothing. It copies each chunk, counts it in `done`, and stops
//!   when none is left or a copy fails (`failed` set).
//! - **The end**: once no chunk is left to take, the reader waits until
//!   `done` counts them all — at most a chunk's copy by the owner, which
//!   claimed it just before starting it. Then the bytes are in its buffer.
//!   When `failed` is set the reader copies the whole message itself, which
//!   gives the error, if any, that a read alone would.
//!
//! Where it is not asked: reads below `help_min`, writes, an owner that
//! sleeps in a wait (its sleeping flag set and no poll stamped in the last
//! 50 µs: it would have to wake up first), an owner whose own
//! job is open (it is reading, and helps no one until done) and crowded
//! endpoints (`crowd.rs`: more endpoints than CPUs, where the owner's CPU
//! is some other process's turn). An owner that is busy elsewhere,
//! computing or in another call, costs the reader one notice and one
//! system call more: it takes every chunk itself, and the owner finds the
//! job ended when it reads the notice.
//!
//! Trust is the device's (`mod.rs`): the reader's slot is written by
//! processes of the same user, who could write the reader's memory anyway.
//! The reader bounds what a scribbled slot can do to it: it uses its own
//! copy of the job and waits for `done` only while the owner lives, and
//! without a chunk coming in for at most [`STALL`] when no helper counts
//! itself at work (`busy`: then no claimed chunk is being copied), else for
//! at most [`STALL_BUSY`]; then it copies the whole message itself and goes
//! on. Only a helper stopped for that long in the middle of its copy would
//! still write that chunk's bytes, the message's own, later.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::cma::{cma_copy, cma_status};
use super::mrtable::{claim_remote, read_remote};
use super::segment::{self, alive, Block};
use super::{Peer, ShmDevice, SLOT_HDR};
use crate::device::{Access, Ah, DevError};
use crate::mem::UserBuf;
use crate::status::Status;

/// Bytes of a job's slot (two cache lines: the words both sides change,
/// then the job's fixed fields).
pub(super) const HELP_LEN: usize = 128;

/// Offsets in the slot.
const NEXT: usize = 0;
const DONE: usize = 8;
const FAILED: usize = 16;
/// Nonzero while the slot's owner runs a job (it helps no one then).
const OPEN: usize = 24;
/// Helpers at work on the slot's jobs (only helpers change it).
const BUSY: usize = 32;
const SRC: usize = 64;
const DST: usize = 72;
const LEN: usize = 80;
const KEY: usize = 88;
const CHUNK: usize = 96;

/// The smallest chunk an owner accepts (a scribbled slot's chunk of one
/// byte would make it a system call per byte).
const CHUNK_MIN: u64 = 16 * 1024;

/// Most chunks of one job.
const CHUNKS_MAX: u64 = 1 << 16;

/// How long the reader waits for a helper's chunk without one coming in
/// before it copies the message itself.
const STALL: Duration = Duration::from_millis(200);

/// How long it waits without a chunk coming in while a helper counts
/// itself at work (descheduled in the middle of a copy, which it will end)
/// before it copies the message itself all the same.
const STALL_BUSY: Duration = Duration::from_secs(5);

/// The chunk size for a read of `len` bytes: an eighth of it, between
/// 64 KiB and 1 MiB (a system call per chunk), and at most half of it (a
/// chunk each is the least two sides can share).
pub(super) fn chunk_len(len: usize) -> usize {
    (len / 8).clamp(64 * 1024, 1024 * 1024).min(len.div_ceil(2)).max(CHUNK_MIN as usize)
}

/// This endpoint's side of two-handed reads.
#[derive(Debug, Default)]
pub(super) struct Help {
    /// The generation of this endpoint's last job.
    gen: u32,
    /// Jobs this endpoint asked help for.
    pub(super) asked: u64,
    /// Chunks owners copied for this endpoint's jobs.
    pub(super) chunks_helped: u64,
    /// Chunks this endpoint copied for readers of its memory.
    pub(super) chunks_given: u64,
    /// Jobs noticed, to help with at the next poll: (reader, generation).
    pub(super) pending: Vec<(Ah, u64)>,
}

/// Most jobs noted at once (one per reader; more are forged).
const PENDING_MAX: usize = 64;

impl ShmDevice {
    /// Whether a read of `len` bytes from `ah` asks its owner for help.
    pub(super) fn help_wanted(&self, ah: Ah, len: usize) -> bool {
        if len < self.cfg.help_min || self.crowd.crowded() {
            return false;
        }
        let Some(p) = self.peers.get(ah as usize).and_then(Option::as_ref) else { return false };
        // One that sleeps is not woken for this.
        let asleep = super::liveness::asleep(p);
        // An owner reading by its own job (an exchange: each side reads
        // the other's message) will not help; the read goes in one copy.
        let busy = help_slot(p).is_some_and(|slot| slot.u64(OPEN).load(Ordering::Relaxed) != 0);
        !asleep && !busy
    }

    /// Reads `local.len()` bytes at `remote` (key `key`) of `ah`'s memory
    /// with its owner's help (module docs), as [`Self::copy`] does alone:
    /// `Err(Again)` while the registration is being changed, else the
    /// read's status.
    pub(super) fn read_helped(
        &mut self,
        ah: Ah,
        local: &UserBuf,
        remote: u64,
        key: u64,
    ) -> Result<Result<(), Status>, DevError> {
        let len = local.len();
        {
            let p = super::peer_of(&mut self.peers, ah)?;
            if let Err(s) = read_remote(&p.map, &p.shape, key, remote, len as u64, Access::REMOTE_READ) {
                return Ok(Err(s));
            }
        }
        let chunk = chunk_len(len);
        let n = len.div_ceil(chunk) as u64;
        let dst = local.with_slice_mut(|s| s.as_mut_ptr());
        self.help.gen = self.help.gen.wrapping_add(1).max(1);
        let gen = u64::from(self.help.gen) << 32;
        let slot = self.map.block(self.shape.help_off(), HELP_LEN);
        for (off, v) in [(SRC, remote), (DST, dst as u64), (LEN, len as u64), (KEY, key), (CHUNK, chunk as u64)] {
            slot.u64(off).store(v, Ordering::Relaxed);
        }
        slot.u64(DONE).store(0, Ordering::Relaxed);
        slot.u64(FAILED).store(0, Ordering::Relaxed);
        slot.u64(OPEN).store(1, Ordering::Relaxed);
        // The job's fields before its generation.
        slot.u64(NEXT).store(gen, Ordering::Release);
        let asked = self.send_help_notice(ah, self.help.gen);
        self.help.asked += u64::from(asked);
        let p = super::peer_of(&mut self.peers, ah)?;
        let (pid, start) = (p.pid, p.start);
        let slot = self.map.block(self.shape.help_off(), HELP_LEN);
        // The registration is held claimed while this endpoint copies, as
        // a read alone holds it (`mrtable.rs`); the owner, helping, checks
        // its own record instead.
        let job = match claim_remote(&p.map, &p.shape, key, remote, len as u64, Access::REMOTE_READ) {
            Err(s) => {
                // No chunk for this endpoint: those the owner took are
                // waited for, then the refusal is the answer.
                let taken = (slot.u64(NEXT).swap(gen | 0xFFFF_FFFF, Ordering::AcqRel) & 0xFFFF_FFFF).min(n);
                // A gone owner copies nothing more: the refusal stands either way.
                let _ = wait_done(&slot, taken, (pid, start));
                slot.u64(OPEN).store(0, Ordering::Relaxed);
                return if s == Status::Again { Err(DevError::Again) } else { Ok(Err(s)) };
            }
            Ok(_claim) => run_job(&slot, (pid, start), dst, remote, len, chunk, n),
        };
        self.map.block(self.shape.help_off(), HELP_LEN).u64(OPEN).store(0, Ordering::Relaxed);
        // Polls stamp the clock now and then; a long copy had none.
        self.stamp_progress();
        self.help.chunks_helped += job.helped;
        if !job.complete {
            // The owner's copy failed (or stalled): the whole read again,
            // by this endpoint alone.
            return self.copy_alone(ah, *local, (remote, key), false);
        }
        Ok(job.status)
    }

    /// Sends `ah` a help notice for job `gen`; false when its ring had no
    /// room (the reader then copies alone).
    pub(super) fn send_help_notice(&mut self, ah: Ah, gen: u32) -> bool {
        self.send_notice(ah, 8, segment::HELP, |b| b[..8].copy_from_slice(&u64::from(gen).to_le_bytes())).is_ok()
    }

    /// A help notice at ring offset `e` (`span` bytes, checked) from
    /// endpoint `epid` of `connid`: noted, and served at the start of the
    /// next poll (module docs). Anything that does not check out is left
    /// to the reader.
    pub(super) fn help_noticed(&mut self, e: usize, span: usize, (epid, connid): (u32, u32)) {
        if span < SLOT_HDR + 8 || !self.cma {
            return;
        }
        let Some(&ah) = self.by_id.get(&(epid, connid)) else { return };
        // SAFETY: the notice's payload, inside the entry (`span` checked).
        let b = unsafe { self.map.bytes(e + SLOT_HDR, 8) };
        let gen = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) << 32;
        if self.help.pending.len() < PENDING_MAX {
            self.help.pending.push((ah, gen));
        }
    }

    /// Helps with the jobs noticed since the last poll (module docs).
    #[cold]
    #[inline(never)]
    pub(super) fn help_pending(&mut self) {
        for (ah, gen) in std::mem::take(&mut self.help.pending) {
            self.help_reader(ah, gen);
        }
    }

    /// Takes chunks of job `gen` of reader `ah` while any are left.
    fn help_reader(&mut self, ah: Ah, gen: u64) {
        let Some(p) = self.peers.get(ah as usize).and_then(Option::as_ref).filter(|p| !p.lost) else { return };
        let pid = p.pid as libc::pid_t;
        let Some(job) = help_slot(p).and_then(|slot| Job::read(&slot, gen)) else { return };
        if !self.own_grants(job.key, job.src, job.len, Access::REMOTE_READ) {
            return;
        }
        let p = self.peers[ah as usize].as_ref().expect("checked above");
        let Some(slot) = help_slot(p) else { return };
        // Counted as at work before the first claim, until after the last
        // chunk is counted done: a reader whose chunks stall tells a
        // helper that is still copying from none at all (`wait_done`).
        slot.u64(BUSY).fetch_add(1, Ordering::AcqRel);
        loop {
            let w = slot.u64(NEXT).load(Ordering::Acquire);
            let c = w & 0xFFFF_FFFF;
            if w & !0xFFFF_FFFF != gen || c >= job.chunks {
                break;
            }
            if slot.u64(NEXT).compare_exchange(w, w + 1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            let at = c * job.chunk;
            let n = job.chunk.min(job.len - at) as usize;
            // Its own registered memory (checked above), into the reader's.
            let ok = cma_copy(pid, (job.src + at) as *mut u8, job.dst + at, n, true).is_ok();
            if !ok {
                slot.u64(FAILED).store(1, Ordering::Release);
            }
            slot.u64(DONE).fetch_add(1, Ordering::AcqRel);
            self.help.chunks_given += 1;
            if !ok {
                break;
            }
        }
        slot.u64(BUSY).fetch_sub(1, Ordering::AcqRel);
    }

    /// Jobs this endpoint asked help for, chunks owners copied for it, and
    /// chunks it copied for readers of its memory.
    pub fn help_stats(&self) -> (u64, u64, u64) {
        (self.help.asked, self.help.chunks_helped, self.help.chunks_given)
    }
}

/// Peer `p`'s help slot, unless its mapping (its own shape's word)
/// holds none.
fn help_slot(p: &Peer) -> Option<Block<'_>> {
    let off = p.shape.help_off();
    (off.checked_add(HELP_LEN)? <= p.map.len).then(|| p.map.block(off, HELP_LEN))
}

/// What a reader's run of its job gave.
struct Ran {
    status: Result<(), Status>,
    /// Chunks the owner copied.
    helped: u64,
    /// Every chunk is in, none failed: else the reader copies alone.
    complete: bool,
}

/// The reader's part of its job in `slot` (`n` chunks of `chunk` bytes of
/// the `len` at `remote` in process `pid`, into `dst`): takes chunks until
/// none is left, then waits for the owner's.
fn run_job(slot: &Block<'_>, peer: (u32, u64), dst: *mut u8, remote: u64, len: usize, chunk: usize, n: u64) -> Ran {
    let mut mine = 0u64;
    let mut status = Ok(());
    // The counter as this endpoint's last claim left it: unchanged at the
    // next, no helper took a chunk meanwhile.
    let mut after_mine = None;
    loop {
        let w = slot.u64(NEXT).load(Ordering::Acquire);
        let c = w & 0xFFFF_FFFF;
        if c >= n {
            break;
        }
        let take = match after_mine {
            // No helper came while this endpoint copied its last chunk:
            // the rest, in one copy (an owner that polls joins within a
            // chunk's time; one busy with its own work, as in an
            // exchange, costs the reader one system call more).
            Some(a) if a == c => n - c,
            // The first chunk, or a helper is at work: a chunk.
            _ => 1,
        };
        if slot.u64(NEXT).compare_exchange(w, w + take, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            continue;
        }
        after_mine = Some(c + take);
        let at = c as usize * chunk;
        let bytes = (take as usize * chunk).min(len - at);
        // The copy: `dst` is the reader's lent buffer of `len` bytes; the
        // remote range was checked and is held claimed.
        if let Err(e) = cma_copy(peer.0 as libc::pid_t, dst.wrapping_add(at), remote + at as u64, bytes, false) {
            status = Err(cma_status(e));
        }
        slot.u64(DONE).fetch_add(take, Ordering::AcqRel);
        mine += take;
    }
    let done = wait_done(slot, n, peer);
    if done.is_err() {
        return Ran { status: Err(Status::PeerUnreachable), helped: 0, complete: true };
    }
    let done = done.unwrap_or(n);
    let failed = slot.u64(FAILED).load(Ordering::Acquire) != 0;
    Ran { status, helped: done.min(n).saturating_sub(mine), complete: done >= n && !failed }
}

/// Waits until `slot`'s `done` counts `n` chunks: `Ok` with the count, which
/// is short of `n` when none came in for [`STALL`] (no helper at work) or
/// [`STALL_BUSY`]; `Err` when the owner
/// (`pid`, started at `start`) is gone.
pub(super) fn wait_done(slot: &Block<'_>, n: u64, (pid, start): (u32, u64)) -> Result<u64, ()> {
    let mut seen = slot.u64(DONE).load(Ordering::Acquire);
    let mut since = None::<Instant>;
    let mut spins = 0u32;
    while seen < n {
        spins += 1;
        if spins < 1024 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
            let t = since.get_or_insert_with(Instant::now);
            let waited = t.elapsed();
            if waited > STALL && (slot.u64(BUSY).load(Ordering::Acquire) == 0 || waited > STALL_BUSY) {
                break;
            }
            if spins % 1024 == 0 && !alive(pid, start) {
                return Err(());
            }
        }
        let now = slot.u64(DONE).load(Ordering::Acquire);
        if now != seen {
            (seen, since, spins) = (now, None, 0);
        }
    }
    Ok(seen)
}

/// A reader's job as its owner reads it from the slot.
struct Job {
    src: u64,
    dst: u64,
    len: u64,
    key: u64,
    chunk: u64,
    chunks: u64,
}

impl Job {
    /// The job of generation `gen` (high half) in `slot`, if it is the one
    /// running and its fields make sense.
    fn read(slot: &Block<'_>, gen: u64) -> Option<Job> {
        if slot.u64(NEXT).load(Ordering::Acquire) & !0xFFFF_FFFF != gen || gen == 0 {
            return None;
        }
        let f = |o: usize| slot.u64(o).load(Ordering::Relaxed);
        let (src, dst, len, key, chunk) = (f(SRC), f(DST), f(LEN), f(KEY), f(CHUNK));
        let chunks = len.checked_add(chunk.checked_sub(1)?)? / chunk.max(1);
        let fits = src.checked_add(len).is_some() && dst.checked_add(len).is_some();
        (chunk >= CHUNK_MIN && len > 0 && chunks <= CHUNKS_MAX && fits).then_some(Job {
            src,
            dst,
            len,
            key,
            chunk,
            chunks,
        })
    }
}
