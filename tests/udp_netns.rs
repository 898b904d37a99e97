//! Two hosts: two network namespaces joined by a veth pair (MTU 1500, then
//! 9000), one process in each (this test binary run again with a role),
//! exchanging messages from 0 B to 64 MiB, RMA (direct, and emulated with
//! `RDM4_UDP_RDMA=0`) and atomics over the udp device (issue 29); and a
//! host's process killed with a send and reads outstanding towards it,
//! whose operations end with `PeerUnreachable` within a second (issue 37).
//! Skipped, with a message saying why, where namespaces cannot be made.

mod common;
#[path = "common_netns/mod.rs"]
mod common_netns;

use common::pattern;
use common_netns::Netns;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdm4::atomic_ops;
use rdm4::device::udp::{UdpConfig, UdpDevice};
use rdm4::device::Access;
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::wire::RawAddr;
use rdm4::Status;

const LIMIT: Duration = Duration::from_secs(120);
const SIZES: [usize; 10] = [0, 1, 1000, 1472, 9000, 65_536, 300_000, 1 << 20, 16 << 20, 64 << 20];
const REGION: usize = 4 << 20;

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

fn publish(dir: &Path, rank: usize, addr: &RawAddr, region: u64, key: u64) {
    let hex: String = addr.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!("{rank}.tmp"));
    std::fs::write(&tmp, format!("{hex} {region} {key}")).unwrap();
    std::fs::rename(tmp, dir.join(format!("{rank}.addr"))).unwrap();
}

fn read_peer(dir: &Path, rank: usize) -> (RawAddr, u64, u64) {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.join(format!("{rank}.addr"))) {
            let mut it = s.split_whitespace();
            let hex = it.next().unwrap();
            let bytes: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            return (
                RawAddr::from_bytes(&bytes).unwrap(),
                it.next().unwrap().parse().unwrap(),
                it.next().unwrap().parse().unwrap(),
            );
        }
        assert!(t.elapsed() < LIMIT, "peer {rank} never published");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Progresses `ep` until `cq` holds `n` entries.
fn until(ep: &mut Endpoint<UdpDevice>, cq: &mut Vec<Cqe>, n: usize, what: &str) {
    let t = Instant::now();
    while cq.len() < n {
        assert!(t.elapsed() < LIMIT, "{what}: {} of {n} completions", cq.len());
        ep.progress(0);
        ep.poll_cq(cq, usize::MAX);
    }
}

/// The role of one host: rank 0 sends and does RMA, rank 1 receives and
/// owns the memory; both report through their exit status.
fn host(rank: usize, dir: &Path) {
    let dev = UdpDevice::open().expect("open the udp device");
    let mut ep = Endpoint::new(dev, Config::default());
    let mut region = OwnedBuf::from_slice(&pattern(REGION, 77));
    let key = ep.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    publish(dir, rank, &ep.addr(), region.buf().addr(), key);
    let (peer_addr, peer_region, peer_key) = read_peer(dir, 1 - rank);
    let peer = ep.av_insert(&peer_addr).unwrap();
    let mut cq = Vec::new();
    if rank == 1 {
        let mut dsts: Vec<OwnedBuf> = SIZES.iter().map(|&n| OwnedBuf::zeroed(n)).collect();
        for (k, d) in dsts.iter_mut().enumerate() {
            ep.recv(d.buf(), RecvOpts { tag: Some((k as u64, 0)), context: k as u64, ..RecvOpts::default() }).unwrap();
        }
        until(&mut ep, &mut cq, SIZES.len(), "receives");
        for (k, d) in dsts.iter().enumerate() {
            assert!(d.bytes() == pattern(SIZES[k], k as u64), "message of {} bytes", SIZES[k]);
        }
        assert!(cq.iter().all(|e| e.status == Status::Success), "{cq:?}");
        // Serve the peer's RMA and atomics until it says it is done.
        let t = Instant::now();
        while !dir.join("done").exists() {
            assert!(t.elapsed() < LIMIT, "the peer never finished");
            ep.progress(0);
        }
        return;
    }
    let mut srcs: Vec<OwnedBuf> =
        SIZES.iter().enumerate().map(|(k, &n)| OwnedBuf::from_slice(&pattern(n, k as u64))).collect();
    for (k, s) in srcs.iter_mut().enumerate() {
        ep.send(peer, s.buf(), SendOpts { tag: Some(k as u64), context: k as u64, ..SendOpts::default() }).unwrap();
    }
    until(&mut ep, &mut cq, SIZES.len(), "sends");
    assert!(cq.iter().all(|e| e.status == Status::Success), "{cq:?}");
    cq.clear();
    // RMA: write 3 MiB into the peer's region and read it back.
    let data = pattern(3 << 20, 9);
    let mut w = OwnedBuf::from_slice(&data);
    let mut back = OwnedBuf::zeroed(data.len());
    ep.write(peer, w.buf(), RemoteBuf { addr: peer_region + 1000, key: peer_key }, None, 1).unwrap();
    until(&mut ep, &mut cq, 1, "write");
    ep.read(peer, back.buf(), RemoteBuf { addr: peer_region + 1000, key: peer_key }, 2).unwrap();
    until(&mut ep, &mut cq, 2, "read");
    assert!(cq.iter().all(|e| e.status == Status::Success), "{cq:?}");
    assert!(back.bytes() == data.as_slice(), "read back what was written");
    // Atomics: 100 fetch-adds, the old values consecutive.
    let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
    let target = RemoteBuf { addr: peer_region + 8, key: peer_key };
    let mut first = None;
    for i in 0..100u64 {
        let mut one = OwnedBuf::from_slice(&1u64.to_le_bytes());
        let mut old = OwnedBuf::zeroed(8);
        ep.atomic(peer, u64t, sum, one.buf(), UserBuf::empty(), old.buf(), target, 10 + i).unwrap();
        until(&mut ep, &mut cq, 3 + i as usize, "atomic");
        let v = u64::from_le_bytes(old.bytes().try_into().unwrap());
        let f = *first.get_or_insert(v);
        assert_eq!(v, f.wrapping_add(i), "fetch-add {i}");
    }
    // A refused one: out of bounds.
    let mut small = OwnedBuf::zeroed(64);
    ep.read(peer, small.buf(), RemoteBuf { addr: peer_region + REGION as u64 - 10, key: peer_key }, 200).unwrap();
    until(&mut ep, &mut cq, 103, "refused read");
    assert_eq!(cq[102].status, Status::RemoteAccess);
    std::fs::write(dir.join("done"), b"1").unwrap();
    drop(region);
}

