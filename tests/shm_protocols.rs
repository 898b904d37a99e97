//! Every protocol of issue 30 over the shm device, two endpoints of one
//! process: each operation asserts through the traffic counters
//! (`Endpoint::traffic`) that the intended protocol ran, and the fallback
//! where a side lacks a feature (a full/legacy pair, features off,
//! cross-memory attach off).

mod common;

use std::time::{Duration, Instant};

use common::pattern;

use rdm4::device::shm::{ShmConfig, ShmDevice};
use rdm4::device::Access;
use rdm4::engine::{Config, CqFlags, Cqe, Endpoint, Proto, RecvOpts, RemoteBuf, SendFlags, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::PacketType as T;
use rdm4::Status;

type Ep = Endpoint<ShmDevice>;

struct Pair {
    eps: [Ep; 2],
    to: [u32; 2],
    cqs: [Vec<Cqe>; 2],
}

/// Two endpoints over shm (`cma`, long-read from `longread_min`) with
/// settings `a` and `b`, their HANDSHAKEs exchanged.
/// Explicit, as `RDM4_SHM_LONGREAD_MIN` makes it: crowded mode (on a
/// machine of one CPU) changes nothing.
fn pair(name: &str, cma: bool, longread_min: usize, a: Config, b: Config) -> Pair {
    let cfg = ShmConfig { cma, longread_min, crowded_longread_min: usize::MAX, ..ShmConfig::default() };
    pair_with(cfg, name, a, b)
}

/// [`pair`] with the device settings `cfg` (its prefix replaced).
fn pair_with(cfg: ShmConfig, name: &str, a: Config, b: Config) -> Pair {
    let cfg = ShmConfig { prefix: format!("rdm4p{}{name}", std::process::id()), ..cfg };
    let mut ea = Endpoint::new(ShmDevice::open_with(cfg.clone()).unwrap(), a);
    let mut eb = Endpoint::new(ShmDevice::open_with(cfg).unwrap(), b);
    let to = [ea.av_insert(&eb.addr()).unwrap(), eb.av_insert(&ea.addr()).unwrap()];
    let mut p = Pair { eps: [ea, eb], to, cqs: [Vec::new(), Vec::new()] };
    for (x, y) in [(0, 1), (1, 0)] {
        let mut s = OwnedBuf::from_slice(b"hi");
        let mut r = OwnedBuf::zeroed(2);
        p.eps[y].recv(r.buf(), RecvOpts { context: 999, ..RecvOpts::default() }).unwrap();
        p.eps[x].send(p.to[x], s.buf(), SendOpts { context: 999, ..SendOpts::default() }).unwrap();
        p.run(|c| c[0].len() + c[1].len() >= 2);
        p.cqs = [Vec::new(), Vec::new()];
    }
    p
}

impl Pair {
    /// Progresses both until `done` (at most 20 s), collecting completions.
    fn run(&mut self, mut done: impl FnMut(&[Vec<Cqe>; 2]) -> bool) {
        let t = Instant::now();
        while !done(&self.cqs) {
            assert!(t.elapsed() < Duration::from_secs(20), "stuck: {:?}", self.cqs);
            for (ep, cq) in self.eps.iter_mut().zip(self.cqs.iter_mut()) {
                ep.progress(0);
                ep.poll_cq(cq, usize::MAX);
            }
        }
    }

    /// A tagged message of `len` bytes 0 → 1 (`dc`: delivery complete),
    /// checked; returns the sender's completion status.
    fn message(&mut self, len: usize, dc: bool) -> Status {
        let data = pattern(len, len as u64);
        let mut s = OwnedBuf::from_slice(&data);
        let mut r = OwnedBuf::zeroed(len);
        self.eps[1].recv(r.buf(), RecvOpts { tag: Some((4, 0)), src: None, context: 2 }).unwrap();
        let flags = SendFlags { dc, ..SendFlags::default() };
        self.eps[0]
            .send_flagged(self.to[0], s.buf(), SendOpts { tag: Some(4), cq_data: None, context: 1 }, flags)
            .unwrap();
        self.run(|c| !c[0].is_empty() && !c[1].is_empty());
        let (sc, rc) = (self.cqs[0].remove(0), self.cqs[1].remove(0));
        assert_eq!(rc.status, Status::Success, "{len} B receive");
        assert!(r.bytes() == data, "{len} B data");
        sc.status
    }

    /// A write of `len` bytes 0 → 1's memory (with `cq_data`), then a
    /// read of it back; both checked.
    fn write_read(&mut self, len: usize, cq_data: Option<u64>) {
        let mut region = OwnedBuf::zeroed(len);
        let key = self.eps[1].mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
        let rb = RemoteBuf { addr: region.buf().addr(), key };
        let data = pattern(len, 7);
        let mut s = OwnedBuf::from_slice(&data);
        self.eps[0].write(self.to[0], s.buf(), rb, cq_data, 5).unwrap();
        self.run(|c| !c[0].is_empty() && (cq_data.is_none() || !c[1].is_empty()));
        assert_eq!(self.cqs[0].remove(0).status, Status::Success, "write of {len} B");
        if let Some(d) = cq_data {
            let t = self.cqs[1].remove(0);
            assert_eq!((t.data, t.len), (d, len as u64), "the target's completion");
            assert!(t.flags.contains(CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA));
        }
        assert!(region.bytes() == data, "write of {len} B lands");
        let mut back = OwnedBuf::zeroed(len);
        self.eps[0].read(self.to[0], back.buf(), rb, 6).unwrap();
        self.run(|c| !c[0].is_empty());
        assert_eq!(self.cqs[0].remove(0).status, Status::Success, "read of {len} B");
        assert!(back.bytes() == data, "read of {len} B returns it");
        self.eps[1].mr_dereg(key).unwrap();
    }

    fn ops(&self, i: usize, p: Proto) -> u64 {
        self.eps[i].traffic().ops(p)
    }

    fn sent(&self, i: usize, t: T) -> u64 {
        self.eps[i].traffic().sent(t)
    }

    fn received(&self, i: usize, t: T) -> u64 {
        self.eps[i].traffic().received(t)
    }
}

#[test]
fn messages_take_eager_medium_and_long_cts_by_length() {
    let mut p = pair("msg", true, usize::MAX, Config::default(), Config::default());
    for len in [8, 40_000, 1 << 20] {
        assert_eq!(p.message(len, false), Status::Success);
    }
    assert_eq!((p.ops(0, Proto::Eager), p.ops(0, Proto::Medium), p.ops(0, Proto::Longcts)), (2, 1, 1));
    assert_eq!(p.eps[0].traffic().bytes[Proto::Longcts as usize], 1 << 20);
    assert!(p.sent(0, T::MediumTagRtm) >= 2 && p.sent(0, T::MediumTagRtm) == p.received(1, T::MediumTagRtm));
    assert_eq!((p.sent(0, T::LongctsTagRtm), p.received(1, T::LongctsTagRtm)), (1, 1));
    assert!(p.received(0, T::Cts) >= 1 && p.sent(0, T::CtsData) == p.received(1, T::CtsData));
}

#[test]
fn long_read_and_runting_read_move_a_long_message_by_one_read() {
    // Long-read from 256 KiB; runting off: plain long-read.
    let plain = Config { runt_size: 0, ..Config::default() };
    let mut p = pair("lr", true, 256 << 10, plain.clone(), plain);
    assert_eq!(p.message(1 << 20, false), Status::Success);
    assert_eq!((p.ops(0, Proto::Longread), p.sent(0, T::LongreadTagRtm), p.received(0, T::Eor)), (1, 1, 1));
    assert_eq!(p.sent(0, T::CtsData), 0, "no data in packets");
    // Runting read: the runt in RUNTREAD packets, the rest read.
    let mut p = pair("runt", true, 256 << 10, Config::default(), Config::default());
    assert_eq!(p.message(1 << 20, false), Status::Success);
    assert_eq!((p.ops(0, Proto::Runtread), p.received(0, T::Eor)), (1, 1));
    assert!(p.sent(0, T::RuntreadTagRtm) >= 4, "{} RUNTREAD packets", p.sent(0, T::RuntreadTagRtm));
    assert_eq!(p.sent(0, T::RuntreadTagRtm), p.received(1, T::RuntreadTagRtm));
    // A receiver without runting read: plain long-read; a legacy one: long-CTS.
    let off = Config { features_off: rdm4::wire::extra::RUNT, ..Config::default() };
    let mut p = pair("noru", true, 256 << 10, Config::default(), off);
    assert_eq!(p.message(1 << 20, false), Status::Success);
    assert_eq!((p.ops(0, Proto::Runtread), p.ops(0, Proto::Longread)), (0, 1));
    let legacy = Config { legacy: true, ..Config::default() };
    let mut p = pair("lrleg", true, 256 << 10, Config::default(), legacy);
    assert_eq!(p.message(1 << 20, false), Status::Success);
    assert_eq!((p.ops(0, Proto::Longread), p.ops(0, Proto::Longcts)), (0, 1));
}

#[test]
fn a_crowded_endpoint_moves_messages_above_16_kib_by_one_read_without_runt() {
    // Default settings: one peer and this endpoint do not outnumber the
    // CPUs (of a machine of two at least): 64 KiB go medium.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let cfg = ShmConfig { longread_min: usize::MAX, ..ShmConfig::default() };
    let mut p = pair_with(cfg.clone(), "crowd", Config::default(), Config::default());
    let medium = if cpus >= 2 { Proto::Medium } else { Proto::Longread };
    assert_eq!(p.message(64 << 10, false), Status::Success);
    assert_eq!(p.ops(0, medium), 1, "{cpus} CPUs, one peer");
    // As many more endpoints as CPUs: endpoint 0 and its peers outnumber
    // them; the peer inserted before the switch follows it.
    let cfg = ShmConfig { prefix: format!("rdm4p{}crowd", std::process::id()), ..cfg };
    let more: Vec<ShmDevice> = (0..cpus).map(|_| ShmDevice::open_with(cfg.clone()).unwrap()).collect();
    for d in &more {
        use rdm4::device::Device;
        p.eps[0].av_insert(&d.local_addr()).unwrap();
    }
    for len in [64 << 10, (16 << 10) + 1, 16 << 10, 1 << 20] {
        assert_eq!(p.message(len, false), Status::Success, "{len} B");
    }
    let all = [Proto::Eager, Proto::Medium, Proto::Longcts, Proto::Longread, Proto::Runtread].map(|x| p.ops(0, x));
    assert_eq!(
        (p.ops(0, Proto::Longread), p.ops(0, Proto::Runtread)),
        (3, 0),
        "64 KiB, 16 KiB + 1, 1 MiB by one read: {all:?}"
    );
    assert_eq!((p.sent(0, T::RuntreadTagRtm), p.received(0, T::Eor)), (0, 3), "no runt; the reads ended");
    assert_eq!(p.ops(0, Proto::Eager), 2, "16 KiB eager, as always: {all:?}");
    // Endpoint 1 has one peer: its messages keep the ring.
    let data = pattern(64 << 10, 3);
    let mut s = OwnedBuf::from_slice(&data);
    let mut r = OwnedBuf::zeroed(data.len());
    p.eps[0].recv(r.buf(), RecvOpts { tag: None, src: None, context: 8 }).unwrap();
    p.eps[1].send(p.to[1], s.buf(), SendOpts { context: 9, ..SendOpts::default() }).unwrap();
    p.run(|c| !c[0].is_empty() && !c[1].is_empty());
    assert!(r.bytes() == data);
    assert_eq!((p.ops(1, Proto::Longread), p.ops(1, medium)), (u64::from(cpus < 2), 1), "endpoint 1, one peer");
}

#[test]
fn a_far_peer_gets_messages_from_64_kib_by_one_read_without_runt() {
    // Every peer far (RDM4_SHM_FAR_NS=0): from 64 KiB by one read, no
    // runt; below, the ring.
    let far = ShmConfig { far_ns: Some(0), ..ShmConfig::default() };
    let mut p = pair_with(far, "far", Config::default(), Config::default());
    for len in [(64 << 10) - 1, 64 << 10, 1 << 20] {
        assert_eq!(p.message(len, false), Status::Success, "{len} B");
    }
    let all = [Proto::Medium, Proto::Longcts, Proto::Longread, Proto::Runtread].map(|x| p.ops(0, x));
    assert_eq!(all, [1, 0, 2, 0], "64 KiB - 1 medium, 64 KiB and 1 MiB by one read");
    assert_eq!((p.sent(0, T::RuntreadTagRtm), p.received(0, T::Eor)), (0, 2), "no runt; the reads ended");
    // No peer far (RDM4_SHM_FAR_NS=off): 1 MiB through the ring.
    let close = ShmConfig { far_ns: None, ..ShmConfig::default() };
    let mut p = pair_with(close, "close", Config::default(), Config::default());
    assert_eq!(p.message(1 << 20, false), Status::Success);
    assert_eq!((p.ops(0, Proto::Longcts), p.ops(0, Proto::Longread)), (1, 0), "close: long-CTS");
}

#[test]
fn rma_goes_direct_with_immediate_data_by_long_read_or_emulated() {
    // Cross-memory attach: direct; CQ data by write with immediate data.
    // (Not through the ring however much the target polls: see below.)
    let no_ring = ShmConfig { ring_rma: false, ..ShmConfig::default() };
    let mut p = pair_with(no_ring, "direct", Config::default(), Config::default());
    p.write_read(100_000, Some(0xABCD));
    p.write_read(64, None);
    assert_eq!((p.ops(0, Proto::WriteDirect), p.ops(0, Proto::ReadDirect)), (2, 2));
    assert_eq!(p.sent(0, T::EagerRtw) + p.sent(0, T::DcEagerRtw) + p.sent(0, T::LongctsRtw), 0, "no RTW packet");
    // The requester without RDMA write: the target reads the write (LONGREAD_RTW).
    let no_write = Config { features_off: rdm4::wire::extra::RDMA_WRITE, ..Config::default() };
    let mut p = pair("lrtw", true, 64 << 10, no_write, Config::default());
    p.write_read(300_000, Some(0x77));
    assert_eq!((p.ops(0, Proto::WriteLongread), p.sent(0, T::LongreadRtw), p.received(0, T::Eor)), (1, 1, 1));
    assert_eq!(p.ops(0, Proto::ReadDirect), 1);
    // No cross-memory attach: emulated (DC types between full endpoints).
    let mut p = pair("emul", false, usize::MAX, Config::default(), Config::default());
    p.write_read(100, Some(1));
    p.write_read(300_000, None);
    assert_eq!((p.ops(0, Proto::WriteEager), p.ops(0, Proto::WriteLongcts)), (1, 1));
    assert_eq!((p.ops(0, Proto::ReadShort), p.ops(0, Proto::ReadLongcts)), (1, 1));
    assert_eq!((p.sent(0, T::DcEagerRtw), p.sent(0, T::DcLongctsRtw), p.received(0, T::Receipt)), (1, 1, 2));
    // A legacy target: the baseline types, no RECEIPT.
    let legacy = Config { legacy: true, ..Config::default() };
    let mut p = pair("rmaleg", true, usize::MAX, Config::default(), legacy);
    p.write_read(100, None);
    assert_eq!((p.sent(0, T::EagerRtw), p.received(0, T::Receipt), p.ops(0, Proto::WriteDirect)), (1, 0, 0));
}

#[test]
fn delivery_complete_messages_use_the_dc_types_and_their_receipt() {
    let mut p = pair("dc", true, usize::MAX, Config::default(), Config::default());
    for len in [8, 40_000, 1 << 20] {
        assert_eq!(p.message(len, true), Status::Success);
    }
    assert_eq!((p.sent(0, T::DcEagerTagRtm), p.sent(0, T::DcLongctsTagRtm)), (1, 1));
    assert!(p.sent(0, T::DcMediumTagRtm) >= 2);
    assert_eq!(p.received(0, T::Receipt), 3);
    // Towards a legacy peer: NotSup, and nothing of it sent.
    let legacy = Config { legacy: true, ..Config::default() };
    let mut p = pair("dcleg", true, usize::MAX, Config::default(), legacy);
    let mut s = OwnedBuf::from_slice(&[1; 8]);
    let flags = SendFlags { dc: true, ..SendFlags::default() };
    let r = p.eps[0].send_flagged(p.to[0], s.buf(), SendOpts::default(), flags);
    assert_eq!(r, Err(Status::NotSup));
    assert_eq!(p.sent(0, T::DcEagerMsgRtm), 0);
}

/// Small RMA on ordinary memory: through the target's ring while it polls
/// (the device's requests, `ringrma.rs`), by cross-memory attach once it
/// has stopped; a request the target left untaken is taken back and never
/// applied later.
#[test]
fn small_rma_goes_through_the_ring_of_a_polling_target_only() {
    let mut p = pair("ringrma", true, usize::MAX, Config::default(), Config::default());
    let mut region = OwnedBuf::zeroed(1 << 20);
    let key = p.eps[1].mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let base = region.buf().addr();
    let rb = |off: u64| RemoteBuf { addr: base + off, key };
    let ring = |p: &Pair| p.eps[0].device().ring_rdma_counts();
    // The target polls (its progress stamp, every 64th poll, is fresh): a
    // one-packet write and read go as requests into its ring. A stamp
    // older than 50 us (this thread descheduled) would send them by
    // cross-memory attach: a few tries, each after fresh polls.
    let data = pattern(64, 3);
    let mut s = OwnedBuf::from_slice(&data);
    let mut back = OwnedBuf::zeroed(64);
    for _ in 0..20 {
        if ring(&p).0 >= 2 {
            break;
        }
        for _ in 0..200 {
            p.eps[1].progress(0);
        }
        let before = ring(&p).0;
        p.eps[0].write(p.to[0], s.buf(), rb(0), None, 1).unwrap();
        p.eps[0].read(p.to[0], back.buf(), rb(0), 2).unwrap();
        if ring(&p).0 > before {
            // Done in the call, it would pass them: not yet.
            let r = p.eps[0].rma_in_call(p.to[0], s.buf(), rb(0), true);
            assert_eq!(r, Err(Status::Again), "rdm4_write_now behind requests in the ring");
        }
        p.run(|c| c[0].len() >= 2);
        assert_eq!(p.eps[0].rma_in_call(p.to[0], s.buf(), rb(0), true), Ok(()), "once they are answered");
        assert!(p.cqs[0].iter().all(|c| c.status == Status::Success), "{:?}", p.cqs[0]);
        p.cqs[0].clear();
        assert!(back.bytes() == data && region.bytes()[..64] == data[..], "data");
    }
    assert!(ring(&p).0 >= 2, "requests through the ring: {:?}", ring(&p));
    assert_eq!(ring(&p).1, 0, "none taken back from a polling target");
    assert_eq!(p.sent(0, T::DcEagerRtw) + p.sent(0, T::ShortRtr), 0, "no emulated protocol");
    // A request the target refuses (no such key) fails as cross-memory attach would.
    let sent = ring(&p).0;
    for _ in 0..200 {
        p.eps[1].progress(0);
    }
    p.eps[0].write(p.to[0], s.buf(), RemoteBuf { addr: base, key: key ^ 0x400 }, None, 3).unwrap();
    p.run(|c| !c[0].is_empty());
    assert_eq!(p.cqs[0].remove(0).status, Status::RemoteAccess);
    // Longer than a packet: cross-memory attach, polling or not.
    let big = pattern(200_000, 4);
    let mut b = OwnedBuf::from_slice(&big);
    for _ in 0..200 {
        p.eps[1].progress(0);
    }
    let sent = sent.max(ring(&p).0);
    p.eps[0].write(p.to[0], b.buf(), rb(4096), None, 4).unwrap();
    assert_eq!(ring(&p).0, sent);
    p.run(|c| !c[0].is_empty());
    assert_eq!(p.cqs[0].remove(0).status, Status::Success);
    assert!(region.bytes()[4096..204_096] == big[..]);
    // The target stops polling right after a poll: the write goes into its
    // ring, is taken back once its head has stood still a quarter of a
    // millisecond, and is done by cross-memory attach without the target.
    let taken = |p: &Pair| ring(p).1;
    for attempt in 0.. {
        for _ in 0..200 {
            p.eps[1].progress(0);
        }
        let mut x = OwnedBuf::from_slice(&[0xAA; 8]);
        p.eps[0].write(p.to[0], x.buf(), rb(128), None, 5).unwrap();
        let t = Instant::now();
        while p.cqs[0].is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5), "a write waited for a target that stopped");
            p.eps[0].progress(0);
            p.eps[0].poll_cq(&mut p.cqs[0], usize::MAX);
        }
        assert_eq!(p.cqs[0].remove(0).status, Status::Success);
        assert_eq!(region.bytes()[128..136], [0xAA; 8]);
        if taken(&p) == 1 || attempt == 20 {
            break;
        }
    }
    assert_eq!(taken(&p), 1, "a request taken back: {:?}", ring(&p));
    // The taken-back request is void: a later write wins even after the
    // target polls again and meets the old request in its ring.
    let mut y = OwnedBuf::from_slice(&[0x55; 8]);
    p.eps[0].write(p.to[0], y.buf(), rb(128), None, 6).unwrap();
    p.run(|c| !c[0].is_empty());
    assert_eq!(p.cqs[0].remove(0).status, Status::Success);
    for _ in 0..1000 {
        p.eps[1].progress(0);
    }
    assert_eq!(region.bytes()[128..136], [0x55; 8], "the void request was not applied");
    // Off (RDM4_SHM_RING_RMA=0): never the ring, however much it polls.
    let no_ring = ShmConfig { ring_rma: false, ..ShmConfig::default() };
    let mut p = pair_with(no_ring, "noring", Config::default(), Config::default());
    for _ in 0..1000 {
        p.eps[1].progress(0);
    }
    p.write_read(64, None);
    assert_eq!(p.eps[0].device().ring_rdma_counts(), (0, 0));
    assert_eq!((p.ops(0, Proto::WriteDirect), p.ops(0, Proto::ReadDirect)), (1, 1));
}

