//! The unexpected-bytes limit over the shm device, with and without
//! cross-memory attach: messages larger than the limit, a thousand mixed
//! messages, and the endpoint's own operations while it holds its peer
//! back (issue 27 item 1). Two endpoints of one process, progressed in turn.

mod common;

use std::time::{Duration, Instant};

use common::pattern;

use rdm4::atomic_ops;
use rdm4::device::shm::{ShmConfig, ShmDevice};
use rdm4::device::Access;
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::Status;

const LIMIT: usize = 4096;

type Ep = Endpoint<ShmDevice>;

/// Two endpoints (0 sends, 1 receives with a 4 KiB limit) and their handles.
fn pair(name: &str, cma: bool) -> (Ep, Ep, u32, u32) {
    let prefix = format!("rdm4q{}{name}{}", std::process::id(), u8::from(cma));
    let cfg = ShmConfig { prefix, cma, slots: 16, ..ShmConfig::default() };
    let mut a = Endpoint::new(ShmDevice::open_with(cfg.clone()).unwrap(), Config::default());
    let limited = Config { unexpected_limit: LIMIT, ..Config::default() };
    let mut b = Endpoint::new(ShmDevice::open_with(cfg).unwrap(), limited);
    let a_to_b = a.av_insert(&b.addr()).unwrap();
    let b_to_a = b.av_insert(&a.addr()).unwrap();
    (a, b, a_to_b, b_to_a)
}

/// Progresses both until `done` holds (at most 20 s), collecting completions.
fn run(eps: &mut [&mut Ep; 2], cqs: &mut [Vec<Cqe>; 2], mut done: impl FnMut(&[Vec<Cqe>; 2]) -> bool) {
    let t = Instant::now();
    while !done(cqs) {
        assert!(t.elapsed() < Duration::from_secs(20), "stuck: {} / {} completions", cqs[0].len(), cqs[1].len());
        for (ep, cq) in eps.iter_mut().zip(cqs.iter_mut()) {
            ep.progress(0);
            ep.poll_cq(cq, usize::MAX);
        }
    }
}

#[test]
fn over_shm_messages_larger_than_the_limit_wait_for_their_receive_and_arrive() {
    for cma in [true, false] {
        let (mut a, mut b, a_to_b, _) = pair("big", cma);
        let lens = [20_000usize, 65_537, 300_000, 20_000];
        let mut srcs: Vec<OwnedBuf> =
            lens.iter().enumerate().map(|(k, &l)| OwnedBuf::from_slice(&pattern(l, k as u64))).collect();
        for s in srcs.iter_mut() {
            a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
        }
        let mut cqs = [Vec::new(), Vec::new()];
        for _ in 0..2000 {
            a.progress(0);
            b.progress(0);
            b.poll_cq(&mut cqs[1], 8);
        }
        assert!(cqs[1].is_empty());
        let mut dsts: Vec<OwnedBuf> = lens.iter().map(|&l| OwnedBuf::zeroed(l)).collect();
        for (k, d) in dsts.iter_mut().enumerate() {
            b.recv(d.buf(), RecvOpts { context: k as u64, ..RecvOpts::default() }).unwrap();
        }
        run(&mut [&mut a, &mut b], &mut cqs, |c| c[0].len() == 4 && c[1].len() == 4);
        for (k, d) in dsts.iter().enumerate() {
            assert!(d.bytes() == pattern(lens[k], k as u64), "cma {cma}: message {k}");
        }
        assert!(cqs.iter().flatten().all(|e| e.status == Status::Success), "{cqs:?}");
    }
}

