//! Unit tests of the udp device over loopback: two devices of one process.

use super::dgram::Hdr;
use super::*;
use crate::device::{Access, Ah, DevError, Device, Responder, Sent, Sleep};
use crate::mem::UserBuf;

fn cfg() -> UdpConfig {
    UdpConfig { addr: Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)), ..UdpConfig::default() }
}

/// Two devices that know each other: (a, b, a's handle of b, b's of a).
fn pair(faults: Faults) -> (UdpDevice, UdpDevice, Ah, Ah) {
    let c = UdpConfig { faults, ..cfg() };
    let mut a = UdpDevice::open_with(c.clone()).unwrap();
    let mut b = UdpDevice::open_with(UdpConfig { faults: Faults { seed: faults.seed + 1, ..faults }, ..c }).unwrap();
    let ab = a.insert(&b.local_addr()).unwrap();
    let ba = b.insert(&a.local_addr()).unwrap();
    (a, b, ab, ba)
}

fn payload(k: u32, len: usize) -> Vec<u8> {
    let mut p = k.to_le_bytes().to_vec();
    p.extend((0..len.saturating_sub(4)).map(|i| (k as usize * 7 + i) as u8));
    p
}

/// Progresses both devices (receives into `got`, events into `ev`) for a
/// while or until `done`.
fn spin(
    a: &mut UdpDevice,
    b: &mut UdpDevice,
    got: &mut Vec<Vec<u8>>,
    ev: &mut Vec<DevEvent>,
    mut done: impl FnMut(&[Vec<u8>], &[DevEvent]) -> bool,
) {
    let t = Instant::now();
    while !done(got, ev) {
        assert!(t.elapsed() < Duration::from_secs(20), "stuck: {} packets, {} events", got.len(), ev.len());
        a.recv(64, |_, _: &[u8], _| {});
        take_events(a, ev);
        b.recv(64, |_, p: &[u8], _| got.push(p.to_vec()));
        let mut other = Vec::new();
        take_events(b, &mut other);
    }
}

/// The device's events but its asks for the awaited peers (the engine's
/// business: `asks_come_during_calls_and_marks_last_while_away`).
fn take_events(dev: &mut UdpDevice, out: &mut Vec<DevEvent>) {
    dev.events(out);
    out.retain(|e| !matches!(e, DevEvent::Awaiting));
}

fn send(dev: &mut UdpDevice, ah: Ah, p: &[u8], wr_id: u64) -> Result<Sent, DevError> {
    dev.send_with(ah, wr_id, p.len(), |buf: &mut [u8]| {
        buf[..p.len()].copy_from_slice(p);
        p.len()
    })
}

/// Sends `p` from `a` to `b` (`ab`) and spins both until `a` reports it
/// delivered (`SendDone` of `wr_id`).
fn deliver(
    a: &mut UdpDevice,
    b: &mut UdpDevice,
    ab: Ah,
    p: &[u8],
    wr_id: u64,
    got: &mut Vec<Vec<u8>>,
    ev: &mut Vec<DevEvent>,
) {
    send(a, ab, p, wr_id).unwrap();
    spin(a, b, got, ev, |_, e| e.iter().any(|e| matches!(e, DevEvent::SendDone { wr_id: w, .. } if *w == wr_id)));
}

#[test]
fn packets_arrive_once_and_complete_when_acknowledged() {
    let (mut a, mut b, ab, _) = pair(Faults::default());
    assert!(a.caps().mtu >= 60_000, "loopback MTU {}", a.caps().mtu);
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    let mut k = 0u32;
    while k < 500 {
        match send(&mut a, ab, &payload(k, 100 + k as usize * 50), u64::from(k) + 1) {
            Ok(Sent::Pending) => k += 1,
            Err(DevError::Again) => spin(&mut a, &mut b, &mut got, &mut ev, |_, _| true),
            other => panic!("{other:?}"),
        }
        a.recv(8, |_, _: &[u8], _| {});
        b.recv(8, |_, p: &[u8], _| got.push(p.to_vec()));
    }
    spin(&mut a, &mut b, &mut got, &mut ev, |g, e| g.len() == 500 && e.len() == 500);
    let mut ids: Vec<u32> = got.iter().map(|p| u32::from_le_bytes(p[..4].try_into().unwrap())).collect();
    for p in &got {
        let k = u32::from_le_bytes(p[..4].try_into().unwrap());
        assert_eq!(p, &payload(k, 100 + k as usize * 50));
    }
    ids.sort();
    assert_eq!(ids, (0..500).collect::<Vec<_>>());
    assert!(ev.iter().all(|e| matches!(e, DevEvent::SendDone { status: Ok(()), .. })));
}

