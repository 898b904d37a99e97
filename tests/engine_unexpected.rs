//! The unexpected-bytes limit holds senders back and never drops: messages
//! larger than the limit, floods of mixed sizes, and the endpoint's own
//! operations while it is over the limit (issue 27 item 1), over the sim
//! device with reordering, delays and back-pressure.

mod common;

use common::{pattern, Cluster, Rng};
use rdm4::atomic_ops;
use rdm4::device::sim::SimConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::Status;

const LIMIT: usize = 4096;

fn limited() -> Config {
    Config { unexpected_limit: LIMIT, ..Config::default() }
}

fn sim(seed: u64) -> SimConfig {
    SimConfig { mtu: 65536, inbox_capacity: 64, ..SimConfig::chaotic(seed) }
}

/// Steps `c` `n` times, moving virtual time on.
fn steps(c: &mut Cluster, n: usize) {
    for _ in 0..n {
        c.step();
        c.net.advance_to_next();
    }
}

#[test]
fn messages_larger_than_the_limit_arrive_before_their_receive_is_posted() {
    for (seed, len) in [(1, 20_000usize), (2, 65_537), (3, 300_000), (4, 8192)] {
        let mut c = Cluster::new(2, sim(seed), limited());
        let to1 = c.addrs[0][1];
        // Two of them: the first is taken (nothing else is buffered), the
        // second waits with the sender.
        let mut srcs: Vec<OwnedBuf> = (0..2).map(|k| OwnedBuf::from_slice(&pattern(len, seed * 10 + k))).collect();
        for s in srcs.iter_mut() {
            c.eps[0].send(to1, s.buf(), SendOpts::default()).unwrap();
        }
        steps(&mut c, 2000);
        assert!(c.cqs[1].is_empty());
        let mut dsts: Vec<OwnedBuf> = (0..2).map(|_| OwnedBuf::zeroed(len)).collect();
        for (k, d) in dsts.iter_mut().enumerate() {
            c.eps[1].recv(d.buf(), RecvOpts { context: k as u64, ..RecvOpts::default() }).unwrap();
        }
        c.run_until(1_000_000, |c| c.cqs[1].len() == 2 && c.cqs[0].len() == 2);
        for (k, d) in dsts.iter().enumerate() {
            let e = c.cqs[1].iter().find(|e| e.context == k as u64).unwrap();
            assert_eq!((e.status, e.len), (Status::Success, len as u64), "len {len} #{k}");
            assert!(d.bytes() == pattern(len, seed * 10 + k as u64), "len {len} #{k}: data");
        }
        assert!(c.cqs[0].iter().all(|e| e.status == Status::Success));
        assert_eq!(c.eps[1].unexpected_bytes(), 0);
    }
}

/// A thousand messages of mixed sizes (1 B to 100 KB) against a 4 KiB
/// limit, the receiver posting its receives late and slowly: every one
/// arrives, in order, and what the receiver buffers stays bounded.
#[test]
fn a_thousand_mixed_messages_against_a_small_limit_all_arrive_in_order() {
    for seed in [11u64, 12, 13] {
        let mut c = Cluster::new(2, sim(seed), limited());
        let to1 = c.addrs[0][1];
        let mut rng = Rng::new(seed);
        let n = 1000;
        let lens: Vec<usize> = (0..n)
            .map(|_| match rng.below(10) {
                0..=5 => 1 + rng.below(2000) as usize,
                6..=7 => 2000 + rng.below(20_000) as usize,
                _ => 20_000 + rng.below(80_000) as usize,
            })
            .collect();
        let mut srcs: Vec<OwnedBuf> = lens
            .iter()
            .enumerate()
            .map(|(k, &l)| OwnedBuf::from_slice(&pattern(l, seed * 10_000 + k as u64)))
            .collect();
        let mut dsts: Vec<OwnedBuf> = lens.iter().map(|&l| OwnedBuf::zeroed(l)).collect();
        let mut posted = 0;
        let mut sent = 0;
        let mut peak = 0;
        for round in 0..200_000 {
            // The sender keeps posting (up to 64 outstanding).
            while sent < n && sent - c.cqs[0].len() < 64 {
                let opts = SendOpts { context: sent as u64, ..SendOpts::default() };
                c.eps[0].send(to1, srcs[sent].buf(), opts).unwrap();
                sent += 1;
            }
            // The receiver starts late and posts one receive every few rounds.
            if round > 500 && round % 3 == 0 && posted < n {
                let opts = RecvOpts { context: posted as u64, ..RecvOpts::default() };
                c.eps[1].recv(dsts[posted].buf(), opts).unwrap();
                posted += 1;
            }
            c.step();
            c.net.advance_to_next();
            peak = peak.max(c.eps[1].unexpected_bytes());
            if c.cqs[1].len() == n && c.cqs[0].len() == n {
                break;
            }
        }
        assert_eq!(c.cqs[1].len(), n, "seed {seed}: {} of {n} received", c.cqs[1].len());
        assert_eq!(c.cqs[0].len(), n, "seed {seed}: {} of {n} sends completed", c.cqs[0].len());
        for e in &c.cqs[1] {
            let k = e.context as usize;
            assert_eq!((e.status, e.len), (Status::Success, lens[k] as u64), "seed {seed}: receive {k}");
        }
        for (k, d) in dsts.iter().enumerate() {
            assert!(d.bytes() == pattern(lens[k], seed * 10_000 + k as u64), "seed {seed}: message {k}");
        }
        assert!(c.cqs[0].iter().all(|e| e.status == Status::Success));
        // Within the limit, plus one message taken when nothing was held,
        // and what a medium message held ahead of its turn becomes when
        // its turn comes (at most two messages of 100 KB).
        println!("seed {seed}: peak {peak} bytes, {} packets deferred", c.eps[1].stats().deferred);
        assert!(peak <= LIMIT + 200_000, "seed {seed}: peak {peak}");
        assert!(c.eps[1].stats().deferred > 0, "seed {seed}: the limit was never reached");
        assert_eq!(c.eps[1].stats().protocol_errors, 0);
    }
}

