//! Extra features and requests between full and reduced endpoints over
//! the sim device: what each side advertises decides the packets, and the
//! fallbacks deliver the same bytes (spec ch. 4).

mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, CqFlags, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{req_flags, PacketType};
use rdm4::Status;

/// Each REQ from `from` to `to`, with
/// whether it carried the raw address header.
fn reqs_with_raw_addr(c: &Cluster, from: usize, to: usize) -> Vec<(&'static str, bool)> {
    c.net
        .log()
        .iter()
        .filter(|r| r.from == from && r.to == to)
        .filter_map(|r| {
            let t = PacketType::from_u8(r.ptype)?;
            t.req_info().map(|_| (t.name(), r.flags & req_flags::RAW_ADDR_HDR != 0))
        })
        .collect()
}

/// Messages of every protocol (eager, medium, long-CTS; tagged and not),
/// a write and a read between 0 and 1 both ways, data checked.
fn traffic(c: &mut Cluster, what: &str) {
    for (a, b) in [(0usize, 1usize), (1, 0)] {
        for (i, len) in [8usize, 40_000, 300_000].into_iter().enumerate() {
            let data = pattern(len, (a * 10 + i) as u64);
            let mut src = OwnedBuf::from_slice(&data);
            let mut dst = OwnedBuf::zeroed(len);
            let tag = (i % 2 == 1).then_some(7);
            c.eps[b].recv(dst.buf(), RecvOpts { tag: tag.map(|t| (t, 0)), ..RecvOpts::default() }).unwrap();
            c.eps[a].send(c.addrs[a][b], src.buf(), SendOpts { tag, ..SendOpts::default() }).unwrap();
            c.run_until(1_000_000, |c| !c.cqs[a].is_empty() && !c.cqs[b].is_empty());
            let (s, r) = (c.take_cq(a), c.take_cq(b));
            assert_eq!((s[0].status, r[0].status), (Status::Success, Status::Success), "{what}: {len} B {a}->{b}");
            assert!(dst.bytes() == data, "{what}: {len} B {a}->{b} data");
        }
        let mut region = OwnedBuf::zeroed(4096);
        let key = c.eps[b].mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        let rb = RemoteBuf { addr: region.buf().addr(), key };
        let mut w = OwnedBuf::from_slice(&pattern(4096, 99));
        c.eps[a].write(c.addrs[a][b], w.buf(), rb, Some(5), 1).unwrap();
        c.run_until(1_000_000, |c| !c.cqs[a].is_empty() && !c.cqs[b].is_empty());
        assert_eq!(c.take_cq(a)[0].status, Status::Success, "{what}: write {a}->{b}");
        c.take_cq(b);
        let mut back = OwnedBuf::zeroed(4096);
        c.eps[a].read(c.addrs[a][b], back.buf(), rb, 2).unwrap();
        c.run_until(1_000_000, |c| !c.cqs[a].is_empty());
        assert_eq!(c.take_cq(a)[0].status, Status::Success, "{what}: read {a}->{b}");
        assert!(back.bytes() == pattern(4096, 99) && region.bytes() == pattern(4096, 99), "{what}: rma {a}->{b}");
        c.eps[b].mr_dereg(key).unwrap();
    }
}

#[test]
fn a_peer_that_asks_for_a_constant_header_length_gets_the_raw_address_in_every_req() {
    for seed in [1, 2, 3] {
        let asks = Config { constant_header: true, ..Config::default() };
        let mut c = Cluster::with_configs(SimConfig::chaotic(seed), vec![Config::default(), asks]);
        traffic(&mut c, &format!("seed {seed}"));
        // 0 honours 1's request: every REQ it sent carries the raw address
        // header, before and after the HANDSHAKE.
        let to1 = reqs_with_raw_addr(&c, 0, 1);
        assert!(to1.len() >= 6, "seed {seed}: {to1:?}");
        assert!(to1.iter().all(|(_, raw)| *raw), "seed {seed}: {to1:?}");
        // 1 asked, 0 did not: 1's REQs drop the header once 0's HANDSHAKE is in.
        let to0 = reqs_with_raw_addr(&c, 1, 0);
        assert!(to0.iter().any(|(_, raw)| !raw), "seed {seed}: {to0:?}");
        assert!(to0.last().is_some_and(|(_, raw)| !raw), "seed {seed}: {to0:?}");
        for i in 0..2 {
            let st = c.eps[i].stats();
            assert_eq!((st.malformed, st.protocol_errors), (0, 0), "seed {seed}: endpoint {i}");
        }
    }
    // Without the request, REQs after the handshake go without it.
    let mut c = Cluster::new(2, SimConfig::chaotic(4), Config::default());
    traffic(&mut c, "no request");
    let to1 = reqs_with_raw_addr(&c, 0, 1);
    assert!(to1.last().is_some_and(|(_, raw)| !raw), "{to1:?}");
}

