mod common;

use common::*;
use rdm4::device::sim::SimConfig;
use rdm4::engine::{Config, RecvOpts, SendOpts};
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