#[test]
fn under_drops_duplicates_and_reordering_every_packet_arrives_exactly_once() {
    let f = Faults { drop: 0.1, dup: 0.05, reorder: 0.1, delay_us: 50, seed: 7 };
    let (mut a, mut b, ab, _) = pair(f);
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    let n = 2000u32;
    let mut k = 0;
    while k < n {
        match send(&mut a, ab, &payload(k, 4 + (k as usize * 37) % 3000), u64::from(k) + 1) {
            Ok(_) => k += 1,
            Err(DevError::Again) => {}
            Err(e) => panic!("{e:?}"),
        }
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        b.recv(8, |_, p: &[u8], _| got.push(p.to_vec()));
    }
    spin(&mut a, &mut b, &mut got, &mut ev, |g, e| g.len() >= n as usize && e.len() >= n as usize);
    let mut ids: Vec<u32> = got.iter().map(|p| u32::from_le_bytes(p[..4].try_into().unwrap())).collect();
    ids.sort();
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "each exactly once");
    assert_eq!(ev.len(), n as usize);
    let s = a.stats();
    assert!(s.retransmits > 0 && s.injected_drops > 0, "{s:?}");
    assert!(b.stats().duplicates > 0, "{:?}", b.stats());
}

#[test]
fn rdma_writes_and_reads_are_checked_by_the_owner_and_move_every_byte() {
    let f = Faults { drop: 0.05, seed: 3, ..Faults::default() };
    let (mut a, mut b, ab, _) = pair(f);
    let mut region = crate::mem::OwnedBuf::zeroed(3 << 20);
    let key = b.reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let ro = b.reg(region.buf(), Access::REMOTE_READ).unwrap();
    let data: Vec<u8> = (0..(2 << 20) + 333).map(|i| (i * 13) as u8).collect();
    let mut src = crate::mem::OwnedBuf::from_slice(&data);
    let base = region.buf().addr();
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    a.rdma_write(ab, src.buf(), base + 100, key, 1).unwrap();
    spin(&mut a, &mut b, &mut got, &mut ev, |_, e| !e.is_empty());
    assert_eq!(ev.pop(), Some(DevEvent::SendDone { wr_id: 1, ah: ab, status: Ok(()) }));
    assert!(&region.bytes()[100..100 + data.len()] == data.as_slice());
    let mut back = crate::mem::OwnedBuf::zeroed(data.len());
    a.rdma_read(ab, back.buf(), base + 100, key, 2).unwrap();
    spin(&mut a, &mut b, &mut got, &mut ev, |_, e| !e.is_empty());
    assert_eq!(ev.pop(), Some(DevEvent::SendDone { wr_id: 2, ah: ab, status: Ok(()) }));
    assert!(back.bytes() == data.as_slice());
    // Refused: wrong key, out of bounds, no write access; memory untouched.
    let before = region.bytes().to_vec();
    let mut small = crate::mem::OwnedBuf::from_slice(&[0xEE; 64]);
    let cases = [(base, key ^ 1), (base + (3 << 20) - 10, key), (base, ro), (base - 1, key)];
    for (i, (addr, k)) in cases.into_iter().enumerate() {
        a.rdma_write(ab, small.buf(), addr, k, 10 + i as u64).unwrap();
    }
    a.rdma_read(ab, small.buf(), base + (3 << 20) - 10, ro, 20).unwrap();
    spin(&mut a, &mut b, &mut got, &mut ev, |_, e| e.len() == 5);
    assert!(ev.iter().all(|e| matches!(e, DevEvent::SendDone { status: Err(Status::RemoteAccess), .. })), "{ev:?}");
    assert!(region.bytes() == before.as_slice());
    assert_eq!(b.stats().rdma_refused, 5);
    // Zero bytes each way.
    ev.clear();
    let empty = UserBuf::empty();
    a.rdma_write(ab, empty, base, key, 30).unwrap();
    a.rdma_read(ab, empty, base, key, 31).unwrap();
    spin(&mut a, &mut b, &mut got, &mut ev, |_, e| e.len() == 2);
    assert!(ev.iter().all(|e| matches!(e, DevEvent::SendDone { status: Ok(()), .. })), "{ev:?}");
}

