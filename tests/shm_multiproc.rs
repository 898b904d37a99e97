//! Multi-process tests of the shm device: real child processes (this test
//! binary run again with a role in its environment), all to all, every
//! operation kind, data verified, with and without cross-memory attach; a
//! peer killed with SIGKILL mid-transfer; a restart at the same endpoint id;
//! nothing left in /dev/shm.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdm4::atomic_ops;
use rdm4::device::shm::{remove_stale_segments, ShmConfig, ShmDevice};
use rdm4::device::{Access, Device};
use rdm4::engine::{Addr, Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;
use rdm4::Status;

const SIZES: [usize; 6] = [0, 1, 100, 8000, 70_000, 300_000];
const SLOT: usize = 8192;
const LIMIT: Duration = Duration::from_secs(60);

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn seed(from: usize, to: usize, k: usize) -> u64 {
    (from * 1000 + to * 10 + k) as u64
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

/// What a process publishes for the others: its address and its region.
fn publish(dir: &Path, rank: usize, addr: &RawAddr, region: u64, key: u64) {
    let hex: String = addr.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!("{rank}.tmp"));
    std::fs::write(&tmp, format!("{hex} {region} {key}")).unwrap();
    std::fs::rename(tmp, dir.join(format!("{rank}.addr"))).unwrap();
}

fn read_peer(dir: &Path, rank: usize) -> Option<(RawAddr, u64, u64)> {
    let s = std::fs::read_to_string(dir.join(format!("{rank}.addr"))).ok()?;
    let mut it = s.split_whitespace();
    let hex = it.next()?;
    let bytes: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    Some((RawAddr::from_bytes(&bytes)?, it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn flag(dir: &Path, name: &str) -> bool {
    dir.join(name).exists()
}

fn set_flag(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), b"1").unwrap();
}

struct Ep {
    ep: Endpoint<ShmDevice>,
    cq: Vec<Cqe>,
}

impl Ep {
    fn progress(&mut self) {
        self.ep.progress(0);
        self.ep.poll_cq(&mut self.cq, usize::MAX);
    }

    /// Progresses until `n` completions are collected (bounded by LIMIT).
    fn until(&mut self, n: usize, what: &str) {
        let t = Instant::now();
        while self.cq.len() < n {
            self.progress();
            assert!(t.elapsed() < LIMIT, "{what}: {} of {n} completions after {LIMIT:?}", self.cq.len());
        }
    }

    /// Progresses until the file flag `name` of every rank exists.
    fn barrier(&mut self, dir: &Path, n: usize, name: &str) {
        let t = Instant::now();
        while !(0..n).all(|r| flag(dir, &format!("{r}.{name}"))) {
            self.progress();
            assert!(t.elapsed() < LIMIT, "barrier {name} timed out");
        }
    }
}

/// The body of one process of the all-to-all test.
fn all_to_all_child() {
    let rank: usize = env("RDM4_CHILD_RANK").parse().unwrap();
    let n: usize = env("RDM4_CHILD_N").parse().unwrap();
    let dir = PathBuf::from(env("RDM4_CHILD_DIR"));
    let dev = ShmDevice::open().expect("open shm endpoint");
    let want_cma = env("RDM4_SHM_CMA") != "0";
    assert_eq!(dev.caps().rdma_read, want_cma, "cross-memory attach availability");
    let longread_min = if want_cma { 65537 } else { usize::MAX };
    assert_eq!(dev.caps().longread_min, longread_min, "RDM4_SHM_LONGREAD_MIN");
    let mut e = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    // Region: one slot per writer, then one u64 counter.
    let mut region = OwnedBuf::zeroed(n * SLOT + 8);
    let key = e.ep.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    publish(&dir, rank, &e.ep.addr(), region.buf().addr(), key);
    let t = Instant::now();
    let mut peers = Vec::new();
    for r in 0..n {
        loop {
            if let Some(p) = read_peer(&dir, r) {
                peers.push(p);
                break;
            }
            assert!(t.elapsed() < LIMIT, "rank {r} never published");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let addrs: Vec<Addr> = peers.iter().map(|(a, _, _)| e.ep.av_insert(a).unwrap()).collect();
    let others: Vec<usize> = (0..n).filter(|&j| j != rank).collect();

    // Two-sided: every size to every peer, tagged by (sender, size index).
    let mut rbufs = Vec::new();
    for &j in &others {
        for (k, &len) in SIZES.iter().enumerate() {
            let mut b = OwnedBuf::zeroed(len);
            let tag = (j << 8 | k) as u64;
            let ctx = (1 << 40) | (j << 8 | k) as u64;
            e.ep.recv(b.buf(), RecvOpts { tag: Some((tag, 0)), src: Some(addrs[j]), context: ctx }).unwrap();
            rbufs.push((j, k, b));
        }
    }
    let mut sbufs = Vec::new();
    for &j in &others {
        for (k, &len) in SIZES.iter().enumerate() {
            let mut b = OwnedBuf::from_slice(&pattern(len, seed(rank, j, k)));
            let tag = (rank << 8 | k) as u64;
            e.ep.send(addrs[j], b.buf(), SendOpts { tag: Some(tag), cq_data: Some(tag), context: 2 }).unwrap();
            sbufs.push(b);
        }
    }
    // One-sided: write my slot at each peer, fetch-add its counter.
    let mut wbufs = Vec::new();
    let mut results = Vec::new();
    for &j in &others {
        let (_, base, rkey) = peers[j];
        let mut w = OwnedBuf::from_slice(&pattern(SLOT, seed(rank, j, 9)));
        e.ep.write(addrs[j], w.buf(), RemoteBuf { addr: base + (rank * SLOT) as u64, key: rkey }, None, 3).unwrap();
        wbufs.push(w);
        let mut operand = OwnedBuf::from_slice(&(rank as u64 + 1).to_le_bytes());
        let mut result = OwnedBuf::zeroed(8);
        e.ep.atomic(
            addrs[j],
            atomic_ops::datatype::UINT64,
            atomic_ops::op::SUM,
            operand.buf(),
            rdm4::mem::UserBuf::empty(),
            result.buf(),
            RemoteBuf { addr: base + (n * SLOT) as u64, key: rkey },
            4,
        )
        .unwrap();
        results.push((operand, result));
    }
    let total = others.len() * (2 * SIZES.len() + 2);
    e.until(total, "messages, writes and atomics");
    for c in &e.cq {
        assert_eq!(c.status, Status::Success, "rank {rank}: {c:?}");
    }
    for (j, k, b) in &rbufs {
        assert!(b.bytes() == pattern(SIZES[*k], seed(*j, rank, *k)), "rank {rank}: message {k} from {j}");
    }
    let got: Vec<_> = e.cq.iter().filter(|c| c.context >> 40 == 1).map(|c| (c.tag, c.data, c.len)).collect();
    assert_eq!(got.len(), others.len() * SIZES.len());
    assert!(got.iter().all(|(tag, data, len)| tag == data && *len == SIZES[(*tag & 0xff) as usize] as u64));
    // Read back what I wrote, after the write completed.
    e.cq.clear();
    let mut reads = Vec::new();
    for &j in &others {
        let (_, base, rkey) = peers[j];
        let mut r = OwnedBuf::zeroed(SLOT);
        e.ep.read(addrs[j], r.buf(), RemoteBuf { addr: base + (rank * SLOT) as u64, key: rkey }, 5).unwrap();
        reads.push((j, r));
    }
    e.until(others.len(), "reads");
    assert!(e.cq.iter().all(|c| c.status == Status::Success));
    for (j, r) in &reads {
        assert!(r.bytes() == pattern(SLOT, seed(rank, *j, 9)), "rank {rank}: read back from {j}");
    }
    // Everyone done with everyone's memory: check mine.
    set_flag(&dir, &format!("{rank}.done"));
    e.barrier(&dir, n, "done");
    let bytes = region.bytes();
    for &j in &others {
        assert!(bytes[j * SLOT..(j + 1) * SLOT] == pattern(SLOT, seed(j, rank, 9)), "rank {rank}: slot of {j}");
    }
    let counter = u64::from_le_bytes(bytes[n * SLOT..n * SLOT + 8].try_into().unwrap());
    let expect: u64 = others.iter().map(|&j| j as u64 + 1).sum();
    assert_eq!(counter, expect, "rank {rank}: fetch-add total");
    set_flag(&dir, &format!("{rank}.verified"));
    e.barrier(&dir, n, "verified");
    assert_eq!(e.ep.stats().malformed + e.ep.stats().protocol_errors, 0);
}

/// A sender that streams long messages to rank 1 forever (until killed or told to stop).
fn streaming_child() {
    let dir = PathBuf::from(env("RDM4_CHILD_DIR"));
    let rank: usize = env("RDM4_CHILD_RANK").parse().unwrap();
    let dev = ShmDevice::open().expect("open");
    let mut e = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    let mut region = OwnedBuf::from_slice(&pattern(4096, 7));
    let key = e.ep.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    publish(&dir, rank, &e.ep.addr(), region.buf().addr(), key);
    // The receiver side: posts receives slowly so transfers are in flight when killed.
    let mut bufs: Vec<OwnedBuf> = (0..64).map(|_| OwnedBuf::zeroed(1 << 20)).collect();
    for b in bufs.iter_mut() {
        e.ep.recv(b.buf(), RecvOpts::default()).unwrap();
    }
    set_flag(&dir, &format!("{rank}.ready"));
    let t = Instant::now();
    while t.elapsed() < LIMIT && !flag(&dir, "stop") {
        e.progress();
        std::thread::sleep(Duration::from_micros(200)); // slow: keep the sender's data in flight
    }
}

fn spawn(test: &str, rank: usize, n: usize, dir: &Path, prefix: &str, extra: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("RDM4_CHILD_ROLE", test)
        .env("RDM4_CHILD_RANK", rank.to_string())
        .env("RDM4_CHILD_N", n.to_string())
        .env("RDM4_CHILD_DIR", dir)
        .env("RDM4_SHM_PREFIX", prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

fn wait_all(children: Vec<Child>) {
    let t = Instant::now();
    for mut c in children {
        loop {
            if c.try_wait().unwrap().is_some() {
                break;
            }
            if t.elapsed() > LIMIT + Duration::from_secs(30) {
                let _ = c.kill();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child failed: {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn scratch(name: &str) -> (PathBuf, String) {
    let prefix = format!("rdm4t{}{name}", std::process::id());
    let dir = std::env::temp_dir().join(&prefix);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    (dir, prefix)
}

/// Files in /dev/shm of `prefix`.
fn leftovers(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("{prefix}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks that nothing of `prefix` is left in /dev/shm, then removes the scratch folder.
fn clean_up(prefix: &str, dir: &Path) {
    assert_eq!(leftovers(prefix), Vec::<String>::new(), "segments left in /dev/shm");
    let _ = std::fs::remove_dir_all(dir);
}

fn is_child(test: &str) -> bool {
    env("RDM4_CHILD_ROLE") == test
}

/// With `cma`, messages above the medium range move by long-read (one
/// cross-memory-attach copy); without it, by long-CTS through the ring.
fn all_to_all(name: &str, n: usize, cma: bool) {
    let (dir, prefix) = scratch(name);
    let extra = [
        ("RDM4_SHM_CMA", if cma { "1" } else { "0" }.to_string()),
        ("RDM4_SHM_LONGREAD_MIN", if cma { "65537" } else { "" }.to_string()),
    ];
    let children: Vec<_> = (0..n).map(|r| spawn("child_all_to_all", r, n, &dir, &prefix, &extra)).collect();
    wait_all(children);
    assert_eq!(leftovers(&prefix), Vec::<String>::new(), "segments left in /dev/shm");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn child_all_to_all() {
    if is_child("child_all_to_all") {
        all_to_all_child();
    }
}

#[test]
fn child_streaming() {
    if is_child("child_streaming") {
        streaming_child();
    }
}

#[test]
fn eight_processes_all_to_all_with_cross_memory_attach_and_long_read() {
    if env("RDM4_CHILD_ROLE").is_empty() {
        all_to_all("cma", 8, true);
    }
}

#[test]
fn eight_processes_all_to_all_with_emulated_rma() {
    if env("RDM4_CHILD_ROLE").is_empty() {
        all_to_all("emu", 8, false);
    }
}

#[test]
fn a_peer_killed_mid_transfer_fails_operations_and_a_restart_at_its_id_works() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (dir, prefix) = scratch("kill");
    let cfg = ShmConfig { prefix: prefix.clone(), peer_check: Duration::from_millis(20), ..ShmConfig::default() };
    let mut me =
        Ep { ep: Endpoint::new(ShmDevice::open_with(cfg.clone()).unwrap(), Config::default()), cq: Vec::new() };
    let victim_id = 77u32;
    // A small ring (256 KiB) for the victim: most of the 8 MiB sent cannot
    // have left the sender when the victim dies.
    let extra = [("RDM4_SHM_EPID", victim_id.to_string()), ("RDM4_SHM_SLOTS", "4".to_string())];
    let mut child = spawn("child_streaming", 1, 2, &dir, &prefix, &extra);
    let t = Instant::now();
    while !flag(&dir, "1.ready") {
        assert!(t.elapsed() < LIMIT, "victim never got ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (old_addr, _, _) = read_peer(&dir, 1).unwrap();
    assert_eq!(u32::from(old_addr.qpn()), victim_id);
    let to = me.ep.av_insert(&old_addr).unwrap();
    let mut bufs: Vec<OwnedBuf> = (0..8).map(|i| OwnedBuf::from_slice(&pattern(1 << 20, i))).collect();
    for b in bufs.iter_mut() {
        me.ep.send(to, b.buf(), SendOpts::default()).unwrap();
    }
    // Some progress, then SIGKILL while transfers are under way.
    for _ in 0..200 {
        me.progress();
    }
    child.kill().unwrap();
    let _ = child.wait();
    let killed_at = Instant::now();
    me.until(8, "sends to the killed peer");
    let took = killed_at.elapsed();
    assert!(me.cq.iter().any(|c| c.status == Status::PeerUnreachable), "{:?}", me.cq);
    assert!(me.cq.iter().all(|c| matches!(c.status, Status::Success | Status::PeerUnreachable)));
    assert!(took < Duration::from_secs(5), "errors took {took:?}");
    // Its segment is stale now; a restart at the same id removes it and works.
    std::fs::remove_file(dir.join("1.addr")).unwrap();
    std::fs::remove_file(dir.join("1.ready")).unwrap();
    let again = spawn("child_streaming", 1, 2, &dir, &prefix, &extra);
    let t = Instant::now();
    while !flag(&dir, "1.ready") {
        assert!(t.elapsed() < LIMIT, "restarted victim never got ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (new_addr, _, _) = read_peer(&dir, 1).unwrap();
    assert_eq!(new_addr.qpn(), old_addr.qpn());
    assert_ne!(new_addr.connid(), old_addr.connid());
    // The old handle stays dead; the new address is a new peer.
    assert_eq!(me.ep.send(to, bufs[0].buf(), SendOpts::default()), Err(Status::PeerUnreachable));
    let to2 = me.ep.av_insert(&new_addr).unwrap();
    assert_ne!(to, to2);
    me.cq.clear();
    let mut small = OwnedBuf::from_slice(b"hello again");
    me.ep.send(to2, small.buf(), SendOpts::default()).unwrap();
    me.until(1, "send to the restarted peer");
    assert_eq!(me.cq[0].status, Status::Success);
    set_flag(&dir, "stop");
    let out = again.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(me);
    clean_up(&prefix, &dir);
}

#[test]
fn once_a_read_finds_the_peer_dead_sends_to_it_fail_at_once() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (dir, prefix) = scratch("esrch");
    // No peer check within the test: the failed read alone must tell.
    let cfg = ShmConfig { prefix: prefix.clone(), peer_check: Duration::from_secs(60), ..ShmConfig::default() };
    let dev = ShmDevice::open_with(cfg).unwrap();
    if !dev.caps().rdma_read {
        println!("skip: cross-memory attach is not available here");
        return clean_up(&prefix, &dir);
    }
    let mut me = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    let mut child = spawn("child_streaming", 1, 2, &dir, &prefix, &[]);
    let t = Instant::now();
    while !flag(&dir, "1.ready") {
        assert!(t.elapsed() < LIMIT, "peer never got ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (addr, region, key) = read_peer(&dir, 1).unwrap();
    let to = me.ep.av_insert(&addr).unwrap();
    let mut buf = OwnedBuf::zeroed(4096);
    me.ep.read(to, buf.buf(), RemoteBuf { addr: region, key }, 1).unwrap();
    me.until(1, "a read from the live peer");
    assert_eq!(me.cq[0].status, Status::Success);
    assert!(buf.bytes() == pattern(4096, 7));
    child.kill().unwrap();
    let _ = child.wait();
    me.cq.clear();
    me.ep.read(to, buf.buf(), RemoteBuf { addr: region, key }, 2).unwrap();
    me.until(1, "a read from the dead peer");
    assert_eq!(me.cq[0].status, Status::PeerUnreachable);
    // The next send fails at once: no success into a dead ring.
    let mut small = OwnedBuf::from_slice(b"anyone?");
    assert_eq!(me.ep.send(to, small.buf(), SendOpts::default()), Err(Status::PeerUnreachable));
    drop(me);
    assert_eq!(remove_stale_segments(&prefix), 1, "the killed peer's segment");
    clean_up(&prefix, &dir);
}

#[test]
fn a_segment_left_by_a_killed_process_is_removed_by_the_next_open() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (dir, prefix) = scratch("stale");
    let mut child = spawn("child_streaming", 0, 1, &dir, &prefix, &[("RDM4_SHM_EPID", "5".into())]);
    let t = Instant::now();
    while !flag(&dir, "0.ready") {
        assert!(t.elapsed() < LIMIT);
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let _ = child.wait();
    assert!(!leftovers(&prefix).is_empty(), "SIGKILL leaves the segment behind");
    // Opening at that id finds the stale segment and takes its place.
    let cfg = ShmConfig { prefix: prefix.clone(), epid: Some(5), ..ShmConfig::default() };
    let dev = ShmDevice::open_with(cfg).expect("reopen at the stale id");
    assert_eq!(dev.epid(), 5);
    drop(dev);
    assert_eq!(leftovers(&prefix), Vec::<String>::new());
    // And the sweep removes stale ones without opening.
    let mut child = spawn("child_streaming", 0, 1, &dir, &prefix, &[("RDM4_SHM_EPID", "6".into())]);
    let _ = std::fs::remove_file(dir.join("0.ready"));
    let t = Instant::now();
    while !flag(&dir, "0.ready") {
        assert!(t.elapsed() < LIMIT);
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(remove_stale_segments(&prefix), 1);
    clean_up(&prefix, &dir);
}

#[test]
fn an_open_endpoint_id_is_not_taken_twice_and_wait_wakes_on_a_packet() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (_dir, prefix) = scratch("busy");
    let cfg = ShmConfig { prefix: prefix.clone(), epid: Some(9), ..ShmConfig::default() };
    // Ring sizes are powers of two.
    for slots in [0, 1, 3, 300] {
        let odd = ShmConfig { slots, epid: Some(10), ..cfg.clone() };
        assert!(matches!(ShmDevice::open_with(odd), Err(Status::Inval)), "{slots} slots");
    }
    let a = ShmDevice::open_with(cfg.clone()).unwrap();
    assert!(matches!(ShmDevice::open_with(cfg), Err(Status::Busy)));
    let mut b = ShmDevice::open_with(ShmConfig { prefix: prefix.clone(), ..ShmConfig::default() }).unwrap();
    assert_ne!(b.epid(), 9);
    // Nothing waiting: wait times out.
    let t = Instant::now();
    assert!(!b.wait(50));
    assert!(t.elapsed() >= Duration::from_millis(40));
    // A packet wakes it at once.
    let mut a = a;
    let ah = a.insert(&b.local_addr()).unwrap();
    let handle = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        a.send(ah, b"wake up", 1).unwrap();
        a
    });
    let t = Instant::now();
    assert!(b.wait(5000));
    assert!(t.elapsed() < Duration::from_secs(2));
    let mut got = Vec::new();
    b.recv(8, |_, p: &[u8], _| got.extend_from_slice(p));
    assert_eq!(got, b"wake up");
    drop(handle.join().unwrap());
    drop(b);
    clean_up(&prefix, &_dir);
}

#[test]
fn packets_of_an_earlier_process_at_the_same_id_are_never_attributed_to_its_successor() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (dir, prefix) = scratch("reuse");
    let cfg = |epid| ShmConfig { prefix: prefix.clone(), epid: Some(epid), ..ShmConfig::default() };
    let mut a = Ep { ep: Endpoint::new(ShmDevice::open_with(cfg(1)).unwrap(), Config::default()), cq: Vec::new() };
    let mut b = Ep { ep: Endpoint::new(ShmDevice::open_with(cfg(2)).unwrap(), Config::default()), cq: Vec::new() };
    let a_to_b = a.ep.av_insert(&b.ep.addr()).unwrap();
    let b_to_a = b.ep.av_insert(&a.ep.addr()).unwrap();
    let mut r = OwnedBuf::zeroed(16);
    a.ep.recv(r.buf(), RecvOpts::default()).unwrap();
    let mut hello = OwnedBuf::from_slice(b"first");
    b.ep.send(b_to_a, hello.buf(), SendOpts::default()).unwrap();
    a.until(1, "first message");
    b.progress();
    // The old B sends once more and closes before A reads it.
    let mut stale = OwnedBuf::from_slice(b"stale");
    b.ep.send(b_to_a, stale.buf(), SendOpts::default()).unwrap();
    drop(b);
    // B' opens at the same endpoint id with a new connid.
    let mut b2 = Ep { ep: Endpoint::new(ShmDevice::open_with(cfg(2)).unwrap(), Config::default()), cq: Vec::new() };
    let a_to_b2 = a.ep.av_insert(&b2.ep.addr()).unwrap();
    assert_ne!(a_to_b, a_to_b2);
    let b2_to_a = b2.ep.av_insert(&a.ep.addr()).unwrap();
    a.cq.clear();
    // A receive for B' only, then one for anyone: B' gets "fresh"; the old
    // B's last message is still delivered, but as the old B's.
    let mut r2 = OwnedBuf::zeroed(16);
    a.ep.recv(r2.buf(), RecvOpts { tag: None, src: Some(a_to_b2), context: 2 }).unwrap();
    let mut r3 = OwnedBuf::zeroed(16);
    a.ep.recv(r3.buf(), RecvOpts { tag: None, src: None, context: 3 }).unwrap();
    let mut fresh = OwnedBuf::from_slice(b"fresh");
    b2.ep.send(b2_to_a, fresh.buf(), SendOpts::default()).unwrap();
    a.until(2, "messages of both incarnations");
    assert_eq!(&r2.bytes()[..5], b"fresh");
    assert_eq!(&r3.bytes()[..5], b"stale");
    let by_ctx = |c| a.cq.iter().find(|e| e.context == c).unwrap().src;
    assert_eq!(by_ctx(2), a_to_b2);
    assert_eq!(by_ctx(3), a_to_b);
    drop((a, b2));
    clean_up(&prefix, &dir);
}

/// Messages the wake-up test sends.
const WAKE_MSGS: usize = 300;
/// Each blocking wait of the wake-up test gives up after this long; a missed
/// wake-up shows as a wait that runs to it.
const WAKE_TIMEOUT_MS: i32 = 10_000;

/// The sender of the wake-up test: one small message at a time, each after
/// a short pause of varying length, so that it lands at every point of the
/// receiver's way into and out of its sleep.
fn wake_child() {
    let dir = PathBuf::from(env("RDM4_CHILD_DIR"));
    let dev = ShmDevice::open().expect("open");
    let mut e = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    publish(&dir, 1, &e.ep.addr(), 0, 0);
    let t = Instant::now();
    let peer = loop {
        if let Some((addr, _, _)) = read_peer(&dir, 0) {
            break addr;
        }
        assert!(t.elapsed() < LIMIT, "no receiver");
        std::thread::sleep(Duration::from_millis(1));
    };
    let to = e.ep.av_insert(&peer).unwrap();
    let mut x = 12345u64;
    for k in 0..WAKE_MSGS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::thread::sleep(Duration::from_micros(x % 400));
        let mut b = OwnedBuf::from_slice(&(k as u64).to_le_bytes());
        e.ep.send(to, b.buf(), SendOpts::default()).unwrap();
        e.until(k + 1, "send");
    }
}

#[test]
fn child_wake() {
    if is_child("child_wake") {
        wake_child();
    }
}

#[test]
fn a_receiver_blocked_in_wait_is_woken_by_each_packet_of_another_process() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (dir, prefix) = scratch("wake");
    std::env::set_var("RDM4_SHM_PREFIX", &prefix);
    let dev = ShmDevice::open().expect("open");
    std::env::remove_var("RDM4_SHM_PREFIX");
    let mut e = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    publish(&dir, 0, &e.ep.addr(), 0, 0);
    let child = spawn("child_wake", 1, 2, &dir, &prefix, &[]);
    for k in 0..WAKE_MSGS {
        let mut b = OwnedBuf::zeroed(8);
        e.ep.recv(b.buf(), RecvOpts::default()).unwrap();
        let t = Instant::now();
        while e.cq.len() < k + 1 {
            // Blocks until a packet may have arrived.
            e.ep.wait(WAKE_TIMEOUT_MS);
            e.progress();
            assert!(t.elapsed() < LIMIT, "message {k} never arrived");
        }
        // Liveness, not speed: the wait ended because the packet came, far
        // before the timeout a missed wake-up would have run into.
        let took = t.elapsed();
        assert!(took < Duration::from_millis(WAKE_TIMEOUT_MS as u64 / 2), "message {k}: wake-up missed ({took:?})");
        assert_eq!(b.bytes(), &(k as u64).to_le_bytes(), "message {k}");
    }
    wait_all(vec![child]);
    drop(e);
    clean_up(&prefix, &dir);
}

/// Cross-memory attach checks key, bounds and access in the owner's table
/// before touching memory: every bad request fails with a remote-access
/// error and moves no byte (two devices of this process: the checks are the
/// same as between processes).
#[test]
fn rdma_with_a_bad_key_bounds_or_access_is_refused_and_moves_nothing() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let (dir, prefix) = scratch("keys");
    let cfg = ShmConfig { prefix: prefix.clone(), ..ShmConfig::default() };
    let mut owner = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut user = ShmDevice::open_with(cfg).unwrap();
    if !user.caps().rdma_read {
        eprintln!("cross-memory attach unavailable here; nothing to check");
        return;
    }
    let mut region = OwnedBuf::from_slice(&pattern(4096, 1));
    let mut other = OwnedBuf::from_slice(&pattern(4096, 2));
    let key = owner.reg(region.buf(), Access::REMOTE_READ).unwrap();
    let wkey = owner.reg(other.buf(), Access::REMOTE_WRITE).unwrap();
    let gone = owner.reg(other.buf(), Access::REMOTE_READ).unwrap();
    owner.dereg(gone).unwrap();
    let base = region.buf().addr();
    let ah = user.insert(&owner.local_addr()).unwrap();
    let mut local = OwnedBuf::from_slice(&[0xEE; 4096]);
    let lbuf = local.buf();
    let mut events = Vec::new();
    let mut read = |user: &mut ShmDevice, addr: u64, len: usize, key: u64| {
        let buf = lbuf.slice(0, len).unwrap();
        user.rdma_read(ah, buf, addr, key, 7).unwrap();
        events.clear();
        user.events(&mut events);
        match events.as_slice() {
            [rdm4::device::DevEvent::SendDone { status, .. }] => *status,
            other => panic!("events {other:?}"),
        }
    };
    let bad = [
        ("another key in the same entry", base, 64, key ^ (1 << 40)),
        ("the key of another entry", base, 64, key ^ 1),
        ("a deregistered key", base, 64, gone),
        ("a key without read access", other.buf().addr(), 64, wkey),
        ("before the region", base - 1, 64, key),
        ("past the region", base + 4000, 97, key),
        ("zero key", base, 64, 0),
    ];
    for (what, addr, len, k) in bad {
        assert_eq!(read(&mut user, addr, len, k), Err(Status::RemoteAccess), "{what}");
    }
    assert!(local.bytes().iter().all(|&b| b == 0xEE), "bytes moved by a refused read");
    assert_eq!(read(&mut user, base + 100, 200, key), Ok(()));
    assert_eq!(&local.bytes()[..200], &region.bytes()[100..300]);
    drop((owner, user));
    clean_up(&prefix, &dir);
}

/// Inside a private 3 MiB `/dev/shm` (see the test below): the first
/// endpoint gets a smaller ring than the default 8 MiB, later ones smaller
/// still, the one that does not fit fails with `NoMem`, and the endpoints
/// that opened carry traffic through every page of their rings.
fn small_shm_child() {
    let prefix = env("RDM4_SHM_PREFIX");
    // Memory the segment holds (its size is the whole ring's; the ring in
    // use, smaller, is all that is allocated).
    let seg_len = |d: &ShmDevice| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/dev/shm/{}", d.segment_name())).unwrap().blocks() * 512
    };
    let mut eps = Vec::new();
    let err = loop {
        match ShmDevice::open_with(ShmConfig { prefix: prefix.clone(), ..ShmConfig::default() }) {
            Ok(d) => eps.push(d),
            Err(e) => break e,
        }
        assert!(eps.len() < 16, "a 3 MiB /dev/shm held {} endpoints", eps.len());
    };
    assert_eq!(err, Status::NoMem);
    assert!(eps.len() >= 2, "{} endpoints opened", eps.len());
    let lens: Vec<u64> = eps.iter().map(seg_len).collect();
    assert!(lens.iter().sum::<u64>() <= 3 << 20, "{lens:?}");
    assert!(lens.windows(2).all(|w| w[0] >= w[1]) && lens[0] > lens[lens.len() - 1], "{lens:?}");
    // Every page of the largest and the smallest ring, several times over:
    // the rings fill, and cannot grow (no room left), so they stay as they
    // are, the memory held the same.
    let last = eps.len() - 1;
    for (rx, tx) in [(0, last), (last, 0)] {
        let ring = eps[rx].ring_in_use().0 as u64;
        let to = eps[rx].local_addr();
        let ah = eps[tx].insert(&to).unwrap();
        let pkt = |k: u64| pattern(60_000, k);
        let total = 3 * ring / 60_000 + 1;
        let (mut sent, mut got) = (0u64, 0u64);
        let t = Instant::now();
        // First the ring found full (sends refused 20 times in a row), so
        // that its owner tries to grow it at its next batch.
        let mut refused = 0;
        while refused < 20 && sent < total {
            if eps[tx].send(ah, &pkt(sent), 0).is_ok() {
                (sent, refused) = (sent + 1, 0);
            } else {
                refused += 1;
            }
        }
        assert_eq!(refused, 20, "{sent} packets of {total} filled no ring");
        while got < total {
            assert!(t.elapsed() < LIMIT, "{got} of {total} packets");
            if sent < total && eps[tx].send(ah, &pkt(sent), 0).is_ok() {
                sent += 1;
            }
            eps[rx].recv(8, |_, p: &[u8], _| {
                assert!(p == pkt(got).as_slice(), "packet {got}");
                got += 1;
            });
        }
        assert_eq!(eps[rx].ring_in_use(), (ring as usize, 0), "a ring grew without memory");
        assert_eq!(eps[rx].ring_limit(), ring as usize, "growing was tried, and refused");
    }
    assert_eq!(eps.iter().map(seg_len).collect::<Vec<_>>(), lens);
}

#[test]
fn child_small_shm() {
    if is_child("child_small_shm") {
        small_shm_child();
    }
}

#[test]
fn a_small_dev_shm_gets_smaller_rings_and_a_clean_error_never_a_sigbus() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    // A private mount namespace (as a mapped root user) with a 3 MiB tmpfs
    // on /dev/shm, like a container's; it goes away with the child.
    let probe = Command::new("unshare").args(["-rm", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: unprivileged mount namespaces are not available here (unshare -rm)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", "mount -t tmpfs -o size=3m tmpfs /dev/shm && exec \"$0\" \"$@\""])
        .arg(exe)
        .args(["--exact", "child_small_shm", "--nocapture", "--test-threads=1"])
        .env("RDM4_CHILD_ROLE", "child_small_shm")
        .env("RDM4_SHM_PREFIX", "rdm4small")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
