//! Memory peers on this host can map (`Endpoint::mr_alloc`, issue 31)
//! over the shm device: RMA into it is a copy in the accessor's own
//! process, against a peer that never calls the library; ordinary
//! registrations keep cross-memory attach; freeing while a peer writes in
//! a loop leaves no access after it returns; the files go with the
//! allocations.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::pattern;

use rdm4::device::shm::{ShmConfig, ShmDevice};
use rdm4::device::Access;
use rdm4::engine::{Config, Cqe, Endpoint, RemoteBuf};
use rdm4::mem::OwnedBuf;
use rdm4::Status;

type Ep = Endpoint<ShmDevice>;

fn prefix(name: &str) -> String {
    format!("rdm4al{}{name}", std::process::id())
}

/// Two endpoints over shm; only the first will progress.
fn pair(name: &str) -> (Ep, Ep, u32) {
    let cfg = ShmConfig { prefix: prefix(name), ..ShmConfig::default() };
    let mut a = Endpoint::new(ShmDevice::open_with(cfg.clone()).unwrap(), Config::default());
    let b = Endpoint::new(ShmDevice::open_with(cfg).unwrap(), Config::default());
    let to_b = a.av_insert(&b.addr()).unwrap();
    (a, b, to_b)
}

/// Progresses `a` alone until its operation `ctx` completes (10 s at most).
fn wait(a: &mut Ep, ctx: u64) -> Cqe {
    let t = Instant::now();
    let mut cq = Vec::new();
    loop {
        a.progress(0);
        a.poll_cq(&mut cq, 16);
        if let Some(i) = cq.iter().position(|e| e.context == ctx) {
            return cq.remove(i);
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no completion for {ctx}");
    }
}

/// Files of `prefix` in /dev/shm whose name holds `part`.
fn files(prefix: &str, part: &str) -> usize {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(prefix) && n.contains(part)
        })
        .count()
}

