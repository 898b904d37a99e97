//! The endpoint's limits driven to their edges through the engine over
//! sim (issue 41): packets from forged sender addresses cannot grow the
//! peers past `Config::max_peers` (dropped, counted), inserts and
//! registrations past their limits are refused with `NoMem` and change
//! nothing, posts past `Config::max_ops` get `Again`. The C API's side
//! (attributes and variables) is `c_tests/limits.c`.

mod common;

use rdm4::device::sim::{SimConfig, SimNet};
use rdm4::device::{Access, Device};
use rdm4::engine::{Config, Endpoint, RecvOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{PacketType, RawAddr, RawAddrHdr, Req};
use rdm4::Status;

/// An eager tagged REQ carrying the raw address `from` and `msg_id` 0.
fn eager_from(from: &RawAddr) -> Vec<u8> {
    let body = from.to_req_hdr_body();
    let mut r = Req::new(PacketType::EagerTagRtm);
    r.raw_addr = Some(RawAddrHdr::new(&body).unwrap());
    r.fields.tag = 5;
    r.data = b"forged";
    let mut out = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn packets_from_forged_senders_stop_at_the_peer_limit_and_are_counted() {
    let net = SimNet::new(SimConfig::default());
    let cfg = Config { max_peers: 8, ..Config::default() };
    let mut ep = Endpoint::new(net.device(), cfg);
    let mut forger = net.device();
    let to_ep = forger.insert(&ep.addr()).unwrap();
    // 1000 senders that do not exist: each packet names another address.
    for i in 0..1000u32 {
        let raw = RawAddr::new([0x77; 16], (i % 60_000) as u16, 0xF000_0000 | i);
        forger.send(to_ep, &eager_from(&raw), 0).unwrap();
        if i % 16 == 0 {
            ep.progress(0);
        }
    }
    for _ in 0..100 {
        ep.progress(0);
    }
    assert!(ep.peer_count() <= 8, "{} peers", ep.peer_count());
    let refused = ep.stats().refused_peers;
    assert!(refused >= 1000 - 8, "{refused} packets counted as refused");
    assert!(ep.unexpected_messages() <= 8, "only the learnt peers' messages are held");
    // A real peer inserted later is refused too (the limit is full), and
    // the endpoint keeps working with those it has.
    let other = Endpoint::new(net.device(), Config::default());
    assert_eq!(ep.av_insert(&other.addr()), Err(Status::NoMem));
}

#[test]
fn inserts_registrations_and_posts_past_their_limits_are_refused_and_change_nothing() {
    let net = SimNet::new(SimConfig::default());
    let cfg = Config { max_peers: 2, max_mrs: 3, max_ops: 4, ..Config::default() };
    let mut ep = Endpoint::new(net.device(), cfg);
    let peers: Vec<Endpoint<_>> = (0..3).map(|_| Endpoint::new(net.device(), Config::default())).collect();
    let a0 = ep.av_insert(&peers[0].addr()).unwrap();
    ep.av_insert(&peers[1].addr()).unwrap();
    assert_eq!(ep.av_insert(&peers[2].addr()), Err(Status::NoMem));
    assert_eq!(ep.av_insert(&peers[0].addr()), Ok(a0), "an address inserted again is no new peer");
    assert_eq!(ep.peer_count(), 2);

    let mut mem: Vec<OwnedBuf> = (0..5).map(|_| OwnedBuf::zeroed(4096)).collect();
    let keys: Vec<u64> = mem[..3].iter_mut().map(|m| ep.mr_reg(m.buf(), Access::REMOTE_WRITE).unwrap()).collect();
    assert_eq!(ep.mr_reg(mem[3].buf(), Access::REMOTE_WRITE), Err(Status::NoMem));
    assert_eq!(ep.mr_alloc(4096, Access::REMOTE_WRITE).err(), Some(Status::NoMem));
    ep.mr_dereg(keys[0]).unwrap();
    ep.mr_reg(mem[4].buf(), Access::REMOTE_WRITE).unwrap();

    let mut bufs: Vec<OwnedBuf> = (0..5).map(|_| OwnedBuf::zeroed(64)).collect();
    for (i, b) in bufs[..4].iter_mut().enumerate() {
        ep.recv(b.buf(), RecvOpts { tag: Some((i as u64, 0)), context: i as u64, ..RecvOpts::default() }).unwrap();
    }
    let opts = RecvOpts { tag: Some((9, 0)), context: 9, ..RecvOpts::default() };
    assert_eq!(ep.recv(bufs[4].buf(), opts), Err(Status::Again));
    assert_eq!(ep.pending_ops(), 4);
}
