//! The udp device under injected faults both ways (10% drop, 5%
//! duplication, 10% reordering with 50 us delay): 10,000 mixed messages
//! (0 B to 4 MiB) and 1 GiB of RMA writes and reads, every byte checked,
//! nothing delivered twice; the retransmissions are reported (issue 29).

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::{pattern, Rng};
use rdm4::device::udp::{Faults, UdpConfig, UdpDevice};
use rdm4::device::Access;
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::Status;

type Ep = Endpoint<UdpDevice>;

const FAULTS: Faults = Faults { drop: 0.1, dup: 0.05, reorder: 0.1, delay_us: 50, seed: 21 };

fn pair() -> (Ep, Ep, u32) {
    let c = UdpConfig { addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), faults: FAULTS, ..UdpConfig::default() };
    let c2 = UdpConfig { faults: Faults { seed: 22, ..FAULTS }, ..c.clone() };
    let mut a = Endpoint::new(UdpDevice::open_with(c).unwrap(), Config::default());
    let mut b = Endpoint::new(UdpDevice::open_with(c2).unwrap(), Config::default());
    let ab = a.av_insert(&b.addr()).unwrap();
    b.av_insert(&a.addr()).unwrap();
    (a, b, ab)
}

fn step(a: &mut Ep, b: &mut Ep, cqs: &mut [Vec<Cqe>; 2]) {
    a.progress(0);
    a.poll_cq(&mut cqs[0], usize::MAX);
    b.progress(0);
    b.poll_cq(&mut cqs[1], usize::MAX);
}

#[test]
fn ten_thousand_mixed_messages_arrive_intact_and_once_under_faults() {
    let (mut a, mut b, ab) = pair();
    let mut rng = Rng::new(5);
    let n = 10_000usize;
    let lens: Vec<usize> = (0..n)
        .map(|_| match rng.below(100) {
            0..=69 => rng.below(4097) as usize,
            70..=98 => 4096 + rng.below(256 << 10) as usize,
            _ => (256 << 10) + rng.below((4 << 20) - (256 << 10) + 1) as usize,
        })
        .collect();
    let total: usize = lens.iter().sum();
    let mut cqs = [Vec::new(), Vec::new()];
    // At most 64 messages in flight; each verified as it completes.
    let (mut sent, mut posted) = (0usize, 0usize);
    let mut srcs: Vec<Option<OwnedBuf>> = (0..n).map(|_| None).collect();
    let mut dsts: Vec<Option<OwnedBuf>> = (0..n).map(|_| None).collect();
    let mut received = vec![false; n];
    let t = Instant::now();
    while cqs[1].len() < n || cqs[0].len() < n {
        assert!(t.elapsed() < Duration::from_secs(240), "stuck at {} / {}", cqs[0].len(), cqs[1].len());
        while posted < n && posted < cqs[1].len() + 64 {
            let mut d = OwnedBuf::zeroed(lens[posted]);
            let opts = RecvOpts { tag: Some((posted as u64, 0)), context: posted as u64, ..RecvOpts::default() };
            b.recv(d.buf(), opts).unwrap();
            dsts[posted] = Some(d);
            posted += 1;
        }
        while sent < n && sent < cqs[0].len() + 64 {
            let mut s = OwnedBuf::from_slice(&pattern(lens[sent], sent as u64));
            let opts = SendOpts { tag: Some(sent as u64), context: sent as u64, ..SendOpts::default() };
            a.send(ab, s.buf(), opts).unwrap();
            srcs[sent] = Some(s);
            sent += 1;
        }
        let before = cqs[1].len();
        step(&mut a, &mut b, &mut cqs);
        for e in &cqs[1][before..] {
            let k = e.context as usize;
            assert_eq!((e.status, e.len), (Status::Success, lens[k] as u64), "message {k}");
            assert!(!received[k], "message {k} delivered twice");
            received[k] = true;
            let d = dsts[k].take().unwrap();
            assert!(d.bytes() == pattern(lens[k], k as u64), "message {k}: data");
        }
    }
    assert!(cqs[0].iter().all(|e| e.status == Status::Success));
    let (sa, sb) = (a.device().stats(), b.device().stats());
    println!(
        "{n} messages, {:.1} MB, in {:.1} s: retransmissions {} + {}, injected drops {} + {}, duplicates seen {} + {}",
        total as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        sa.retransmits,
        sb.retransmits,
        sa.injected_drops,
        sb.injected_drops,
        sa.duplicates,
        sb.duplicates
    );
    assert!(sa.retransmits > 0 && sb.duplicates > 0);
}

#[test]
fn one_gib_of_rma_writes_and_reads_is_exact_under_faults() {
    let (mut a, mut b, ab) = pair();
    const CHUNK: usize = 4 << 20;
    const CHUNKS: usize = 256; // 1 GiB each way
    let mut region = OwnedBuf::zeroed(16 * CHUNK);
    let key = b.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let base = region.buf().addr();
    let mut cqs = [Vec::new(), Vec::new()];
    let t = Instant::now();
    let mut back = OwnedBuf::zeroed(CHUNK);
    for i in 0..CHUNKS {
        let mut src = OwnedBuf::from_slice(&pattern(CHUNK, i as u64));
        let at = RemoteBuf { addr: base + ((i % 16) * CHUNK) as u64, key };
        // The read after the write has completed: RMA operations are not
        // ordered with each other.
        let t0 = Instant::now();
        a.write(ab, src.buf(), at, None, 2 * i as u64).unwrap();
        while cqs[0].len() < 2 * i + 1 {
            assert!(t0.elapsed() < Duration::from_secs(60), "chunk {i} write stuck");
            step(&mut a, &mut b, &mut cqs);
        }
        a.read(ab, back.buf(), at, 2 * i as u64 + 1).unwrap();
        while cqs[0].len() < 2 * (i + 1) {
            assert!(t0.elapsed() < Duration::from_secs(60), "chunk {i} read stuck");
            step(&mut a, &mut b, &mut cqs);
        }
        assert!(cqs[0][2 * i..].iter().all(|e| e.status == Status::Success), "chunk {i}: {:?}", &cqs[0][2 * i..]);
        assert!(back.bytes() == src.bytes(), "chunk {i} read back");
    }
    let sa = a.device().stats();
    let sb = b.device().stats();
    println!(
        "1 GiB written and read back in {:.1} s: retransmissions {} + {}",
        t.elapsed().as_secs_f64(),
        sa.retransmits,
        sb.retransmits
    );
    assert!(sa.retransmits + sb.retransmits > 0);
}