/// Two threads: the target polls for 2 ms and sleeps for 1 ms by turns
/// while the requester writes and reads back small values without a
/// pause. Requests that meet the target asleep are taken back and done by
/// cross-memory attach; whichever way each went, every read returns what
/// was written last, and the region ends as written.
#[test]
fn small_rma_stays_correct_while_the_target_polls_and_stops_by_turns() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let p = pair("ringturns", true, usize::MAX, Config::default(), Config::default());
    let [mut a, mut b] = p.eps;
    let to = p.to[0];
    let mut region = OwnedBuf::zeroed(64 * 8);
    let key = b.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let base = region.buf().addr();
    let stop = AtomicBool::new(false);
    // Sets `stop` however the requester's side ends (a failed assertion
    // too), so that the target's thread ends and the scope with it.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let last = std::thread::scope(|sc| {
        sc.spawn(|| {
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(2) {
                    b.progress(0);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let _stop = Stop(&stop);
        let mut last = [0u64; 64];
        let mut cq = Vec::new();
        let t = Instant::now();
        let mut i = 0u64;
        while t.elapsed() < Duration::from_millis(400) {
            i += 1;
            let slot = (i % 64) as usize;
            let rb = RemoteBuf { addr: base + 8 * slot as u64, key };
            let mut w = OwnedBuf::from_slice(&i.to_le_bytes());
            let mut r = OwnedBuf::zeroed(8);
            a.write(to, w.buf(), rb, None, 1).unwrap();
            a.read(to, r.buf(), rb, 2).unwrap();
            let t2 = Instant::now();
            while cq.len() < 2 {
                assert!(t2.elapsed() < Duration::from_secs(5), "operation {i} stuck");
                a.progress(0);
                a.poll_cq(&mut cq, usize::MAX);
            }
            assert!(cq.iter().all(|c| c.status == Status::Success), "{cq:?}");
            cq.clear();
            assert_eq!(u64::from_le_bytes(r.bytes().try_into().unwrap()), i, "read {i} returns the write before it");
            last[slot] = i;
        }
        last
    });
    for _ in 0..1000 {
        b.progress(0);
    }
    for (slot, want) in last.iter().enumerate() {
        let got = u64::from_le_bytes(region.bytes()[8 * slot..8 * slot + 8].try_into().unwrap());
        assert_eq!(got, *want, "slot {slot} holds its last write (no request applied late)");
    }
    let (sent, back) = a.device().ring_rdma_counts();
    assert!(sent > 0 && back > 0, "both ways were taken: {sent} requests, {back} taken back");
}
