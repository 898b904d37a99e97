//! The engine over the udp device on loopback, two endpoints of one
//! process progressed in turn: messages of every protocol, RMA and atomics,
//! with and without injected faults (issue 29).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use common::pattern;
use rdm4::atomic_ops;
use rdm4::device::udp::{Faults, UdpConfig, UdpDevice};
use rdm4::device::Access;
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendFlags, SendOpts};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::Status;

type Ep = Endpoint<UdpDevice>;

fn pair(faults: Faults) -> (Ep, Ep, u32, u32) {
    pair_at(IpAddr::V4(Ipv4Addr::LOCALHOST), faults)
}

/// Two endpoints bound to `ip` that know each other.
fn pair_at(ip: IpAddr, faults: Faults) -> (Ep, Ep, u32, u32) {
    let c = UdpConfig { addr: Some(ip), faults, ..UdpConfig::default() };
    let c2 = UdpConfig { faults: Faults { seed: faults.seed + 1, ..faults }, ..c.clone() };
    let mut a = Endpoint::new(UdpDevice::open_with(c).unwrap(), Config::default());
    let mut b = Endpoint::new(UdpDevice::open_with(c2).unwrap(), Config::default());
    let ab = a.av_insert(&b.addr()).unwrap();
    let ba = b.av_insert(&a.addr()).unwrap();
    (a, b, ab, ba)
}

/// Progresses both until `done` holds (at most 60 s).
fn run(a: &mut Ep, b: &mut Ep, cqs: &mut [Vec<Cqe>; 2], mut done: impl FnMut(&[Vec<Cqe>; 2]) -> bool) {
    let t = Instant::now();
    while !done(cqs) {
        assert!(t.elapsed() < Duration::from_secs(60), "stuck: {} / {} completions", cqs[0].len(), cqs[1].len());
        a.progress(0);
        a.poll_cq(&mut cqs[0], usize::MAX);
        b.progress(0);
        b.poll_cq(&mut cqs[1], usize::MAX);
    }
}

fn messages_of_every_size(faults: Faults) {
    messages_of_every_size_at(IpAddr::V4(Ipv4Addr::LOCALHOST), faults);
}

fn messages_of_every_size_at(ip: IpAddr, faults: Faults) {
    let (mut a, mut b, ab, _) = pair_at(ip, faults);
    let sizes = [0usize, 1, 100, 8000, 16_384, 40_000, 65_536, 200_000, 1 << 20, 4 << 20];
    let mut srcs: Vec<OwnedBuf> = sizes.iter().map(|&n| OwnedBuf::from_slice(&pattern(n, n as u64))).collect();
    let mut dsts: Vec<OwnedBuf> = sizes.iter().map(|&n| OwnedBuf::zeroed(n)).collect();
    for (k, d) in dsts.iter_mut().enumerate() {
        b.recv(d.buf(), RecvOpts { tag: Some((k as u64, 0)), context: k as u64, ..RecvOpts::default() }).unwrap();
    }
    // Sent in reverse order: tags pick the receive.
    for (k, s) in srcs.iter_mut().enumerate().rev() {
        a.send(ab, s.buf(), SendOpts { tag: Some(k as u64), context: k as u64, ..SendOpts::default() }).unwrap();
    }
    let mut cqs = [Vec::new(), Vec::new()];
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == sizes.len() && c[1].len() == sizes.len());
    for e in cqs.iter().flatten() {
        assert_eq!(e.status, Status::Success, "{e:?}");
    }
    for (k, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(sizes[k], sizes[k] as u64), "size {}", sizes[k]);
    }
}

#[test]
fn messages_of_every_protocol_arrive_over_udp() {
    messages_of_every_size(Faults::default());
}

#[test]
fn messages_arrive_intact_under_drops_duplicates_and_reordering() {
    messages_of_every_size(Faults { drop: 0.1, dup: 0.05, reorder: 0.1, delay_us: 50, seed: 11 });
}

