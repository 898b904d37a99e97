//! The engine over the auto device (issue 39): three endpoints of one
//! process, A and B with shm and udp, C with udp only (as a process of
//! another host, or one whose shared memory could not open). Local pairs go
//! by shm, the others by udp, behind one address vector and one set of
//! completions; registrations have one key on both devices; probe and
//! cancel see both.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::pattern;
use rdm4::atomic_ops;
use rdm4::device::auto::{AutoConfig, AutoDevice};
use rdm4::device::shm::ShmConfig;
use rdm4::device::udp::UdpConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, Cqe, Endpoint, ProbeMode, Proto, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::wire::PacketType;
use rdm4::wire::RawAddr;
use rdm4::Status;

type Ep = Endpoint<AutoDevice>;

fn udp() -> UdpConfig {
    UdpConfig { addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), ..UdpConfig::default() }
}

fn shm(tag: &str) -> ShmConfig {
    ShmConfig { prefix: format!("rdm4-auto-{tag}-{}", std::process::id()), ..ShmConfig::default() }
}

fn open(cfg: AutoConfig) -> Ep {
    Endpoint::new(AutoDevice::open_with(cfg).unwrap(), Config::default())
}

struct Trio {
    eps: Vec<Ep>,
    names: Vec<RawAddr>,
    cqs: Vec<Vec<Cqe>>,
}

impl Trio {
    /// A and B: shm and udp; C: udp only.
    fn new(tag: &str) -> Trio {
        let eps = vec![
            open(AutoConfig { shm: Some(shm(tag)), udp: Some(udp()) }),
            open(AutoConfig { shm: Some(shm(tag)), udp: Some(udp()) }),
            open(AutoConfig { shm: None, udp: Some(udp()) }),
        ];
        let names = eps.iter().map(|e| e.device().name()).collect();
        Trio { eps, names, cqs: vec![Vec::new(); 3] }
    }

    /// `from`'s handle of `to`, by the device `from` reaches it by.
    fn addr(&mut self, from: usize, to: usize) -> u32 {
        let name = self.names[to];
        let raw = self.eps[from].device_mut().pick(&name).unwrap();
        self.eps[from].av_insert(&raw).unwrap()
    }

    /// Progresses all until `done` holds (at most 60 s).
    fn run(&mut self, mut done: impl FnMut(&[Vec<Cqe>]) -> bool) {
        let t = Instant::now();
        while !done(&self.cqs) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "stuck: {:?}",
                self.cqs.iter().map(Vec::len).collect::<Vec<_>>()
            );
            for (e, cq) in self.eps.iter_mut().zip(&mut self.cqs) {
                e.progress(0);
                e.poll_cq(cq, 64);
            }
        }
    }

    fn udp_sent(&mut self, i: usize) -> u64 {
        self.eps[i].device().udp_stats().map_or(0, |u| u.datagrams_sent)
    }
}