#[test]
fn over_shm_a_thousand_mixed_messages_against_a_small_limit_all_arrive() {
    for cma in [true, false] {
        let (mut a, mut b, a_to_b, _) = pair("mixed", cma);
        let n = 1000;
        let lens: Vec<usize> = (0..n)
            .map(|k: usize| match k * 7919 % 10 {
                0..=5 => 1 + k * 31 % 2000,
                6..=7 => 2000 + k * 131 % 20_000,
                _ => 20_000 + k * 1009 % 80_000,
            })
            .collect();
        let mut srcs: Vec<OwnedBuf> =
            lens.iter().enumerate().map(|(k, &l)| OwnedBuf::from_slice(&pattern(l, 7 + k as u64))).collect();
        let mut dsts: Vec<OwnedBuf> = lens.iter().map(|&l| OwnedBuf::zeroed(l)).collect();
        let (mut sent, mut posted, mut round) = (0, 0, 0);
        let mut cqs = [Vec::new(), Vec::new()];
        let t = Instant::now();
        while cqs[0].len() < n || cqs[1].len() < n {
            assert!(t.elapsed() < Duration::from_secs(30), "cma {cma}: stuck at {} / {}", cqs[0].len(), cqs[1].len());
            while sent < n && sent - cqs[0].len() < 64 {
                a.send(a_to_b, srcs[sent].buf(), SendOpts { context: sent as u64, ..SendOpts::default() }).unwrap();
                sent += 1;
            }
            round += 1;
            if round > 200 && round % 3 == 0 && posted < n {
                b.recv(dsts[posted].buf(), RecvOpts { context: posted as u64, ..RecvOpts::default() }).unwrap();
                posted += 1;
            }
            a.progress(0);
            a.poll_cq(&mut cqs[0], usize::MAX);
            b.progress(0);
            b.poll_cq(&mut cqs[1], usize::MAX);
            assert!(b.unexpected_bytes() <= LIMIT + 100_000);
        }
        for e in &cqs[1] {
            let k = e.context as usize;
            assert_eq!((e.status, e.len), (Status::Success, lens[k] as u64), "cma {cma}: receive {k}");
            assert!(dsts[k].bytes() == pattern(lens[k], 7 + k as u64), "cma {cma}: message {k}");
        }
        assert!(cqs[0].iter().all(|e| e.status == Status::Success));
        assert!(b.stats().deferred > 0, "cma {cma}: the limit was never reached");
    }
}

#[test]
fn over_shm_an_endpoint_over_its_limit_still_completes_its_own_operations() {
    for cma in [true, false] {
        let (mut a, mut b, a_to_b, b_to_a) = pair("own", cma);
        let mut flood: Vec<OwnedBuf> = (0..300).map(|k| OwnedBuf::from_slice(&pattern(1000, k))).collect();
        for f in flood.iter_mut() {
            a.send(a_to_b, f.buf(), SendOpts::default()).unwrap();
        }
        let mut cqs = [Vec::new(), Vec::new()];
        for _ in 0..500 {
            a.progress(0);
            b.progress(0);
        }
        assert!(b.stats().deferred > 0, "cma {cma}: b is over its limit");
        let mut region = OwnedBuf::from_slice(&pattern(100_000, 5));
        let key = a.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
        let base = region.buf().addr();
        let mut long_rx = OwnedBuf::zeroed(300_000);
        a.recv(long_rx.buf(), RecvOpts { context: 50, ..RecvOpts::default() }).unwrap();
        let mut long = OwnedBuf::from_slice(&pattern(300_000, 6));
        b.send(b_to_a, long.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
        let mut read = OwnedBuf::zeroed(80_000);
        b.read(b_to_a, read.buf(), RemoteBuf { addr: base, key }, 2).unwrap();
        let (mut one, mut old) = (OwnedBuf::from_slice(&3u64.to_le_bytes()), OwnedBuf::zeroed(8));
        let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
        let target = RemoteBuf { addr: base + 99_992, key };
        b.atomic(b_to_a, u64t, sum, one.buf(), UserBuf::empty(), old.buf(), target, 3).unwrap();
        let mut w = OwnedBuf::from_slice(&[0xCD; 5000]);
        b.write(b_to_a, w.buf(), RemoteBuf { addr: base + 85_000, key }, None, 4).unwrap();
        run(&mut [&mut a, &mut b], &mut cqs, |c| c[1].len() == 4 && c[0].iter().any(|e| e.context == 50));
        assert!(cqs[1].iter().all(|e| e.status == Status::Success), "cma {cma}: {:?}", cqs[1]);
        assert!(long_rx.bytes() == pattern(300_000, 6));
        assert!(read.bytes() == &pattern(100_000, 5)[..80_000]);
        assert!(region.bytes()[85_000..90_000].iter().all(|&x| x == 0xCD));
        assert!(b.unexpected_messages() > 0, "cma {cma}: b still held the flood back");
        let mut dsts: Vec<OwnedBuf> = (0..300).map(|_| OwnedBuf::zeroed(1000)).collect();
        for (k, d) in dsts.iter_mut().enumerate() {
            b.recv(d.buf(), RecvOpts { context: 100 + k as u64, ..RecvOpts::default() }).unwrap();
        }
        run(&mut [&mut a, &mut b], &mut cqs, |c| c[1].len() == 304);
        for (k, d) in dsts.iter().enumerate() {
            assert!(d.bytes() == pattern(1000, k as u64), "cma {cma}: flood message {k}");
        }
    }
}
