//! The engine's stream hint (`Device::more_follows`): a bulk packet is
//! marked when at least `Caps::backlog_min` bytes for the same peer are
//! queued behind it — the rest of its message and the other sends not yet
//! completed — so that a lone message is never marked, a stream is, and the
//! count goes back to nothing once the sends complete.

mod common;

use common::*;
use rdm4::device::sim::{SimConfig, SimRecord};
use rdm4::engine::{Config, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::PacketType;
use rdm4::Status;

const KIB: usize = 1024;
const MIN: u64 = 256 * 1024;

fn cluster() -> Cluster {
    let sim = SimConfig { mtu: 16 * KIB, backlog_min: MIN, ..SimConfig::default() };
    Cluster::new(2, sim, Config::default())
}

/// Sends `n` messages of `len` bytes from 0 to 1 at once, with receives
/// posted, runs them to completion and returns the CTSDATA sent, in order.
fn stream(c: &mut Cluster, n: usize, len: usize) -> Vec<SimRecord> {
    c.net.clear_log();
    let data = pattern(len, 3);
    let mut srcs: Vec<_> = (0..n).map(|_| OwnedBuf::from_slice(&data)).collect();
    let mut dsts: Vec<_> = (0..n).map(|_| OwnedBuf::zeroed(len)).collect();
    let to = c.addrs[0][1];
    for d in &mut dsts {
        c.eps[1].recv(d.buf(), RecvOpts::default()).unwrap();
    }
    for s in &mut srcs {
        c.eps[0].send(to, s.buf(), SendOpts::default()).unwrap();
    }
    c.run_until(1_000_000, |c| c.cqs[0].len() == n && c.cqs[1].len() == n);
    for e in c.take_cq(0).iter().chain(c.take_cq(1).iter()) {
        assert_eq!(e.status, Status::Success);
    }
    for d in &dsts {
        assert_eq!(d.bytes(), &data[..]);
    }
    let ctsdata = PacketType::CtsData as u8;
    c.net.log().into_iter().filter(|r| r.ptype == ctsdata && r.from == 0).collect()
}

#[test]
fn a_lone_message_shorter_than_the_backlog_is_never_marked() {
    let mut c = cluster();
    let pkts = stream(&mut c, 1, 200 * KIB);
    assert!(pkts.len() > 5, "long-CTS in several CTSDATA");
    assert!(pkts.iter().all(|r| !r.more), "{pkts:?}");
}

#[test]
fn a_stream_is_marked_until_its_last_backlog_and_the_count_returns_to_nothing() {
    let mut c = cluster();
    // 8 x 100 KiB: 800 KiB in all, so packets with at least 256 KiB of the
    // stream still behind them are marked, the last ones not.
    let pkts = stream(&mut c, 8, 100 * KIB);
    let marked = pkts.iter().filter(|r| r.more).count();
    assert!(marked > 0, "nothing marked: {pkts:?}");
    assert!(!pkts.last().unwrap().more, "the stream's last packet was marked");
    let first_unmarked = pkts.iter().position(|r| !r.more).unwrap();
    assert!(pkts[first_unmarked..].iter().all(|r| !r.more), "marks after the tail began: {pkts:?}");
    let tail: usize = pkts[first_unmarked..].iter().map(|r| r.len).sum();
    assert!((200 * KIB..=300 * KIB).contains(&tail), "unmarked tail of {tail} bytes");
    // Every send completed: a lone message afterwards is not marked (a
    // count that kept completed sends would mark it).
    let pkts = stream(&mut c, 1, 200 * KIB);
    assert!(pkts.iter().all(|r| !r.more), "{pkts:?}");
}

#[test]
fn without_the_device_asking_nothing_is_marked() {
    let mut c = Cluster::new(2, SimConfig { mtu: 16 * KIB, ..SimConfig::default() }, Config::default());
    let pkts = stream(&mut c, 8, 100 * KIB);
    assert!(!pkts.is_empty() && pkts.iter().all(|r| !r.more));
}

#[test]
fn long_read_sends_leave_the_count_with_their_rtm() {
    // Messages from 150 KiB move by long-read: the receiver reads them, and
    // the sender's RTM stands for all of their bytes; a count that kept
    // them would mark the lone long-CTS message after them.
    let sim =
        SimConfig { mtu: 16 * KIB, backlog_min: MIN, rdma: true, longread_min: 150 * KIB, ..SimConfig::default() };
    let mut c = Cluster::new(2, sim, Config::default());
    stream(&mut c, 1, KIB); // the receiver's HANDSHAKE says it can read
    c.settle(10_000);
    assert!(stream(&mut c, 8, 200 * KIB).is_empty(), "long-read moves no CTSDATA");
    assert!(c.all_types().contains(&"LONGREAD_MSGRTM"), "{:?}", c.all_types());
    let pkts = stream(&mut c, 1, 100 * KIB);
    assert!(!pkts.is_empty() && pkts.iter().all(|r| !r.more), "{pkts:?}");
}

#[test]
fn over_a_copying_device_long_cts_rtms_are_marked_as_their_segments_are() {
    // A device that copies gathered bytes (as shm does) gets the RTM's
    // bytes by `send_gather` too, so its hint covers the RTM.
    let sim = SimConfig { mtu: 16 * KIB, backlog_min: MIN, copy_gathered: true, ..SimConfig::default() };
    let mut c = Cluster::new(2, sim, Config::default());
    let rtms = |c: &Cluster| -> Vec<SimRecord> {
        let rtm = PacketType::LongctsMsgRtm as u8;
        c.net.log().into_iter().filter(|r| r.ptype == rtm && r.from == 0).collect()
    };
    stream(&mut c, 8, 100 * KIB);
    let sent = rtms(&c);
    assert_eq!(sent.len(), 8, "{sent:?}");
    assert!(sent.iter().all(|r| r.gathered > 0), "RTMs without bytes handed over: {sent:?}");
    // Each RTM goes out at its send's post: behind the first only the rest
    // of its message; behind the last, the other seven messages as well.
    assert!(!sent[0].more && sent[7].more, "{sent:?}");
    stream(&mut c, 1, 200 * KIB);
    let sent = rtms(&c);
    assert!(sent.len() == 1 && !sent[0].more, "a lone message's RTM marked: {sent:?}");
}