#[test]
fn bad_datagrams_are_dropped_and_counted() {
    let (mut a, mut b, _, _) = pair(Faults::default());
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = b.socket_addr();
    let good = |kind: Kind, seq: u32, dst: u32| {
        let mut d = vec![0u8; HDR + 8];
        Hdr { kind, flags: 0, src_connid: 5, dst_connid: dst, seq, ack: 0, ack_bits: 0, window: 0 }.write(&mut d);
        d
    };
    let dst = b.connid;
    let mut bad_version = good(Kind::Data, 0, dst);
    bad_version[1] = 9;
    let cases: Vec<Vec<u8>> = vec![
        vec![0xD4, 1, 1],             // too short
        bad_version,                  // unknown version
        good(Kind::Data, 0, dst ^ 1), // another incarnation's connid
        good(Kind::Data, 1000, dst),  // far outside the window
        good(Kind::Ack, 0, dst),      // an ACK from a stranger
    ];
    for c in &cases {
        raw.send_to(c, to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    let mut delivered = 0;
    b.recv(64, |_, _: &[u8], _| delivered += 1);
    assert_eq!(delivered, 0);
    let s = b.stats();
    assert_eq!((s.malformed, s.stale, s.too_far), (2, 1, 1), "{s:?}");
    // A forged acknowledgement of what a never sent releases nothing.
    let mut ev = Vec::new();
    let ab = a.insert(&b.local_addr()).unwrap();
    send(&mut a, ab, b"hello", 1).unwrap();
    let mut forged = vec![0u8; HDR];
    Hdr {
        kind: Kind::Ack,
        flags: 0,
        src_connid: b.connid,
        dst_connid: a.connid,
        seq: 0,
        ack: 500,
        ack_bits: !0,
        window: 1 << 20,
    }
    .write(&mut forged);
    // From another socket: not b's address, so not b's acknowledgement.
    raw.send_to(&forged, a.socket_addr()).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    a.recv(8, |_, _: &[u8], _| {});
    take_events(&mut a, &mut ev);
    assert!(ev.is_empty(), "{ev:?}");
    drop(b);
}

#[test]
fn a_closed_peer_fails_what_was_towards_it_and_a_silent_one_is_given_up() {
    let (mut a, b, ab, _) = pair(Faults::default());
    drop(b);
    let mut ev = Vec::new();
    let t = Instant::now();
    while !ev.iter().any(|e| matches!(e, DevEvent::PeerLost { .. })) {
        assert!(t.elapsed() < Duration::from_secs(2));
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
    }
    assert_eq!(send(&mut a, ab, b"x", 1), Err(DevError::Failed(Status::PeerUnreachable)));
    // A peer that vanishes without a word: given up after `giveup`.
    let c = UdpConfig { giveup: Duration::from_millis(200), ..cfg() };
    let mut a = UdpDevice::open_with(c).unwrap();
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = raw_of(silent.local_addr().unwrap(), 77);
    let ah = a.insert(&addr).unwrap();
    send(&mut a, ah, b"anyone?", 9).unwrap();
    let mut ev = Vec::new();
    let t = Instant::now();
    while ev.len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(3), "{ev:?}");
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert!(ev.contains(&DevEvent::SendDone { wr_id: 9, ah, status: Err(Status::PeerUnreachable) }));
    assert!(ev.contains(&DevEvent::PeerLost { ah }));
    // Counted: the timer expired (resending) before the peer was given up.
    let s = a.stats();
    assert_eq!(s.peers_given_up, 1);
    assert!(s.timeouts >= 1 && s.retransmits >= s.timeouts, "{s:?}");
}

/// The liveness rules look at the peers something awaits, each from
/// when the waiting began: a peer awaited again after a quiet spell longer
/// than the give-up time counts its silence afresh, and a peer nothing
/// awaits is neither probed nor given up, however long it stays silent.
#[test]
fn liveness_counts_a_peers_silence_from_when_something_awaits_it() {
    let giveup = Duration::from_millis(200);
    let c = UdpConfig { giveup, ..cfg() };
    let mut a = UdpDevice::open_with(c.clone()).unwrap();
    let mut b = UdpDevice::open_with(c).unwrap();
    let ab = a.insert(&b.local_addr()).unwrap();
    b.insert(&a.local_addr()).unwrap();
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    deliver(&mut a, &mut b, ab, b"first", 1, &mut got, &mut ev);
    // Quiet: a polls for twice the give-up time, b not at all.
    let t = Instant::now();
    while t.elapsed() < giveup * 2 {
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((a.stats().probes, a.stats().peers_given_up), (0, 0), "nothing awaited b: {:?}", a.stats());
    assert!(a.watch.is_empty(), "b left the liveness list: {:?}", a.watch);
    // b stays away for half the give-up time while a awaits it: not
    // given up (its silence counts from the send), then it answers.
    send(&mut a, ab, b"second", 2).unwrap();
    let t = Instant::now();
    while t.elapsed() < giveup / 2 {
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        std::thread::sleep(Duration::from_millis(1));
    }
    spin(&mut a, &mut b, &mut got, &mut ev, |_, e| e.iter().any(|e| matches!(e, DevEvent::SendDone { wr_id: 2, .. })));
    assert!(ev.contains(&DevEvent::SendDone { wr_id: 2, ah: ab, status: Ok(()) }), "{ev:?}");
    assert_eq!(a.stats().peers_given_up, 0, "{:?}", a.stats());
    assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
}

/// A receiver that does not poll for longer than the sender's timeout:
/// the sender retransmits (flagged RETX); the receiver, which then takes
/// the datagram and its copy, says so (DUP) in its acknowledgement; the
/// sender counts the retransmission spurious and waits longer next time.
#[test]
fn a_retransmission_the_receiver_already_had_is_reported_and_raises_the_timeout() {
    let (mut a, mut b, ab, _) = pair(Faults::default());
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    deliver(&mut a, &mut b, ab, b"warm", 1, &mut got, &mut ev);
    let rto_before = a.peers[ab as usize].rto;
    send(&mut a, ab, b"late", 2).unwrap();
    let t = Instant::now();
    while a.stats().retransmits == 0 {
        assert!(t.elapsed() < Duration::from_secs(2), "no retransmission: {:?}", a.stats());
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
    }
    spin(&mut a, &mut b, &mut got, &mut ev, |_, e| e.iter().any(|e| matches!(e, DevEvent::SendDone { wr_id: 2, .. })));
    let t = Instant::now();
    while a.stats().spurious == 0 {
        assert!(t.elapsed() < Duration::from_secs(2), "no DUP echo: a {:?}, b {:?}", a.stats(), b.stats());
        spin(&mut a, &mut b, &mut got, &mut ev, |_, _| true);
        b.recv(8, |_, p: &[u8], _| got.push(p.to_vec()));
        b.send_acks(Instant::now() + Duration::from_millis(1));
        b.tx_flush();
        a.recv(8, |_, _: &[u8], _| {});
    }
    assert_eq!(got, vec![b"warm".to_vec(), b"late".to_vec()], "each once");
    assert!(b.stats().duplicates >= 1, "{:?}", b.stats());
    assert_eq!(a.stats().spurious, 1, "{:?}", a.stats());
    assert!(a.peers[ab as usize].rto >= rto_before.max(Duration::from_millis(1)), "{:?}", a.peers[ab as usize].rto);
}

/// While the timeout's floor is raised (the peer was reported slow), a
/// lost last datagram is sent again by a probe after two round trips
/// (`Peer::probe_due`): it arrives, once, with no retransmission timeout.
#[test]
fn a_lost_tail_is_recovered_by_a_probe_while_the_floor_is_raised() {
    let (mut a, mut b, ab, _) = pair(Faults::default());
    let (mut got, mut ev) = (Vec::new(), Vec::new());
    deliver(&mut a, &mut b, ab, b"warm", 1, &mut got, &mut ev);
    // A try in which this thread was descheduled past the raised timeout
    // (4 ms) recovers by the timeout instead; it is tried again, at most
    // five times.
    for attempt in 0..5u64 {
        for _ in 0..4 {
            a.peers[ab as usize].spurious(Instant::now());
        }
        let before = a.stats();
        let wr_id = 10 + attempt;
        send(&mut a, ab, b"tail", wr_id).unwrap();
        a.tx_flush();
        // Lost: b's socket gives the datagram up before b reads it.
        let mut sink = [0u8; 2048];
        let t = Instant::now();
        loop {
            match b.sock.recv(&mut sink) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(t.elapsed() < Duration::from_secs(2), "the datagram never reached b's socket");
                }
                Err(e) => panic!("{e}"),
            }
        }
        spin(&mut a, &mut b, &mut got, &mut ev, |_, e| {
            e.iter().any(|e| matches!(e, DevEvent::SendDone { wr_id: w, .. } if *w == wr_id))
        });
        let after = a.stats();
        assert_eq!(got.iter().filter(|p| p.as_slice() == b"tail").count() as u64, attempt + 1, "once each");
        if after.timeouts == before.timeouts {
            assert_eq!(after.tail_probes, before.tail_probes + 1, "{after:?}");
            assert_eq!(b.stats().duplicates, 0, "{:?}", b.stats());
            return;
        }
    }
    panic!("every try ended by a timeout, none by a probe: {:?}", a.stats());
}

