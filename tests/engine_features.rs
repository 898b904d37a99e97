//! Extra features and requests between full and reduced endpoints over
//! the sim device: what each side advertises decides the packets, and the
//! fallbacks deliver the same bytes (spec ch. 4).

mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, RecvOpts, RemoteBuf, SendOpts};
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
