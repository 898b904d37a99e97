//! Scenario tests of every subprotocol over the sim device: data, completions
//! and the packet types on the wire, across sizes and reordering seeds.

mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, CqFlags, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::PacketType;
use rdm4::Status;

const SEEDS: [u64; 3] = [1, 2, 3];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Proto {
    Eager,
    Medium,
    Longcts,
}

fn proto_for(c: &Cluster, len: usize, tagged: bool) -> Proto {
    if len <= c.eps[0].eager_max(tagged) {
        Proto::Eager
    } else if len <= Config::default().medium_max {
        Proto::Medium
    } else {
        Proto::Longcts
    }
}

/// One message from endpoint 0 to endpoint 1, checked end to end.
fn one_message(seed: u64, len: usize, tagged: bool, recv_first: bool) {
    let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
    let data = pattern(len, seed ^ len as u64);
    let mut src = OwnedBuf::from_slice(&data);
    let mut dst = OwnedBuf::zeroed(len);
    let (to1, from0) = (c.addrs[0][1], c.addrs[1][0]);
    let tag = tagged.then_some(0xABCD_0000_0000_0042);
    let ropts = RecvOpts { tag: tag.map(|t| (t, 0)), src: None, context: 22 };
    if recv_first {
        c.eps[1].recv(dst.buf(), ropts).unwrap();
    }
    c.eps[0].send(to1, src.buf(), SendOpts { tag, cq_data: None, context: 11 }).unwrap();
    if !recv_first {
        c.run_until(200_000, |c| c.eps[1].unexpected_messages() > 0 || len == 0 && c.net.in_flight() == 0);
        c.eps[1].recv(dst.buf(), ropts).unwrap();
    }
    c.run_until(2_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
    c.settle(10_000);
    let s = c.take_cq(0);
    let r = c.take_cq(1);
    let what = format!("seed {seed} len {len} tagged {tagged} recv_first {recv_first}");
    assert_eq!(s.len(), 1, "{what}");
    assert_eq!(r.len(), 1, "{what}");
    let kind = if tagged { CqFlags::TAGGED } else { CqFlags::MSG };
    assert_eq!(
        (s[0].status, s[0].context, s[0].len, s[0].flags),
        (Status::Success, 11, len as u64, CqFlags::SEND | kind),
        "{what}"
    );
    assert_eq!(
        (r[0].status, r[0].context, r[0].len, r[0].flags, r[0].src, r[0].tag),
        (Status::Success, 22, len as u64, CqFlags::RECV | kind, from0, tag.unwrap_or(0)),
        "{what}"
    );
    assert!(dst.bytes() == data, "{what}: data differs");
    let t = if tagged { "TAG" } else { "MSG" };
    let (fwd, back): (Vec<String>, Vec<&str>) = match proto_for(&c, len, tagged) {
        Proto::Eager => (vec![format!("EAGER_{t}RTM")], vec!["HANDSHAKE"]),
        Proto::Medium => (vec![format!("MEDIUM_{t}RTM")], vec!["HANDSHAKE"]),
        Proto::Longcts => (vec![format!("LONGCTS_{t}RTM"), "CTSDATA".into()], vec!["CTS", "HANDSHAKE"]),
    };
    let mut fwd_want: Vec<&str> = fwd.iter().map(String::as_str).collect();
    fwd_want.push("HANDSHAKE");
    fwd_want.sort();
    let mut fwd_got = c.types_between(0, 1);
    fwd_got.sort();
    let mut back_got = c.types_between(1, 0);
    back_got.sort();
    assert_eq!(fwd_got, fwd_want, "{what}: packets 0->1");
    assert_eq!(back_got, back, "{what}: packets 1->0");
    let st = c.eps[1].stats();
    assert_eq!((st.malformed, st.protocol_errors, st.stale_connid), (0, 0, 0), "{what}");
    assert_eq!(c.eps[0].pending_ops() + c.eps[1].pending_ops(), 0, "{what}");
}

fn sizes(c: &Cluster, tagged: bool) -> Vec<usize> {
    let e = c.eps[0].eager_max(tagged);
    vec![0, 1, e, e + 1, 30_000, Config::default().medium_max, Config::default().medium_max + 1, 1 << 20]
}

#[test]
fn two_sided_every_protocol_size_and_seed_untagged() {
    let probe = Cluster::new(1, SimConfig::default(), Config::default());
    for seed in SEEDS {
        for len in sizes(&probe, false) {
            one_message(seed, len, false, seed % 2 == 0);
        }
    }
}

#[test]
fn two_sided_every_protocol_size_and_seed_tagged() {
    let probe = Cluster::new(1, SimConfig::default(), Config::default());
    for seed in SEEDS {
        for len in sizes(&probe, true) {
            one_message(seed, len, true, seed % 2 == 1);
        }
    }
}

#[test]
fn unexpected_path_for_every_protocol() {
    let probe = Cluster::new(1, SimConfig::default(), Config::default());
    for tagged in [false, true] {
        for len in sizes(&probe, tagged) {
            one_message(9, len, tagged, false);
        }
    }
}

#[test]
fn sixty_four_mib_long_cts_message() {
    one_message(4, 64 << 20, true, true);
    one_message(5, 64 << 20, false, false);
}

#[test]
fn tagged_receive_with_ignore_mask_matches_masked_bits_only() {
    let mut c = Cluster::new(2, SimConfig::chaotic(11), Config::default());
    let to1 = c.addrs[0][1];
    let mut a = OwnedBuf::from_slice(b"first");
    let mut b = OwnedBuf::from_slice(b"second");
    let mut r = OwnedBuf::zeroed(16);
    // The receive wants tag 0x1200 in the high byte and ignores the low byte.
    c.eps[1].recv(r.buf(), RecvOpts { tag: Some((0x1200, 0xff)), src: None, context: 1 }).unwrap();
    c.eps[0].send(to1, a.buf(), SendOpts { tag: Some(0x1300), ..Default::default() }).unwrap();
    c.eps[0].send(to1, b.buf(), SendOpts { tag: Some(0x12ee), ..Default::default() }).unwrap();
    c.run_until(100_000, |c| !c.cqs[1].is_empty());
    let e = c.take_cq(1);
    assert_eq!((e[0].tag, e[0].len), (0x12ee, 6));
    assert_eq!(&r.bytes()[..6], b"second");
    // The 0x1300 message is still waiting, unexpected.
    assert!(c.eps[1].unexpected_bytes() > 0 && c.eps[1].unexpected_messages() == 1);
    let mut r2 = OwnedBuf::zeroed(16);
    c.eps[1].recv(r2.buf(), RecvOpts { tag: Some((0x1300, 0)), src: None, context: 2 }).unwrap();
    c.run_until(100_000, |c| !c.cqs[1].is_empty());
    assert_eq!(&r2.bytes()[..5], b"first");
}

#[test]
fn directed_receive_takes_only_from_its_source_and_untagged_is_separate_from_tagged() {
    let mut c = Cluster::new(3, SimConfig::chaotic(12), Config::default());
    let (from1, from2) = (c.addrs[0][1], c.addrs[0][2]);
    let mut r_from2 = OwnedBuf::zeroed(8);
    let mut r_tagged = OwnedBuf::zeroed(8);
    c.eps[0].recv(r_from2.buf(), RecvOpts { tag: None, src: Some(from2), context: 2 }).unwrap();
    c.eps[0].recv(r_tagged.buf(), RecvOpts { tag: Some((7, 0)), src: None, context: 3 }).unwrap();
    let mut m1 = OwnedBuf::from_slice(b"from-1");
    let mut m2 = OwnedBuf::from_slice(b"from-2");
    let (a10, a20) = (c.addrs[1][0], c.addrs[2][0]);
    c.eps[1].send(a10, m1.buf(), SendOpts::default()).unwrap();
    c.settle(10_000);
    assert!(c.cqs[0].is_empty(), "untagged message from 1 must match neither receive");
    c.eps[2].send(a20, m2.buf(), SendOpts::default()).unwrap();
    c.run_until(100_000, |c| !c.cqs[0].is_empty());
    let e = c.take_cq(0);
    assert_eq!((e.len(), e[0].context, e[0].src), (1, 2, from2));
    assert_eq!(&r_from2.bytes()[..6], b"from-2");
    let mut any = OwnedBuf::zeroed(8);
    c.eps[0].recv(any.buf(), RecvOpts { tag: None, src: Some(from1), context: 4 }).unwrap();
    c.run_until(100_000, |c| !c.cqs[0].is_empty());
    assert_eq!(&any.bytes()[..6], b"from-1");
}

fn ordered_stream(cfg: Config, seed: u64, count: usize) {
    let mut c = Cluster::new(2, SimConfig::chaotic(seed), cfg);
    let to1 = c.addrs[0][1];
    let lens: Vec<usize> = (0..count).map(|i| [3, 100, 9000, 70_000][i % 4]).collect();
    let mut srcs: Vec<OwnedBuf> =
        lens.iter().enumerate().map(|(i, &l)| OwnedBuf::from_slice(&pattern(l, i as u64))).collect();
    let mut dsts: Vec<OwnedBuf> = lens.iter().map(|&l| OwnedBuf::zeroed(l)).collect();
    for (i, d) in dsts.iter_mut().enumerate() {
        c.eps[1].recv(d.buf(), RecvOpts { context: i as u64, ..Default::default() }).unwrap();
    }
    for (i, s) in srcs.iter_mut().enumerate() {
        c.eps[0].send(to1, s.buf(), SendOpts { context: i as u64, ..Default::default() }).unwrap();
    }
    c.run_until(2_000_000, |c| c.cqs[1].len() == count && c.cqs[0].len() == count);
    for (i, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(lens[i], i as u64), "message {i} out of order or corrupt");
    }
    let ctx: Vec<u64> = c.cqs[1].iter().map(|e| e.context).collect();
    assert!(ctx.iter().all(|&x| x < count as u64));
}

