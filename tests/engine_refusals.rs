//! What the engine refuses, and that every refusal reaches the side that
//! waits: bad ranges refused up front by the initiator, forged requests
//! answered by the target (issue 27 item 3).

mod common;

use common::Cluster;
use rdm4::atomic_ops;
use rdm4::device::sim::{SimConfig, SimNet};
use rdm4::device::{Access, Device};
use rdm4::engine::{Config, Endpoint, RemoteBuf};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{Packet, PacketType, RawAddrHdr, Req, RmaIov};
use rdm4::Status;

#[test]
fn a_remote_range_that_wraps_past_2_pow_64_is_refused_before_anything_is_sent() {
    let mut c = Cluster::new(2, SimConfig::default(), Config::default());
    let mut region = OwnedBuf::zeroed(4096);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let to1 = c.addrs[0][1];
    let mut buf = OwnedBuf::zeroed(100);
    let mut old = OwnedBuf::zeroed(8);
    let mut one = OwnedBuf::from_slice(&1u64.to_le_bytes());
    let wrap = RemoteBuf { addr: u64::MAX - 50, key };
    c.net.clear_log();
    assert_eq!(c.eps[0].write(to1, buf.buf(), wrap, None, 1), Err(Status::Inval));
    assert_eq!(c.eps[0].read(to1, buf.buf(), wrap, 2), Err(Status::Inval));
    let at_end = RemoteBuf { addr: u64::MAX - 3, key };
    let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
    let none = rdm4::mem::UserBuf::empty();
    assert_eq!(c.eps[0].atomic(to1, u64t, sum, one.buf(), none, old.buf(), at_end, 3), Err(Status::Inval));
    c.settle(1000);
    assert!(c.net.log().is_empty(), "nothing went out: {:?}", c.net.log());
    assert!(c.cqs[0].is_empty() && c.cqs[1].is_empty());
    assert_eq!(c.eps[0].pending_ops(), 0);
    // The last byte of the address space is a range like any other.
    let last = RemoteBuf { addr: u64::MAX - 100, key };
    c.eps[0].write(to1, buf.buf(), last, None, 4).unwrap();
    c.run_until(10_000, |c| !c.cqs[0].is_empty());
    assert_eq!(c.cqs[0][0].status, Status::RemoteAccess, "out of the region: refused by the target");
    assert!(region.bytes().iter().all(|&b| b == 0));
}

/// A forged request whose `efa_rma_iov` wraps: the target parses it and
/// answers with an error (PEER_ERROR), touching nothing; before, it was
/// dropped as malformed and the requester waited for ever.
#[test]
fn a_forged_request_whose_range_wraps_is_answered_with_an_error() {
    let net = SimNet::new(SimConfig::default());
    let mut b = Endpoint::new(net.device(), Config::default());
    let mut region = OwnedBuf::from_slice(&[0x5A; 4096]);
    let key = b.mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let mut forger = net.device();
    let to_b = forger.insert(&b.addr()).unwrap();
    let body = forger.local_addr().to_req_hdr_body();
    let iov = [RmaIov::new(u64::MAX - 50, 100, key)];
    let forge = |ptype: PacketType, id: u32, data: &[u8]| {
        let mut r = Req::new(ptype);
        r.raw_addr = Some(RawAddrHdr::new(&body).unwrap());
        r.rma_iov = &iov;
        r.fields.msg_length = 100;
        r.fields.send_id = id;
        r.fields.recv_id = id;
        r.fields.recv_length = 100;
        r.fields.atomic_datatype = atomic_ops::datatype::UINT64;
        r.fields.atomic_op = atomic_ops::op::SUM;
        r.data = data;
        let mut out = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut out).unwrap();
        out.truncate(n);
        out
    };
    let operand = [1u8; 100];
    for (ptype, id, data) in [
        (PacketType::ShortRtr, 11, &[][..]),
        (PacketType::DcEagerRtw, 12, &operand[..]),
        (PacketType::FetchRta, 13, &operand[..]),
    ] {
        forger.send(to_b, &forge(ptype, id, data), 0).unwrap();
    }
    b.progress(0); // the requests introduce the forger
                   // PEER_ERROR goes only to a peer whose HANDSHAKE says it takes it
                   // (issue 42): the forger's, once its requests introduced it.
    forger.send(to_b, &common::handshake(rdm4::wire::extra::PEER_ERROR), 0).unwrap();
    for _ in 0..10 {
        b.progress(0);
    }
    let mut answered = Vec::new();
    forger.recv(64, |_, p: &[u8], _| {
        if let Ok(Packet::PeerError(e)) = Packet::parse(p) {
            answered.push((e.op_id, e.prov_errno));
        }
    });
    answered.sort();
    let code = Status::RemoteAccess.code().unsigned_abs();
    assert_eq!(answered, vec![(11, code), (12, code), (13, code)], "every refused request is answered");
    assert_eq!(b.stats().malformed, 0);
    assert!(b.stats().access_errors >= 3);
    assert!(region.bytes().iter().all(|&x| x == 0x5A), "nothing touched");
}