/// Sends `len` bytes from `from` to `to` and checks every byte and both completions.
fn exchange(t: &mut Trio, from: usize, to: usize, len: usize, seed: u64) {
    let dest = t.addr(from, to);
    let mut src = OwnedBuf::from_slice(&pattern(len, seed));
    let mut dst = OwnedBuf::zeroed(len);
    t.cqs[from].clear();
    t.cqs[to].clear();
    t.eps[to].recv(dst.buf(), RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    t.eps[from].send(dest, src.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    t.run(|c| !c[from].is_empty() && !c[to].is_empty());
    assert_eq!(t.cqs[from][0].status, Status::Success, "{from}->{to} {len} B: send");
    assert_eq!((t.cqs[to][0].status, t.cqs[to][0].len), (Status::Success, len as u64), "{from}->{to} {len} B");
    assert!(dst.bytes() == src.bytes(), "{from}->{to} {len} B: every byte");
}

const SIZES: [usize; 6] = [0, 8, 4000, 70_000, 1 << 20, 8 << 20];

#[test]
fn local_peers_go_by_shm_and_remote_ones_by_udp() {
    let mut t = Trio::new("paths");
    assert_eq!(t.eps[0].device().devices(), (true, true));
    assert_eq!(t.eps[2].device().devices(), (false, true));
    assert_eq!(t.names[2].reserved(), 0, "C's name has no shm locator");
    assert_ne!(t.names[0].reserved(), 0, "A's name has one");
    assert_eq!(t.eps[0].device().name().to_bytes().len(), 32, "names keep the raw address's length");
    for (i, &len) in SIZES.iter().enumerate() {
        exchange(&mut t, 0, 1, len, i as u64);
        exchange(&mut t, 1, 0, len, i as u64 + 10);
    }
    assert_eq!((t.udp_sent(0), t.udp_sent(1)), (0, 0), "A and B talk by shm only");
    for (i, &len) in SIZES.iter().enumerate() {
        exchange(&mut t, 0, 2, len, i as u64 + 20);
        exchange(&mut t, 2, 1, len, i as u64 + 30);
    }
    assert!(t.udp_sent(0) > 0 && t.udp_sent(1) > 0 && t.udp_sent(2) > 0, "C's traffic went by udp");
    // A's local traffic still by shm: its udp count moves with C only.
    let before = t.udp_sent(0);
    exchange(&mut t, 0, 1, 1 << 20, 99);
    assert_eq!(t.udp_sent(0), before, "A to B stays on shm");
}

/// Each peer gets its own device's packet size: with udp's MTU far below
/// shm's, a 12 KB message to a local peer still goes as one eager packet
/// by shm, while the same message to a remote peer is cut into medium
/// packets that fit udp's MTU. Reads and writes too, emulated (no
/// cross-memory attach): a 12 KB read of a local peer's memory is one
/// READRSP larger than udp's MTU (udp's reads are its own RDMA).
#[test]
fn each_peer_gets_its_own_devices_packet_size() {
    let small = || UdpConfig { mtu: Some(1400), ..udp() };
    let no_cma = || ShmConfig { cma: false, ..shm("mtu") };
    let mut t = Trio {
        eps: vec![
            open(AutoConfig { shm: Some(no_cma()), udp: Some(small()) }),
            open(AutoConfig { shm: Some(no_cma()), udp: Some(small()) }),
            open(AutoConfig { shm: None, udp: Some(small()) }),
        ],
        names: Vec::new(),
        cqs: vec![Vec::new(); 3],
    };
    t.names = t.eps.iter().map(|e| e.device().name()).collect();
    assert!(t.eps[0].caps().mtu <= 1400, "the endpoint's MTU is the smaller device's");
    let proto = |t: &Trio, p: Proto| t.eps[0].traffic().ops(p);
    let len = 12_000;
    exchange(&mut t, 0, 1, len, 1);
    assert_eq!((proto(&t, Proto::Eager), proto(&t, Proto::Medium)), (1, 0), "to B by shm: one eager packet");
    exchange(&mut t, 0, 2, len, 2);
    assert_eq!((proto(&t, Proto::Eager), proto(&t, Proto::Medium)), (1, 1), "to C by udp: medium");
    let to_c = t.eps[0].traffic().tx[PacketType::MediumMsgRtm as usize];
    assert!(to_c >= (len / 1400) as u64, "{to_c} medium packets of at most udp's MTU");
    // Reads and writes take the peer's size too.
    for to in [1, 2] {
        let mut target = OwnedBuf::zeroed(len);
        let key = t.eps[to].mr_reg(target.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        let dest = t.addr(0, to);
        let mut src = OwnedBuf::from_slice(&pattern(len, 3 + to as u64));
        t.cqs[0].clear();
        let remote = RemoteBuf { addr: target.buf().addr(), key };
        t.eps[0].write(dest, src.buf(), remote, None, 7).unwrap();
        t.run(|c| !c[0].is_empty());
        assert_eq!(t.cqs[0][0].status, Status::Success);
        let mut back = OwnedBuf::zeroed(len);
        t.cqs[0].clear();
        t.eps[0].read(dest, back.buf(), remote, 8).unwrap();
        t.run(|c| !c[0].is_empty());
        assert_eq!(t.cqs[0][0].status, Status::Success);
        assert!(target.bytes() == src.bytes() && back.bytes() == src.bytes(), "to {to}: every byte");
        if to == 1 {
            let rsp = t.eps[to].traffic().tx[PacketType::ReadRsp as usize];
            assert_eq!(rsp, 1, "to B: the read was emulated, one READRSP");
        }
    }
}

#[test]
fn one_key_serves_local_and_remote_accessors() {
    let mut t = Trio::new("keys");
    // B's region: A writes the first half (by shm), C the second (by udp);
    // both read it back; a counter hit by atomics from both.
    let mut region = OwnedBuf::zeroed(1 << 20);
    let key = t.eps[1].mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let mut counter = OwnedBuf::zeroed(8);
    let ckey = t.eps[1].mr_reg(counter.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let (ab, cb) = (t.addr(0, 1), t.addr(2, 1));
    let half = 1 << 19;
    let (mut pa, mut pc) = (OwnedBuf::from_slice(&pattern(half, 1)), OwnedBuf::from_slice(&pattern(half, 2)));
    let base = region.buf().addr();
    let at = |off: usize| RemoteBuf { addr: base + off as u64, key };
    t.eps[0].write(ab, pa.buf(), at(0), None, 1).unwrap();
    t.eps[2].write(cb, pc.buf(), at(half), None, 2).unwrap();
    t.run(|c| !c[0].is_empty() && !c[2].is_empty());
    assert_eq!((t.cqs[0][0].status, t.cqs[2][0].status), (Status::Success, Status::Success));
    assert!(region.bytes()[..half] == pa.bytes()[..] && region.bytes()[half..] == pc.bytes()[..]);
    for c in &mut t.cqs {
        c.clear();
    }
    let (mut ra, mut rc) = (OwnedBuf::zeroed(half), OwnedBuf::zeroed(half));
    t.eps[0].read(ab, ra.buf(), at(half), 3).unwrap();
    t.eps[2].read(cb, rc.buf(), at(0), 4).unwrap();
    t.run(|c| !c[0].is_empty() && !c[2].is_empty());
    assert!(ra.bytes() == pc.bytes() && rc.bytes() == pa.bytes(), "each read what the other wrote");
    let mut one = OwnedBuf::from_slice(&1u64.to_le_bytes());
    let ctr = RemoteBuf { addr: counter.buf().addr(), key: ckey };
    let counted = |c: &OwnedBuf| u64::from_le_bytes(c.bytes().try_into().unwrap());
    let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
    let none = UserBuf::empty();
    for round in 0..50 {
        for c in &mut t.cqs {
            c.clear();
        }
        t.eps[0].atomic(ab, u64t, sum, one.buf(), none, none, ctr, round).unwrap();
        t.eps[2].atomic(cb, u64t, sum, one.buf(), none, none, ctr, round).unwrap();
        t.run(|c| !c[0].is_empty() && !c[2].is_empty());
        assert_eq!((t.cqs[0][0].status, t.cqs[2][0].status), (Status::Success, Status::Success));
    }
    // A write atomic completes when sent: the last ones may still be on
    // their way.
    let deadline = Instant::now() + Duration::from_secs(10);
    while counted(&counter) < 100 && Instant::now() < deadline {
        t.run(|_| true);
        for e in &mut t.eps {
            e.progress(0);
        }
    }
    assert_eq!(counted(&counter), 100, "exact total");
}

#[test]
fn allocated_memory_is_reached_by_local_and_remote_peers() {
    let mut t = Trio::new("alloc");
    let (buf, key) = t.eps[1].mr_alloc(4096, Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let (ab, cb) = (t.addr(0, 1), t.addr(2, 1));
    let (mut pa, mut pc) = (OwnedBuf::from_slice(&[0xA1; 2048]), OwnedBuf::from_slice(&[0xC3; 2048]));
    t.eps[0].write(ab, pa.buf(), RemoteBuf { addr: buf.addr(), key }, None, 1).unwrap();
    t.eps[2].write(cb, pc.buf(), RemoteBuf { addr: buf.addr() + 2048, key }, None, 2).unwrap();
    t.run(|c| !c[0].is_empty() && !c[2].is_empty());
    assert_eq!((t.cqs[0][0].status, t.cqs[2][0].status), (Status::Success, Status::Success));
    let mut got = vec![0u8; 4096];
    buf.read_at(0, &mut got);
    assert!(got[..2048].iter().all(|&b| b == 0xA1) && got[2048..].iter().all(|&b| b == 0xC3));
    t.eps[1].mr_free(key).unwrap();
}

#[test]
fn an_endpoint_whose_shm_does_not_open_talks_by_udp() {
    // An invalid shm setting (as no room in /dev/shm would): udp only.
    let bad = ShmConfig { mtu: 1, ..shm("bad") };
    let d = AutoDevice::open_with(AutoConfig { shm: Some(bad), udp: Some(udp()) }).unwrap();
    assert_eq!(d.devices(), (false, true));
    let mut t = Trio::new("noshm");
    t.eps[2] = Endpoint::new(d, Config::default());
    t.names[2] = t.eps[2].device().name();
    for (i, &len) in SIZES.iter().enumerate() {
        exchange(&mut t, 2, 0, len, i as u64);
        exchange(&mut t, 0, 2, len, i as u64 + 5);
    }
    assert!(t.udp_sent(2) > 0);
    // Neither device: refused.
    let none = AutoDevice::open_with(AutoConfig { shm: None, udp: None });
    assert_eq!(none.err(), Some(Status::NoAddr));
}

#[test]
fn losing_a_remote_peer_leaves_local_traffic_alone() {
    let mut t = Trio::new("loss");
    exchange(&mut t, 0, 2, 8, 1);
    let ac = t.addr(0, 2);
    // C closes (its udp device tells its peers): A's sends to it fail,
    // while A and B go on by shm.
    drop(t.eps.pop());
    t.cqs.pop();
    t.cqs[0].clear();
    let mut src = OwnedBuf::from_slice(&pattern(100_000, 7));
    t.eps[0].send(ac, src.buf(), SendOpts { context: 9, ..SendOpts::default() }).unwrap();
    t.run(|c| !c[0].is_empty());
    assert_eq!((t.cqs[0][0].context, t.cqs[0][0].status), (9, Status::PeerUnreachable));
    for (i, &len) in SIZES.iter().enumerate() {
        exchange(&mut t, 0, 1, len, i as u64 + 40);
    }
}

/// Matching across the two devices: any-source receives take messages of
/// a shm peer and a udp peer, each naming its source; directed receives
/// take only their peer's; per-peer order holds; delivery complete works
/// on both.
#[test]
fn matching_order_and_delivery_complete_span_both_devices() {
    use rdm4::engine::SendFlags;
    let mut t = Trio::new("match");
    let (ab, cb) = (t.addr(0, 1), t.addr(2, 1));
    let (ba, bc) = (t.addr(1, 0), t.addr(1, 2));
    // Directed receives first (a udp peer's, then a shm peer's), then
    // any-source ones; each sender sends 3 tagged messages in order.
    let mut bufs: Vec<OwnedBuf> = (0..8).map(|_| OwnedBuf::zeroed(64)).collect();
    let tag = Some((7u64, 0u64));
    let posts = [(Some(bc), 10), (Some(ba), 11), (None, 12), (None, 13), (None, 14), (None, 15)];
    for (i, &(src, ctx)) in posts.iter().enumerate() {
        t.eps[1].recv(bufs[i].buf(), RecvOpts { tag, src, context: ctx }).unwrap();
    }
    let mut srcs: Vec<OwnedBuf> = Vec::new();
    for k in 0..3u8 {
        for (from, dest) in [(0, ab), (2, cb)] {
            let mut b = OwnedBuf::from_slice(&[from as u8 * 16 + k; 64]);
            let flags = SendFlags { more: false, dc: k == 2 };
            let opts = SendOpts { tag: Some(7), cq_data: None, context: u64::from(k) };
            t.eps[from].send_flagged(dest, b.buf(), opts, flags).unwrap();
            srcs.push(b);
        }
    }
    t.run(|c| c[1].len() == 6 && c[0].len() == 3 && c[2].len() == 3);
    for c in [&t.cqs[0], &t.cqs[2]] {
        assert!(c.iter().all(|e| e.status == Status::Success), "sends (DC included): {c:?}");
    }
    let by_ctx = |ctx: u64| t.cqs[1].iter().find(|e| e.context == ctx).unwrap();
    assert_eq!((by_ctx(10).src, by_ctx(11).src), (bc, ba), "directed receives named their peers");
    assert!(bufs[0].bytes()[0] == 32 && bufs[1].bytes()[0] == 0, "each directed receive got its peer's first message");
    // The any-source receives got the rest, each peer's in its order.
    let mut from_a: Vec<u8> = Vec::new();
    let mut from_c: Vec<u8> = Vec::new();
    for (i, ctx) in (12..16).enumerate() {
        let e = by_ctx(ctx);
        let first = bufs[i + 2].bytes()[0];
        if e.src == ba {
            from_a.push(first);
        } else {
            assert_eq!(e.src, bc);
            from_c.push(first);
        }
    }
    assert_eq!((from_a, from_c), (vec![1, 2], vec![33, 34]), "per-peer order over each device");
}

/// Progresses endpoints `which` of `t` until `done` holds (at most 30 s).
fn run_only(t: &mut Trio, which: &[usize], mut done: impl FnMut(&Trio) -> bool) {
    let start = Instant::now();
    while !done(t) {
        assert!(start.elapsed() < Duration::from_secs(30), "stuck");
        for &i in which {
            t.eps[i].progress(0);
            t.eps[i].poll_cq(&mut t.cqs[i], 64);
        }
    }
}

/// Waits until `fd` is readable (at most `ms`); whether it is.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// A receiver that sleeps on the endpoint's descriptor (both devices
/// behind one): a shm peer's message wakes it, and so does a udp peer's.
#[test]
fn one_descriptor_wakes_for_shm_and_udp_peers() {
    let mut t = Trio::new("fd");
    let (ba, ca) = (t.addr(1, 0), t.addr(2, 0));
    t.addr(0, 1);
    t.addr(0, 2);
    for (from, dest, seed) in [(1, ba, 1u64), (2, ca, 2)] {
        let mut dst = OwnedBuf::zeroed(64);
        t.eps[0].recv(dst.buf(), RecvOpts { context: seed, ..RecvOpts::default() }).unwrap();
        let fd = t.eps[0].wait_fd().expect("auto has a descriptor");
        let mut may_sleep = false;
        for _ in 0..1000 {
            t.eps[0].progress(0);
            if t.eps[0].trywait() {
                may_sleep = true;
                break;
            }
        }
        assert!(may_sleep, "an idle endpoint may sleep");
        assert!(!readable(fd, 0), "nothing to wake for yet");
        let mut src = OwnedBuf::from_slice(&pattern(64, seed));
        t.eps[from].send(dest, src.buf(), SendOpts::default()).unwrap();
        assert!(readable(fd, 5000), "device {from}'s message woke the sleeper");
        t.eps[0].sleep_end();
        run_only(&mut t, &[0, from], |t| t.cqs[0].iter().any(|e| e.context == seed));
        assert!(dst.bytes() == src.bytes());
        t.cqs[0].clear();
    }
}

/// A receiver that computes (no call for a while) in the middle of a
/// shm and a udp transfer of 1 MiB each, then goes on: both complete, no
/// peer is given up; then it receives once more and closes at once, and
/// the senders' sends of that last message still complete as delivered.
#[test]
fn a_receiver_that_computes_then_exits_after_its_last_receive() {
    let mut t = Trio::new("away");
    let (ba, ca) = (t.addr(1, 0), t.addr(2, 0));
    let (ab, ac) = (t.addr(0, 1), t.addr(0, 2));
    let len = 1 << 20;
    let (mut d1, mut d2) = (OwnedBuf::zeroed(len), OwnedBuf::zeroed(len));
    t.eps[0].recv(d1.buf(), RecvOpts { src: Some(ab), context: 1, ..RecvOpts::default() }).unwrap();
    t.eps[0].recv(d2.buf(), RecvOpts { src: Some(ac), context: 2, ..RecvOpts::default() }).unwrap();
    let (mut s1, mut s2) = (OwnedBuf::from_slice(&pattern(len, 5)), OwnedBuf::from_slice(&pattern(len, 6)));
    t.eps[1].send(ba, s1.buf(), SendOpts { context: 11, ..SendOpts::default() }).unwrap();
    t.eps[2].send(ca, s2.buf(), SendOpts { context: 12, ..SendOpts::default() }).unwrap();
    // A takes the first packets, then computes for 300 ms while its
    // peers go on calling their own endpoints.
    for _ in 0..3 {
        for i in 0..3 {
            t.eps[i].progress(0);
        }
    }
    let away = Instant::now();
    while away.elapsed() < Duration::from_millis(300) {
        for i in [1, 2] {
            t.eps[i].progress(0);
            t.eps[i].poll_cq(&mut t.cqs[i], 64);
        }
    }
    assert!(t.cqs[0].is_empty(), "A made no call: nothing of its completed");
    t.run(|c| c[0].len() == 2 && !c[1].is_empty() && !c[2].is_empty());
    assert!(t.cqs.iter().flatten().all(|e| e.status == Status::Success), "{:?}", t.cqs);
    assert!(d1.bytes() == s1.bytes() && d2.bytes() == s2.bytes());
    // The last receive, then A closes at once.
    for c in &mut t.cqs {
        c.clear();
    }
    let (mut l1, mut l2) = (OwnedBuf::zeroed(100), OwnedBuf::zeroed(100));
    t.eps[0].recv(l1.buf(), RecvOpts { context: 3, ..RecvOpts::default() }).unwrap();
    t.eps[0].recv(l2.buf(), RecvOpts { context: 4, ..RecvOpts::default() }).unwrap();
    let (mut m1, mut m2) = (OwnedBuf::from_slice(&[7; 100]), OwnedBuf::from_slice(&[8; 100]));
    t.eps[1].send(ba, m1.buf(), SendOpts { context: 13, ..SendOpts::default() }).unwrap();
    t.eps[2].send(ca, m2.buf(), SendOpts { context: 14, ..SendOpts::default() }).unwrap();
    run_only(&mut t, &[0, 1, 2], |t| t.cqs[0].len() == 2);
    drop(t.eps.remove(0));
    t.cqs.remove(0);
    run_only(&mut t, &[0, 1], |t| !t.cqs[0].is_empty() && !t.cqs[1].is_empty());
    assert_eq!((t.cqs[0][0].status, t.cqs[1][0].status), (Status::Success, Status::Success), "delivered, then closed");
    assert!(l1.bytes().iter().chain(l2.bytes()).all(|&b| b == 7 || b == 8));
}

/// Probe and cancel across both devices: B receives a tagged message from
/// A (shm) and one from C (udp). A peek finds each by its tag and names its
/// source; a claim takes C's out of matching and `recv_claimed` delivers
/// it; a discard drops A's; a receive canceled before anything matches it
/// ends `Canceled`, and the next message goes to the receive posted after.
#[test]
fn probe_claim_discard_and_cancel_span_both_devices() {
    let mut t = Trio::new("probe");
    let (ab, cb) = (t.addr(0, 1), t.addr(2, 1));
    let (ba, bc) = (t.addr(1, 0), t.addr(1, 2));
    let (mut from_a, mut from_c) = (OwnedBuf::from_slice(&pattern(3000, 1)), OwnedBuf::from_slice(&pattern(70_000, 2)));
    t.eps[0].send(ab, from_a.buf(), SendOpts { tag: Some(0xA), context: 1, ..SendOpts::default() }).unwrap();
    t.eps[2].send(cb, from_c.buf(), SendOpts { tag: Some(0xC), context: 3, ..SendOpts::default() }).unwrap();
    let peek = |t: &mut Trio, tag: u64, mode: ProbeMode, context: u64| {
        let opts = RecvOpts { tag: Some((tag, 0)), context, ..RecvOpts::default() };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(p) = t.eps[1].probe(opts, mode).unwrap() {
                return p;
            }
            assert!(Instant::now() < deadline, "probe of tag {tag:#x}: nothing");
            for e in &mut t.eps {
                e.progress(0);
            }
        }
    };
    let pa = peek(&mut t, 0xA, ProbeMode::Peek, 0);
    let pc = peek(&mut t, 0xC, ProbeMode::Peek, 0);
    assert_eq!((pa.src, pa.len, pc.src, pc.len), (ba, 3000, bc, 70_000), "peeks name source and length");
    let claimed = peek(&mut t, 0xC, ProbeMode::Claim, 77);
    assert_eq!(claimed.claim, 77);
    let mut got = OwnedBuf::zeroed(70_000);
    t.eps[1].recv_claimed(77, got.buf(), 78).unwrap();
    t.run(|c| c[1].iter().any(|e| e.context == 78));
    let e = t.cqs[1].iter().find(|e| e.context == 78).unwrap();
    assert_eq!((e.status, e.len, e.src), (Status::Success, 70_000, bc));
    assert!(got.bytes() == from_c.bytes(), "claimed message: every byte");
    peek(&mut t, 0xA, ProbeMode::Discard, 0);
    let opts = RecvOpts { tag: Some((0xA, 0)), ..RecvOpts::default() };
    assert_eq!(t.eps[1].probe(opts, ProbeMode::Peek).unwrap(), None, "discarded: gone");
    // Cancel: a receive for tag 0xD from either device, canceled; the next
    // one takes C's message.
    let mut first = OwnedBuf::zeroed(100);
    let mut second = OwnedBuf::zeroed(100);
    t.cqs[1].clear();
    t.eps[1].recv(first.buf(), RecvOpts { tag: Some((0xD, 0)), context: 90, ..RecvOpts::default() }).unwrap();
    t.eps[1].cancel(90).unwrap();
    t.eps[1].recv(second.buf(), RecvOpts { tag: Some((0xD, 0)), context: 91, ..RecvOpts::default() }).unwrap();
    let mut d = OwnedBuf::from_slice(&pattern(100, 3));
    t.eps[2].send(cb, d.buf(), SendOpts { tag: Some(0xD), context: 4, ..SendOpts::default() }).unwrap();
    t.run(|c| c[1].iter().any(|e| e.context == 91));
    let canceled = t.cqs[1].iter().find(|e| e.context == 90).map(|e| e.status);
    assert_eq!(canceled, Some(Status::Canceled), "the canceled receive ends so");
    assert!(second.bytes() == d.bytes() && first.bytes().iter().all(|&b| b == 0), "the next receive took it");
    t.run(|c| c[0].iter().any(|e| e.context == 1) && c[2].iter().filter(|e| [3, 4].contains(&e.context)).count() == 2);
}

/// A capture of an auto endpoint (`RDM4_PCAP`) names, in each record, the
/// device its packet took: A's records of B are shm's (0), of C udp's (1).
#[test]
fn a_capture_names_the_device_of_each_packet() {
    use rdm4::pcap::{Capture, DeviceKind, PcapFile, PSEUDO_LEN};
    let path = std::env::temp_dir().join(format!("rdm4-auto-cap-{}.pcap", std::process::id()));
    let file = PcapFile::open(path.to_str().unwrap()).unwrap();
    let dev = |tag: &str| AutoDevice::open_with(AutoConfig { shm: Some(shm(tag)), udp: Some(udp()) }).unwrap();
    let mut a = Endpoint::new(Capture::new(dev("cap"), file, DeviceKind::Auto), Config::default());
    let mut b = open(AutoConfig { shm: Some(shm("cap")), udp: Some(udp()) });
    let mut c = open(AutoConfig { shm: None, udp: Some(udp()) });
    let to_b = a.device_mut().inner_mut().pick(&b.device().name()).unwrap();
    let to_c = a.device_mut().inner_mut().pick(&c.device().name()).unwrap();
    let (ab, ac) = (a.av_insert(&to_b).unwrap(), a.av_insert(&to_c).unwrap());
    let (mut rb, mut rc) = (OwnedBuf::zeroed(8), OwnedBuf::zeroed(8));
    b.recv(rb.buf(), RecvOpts::default()).unwrap();
    c.recv(rc.buf(), RecvOpts::default()).unwrap();
    let mut m = OwnedBuf::from_slice(&[7; 8]);
    a.send(ab, m.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    a.send(ac, m.buf(), SendOpts { context: 2, ..SendOpts::default() }).unwrap();
    let (mut qa, mut qb, mut qc) = (Vec::new(), Vec::new(), Vec::new());
    let t = Instant::now();
    while qa.len() < 2 || qb.is_empty() || qc.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(30), "stuck");
        a.progress(0);
        b.progress(0);
        c.progress(0);
        a.poll_cq(&mut qa, 8);
        b.poll_cq(&mut qb, 8);
        c.poll_cq(&mut qc, 8);
    }
    drop(a); // writes the file out
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    // Records after the 24-byte file header: 16-byte record header, then
    // the pseudo-header (device at 6, peer handle at 8..12).
    let (mut at, mut devices) = (24, std::collections::BTreeSet::new());
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let r = &bytes[at + 16..at + 16 + incl];
        assert!(r.len() >= PSEUDO_LEN && &r[..4] == b"RDM4");
        let peer = u32::from_le_bytes(r[8..12].try_into().unwrap());
        let want = if peer == u32::MAX {
            3
        } else if peer & rdm4::device::auto::UDP != 0 {
            1
        } else {
            0
        };
        assert_eq!(r[6], want, "record of peer {peer:#x}");
        devices.insert(r[6]);
        at += 16 + incl;
    }
    assert!(devices.contains(&0) && devices.contains(&1), "records of both devices: {devices:?}");
}
