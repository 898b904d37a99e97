//! Gathered sends (`Device::send_gather`): CTSDATA payloads referenced from
//! the sender's buffer until the receiver takes them, as a NIC gathers from
//! registered memory. The sim device defers the read; every other device
//! copies at once. What must hold: the bytes arrive intact, the send
//! completes only once the device is done with its buffer (also when it is
//! canceled), a peer that closes or disappears neither loses nor leaks
//! packets, and a forged gathered packet is dropped without writing.

mod common;

use common::{pattern, Cluster};
use rdm4::device::sim::{SimConfig, SimNet};
use rdm4::device::{DevEvent, Device, Sent};
use rdm4::engine::{Config, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::status::Status;
use rdm4::wire::{CtsData, PacketType};

/// A CTSDATA header for `len` gathered bytes at `off`.
fn ctsdata_hdr(recv_id: u32, off: u64, len: u64) -> Vec<u8> {
    let c = CtsData { flags: 0, recv_id, seg_offset: off, connid: None, data: &[] };
    let mut out = vec![0u8; CtsData::HDR_LEN];
    let n = c.emit_headers_only(&mut out, len).unwrap();
    out.truncate(n);
    out
}

/// A packet builder for the device that writes `hdr`.
fn writes(hdr: &[u8]) -> impl FnMut(&mut [u8]) -> usize + '_ {
    move |out| {
        out[..hdr.len()].copy_from_slice(hdr);
        hdr.len()
    }
}

#[test]
fn ctsdata_headers_alone_round_trip_and_refuse_anything_after_them() {
    let c = CtsData { flags: 0, recv_id: 7, seg_offset: 4096, connid: Some(0xABCD), data: &[] };
    let mut out = vec![0u8; 64];
    let n = c.emit_headers_only(&mut out, 8192).unwrap();
    assert_eq!(n, CtsData::HDR_LEN + 8, "fixed header and connid block, no data");
    let (back, len) = CtsData::parse_headers_only(&out[..n]).unwrap();
    assert_eq!((back.recv_id, back.seg_offset, back.connid, len), (7, 4096, Some(0xABCD), 8192));
    assert!(back.data.is_empty());
    assert!(CtsData::parse_headers_only(&out[..n + 1]).is_err(), "a byte after the headers");
    assert!(CtsData::parse_headers_only(&out[..n - 1]).is_err(), "truncated headers");
    // The same headers with their data inline parse as an ordinary CTSDATA.
    let whole = CtsData { data: &[5u8; 16], ..c };
    let m = whole.emit(&mut out).unwrap();
    assert_eq!(CtsData::parse(&out[..m]).unwrap().data, &[5u8; 16]);
    // An overflowing seg_offset + seg_length is refused on both sides.
    let far = CtsData { seg_offset: u64::MAX, ..c };
    assert!(far.emit_headers_only(&mut out, 1).is_err());
}

#[test]
fn the_sim_hands_a_gathered_payload_apart_and_completes_the_send_once_taken() {
    let net = SimNet::new(SimConfig::default());
    let mut a = net.device();
    let mut b = net.device();
    let to_b = a.insert(&b.local_addr()).unwrap();
    let from_a = b.insert(&a.local_addr()).unwrap();
    let mut src = OwnedBuf::from_slice(&pattern(4000, 3));
    let hdr = ctsdata_hdr(1, 0, 4000);
    let sent = a.send_gather(to_b, 77, hdr.len(), &mut writes(&hdr), src.buf());
    assert_eq!(sent, Ok(Sent::Pending), "the device reads the payload later");
    let mut events = Vec::new();
    a.events(&mut events);
    assert!(events.is_empty(), "no completion before the receiver took the packet");
    let mut got = None;
    assert_eq!(
        b.recv(8, |from, bytes: &[u8], payload| {
            let mut data = vec![0u8; payload.map_or(0, |p| p.len())];
            if let Some(p) = payload {
                assert!(p.read_at(0, &mut data));
            }
            got = Some((from, bytes.to_vec(), data));
        }),
        1
    );
    let (from, bytes, data) = got.unwrap();
    assert_eq!(from, Some(from_a));
    assert_eq!(bytes, hdr, "the packet's own bytes are the headers alone");
    assert_eq!(data, src.bytes(), "the payload is the sender's bytes");
    a.events(&mut events);
    assert_eq!(events, vec![DevEvent::SendDone { wr_id: 77, ah: to_b, status: Ok(()) }]);
    // Headers and payload beyond the MTU: refused, nothing queued.
    let mut big = OwnedBuf::zeroed(SimConfig::default().mtu);
    let r = a.send_gather(to_b, 78, hdr.len(), &mut writes(&hdr), big.buf());
    assert_eq!(r, Err(rdm4::device::DevError::Failed(Status::Inval)));
    assert_eq!(net.in_flight(), 0);
    let log = net.log();
    assert_eq!((log[0].ptype, log[0].len), (PacketType::CtsData as u8, hdr.len() + 4000), "logged whole");
}

