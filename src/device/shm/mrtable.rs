//! The registration table in the segment, and the claims that keep a
//! deregistration from returning while a peer's cross-memory attach into
//! the region is under way.
//!
//! An entry is one cache line:
//!
//! ```text
//! 0   seq     u32  seqlock: odd while the owner rewrites the entry
//! 4   access  u32  Access bits
//! 8   key     u64  0: free
//! 16  addr    u64
//! 24  len     u64
//! 32  claims  6 x u32: the pid of a peer in the middle of an access, or 0
//! 56  fd      u32  [`SHARED`] entries: the owner's descriptor of the file
//! 60  page    u32  [`SHARED`] entries: the file page that holds `addr`
//! ```
//!
//! The access word's bit [`MAPPED`] marks memory the owner allocated in a
//! file of its own that peers may map (`alloc.rs`): they copy into and out
//! of their mapping of it instead of attaching to the owner's process, and
//! read the entry without a claim ([`read_remote`] says why that is safe).
//! The bit [`SHARED`] marks memory the application shares by a file
//! descriptor of its own (`rdm4_mr_reg_fd`): peers map the file too (by
//! `/proc/<owner>/fd/<fd>`) and copy, but under the claim, since that
//! memory stays the application's after the deregistration.
//!
//! An accessor first claims a word (compare-and-swap 0 -> its pid), then
//! reads the entry and checks key, bounds and access, then copies, then
//! clears its word. The owner's deregistration first clears the key, then
//! waits until every claim word is 0 (or names a process that is gone).
//! Both sides put a sequentially consistent fence between their write and
//! their read, so either the accessor sees the cleared key (and touches
//! nothing) or the owner sees its claim (and waits for the copy to end):
//! after `dereg` returns, no peer reads or writes the region.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::segment::{random_u64, Mapping, Shape};
use super::ShmDevice;
use crate::device::Access;
use crate::mem::UserBuf;
use crate::status::Status;

/// Entries of the table.
pub(super) const MR_ENTRIES: usize = 1024;
/// Bytes of an entry.
pub(super) const MR_ENTRY_LEN: usize = 64;
/// Accessors of one registration at a time; more wait for a free word.
const CLAIMS: usize = 6;

const SEQ: usize = 0;
const ACCESS: usize = 4;
const KEY: usize = 8;
const ADDR: usize = 16;
const LEN: usize = 24;
const CLAIM: usize = 32;
const FD: usize = 56;
const PAGE: usize = 60;

const _: () = assert!(CLAIM + 4 * CLAIMS <= FD && PAGE + 4 <= MR_ENTRY_LEN);

/// The access word's flag of an allocation peers may map (`alloc.rs`);
/// not an `Access` bit, so no application can set it.
pub(super) const MAPPED: u32 = 1 << 31;

/// The access word's flag of memory the application shares by a file
/// descriptor (`ShmDevice::reg_shared`); not an `Access` bit either.
pub(super) const SHARED: u32 = 1 << 30;

/// What a claimed entry holds: the region's base address, length, and
/// whether peers may map it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub base: u64,
    pub len: u64,
    pub mapped: bool,
    /// [`SHARED`] memory: the owner's descriptor and the file page of `base`.
    pub shared: Option<(u32, u32)>,
}

/// A registration as this endpoint made it, in its own memory: the
/// owner's own accesses for peers (`ringrma.rs`) check this, not the table
/// in the segment, which any process of the user can write: a forged entry
/// would otherwise make the owner write any memory of its own.
#[derive(Debug, Clone, Copy)]
pub(super) struct Own {
    /// Its entry in the table.
    pub idx: usize,
    pub base: u64,
    pub len: u64,
    pub access: Access,
}

/// How long a deregistration waits for accesses under way before it
/// answers `Busy` (the largest single access, 1 GiB, copies in well under
/// a second).
const DEREG_WAIT: Duration = Duration::from_secs(2);

