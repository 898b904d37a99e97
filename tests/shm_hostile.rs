//! Hostile input against the shm device (issue 41): a process of the same
//! user that maps an endpoint's segment itself and scribbles on its ring
//! or its registration table (`src/device/shm/mod.rs` has the layout).
//!
//! What such a process can always do, it may: forge entries under another
//! peer's ids, close the ring for everyone (the tail's closed bit), claim
//! and never publish under a live endpoint's note. What is asserted here:
//! the owner never panics, never hangs in a call, never writes memory it
//! did not register; garbage in entries the scribbler claimed itself
//! disturbs only those entries (the owner keeps working with its other
//! peers, every message exact); and where the scribbler breaks the owner's
//! own header or table, operations fail with an error (or, where noted,
//! wait) rather than crash.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{pattern, Rng};
use rdm4::device::shm::{ShmConfig, ShmDevice};
use rdm4::device::Access;
use rdm4::engine::{Addr, Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{Cts, Packet};
use rdm4::Status;

type Ep = Endpoint<ShmDevice>;

/// Every test ends well within this.
const LIMIT: Duration = Duration::from_secs(10);

// The segment's layout (`segment.rs`, `mrtable.rs`).
const HDR_LEN: usize = 256;
const RING_SHIFT: usize = 12;
const MTU: usize = 20;
const SEAL: usize = 56;
const TAIL: usize = 64;
const HEAD: usize = 128;
const CLOSED: u64 = 1 << 63;
const HELD: u64 = 1 << 62;
const SHRINK_SHIFT: u32 = 59;
const TAIL_META: u64 = CLOSED | HELD | 7 << SHRINK_SHIFT;
const SLOT_HDR: usize = 24;
const MR_ENTRIES: usize = 1024;
const MR_ENTRY_LEN: usize = 64;
// Entry span flags.
const CLOSE_NOTICE: u32 = 2;
const RDMA_REQ: u32 = 8;
const RDMA_RSP: u32 = 16;
const GROW_NOTICE: u32 = 32;
// A registration entry's fields.
const MR_SEQ: usize = 0;
const MR_ACCESS: usize = 4;
const MR_KEY: usize = 8;
const MR_ADDR: usize = 16;
const MR_LEN: usize = 24;
const MR_CLAIMS: usize = 32;

/// An endpoint's segment as the scribbler maps it: its own mapping of
/// `/dev/shm/<prefix>-<uid>-<epid>`, read and written through atomics.
struct Seg {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: shared memory, accessed through atomics (and plain copies of
// entries the scribbler claimed); moving the mapping between threads is fine.
unsafe impl Send for Seg {}

impl Seg {
    fn open(prefix: &str, epid: u32) -> Seg {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let name = std::ffi::CString::new(format!("/{prefix}-{uid}-{epid}")).unwrap();
        // SAFETY: a valid name; the descriptor is closed below.
        let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR, 0) };
        assert!(fd >= 0, "the segment exists");
        // SAFETY: fstat into a zeroed struct; a shared mapping of the whole file.
        let (len, ptr) = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(fd, &mut st), 0);
            let len = st.st_size as usize;
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            assert_ne!(p, libc::MAP_FAILED);
            libc::close(fd);
            (len, p.cast::<u8>())
        };
        Seg { ptr, len }
    }

    fn u64(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds, aligned (the mapping is page-aligned).
        unsafe { &*self.ptr.add(off).cast::<AtomicU64>() }
    }

    fn u32(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as `u64`.
        unsafe { &*self.ptr.add(off).cast::<AtomicU32>() }
    }

    fn cap(&self) -> usize {
        1 << self.u32(RING_SHIFT).load(Ordering::Relaxed)
    }

    fn mtu(&self) -> usize {
        self.u32(MTU).load(Ordering::Relaxed) as usize
    }

    fn sealed(&self, pos: u64) -> u64 {
        (pos + 1) ^ self.u64(SEAL).load(Ordering::Relaxed)
    }

    /// The ring in use, as the tail word says.
    fn ring(&self, word: u64) -> usize {
        self.cap() >> ((word >> SHRINK_SHIFT) & 7)
    }

    /// The offset in the segment of the line at ring position `pos`.
    fn at(&self, pos: u64, ring: usize) -> usize {
        HDR_LEN + (pos as usize & (ring - 1))
    }

    /// The offset of registration entry `i`.
    fn mr(&self, i: usize) -> usize {
        HDR_LEN + self.cap() + i * MR_ENTRY_LEN
    }

    /// Writes an entry header at `e`: ids, packet length, span (with
    /// flags), then `seal` (released).
    fn header(&self, e: usize, ids: (u32, u32), len: u32, span: u32, seal: u64) {
        self.u64(e + 8).store(u64::from(ids.0) | u64::from(ids.1) << 32, Ordering::Relaxed);
        self.u64(e + 16).store(u64::from(len) | u64::from(span) << 32, Ordering::Relaxed);
        self.u64(e).store(seal, Ordering::Release);
    }

    /// Claims `need` bytes (whole lines) in the ring as a producer does,
    /// padding to the ring's end first where the entry would cross it:
    /// the entry's position and the ring it is in; `None` when the ring is
    /// full, closed or holding messages back.
    fn claim(&self, need: usize, ids: (u32, u32)) -> Option<(u64, usize)> {
        let tail = self.u64(TAIL);
        loop {
            let word = tail.load(Ordering::Acquire);
            if word & (CLOSED | HELD) != 0 {
                return None;
            }
            let pos = word & !TAIL_META;
            let ring = self.ring(word);
            let left = ring - (pos as usize & (ring - 1));
            let pad = if need <= left { 0 } else { left };
            let end = pos + (pad + need) as u64;
            if end > self.u64(HEAD).load(Ordering::Acquire) + ring as u64 {
                return None;
            }
            if tail.compare_exchange(word, end | (word & TAIL_META), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                if pad > 0 {
                    self.header(self.at(pos, ring), ids, 0, pad as u32, self.sealed(pos));
                }
                return Some((pos + pad as u64, ring));
            }
        }
    }

    /// Copies `bytes` to offset `off` (in an entry the scribbler claimed).
    fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: in bounds; no one else writes these bytes (claimed), and
        // the owner reads them only after the seal (released after this).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len()) };
    }
}