#[test]
fn send_after_send_order_holds_over_a_reordering_device() {
    for seed in SEEDS {
        ordered_stream(Config::default(), seed, 40);
    }
}

#[test]
fn msg_id_wraps_around_2_pow_32() {
    let cfg = Config { first_msg_id: u32::MAX - 10, ..Config::default() };
    ordered_stream(cfg, 21, 30);
}

fn truncation(len: usize, cap: usize) {
    let mut c = Cluster::new(2, SimConfig::chaotic(31), Config::default());
    let to1 = c.addrs[0][1];
    let data = pattern(len, 77);
    let mut src = OwnedBuf::from_slice(&data);
    let mut big = OwnedBuf::from_slice(&vec![0xEEu8; cap + 4096]);
    let dst = big.buf().slice(0, cap).unwrap();
    c.eps[1].recv(dst, RecvOpts::default()).unwrap();
    c.eps[0].send(to1, src.buf(), SendOpts::default()).unwrap();
    c.run_until(1_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
    let r = c.take_cq(1);
    assert_eq!((r[0].status, r[0].len, r[0].olen), (Status::Trunc, cap as u64, len as u64), "len {len}");
    assert_eq!(c.cqs[0][0].status, Status::Success);
    assert_eq!(&big.bytes()[..cap], &data[..cap]);
    assert!(big.bytes()[cap..].iter().all(|&b| b == 0xEE), "wrote past the buffer (len {len})");
}

#[test]
fn truncation_reports_both_lengths_and_writes_nothing_past_the_buffer() {
    truncation(100, 10);
    truncation(30_000, 1000);
    truncation(300_000, 5000);
    truncation(300_000, 0);
}

#[test]
fn remote_cq_data_reaches_the_receiver() {
    let mut c = Cluster::new(2, SimConfig::chaotic(41), Config::default());
    let to1 = c.addrs[0][1];
    for (i, len) in [8usize, 20_000, 200_000].into_iter().enumerate() {
        let mut s = OwnedBuf::zeroed(len);
        let mut d = OwnedBuf::zeroed(len);
        c.eps[1].recv(d.buf(), RecvOpts::default()).unwrap();
        c.eps[0].send(to1, s.buf(), SendOpts { cq_data: Some(0xDA7A + i as u64), ..Default::default() }).unwrap();
        c.run_until(1_000_000, |c| !c.cqs[1].is_empty());
        let e = c.take_cq(1);
        assert!(e[0].flags.contains(CqFlags::REMOTE_CQ_DATA));
        assert_eq!(e[0].data, 0xDA7A + i as u64);
    }
}

#[test]
fn unexpected_messages_are_bounded_and_the_sender_is_held_back() {
    let limit = 64 * 1024;
    let cfg = Config { unexpected_limit: limit, ..Config::default() };
    let mut c = Cluster::new(2, SimConfig { inbox_capacity: 32, ..SimConfig::chaotic(51) }, cfg);
    let to1 = c.addrs[0][1];
    let n = 200;
    let mut srcs: Vec<OwnedBuf> = (0..n).map(|i| OwnedBuf::from_slice(&pattern(4000, i))).collect();
    for s in srcs.iter_mut() {
        c.eps[0].send(to1, s.buf(), SendOpts::default()).unwrap();
    }
    let mut peak = 0;
    for _ in 0..5000 {
        c.step();
        c.net.advance_to_next();
        peak = peak.max(c.eps[1].unexpected_bytes());
    }
    // Held, not dropped: bounded by the limit plus one receive batch.
    assert!(peak <= limit + 64 * 8192, "peak {peak}");
    assert!(c.cqs[0].len() < n as usize, "the sender must be held back");
    let mut dsts: Vec<OwnedBuf> = (0..n).map(|_| OwnedBuf::zeroed(4000)).collect();
    for d in dsts.iter_mut() {
        c.eps[1].recv(d.buf(), RecvOpts::default()).unwrap();
    }
    c.run_until(1_000_000, |c| c.cqs[1].len() == n as usize && c.cqs[0].len() == n as usize);
    for (i, d) in dsts.iter().enumerate() {
        assert!(d.bytes() == pattern(4000, i as u64), "message {i}");
    }
}

#[test]
fn many_concurrent_long_messages_in_both_directions_do_not_deadlock() {
    let cfg = Config { max_credits: 2, credit_request: 2, ..Config::default() };
    let mut c = Cluster::new(4, SimConfig { inbox_capacity: 16, ..SimConfig::chaotic(61) }, cfg);
    let len = 300_000;
    let mut bufs = Vec::new();
    for i in 0..4 {
        for j in 0..4 {
            if i == j {
                continue;
            }
            for k in 0..3 {
                let mut s = OwnedBuf::from_slice(&pattern(len, (i * 16 + j * 4 + k) as u64));
                let mut d = OwnedBuf::zeroed(len);
                let (ij, ji) = (c.addrs[i][j], c.addrs[j][i]);
                c.eps[j].recv(d.buf(), RecvOpts { tag: Some((k as u64, 0)), src: Some(ji), context: 0 }).unwrap();
                c.eps[i].send(ij, s.buf(), SendOpts { tag: Some(k as u64), ..Default::default() }).unwrap();
                bufs.push((i, j, k, s, d));
            }
        }
    }
    c.run_until(3_000_000, |c| c.cqs.iter().map(Vec::len).sum::<usize>() == 2 * 36);
    for (i, j, k, _, d) in &bufs {
        assert!(d.bytes() == pattern(len, (i * 16 + j * 4 + k) as u64), "{i}->{j} #{k}");
    }
}

/// Two endpoints and a registered region on endpoint 1.
fn rma_pair(seed: u64, region_len: usize, access: Access) -> (Cluster, OwnedBuf, u64) {
    let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
    let mut region = OwnedBuf::from_slice(&pattern(region_len, 999));
    let key = c.eps[1].mr_reg(region.buf(), access).unwrap();
    (c, region, key)
}

#[test]
fn emulated_write_eager_and_long_cts_with_dc_and_remote_cq_data() {
    for seed in SEEDS {
        for len in [0usize, 1, 100, 8000, 100_000, 1 << 20] {
            let (mut c, mut region, key) = rma_pair(seed, (1 << 20) + 64, Access::REMOTE_WRITE | Access::REMOTE_READ);
            let before = region.bytes().to_vec();
            let data = pattern(len, seed + len as u64);
            let mut src = OwnedBuf::from_slice(&data);
            let addr = region.buf().addr() + 32;
            let to1 = c.addrs[0][1];
            c.eps[0].write(to1, src.buf(), RemoteBuf { addr, key }, Some(0x77), 5).unwrap();
            c.run_until(1_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
            c.settle(10_000);
            let w = c.take_cq(0);
            assert_eq!((w[0].status, w[0].context, w[0].flags), (Status::Success, 5, CqFlags::RMA | CqFlags::WRITE));
            let t = c.take_cq(1);
            assert_eq!((t[0].data, t[0].len), (0x77, len as u64));
            assert!(t[0].flags.contains(CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA));
            let mut want = before.clone();
            want[32..32 + len].copy_from_slice(&data);
            assert!(region.bytes() == want, "seed {seed} len {len}");
            let mut fwd = c.types_between(0, 1);
            fwd.sort();
            let eager = len <= 8000;
            let mut want_types = if eager { vec!["DC_EAGER_RTW"] } else { vec!["CTSDATA", "DC_LONGCTS_RTW"] };
            want_types.extend(["EAGER_RTW", "HANDSHAKE"]); // the handshake trigger
            want_types.sort();
            assert_eq!(fwd, want_types, "len {len}");
            let mut back = c.types_between(1, 0);
            back.sort();
            let mut back_want = if eager { vec!["HANDSHAKE", "RECEIPT"] } else { vec!["CTS", "HANDSHAKE", "RECEIPT"] };
            back_want.sort();
            assert_eq!(back, back_want, "len {len}");
        }
    }
}

#[test]
fn emulated_read_short_and_long_cts() {
    for seed in SEEDS {
        for len in [1usize, 100, 8000, 100_000, 1 << 20] {
            let (mut c, mut region, key) = rma_pair(seed, (1 << 20) + 64, Access::REMOTE_READ);
            let mut dst = OwnedBuf::zeroed(len);
            let addr = region.buf().addr() + 16;
            let to1 = c.addrs[0][1];
            c.eps[0].read(to1, dst.buf(), RemoteBuf { addr, key }, 3).unwrap();
            c.run_until(1_000_000, |c| !c.cqs[0].is_empty());
            c.settle(10_000);
            let e = c.take_cq(0);
            assert_eq!((e[0].status, e[0].context, e[0].len), (Status::Success, 3, len as u64));
            assert!(dst.bytes() == &region.bytes()[16..16 + len], "seed {seed} len {len}");
            assert!(c.cqs[1].is_empty(), "a read gives the target no completion");
            let short = len <= 8192 - 24;
            let mut fwd = c.types_between(0, 1);
            fwd.sort();
            let mut want: Vec<&str> = if short { vec!["SHORT_RTR"] } else { vec!["CTS", "LONGCTS_RTR"] };
            want.push("HANDSHAKE");
            want.sort();
            if !short && len <= 64 * (8192 - 32) {
                want.retain(|t| *t != "CTS"); // the first window covers it all
            }
            assert_eq!(fwd, want, "len {len}");
            let mut back = c.types_between(1, 0);
            back.sort();
            let mut back_want =
                if short { vec!["HANDSHAKE", "READRSP"] } else { vec!["CTSDATA", "HANDSHAKE", "READRSP"] };
            back_want.sort();
            assert_eq!(back, back_want, "len {len}");
        }
    }
}

#[test]
fn remote_access_violations_fail_the_requester_and_touch_nothing() {
    for (access, what) in [(Access::REMOTE_READ, "write to read-only"), (Access::REMOTE_WRITE, "read of write-only")] {
        for len in [8usize, 100_000] {
            let (mut c, mut region, key) = rma_pair(71, 200_000, access);
            let before = region.bytes().to_vec();
            let base = region.buf().addr();
            let to1 = c.addrs[0][1];
            let mut buf = OwnedBuf::zeroed(len);
            // Wrong key, out of bounds, and the missing permission.
            let cases = [
                RemoteBuf { addr: base, key: key ^ 1 },
                RemoteBuf { addr: base + 200_000 - len as u64 + 1, key },
                RemoteBuf { addr: base - 1, key },
                RemoteBuf { addr: base, key },
            ];
            for (i, rb) in cases.into_iter().enumerate() {
                let is_write = access == Access::REMOTE_READ;
                if i == 3 {
                    // The permitted direction works; the other one is refused.
                }
                if is_write {
                    c.eps[0].write(to1, buf.buf(), rb, None, i as u64).unwrap();
                } else {
                    c.eps[0].read(to1, buf.buf(), rb, i as u64).unwrap();
                }
                c.run_until(1_000_000, |c| !c.cqs[0].is_empty());
                let e = c.take_cq(0);
                assert_eq!(e[0].status, Status::RemoteAccess, "{what} case {i} len {len}");
                // The target reported it: its own error number is the detail.
                assert_eq!(e[0].detail, Status::RemoteAccess.code().unsigned_abs(), "{what} case {i}");
            }
            assert!(region.bytes() == before, "{what}: target memory changed");
            assert!(c.cqs[1].is_empty());
            assert!(c.eps[1].stats().access_errors >= 4);
        }
    }
}

#[test]
fn handshake_race_both_sides_send_first() {
    for seed in SEEDS {
        let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
        let (a, b) = (c.addrs[0][1], c.addrs[1][0]);
        let mut s0 = OwnedBuf::from_slice(b"zero");
        let mut s1 = OwnedBuf::from_slice(b"one!");
        let mut r0 = OwnedBuf::zeroed(4);
        let mut r1 = OwnedBuf::zeroed(4);
        c.eps[0].recv(r0.buf(), RecvOpts::default()).unwrap();
        c.eps[1].recv(r1.buf(), RecvOpts::default()).unwrap();
        c.eps[0].send(a, s0.buf(), SendOpts::default()).unwrap();
        c.eps[1].send(b, s1.buf(), SendOpts::default()).unwrap();
        c.run_until(100_000, |c| c.cqs[0].len() == 2 && c.cqs[1].len() == 2);
        c.settle(1000);
        assert_eq!(r0.bytes(), b"one!");
        assert_eq!(r1.bytes(), b"zero");
        // Exactly one HANDSHAKE each way.
        let hs = c.net.log().iter().filter(|r| r.ptype == 9).count();
        assert_eq!(hs, 2);
        // After the handshake, REQs drop the raw address header: a second
        // message is shorter on the wire than the first.
        c.net.clear_log();
        c.eps[1].recv(r1.buf(), RecvOpts::default()).unwrap();
        c.eps[0].send(a, s0.buf(), SendOpts::default()).unwrap();
        c.run_until(100_000, |c| c.cqs[1].len() == 3);
        let l = c.net.log();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].len, 8 + 4 + 4, "EAGER_MSGRTM with connid header, no raw address");
    }
}