#[test]
fn a_write_with_immediate_data_is_reported_once_all_its_bytes_are_in_memory() {
    let f = Faults { drop: 0.05, dup: 0.05, reorder: 0.05, delay_us: 20, seed: 9 };
    let (mut a, mut b, ab, ba) = pair(f);
    assert!(a.caps().rdma_write_imm);
    let mut region = crate::mem::OwnedBuf::zeroed(1 << 20);
    let key = b.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    let base = region.buf().addr();
    let data: Vec<u8> = (0..700_000).map(|i| (i * 7) as u8).collect();
    let mut src = crate::mem::OwnedBuf::from_slice(&data);
    let mut small = crate::mem::OwnedBuf::from_slice(&[1; 100]);
    a.rdma_write_imm(ab, src.buf(), base + 64, key, 0xDEAD_BEEF, 1).unwrap();
    // Refused (wrong key): the requester gets the error, the owner no report.
    a.rdma_write_imm(ab, small.buf(), base, key ^ 1, 7, 2).unwrap();
    let (mut ev_a, mut ev_b) = (Vec::new(), Vec::new());
    let t = Instant::now();
    while ev_a.len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "stuck: {ev_a:?} {ev_b:?}");
        a.recv(64, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev_a);
        b.recv(64, |_, _: &[u8], _| {});
        let mut now = Vec::new();
        take_events(&mut b, &mut now);
        for e in now {
            if let DevEvent::WriteImm { .. } = e {
                // Every byte is in place when it is reported.
                assert!(&region.bytes()[64..64 + data.len()] == data.as_slice());
            }
            ev_b.push(e);
        }
    }
    ev_a.sort_by_key(|e| match e {
        DevEvent::SendDone { wr_id, .. } => *wr_id,
        _ => 0,
    });
    assert_eq!(ev_a[0], DevEvent::SendDone { wr_id: 1, ah: ab, status: Ok(()) });
    assert_eq!(ev_a[1], DevEvent::SendDone { wr_id: 2, ah: ab, status: Err(Status::RemoteAccess) });
    let raw = a.local_addr();
    assert_eq!(ev_b, vec![DevEvent::WriteImm { ah: Some(ba), raw, imm: 0xDEAD_BEEF, len: data.len() as u64 }]);
    // A device without it refuses: shm and sim need not implement it.
    let mut sim = crate::device::sim::SimNet::new(crate::device::sim::SimConfig::default()).device();
    assert!(!sim.caps().rdma_write_imm);
    let r = sim.rdma_write_imm(0, small.buf(), 0, 0, 0, 3);
    assert_eq!(r, Err(DevError::Failed(Status::NotSup)));
}