/// Writes `len` bytes 0 → 1 (with `cq_data`) over a warm pair, checks the
/// bytes, both completions and the registrations left; returns the packet
/// types both ways and the requester's status.
fn one_write(c: &mut Cluster, len: usize, cq_data: Option<u64>) -> (Vec<&'static str>, Vec<&'static str>, Status) {
    let data = pattern(len, len as u64 ^ 5);
    let mut src = OwnedBuf::from_slice(&data);
    let mut region = OwnedBuf::zeroed(len + 64);
    let key = c.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    let rb = RemoteBuf { addr: region.buf().addr() + 32, key };
    c.net.clear_log();
    c.eps[0].write(c.addrs[0][1], src.buf(), rb, cq_data, 77).unwrap();
    c.run_until(2_000_000, |c| !c.cqs[0].is_empty());
    c.settle(10_000);
    let s = c.take_cq(0);
    let t = c.take_cq(1);
    assert_eq!((s.len(), s[0].context), (1, 77));
    if s[0].status == Status::Success {
        assert!(region.bytes()[32..32 + len] == data[..], "{len} B: data");
        match cq_data {
            Some(d) => {
                assert_eq!(t.len(), 1, "{len} B: one target-side completion");
                assert_eq!((t[0].data, t[0].len, t[0].src), (d, len as u64, c.addrs[1][0]));
                assert!(t[0].flags.contains(CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA));
            }
            None => assert!(t.is_empty(), "{len} B: no target-side completion without CQ data"),
        }
    } else {
        assert!(region.bytes().iter().all(|&b| b == 0), "{len} B: a failed write wrote nothing");
        assert!(t.is_empty());
    }
    assert!(region.bytes()[..32].iter().all(|&b| b == 0) && region.bytes()[32 + len..].iter().all(|&b| b == 0));
    assert_eq!(c.net.registrations(0), 0, "{len} B: the requester's registration is gone");
    assert_eq!(c.eps[0].pending_ops() + c.eps[1].pending_ops(), 0);
    c.eps[1].mr_dereg(key).unwrap();
    let mut fwd = c.types_between(0, 1);
    fwd.sort();
    let mut back = c.types_between(1, 0);
    back.sort();
    (fwd, back, s[0].status)
}

fn rdma(seed: u64) -> SimConfig {
    SimConfig { rdma: true, ..SimConfig::chaotic(seed) }
}

#[test]
fn long_writes_go_by_long_read_when_both_sides_read_and_no_direct_write_applies() {
    let no_write = Config { features_off: rdm4::wire::extra::RDMA_WRITE, ..Config::default() };
    for seed in [1, 2] {
        // Without RDMA write on one side: the target reads the bytes.
        let mut c = Cluster::warm(rdma(seed), vec![no_write.clone(), Config::default()]);
        for len in [300_000, 1 << 20] {
            let (fwd, back, st) = one_write(&mut c, len, None);
            assert_eq!((fwd, back, st), (vec!["LONGREAD_RTW"], vec!["EOR"], Status::Success), "seed {seed} {len}");
        }
        // A small one stays eager (DC between full endpoints).
        let (fwd, _, st) = one_write(&mut c, 100, None);
        assert_eq!((fwd, st), (vec!["DC_EAGER_RTW"], Status::Success));
        // CQ data beyond the immediate's 32 bits: long-read, the CQ data in the RTW.
        let mut c = Cluster::warm(rdma(seed), vec![Config::default(); 2]);
        let (fwd, back, st) = one_write(&mut c, 1 << 20, Some(1 << 40));
        assert_eq!((fwd, back, st), (vec!["LONGREAD_RTW"], vec!["EOR"], Status::Success), "seed {seed}");
    }
    // The target cannot read: long-CTS.
    let no_read = Config { features_off: rdm4::wire::extra::RDMA_READ, ..Config::default() };
    let mut c = Cluster::warm(rdma(3), vec![no_write.clone(), no_read]);
    let (fwd, back, st) = one_write(&mut c, 1 << 20, Some(9));
    assert_eq!((fwd, back, st), (vec!["CTSDATA", "DC_LONGCTS_RTW"], vec!["CTS", "RECEIPT"], Status::Success));
    // The target's read fails: READ_NACK, and the write goes again by
    // long-CTS, as a libfabric writer does (issue 42).
    let sim = SimConfig { fail_reads: true, ..rdma(4) };
    let mut c = Cluster::warm(sim, vec![no_write, Config::default()]);
    let (fwd, back, st) = one_write(&mut c, 1 << 20, Some(9));
    let expect = (vec!["CTSDATA", "DC_LONGCTS_RTW", "LONGREAD_RTW"], vec!["CTS", "READ_NACK", "RECEIPT"]);
    assert_eq!((fwd, back, st), (expect.0, expect.1, Status::Success));
}

#[test]
fn direct_writes_with_cq_data_go_by_rdma_write_with_immediate() {
    for seed in [1, 2] {
        let mut c = Cluster::warm(rdma(seed), vec![Config::default(); 2]);
        for len in [0, 8, 100_000, 1 << 20] {
            // No packet at all: the device moves the bytes and reports the
            // immediate to the target, which writes the completion.
            let (fwd, back, st) = one_write(&mut c, len, Some(0xDEAD_BEEF));
            assert_eq!((fwd.len(), back.len(), st), (0, 0, Status::Success), "seed {seed} {len}: {fwd:?}");
        }
        // A device without it: emulated.
        let sim = SimConfig { write_imm: false, ..rdma(seed) };
        let mut c = Cluster::warm(sim, vec![Config::default(); 2]);
        let (fwd, _, st) = one_write(&mut c, 100, Some(0xDEAD_BEEF));
        assert_eq!((fwd, st), (vec!["DC_EAGER_RTW"], Status::Success));
    }
}