/// IPv6: the raw address holds the address as it is, the messages and
/// RMA go as over IPv4.
#[test]
fn messages_and_rma_go_over_ipv6() {
    let ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
    if std::net::UdpSocket::bind((ip, 0)).is_err() {
        eprintln!("skipped: no IPv6 loopback on this host");
        return;
    }
    let (a, _, _, _) = pair_at(ip, Faults::default());
    assert_eq!(a.addr().gid, Ipv6Addr::LOCALHOST.octets());
    messages_of_every_size_at(ip, Faults { drop: 0.05, seed: 13, ..Faults::default() });
    rma_and_atomics_at(ip);
}

#[test]
fn rma_and_atomics_over_udp_direct_and_refused() {
    rma_and_atomics_at(IpAddr::V4(Ipv4Addr::LOCALHOST));
}

fn rma_and_atomics_at(ip: IpAddr) {
    let (mut a, mut b, ab, _) = pair_at(ip, Faults { drop: 0.05, seed: 5, ..Faults::default() });
    let mut region = OwnedBuf::from_slice(&pattern(1 << 20, 3));
    let key = b.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let base = region.buf().addr();
    let data = pattern(300_000, 9);
    let mut src = OwnedBuf::from_slice(&data);
    let mut back = OwnedBuf::zeroed(300_000);
    let mut cqs = [Vec::new(), Vec::new()];
    a.write(ab, src.buf(), RemoteBuf { addr: base + 1000, key }, None, 1).unwrap();
    run(&mut a, &mut b, &mut cqs, |c| !c[0].is_empty());
    a.read(ab, back.buf(), RemoteBuf { addr: base + 1000, key }, 2).unwrap();
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == 2);
    assert!(cqs[0].iter().all(|e| e.status == Status::Success), "{:?}", cqs[0]);
    assert!(back.bytes() == data.as_slice());
    // A fetching atomic, served by the target's progress.
    let mut one = OwnedBuf::from_slice(&5u64.to_le_bytes());
    let mut old = OwnedBuf::zeroed(8);
    let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
    let at = RemoteBuf { addr: base + 8, key };
    let before = u64::from_le_bytes(region.bytes()[8..16].try_into().unwrap());
    a.atomic(ab, u64t, sum, one.buf(), UserBuf::empty(), old.buf(), at, 3).unwrap();
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == 3);
    assert_eq!(u64::from_le_bytes(old.bytes().try_into().unwrap()), before);
    assert_eq!(u64::from_le_bytes(region.bytes()[8..16].try_into().unwrap()), before.wrapping_add(5));
    // Not done in the call over udp (`rdm4_write_now` and friends): NotSup, nothing touched.
    let snap = region.bytes().to_vec();
    assert_eq!(a.rma_in_call(ab, src.buf(), RemoteBuf { addr: base, key }, true), Err(Status::NotSup));
    assert_eq!(a.rma_in_call(ab, back.buf(), RemoteBuf { addr: base, key }, false), Err(Status::NotSup));
    let r = a.atomic_in_call(ab, u64t, sum, (one.buf(), UserBuf::empty(), old.buf()), at);
    assert_eq!(r, Err(Status::NotSup));
    assert!(region.bytes() == snap.as_slice() && a.cq_len() == 0);
    // Refused by the owner: wrong key, out of bounds. Memory untouched.
    let snapshot = region.bytes().to_vec();
    a.write(ab, src.buf(), RemoteBuf { addr: base, key: key ^ 1 }, None, 4).unwrap();
    a.read(ab, back.buf(), RemoteBuf { addr: base + (1 << 20) - 10, key }, 5).unwrap();
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == 5);
    for e in &cqs[0][3..] {
        assert_eq!((e.status, e.detail), (Status::RemoteAccess, 7), "{e:?}");
    }
    assert!(region.bytes() == snapshot.as_slice());
}