/// Runs `a`'s receive and `b`'s responder once, then until `done` (at most 5 s).
fn respond_until(
    a: &mut UdpDevice,
    b: &mut UdpDevice,
    ev: &mut Vec<DevEvent>,
    mut done: impl FnMut(&[DevEvent]) -> bool,
) {
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < Duration::from_secs(5), "stuck: {ev:?}");
        a.recv(64, |_, _: &[u8], _| {});
        take_events(a, ev);
        b.respond();
        if done(ev) {
            return;
        }
    }
}

#[test]
fn the_responder_acknowledges_keeps_packets_for_the_engine_and_serves_rdma() {
    let (mut a, mut b, ab, _) = pair(Faults { drop: 0.05, seed: 11, ..Faults::default() });
    // b's application is away: only its responder runs.
    let n = 300u32;
    let mut ev = Vec::new();
    let mut k = 0;
    while k < n {
        match send(&mut a, ab, &payload(k, 2000), u64::from(k) + 1) {
            Ok(_) => k += 1,
            Err(DevError::Again) => respond_until(&mut a, &mut b, &mut ev, |_| true),
            Err(e) => panic!("{e:?}"),
        }
    }
    respond_until(&mut a, &mut b, &mut ev, |e| e.len() == n as usize);
    assert!(ev.iter().all(|e| matches!(e, DevEvent::SendDone { status: Ok(()), .. })), "every send completed");
    assert_eq!(b.stats().kept, u64::from(n));
    // RDMA of b's memory is served while its application is away.
    let mut region = crate::mem::OwnedBuf::zeroed(1 << 20);
    let key = b.reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let data: Vec<u8> = (0..600_000).map(|i| (i * 3) as u8).collect();
    let mut src = crate::mem::OwnedBuf::from_slice(&data);
    let base = region.buf().addr();
    ev.clear();
    a.rdma_write(ab, src.buf(), base + 10, key, 77).unwrap();
    respond_until(&mut a, &mut b, &mut ev, |e| !e.is_empty());
    assert_eq!(ev, vec![DevEvent::SendDone { wr_id: 77, ah: ab, status: Ok(()) }]);
    assert!(&region.bytes()[10..10 + data.len()] == data.as_slice());
    // When b's application calls, it gets every packet, each once.
    let mut got = Vec::new();
    b.recv(usize::MAX, |_, p: &[u8], _| got.push(p.to_vec()));
    let mut ids: Vec<u32> = got.iter().map(|p| u32::from_le_bytes(p[..4].try_into().unwrap())).collect();
    assert!(got.iter().zip(&ids).all(|(p, &k)| *p == payload(k, 2000)), "every byte");
    ids.sort();
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "each exactly once");
    assert!(b.trywait(), "nothing more is kept");
}