/// How long an accessor waits for a free claim word before it answers
/// `Again` (every word held by a copy of other peers).
const CLAIM_WAIT: Duration = Duration::from_millis(100);

/// The offset of the entry of `key` in `shape`'s table (its low bits).
fn entry_of(shape: &Shape, key: u64) -> usize {
    shape.mr_off() + (key % MR_ENTRIES as u64) as usize * MR_ENTRY_LEN
}

/// A claim on a peer's registration entry: released on drop.
pub(super) struct Claim<'a>(&'a AtomicU32);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// This process's id, read once (`getpid` is a system call, too dear for
/// every claim; docs/performance.md, "one-sided operations on one host
/// (issue 31, first part)"); a forked child forgets it (`pthread_atfork`)
/// and reads its own.
fn this_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only stores to an atomic.
    HOOK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget));
    });
    let p = std::process::id();
    PID.store(p, Ordering::Relaxed);
    p
}

/// True when process `pid` has ended (gone, or a zombie).
fn process_gone(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(|st| st == "Z")))
        .unwrap_or(false)
}

/// Claims the entry of `key` in a peer's table (`map`, `shape`) and checks
/// that it grants `need` over `len` bytes at `addr`: the claim, to hold
/// while copying. `RemoteAccess` when it does not; `Again` when no claim
/// word came free in time.
pub(super) fn claim_remote<'a>(
    map: &'a Mapping,
    shape: &Shape,
    key: u64,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<(Claim<'a>, Entry), Status> {
    let e = entry_of(shape, key);
    if key == 0 || map.u64_at(e + KEY).load(Ordering::Relaxed) != key {
        return Err(Status::RemoteAccess);
    }
    let me = this_pid();
    // The clock only once the first round found every word taken.
    let mut started = None;
    let claim = 'found: loop {
        for i in 0..CLAIMS {
            let w = map.u32_at(e + CLAIM + 4 * i);
            if w.compare_exchange(0, me, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
                break 'found Claim(w);
            }
        }
        if started.get_or_insert_with(Instant::now).elapsed() > CLAIM_WAIT {
            return Err(Status::Again);
        }
        std::thread::yield_now();
    };
    // No fence: the claim is a sequentially consistent read-modify-write
    // and `lookup` reads the entry's sequence word sequentially consistent
    // too, which orders them against the owner's fence between clearing
    // the key and reading the claims (on x86 the claim's locked
    // instruction is itself a full barrier, so an `mfence` here would only
    // add its cost to every access).
    match lookup(map, e, key, addr, len, need) {
        Some(entry) => Ok((claim, entry)),
        None => Err(Status::RemoteAccess),
    }
}