impl Drop for Seg {
    fn drop(&mut self) {
        // SAFETY: unmapping what `open` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Endpoints of one process over shm that all know each other, their
/// HANDSHAKEs exchanged: `to[i][j]` is endpoint i's handle for j.
struct Net {
    prefix: String,
    eps: Vec<Ep>,
    to: Vec<Vec<Addr>>,
    cqs: Vec<Vec<Cqe>>,
}

impl Net {
    fn new(name: &str, n: usize) -> Net {
        let prefix = format!("rdm4h{}{name}", std::process::id());
        let cfg = ShmConfig { prefix: prefix.clone(), peer_check: Duration::from_millis(2), ..ShmConfig::default() };
        let mut eps: Vec<Ep> =
            (0..n).map(|_| Endpoint::new(ShmDevice::open_with(cfg.clone()).unwrap(), Config::default())).collect();
        let raws: Vec<_> = eps.iter().map(|e| e.addr()).collect();
        let to = eps.iter_mut().map(|e| raws.iter().map(|r| e.av_insert(r).unwrap()).collect()).collect();
        let mut net = Net { prefix, eps, to, cqs: vec![Vec::new(); n] };
        for i in 0..n {
            for j in i + 1..n {
                net.messages(i, j, 1, &[2]);
            }
        }
        net
    }

    /// Endpoint `i`'s segment, mapped by the scribbler.
    fn seg(&self, i: usize) -> Seg {
        Seg::open(&self.prefix, u32::from(self.eps[i].addr().qpn()))
    }

    /// Endpoint `i`'s ids in a ring entry (endpoint id, connid).
    fn ids(&self, i: usize) -> (u32, u32) {
        let a = self.eps[i].addr();
        (u32::from(a.qpn()), a.connid())
    }

    fn step(&mut self) {
        for (ep, cq) in self.eps.iter_mut().zip(self.cqs.iter_mut()) {
            ep.progress(0);
            ep.poll_cq(cq, usize::MAX);
        }
    }

    fn run(&mut self, what: &str, mut done: impl FnMut(&[Vec<Cqe>]) -> bool) {
        let t = Instant::now();
        while !done(&self.cqs) {
            assert!(t.elapsed() < LIMIT, "{what}: stuck: {:?}", self.cqs);
            self.step();
        }
    }

    /// Steps every endpoint for `ms` milliseconds.
    fn idle(&mut self, ms: u64) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(ms) {
            self.step();
        }
    }

    /// `rounds` rounds of one message of each of `sizes` from `i` to `j`
    /// and back, untagged, each receive from the one peer: every message
    /// arrives once, whole, in the receive posted for it.
    fn messages(&mut self, i: usize, j: usize, rounds: usize, sizes: &[usize]) {
        let n = sizes.len();
        for round in 0..rounds {
            let seed = |k: usize, dir: usize| (round * 1000 + k * 2 + dir) as u64;
            let mut dsts: Vec<Vec<OwnedBuf>> = Vec::new();
            let mut srcs = Vec::new();
            for (dir, (from, to)) in [(i, j), (j, i)].into_iter().enumerate() {
                let mut d = Vec::new();
                for (k, &len) in sizes.iter().enumerate() {
                    let mut b = OwnedBuf::zeroed(len + 1);
                    let opts = RecvOpts { src: Some(self.to[to][from]), context: 1 + k as u64, ..RecvOpts::default() };
                    self.eps[to].recv(b.buf(), opts).unwrap();
                    d.push(b);
                    let mut s = OwnedBuf::from_slice(&pattern(len, seed(k, dir)));
                    let opts = SendOpts { context: 100 + k as u64, ..SendOpts::default() };
                    self.eps[from].send(self.to[from][to], s.buf(), opts).unwrap();
                    srcs.push(s);
                }
                dsts.push(d);
            }
            self.run("messages", |c| c[i].len() == 2 * n && c[j].len() == 2 * n);
            for (dir, to) in [j, i].into_iter().enumerate() {
                let cq = &self.cqs[to];
                assert!(cq.iter().all(|e| e.status == Status::Success), "{cq:?}");
                for (k, &len) in sizes.iter().enumerate() {
                    let e = cq.iter().find(|e| e.context == 1 + k as u64).expect("a receive completed");
                    assert_eq!(e.len, len as u64, "round {round}, message {k} to {to}");
                    let got = dsts[dir][k].bytes();
                    assert!(got[..len] == pattern(len, seed(k, dir))[..], "round {round}, message {k} to {to}: bytes");
                    assert_eq!(got[len], 0, "written past the message");
                }
            }
            self.cqs[i].clear();
            self.cqs[j].clear();
        }
    }

    /// `i` writes `data` at `at` of `j`'s memory, then reads it back:
    /// the two completions' statuses, and what was read.
    fn write_read(&mut self, i: usize, j: usize, at: RemoteBuf, data: &[u8]) -> (Status, Status, Vec<u8>) {
        let mut src = OwnedBuf::from_slice(data);
        let mut back = OwnedBuf::zeroed(data.len());
        let to = self.to[i][j];
        self.eps[i].write(to, src.buf(), at, None, 1).unwrap();
        self.run("write", |c| !c[i].is_empty());
        self.eps[i].read(to, back.buf(), at, 2).unwrap();
        self.run("read", |c| c[i].len() == 2);
        let (w, r) = (self.cqs[i][0].status, self.cqs[i][1].status);
        self.cqs[i].clear();
        (w, r, back.bytes().to_vec())
    }
}

/// Memory of `REGION` bytes with `GUARD` unregistered bytes each side.
const REGION: usize = 64 << 10;
const GUARD: usize = 8192;

struct Guarded {
    mem: OwnedBuf,
    key: u64,
    base: u64,
}

impl Guarded {
    fn reg(ep: &mut Ep, seed: u64) -> Guarded {
        let mut mem = OwnedBuf::from_slice(&pattern(REGION + 2 * GUARD, seed));
        let region = mem.buf().slice(GUARD, REGION).unwrap();
        let key = ep.mr_reg(region, Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
        Guarded { base: region.addr(), mem, key }
    }

    fn at(&self, off: usize) -> RemoteBuf {
        RemoteBuf { addr: self.base + off as u64, key: self.key }
    }

    /// The guards are as they were (`seed` made them).
    fn guards_intact(&self, seed: u64) -> bool {
        let want = pattern(REGION + 2 * GUARD, seed);
        let b = self.mem.bytes();
        b[..GUARD] == want[..GUARD] && b[GUARD + REGION..] == want[GUARD + REGION..]
    }
}

/// A well-formed CTS: an EFA packet that names no sender.
fn cts() -> Vec<u8> {
    let c = Cts { flags: 0, connid: None, padding: 0, send_id: 1, recv_id: 2, recv_length: 4096 };
    let mut out = vec![0u8; 64];
    let n = Packet::Cts(c).emit(&mut out).unwrap();
    out.truncate(n);
    out
}

/// Fails the test (ending the process) when `what` has not ended within
/// `LIMIT`: a call that hangs would otherwise hang the test.
fn watchdog(what: &'static str) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while !d.load(Ordering::Relaxed) {
            if t.elapsed() > LIMIT {
                eprintln!("hung: {what}");
                std::process::exit(101);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    done
}

/// A scribbler claims entries in O's ring the way producers do and fills
/// them with garbage: packet lengths past the MTU or the entry, spans of
/// 0, of odd sizes, past the ring's end, notices of every kind from ids no
/// one has, seals for other positions, packets that are no EFA packets or
/// name no sender. Meanwhile P and Q exchange messages of every size with
/// O (several entries each from 4 KiB on, long-CTS beyond 64 KiB) and P
/// writes and reads O's memory: every message arrives once, whole, in
/// order, every RMA is exact, nothing outside it changes, and O counts the
/// garbage it was handed (the device has no drop counters of its own: the
/// engine's `malformed` and `unknown_sender`, and the claims skipped).
#[test]
fn garbage_in_entries_a_scribbler_claims_disturbs_only_those_entries() {
    let t = Instant::now();
    let done = watchdog("garbage entries");
    let mut net = Net::new("entries", 3);
    let (o, p, q) = (0, 1, 2);
    let region = Guarded::reg(&mut net.eps[o], 5);
    let seg = net.seg(o);
    let stop = Arc::new(AtomicBool::new(false));
    let forged = Arc::new(AtomicU64::new(0));
    let scribbler = {
        let (stop, forged) = (stop.clone(), forged.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(9);
            let me = (0xFFFF_0000u32, 0xDEAD_BEEF);
            let mtu = seg.mtu() as u32;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A seal for another position, and a claim never published,
                // are seldom: the owner waits at each for a few peer checks.
                let kind = match n % 500 {
                    0 => 100,
                    250 => 101,
                    _ => rng.below(90),
                };
                let need = if kind < 60 { 64 * (1 + rng.below(8) as usize) } else { 64 };
                let Some((pos, ring)) = seg.claim(need, me) else {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                };
                let e = seg.at(pos, ring);
                let seal = seg.sealed(pos);
                let mut garbage = rng.bytes(need - SLOT_HDR);
                garbage[1] = 0x99; // never an EFA packet of protocol version 4
                seg.write(e + SLOT_HDR, &garbage);
                let span = need as u32;
                match kind {
                    // A packet of garbage.
                    0..=39 => {
                        let len = 1 + rng.below((need - SLOT_HDR) as u64) as u32;
                        seg.header(e, me, len, span, seal);
                    }
                    // A well-formed packet that names no sender.
                    40..=49 => {
                        let c = cts();
                        seg.write(e + SLOT_HDR, &c);
                        seg.header(e, me, c.len() as u32, span, seal);
                    }
                    // Lengths no producer writes.
                    50..=59 => {
                        let len = [mtu + 1, span - SLOT_HDR as u32 + 1, u32::MAX, 1 << 20][rng.below(4) as usize];
                        seg.header(e, me, len, span, seal);
                    }
                    // Spans no producer writes, of an entry of one line: 0,
                    // odd ones, past the ring's end, past any ring. (A span
                    // longer than its claim but within the ring is not
                    // here: the owner cannot tell it from a real one, and
                    // skips the entries it covers.)
                    60..=74 => {
                        let bad = [0u32, 1, 63, 65, 1 << 30, (ring * 2) as u32, !63];
                        seg.header(e, me, 10, bad[rng.below(bad.len() as u64) as usize], seal);
                    }
                    // Notices from ids no one has: close, RDMA request and
                    // answer, grow; and padding.
                    75..=89 => {
                        let flag = [CLOSE_NOTICE, RDMA_REQ, RDMA_RSP, GROW_NOTICE, 0][rng.below(5) as usize];
                        seg.header(e, me, 0, span | flag, seal);
                    }
                    // A seal for another position (not of a later lap of
                    // this line, which a producer's entry there would
                    // find before its own seal): the owner waits, then
                    // skips it as a claim of a producer that is gone.
                    100 => {
                        let wrong = [seg.sealed(pos + 64), pos, 0][rng.below(3) as usize];
                        seg.header(e, me, 10, span, wrong);
                    }
                    // Claimed, never published.
                    _ => {}
                }
                n += 1;
                forged.store(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    };
    let before = net.eps[o].stats();
    for round in 0..10 {
        net.messages(p, o, 2, &[0, 8, 1000, 5000, 70_000, 300_000]);
        net.messages(o, q, 2, &[8, 4000, 100_000]);
        let data = pattern(30_000, round);
        let (w, r, back) = net.write_read(p, o, region.at(round as usize * 1000), &data);
        assert_eq!((w, r), (Status::Success, Status::Success));
        assert!(back == data);
    }
    stop.store(true, Ordering::Relaxed);
    scribbler.join().unwrap();
    net.idle(20);
    assert!(net.cqs.iter().all(Vec::is_empty), "nothing else completed: {:?}", net.cqs);
    assert!(region.guards_intact(5), "no byte outside O's registration changed");
    let after = net.eps[o].stats();
    let skipped = net.eps[o].device().dead_claims_skipped();
    println!(
        "{} forged entries in {:.2} s: O's engine malformed {}, unknown sender {}; claims skipped {skipped}",
        forged.load(Ordering::Relaxed),
        t.elapsed().as_secs_f64(),
        after.malformed - before.malformed,
        after.unknown_sender - before.unknown_sender
    );
    assert!(after.malformed > before.malformed && after.unknown_sender > before.unknown_sender, "{after:?}");
    assert!(skipped > 0, "the wrongly sealed entries were skipped");
    assert!(t.elapsed() < LIMIT);
    done.store(true, Ordering::Relaxed);
}

/// A scribbler forges O's registration table: an entry granting an
/// unregistered buffer of O's, and O's real entry made longer than O's
/// registration. Then it writes RDMA requests into O's ring (ids of P, a
/// peer O knows) against both. O's device serves ring requests itself, in
/// its own process: it must check them against what O registered, not
/// against the table anyone can write, or the scribbler makes O write any
/// memory of its own (even with cross-memory attach refused to everyone).
#[test]
fn a_forged_registration_entry_does_not_make_the_owner_write_outside_its_registrations() {
    let done = watchdog("forged registration");
    let mut net = Net::new("table", 3);
    let (o, p, q) = (0, 1, 2);
    let region = Guarded::reg(&mut net.eps[o], 6);
    let mut victim = OwnedBuf::from_slice(&pattern(4096, 8));
    let seg = net.seg(o);
    let rw = (Access::REMOTE_READ | Access::REMOTE_WRITE).bits();
    // A free entry (key 0) forged to grant the victim.
    let own = (region.key % MR_ENTRIES as u64) as usize;
    let free = (0..MR_ENTRIES).find(|&i| i != own && seg.u64(seg.mr(i) + MR_KEY).load(Ordering::Relaxed) == 0);
    let free = free.unwrap();
    let forged_key = (0x5A5A_u64 << 10) | free as u64;
    let e = seg.mr(free);
    seg.u64(e + MR_ADDR).store(victim.buf().addr(), Ordering::Relaxed);
    seg.u64(e + MR_LEN).store(4096, Ordering::Relaxed);
    seg.u32(e + MR_ACCESS).store(rw, Ordering::Relaxed);
    seg.u64(e + MR_KEY).store(forged_key, Ordering::Release);
    // O's own entry, one guard longer.
    seg.u64(seg.mr(own) + MR_LEN).store((REGION + GUARD) as u64, Ordering::Release);
    // Requests as P: (token, addr, key, len, write).
    let end = region.base + REGION as u64;
    let reqs = [
        (0x11u64, victim.buf().addr(), forged_key, 64u64, 1u8),
        (0x12, victim.buf().addr() + 1024, forged_key, 8, 0),
        (0x13, end, region.key, 64, 1),
        (0x14, end - 32, region.key, 64, 1),
    ];
    for (token, addr, key, len, write) in reqs {
        let data = if write == 1 { len as usize } else { 0 };
        let need = (SLOT_HDR + 40 + data).next_multiple_of(64);
        let (pos, ring) = seg.claim(need, net.ids(p)).expect("room in O's ring");
        let e = seg.at(pos, ring);
        let mut b = Vec::new();
        for w in [token, addr, key, len] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&[write, 0, 0, 0, 0, 0, 0, 0]);
        b.extend(std::iter::repeat_n(0xEE, data));
        seg.write(e + SLOT_HDR, &b);
        seg.header(e, net.ids(p), 0, need as u32 | RDMA_REQ, seg.sealed(pos));
    }
    net.idle(20);
    assert!(victim.bytes() == pattern(4096, 8), "O wrote memory it never registered");
    assert!(region.guards_intact(6), "O wrote past its registration");
    // O goes on with its peers: messages, and P's RMA within the region.
    net.messages(o, q, 2, &[8, 5000, 100_000]);
    net.messages(p, o, 2, &[8, 5000, 100_000]);
    let data = pattern(10_000, 3);
    let (w, r, back) = net.write_read(p, o, region.at(REGION - 10_000), &data);
    assert_eq!((w, r), (Status::Success, Status::Success));
    assert!(back == data);
    assert!(region.guards_intact(6) && victim.bytes() == pattern(4096, 8));
    done.store(true, Ordering::Relaxed);
}

/// A scribble on a segment, and what it is.
type Scribble<'a> = (&'static str, Box<dyn Fn(&Seg) + 'a>);

/// Garbage in O's registration entry (key, address, length, access, the
/// seqlock word, every claim word) and in its free entries: P's RMA with
/// the real key either completes exactly inside the region or fails with
/// an error, never touching the guards; O's deregistration answers `Busy`
/// while the claim words name a live process, its next registration
/// `NoMem` while every free entry looks taken. No panic, no hang; O keeps
/// exchanging messages with Q throughout.
#[test]
fn garbage_in_registration_entries_ends_in_errors_not_stray_writes() {
    let done = watchdog("registration garbage");
    let mut net = Net::new("mrgarbage", 3);
    let (o, p, q) = (0, 1, 2);
    let rdma = net.eps[p].caps().rdma_write;
    let region = Guarded::reg(&mut net.eps[o], 7);
    let seg = net.seg(o);
    let e = seg.mr((region.key % MR_ENTRIES as u64) as usize);
    let saved: Vec<u64> = (0..8).map(|w| seg.u64(e + 8 * w).load(Ordering::Relaxed)).collect();
    let restore = |seg: &Seg| {
        for (w, v) in saved.iter().enumerate() {
            seg.u64(e + 8 * w).store(*v, Ordering::Relaxed);
        }
    };
    let data = pattern(3000, 1);
    let cases: [Scribble; 6] = [
        ("key", Box::new(|s: &Seg| s.u64(e + MR_KEY).store(region.key ^ 0x400, Ordering::Relaxed))),
        ("address", Box::new(|s: &Seg| s.u64(e + MR_ADDR).store(region.base - 4096, Ordering::Relaxed))),
        ("length", Box::new(|s: &Seg| s.u64(e + MR_LEN).store(100, Ordering::Relaxed))),
        ("access", Box::new(|s: &Seg| s.u32(e + MR_ACCESS).store(0, Ordering::Relaxed))),
        ("seqlock odd", Box::new(|s: &Seg| s.u32(e + MR_SEQ).store(7, Ordering::Relaxed))),
        ("everything", Box::new(|s: &Seg| (0..8).for_each(|w| s.u64(e + 8 * w).store(u64::MAX, Ordering::Relaxed)))),
    ];
    for (what, scribble) in &cases {
        scribble(&seg);
        // The write's end: past the region when the address is moved down.
        let (w, r, back) = net.write_read(p, o, region.at(REGION - 3000), &data);
        println!("{what}: write {w:?}, read {r:?}");
        if rdma {
            assert_eq!(w, Status::RemoteAccess, "{what}: refused");
        }
        assert!(w == Status::Success || w == Status::RemoteAccess, "{what}: {w:?}");
        if w == Status::Success && r == Status::Success {
            assert!(back == data, "{what}");
        }
        assert!(region.guards_intact(7), "{what}: a write outside the region");
        net.messages(o, q, 1, &[8, 5000]);
        restore(&seg);
    }
    // Every claim word names a live process (this one): accesses wait,
    // the deregistration gives up with `Busy` after its wait.
    let me = std::process::id();
    for c in 0..6 {
        seg.u32(e + MR_CLAIMS + 4 * c).store(me, Ordering::Relaxed);
    }
    let t = Instant::now();
    assert_eq!(net.eps[o].mr_dereg(region.key), Err(Status::Busy));
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    for c in 0..6 {
        seg.u32(e + MR_CLAIMS + 4 * c).store(0, Ordering::Relaxed);
    }
    assert_eq!(net.eps[o].mr_dereg(region.key), Ok(()), "once no claim is left");
    // Every free entry looks taken: O's next registration fails.
    let taken: Vec<usize> =
        (0..MR_ENTRIES).filter(|&i| seg.u64(seg.mr(i) + MR_KEY).load(Ordering::Relaxed) == 0).collect();
    for &i in &taken {
        seg.u64(seg.mr(i) + MR_KEY).store(0xBAD, Ordering::Relaxed);
    }
    let mut more = OwnedBuf::zeroed(4096);
    assert_eq!(net.eps[o].mr_reg(more.buf(), Access::REMOTE_WRITE), Err(Status::NoMem));
    for &i in &taken {
        seg.u64(seg.mr(i) + MR_KEY).store(0, Ordering::Relaxed);
    }
    // A seqlock word at the end of its range, even (idle) and odd (being
    // rewritten for good): O's deregistrations still end.
    for seq in [u32::MAX - 1, u32::MAX] {
        let mut b = OwnedBuf::zeroed(4096);
        let key = net.eps[o].mr_reg(b.buf(), Access::REMOTE_WRITE).unwrap();
        seg.u32(seg.mr((key % MR_ENTRIES as u64) as usize) + MR_SEQ).store(seq, Ordering::Relaxed);
        assert_eq!(net.eps[o].mr_dereg(key), Ok(()), "seq {seq:#x}");
    }
    net.messages(o, q, 2, &[8, 5000, 100_000]);
    net.messages(p, o, 1, &[8, 5000]);
    let fresh = Guarded::reg(&mut net.eps[o], 8);
    let (w, r, back) = net.write_read(p, o, fresh.at(REGION - 3000), &data);
    assert_eq!((w, r), (Status::Success, Status::Success));
    assert!(back == data);
    assert!(region.guards_intact(7) && fresh.guards_intact(8));
    done.store(true, Ordering::Relaxed);
}

/// Garbage in O's tail, the word producers claim with. Each case on a new
/// trio, as a broken tail breaks O's ring for good (the scribbler could as
/// well have unlinked the segment):
/// - far ahead: O's calls stay short (its skip of claims that died looks
///   at most one ring ahead); producers find the ring full, and their
///   sends to O wait (`Again`, kept by their engines) for good;
/// - the closed bit: sends to O fail with `PeerUnreachable`;
/// - the hold bit, with nothing held: O clears it at its next peer check,
///   and the held messages go.
///
/// In every case O keeps sending to Q, and Q and P, whose rings are
/// whole, keep talking to each other.
#[test]
fn a_scribbled_tail_never_hangs_the_owner() {
    let done = watchdog("scribbled tail");
    for (what, case) in [("far ahead", 0), ("closed", 1), ("held", 2)] {
        let mut net = Net::new(&format!("tail{case}"), 3);
        let (o, p, q) = (0, 1, 2);
        let seg = net.seg(o);
        let tail = seg.u64(TAIL);
        let flip = match case {
            0 => !TAIL_META & (tail.load(Ordering::Acquire) ^ 1 << 58),
            1 => CLOSED,
            _ => HELD,
        };
        tail.fetch_xor(flip, Ordering::AcqRel);
        let mut src = OwnedBuf::from_slice(&pattern(100, 1));
        let mut dst = OwnedBuf::zeroed(101);
        let opts = RecvOpts { src: Some(net.to[o][p]), context: 7, ..RecvOpts::default() };
        net.eps[o].recv(dst.buf(), opts).unwrap();
        net.eps[p].send(net.to[p][o], src.buf(), SendOpts { context: 8, ..SendOpts::default() }).unwrap();
        // O's calls are short, whatever the tail says.
        let mut longest = Duration::ZERO;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            let c = Instant::now();
            net.eps[o].progress(0);
            longest = longest.max(c.elapsed());
            net.step();
        }
        // Before the search was bounded, the first skip took years. A
        // loaded host (other builds, two cores) may stop a call for a while.
        assert!(longest < Duration::from_millis(500), "{what}: a call of O took {longest:?}");
        match case {
            0 => assert!(net.cqs[o].is_empty() && net.cqs[p].is_empty(), "{what}: {:?}", net.cqs),
            1 => {
                net.run("P's send", |c| c[p].iter().any(|e| e.context == 8));
                let e = net.cqs[p].iter().find(|e| e.context == 8).expect("P's send ended");
                assert_eq!(e.status, Status::PeerUnreachable, "{what}");
            }
            _ => {
                net.run("P's held message", |c| c[o].iter().any(|e| e.context == 7));
                let e = net.cqs[o].iter().find(|e| e.context == 7).expect("P's message arrived");
                assert_eq!((e.status, e.len), (Status::Success, 100), "{what}");
                assert!(dst.bytes()[..100] == pattern(100, 1)[..]);
            }
        }
        for c in &mut net.cqs {
            c.clear();
        }
        net.eps[o].cancel(7).ok();
        net.idle(5);
        for c in &mut net.cqs {
            c.clear();
        }
        // O still sends to Q, and Q to P, whose rings are whole.
        let mut s = OwnedBuf::from_slice(&pattern(5000, 2));
        let mut r = OwnedBuf::zeroed(5000);
        net.eps[q].recv(r.buf(), RecvOpts { context: 9, ..RecvOpts::default() }).unwrap();
        net.eps[o].send(net.to[o][q], s.buf(), SendOpts { context: 10, ..SendOpts::default() }).unwrap();
        net.run("O to Q", |c| c[q].iter().any(|e| e.context == 9));
        assert!(r.bytes() == pattern(5000, 2), "{what}");
        for c in &mut net.cqs {
            c.clear();
        }
        net.messages(q, p, 1, &[8, 100_000]);
        let _ = (src.buf(), dst.buf());
    }
    done.store(true, Ordering::Relaxed);
}