#[test]
fn allocated_memory_is_written_and_read_by_copies_with_the_owner_never_progressing() {
    let (mut a, mut b, to_b) = pair("copy");
    if !a.any_peer() {
        return; // no cross-memory attach here: RMA goes emulated
    }
    let len = 2 << 20;
    let (mem, key) = b.mr_alloc(len, Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    assert!(mem.with_slice(|s| s.iter().all(|&x| x == 0)), "zeroed");
    assert_eq!(files(&prefix("copy"), ".m"), 1, "one file for the allocation");
    let mut ctx = 0;
    for (off, n) in [(0usize, 8usize), (8, 8), (4096 - 3, 100), (65_536, 1 << 20), (len - 1, 1)] {
        ctx += 1;
        let data = pattern(n, off as u64);
        let mut src = OwnedBuf::from_slice(&data);
        let rb = RemoteBuf { addr: mem.addr() + off as u64, key };
        a.write(to_b, src.buf(), rb, None, ctx).unwrap();
        assert_eq!(wait(&mut a, ctx).status, Status::Success, "write {n} B at {off}");
        assert!(mem.with_slice(|s| s[off..off + n] == data[..]), "write {n} B at {off} lands");
        let mut back = OwnedBuf::zeroed(n);
        ctx += 1;
        a.read(to_b, back.buf(), rb, ctx).unwrap();
        assert_eq!(wait(&mut a, ctx).status, Status::Success, "read {n} B at {off}");
        assert!(back.bytes() == data, "read {n} B at {off}");
    }
    assert_eq!(a.device().mapped_copies(), ctx, "every access a copy through the mapping");
    // Out of bounds and a wrong key: refused, nothing written.
    let mut src = OwnedBuf::from_slice(&[9u8; 16]);
    a.write(to_b, src.buf(), RemoteBuf { addr: mem.addr() + len as u64 - 8, key }, None, 100).unwrap();
    assert_eq!(wait(&mut a, 100).status, Status::RemoteAccess);
    a.write(to_b, src.buf(), RemoteBuf { addr: mem.addr(), key: key ^ 1 }, None, 101).unwrap();
    assert_eq!(wait(&mut a, 101).status, Status::RemoteAccess);
    assert!(mem.with_slice(|s| s[len - 8..len - 1].iter().all(|&x| x == 0)));
    // Ordinary registered memory: cross-memory attach, as before.
    let mut plain = OwnedBuf::zeroed(4096);
    let pkey = b.mr_reg(plain.buf(), Access::REMOTE_WRITE).unwrap();
    let before = a.device().mapped_copies();
    a.write(to_b, src.buf(), RemoteBuf { addr: plain.buf().addr(), key: pkey }, None, 102).unwrap();
    assert_eq!(wait(&mut a, 102).status, Status::Success);
    assert_eq!(a.device().mapped_copies(), before);
    assert_eq!(&plain.bytes()[..16], &[9u8; 16]);
    // The key is an allocation's: mr_dereg refuses it, mr_free frees it once.
    assert_eq!(b.mr_dereg(key), Err(Status::Inval));
    assert_eq!(b.mr_free(pkey), Err(Status::Inval), "mr_free of an ordinary registration");
    assert_eq!(b.mr_free(key), Ok(()));
    assert_eq!(b.mr_free(key), Err(Status::Inval));
    assert_eq!(files(&prefix("copy"), ".m"), 0, "the file goes with the allocation");
    // Later accesses are refused.
    a.write(to_b, src.buf(), RemoteBuf { addr: mem.addr(), key }, None, 103).unwrap();
    assert_eq!(wait(&mut a, 103).status, Status::RemoteAccess);
    b.mr_dereg(pkey).unwrap();
}

#[test]
fn freeing_while_a_peer_writes_in_a_loop_leaves_no_access_after_it_returns() {
    let (mut a, mut b, to_b) = pair("free");
    if !a.any_peer() {
        return;
    }
    let (mem, key) = b.mr_alloc(1 << 16, Access::REMOTE_WRITE).unwrap();
    let freed = AtomicBool::new(false);
    let (ok_before, refused_after) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut src = OwnedBuf::from_slice(&[7u8; 1 << 16]);
            let (mut ok, mut refused_after, mut ctx) = (0u32, 0u32, 0u64);
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                // Whether the free had returned before this write was posted.
                let after = freed.load(Ordering::SeqCst);
                ctx += 1;
                a.write(to_b, src.buf(), RemoteBuf { addr: mem.addr(), key }, None, ctx).unwrap();
                match wait(&mut a, ctx).status {
                    Status::Success => {
                        assert!(!after, "a write posted after the free returned succeeded");
                        ok += 1;
                    }
                    Status::RemoteAccess => {
                        refused_after += u32::from(after);
                        if after && refused_after >= 100 {
                            break;
                        }
                    }
                    s => panic!("write: {s:?}"),
                }
            }
            (ok, refused_after)
        });
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        loop {
            match b.mr_free(key) {
                Ok(()) => break,
                Err(Status::Busy) => assert!(t.elapsed() < Duration::from_secs(10)),
                Err(e) => panic!("free: {e:?}"),
            }
        }
        freed.store(true, Ordering::SeqCst);
        writer.join().unwrap()
    });
    assert!(ok_before > 0, "the peer wrote before the free");
    assert!(refused_after >= 100, "and was refused after it ({refused_after})");
    assert_eq!(files(&prefix("free"), ".m"), 0);
}

#[test]
fn allocations_left_at_close_go_with_the_endpoint() {
    let (a, mut b, _) = pair("close");
    for _ in 0..3 {
        b.mr_alloc(4096, Access::REMOTE_READ).unwrap();
    }
    assert_eq!(files(&prefix("close"), ".m"), 3);
    drop(b);
    drop(a);
    assert_eq!(files(&prefix("close"), ".m"), 0);
}

