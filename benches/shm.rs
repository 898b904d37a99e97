//! The shm device alone between two processes: packet round trip (8 bytes
//! and 4 KiB) and cross-memory-attach RDMA read of 1 MiB. The bench spawns
//! itself as the echo peer (`RDM4_BENCH_ROLE=echo`), pinned to another CPU.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use rdm4::device::shm::{ShmConfig, ShmDevice};
use rdm4::device::{Access, DevEvent, Device};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;

fn pin(cpu: usize) {
    if std::env::var_os("RDM4_NO_PIN").is_some() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t with one CPU set, applied to this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % num_cpus(), &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// CPUs online (not the affinity mask, which a pinned parent passes on).
fn num_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize
}

fn addr_file() -> PathBuf {
    std::env::temp_dir().join(format!("rdm4-bench-shm-{}", std::env::var("RDM4_BENCH_PARENT").unwrap_or_default()))
}

fn hex(a: &RawAddr) -> String {
    a.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> RawAddr {
    let b: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    RawAddr::from_bytes(&b).unwrap()
}

/// The echo peer: sends every packet back to its sender; serves RDMA by
/// doing nothing (cross-memory attach needs no help).
fn echo() {
    pin(1);
    let prefix = format!("rdm4bench{}", std::env::var("RDM4_BENCH_PARENT").unwrap());
    let mut dev = ShmDevice::open_with(ShmConfig { prefix, ..ShmConfig::default() }).unwrap();
    let mut region = OwnedBuf::from_slice(&vec![7u8; 1 << 20]);
    let key = dev.reg(region.buf(), Access::REMOTE_READ).unwrap();
    let tmp = addr_file().with_extension("tmp");
    std::fs::write(&tmp, format!("{} {} {}", hex(&dev.local_addr()), region.buf().addr(), key)).unwrap();
    std::fs::rename(&tmp, addr_file()).unwrap();
    let parent: RawAddr = loop {
        if let Ok(s) = std::fs::read_to_string(addr_file().with_extension("parent")) {
            break unhex(s.trim());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let ah = dev.insert(&parent).unwrap();
    let mut pkt = vec![0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        let mut len = 0;
        dev.recv(1, |_, p: &[u8], _| {
            pkt[..p.len()].copy_from_slice(p);
            len = p.len();
        });
        if len == 1 && pkt[0] == 0xFF {
            break; // stop
        }
        if len > 0 {
            while dev.send(ah, &pkt[..len], 0).is_err() {}
        }
    }
}

fn bench(c: &mut Criterion) {
    pin(0);
    let me = std::process::id().to_string();
    let _ = std::fs::remove_file(addr_file_for(&me));
    let child = Command::new(std::env::current_exe().unwrap())
        .env("RDM4_BENCH_ROLE", "echo")
        .env("RDM4_BENCH_PARENT", &me)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Ends the echo peer however this function ends (a panic included):
    // otherwise it would spin on its CPU until its own deadline.
    let _echo = EchoGuard(child);
    std::env::set_var("RDM4_BENCH_PARENT", &me);
    let prefix = format!("rdm4bench{me}");
    let mut dev = ShmDevice::open_with(ShmConfig { prefix, ..ShmConfig::default() }).unwrap();
    let (peer, region, key) = loop {
        if let Ok(s) = std::fs::read_to_string(addr_file()) {
            let v: Vec<&str> = s.split_whitespace().collect();
            break (unhex(v[0]), v[1].parse::<u64>().unwrap(), v[2].parse::<u64>().unwrap());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    std::fs::write(addr_file().with_extension("parent"), hex(&dev.local_addr())).unwrap();
    let ah = dev.insert(&peer).unwrap();
    let mut g = c.benchmark_group("shm_device");
    for size in [8usize, 4096] {
        let payload = vec![1u8; size];
        g.bench_function(format!("round_trip/{size}B"), |b| {
            b.iter(|| {
                while dev.send(ah, &payload, 0).is_err() {}
                while dev.recv(1, |_, _: &[u8], _| {}) == 0 {}
            })
        });
    }
    let mut dst = OwnedBuf::zeroed(1 << 20);
    let mut events = Vec::new();
    // The read is checked once, outside the timing (it runs whatever the filter).
    dev.rdma_read(ah, dst.buf(), region, key, 1).unwrap();
    dev.events(&mut events);
    assert!(matches!(events.as_slice(), [DevEvent::SendDone { status: Ok(()), .. }]));
    assert_eq!(dst.bytes()[..16], [7u8; 16]);
    g.throughput(Throughput::Bytes(1 << 20));
    g.bench_function("rdma_read/1MiB", |b| {
        b.iter(|| {
            dev.rdma_read(ah, dst.buf(), region, key, 1).unwrap();
            events.clear();
            dev.events(&mut events);
            assert!(matches!(events.as_slice(), [DevEvent::SendDone { status: Ok(()), .. }]));
        })
    });
    g.finish();
    let t = Instant::now();
    while dev.send(ah, &[0xFF], 0).is_err() && t.elapsed() < Duration::from_secs(5) {}
    for ext in ["", "parent"] {
        let _ = std::fs::remove_file(addr_file().with_extension(ext));
    }
}

/// Kills and reaps the echo peer when dropped (after the stop packet, it
/// has usually exited already).
struct EchoGuard(std::process::Child);

impl Drop for EchoGuard {
    fn drop(&mut self) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn addr_file_for(parent: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rdm4-bench-shm-{parent}"))
}

criterion_group!(benches, bench);

fn main() {
    if std::env::var("RDM4_BENCH_ROLE").as_deref() == Ok("echo") {
        echo();
        return;
    }
    benches();
    criterion::Criterion::default().configure_from_args().final_summary();
}