#[test]
fn packet_from_an_unknown_sender_is_learnt_from_its_raw_address() {
    let net = rdm4::device::sim::SimNet::new(SimConfig::chaotic(81));
    let mut a = rdm4::engine::Endpoint::new(net.device(), Config::default());
    let mut b = rdm4::engine::Endpoint::new(net.device(), Config::default());
    // Only the sender knows the receiver.
    let to_b = a.av_insert(&b.addr()).unwrap();
    let mut s = OwnedBuf::from_slice(b"hello");
    let mut r = OwnedBuf::zeroed(5);
    b.recv(r.buf(), RecvOpts::default()).unwrap();
    a.send(to_b, s.buf(), SendOpts::default()).unwrap();
    let mut cq = Vec::new();
    for _ in 0..10_000 {
        a.progress(net.now());
        b.progress(net.now());
        b.poll_cq(&mut cq, 10);
        a.poll_cq(&mut Vec::new(), 10);
        net.advance(1000);
        if !cq.is_empty() {
            break;
        }
    }
    assert_eq!(cq.len(), 1);
    assert_eq!(r.bytes(), b"hello");
    // The learnt sender is the same handle the application gets by inserting it.
    assert_eq!(b.av_insert(&a.addr()).unwrap(), cq[0].src);
    // Reply through it.
    let mut back = OwnedBuf::from_slice(b"hi");
    let mut got = OwnedBuf::zeroed(2);
    a.recv(got.buf(), RecvOpts::default()).unwrap();
    b.send(cq[0].src, back.buf(), SendOpts::default()).unwrap();
    let mut cqa = Vec::new();
    for _ in 0..10_000 {
        a.progress(net.now());
        b.progress(net.now());
        a.poll_cq(&mut cqa, 10);
        net.advance(1000);
        if cqa.iter().any(|e| e.flags.contains(CqFlags::RECV)) {
            break;
        }
    }
    assert_eq!(got.bytes(), b"hi");
}