/// Over the limit, the endpoint's own operations towards the peer that
/// fills it go on: a long message (CTS), an emulated read (READRSP), a
/// fetching atomic (ATOMRSP) and a delivery-complete write (RECEIPT).
#[test]
fn over_the_limit_the_endpoints_own_operations_still_complete() {
    let mut c = Cluster::new(2, SimConfig { mtu: 8192, inbox_capacity: 64, ..SimConfig::default() }, limited());
    let (to0, to1) = (c.addrs[1][0], c.addrs[0][1]);
    // Endpoint 0 floods endpoint 1, which posts no receive.
    let mut flood: Vec<OwnedBuf> = (0..200).map(|k| OwnedBuf::from_slice(&pattern(1000, k))).collect();
    for f in flood.iter_mut() {
        c.eps[0].send(to1, f.buf(), SendOpts::default()).unwrap();
    }
    steps(&mut c, 200);
    assert!(c.eps[1].stats().deferred > 0, "endpoint 1 is over its limit");
    // Endpoint 0's memory for endpoint 1's one-sided operations.
    let mut region = OwnedBuf::from_slice(&pattern(100_000, 7));
    let key = c.eps[0].mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let base = region.buf().addr();
    // Endpoint 0 receives endpoint 1's long message.
    let mut long_rx = OwnedBuf::zeroed(200_000);
    c.eps[0].recv(long_rx.buf(), RecvOpts { context: 50, ..RecvOpts::default() }).unwrap();
    let mut long = OwnedBuf::from_slice(&pattern(200_000, 9));
    c.eps[1].send(to0, long.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let mut read = OwnedBuf::zeroed(50_000);
    c.eps[1].read(to0, read.buf(), RemoteBuf { addr: base, key }, 2).unwrap();
    let mut one = OwnedBuf::from_slice(&5u64.to_le_bytes());
    let mut old = OwnedBuf::zeroed(8);
    let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
    let target = RemoteBuf { addr: base + 99_992, key };
    c.eps[1].atomic(to0, u64t, sum, one.buf(), UserBuf::empty(), old.buf(), target, 3).unwrap();
    let mut w = OwnedBuf::from_slice(&[0xAB; 3000]);
    c.eps[1].write(to0, w.buf(), RemoteBuf { addr: base + 60_000, key }, None, 4).unwrap();
    for _ in 0..200_000 {
        if c.cqs[1].len() >= 4 {
            break;
        }
        c.step();
        c.net.advance_to_next();
    }
    assert!(
        c.cqs[1].len() >= 4,
        "done: {:?}; pending {} / {}",
        c.cqs[1],
        c.eps[1].pending_ops(),
        c.eps[0].pending_ops()
    );
    let mut done: Vec<(u64, Status)> = c.cqs[1].iter().map(|e| (e.context, e.status)).collect();
    done.sort_by_key(|d| d.0);
    assert_eq!(done, vec![(1, Status::Success), (2, Status::Success), (3, Status::Success), (4, Status::Success)]);
    assert!(read.bytes() == &pattern(100_000, 7)[..50_000]);
    let before = u64::from_le_bytes(pattern(100_000, 7)[99_992..].try_into().unwrap());
    assert_eq!(u64::from_le_bytes(old.bytes().try_into().unwrap()), before);
    assert!(region.bytes()[60_000..63_000].iter().all(|&b| b == 0xAB));
    assert!(c.cqs[0].iter().any(|e| e.context == 50 && e.status == Status::Success));
    assert!(long_rx.bytes() == pattern(200_000, 9));
    // All that while endpoint 1 still held its flood back.
    assert!(c.cqs[1].len() == 4 && c.eps[1].unexpected_messages() > 0);
    // And the flood arrives, in order, once it posts receives.
    let mut dsts: Vec<OwnedBuf> = (0..200).map(|_| OwnedBuf::zeroed(1000)).collect();
    for (k, d) in dsts.iter_mut().enumerate() {
        c.eps[1].recv(d.buf(), RecvOpts { context: 100 + k as u64, ..RecvOpts::default() }).unwrap();
    }
    c.run_until(200_000, |c| c.cqs[1].len() == 204);
    for (k, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(1000, k as u64), "flood message {k}");
    }
}

