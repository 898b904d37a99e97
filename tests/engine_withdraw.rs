//! Withdrawn operations and message numbers over the sim device: cancel of
//! operations that have not started, PEER_ERROR MSG_ID_SKIP and MSG_ID
//! (sent and handled), request timeouts, and no `msg_id` left unused when a
//! parked operation fails (engine/withdraw.rs, engine/timeout.rs).

mod common;

use common::*;
use rdm4::device::sim::{SimConfig, SimDevice, SimNet};
use rdm4::device::{Access, Device};
use rdm4::engine::{Config, Endpoint, RecvOpts, RemoteBuf, SendFlags, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{self, Packet, PacketType, RawAddrHdr, Req};
use rdm4::Status;

const UINT64: u32 = 10; // libfabric's FI_UINT64
const SUM: u32 = 2; // FI_SUM

/// Steps only endpoint `i` (the others never call the library).
fn step_only(c: &mut Cluster, i: usize, steps: usize) {
    for _ in 0..steps {
        let now = c.net.now();
        c.eps[i].progress(now);
        c.eps[i].poll_cq(&mut c.cqs[i], usize::MAX);
        c.net.advance(1_000);
    }
}

/// Posts `n` tagged receives of 64 bytes at `ep`, contexts `base..`.
fn post_recvs(c: &mut Cluster, ep: usize, bufs: &mut [OwnedBuf], base: u64) {
    for (i, b) in bufs.iter_mut().enumerate() {
        c.eps[ep].recv(b.buf(), RecvOpts { tag: Some((5, 0)), src: None, context: base + i as u64 }).unwrap();
    }
}

#[test]
fn a_delivery_complete_send_a_legacy_peer_refuses_leaves_no_gap_in_the_message_order() {
    // The DC send waits for the HANDSHAKE, the plain sends behind it wait
    // with it; the DC one fails, the others arrive in order.
    for seed in [1, 2, 3] {
        let legacy = Config { legacy: true, ..Config::default() };
        let mut c = Cluster::with_configs(SimConfig::chaotic(seed), vec![Config::default(), legacy]);
        let to1 = c.addrs[0][1];
        let mut dst: Vec<OwnedBuf> = (0..4).map(|_| OwnedBuf::zeroed(64)).collect();
        post_recvs(&mut c, 1, &mut dst, 100);
        let mut src: Vec<OwnedBuf> = (0..4u8).map(|i| OwnedBuf::from_slice(&[i; 64])).collect();
        let dc = SendFlags { dc: true, ..SendFlags::default() };
        for (i, s) in src.iter_mut().enumerate() {
            let opts = SendOpts { tag: Some(5), cq_data: None, context: i as u64 };
            let flags = if i == 0 { dc } else { SendFlags::default() };
            c.eps[0].send_flagged(to1, s.buf(), opts, flags).unwrap();
        }
        c.run_until(200_000, |c| c.cqs[0].len() == 4 && c.cqs[1].len() == 3);
        let mut s = c.take_cq(0);
        s.sort_by_key(|e| e.context);
        assert_eq!(s[0].status, Status::NotSup, "seed {seed}");
        assert!(s[1..].iter().all(|e| e.status == Status::Success), "seed {seed}");
        let r = c.take_cq(1);
        let got: Vec<(u64, Status)> = r.iter().map(|e| (e.context, e.status)).collect();
        assert_eq!(got, vec![(100, Status::Success), (101, Status::Success), (102, Status::Success)], "seed {seed}");
        for (k, d) in dst.iter().take(3).enumerate() {
            assert_eq!(d.bytes(), &[k as u8 + 1; 64][..], "seed {seed}: message {k} in order");
        }
    }
}

#[test]
fn operations_that_have_not_started_are_canceled() {
    for seed in [4, 5, 6] {
        let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
        let to1 = c.addrs[0][1];
        let mut region = OwnedBuf::zeroed(64);
        let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        let rb = RemoteBuf { addr: region.buf().addr(), key };
        // Before the HANDSHAKE: a write, a write atomic, a DC send and a
        // plain send behind them all wait for it.
        let mut w = OwnedBuf::from_slice(&[7; 64]);
        let mut operand = OwnedBuf::from_slice(&1u64.to_le_bytes());
        let mut s0 = OwnedBuf::from_slice(&[1; 64]);
        let mut s1 = OwnedBuf::from_slice(&[2; 64]);
        let none = rdm4::mem::UserBuf::empty();
        c.eps[0].write(to1, w.buf(), rb, None, 1).unwrap();
        c.eps[0].atomic(to1, UINT64, SUM, operand.buf(), none, none, rb, 2).unwrap();
        let dc = SendFlags { dc: true, ..SendFlags::default() };
        c.eps[0].send_flagged(to1, s0.buf(), SendOpts { tag: Some(5), cq_data: None, context: 3 }, dc).unwrap();
        c.eps[0].send(to1, s1.buf(), SendOpts { tag: Some(5), cq_data: None, context: 4 }).unwrap();
        for ctx in [1, 2, 3] {
            assert_eq!(c.eps[0].cancel(ctx), Ok(()), "seed {seed}: cancel {ctx}");
            assert_eq!(c.eps[0].cancel(ctx), Err(Status::NoEnt), "seed {seed}: cancel {ctx} again");
        }
        let mut dst: Vec<OwnedBuf> = (0..2).map(|_| OwnedBuf::zeroed(64)).collect();
        post_recvs(&mut c, 1, &mut dst, 100);
        c.run_until(200_000, |c| c.cqs[0].len() == 4 && !c.cqs[1].is_empty());
        c.settle(10_000);
        let mut s = c.take_cq(0);
        s.sort_by_key(|e| e.context);
        let got: Vec<(u64, Status)> = s.iter().map(|e| (e.context, e.status)).collect();
        let want = [(1, Status::Canceled), (2, Status::Canceled), (3, Status::Canceled), (4, Status::Success)];
        assert_eq!(got, want, "seed {seed}");
        // The plain send arrived as the first message: nothing of the
        // canceled ones reached the target.
        let r = c.take_cq(1);
        assert_eq!((r.len(), r[0].context), (1, 100), "seed {seed}");
        assert_eq!(dst[0].bytes(), &[2; 64][..], "seed {seed}");
        assert_eq!(region.bytes(), &[0; 64][..], "seed {seed}: the canceled write and atomic changed nothing");
        assert_eq!(c.eps[0].cancel(4), Err(Status::NoEnt), "seed {seed}: a completed send");
        assert_eq!(c.eps[0].pending_ops(), 0, "seed {seed}");
    }
}

#[test]
fn a_queued_message_canceled_after_taking_its_number_is_skipped_by_the_receiver() {
    // The receiver does not progress and its inbox holds 2 packets: later
    // eager sends queue at the sender with their msg_id taken. One is
    // canceled: PEER_ERROR MSG_ID_SKIP; the others arrive, in order.
    let sim = SimConfig { inbox_capacity: 2, ..SimConfig::default() };
    let mut c = Cluster::new(2, sim, Config::default());
    let to1 = c.addrs[0][1];
    // Handshakes first.
    let mut warm = OwnedBuf::from_slice(b"hi");
    let mut wdst = OwnedBuf::zeroed(2);
    c.eps[1].recv(wdst.buf(), RecvOpts::default()).unwrap();
    c.eps[0].send(to1, warm.buf(), SendOpts::default()).unwrap();
    c.run_until(10_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
    c.settle(1_000);
    c.take_cq(0);
    c.take_cq(1);
    let mut src: Vec<OwnedBuf> = (0..6u8).map(|i| OwnedBuf::from_slice(&[i + 1; 64])).collect();
    for (i, s) in src.iter_mut().enumerate() {
        c.eps[0].send(to1, s.buf(), SendOpts { tag: Some(5), cq_data: None, context: i as u64 }).unwrap();
    }
    step_only(&mut c, 0, 20);
    assert_eq!(c.eps[0].cancel(0), Err(Status::NoEnt), "the first left at once and completed");
    assert_eq!(c.eps[0].cancel(4), Ok(()), "a queued one is canceled");
    let mut dst: Vec<OwnedBuf> = (0..5).map(|_| OwnedBuf::zeroed(64)).collect();
    post_recvs(&mut c, 1, &mut dst, 100);
    c.run_until(100_000, |c| c.cqs[0].len() == 6 && c.cqs[1].len() == 5);
    c.settle(1_000);
    let mut s = c.take_cq(0);
    s.sort_by_key(|e| e.context);
    assert!(s.iter().all(|e| e.status == if e.context == 4 { Status::Canceled } else { Status::Success }));
    for (k, want) in [1u8, 2, 3, 4, 6].into_iter().enumerate() {
        assert_eq!(dst[k].bytes(), &[want; 64][..], "receive {k}");
    }
    assert!(c.types_between(0, 1).contains(&"PEER_ERROR"));
    assert_eq!(c.eps[1].stats().protocol_errors, 0);
}

/// A forger's device beside endpoint `b`, and the forger's raw address body.
fn forger(net: &SimNet, b: &Endpoint<SimDevice>) -> (SimDevice, rdm4::device::Ah, [u8; 36]) {
    let mut f = net.device();
    let to_b = f.insert(&b.addr()).unwrap();
    let body = f.local_addr().to_req_hdr_body();
    (f, to_b, body)
}

fn eager(body: &[u8; 36], msg_id: u32, data: &[u8]) -> Vec<u8> {
    let mut r = Req::new(PacketType::EagerTagRtm);
    r.raw_addr = Some(RawAddrHdr::new(body).unwrap());
    r.fields.msg_id = msg_id;
    r.fields.tag = 5;
    r.data = data;
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&mut out).unwrap();
    out
}

fn peer_error(ref_kind: u32, msg_id: u32, status: Status) -> Vec<u8> {
    let e = wire::PeerError {
        flags: 0,
        op_id: msg_id,
        ref_kind,
        prov_errno: status.code().unsigned_abs(),
        connid: None,
        padding: 0,
    };
    let mut out = vec![0u8; 64];
    let n = Packet::PeerError(e).emit(&mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn msg_id_skip_moves_past_a_number_also_when_it_comes_early() {
    let net = SimNet::new(SimConfig::default());
    let mut b = Endpoint::new(net.device(), Config::default());
    let (mut f, to_b, body) = forger(&net, &b);
    let mut dst: Vec<OwnedBuf> = (0..3).map(|_| OwnedBuf::zeroed(8)).collect();
    for (i, d) in dst.iter_mut().enumerate() {
        b.recv(d.buf(), RecvOpts { tag: Some((5, 0)), src: None, context: i as u64 }).unwrap();
    }
    let skip = wire::peer_error_ref::MSG_ID_SKIP;
    // 0 arrives (the sender is learnt), the skip of 2 before 1, then 3, then 1.
    for pkt in [eager(&body, 0, b"zero"), peer_error(skip, 2, Status::Canceled), eager(&body, 3, b"three")] {
        f.send(to_b, &pkt, 0).unwrap();
        b.progress(0);
    }
    let mut cq = Vec::new();
    b.poll_cq(&mut cq, 8);
    assert_eq!(cq.len(), 1, "only message 0 so far: 1 is missing");
    f.send(to_b, &eager(&body, 1, b"one"), 0).unwrap();
    for _ in 0..10 {
        b.progress(0);
    }
    b.poll_cq(&mut cq, 8);
    let got: Vec<&[u8]> = dst.iter().zip(&cq).map(|(d, e)| &d.bytes()[..e.len as usize]).collect();
    assert_eq!(got, vec![&b"zero"[..], b"one", b"three"], "2 skipped, 3 after it");
    assert_eq!(b.stats().protocol_errors, 0);
    // A skip of a number already passed is a protocol error, nothing more.
    f.send(to_b, &peer_error(skip, 1, Status::Canceled), 0).unwrap();
    b.progress(0);
    assert_eq!(b.stats().protocol_errors, 1);
}

#[test]
fn msg_id_fails_the_receive_a_sender_ended() {
    let net = SimNet::new(SimConfig::default());
    let mut b = Endpoint::new(net.device(), Config::default());
    let (mut f, to_b, body) = forger(&net, &b);
    let mut big = OwnedBuf::from_slice(&[0xEE; 100_000]);
    let mut small = OwnedBuf::zeroed(8);
    b.recv(big.buf(), RecvOpts { tag: Some((5, 0)), src: None, context: 1 }).unwrap();
    b.recv(small.buf(), RecvOpts { tag: Some((5, 0)), src: None, context: 2 }).unwrap();
    // The first segment of a medium message 0, then the sender ends it.
    let seg = vec![0x11u8; 4000];
    let mut r = Req::new(PacketType::MediumTagRtm);
    r.raw_addr = Some(RawAddrHdr::new(&body).unwrap());
    r.fields.tag = 5;
    r.fields.msg_length = 50_000;
    r.data = &seg;
    let mut pkt = vec![0u8; r.buffer_len()];
    r.emit(&mut pkt).unwrap();
    f.send(to_b, &pkt, 0).unwrap();
    b.progress(0);
    f.send(to_b, &peer_error(wire::peer_error_ref::MSG_ID, 0, Status::Canceled), 0).unwrap();
    f.send(to_b, &eager(&body, 1, b"next"), 0).unwrap();
    for _ in 0..10 {
        b.progress(0);
    }
    let mut cq = Vec::new();
    b.poll_cq(&mut cq, 8);
    let got: Vec<(u64, Status)> = cq.iter().map(|e| (e.context, e.status)).collect();
    assert_eq!(got, vec![(1, Status::Canceled), (2, Status::Success)]);
    assert_eq!(&small.bytes()[..4], b"next");
    assert_eq!(b.pending_ops(), 0);
}

fn warm(sim: SimConfig, cfgs: Vec<Config>) -> Cluster {
    Cluster::warm(sim, cfgs)
}

#[test]
fn requests_a_peer_never_answers_time_out() {
    let ms = 1_000_000u64;
    let cfg = Config { request_timeout_ns: 5 * ms, ..Config::default() };
    // A fetch-add to a peer that never calls the library (no HANDSHAKE
    // either), and a read to one that stopped after its HANDSHAKE.
    let mut c = Cluster::new(2, SimConfig::default(), cfg.clone());
    let mut region = OwnedBuf::zeroed(64);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let rb = RemoteBuf { addr: region.buf().addr(), key };
    let (mut operand, mut result) = (OwnedBuf::from_slice(&3u64.to_le_bytes()), OwnedBuf::zeroed(8));
    let none = rdm4::mem::UserBuf::empty();
    c.eps[0].atomic(c.addrs[0][1], UINT64, SUM, operand.buf(), none, result.buf(), rb, 7).unwrap();
    let t0 = c.net.now();
    step_only(&mut c, 0, 4_000); // 4 ms
    assert!(c.cqs[0].is_empty(), "not before the timeout");
    step_only(&mut c, 0, 2_000);
    let e = c.take_cq(0);
    assert_eq!((e.len(), e[0].context, e[0].status), (1, 7, Status::TimedOut));
    assert!(c.net.now() - t0 >= 5 * ms);
    assert_eq!(c.eps[0].stats().timeouts, 1);
    // The peer wakes up: whatever it answers is dropped, nothing written.
    result.bytes_mut().fill(0xAA);
    c.settle(100_000);
    assert_eq!(result.bytes(), &[0xAA; 8][..], "a late answer writes nothing");
    assert!(c.cqs[0].is_empty());

    // An emulated read (no RDMA) to a peer that stops answering.
    let mut c = warm(SimConfig::default(), vec![cfg.clone(), cfg.clone()]);
    let mut region = OwnedBuf::from_slice(&[9; 4096]);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_READ).unwrap();
    let mut back = OwnedBuf::zeroed(4096);
    let rb = RemoteBuf { addr: region.buf().addr(), key };
    c.eps[0].read(c.addrs[0][1], back.buf(), rb, 8).unwrap();
    step_only(&mut c, 0, 6_000);
    let e = c.take_cq(0);
    assert_eq!((e.len(), e[0].context, e[0].status), (1, 8, Status::TimedOut));
    back.bytes_mut().fill(0xAA);
    c.settle(100_000);
    assert_eq!(back.bytes(), &[0xAA; 4096][..], "the late READRSP is dropped");
    assert!(c.eps[0].stats().protocol_errors >= 1);

    // A legacy target refuses a read with a bad key and sends no
    // PEER_ERROR: the requester ends by its timeout, not never.
    let legacy = Config { legacy: true, ..cfg.clone() };
    let mut c = warm(SimConfig::default(), vec![cfg.clone(), legacy]);
    let mut back = OwnedBuf::zeroed(64);
    c.eps[0].read(c.addrs[0][1], back.buf(), RemoteBuf { addr: 0x1000, key: 0xBAD }, 9).unwrap();
    c.run_until(100_000, |c| !c.cqs[0].is_empty());
    assert_eq!(c.take_cq(0)[0].status, Status::TimedOut);
    assert_eq!(c.eps[1].stats().access_errors, 1);

    // Timeout 0: never.
    let never = Config { request_timeout_ns: 0, ..Config::default() };
    let mut c = Cluster::new(2, SimConfig::default(), never);
    c.eps[0].atomic(c.addrs[0][1], UINT64, SUM, operand.buf(), none, result.buf(), rb, 7).unwrap();
    step_only(&mut c, 0, 100_000); // 100 ms
    assert!(c.cqs[0].is_empty() && c.eps[0].pending_ops() == 1);
    let _ = region.bytes();
}