#[test]
fn a_non_req_packet_from_an_unknown_sender_is_dropped() {
    let net = rdm4::device::sim::SimNet::new(SimConfig::default());
    let mut a = rdm4::engine::Endpoint::new(net.device(), Config::default());
    let b = rdm4::engine::Endpoint::new(net.device(), Config::default());
    let mut dev = net.device();
    use rdm4::device::Device;
    let ah = dev.insert(&a.addr()).unwrap();
    let cts = rdm4::wire::Cts { send_id: 1, recv_id: 2, recv_length: 100, ..Default::default() };
    let mut buf = [0u8; 64];
    let n = cts.emit(&mut buf).unwrap();
    dev.send(ah, &buf[..n], 0).unwrap();
    a.progress(0);
    assert_eq!(a.stats().unknown_sender, 1);
    drop(b);
}

#[test]
fn close_with_handshakes_in_flight_is_harmless() {
    for seed in SEEDS {
        let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
        let a = c.addrs[0][1];
        let mut s = OwnedBuf::from_slice(b"bye");
        let mut r = OwnedBuf::zeroed(3);
        c.eps[1].recv(r.buf(), RecvOpts::default()).unwrap();
        c.eps[0].send(a, s.buf(), SendOpts::default()).unwrap();
        // Receive the message (which queues the HANDSHAKE), then close at once.
        c.run_until(100_000, |c| !c.cqs[1].is_empty());
        let closed = c.eps.pop().unwrap();
        drop(closed);
        for _ in 0..100 {
            let now = c.net.now();
            c.eps[0].progress(now);
            c.eps[0].poll_cq(&mut c.cqs[0], 100);
            c.net.advance(10_000);
        }
        assert!(c.cqs[0].iter().all(|e| e.status == Status::Success || e.status == Status::PeerUnreachable));
        assert_eq!(c.eps[0].pending_ops(), 0);
    }
}

