//! The long-read message subprotocol (spec §4.1) and its nack fallback
//! (§4.7) over the sim device with RDMA: data, completions, the packets on
//! the wire and the registrations left behind.

mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::engine::{Config, CqFlags, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::Status;

const SEEDS: [u64; 3] = [11, 12, 13];

fn rdma_sim(seed: u64) -> SimConfig {
    SimConfig { rdma: true, ..SimConfig::chaotic(seed) }
}

/// A pair whose HANDSHAKEs have been exchanged (the sender knows the
/// receiver can read), with the capture log cleared.
fn warm_pair(sim: SimConfig, cfg: Config) -> Cluster {
    warm_pair_with(sim, vec![cfg.clone(), cfg])
}

/// [`warm_pair`] of two endpoints with their own settings, runting read
/// off (`engine_runt.rs` covers it): plain long-read.
fn warm_pair_with(sim: SimConfig, cfgs: Vec<Config>) -> Cluster {
    Cluster::warm(sim, cfgs.into_iter().map(|c| Config { runt_size: 0, ..c }).collect())
}

fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
    v.sort();
    v
}

/// Sends one `len`-byte message 0 → 1 into a `cap`-byte receive (`cap` may
/// be smaller: truncation), checks data and completions; returns the packet
/// types both ways.
fn one_message(
    c: &mut Cluster,
    len: usize,
    cap: usize,
    tagged: bool,
    recv_first: bool,
    what: &str,
) -> (Vec<&'static str>, Vec<&'static str>) {
    let data = pattern(len, len as u64 ^ 0x77);
    let mut src = OwnedBuf::from_slice(&data);
    // A guard after the receive buffer: nothing may be written there.
    let mut dst = OwnedBuf::from_slice(&vec![0xEEu8; cap + 64]);
    let rbuf = dst.buf().slice(0, cap).unwrap();
    let (to1, from0) = (c.addrs[0][1], c.addrs[1][0]);
    let tag = tagged.then_some(0x1234_5678_9ABC);
    let ropts = RecvOpts { tag: tag.map(|t| (t, 0)), src: None, context: 22 };
    if recv_first {
        c.eps[1].recv(rbuf, ropts).unwrap();
    }
    c.eps[0].send(to1, src.buf(), SendOpts { tag, cq_data: Some(0xD00D), context: 11 }).unwrap();
    if !recv_first {
        c.run_until(200_000, |c| c.eps[1].pending_ops() > 0);
        // An unexpected long-read message holds no data.
        assert_eq!(c.eps[1].unexpected_bytes(), 0, "{what}");
        c.eps[1].recv(rbuf, ropts).unwrap();
    }
    c.run_until(2_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
    c.settle(10_000);
    let s = c.take_cq(0);
    let r = c.take_cq(1);
    let kind = if tagged { CqFlags::TAGGED } else { CqFlags::MSG };
    assert_eq!(s.len(), 1, "{what}");
    assert_eq!((s[0].status, s[0].context, s[0].len), (Status::Success, 11, len as u64), "{what}");
    assert_eq!(r.len(), 1, "{what}");
    let want_status = if cap < len { Status::Trunc } else { Status::Success };
    assert_eq!(
        (r[0].status, r[0].context, r[0].len, r[0].flags, r[0].src, r[0].tag, r[0].data),
        (
            want_status,
            22,
            cap.min(len) as u64,
            CqFlags::RECV | kind | CqFlags::REMOTE_CQ_DATA,
            from0,
            tag.unwrap_or(0),
            0xD00D
        ),
        "{what}"
    );
    if cap < len {
        assert_eq!(r[0].olen, len as u64, "{what}");
    }
    let n = cap.min(len);
    assert!(dst.bytes()[..n] == data[..n], "{what}: data differs");
    assert!(dst.bytes()[n..].iter().all(|&b| b == 0xEE), "{what}: written past the buffer");
    for i in 0..2 {
        let st = c.eps[i].stats();
        assert_eq!((st.malformed, st.protocol_errors, st.stale_connid), (0, 0, 0), "{what}: endpoint {i}");
    }
    assert_eq!(c.eps[0].pending_ops() + c.eps[1].pending_ops(), 0, "{what}");
    // The send buffer's registration is gone with the send.
    assert_eq!(c.net.registrations(0), 0, "{what}");
    (sorted(c.types_between(0, 1)), sorted(c.types_between(1, 0)))
}

#[test]
fn long_messages_move_by_one_read_and_an_eor() {
    let medium = Config::default().medium_max;
    for seed in SEEDS {
        for tagged in [false, true] {
            for recv_first in [true, false] {
                for len in [medium + 1, 1 << 20, 5 << 20] {
                    let mut c = warm_pair(rdma_sim(seed), Config::default());
                    let what = format!("seed {seed} tagged {tagged} recv_first {recv_first} len {len}");
                    let (fwd, back) = one_message(&mut c, len, len, tagged, recv_first, &what);
                    let rtm = if tagged { "LONGREAD_TAGRTM" } else { "LONGREAD_MSGRTM" };
                    assert_eq!(fwd, vec![rtm], "{what}");
                    assert_eq!(back, vec!["EOR"], "{what}");
                }
            }
        }
    }
}

#[test]
fn a_long_read_into_a_shorter_buffer_truncates() {
    for (len, cap) in [(300_000, 100_000), (300_000, 0), (1 << 20, (1 << 20) - 1)] {
        let mut c = warm_pair(rdma_sim(21), Config::default());
        let what = format!("len {len} cap {cap}");
        let (fwd, back) = one_message(&mut c, len, cap, true, true, &what);
        assert_eq!((fwd, back), (vec!["LONGREAD_TAGRTM"], vec!["EOR"]), "{what}");
    }
}

#[test]
fn reads_larger_than_the_device_allows_are_split() {
    // Reads of at most 100,000 bytes: a 64 MiB message (and a truncated
    // one that ends mid-read) take many reads, still one RTM and one EOR;
    // the tiny MTU does not matter to the reads.
    let sim = SimConfig { mtu: 2048, max_rdma_size: 100_000, ..rdma_sim(31) };
    let mut c = warm_pair(sim, Config::default());
    let (fwd, back) = one_message(&mut c, 64 << 20, 64 << 20, false, true, "64 MiB");
    assert_eq!((fwd, back), (vec!["LONGREAD_MSGRTM"], vec!["EOR"]));
    let (fwd, back) = one_message(&mut c, 1 << 20, 250_001, false, true, "truncated mid-read");
    assert_eq!((fwd, back), (vec!["LONGREAD_MSGRTM"], vec!["EOR"]));
}

#[test]
fn a_failed_read_is_nacked_and_the_message_goes_by_long_cts() {
    for seed in SEEDS {
        for recv_first in [true, false] {
            let sim = SimConfig { fail_reads: true, ..rdma_sim(seed) };
            let mut c = warm_pair(sim, Config::default());
            let what = format!("seed {seed} recv_first {recv_first}");
            let (fwd, back) = one_message(&mut c, 1 << 20, 1 << 20, true, recv_first, &what);
            // The LONGCTS_RTM after the nack carries no data: every byte came by CTSDATA.
            assert_eq!(
                (dedup(fwd), dedup(back)),
                (vec!["CTSDATA", "LONGCTS_TAGRTM", "LONGREAD_TAGRTM"], vec!["CTS", "READ_NACK"]),
                "{what}"
            );
            // Only the LONGCTS RTM that answers the nack carries the REQ
            // flag READ_NACK (wire-facts #10).
            let flagged: Vec<_> = c
                .net
                .log()
                .iter()
                .filter(|r| r.from == 0 && r.flags & READ_NACK_FLAG != 0)
                .map(|r| PacketType::from_u8(r.ptype).map_or("?", |t| t.name()))
                .collect();
            assert_eq!(flagged, vec!["LONGCTS_TAGRTM"], "{what}");
        }
    }
}

const READ_NACK_FLAG: u16 = rdm4::wire::req_flags::READ_NACK;
use rdm4::wire::PacketType;

#[test]
fn without_the_senders_read_nack_a_failed_read_goes_by_emulated_reads() {
    // The sender does not advertise READ_NACK (it reads, though): the
    // receiver may not nack. Its device's read failed, but the sender's
    // buffer is registered: the receiver reads it by emulated reads (the
    // baseline LONGCTS_RTR every peer serves), then sends the EOR, and
    // both complete with every byte (issue 42 case 3).
    let off = Config { features_off: rdm4::wire::extra::READ_NACK, ..Config::default() };
    for seed in SEEDS {
        let sim = SimConfig { fail_reads: true, ..rdma_sim(seed) };
        let mut c = warm_pair_with(sim, vec![off.clone(), Config::default()]);
        let len = 1 << 20;
        let mut src = OwnedBuf::from_slice(&pattern(len, 3));
        let mut dst = OwnedBuf::zeroed(len);
        c.eps[1].recv(dst.buf(), RecvOpts { context: 22, ..RecvOpts::default() }).unwrap();
        c.eps[0].send(c.addrs[0][1], src.buf(), SendOpts { context: 11, ..SendOpts::default() }).unwrap();
        c.run_until(2_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
        c.settle(10_000);
        let (s, r) = (c.take_cq(0), c.take_cq(1));
        assert_eq!((s.len(), s[0].context, s[0].status), (1, 11, Status::Success), "seed {seed}");
        assert_eq!((r.len(), r[0].context, r[0].status), (1, 22, Status::Success), "seed {seed}");
        assert!(dst.bytes() == src.bytes(), "seed {seed}: every byte");
        let back = dedup(c.types_between(1, 0));
        assert_eq!(back, vec!["CTS", "EOR", "LONGCTS_RTR"], "seed {seed}: no READ_NACK to a sender without it");
        assert_eq!(c.eps[0].pending_ops() + c.eps[1].pending_ops(), 0, "seed {seed}");
        assert_eq!(c.net.registrations(0), 0, "seed {seed}: the send's registration is dropped");
    }
}

#[test]
fn peers_without_rdma_or_before_the_handshake_use_long_cts() {
    let len = 1 << 20;
    // No RDMA on the device.
    let mut c = warm_pair(SimConfig::chaotic(41), Config::default());
    let (fwd, _) = one_message(&mut c, len, len, false, true, "no rdma");
    assert_eq!(dedup(fwd), vec!["CTSDATA", "LONGCTS_MSGRTM"]);
    // A legacy peer advertises nothing.
    let mut c = warm_pair(rdma_sim(42), Config { legacy: true, ..Config::default() });
    let (fwd, _) = one_message(&mut c, len, len, false, true, "legacy");
    assert_eq!(dedup(fwd), vec!["CTSDATA", "LONGCTS_MSGRTM"]);
    // The threshold: below it, long-CTS.
    let cfg = Config { longread_min: 2 << 20, ..Config::default() };
    let mut c = warm_pair(rdma_sim(43), cfg);
    let (fwd, _) = one_message(&mut c, len, len, false, true, "below longread_min");
    assert_eq!(dedup(fwd), vec!["CTSDATA", "LONGCTS_MSGRTM"]);
    // The device's own threshold counts too: below it long-CTS, from it long-read.
    let sim = SimConfig { longread_min: 2 << 20, ..rdma_sim(44) };
    let mut c = warm_pair(sim.clone(), Config::default());
    let (fwd, _) = one_message(&mut c, len, len, false, true, "below the device's longread_min");
    assert_eq!(dedup(fwd), vec!["CTSDATA", "LONGCTS_MSGRTM"]);
    let mut c = warm_pair(sim, Config::default());
    let (fwd, _) = one_message(&mut c, 2 << 20, 2 << 20, false, true, "at the device's longread_min");
    assert_eq!(fwd, vec!["LONGREAD_MSGRTM"]);
}

#[test]
fn many_long_reads_in_both_directions_complete_in_order() {
    let mut c = warm_pair(rdma_sim(51), Config::default());
    let n = 12;
    let len = |i: usize| 100_000 + i * 7_919;
    let mut srcs: Vec<Vec<OwnedBuf>> = vec![Vec::new(), Vec::new()];
    let mut dsts: Vec<Vec<OwnedBuf>> = vec![Vec::new(), Vec::new()];
    for (a, b) in [(0usize, 1usize), (1, 0)] {
        for i in 0..n {
            let mut d = OwnedBuf::zeroed(len(i));
            c.eps[b].recv(d.buf(), RecvOpts { context: i as u64, ..RecvOpts::default() }).unwrap();
            dsts[b].push(d);
            let mut s = OwnedBuf::from_slice(&pattern(len(i), (a * 100 + i) as u64));
            let to = c.addrs[a][b];
            c.eps[a].send(to, s.buf(), SendOpts { context: 1000 + i as u64, ..SendOpts::default() }).unwrap();
            srcs[a].push(s);
        }
    }
    c.run_until(5_000_000, |c| c.cqs[0].len() == 2 * n && c.cqs[1].len() == 2 * n);
    for (a, b) in [(0usize, 1usize), (1, 0)] {
        let recvs: Vec<u64> = c.cqs[b].iter().filter(|e| e.flags.contains(CqFlags::RECV)).map(|e| e.context).collect();
        assert_eq!(recvs, (0..n as u64).collect::<Vec<_>>(), "receives at {b} in message order");
        for (i, d) in dsts[b].iter().enumerate() {
            assert!(d.bytes() == pattern(len(i), (a * 100 + i) as u64), "message {i} {a}->{b}");
        }
    }
    assert!(c.all_types().contains(&"LONGREAD_MSGRTM"));
    assert_eq!(c.net.registrations(0) + c.net.registrations(1), 0);
}

fn dedup(mut v: Vec<&'static str>) -> Vec<&'static str> {
    v.sort();
    v.dedup();
    v
}

#[test]
fn a_forged_long_read_rtm_is_dropped_and_touches_nothing() {
    use rdm4::device::Device;
    use rdm4::wire::{PacketType, RawAddrHdr, Req, RmaIov};
    let net = rdm4::device::sim::SimNet::new(SimConfig { rdma: true, ..SimConfig::default() });
    let mut b = rdm4::engine::Endpoint::new(net.device(), Config::default());
    let mut forger = net.device();
    let to_b = forger.insert(&b.addr()).unwrap();
    let mut dst = OwnedBuf::from_slice(&[0xEE; 1000]);
    b.recv(dst.buf(), RecvOpts::default()).unwrap();
    let body = forger.local_addr().to_req_hdr_body();
    let forged = |msg_id: u32, len: u64, iov_len: u64| {
        let iov = [RmaIov::new(0x1000, iov_len, 0x42)];
        let mut r = Req::new(PacketType::LongreadMsgRtm);
        r.raw_addr = Some(RawAddrHdr::new(&body).unwrap());
        r.fields.msg_id = msg_id;
        r.fields.msg_length = len;
        r.fields.send_id = 1;
        r.read_iov = &iov;
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out).unwrap();
        out
    };
    // read_iov shorter than the message: dropped, counted once.
    forger.send(to_b, &forged(0, 1000, 999), 0).unwrap();
    for _ in 0..100 {
        b.progress(0);
    }
    assert_eq!(b.stats().protocol_errors, 1);
    let mut cq = Vec::new();
    assert_eq!(b.poll_cq(&mut cq, 8), 0, "no completion for a dropped packet");
    assert!(dst.bytes().iter().all(|&x| x == 0xEE));
    // A well-formed one naming memory the forger never registered: the read
    // fails, the receiver nacks, and the receive still waits for the data.
    forger.send(to_b, &forged(1, 1000, 1000), 0).unwrap();
    for _ in 0..100 {
        b.progress(0);
    }
    assert_eq!(b.stats().protocol_errors, 1);
    assert_eq!(b.poll_cq(&mut cq, 8), 0);
    assert!(dst.bytes().iter().all(|&x| x == 0xEE), "nothing written from a refused read");
    // Not before the sender's HANDSHAKE says it takes READ_NACK (issue 42).
    let nacked = |forger: &mut rdm4::device::sim::SimDevice| {
        let mut nack = false;
        forger.recv(64, |_, p: &[u8], _| nack |= p.first() == Some(&(PacketType::ReadNack as u8)));
        nack
    };
    assert!(!nacked(&mut forger), "no READ_NACK before the sender's HANDSHAKE");
    let hs = common::handshake(rdm4::wire::extra::READ_NACK | rdm4::wire::extra::RDMA_READ);
    forger.send(to_b, &hs, 0).unwrap();
    for _ in 0..100 {
        b.progress(0);
    }
    assert!(nacked(&mut forger), "the receiver answers a failed read with READ_NACK");
    assert_eq!(b.poll_cq(&mut cq, 8), 0, "the receive still waits for the data");
}