/// `SendOpts::more` (`RDM4_MSG_MORE`): the sends of a burst stay with the
/// sender until a call without it, then leave together, in a few system
/// calls (UDP GSO batches of up to 64 datagrams), every byte intact.
#[test]
fn sends_with_more_wait_for_a_call_without_it_then_leave_together() {
    let (mut a, mut b, ab, _) = pair(Faults::default());
    const N: usize = 200;
    let mut srcs: Vec<OwnedBuf> = (0..N).map(|k| OwnedBuf::from_slice(&pattern(8, k as u64))).collect();
    let mut dsts: Vec<OwnedBuf> = (0..N).map(|_| OwnedBuf::zeroed(8)).collect();
    for (k, d) in dsts.iter_mut().enumerate() {
        b.recv(d.buf(), RecvOpts { tag: Some((k as u64, 0)), context: k as u64, ..RecvOpts::default() }).unwrap();
    }
    // The handshake first, so that the burst is made of eager packets only.
    let mut first = OwnedBuf::zeroed(1);
    let mut one = OwnedBuf::from_slice(&[1]);
    b.recv(first.buf(), RecvOpts { tag: Some((u64::MAX, 0)), context: 999, ..RecvOpts::default() }).unwrap();
    a.send(ab, one.buf(), SendOpts { tag: Some(u64::MAX), context: 999, ..SendOpts::default() }).unwrap();
    let mut cqs = [Vec::new(), Vec::new()];
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == 1 && c[1].len() == 1);
    cqs = [Vec::new(), Vec::new()];
    let before = a.device().stats();
    for (k, s) in srcs.iter_mut().enumerate().take(N - 1) {
        let opts = SendOpts { tag: Some(k as u64), context: k as u64, ..SendOpts::default() };
        a.send_flagged(ab, s.buf(), opts, SendFlags { more: true, dc: false }).unwrap();
    }
    // Nothing left the sender: the receiver, progressed for 20 ms, has nothing.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(20) {
        b.progress(0);
        b.poll_cq(&mut cqs[1], usize::MAX);
    }
    assert!(cqs[1].is_empty(), "{} messages arrived before the burst's end", cqs[1].len());
    assert_eq!(a.device().stats().datagrams_sent, before.datagrams_sent);
    // The last send, without `more`, takes the burst out.
    let last = N - 1;
    a.send(ab, srcs[last].buf(), SendOpts { tag: Some(last as u64), context: last as u64, ..SendOpts::default() })
        .unwrap();
    let after = a.device().stats();
    let (dgrams, calls) = (after.datagrams_sent - before.datagrams_sent, after.send_calls - before.send_calls);
    // The window (16 datagrams at first) lets part of the burst go now.
    assert!(dgrams >= 8 && calls * 4 <= dgrams, "{dgrams} datagrams in {calls} calls");
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == N && c[1].len() == N);
    for e in cqs.iter().flatten() {
        assert_eq!(e.status, Status::Success, "{e:?}");
    }
    for (k, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(8, k as u64), "message {k}");
    }
    let s = a.device().stats();
    assert!(s.send_calls - before.send_calls < (N as u64) / 4, "{:?}", s);
}

/// Polls `fd` for up to `ms`; true when it is readable.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// The descriptor an application sleeps on (`rdm4_ep_fd`) wakes it when a
/// retransmission is due, though nothing arrives (the peer does not
/// answer); it stays quiet while there is nothing to do.
#[test]
fn the_application_fd_wakes_for_retransmissions_and_is_quiet_when_idle() {
    let (mut a, mut b, ab, _) = pair(Faults::default());
    let fd = a.wait_fd().expect("udp has a descriptor");
    assert!(!readable(fd, 100), "readable while idle");
    // b never progresses: a's datagram waits for an acknowledgement that
    // does not come, and only the timer can wake a.
    let mut src = OwnedBuf::from_slice(&pattern(8, 1));
    a.send(ab, src.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let t = Instant::now();
    let mut wakes = 0;
    while t.elapsed() < Duration::from_millis(300) {
        assert!(readable(fd, 200), "no wake-up after {wakes} ({:?})", t.elapsed());
        wakes += 1;
        a.progress(0);
    }
    assert!(wakes >= 20, "{wakes} wake-ups in 300 ms");
    assert!(a.device().stats().retransmits >= 2, "{:?}", a.device().stats());
    // b takes the message; then a settles and its descriptor goes quiet.
    let mut dst = OwnedBuf::zeroed(8);
    b.recv(dst.buf(), RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    let mut cqs = [Vec::new(), Vec::new()];
    run(&mut a, &mut b, &mut cqs, |c| c[0].len() == 1 && c[1].len() == 1);
    assert_eq!(dst.bytes(), pattern(8, 1));
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(20) {
        a.progress(0);
        b.progress(0);
    }
    a.progress(0);
    assert!(!readable(fd, 100), "readable after everything was acknowledged");
}