#[test]
fn a_vanished_peer_fails_every_operation_towards_it() {
    let mut c = Cluster::new(3, SimConfig::chaotic(91), Config::default());
    let (to1, to2) = (c.addrs[0][1], c.addrs[0][2]);
    let mut big = OwnedBuf::zeroed(1 << 20);
    let mut rd = OwnedBuf::zeroed(100_000);
    c.eps[0].send(to1, big.buf(), SendOpts { context: 1, ..Default::default() }).unwrap();
    c.eps[0].read(to1, rd.buf(), RemoteBuf { addr: 0x1000, key: 1 }, 2).unwrap();
    for _ in 0..5 {
        c.step();
    }
    c.net.kill(c.eps[1].device().node());
    c.run_until(100_000, |c| c.cqs[0].len() == 2);
    assert!(c.cqs[0].iter().all(|e| e.status == Status::PeerUnreachable), "{:?}", c.cqs[0]);
    // The survivors keep working.
    let mut s = OwnedBuf::from_slice(b"still here");
    let mut r = OwnedBuf::zeroed(10);
    c.eps[2].recv(r.buf(), RecvOpts::default()).unwrap();
    c.eps[0].send(to2, s.buf(), SendOpts::default()).unwrap();
    c.run_until(100_000, |c| !c.cqs[2].is_empty());
    assert_eq!(r.bytes(), b"still here");
    assert_eq!(c.eps[0].send(to1, s.buf(), SendOpts::default()), Err(Status::PeerUnreachable));
}

#[test]
fn legacy_baseline_peer_interoperates() {
    let legacy = Config { legacy: true, ..Config::default() };
    let mut c = Cluster::with_configs(SimConfig::chaotic(101), vec![Config::default(), legacy]);
    let mut region = OwnedBuf::zeroed(4096);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let to1 = c.addrs[0][1];
    let mut s = OwnedBuf::from_slice(&pattern(100_000, 5));
    let mut d = OwnedBuf::zeroed(100_000);
    c.eps[1].recv(d.buf(), RecvOpts::default()).unwrap();
    c.eps[0].send(to1, s.buf(), SendOpts::default()).unwrap();
    let mut w = OwnedBuf::from_slice(b"written");
    c.eps[0].write(to1, w.buf(), RemoteBuf { addr: region.buf().addr(), key }, None, 9).unwrap();
    c.run_until(1_000_000, |c| c.cqs[0].len() == 2 && !c.cqs[1].is_empty());
    c.settle(10_000);
    assert!(d.bytes() == pattern(100_000, 5));
    assert_eq!(&region.bytes()[..7], b"written");
    let types = c.all_types();
    for t in &types {
        assert!(!t.starts_with("DC_") && *t != "RECEIPT" && *t != "PEER_ERROR", "legacy peer got {t}");
    }
    // The legacy side sent no connid anywhere.
    assert_eq!(c.eps[0].stats().stale_connid, 0);
}