/// Tagged receives posted in another order than the messages came: the
/// limit defers, and each receive still gets its own message.
#[test]
fn tagged_receives_in_reverse_order_get_their_messages_through_a_full_buffer() {
    let mut c = Cluster::new(2, sim(21), limited());
    let to1 = c.addrs[0][1];
    let n = 40;
    let mut srcs: Vec<OwnedBuf> = (0..n).map(|k| OwnedBuf::from_slice(&pattern(3000, k))).collect();
    for (k, s) in srcs.iter_mut().enumerate() {
        c.eps[0]
            .send(to1, s.buf(), SendOpts { tag: Some(k as u64), context: k as u64, ..SendOpts::default() })
            .unwrap();
    }
    steps(&mut c, 300);
    let mut dsts: Vec<OwnedBuf> = (0..n).map(|_| OwnedBuf::zeroed(3000)).collect();
    for k in (0..n as usize).rev() {
        let opts = RecvOpts { tag: Some((k as u64, 0)), context: k as u64, ..RecvOpts::default() };
        c.eps[1].recv(dsts[k].buf(), opts).unwrap();
    }
    c.run_until(1_000_000, |c| c.cqs[1].len() == n as usize && c.cqs[0].len() == n as usize);
    for (k, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(3000, k as u64), "tag {k}");
    }
}

/// Unexpected messages that need an operation entry (medium and long
/// ones) wait with their sender when the entries run out (`max_ops`),
/// rather than being dropped.
#[test]
fn unexpected_messages_past_the_operation_limit_wait_and_arrive() {
    let cfg = Config { max_ops: 8, ..Config::default() };
    let mut c = Cluster::with_configs(sim(31), vec![Config::default(), cfg]);
    let to1 = c.addrs[0][1];
    let n = 40;
    let mut srcs: Vec<OwnedBuf> = (0..n).map(|k| OwnedBuf::from_slice(&pattern(20_000, k))).collect();
    for s in srcs.iter_mut() {
        c.eps[0].send(to1, s.buf(), SendOpts::default()).unwrap();
    }
    steps(&mut c, 2000);
    assert!(c.eps[1].stats().deferred > 0, "the entries ran out");
    assert_eq!(c.eps[1].stats().protocol_errors, 0, "nothing dropped");
    let mut dsts: Vec<OwnedBuf> = (0..n).map(|_| OwnedBuf::zeroed(20_000)).collect();
    // Receives, as many as the limit lets in at a time.
    let mut posted = 0;
    for _ in 0..1_000_000 {
        while posted < n as usize {
            let opts = RecvOpts { context: posted as u64, ..RecvOpts::default() };
            match c.eps[1].recv(dsts[posted].buf(), opts) {
                Ok(()) => posted += 1,
                Err(Status::Again) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
        if c.cqs[1].len() == n as usize {
            break;
        }
        c.step();
        c.net.advance_to_next();
    }
    assert_eq!(c.cqs[1].len(), n as usize);
    assert!(c.cqs[1].iter().all(|e| e.status == Status::Success && e.len == 20_000));
    for (k, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(20_000, k as u64), "message {k}");
    }
}
