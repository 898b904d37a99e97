//! CPU cost of the engine over the sim device (no delay, no reordering, no
//! capture): an 8-byte tagged eager send + receive pair, and a 1 MiB long-CTS
//! transfer next to a plain 1 MiB memcpy, with the sim's default 8 KiB MTU
//! (128 CTSDATA packets, EFA-sized) and with the shm device's 64 KiB MTU (16).
//! The sim gathers CTSDATA payloads from the send buffer as a NIC does
//! (`Device::send_gather`), so the receiver's copy is the only one and the
//! difference to the memcpy is the engine's (and sim's) per-packet cost.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rdm4::device::sim::{SimConfig, SimDevice, SimNet};
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use std::hint::black_box;

fn pair(mtu: usize) -> (SimNet, Endpoint<SimDevice>, Endpoint<SimDevice>, u32) {
    let net = SimNet::new(SimConfig { capture: false, inbox_capacity: 4096, mtu, ..SimConfig::default() });
    let mut a = Endpoint::new(net.device(), Config::default());
    let mut b = Endpoint::new(net.device(), Config::default());
    let to_b = a.av_insert(&b.addr()).unwrap();
    b.av_insert(&a.addr()).unwrap();
    (net, a, b, to_b)
}

/// Runs one send/recv pair to completion.
fn exchange(
    a: &mut Endpoint<SimDevice>,
    b: &mut Endpoint<SimDevice>,
    to_b: u32,
    s: &mut OwnedBuf,
    r: &mut OwnedBuf,
    tag: Option<u64>,
    cq: &mut Vec<Cqe>,
) {
    b.recv(r.buf(), RecvOpts { tag: tag.map(|t| (t, 0)), ..Default::default() }).unwrap();
    a.send(to_b, s.buf(), SendOpts { tag, ..Default::default() }).unwrap();
    let mut got = 0;
    while got < 2 {
        b.progress(0);
        a.progress(0);
        cq.clear();
        got += b.poll_cq(cq, 4) + a.poll_cq(cq, 4);
    }
}

fn bench_eager(c: &mut Criterion) {
    let (_net, mut a, mut b, to_b) = pair(SimConfig::default().mtu);
    let mut s = OwnedBuf::from_slice(&[7u8; 8]);
    let mut r = OwnedBuf::zeroed(8);
    let mut cq = Vec::with_capacity(8);
    // Warm up the handshake so the steady state is measured.
    for _ in 0..16 {
        exchange(&mut a, &mut b, to_b, &mut s, &mut r, Some(1), &mut cq);
    }
    c.bench_function("engine/eager_tagged_8B_send_recv_pair", |bench| {
        bench.iter(|| exchange(&mut a, &mut b, to_b, &mut s, &mut r, Some(black_box(1)), &mut cq))
    });
}

fn bench_longcts(c: &mut Criterion) {
    const MIB: usize = 1 << 20;
    let mut g = c.benchmark_group("engine/1MiB");
    g.throughput(Throughput::Bytes(MIB as u64));
    let src = vec![1u8; MIB];
    let mut dst = vec![0u8; MIB];
    g.bench_function(BenchmarkId::new("memcpy", MIB), |bench| {
        bench.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        })
    });
    for (name, mtu) in [("longcts_send_recv", SimConfig::default().mtu), ("longcts_send_recv_mtu64k", 65536)] {
        let (_net, mut a, mut b, to_b) = pair(mtu);
        let mut s = OwnedBuf::from_slice(&src);
        let mut r = OwnedBuf::zeroed(MIB);
        let mut cq = Vec::with_capacity(8);
        exchange(&mut a, &mut b, to_b, &mut s, &mut r, None, &mut cq);
        assert_eq!(r.bytes(), &src[..], "the long-CTS transfer delivered other bytes");
        g.bench_function(BenchmarkId::new(name, MIB), |bench| {
            bench.iter(|| exchange(&mut a, &mut b, to_b, &mut s, &mut r, None, &mut cq))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_eager, bench_longcts);
criterion_main!(benches);