#[test]
fn child_host() {
    if env("RDM4_CHILD_ROLE") == "host" {
        host(env("RDM4_CHILD_RANK").parse().unwrap(), &PathBuf::from(env("RDM4_CHILD_DIR")));
    }
}

fn spawn(ns: &str, rank: usize, dir: &Path, addr: &str, rdma: &str) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_host", "--nocapture", "--test-threads=1"])
        .env("RDM4_CHILD_ROLE", "host")
        .env("RDM4_CHILD_RANK", rank.to_string())
        .env("RDM4_CHILD_DIR", dir)
        .env("RDM4_UDP_ADDR", addr)
        .env("RDM4_UDP_RDMA", rdma)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a host")
}

fn two_hosts(mtu: u32, rdma: &str) {
    let tag = format!("{mtu}{rdma}");
    let Some(hosts) = Netns::pair(&tag, "10.77.0", mtu) else {
        println!("skip: network namespaces cannot be made here (`ip netns add` failed; needs root and iproute2)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("rdm4ns{}{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kids = [spawn(&hosts.ns[0], 0, &dir, "10.77.0.1", rdma), spawn(&hosts.ns[1], 1, &dir, "10.77.0.2", rdma)];
    let t = Instant::now();
    let mut failures = Vec::new();
    for mut k in kids {
        loop {
            if k.try_wait().unwrap().is_some() {
                break;
            }
            if t.elapsed() > LIMIT + Duration::from_secs(10) {
                let _ = k.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = k.wait_with_output().unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop(hosts);
    assert!(failures.is_empty(), "MTU {mtu}, RDMA {rdma}:\n{}", failures.join("\n---\n"));
}

#[test]
fn two_hosts_at_mtu_1500_and_9000_with_direct_and_emulated_rma() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    for (mtu, rdma) in [(1500, "1"), (9000, "1"), (1500, "0")] {
        two_hosts(mtu, rdma);
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the
/// host, namespaces included.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The killed-peer scenario's two hosts: rank 0 (the survivor) posts a
/// 64 MiB send, four 8 MiB reads of the victim's memory and eight 8 B
/// sends, says so (`posted`), and progresses while the test kills rank 1
/// (`killed` holds the time); every operation not complete by then must
/// end with `PeerUnreachable` within 1 s of it. Rank 1 serves slowly (a progress call
/// every 20 ms, no receive posted), so that the operations are still
/// under way when it dies. Rank 0 tells its device which peers its
/// operations await every 100 ms, as the C API's responder does.
fn kill_host(rank: usize, dir: &Path) {
    let cfg = UdpConfig { giveup: Duration::from_secs(60), ..UdpConfig::from_env().unwrap() };
    let mut ep = Endpoint::new(UdpDevice::open_with(cfg).unwrap(), Config::default());
    const READ: usize = 8 << 20;
    let mut region = OwnedBuf::from_slice(&pattern(4 * READ, 5));
    let key = ep.mr_reg(region.buf(), Access::REMOTE_READ).unwrap();
    publish(dir, rank, &ep.addr(), region.buf().addr(), key);
    let (peer_addr, peer_region, peer_key) = read_peer(dir, 1 - rank);
    let peer = ep.av_insert(&peer_addr).unwrap();
    let mut cq = Vec::new();
    if rank == 1 {
        let mut warm = OwnedBuf::zeroed(8);
        ep.recv(warm.buf(), RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
        until(&mut ep, &mut cq, 1, "warm-up");
        let t = Instant::now();
        while t.elapsed() < LIMIT {
            ep.progress(0);
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the victim was never killed");
    }
    let mut warm = OwnedBuf::from_slice(&[1; 8]);
    ep.send(peer, warm.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    until(&mut ep, &mut cq, 1, "warm-up");
    cq.clear();
    let mut big = OwnedBuf::from_slice(&pattern(64 << 20, 1));
    ep.send(peer, big.buf(), SendOpts { context: 100, ..SendOpts::default() }).unwrap();
    let mut backs: Vec<OwnedBuf> = (0..4).map(|_| OwnedBuf::zeroed(READ)).collect();
    for (i, b) in backs.iter_mut().enumerate() {
        let remote = RemoteBuf { addr: peer_region + (i * READ) as u64, key: peer_key };
        ep.read(peer, b.buf(), remote, 200 + i as u64).unwrap();
    }
    let mut smalls: Vec<OwnedBuf> = (0..8).map(|i| OwnedBuf::from_slice(&[i as u8; 8])).collect();
    for (i, s) in smalls.iter_mut().enumerate() {
        ep.send(peer, s.buf(), SendOpts { context: 300 + i as u64, ..SendOpts::default() }).unwrap();
    }
    std::fs::write(dir.join("posted"), b"1").unwrap();
    // Progress on, noting when each operation completes, until all have.
    let (mut scan, total, t) = (Instant::now(), 1 + 4 + 8, Instant::now());
    let mut done: Vec<(Cqe, u64)> = Vec::new();
    while done.len() < total {
        assert!(t.elapsed() < LIMIT, "after {LIMIT:?}: {done:?}");
        if scan.elapsed() >= Duration::from_millis(100) {
            scan = Instant::now();
            ep.keepalive();
        }
        ep.progress(0);
        ep.poll_cq(&mut cq, usize::MAX);
        let now = monotonic_ns();
        done.extend(cq.drain(..).map(|e| (e, now)));
    }
    let killed: u64 = std::fs::read_to_string(dir.join("killed")).expect("told of the kill").parse().unwrap();
    // Those complete before the kill were served by their peer; every
    // other one ends with PeerUnreachable, within a second.
    let after: Vec<&(Cqe, u64)> = done.iter().filter(|(_, at)| *at >= killed).collect();
    assert!(after.iter().any(|(e, _)| e.context == 100), "the 64 MiB send ended before the kill: {done:?}");
    for (e, _) in &after {
        assert_eq!(e.status, Status::PeerUnreachable, "operation {} after the kill", e.context);
    }
    let last = after.iter().map(|(_, at)| at - killed).max().unwrap_or(0);
    let took = Duration::from_nanos(last);
    println!("{} operations ended with PeerUnreachable at most {took:?} after the kill", after.len());
    assert!(took < Duration::from_secs(1), "the dead peer's operations ended {took:?} after the kill");
    drop(region);
}

#[test]
fn child_kill_host() {
    if env("RDM4_CHILD_ROLE") == "kill" {
        kill_host(env("RDM4_CHILD_RANK").parse().unwrap(), &PathBuf::from(env("RDM4_CHILD_DIR")));
    }
}

#[test]
fn a_peer_killed_on_another_host_ends_the_operations_towards_it_within_a_second() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let Some(hosts) = Netns::pair("k", "10.77.0", 1500) else {
        println!("skip: network namespaces cannot be made here (`ip netns add` failed; needs root and iproute2)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("rdm4nskill{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let spawn_kill = |ns: &str, rank: usize, addr: &str| {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "child_kill_host", "--nocapture", "--test-threads=1"])
            .env("RDM4_CHILD_ROLE", "kill")
            .env("RDM4_CHILD_RANK", rank.to_string())
            .env("RDM4_CHILD_DIR", &dir)
            .env("RDM4_UDP_ADDR", addr)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a host")
    };
    let survivor = spawn_kill(&hosts.ns[0], 0, "10.77.0.1");
    let mut victim = spawn_kill(&hosts.ns[1], 1, "10.77.0.2");
    let t = Instant::now();
    while !dir.join("posted").exists() && t.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    // `ip netns exec` runs the test binary in its own process: this kills it.
    let at = monotonic_ns();
    let _ = victim.kill();
    std::fs::write(dir.join("killed.tmp"), at.to_string()).unwrap();
    std::fs::rename(dir.join("killed.tmp"), dir.join("killed")).unwrap();
    let _ = victim.wait();
    let out = survivor.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    drop(hosts);
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    println!("{}", text.lines().find(|l| l.contains("after the kill")).unwrap_or("?"));
}