/// Emulated RMA (no device RDMA): a registration that a peer's long write
/// is filling cannot be closed (`Busy`, and it stays whole); once closed,
/// the peer's next write is refused and touches nothing (issue 27 item 4).
#[test]
fn a_registration_under_an_emulated_write_is_busy_and_closed_one_takes_nothing() {
    let cfg = Config { max_credits: 2, credit_request: 2, ..Config::default() };
    let mut c = Cluster::new(2, SimConfig { inbox_capacity: 8, ..SimConfig::default() }, cfg);
    let mut region = OwnedBuf::zeroed(1 << 20);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    let to1 = c.addrs[0][1];
    let mut src = OwnedBuf::from_slice(&vec![0x33; 1 << 20]);
    let remote = RemoteBuf { addr: region.buf().addr(), key };
    c.eps[0].write(to1, src.buf(), remote, None, 1).unwrap();
    c.run_until(10_000, |c| c.eps[1].pending_ops() > 0);
    assert_eq!(c.eps[1].mr_dereg(key), Err(Status::Busy), "a long write is filling it");
    c.run_until(100_000, |c| !c.cqs[0].is_empty());
    assert_eq!(c.take_cq(0)[0].status, Status::Success);
    assert!(region.bytes().iter().all(|&b| b == 0x33));
    assert_eq!(c.eps[1].mr_dereg(key), Ok(()));
    region.bytes_mut().fill(0);
    c.eps[0].write(to1, src.buf(), remote, None, 2).unwrap();
    c.run_until(100_000, |c| !c.cqs[0].is_empty());
    assert_eq!(c.take_cq(0)[0].status, Status::RemoteAccess);
    assert!(region.bytes().iter().all(|&b| b == 0), "a closed registration took a write");
}

/// `detail` of `EREMOTEACCESS` is the same whichever side found the
/// violation: the target answering an emulated request (PEER_ERROR) or the
/// device checking the target's registration for a direct one (issue 27
/// item 9).
#[test]
fn a_remote_access_error_has_the_same_detail_emulated_and_direct() {
    let code = Status::RemoteAccess.code().unsigned_abs();
    for rdma in [false, true] {
        let mut c = Cluster::new(2, SimConfig { rdma, ..SimConfig::default() }, Config::default());
        let mut region = OwnedBuf::zeroed(4096);
        let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_READ).unwrap();
        let to1 = c.addrs[0][1];
        let mut buf = OwnedBuf::zeroed(64);
        // A handshake first, so that the direct path is chosen when offered.
        c.eps[0].read(to1, buf.buf(), RemoteBuf { addr: region.buf().addr(), key }, 1).unwrap();
        c.run_until(10_000, |c| !c.cqs[0].is_empty());
        assert_eq!(c.take_cq(0)[0].status, Status::Success);
        c.eps[0].read(to1, buf.buf(), RemoteBuf { addr: region.buf().addr(), key: key ^ 1 }, 2).unwrap();
        c.eps[0].write(to1, buf.buf(), RemoteBuf { addr: region.buf().addr(), key }, None, 3).unwrap();
        c.run_until(10_000, |c| c.cqs[0].len() == 2);
        for e in c.take_cq(0) {
            assert_eq!((e.status, e.detail), (Status::RemoteAccess, code), "rdma {rdma}: op {}", e.context);
        }
        assert!(region.bytes().iter().all(|&b| b == 0));
    }
}

/// The target-side entry of a write with remote CQ data names the writer.
#[test]
fn a_write_with_cq_data_names_its_writer_at_the_target() {
    let mut c = Cluster::new(2, SimConfig::default(), Config::default());
    let mut region = OwnedBuf::zeroed(4096);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    let (to1, to0) = (c.addrs[0][1], c.addrs[1][0]);
    let mut src = OwnedBuf::from_slice(&[9u8; 100]);
    c.eps[0].write(to1, src.buf(), RemoteBuf { addr: region.buf().addr(), key }, Some(77), 1).unwrap();
    c.run_until(10_000, |c| !c.cqs[1].is_empty());
    let e = c.cqs[1][0];
    assert_eq!((e.src, e.data, e.len), (to0, 77, 100));
}

/// PEER_ERRORs owed to a sender whose HANDSHAKE has not arrived wait for
/// it (issue 42), at most `max_ops` of them: a sender that never shakes
/// hands cannot make the endpoint hold more; the rest are counted.
#[test]
fn answers_waiting_for_a_handshake_are_bounded() {
    let net = SimNet::new(SimConfig::default());
    let mut b = Endpoint::new(net.device(), Config { max_ops: 4, ..Config::default() });
    let mut forger = net.device();
    let to_b = forger.insert(&b.addr()).unwrap();
    let body = forger.local_addr().to_req_hdr_body();
    let iov = [RmaIov::new(0x1000, 8, 0x77)]; // no such registration
    for id in 0..10 {
        let mut r = Req::new(PacketType::ShortRtr);
        r.raw_addr = Some(RawAddrHdr::new(&body).unwrap());
        r.rma_iov = &iov;
        r.fields.msg_length = 8;
        r.fields.recv_id = id;
        r.fields.recv_length = 8;
        let mut out = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut out).unwrap();
        forger.send(to_b, &out[..n], 0).unwrap();
    }
    b.progress(0);
    let count = |forger: &mut rdm4::device::sim::SimDevice| {
        let mut n = 0;
        forger.recv(64, |_, p: &[u8], _| n += usize::from(matches!(Packet::parse(p), Ok(Packet::PeerError(_)))));
        n
    };
    assert_eq!(count(&mut forger), 0, "nothing before the HANDSHAKE");
    let errors = b.stats().protocol_errors;
    forger.send(to_b, &common::handshake(rdm4::wire::extra::PEER_ERROR), 0).unwrap();
    for _ in 0..10 {
        b.progress(0);
    }
    assert_eq!(count(&mut forger), 4, "the answers kept, and no more");
    assert!(errors >= 6, "the others counted: {errors}");
}