#[test]
fn a_peer_whose_application_is_away_is_never_given_up_and_a_silent_one_is() {
    let giveup = Duration::from_millis(150);
    let c = UdpConfig { giveup, ..cfg() };
    let mut a = UdpDevice::open_with(c.clone()).unwrap();
    let mut b = UdpDevice::open_with(c).unwrap();
    let ab = a.insert(&b.local_addr()).unwrap();
    b.insert(&a.local_addr()).unwrap();
    send(&mut a, ab, b"hello", 1).unwrap();
    let mut ev = Vec::new();
    respond_until(&mut a, &mut b, &mut ev, |e| !e.is_empty());
    // The engine awaits b for 4 give-up times; b only responds.
    let t = Instant::now();
    while t.elapsed() < giveup * 4 {
        a.awaiting(ab);
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        b.respond();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!ev.iter().any(|e| matches!(e, DevEvent::PeerLost { .. })), "{ev:?}");
    let s = a.stats();
    assert!(s.probes >= 2 && s.peers_given_up == 0, "probes answered: {s:?}");
    // b stops answering altogether (its process stopped): given up after
    // the give-up time, not before.
    let t = Instant::now();
    while !ev.iter().any(|e| matches!(e, DevEvent::PeerLost { .. })) {
        assert!(t.elapsed() < giveup * 4, "not given up");
        a.awaiting(ab);
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        std::thread::sleep(Duration::from_millis(2));
    }
    // b last answered a probe at most a quarter of the give-up time before.
    assert!(t.elapsed() >= giveup * 3 / 4, "given up after {:?}", t.elapsed());
    assert_eq!(a.stats().peers_given_up, 1);
}