#[test]
fn direct_read_and_write_use_the_device_rdma_when_both_sides_offer_it() {
    for seed in SEEDS {
        let sim = SimConfig { rdma: true, ..SimConfig::chaotic(seed) };
        let mut c = Cluster::new(2, sim, Config::default());
        let mut region = OwnedBuf::from_slice(&pattern(1 << 20, 5));
        let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
        let base = region.buf().addr();
        let to1 = c.addrs[0][1];
        let data = pattern(300_000, 6);
        let mut src = OwnedBuf::from_slice(&data);
        let mut back = OwnedBuf::zeroed(300_000);
        c.eps[0].write(to1, src.buf(), RemoteBuf { addr: base + 100, key }, None, 1).unwrap();
        c.run_until(100_000, |c| c.cqs[0].len() == 1);
        c.eps[0].read(to1, back.buf(), RemoteBuf { addr: base + 100, key }, 2).unwrap();
        // A bad key fails through the device's own check.
        let mut bad = OwnedBuf::zeroed(8);
        c.eps[0].read(to1, bad.buf(), RemoteBuf { addr: base, key: key ^ 7 }, 3).unwrap();
        c.run_until(100_000, |c| c.cqs[0].len() == 3);
        let st: Vec<_> = c.cqs[0].iter().map(|e| (e.context, e.status)).collect();
        assert_eq!(st, vec![(1, Status::Success), (2, Status::Success), (3, Status::RemoteAccess)]);
        assert!(back.bytes() == data);
        assert!(region.bytes()[100..300_100] == data[..]);
        // Only the handshake went over packets.
        let mut types = c.all_types();
        types.sort();
        assert_eq!(types, vec!["EAGER_RTW", "HANDSHAKE"], "seed {seed}");
        // A write with CQ data is emulated, since the target must complete it.
        let mut small = OwnedBuf::from_slice(b"cq");
        c.eps[0].write(to1, small.buf(), RemoteBuf { addr: base, key }, Some(9), 4).unwrap();
        c.run_until(100_000, |c| c.cqs[0].len() == 4 && !c.cqs[1].is_empty());
        assert_eq!(c.cqs[1][0].data, 9);
    }
}

/// Eager messages that arrive before any receive (after the handshakes, in
/// order: the engine keeps them whole, without operation entries) match
/// later receives by source, tag and ignore mask in arrival order, carry
/// their CQ data, and truncate into a short buffer without writing past it.
#[test]
fn unexpected_eager_messages_match_by_source_and_tag_in_order_and_truncate() {
    let mut c = Cluster::new(3, SimConfig::default(), Config::default());
    // Handshakes first, with one expected message from each sender.
    for s in [0, 2] {
        let mut b = OwnedBuf::zeroed(8);
        c.eps[1].recv(b.buf(), RecvOpts::default()).unwrap();
        let mut m = OwnedBuf::from_slice(&[1u8; 8]);
        c.eps[s].send(c.addrs[s][1], m.buf(), SendOpts::default()).unwrap();
        c.run_until(100_000, |c| !c.cqs[1].is_empty());
        c.settle(1000);
        c.take_cq(1);
    }
    let msgs = [(0usize, 5u64, 40usize, Some(77u64)), (0, 6, 30, None), (2, 5, 20, Some(99))];
    let mut srcs: Vec<OwnedBuf> =
        msgs.iter().map(|&(s, t, len, _)| OwnedBuf::from_slice(&pattern(len, s as u64 * 10 + t))).collect();
    for (&(s, tag, _, cq_data), b) in msgs.iter().zip(&mut srcs) {
        let to1 = c.addrs[s][1];
        c.eps[s].send(to1, b.buf(), SendOpts { tag: Some(tag), cq_data, context: 0 }).unwrap();
    }
    c.settle(10_000);
    assert!(c.eps[1].unexpected_bytes() >= 90, "all three wait unexpected");
    assert!(c.take_cq(1).is_empty());
    let (from0, from2) = (c.addrs[1][0], c.addrs[1][2]);
    // From 2 with tag 5: endpoint 2's message, although endpoint 0's tag 5 came first.
    let mut r2 = OwnedBuf::zeroed(64);
    c.eps[1].recv(r2.buf(), RecvOpts { tag: Some((5, 0)), src: Some(from2), context: 1 }).unwrap();
    // Any source, tag 4 ignoring the low two bits: endpoint 0's tag 5, cut to 10 bytes.
    let mut short = OwnedBuf::from_slice(&[0xEEu8; 64]);
    let dst = short.buf().slice(0, 10).unwrap();
    c.eps[1].recv(dst, RecvOpts { tag: Some((4, 3)), src: None, context: 2 }).unwrap();
    let mut r6 = OwnedBuf::zeroed(64);
    c.eps[1].recv(r6.buf(), RecvOpts { tag: Some((6, 0)), src: None, context: 3 }).unwrap();
    c.settle(1000);
    let r = c.take_cq(1);
    assert_eq!(r.len(), 3);
    let want = [
        (1, from2, 5, 20, 0, Status::Success, Some(99)),
        (2, from0, 5, 10, 40, Status::Trunc, Some(77)),
        (3, from0, 6, 30, 0, Status::Success, None),
    ];
    for (e, &(ctx, src, tag, len, olen, status, data)) in r.iter().zip(&want) {
        assert_eq!((e.context, e.src, e.tag, e.len, e.olen, e.status), (ctx, src, tag, len, olen, status), "{e:?}");
        assert_eq!(e.flags.contains(CqFlags::REMOTE_CQ_DATA), data.is_some(), "{e:?}");
        assert_eq!(e.flags & (CqFlags::RECV | CqFlags::TAGGED), CqFlags::RECV | CqFlags::TAGGED);
        if let Some(d) = data {
            assert_eq!(e.data, d);
        }
    }
    assert_eq!(&r2.bytes()[..20], &pattern(20, 25)[..]);
    assert_eq!(&short.bytes()[..10], &pattern(40, 5)[..10]);
    assert!(short.bytes()[10..].iter().all(|&b| b == 0xEE), "wrote past the short buffer");
    assert_eq!(&r6.bytes()[..30], &pattern(30, 6)[..]);
    assert_eq!(c.eps[1].unexpected_bytes(), 0);
}

