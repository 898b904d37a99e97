//! The runting read message subprotocol (spec §4.5) over the sim device
//! with RDMA: the runt in RUNTREAD_RTM packets, the rest read, the EOR;
//! the per-peer runt budget, truncation, the nack fallback, and the peers
//! without it (engine/runt.rs).

mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::engine::{Config, CqFlags, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{req_flags, PacketType};
use rdm4::Status;

fn rdma(seed: u64) -> SimConfig {
    SimConfig { rdma: true, ..SimConfig::chaotic(seed) }
}

fn sorted_dedup(mut v: Vec<&'static str>) -> Vec<&'static str> {
    v.sort();
    v.dedup();
    v
}

/// Sends `lens.len()` messages 0 → 1 at once into receives of `cap(len)`
/// bytes (posted first or after the messages arrived), checks every
/// receive got its message (in matching order) and both completions;
/// returns the packet types both ways.
fn messages(
    c: &mut Cluster,
    lens: &[usize],
    cap: impl Fn(usize) -> usize,
    recv_first: bool,
    what: &str,
) -> (Vec<&'static str>, Vec<&'static str>) {
    c.net.clear_log();
    let tag = Some(0x77);
    let mut srcs: Vec<OwnedBuf> =
        lens.iter().enumerate().map(|(i, &l)| OwnedBuf::from_slice(&pattern(l, i as u64))).collect();
    let mut dsts: Vec<OwnedBuf> = lens.iter().map(|&l| OwnedBuf::from_slice(&vec![0xEE; cap(l) + 64])).collect();
    let post = |c: &mut Cluster, dsts: &mut Vec<OwnedBuf>| {
        for (i, (d, &l)) in dsts.iter_mut().zip(lens).enumerate() {
            let b = d.buf().slice(0, cap(l)).unwrap();
            c.eps[1].recv(b, RecvOpts { tag: Some((0x77, 0)), src: None, context: 100 + i as u64 }).unwrap();
        }
    };
    if recv_first {
        post(c, &mut dsts);
    }
    for (i, s) in srcs.iter_mut().enumerate() {
        c.eps[0].send(c.addrs[0][1], s.buf(), SendOpts { tag, cq_data: None, context: i as u64 }).unwrap();
    }
    if !recv_first {
        c.run_until(2_000_000, |c| c.eps[1].pending_ops() >= lens.len());
        post(c, &mut dsts);
    }
    let n = lens.len();
    c.run_until(5_000_000, |c| c.cqs[0].len() == n && c.cqs[1].len() == n);
    c.settle(10_000);
    let s = c.take_cq(0);
    let r = c.take_cq(1);
    assert!(s.iter().all(|e| e.status == Status::Success), "{what}: sends {s:?}");
    for e in &r {
        let i = (e.context - 100) as usize;
        let (len, cap) = (lens[i], cap(lens[i]));
        let want = if cap < len { Status::Trunc } else { Status::Success };
        assert_eq!(
            (e.status, e.len, e.flags),
            (want, cap.min(len) as u64, CqFlags::RECV | CqFlags::TAGGED),
            "{what}: {i}"
        );
        let data = pattern(len, i as u64);
        let got = dsts[i].bytes();
        assert!(got[..cap.min(len)] == data[..cap.min(len)], "{what}: message {i} into receive {i}");
        assert!(got[cap.min(len)..].iter().all(|&b| b == 0xEE), "{what}: {i} written past its buffer");
    }
    for i in 0..2 {
        let st = c.eps[i].stats();
        assert_eq!((st.malformed, st.protocol_errors), (0, 0), "{what}: endpoint {i}");
    }
    assert_eq!(c.eps[0].pending_ops() + c.eps[1].pending_ops(), 0, "{what}");
    assert_eq!(c.net.registrations(0), 0, "{what}: the send buffers' registrations are gone");
    (sorted_dedup(c.types_between(0, 1)), sorted_dedup(c.types_between(1, 0)))
}

#[test]
fn long_messages_move_as_a_runt_in_packets_and_one_read() {
    let medium = Config::default().medium_max;
    for seed in [1, 2, 3] {
        for recv_first in [true, false] {
            for len in [medium + 1, 300_000, 1 << 20, 5 << 20] {
                let mut c = Cluster::warm(rdma(seed), vec![Config::default(); 2]);
                let what = format!("seed {seed} recv_first {recv_first} len {len}");
                let (fwd, back) = messages(&mut c, &[len], |l| l, recv_first, &what);
                assert_eq!((fwd, back), (vec!["RUNTREAD_TAGRTM"], vec!["EOR"]), "{what}");
                // More than one RUNTREAD packet: the runt spans packets.
                let runts = c.net.log().iter().filter(|r| r.ptype == PacketType::RuntreadTagRtm as u8).count();
                assert!(runts > 1, "{what}: {runts} RUNTREAD packets");
            }
        }
    }
}

#[test]
fn the_runt_budget_per_peer_bounds_what_travels_in_packets() {
    // 12 messages of 100 KB at once with a 256 KiB budget: the first two
    // take runts (and a third what is left), the others go by plain
    // long-read; all arrive whole, each in its own receive.
    let cfg = Config { runt_size: 256 * 1024, ..Config::default() };
    let mut c = Cluster::warm(rdma(4), vec![cfg.clone(), cfg]);
    let lens = vec![100_000; 12];
    let (fwd, back) = messages(&mut c, &lens, |l| l, true, "budget");
    assert_eq!((fwd, back), (vec!["LONGREAD_TAGRTM", "RUNTREAD_TAGRTM"], vec!["EOR"]));
    // The budget came back: the next message runts again.
    let (fwd, _) = messages(&mut c, &[100_000], |l| l, true, "after");
    assert_eq!(fwd, vec!["RUNTREAD_TAGRTM"]);
}

#[test]
fn a_runting_read_into_a_shorter_buffer_truncates() {
    let mut c = Cluster::warm(rdma(5), vec![Config::default(); 2]);
    // Shorter than the runt, than the message, and empty.
    for cap in [1000, 200_000, 0] {
        let (fwd, back) = messages(&mut c, &[1 << 20], |_| cap, true, &format!("cap {cap}"));
        assert_eq!((fwd, back), (vec!["RUNTREAD_TAGRTM"], vec!["EOR"]), "cap {cap}");
    }
}

#[test]
fn a_failed_read_after_the_runt_is_nacked_and_the_message_comes_by_long_cts() {
    for seed in [6, 7] {
        for recv_first in [true, false] {
            let sim = SimConfig { fail_reads: true, ..rdma(seed) };
            let mut c = Cluster::warm(sim, vec![Config::default(); 2]);
            let what = format!("seed {seed} recv_first {recv_first}");
            let (fwd, back) = messages(&mut c, &[1 << 20], |l| l, recv_first, &what);
            assert_eq!(
                (fwd, back),
                (vec!["CTSDATA", "LONGCTS_TAGRTM", "RUNTREAD_TAGRTM"], vec!["CTS", "READ_NACK"]),
                "{what}"
            );
            let flagged: Vec<u8> = c
                .net
                .log()
                .iter()
                .filter(|r| r.from == 0 && r.flags & req_flags::READ_NACK != 0)
                .map(|r| r.ptype)
                .collect();
            assert_eq!(flagged, vec![PacketType::LongctsTagRtm as u8], "{what}");
        }
    }
}

#[test]
fn peers_without_runting_read_get_long_read_or_long_cts() {
    let len = 1 << 20;
    let no_runt = Config { features_off: rdm4::wire::extra::RUNT, ..Config::default() };
    // Either side without it: plain long-read.
    for cfgs in [vec![Config::default(), no_runt.clone()], vec![no_runt, Config::default()]] {
        let mut c = Cluster::warm(rdma(8), cfgs);
        let (fwd, back) = messages(&mut c, &[len], |l| l, true, "no runt");
        assert_eq!((fwd, back), (vec!["LONGREAD_TAGRTM"], vec!["EOR"]));
    }
    // Budget 0: plain long-read.
    let zero = Config { runt_size: 0, ..Config::default() };
    let mut c = Cluster::warm(rdma(9), vec![zero, Config::default()]);
    let (fwd, _) = messages(&mut c, &[len], |l| l, true, "budget 0");
    assert_eq!(fwd, vec!["LONGREAD_TAGRTM"]);
    // A legacy peer: long-CTS.
    let legacy = Config { legacy: true, ..Config::default() };
    let mut c = Cluster::warm(rdma(10), vec![Config::default(), legacy]);
    let (fwd, _) = messages(&mut c, &[len], |l| l, true, "legacy");
    assert_eq!(fwd, vec!["CTSDATA", "LONGCTS_TAGRTM"]);
}