#[test]
fn a_peer_whose_port_closed_is_given_up_at_once() {
    let c = UdpConfig { giveup: Duration::from_secs(60), ..cfg() };
    let mut a = UdpDevice::open_with(c).unwrap();
    // A socket that closes without a word (as a killed process's).
    let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = raw_of(gone.local_addr().unwrap(), 5);
    drop(gone);
    let ah = a.insert(&addr).unwrap();
    // An older incarnation at the same port, and a peer elsewhere whose
    // port stays open (it never answers).
    let old = a.insert(&raw_of(socket_of(&addr), 4)).unwrap();
    let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other = a.insert(&raw_of(quiet.local_addr().unwrap(), 5)).unwrap();
    // Awaited with nothing to send: the probe finds the port closed.
    let mut ev = Vec::new();
    let t = Instant::now();
    while !ev.contains(&DevEvent::PeerLost { ah }) {
        assert!(t.elapsed() < Duration::from_secs(1), "{ev:?} {:?}", a.stats());
        a.awaiting(ah);
        a.recv(8, |_, _: &[u8], _| {});
        take_events(&mut a, &mut ev);
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = a.stats();
    assert!(s.probes >= 1 && s.peers_refused == 2 && s.peers_given_up == 0, "{s:?}");
    assert!(ev.contains(&DevEvent::PeerLost { ah: old }), "every peer at the closed port: {ev:?}");
    assert!(!ev.contains(&DevEvent::PeerLost { ah: other }), "not the peer elsewhere: {ev:?}");
    assert_eq!(send(&mut a, ah, b"x", 1), Err(DevError::Failed(Status::PeerUnreachable)));
    assert_eq!(send(&mut a, old, b"x", 2), Err(DevError::Failed(Status::PeerUnreachable)));
    assert!(send(&mut a, other, b"x", 3).is_ok(), "the peer elsewhere still takes sends");
}

#[test]
fn a_who_is_answered_with_the_name_never_larger_and_a_short_one_is_dropped() {
    let mut b = UdpDevice::open_with(cfg()).unwrap();
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let who = |len: usize, seq: u32| {
        let mut d = vec![0u8; len];
        Hdr { kind: Kind::Who, flags: 0, src_connid: 77, dst_connid: 0, seq, ack: 0, ack_bits: 0, window: 0 }
            .write(&mut d);
        d
    };
    let answered = |b: &mut UdpDevice, q: &[u8]| -> Option<Vec<u8>> {
        raw.send_to(q, b.socket_addr()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let mut reached = 0;
        b.recv(8, |_, _: &[u8], _| reached += 1);
        assert_eq!(reached, 0, "a WHO reaches no engine");
        let mut buf = [0u8; 2048];
        raw.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
    };
    // Shorter than the answer: dropped and counted, never answered.
    assert!(answered(&mut b, &who(HDR + 31, 1)).is_none());
    assert_eq!(b.stats().malformed, 1);
    // Answered with the device's own address, to the asker's connid and nonce.
    let a = answered(&mut b, &who(HDR + 32, 9)).expect("an answer");
    assert_eq!(a.len(), HDR + 32, "no larger than the question");
    let (h, body) = Hdr::parse(&a).unwrap();
    assert_eq!((h.kind, h.dst_connid, h.seq, h.src_connid), (Kind::Name, 77, 9, b.connid));
    assert_eq!(RawAddr::from_bytes(body), Some(b.local_addr()));
    // The name of the endpoint it is part of, when told (auto's).
    let public = b.local_addr().with_reserved(0x1234_5678);
    b.set_public_name(public);
    let a = answered(&mut b, &who(HDR + 100, 10)).expect("an answer");
    assert_eq!(RawAddr::from_bytes(&a[HDR..]), Some(public));
    // The resolver finds it while the device is polled; no peer is made.
    let addr = b.socket_addr();
    let asker = std::thread::spawn(move || resolve(&addr.ip().to_string(), addr.port(), Duration::from_secs(5)));
    let t = Instant::now();
    while !asker.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(10));
        b.recv(8, |_, _: &[u8], _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(asker.join().unwrap(), Ok(public));
    assert!(b.peers.is_empty(), "a question makes no peer");
    // A NAME sent to a device is no answer it waits for: dropped.
    let mut name = who(HDR + 32, 3);
    name[2] = Kind::Name as u8;
    name[8..12].copy_from_slice(&b.connid.to_le_bytes());
    assert!(answered(&mut b, &name).is_none());
    assert_eq!(b.stats().unknown_control, 1);
    // A name that is no address, and a port of nobody.
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert_eq!(resolve("127.0.0.1", closed, Duration::from_millis(100)), Err(Status::PeerUnreachable));
}

/// A silent peer: a bound socket that never answers.
fn silent_peer(a: &mut UdpDevice) -> (UdpSocket, Ah) {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let ah = a.insert(&raw_of(silent.local_addr().unwrap(), 78)).unwrap();
    (silent, ah)
}

#[test]
fn asks_come_during_calls_and_marks_last_while_away() {
    let c = UdpConfig { giveup: Duration::from_secs(60), ..cfg() };
    let mut a = UdpDevice::open_with(c).unwrap();
    let (_s1, p1) = silent_peer(&mut a);
    let (_s2, p2) = silent_peer(&mut a);
    let asks = |a: &mut UdpDevice| {
        let mut ev = Vec::new();
        a.events(&mut ev);
        ev.iter().filter(|e| matches!(e, DevEvent::Awaiting)).count()
    };
    // The application's calls: asked at once, then every 100 ms.
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < Duration::from_millis(250) {
        a.recv(8, |_, _: &[u8], _| {});
        n += asks(&mut a);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!((2..=4).contains(&n), "{n} asks in 250 ms of calls");
    // The engine answers the last ask: p1 awaited. p2 was marked by an
    // answer before it (its mark lapses as the engine said no more).
    a.peers[p2 as usize].awaited_in = a.asked.wrapping_sub(1);
    a.awaiting(p1);
    let p2_mark = Instant::now() + AWAITED_FOR;
    a.peers[p2 as usize].awaited_until = Some(p2_mark);
    a.note_watch(p2 as usize);
    // Away for longer than a mark lasts: never asked, p1 still awaited and
    // probed, p2 no longer.
    let t = Instant::now();
    while t.elapsed() < AWAITED_FOR + Duration::from_millis(250) {
        a.respond();
        assert_eq!(asks(&mut a), 0, "asked while away");
        std::thread::sleep(Duration::from_millis(2));
    }
    let now = Instant::now();
    assert!(a.peers[p1 as usize].awaited_until.is_some_and(|u| u > now), "the last answer's mark lapsed");
    assert!(a.peers[p2 as usize].awaited_until.is_some_and(|u| u <= now), "an older answer's mark was renewed");
    let probes = a.stats().probes;
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(250) {
        a.respond();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(a.stats().probes >= probes + 2, "p1 not probed while away: {} then {}", probes, a.stats().probes);
    // Back: the calls ask again at the liveness rules' next turn (10 ms).
    let t = Instant::now();
    let mut n = 0;
    while n == 0 && t.elapsed() < Duration::from_millis(200) {
        a.recv(8, |_, _: &[u8], _| {});
        n += asks(&mut a);
    }
    assert_eq!(n, 1, "no ask when the application came back");
}
