mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::engine::{Config, RecvOpts, SendFlags, SendOpts};

const DC: SendFlags = SendFlags { more: false, dc: true };
use rdm4::mem::OwnedBuf;
use rdm4::Status;

#[test]
fn smoke_eager_medium_longcts() {
    for len in [0usize, 5, 20_000, 300_000] {
        let mut c = Cluster::new(2, SimConfig::chaotic(7), Config::default());
        let data = pattern(len, 1);
        let mut src = OwnedBuf::from_slice(&data);
        let mut dst = OwnedBuf::zeroed(len);
        let a1 = c.addrs[0][1];
        c.eps[1].recv(dst.buf(), RecvOpts { context: 9, ..Default::default() }).unwrap();
        c.eps[0].send(a1, src.buf(), SendOpts { context: 5, ..Default::default() }).unwrap();
        c.run_until(100_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
        let s = c.take_cq(0);
        let r = c.take_cq(1);
        assert_eq!(s[0].status, Status::Success);
        assert_eq!(r[0].status, Status::Success, "{:?}", r[0]);
        assert_eq!(r[0].len, len as u64);
        assert_eq!(dst.bytes(), &data[..], "len {len}");
        eprintln!("{len}: {:?}", c.all_types());
    }
}

/// The HANDSHAKE carries `host_id` and `device_version`, and each side
/// keeps the other's; a legacy peer sends neither.
#[test]
fn handshakes_carry_host_id_and_device_version_and_each_side_keeps_the_peers() {
    let a = Config { host_id: 0x0123_4567_89AB_CDEF, device_version: 0xEFA1, ..Config::default() };
    let b = Config { host_id: 0x1111, legacy: true, ..Config::default() };
    let mut c = Cluster::with_configs(SimConfig::chaotic(3), vec![a, b]);
    assert_eq!(c.eps[0].peer_identity(c.addrs[0][1]).unwrap(), (None, None), "before the HANDSHAKE");
    let mut dst = [OwnedBuf::zeroed(4), OwnedBuf::zeroed(4)];
    let mut src = [OwnedBuf::from_slice(&[1; 4]), OwnedBuf::from_slice(&[2; 4])];
    for i in 0..2 {
        c.eps[i].recv(dst[i].buf(), RecvOpts { context: 1, ..Default::default() }).unwrap();
        let to = c.addrs[i][1 - i];
        c.eps[i].send(to, src[i].buf(), SendOpts { context: 2, ..Default::default() }).unwrap();
    }
    // The HANDSHAKEs may arrive after the messages (the sim reorders).
    let known = |c: &Cluster| c.eps[1].peer_identity(c.addrs[1][0]).is_ok_and(|i| i.0.is_some());
    c.run_until(100_000, |c| c.cqs.iter().all(|q| q.len() == 2) && known(c));
    for _ in 0..1000 {
        c.step();
    }
    // B kept A's; A got nothing of a legacy peer (which sent its HANDSHAKE too).
    assert_eq!(c.eps[1].peer_identity(c.addrs[1][0]).unwrap(), (Some(0x0123_4567_89AB_CDEF), Some(0xEFA1)));
    assert_eq!(c.eps[0].peer_identity(c.addrs[0][1]).unwrap(), (None, None));
    // By default: this host's identifier, the same in every endpoint, and
    // rdm4's device version.
    let mut d = Cluster::new(2, SimConfig::chaotic(4), Config::default());
    let (mut x, mut y) = (OwnedBuf::from_slice(&[1]), OwnedBuf::zeroed(1));
    d.eps[1].recv(y.buf(), RecvOpts::default()).unwrap();
    d.eps[0].send(d.addrs[0][1], x.buf(), SendOpts::default()).unwrap();
    let known = |d: &Cluster| d.eps[1].peer_identity(d.addrs[1][0]).is_ok_and(|i| i.0.is_some());
    d.run_until(100_000, |d| d.cqs.iter().all(|q| q.len() == 1) && known(d));
    let host = rdm4::engine::host_id();
    assert_ne!(host, 0);
    assert_eq!(d.eps[1].peer_identity(d.addrs[1][0]).unwrap(), (Some(host), Some(rdm4::engine::DEVICE_VERSION)));
    assert_eq!(d.eps[1].peer_identity(99), Err(Status::NoAddr));
}

/// Delivery complete for messages (`SendOpts::dc`): eager, medium and
/// long-CTS go as DC_* RTMs, and each send completes only once the
/// receiver has the whole message — for one that arrives before its
/// receive, once a receive takes it. A legacy peer fails it with NotSup
/// (no weaker guarantee); a legacy endpoint refuses it at once.
#[test]
fn delivery_complete_sends_complete_after_the_receiver_has_the_message() {
    for (len, name) in [(100usize, "DC_EAGER_MSGRTM"), (40_000, "DC_MEDIUM_MSGRTM"), (300_000, "DC_LONGCTS_MSGRTM")] {
        let mut c = Cluster::new(2, SimConfig::chaotic(len as u64), Config::default());
        let data = pattern(len, 3);
        let mut src = OwnedBuf::from_slice(&data);
        let mut dst = OwnedBuf::zeroed(len);
        let to = c.addrs[0][1];
        c.eps[0].send_flagged(to, src.buf(), SendOpts { context: 5, ..Default::default() }, DC).unwrap();
        // No receive yet: the message waits at the receiver, the send too.
        for _ in 0..3000 {
            c.step();
        }
        assert!(c.cqs[0].is_empty(), "{len}: a DC send completed before any receive took it: {:?}", c.cqs[0]);
        c.eps[1].recv(dst.buf(), RecvOpts { context: 9, ..Default::default() }).unwrap();
        c.run_until(100_000, |c| !c.cqs[0].is_empty());
        assert_eq!(c.cqs[0][0].status, Status::Success, "{len}");
        assert_eq!(c.cqs[1].len(), 1, "{len}: the receive completed first");
        assert_eq!(dst.bytes(), &data[..], "{len}");
        let types = c.types_between(0, 1);
        assert!(types.contains(&name), "{len}: {types:?}");
        assert!(c.types_between(1, 0).contains(&"RECEIPT"), "{len}");
    }
    // A legacy peer: NotSup, nothing weaker.
    let legacy = Config { legacy: true, ..Config::default() };
    let mut c = Cluster::with_configs(SimConfig::chaotic(9), vec![Config::default(), legacy.clone()]);
    let mut src = OwnedBuf::from_slice(&[7; 64]);
    let mut dst = OwnedBuf::zeroed(64);
    c.eps[1].recv(dst.buf(), RecvOpts { context: 1, ..Default::default() }).unwrap();
    c.eps[0].send_flagged(c.addrs[0][1], src.buf(), SendOpts { context: 2, ..Default::default() }, DC).unwrap();
    c.run_until(100_000, |c| !c.cqs[0].is_empty());
    assert_eq!(c.cqs[0][0].status, Status::NotSup);
    // From a legacy endpoint: refused at once.
    let to = c.addrs[1][0];
    let r = c.eps[1].send_flagged(to, src.buf(), SendOpts::default(), DC);
    assert_eq!(r, Err(Status::NotSup));
}

/// Forged packets from a known peer's device address: a connid header that
/// is not the peer's is dropped and counted (`stale_connid`), nothing
/// delivered; a raw address header with another connid is another
/// endpoint (a new incarnation at that address), never the known peer:
/// what it sends is not attributed to it.
#[test]
fn packets_with_a_wrong_connid_are_dropped_and_counted_or_kept_apart() {
    use rdm4::device::Device;
    use rdm4::wire::{Packet, PacketType, RawAddr, RawAddrHdr, Req};
    let mut c = Cluster::new(2, SimConfig::default(), Config::default());
    // One message each way first: HANDSHAKEs done, connid headers in use.
    let (mut s0, mut r1) = (OwnedBuf::from_slice(&[1]), OwnedBuf::zeroed(1));
    c.eps[1].recv(r1.buf(), RecvOpts { context: 1, ..Default::default() }).unwrap();
    c.eps[0].send(c.addrs[0][1], s0.buf(), SendOpts::default()).unwrap();
    c.run_until(100_000, |c| c.cqs[0].len() == 1 && c.cqs[1].len() == 1);
    c.take_cq(0);
    c.take_cq(1);
    let a_raw = c.eps[0].addr();
    let b_raw = c.eps[1].addr();
    let before = c.eps[0].stats();
    // A posted any-source receive at A that a delivered forgery would fill.
    let mut dst = OwnedBuf::zeroed(16);
    c.eps[0].recv(dst.buf(), RecvOpts { context: 7, ..Default::default() }).unwrap();
    let send_forged = |c: &mut Cluster, raw: Option<RawAddr>, connid: Option<u32>| {
        let body;
        let mut r = Req::new(PacketType::EagerMsgRtm);
        r.data = b"forged";
        r.connid = connid;
        if let Some(raw) = raw {
            body = raw.to_bytes();
            r.raw_addr = RawAddrHdr::new(&body).ok();
        }
        let mut pkt = vec![0u8; 256];
        let n = Packet::Req(r).emit(&mut pkt).unwrap();
        let dev = c.eps[1].device_mut();
        let ah = dev.insert(&a_raw).unwrap();
        let _ = dev.send(ah, &pkt[..n], 0);
    };
    // Without a raw address: B's device address, a connid that is not B's.
    send_forged(&mut c, None, Some(b_raw.connid() ^ 0x5555));
    for _ in 0..200 {
        c.step();
    }
    let after = c.eps[0].stats();
    assert_eq!(after.stale_connid, before.stale_connid + 1, "{after:?}");
    assert!(c.cqs[0].is_empty(), "a forged packet was delivered: {:?}", c.cqs[0]);
    // With a raw address naming B's device address and another connid:
    // another endpoint, not B.
    let other = RawAddr::new(b_raw.gid, b_raw.qpn(), b_raw.connid() ^ 0x7777);
    send_forged(&mut c, Some(other), None);
    for _ in 0..200 {
        c.step();
    }
    for e in &c.cqs[0] {
        assert_ne!(e.src, c.addrs[0][1], "a packet with another connid was attributed to the known peer: {e:?}");
    }
}