#[test]
fn gathered_packets_of_a_closed_sender_still_arrive_whole() {
    let net = SimNet::new(SimConfig::default());
    let mut a = net.device();
    let mut b = net.device();
    let to_b = a.insert(&b.local_addr()).unwrap();
    let mut src = OwnedBuf::from_slice(&pattern(3000, 9));
    let hdr = ctsdata_hdr(1, 0, 3000);
    let build = &mut writes(&hdr);
    assert_eq!(a.send_gather(to_b, 5, hdr.len(), build, src.buf()), Ok(Sent::Pending));
    drop(a); // closing: its buffers may go away after this
    src.bytes_mut().fill(0); // ...and be reused: the packet must not see it
    let mut got = Vec::new();
    b.recv(8, |_, bytes: &[u8], payload| {
        assert!(payload.is_none(), "a closed sender's packet arrives whole");
        got = bytes.to_vec();
    });
    assert_eq!(&got[..hdr.len()], &hdr[..]);
    assert_eq!(&got[hdr.len()..], &pattern(3000, 9)[..], "the bytes as they were at close");
}

#[test]
fn gathered_packets_to_a_peer_that_disappears_complete_with_peer_unreachable() {
    let net = SimNet::new(SimConfig::default());
    let mut a = net.device();
    let b = net.device();
    let to_b = a.insert(&b.local_addr()).unwrap();
    let mut src = OwnedBuf::from_slice(&[1u8; 100]);
    let hdr = ctsdata_hdr(1, 0, 100);
    for wr in [1, 2] {
        let build = &mut writes(&hdr);
        assert_eq!(a.send_gather(to_b, wr, hdr.len(), build, src.buf()), Ok(Sent::Pending));
    }
    net.kill(b.node());
    let mut events = Vec::new();
    a.events(&mut events);
    let failed: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            DevEvent::SendDone { wr_id, status: Err(Status::PeerUnreachable), .. } => Some(*wr_id),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![1, 2], "each pending gathered send completes once, with an error");
    assert!(events.contains(&DevEvent::PeerLost { ah: to_b }));
    assert_eq!(net.in_flight(), 0);
}

#[test]
fn a_long_cts_send_completes_only_after_the_receiver_took_its_segments() {
    let mut c = Cluster::new(2, SimConfig::default(), Config::default());
    let data = pattern(200_000, 4);
    let mut src = OwnedBuf::from_slice(&data);
    let mut dst = OwnedBuf::zeroed(data.len());
    c.eps[1].recv(dst.buf(), RecvOpts::default()).unwrap();
    c.eps[0].send(c.addrs[0][1], src.buf(), SendOpts { context: 11, ..Default::default() }).unwrap();
    // Let the RTM and CTS cross, then let the sender alone run: its segments
    // wait in the receiver's inbox, so its send must not complete.
    let mut cq = Vec::new();
    c.eps[1].progress(0); // takes the RTM, grants a window
    for _ in 0..20 {
        c.eps[0].progress(0);
        assert_eq!(c.eps[0].poll_cq(&mut cq, 8), 0, "completed while the device still reads its buffer");
    }
    assert!(c.net.in_flight() > 0, "segments are waiting in the receiver's inbox");
    c.run_until(10_000, |c| c.cqs[0].len() == 1 && c.cqs[1].len() == 1);
    assert_eq!(c.cqs[0][0].status, Status::Success);
    assert_eq!(c.cqs[0][0].context, 11);
    assert_eq!(dst.bytes(), &data[..]);
    assert_eq!(c.types_between(0, 1), vec!["LONGCTS_MSGRTM", "HANDSHAKE", "CTSDATA"]);
    // Over a device that gathers in place the RTM carries no data: every
    // byte goes by a gathered CTSDATA (headers: 24 bytes and the connid block).
    let log = c.net.log();
    let rtm = log.iter().find(|r| r.ptype == PacketType::LongctsMsgRtm as u8).unwrap();
    assert!(rtm.len < 128, "a {}-byte RTM carries data", rtm.len);
    let ctsdata = log.iter().filter(|r| r.ptype == PacketType::CtsData as u8);
    assert_eq!(ctsdata.map(|r| r.len - CtsData::HDR_LEN - 8).sum::<usize>(), data.len());
}