/// With a large MTU, a medium message still goes in segments of about
/// sqrt(2 KiB × size) (at least 4 KiB), each packet no longer than its
/// segment plus the header — so a lone message is copied in a pipeline —
/// and a message up to `eager_max` goes in one EAGER packet.
#[test]
fn medium_messages_go_in_segments_that_grow_with_the_square_root_of_the_size() {
    let sim = SimConfig { mtu: 65_536, ..SimConfig::chaotic(7) };
    let cfg = Config::default();
    for (len, segs) in [(cfg.eager_max, 1usize), (cfg.eager_max + 1, 3), (40_000, 5), (65_536, 6)] {
        let mut c = Cluster::new(2, sim.clone(), cfg.clone());
        c.net.clear_log();
        let data = pattern(len, len as u64);
        let mut src = OwnedBuf::from_slice(&data);
        let mut dst = OwnedBuf::zeroed(len);
        c.eps[1].recv(dst.buf(), RecvOpts::default()).unwrap();
        c.eps[0].send(c.addrs[0][1], src.buf(), SendOpts::default()).unwrap();
        c.run_until(2_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
        assert_eq!(c.take_cq(1)[0].status, Status::Success, "len {len}");
        assert!(dst.bytes() == data.as_slice(), "len {len}: data");
        let data_pkts: Vec<_> = c.net.log().into_iter().filter(|r| r.from == 0 && r.len > 1000).collect();
        let want = if segs == 1 { "EAGER_MSGRTM" } else { "MEDIUM_MSGRTM" };
        assert!(
            data_pkts.iter().all(|r| PacketType::from_u8(r.ptype).map(|t| t.name()) == Some(want)),
            "len {len}: {data_pkts:?}"
        );
        assert_eq!(data_pkts.len(), segs, "len {len}: {data_pkts:?}");
        let seg = ((((len as f64) * 2048.0).sqrt() as usize + 63) & !63).max(4096);
        if segs > 1 {
            assert!(data_pkts.iter().all(|r| r.len <= seg + 64), "len {len}, segment {seg}: {data_pkts:?}");
        }
    }
}

#[test]
fn eager_sends_queued_behind_a_full_device_arrive_in_order_and_cancel_cleanly() {
    let sim = SimConfig { inbox_capacity: 4, ..SimConfig::default() };
    let mut c = Cluster::new(2, sim, Config::default());
    // Settle the handshakes so the sends below take the eager fast path.
    let mut warm = OwnedBuf::zeroed(8);
    c.eps[1].recv(warm.buf(), RecvOpts::default()).unwrap();
    let mut one = OwnedBuf::from_slice(b"hello");
    c.eps[0].send(c.addrs[0][1], one.buf(), SendOpts::default()).unwrap();
    c.run_until(1_000, |c| c.cqs[0].len() == 1 && c.cqs[1].len() == 1);
    c.settle(100);
    c.take_cq(0);
    c.take_cq(1);
    // 20 messages while the receiver does not progress: 4 fit its inbox,
    // the others wait in the sender's queue without an operation entry.
    let mut srcs: Vec<OwnedBuf> = (0..20u8).map(|i| OwnedBuf::from_slice(&[i; 100])).collect();
    for (i, s) in srcs.iter_mut().enumerate() {
        c.eps[0].send(c.addrs[0][1], s.buf(), SendOpts { context: i as u64, ..Default::default() }).unwrap();
    }
    assert_eq!(c.eps[0].pending_ops(), 16, "the queued sends count as outstanding");
    let mut dsts: Vec<OwnedBuf> = (0..20).map(|_| OwnedBuf::zeroed(100)).collect();
    for (i, d) in dsts.iter_mut().enumerate() {
        c.eps[1].recv(d.buf(), RecvOpts { context: i as u64, ..Default::default() }).unwrap();
    }
    c.run_until(10_000, |c| c.cqs[0].len() == 20 && c.cqs[1].len() == 20);
    let sends: Vec<u64> = c.take_cq(0).iter().map(|e| e.context).collect();
    assert_eq!(sends, (0..20).collect::<Vec<_>>(), "send completions in post order");
    assert!(c.take_cq(1).iter().all(|e| e.status == Status::Success));
    for (i, d) in dsts.iter().enumerate() {
        assert_eq!(d.bytes(), &[i as u8; 100], "message {i} in its receive (send-after-send order)");
    }
    // Queued sends towards an address that is removed complete as canceled.
    for s in srcs.iter_mut().take(10) {
        c.eps[0].send(c.addrs[0][1], s.buf(), SendOpts { context: 99, ..Default::default() }).unwrap();
    }
    assert_eq!(c.eps[0].pending_ops(), 6);
    c.eps[0].av_remove(c.addrs[0][1]).unwrap();
    assert_eq!(c.eps[0].pending_ops(), 0);
    let mut cq = Vec::new();
    c.eps[0].poll_cq(&mut cq, 64);
    let canceled = cq.iter().filter(|e| e.status == Status::Canceled).count();
    assert_eq!((cq.len(), canceled), (10, 6), "4 went out, 6 were canceled in the queue");
}

/// A receiver handed a backlog of eager messages ahead of its receives,
/// then posting `WINDOW` receives before each progress call, goes back to
/// placing messages straight into receives: a call stops after the first
/// message that finds none, so at most one waits unexpected. (Taking a
/// whole batch each call instead, every receive would be satisfied from
/// the unexpected queue and every new message would land there again.)
#[test]
fn a_receiver_behind_its_sender_catches_up() {
    const N: usize = 400;
    const WINDOW: usize = 16;
    let mut c = Cluster::new(2, SimConfig::default(), Config::default());
    let to1 = c.addrs[0][1];
    let tag = Some(5);
    let ropts = |i: usize| RecvOpts { tag: Some((5, 0)), src: None, context: i as u64 };
    // First contact (the HANDSHAKE both ways) out of the way.
    let mut first = OwnedBuf::zeroed(8);
    c.eps[1].recv(first.buf(), ropts(usize::MAX)).unwrap();
    let mut src = OwnedBuf::from_slice(&[7u8; 8]);
    c.eps[0].send(to1, src.buf(), SendOpts { tag, cq_data: None, context: 0 }).unwrap();
    c.run_until(10_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
    c.settle(1_000);
    c.take_cq(1);
    // The backlog: every message is at the receiver before it posts anything.
    for i in 0..N {
        c.eps[0].send(to1, src.buf(), SendOpts { tag, cq_data: None, context: i as u64 + 1 }).unwrap();
    }
    for _ in 0..100 {
        c.eps[0].progress(c.net.now());
    }
    assert_eq!(c.eps[1].unexpected_messages(), 0);
    let mut dst: Vec<OwnedBuf> = (0..N).map(|_| OwnedBuf::zeroed(8)).collect();
    let (mut posted, mut got, mut deepest) = (0, Vec::new(), 0);
    for _ in 0..10 * N {
        while posted < N && posted - got.len() < WINDOW {
            c.eps[1].recv(dst[posted].buf(), ropts(posted)).unwrap();
            posted += 1;
        }
        c.eps[1].progress(c.net.now());
        c.eps[1].poll_cq(&mut got, usize::MAX);
        deepest = deepest.max(c.eps[1].unexpected_messages());
        if got.len() == N {
            break;
        }
    }
    assert_eq!(got.len(), N, "all messages received");
    assert!(got.iter().all(|e| e.status == Status::Success && e.len == 8), "{:?}", &got[..4]);
    assert!(dst.iter().all(|d| d.bytes() == [7u8; 8]), "every receive got its message");
    assert!(deepest <= 1, "{deepest} messages waited unexpected at once");
}

#[test]
fn keepalive_names_the_peers_that_operations_await_and_no_other() {
    let mut c = Cluster::new(3, SimConfig::chaotic(41), Config::default());
    let to1 = c.addrs[0][1];
    // A long message that node 1 has no receive for: its send waits on node 1.
    let data = pattern(1 << 20, 3);
    let mut src = OwnedBuf::from_slice(&data);
    c.eps[0].send(to1, src.buf(), SendOpts { context: 9, ..Default::default() }).unwrap();
    c.settle(10_000);
    assert!(c.cqs[0].is_empty(), "the send cannot complete yet");
    c.eps[0].keepalive();
    assert_eq!(c.eps[0].device_mut().take_awaited(), vec![1], "node 1 awaited, node 2 not");
    // Node 1 takes it: nothing is awaited any more.
    let mut dst = OwnedBuf::zeroed(1 << 20);
    c.eps[1].recv(dst.buf(), RecvOpts { context: 1, ..Default::default() }).unwrap();
    c.run_until(1_000_000, |c| !c.cqs[0].is_empty() && !c.cqs[1].is_empty());
    assert!(dst.bytes() == data.as_slice());
    c.eps[0].keepalive();
    c.eps[1].keepalive();
    assert!(c.eps[0].device_mut().take_awaited().is_empty() && c.eps[1].device_mut().take_awaited().is_empty());
}

#[test]
fn before_a_sleep_the_device_learns_the_awaited_peers_once_per_new_operation() {
    let cfg = SimConfig { responder: true, sleep: true, ..SimConfig::chaotic(43) };
    let mut c = Cluster::new(3, cfg, Config::default());
    // Nothing under way: nothing told, however often it sleeps.
    c.eps[0].trywait();
    assert!(c.eps[0].device_mut().take_awaited().is_empty());
    // A long message that node 1 has no receive for: the sleep tells of it.
    let data = pattern(1 << 20, 5);
    let mut src = OwnedBuf::from_slice(&data);
    c.eps[0].send(c.addrs[0][1], src.buf(), SendOpts { context: 9, ..Default::default() }).unwrap();
    c.settle(10_000);
    assert!(c.cqs[0].is_empty(), "the send cannot complete yet");
    c.eps[0].trywait();
    assert_eq!(c.eps[0].device_mut().take_awaited(), vec![1], "told before the sleep");
    // Sleeping again with no new operation: not told again (its marks
    // stand, and the device asks for more when it wants them).
    c.eps[0].trywait();
    let _ = c.eps[0].sleep_begin();
    c.eps[0].sleep_end();
    assert!(c.eps[0].device_mut().take_awaited().is_empty(), "the same operations walked again");
    // A new one towards node 2: told again, both.
    let mut src2 = OwnedBuf::from_slice(&data);
    c.eps[0].send(c.addrs[0][2], src2.buf(), SendOpts { context: 10, ..Default::default() }).unwrap();
    c.settle(10_000);
    c.eps[0].trywait();
    let mut told = c.eps[0].device_mut().take_awaited();
    told.sort_unstable();
    assert_eq!(told, vec![1, 2]);
}