/// The entry of `key` in a peer's table (`map`, `shape`) when it grants
/// `need` over `len` bytes at `addr`, read without a claim:
/// `RemoteAccess` when it does not. Enough for an allocation's
/// [`MAPPED`] memory, which a peer touches through its own mapping of the
/// allocation's file: an access that read the entry before the owner's
/// `free` and copies after it lands in the freed file's pages, which no
/// one else sees any more (an allocation's pages are its own, and live
/// until the last mapping goes), so it is an access ordered before the
/// free; an access that starts after the free returned reads the cleared
/// key and is refused. Memory of cross-memory attach needs the claim: it
/// is the application's and stays in use after the deregistration.
#[inline(always)]
pub(super) fn read_remote(
    map: &Mapping,
    shape: &Shape,
    key: u64,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<Entry, Status> {
    let e = entry_of(shape, key);
    if key == 0 {
        return Err(Status::RemoteAccess);
    }
    lookup(map, e, key, addr, len, need).ok_or(Status::RemoteAccess)
}

/// Reads entry `e` under its seqlock: it holds `key` and grants `need`
/// over `[addr, addr + len)`.
#[inline(always)]
fn lookup(map: &Mapping, e: usize, key: u64, addr: u64, len: u64, need: Access) -> Option<Entry> {
    // One bounds check for the whole entry, then its fields.
    let t = map.block(e, MR_ENTRY_LEN);
    for _ in 0..64 {
        let s1 = t.u32(SEQ).load(Ordering::SeqCst);
        if s1 % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let k = t.u64(KEY).load(Ordering::Relaxed);
        let base = t.u64(ADDR).load(Ordering::Relaxed);
        let mlen = t.u64(LEN).load(Ordering::Relaxed);
        let word = t.u32(ACCESS).load(Ordering::Relaxed);
        let shared =
            (word & SHARED != 0).then(|| (t.u32(FD).load(Ordering::Relaxed), t.u32(PAGE).load(Ordering::Relaxed)));
        let access = Access::from_bits_truncate(word);
        fence(Ordering::Acquire);
        if t.u32(SEQ).load(Ordering::Relaxed) != s1 {
            continue;
        }
        let ok = k == key
            && access.contains(need)
            && addr >= base
            && addr.checked_add(len).is_some_and(|end| base.checked_add(mlen).is_some_and(|mend| end <= mend));
        return ok.then_some(Entry { base, len: mlen, mapped: word & MAPPED != 0, shared });
    }
    None
}

impl ShmDevice {
    /// Publishes a registration of `buf` in a free entry; returns its key:
    /// random, with the entry's index in the low bits, so that a peer finds
    /// the entry without a search. Entries of registrations still closing
    /// (`Busy`) are not reused.
    pub(super) fn table_reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        let (idx, key) = self.reserve_entry()?;
        self.publish_entry(idx, key, buf, (access.bits(), None));
        Ok(key)
    }

    /// A free entry and a fresh key for it, not yet published.
    pub(super) fn reserve_entry(&mut self) -> Result<(usize, u64), Status> {
        let base = self.shape.mr_off();
        let idx = (0..MR_ENTRIES)
            .find(|&i| {
                self.map.u64_at(base + i * MR_ENTRY_LEN + KEY).load(Ordering::Relaxed) == 0
                    && !self.mrs_closing.contains(&i)
            })
            .ok_or(Status::NoMem)?;
        let mut key = 0;
        while key == 0 || self.mrs.contains_key(&key) {
            key = self.next_key().wrapping_mul(MR_ENTRIES as u64) | idx as u64;
        }
        Ok((idx, key))
    }

    /// A fresh random registration key.
    fn next_key(&mut self) -> u64 {
        if self.keys.is_empty() {
            let mut b = [0u8; 32 * 8];
            // SAFETY: writes at most `b.len()` bytes into `b`.
            let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
            if n == b.len() as isize {
                self.keys.extend(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))));
            } else {
                self.keys.push(random_u64());
            }
        }
        self.keys.pop().unwrap_or_else(random_u64)
    }

    /// Publishes registration `key` of `buf` in entry `idx` with access
    /// word `word` (`Access` bits, and [`MAPPED`] or [`SHARED`]) and, for
    /// shared memory, the descriptor and file page.
    pub(super) fn publish_entry(
        &mut self,
        idx: usize,
        key: u64,
        buf: UserBuf,
        (word, fd_page): (u32, Option<(u32, u32)>),
    ) {
        let e = self.shape.mr_off() + idx * MR_ENTRY_LEN;
        let seq = self.map.u32_at(e + SEQ);
        // Even whatever a peer wrote there: odd while rewritten, even after.
        let s = seq.load(Ordering::Relaxed) & !1;
        seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.map.u64_at(e + ADDR).store(buf.addr(), Ordering::Relaxed);
        self.map.u64_at(e + LEN).store(buf.len() as u64, Ordering::Relaxed);
        self.map.u32_at(e + ACCESS).store(word, Ordering::Relaxed);
        let (fd, page) = fd_page.unwrap_or((0, 0));
        self.map.u32_at(e + FD).store(fd, Ordering::Relaxed);
        self.map.u32_at(e + PAGE).store(page, Ordering::Relaxed);
        self.map.u64_at(e + KEY).store(key, Ordering::Relaxed);
        seq.store(s.wrapping_add(2), Ordering::Release);
        let access = Access::from_bits_truncate(word);
        self.mrs.insert(key, Own { idx, base: buf.addr(), len: buf.len() as u64, access });
    }

    /// Whether this endpoint registered `[addr, addr + len)` under `key`
    /// with `need`, by its own record ([`Own`]), and has not withdrawn it
    /// (a deregistration that answered `Busy`).
    pub(super) fn own_grants(&self, key: u64, addr: u64, len: u64, need: Access) -> bool {
        self.mrs.get(&key).is_some_and(|r| {
            r.access.contains(need)
                && addr >= r.base
                && addr.checked_add(len).is_some_and(|end| end <= r.base + r.len)
                && !self.mrs_closing.contains(&r.idx)
        })
    }

    /// Withdraws registration `key`, then waits until no peer is in the
    /// middle of an access to it: when this returns `Ok`, no peer reads or
    /// writes the region any more. `Busy` when an access is still under way
    /// after [`DEREG_WAIT`]: no new access starts, and a later call waits
    /// again. `Inval` for an unknown key.
    pub(super) fn table_dereg(&mut self, key: u64) -> Result<(), Status> {
        let idx = self.mrs.get(&key).ok_or(Status::Inval)?.idx;
        let e = self.withdraw(key, idx);
        fence(Ordering::SeqCst);
        if !self.wait_claims(e, Instant::now() + DEREG_WAIT) {
            if !self.mrs_closing.contains(&idx) {
                self.mrs_closing.push(idx);
            }
            return Err(Status::Busy);
        }
        self.mrs_closing.retain(|&i| i != idx);
        self.mrs.remove(&key);
        Ok(())
    }

    /// Clears registration `key`'s key in its entry `idx` (no access
    /// starts after this and the caller's fence); returns the entry's
    /// offset.
    fn withdraw(&self, key: u64, idx: usize) -> usize {
        let e = self.shape.mr_off() + idx * MR_ENTRY_LEN;
        let seq = self.map.u32_at(e + SEQ);
        if self.map.u64_at(e + KEY).load(Ordering::Relaxed) == key {
            let s = seq.load(Ordering::Relaxed) & !1;
            seq.store(s.wrapping_add(1), Ordering::Relaxed);
            fence(Ordering::Release);
            self.map.u64_at(e + KEY).store(0, Ordering::Relaxed);
            self.map.u64_at(e + LEN).store(0, Ordering::Relaxed);
            seq.store(s.wrapping_add(2), Ordering::Release);
        }
        e
    }

    /// At close: withdraws every registration at once, then waits until
    /// no peer is in the middle of an access to one (up to [`DEREG_WAIT`]
    /// in all), so that after the endpoint's close no peer reads or writes
    /// the application's registered memory. Peers that already hold a key
    /// find it gone (`RDM4_EREMOTEACCESS`, or the peer lost).
    pub(super) fn withdraw_all(&mut self) {
        let entries: Vec<usize> = self.mrs.iter().map(|(&key, r)| self.withdraw(key, r.idx)).collect();
        fence(Ordering::SeqCst);
        let deadline = Instant::now() + DEREG_WAIT;
        for e in entries {
            if !self.wait_claims(e, deadline) {
                crate::log::log!(crate::log::WARN, "close: a peer's access to a registration outlasted the wait");
            }
        }
        self.mrs.clear();
    }

    /// Waits until every claim word of entry `e` is 0, clearing words of
    /// processes that are gone; false at `deadline`.
    fn wait_claims(&self, e: usize, deadline: Instant) -> bool {
        let mut rounds = 0u32;
        loop {
            let mut busy = false;
            for i in 0..CLAIMS {
                let w = self.map.u32_at(e + CLAIM + 4 * i);
                let pid = w.load(Ordering::Acquire);
                if pid == 0 {
                    continue;
                }
                if process_gone(pid) {
                    let _ = w.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
                } else {
                    busy = true;
                }
            }
            if !busy {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            rounds += 1;
            if rounds < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}