#[test]
fn over_a_copying_device_a_long_cts_rtm_hands_its_bytes_over_as_ctsdata_does() {
    // A device that copies gathered bytes into the packet (as shm does, with
    // non-temporal stores when the receiver is far) gets every byte of a
    // long-CTS message by `send_gather`: the RTM's share too.
    let sim = SimConfig { copy_gathered: true, ..SimConfig::default() };
    let mut c = Cluster::new(2, sim, Config::default());
    let data = pattern(200_000, 6);
    let mut src = OwnedBuf::from_slice(&data);
    let mut dst = OwnedBuf::zeroed(data.len());
    c.eps[1].recv(dst.buf(), RecvOpts::default()).unwrap();
    c.eps[0].send(c.addrs[0][1], src.buf(), SendOpts { context: 13, ..Default::default() }).unwrap();
    c.run_until(10_000, |c| c.cqs[0].len() == 1 && c.cqs[1].len() == 1);
    assert_eq!((c.cqs[0][0].context, c.cqs[0][0].status), (13, Status::Success));
    assert_eq!(dst.bytes(), &data[..]);
    let log = c.net.log();
    let rtm = log.iter().find(|r| r.ptype == PacketType::LongctsMsgRtm as u8).unwrap();
    assert!(rtm.gathered > 4096 && rtm.len > rtm.gathered, "RTM of {} bytes, {} handed over", rtm.len, rtm.gathered);
    let ctsdata: Vec<_> = log.iter().filter(|r| r.ptype == PacketType::CtsData as u8).collect();
    assert!(ctsdata.iter().all(|r| r.gathered == r.len - CtsData::HDR_LEN - 8), "{ctsdata:?}");
    let handed: usize = log.iter().map(|r| r.gathered).sum();
    assert_eq!(handed, data.len(), "every byte of the message, and nothing else, handed over");
}

#[test]
fn a_send_canceled_with_segments_in_flight_completes_after_the_device_let_go() {
    let mut c = Cluster::new(2, SimConfig::default(), Config::default());
    let mut src = OwnedBuf::from_slice(&pattern(300_000, 5));
    let mut dst = OwnedBuf::zeroed(300_000);
    c.eps[1].recv(dst.buf(), RecvOpts::default()).unwrap();
    c.eps[0].send(c.addrs[0][1], src.buf(), SendOpts { context: 12, ..Default::default() }).unwrap();
    let mut cq = Vec::new();
    c.eps[1].progress(0); // takes the RTM, grants a window
    c.eps[0].progress(0); // takes the CTS, sends the segments
    assert!(c.net.in_flight() > 0, "segments are waiting in the receiver's inbox");
    c.eps[0].av_remove(c.addrs[0][1]).unwrap();
    for _ in 0..10 {
        c.eps[0].progress(0);
        assert_eq!(c.eps[0].poll_cq(&mut cq, 8), 0, "buffer handed back while the device may read it");
    }
    // The receiver takes the packets; then the sender learns it and completes.
    c.eps[1].progress(0);
    c.eps[0].progress(0);
    assert_eq!(c.eps[0].poll_cq(&mut cq, 8), 1);
    assert_eq!((cq[0].context, cq[0].status), (12, Status::Canceled));
    assert_eq!(c.eps[0].pending_ops(), 0, "no entry left behind");
}

#[test]
fn a_forged_gathered_packet_is_dropped_and_writes_nothing() {
    let net = SimNet::new(SimConfig::default());
    let mut b = Endpoint::new(net.device(), Config::default());
    let mut forger = net.device();
    let to_b = forger.insert(&b.addr()).unwrap();
    b.av_insert(&forger.local_addr()).unwrap();
    let mut dst = OwnedBuf::from_slice(&[0xEE; 1000]);
    b.recv(dst.buf(), RecvOpts::default()).unwrap();
    let mut payload = OwnedBuf::from_slice(&[0x11; 500]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (ctsdata_hdr(0, 0, 400), "seg_length differs from the gathered bytes"),
        ([ctsdata_hdr(0, 0, 500), vec![0]].concat(), "a byte between headers and payload"),
        (
            {
                let mut h = ctsdata_hdr(0, 0, 500);
                h[0] = PacketType::EagerMsgRtm as u8;
                h
            },
            "not a CTSDATA",
        ),
        (ctsdata_hdr(0, 0, 500)[..10].to_vec(), "truncated headers"),
    ];
    for (i, (hdr, why)) in cases.iter().enumerate() {
        let build = &mut writes(hdr);
        assert_eq!(forger.send_gather(to_b, i as u64 + 1, hdr.len(), build, payload.buf()), Ok(Sent::Pending));
        b.progress(0);
        assert_eq!(b.stats().malformed, i as u64 + 1, "{why}: not counted as malformed");
    }
    // Well-formed but naming no operation of the forger's: a protocol error.
    let hdr = ctsdata_hdr(0, 0, 500);
    let build = &mut writes(&hdr);
    forger.send_gather(to_b, 9, hdr.len(), build, payload.buf()).unwrap();
    b.progress(0);
    assert_eq!(b.stats().protocol_errors, 1);
    let mut cq = Vec::new();
    assert_eq!(b.poll_cq(&mut cq, 8), 0);
    assert!(dst.bytes().iter().all(|&x| x == 0xEE), "a forged segment wrote into a receive buffer");
    let mut events = Vec::new();
    forger.events(&mut events);
    assert_eq!(events.len(), 5, "every gathered send completes, dropped or not");
}