#[test]
fn atomics_on_allocated_memory_are_cpu_atomics_under_contention_from_every_side() {
    use rdm4::engine::Proto;
    const UINT64: u32 = 7; // libfabric 1.x FI_UINT64
    const SUM: u32 = 2;
    const CSWAP: u32 = 12;
    let cfg = ShmConfig { prefix: prefix("atom"), ..ShmConfig::default() };
    let open = || Endpoint::new(ShmDevice::open_with(cfg.clone()).unwrap(), Config::default());
    let (mut a, mut c, mut b) = (open(), open(), open());
    if !a.any_peer() {
        return;
    }
    let (mem, key) = b.mr_alloc(64, Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let rb = RemoteBuf { addr: mem.addr(), key };
    const N: u64 = 5_000;
    // A and C fetch-add from their threads; the owner adds by its own CPU
    // atomics on the same word; nobody calls the owner's endpoint.
    let to_b = [a.av_insert(&b.addr()).unwrap(), c.av_insert(&b.addr()).unwrap()];
    let word = {
        let p = mem.addr() as usize as *const std::sync::atomic::AtomicU64;
        // SAFETY: the allocation is 64 bytes, 8-aligned, alive until mr_free below.
        unsafe { &*p }
    };
    let olds: Vec<Vec<u64>> = std::thread::scope(|s| {
        let peers: Vec<_> = [(&mut a, to_b[0]), (&mut c, to_b[1])]
            .into_iter()
            .map(|(ep, to)| {
                s.spawn(move || {
                    let mut olds = Vec::new();
                    let mut one = OwnedBuf::from_slice(&1u64.to_ne_bytes());
                    let mut old = OwnedBuf::zeroed(8);
                    for i in 0..N {
                        let none = rdm4::mem::UserBuf::empty();
                        ep.atomic(to, UINT64, SUM, one.buf(), none, old.buf(), rb, i).unwrap();
                        assert_eq!(wait(ep, i).status, Status::Success);
                        olds.push(u64::from_ne_bytes(old.bytes().try_into().unwrap()));
                    }
                    olds
                })
            })
            .collect();
        let mine: Vec<u64> = (0..N).map(|_| word.fetch_add(1, Ordering::SeqCst)).collect();
        let mut all: Vec<Vec<u64>> = peers.into_iter().map(|h| h.join().unwrap()).collect();
        all.push(mine);
        all
    });
    assert_eq!(word.load(Ordering::SeqCst), 3 * N, "every add counted once");
    let mut every: Vec<u64> = olds.concat();
    every.sort_unstable();
    assert_eq!(every, (0..3 * N).collect::<Vec<_>>(), "each add saw a distinct old value");
    assert_eq!(a.traffic().ops(Proto::AtomicDirect), N);
    assert_eq!(a.traffic().ops(Proto::Atomic), 0, "none emulated");
    // Compare-swap: succeeds once, then fails with the old value returned.
    let none = rdm4::mem::UserBuf::empty();
    let (mut cmp, mut new, mut old) =
        (OwnedBuf::from_slice(&(3 * N).to_ne_bytes()), OwnedBuf::from_slice(&7u64.to_ne_bytes()), OwnedBuf::zeroed(8));
    for ctx in [900, 901] {
        a.atomic(to_b[0], UINT64, CSWAP, new.buf(), cmp.buf(), old.buf(), rb, ctx).unwrap();
        assert_eq!(wait(&mut a, ctx).status, Status::Success);
    }
    assert_eq!(word.load(Ordering::SeqCst), 7);
    assert_eq!(u64::from_ne_bytes(old.bytes().try_into().unwrap()), 7, "the second saw 7 and did not swap");
    // Out of bounds: refused at once.
    let past = RemoteBuf { addr: mem.addr() + 64, key };
    a.atomic(to_b[0], UINT64, SUM, new.buf(), none, old.buf(), past, 902).unwrap();
    assert_eq!(wait(&mut a, 902).status, Status::RemoteAccess);
    // Ordinary registered memory: emulated, served by the owner's progress.
    let mut plain = OwnedBuf::zeroed(8);
    let pkey = b.mr_reg(plain.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    a.atomic(to_b[0], UINT64, SUM, new.buf(), none, old.buf(), RemoteBuf { addr: plain.buf().addr(), key: pkey }, 903)
        .unwrap();
    let t = Instant::now();
    let mut cq = Vec::new();
    while !cq.iter().any(|e: &Cqe| e.context == 903) {
        assert!(t.elapsed() < Duration::from_secs(10));
        a.progress(0);
        b.progress(0);
        a.poll_cq(&mut cq, 16);
    }
    assert_eq!(a.traffic().ops(Proto::Atomic), 1);
    assert_eq!(plain.bytes(), &7u64.to_ne_bytes());
    let _ = (cmp.buf(), new.buf());
    b.mr_dereg(pkey).unwrap();
    b.mr_free(key).unwrap();
}

/// A memfd of three pages mapped shared, registered from its second page
/// on at an offset inside it (`mr_reg_fd`).
struct Shared {
    fd: i32,
    map: *mut u8,
}

impl Shared {
    const LEN: usize = 3 * 4096;

    fn new() -> Shared {
        // SAFETY: a fresh memfd, sized, mapped shared; all checked.
        unsafe {
            let fd = libc::memfd_create(c"rdm4-test".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0 && libc::ftruncate(fd, Self::LEN as libc::off_t) == 0);
            let p = libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            Shared { fd, map: p.cast() }
        }
    }

    /// `len` bytes at file offset `off`, as the application sees them.
    fn buf(&self, off: usize, len: usize) -> rdm4::mem::UserBuf {
        assert!(off + len <= Self::LEN);
        // SAFETY: inside the mapping, which lives as long as `self`.
        unsafe { rdm4::mem::UserBuf::from_raw(self.map.add(off), len) }.unwrap()
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        // SAFETY: as in `buf`.
        unsafe { std::slice::from_raw_parts(self.map.add(off), len).to_vec() }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmapping and closing what `new` made.
        unsafe {
            libc::munmap(self.map.cast(), Self::LEN);
            libc::close(self.fd);
        }
    }
}

/// Memory the application shares by a memfd (`mr_reg_fd`): the peer maps
/// the file and copies (no system call, the owner never progressing);
/// bounds and keys are refused; after the deregistration the memory is the
/// application's again and no access reaches it.
#[test]
fn memory_the_application_shares_by_a_memfd_is_mapped_by_peers() {
    let (mut a, mut b, to_b) = pair("memfd");
    if !a.any_peer() {
        return;
    }
    let shm = Shared::new();
    let (off, len) = (4096 + 100, 4096);
    let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
    // A buffer and an offset at different places of a page; a file too short.
    assert_eq!(b.mr_reg_fd(shm.buf(off, len), shm.fd, 4096, rw), Err(Status::Inval));
    assert_eq!(b.mr_reg_fd(shm.buf(off, len), shm.fd, 4 * 4096 + 100, rw), Err(Status::Inval));
    assert_eq!(b.mr_reg_fd(shm.buf(off, len), -1, off as u64, rw), Err(Status::Inval));
    let key = b.mr_reg_fd(shm.buf(off, len), shm.fd, off as u64, rw).unwrap();
    let base = shm.buf(off, len).addr();
    let data = pattern(1000, 11);
    let mut src = OwnedBuf::from_slice(&data);
    let copies = a.device().mapped_copies();
    a.write(to_b, src.buf(), RemoteBuf { addr: base + 3000, key }, None, 1).unwrap();
    assert_eq!(wait(&mut a, 1).status, Status::Success);
    assert_eq!(shm.bytes(off + 3000, 1000), data, "the write lands in the application's memory");
    let mut back = OwnedBuf::zeroed(1000);
    a.read(to_b, back.buf(), RemoteBuf { addr: base + 3000, key }, 2).unwrap();
    assert_eq!(wait(&mut a, 2).status, Status::Success);
    assert!(back.bytes() == data);
    // An atomic by this CPU (the owner never progresses).
    let (u64t, sum) = (rdm4::atomic_ops::datatype::UINT64, rdm4::atomic_ops::op::SUM);
    let mut one = OwnedBuf::from_slice(&3u64.to_le_bytes());
    let mut old = OwnedBuf::zeroed(8);
    let at = RemoteBuf { addr: base + 8, key };
    let r = a.atomic_in_call(to_b, u64t, sum, (one.buf(), rdm4::mem::UserBuf::empty(), old.buf()), at);
    assert_eq!(r, Ok(()));
    assert_eq!(shm.bytes(off + 8, 8), 3u64.to_le_bytes());
    assert_eq!(a.device().mapped_copies(), copies + 3, "copies and the atomic through the mapping");
    // Past the end: refused, nothing written (the byte after it is the file's).
    let before = shm.bytes(off + len, 8);
    a.write(to_b, src.buf(), RemoteBuf { addr: base + len as u64 - 8, key }, None, 3).unwrap();
    assert_eq!(wait(&mut a, 3).status, Status::RemoteAccess);
    assert_eq!(shm.bytes(off + len, 8), before);
    // Deregistered: the memory is the application's; accesses are refused.
    b.mr_dereg(key).unwrap();
    let snapshot = shm.bytes(0, Shared::LEN);
    a.write(to_b, src.buf(), RemoteBuf { addr: base, key }, None, 4).unwrap();
    assert_eq!(wait(&mut a, 4).status, Status::RemoteAccess);
    assert_eq!(a.rma_in_call(to_b, src.buf(), RemoteBuf { addr: base, key }, true), Err(Status::RemoteAccess));
    assert_eq!(shm.bytes(0, Shared::LEN), snapshot);
}

/// Deregistering shared memory while a peer writes into it in a loop: no
/// write posted after the deregistration returned succeeds, and the memory
/// is not written after it (claims, as for cross-memory attach).
#[test]
fn deregistering_shared_memory_under_writes_leaves_it_untouched_after() {
    let (mut a, mut b, to_b) = pair("memfdload");
    if !a.any_peer() {
        return;
    }
    let shm = Shared::new();
    let key = b.mr_reg_fd(shm.buf(0, Shared::LEN), shm.fd, 0, Access::REMOTE_WRITE).unwrap();
    let base = shm.buf(0, Shared::LEN).addr();
    let done = AtomicBool::new(false);
    let (ok, refused, snapshot) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut src = OwnedBuf::from_slice(&[9u8; Shared::LEN]);
            let (mut ok, mut refused, mut ctx) = (0u32, 0u32, 0u64);
            let t = Instant::now();
            while !done.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
                ctx += 1;
                a.write(to_b, src.buf(), RemoteBuf { addr: base, key }, None, ctx).unwrap();
                match wait(&mut a, ctx).status {
                    Status::Success => ok += 1,
                    Status::RemoteAccess => refused += 1,
                    s => panic!("write: {s:?}"),
                }
            }
            (ok, refused)
        });
        std::thread::sleep(Duration::from_millis(30));
        let t = Instant::now();
        loop {
            match b.mr_dereg(key) {
                Ok(()) => break,
                Err(Status::Busy) => assert!(t.elapsed() < Duration::from_secs(10)),
                Err(e) => panic!("dereg: {e:?}"),
            }
        }
        // The application writes its memory again; no peer may change it now.
        // SAFETY: our own mapping.
        unsafe { std::ptr::write_bytes(shm.map, 1, Shared::LEN) };
        let snapshot = shm.bytes(0, Shared::LEN);
        std::thread::sleep(Duration::from_millis(30));
        done.store(true, Ordering::SeqCst);
        let (ok, refused) = writer.join().unwrap();
        (ok, refused, snapshot)
    });
    assert!(ok > 0 && refused > 0, "writes before ({ok}) and refusals after ({refused})");
    assert_eq!(shm.bytes(0, Shared::LEN), snapshot, "nothing written after the deregistration returned");
}
