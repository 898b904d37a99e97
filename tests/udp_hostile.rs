//! Hostile input against the udp device (issue 41): a host that sends
//! garbage to an rdm4 port disturbs only its own traffic. Two real
//! endpoints on loopback exchange verified messages and RMA while a plain
//! `UdpSocket` sends them every kind of bad datagram (`dgram.rs` has the
//! layout): each kind is dropped and counted by its reason, nothing of
//! the real peers' traffic is lost, doubled, reordered or changed, and no
//! memory outside the legitimate writes changes.
//!
//! The device cannot tell a forger from a real peer by anything but the
//! (address, port, connid) a datagram comes from: spoofing a real peer's
//! port needs raw sockets, so the forger here always sends from its own
//! port (or from a port a closed peer left).

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{pattern, Rng};
use rdm4::device::udp::{UdpConfig, UdpDevice};
use rdm4::device::Access;
use rdm4::engine::{Addr, Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{Cts, Packet, PacketType, RawAddr, RawAddrHdr, Req};
use rdm4::Status;

type Ep = Endpoint<UdpDevice>;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// A small MTU: messages of a few KiB already take several datagrams.
const MTU: usize = 4096;
/// Every test ends well within this.
const LIMIT: Duration = Duration::from_secs(10);

// Datagram kinds (`dgram.rs`).
const DATA: u8 = 1;
const ACK: u8 = 2;
const CLOSE: u8 = 3;
const WRITE: u8 = 4;
const READ_REQ: u8 = 5;
const READ_RSP: u8 = 6;
const RDMA_DONE: u8 = 7;
const WRITE_IMM: u8 = 8;
const PROBE: u8 = 9;
const WHO: u8 = 10;
const NAME: u8 = 11;

/// A device header's fields.
#[derive(Clone, Copy)]
struct Hdr {
    kind: u8,
    flags: u8,
    src: u32,
    dst: u32,
    seq: u32,
    ack: u32,
    bits: u32,
    window: u32,
}

impl Hdr {
    /// A header of `kind` from connid `src` to connid `dst`, sequence 0,
    /// acknowledging nothing, granting 1 MiB.
    fn new(kind: u8, src: u32, dst: u32) -> Hdr {
        Hdr { kind, flags: 0, src, dst, seq: 0, ack: 0, bits: 0, window: 1 << 20 }
    }

    fn with(self, body: &[u8]) -> Vec<u8> {
        let mut d = vec![0xD4, 2, self.kind, self.flags];
        for w in [self.src, self.dst, self.seq, self.ack, self.bits, self.window] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(body);
        d
    }
}

/// A WRITE (or WRITE_IMM) body: op, imm, key, addr, total, offset, data.
fn write_body(op: u32, key: u64, addr: u64, total: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&op.to_le_bytes());
    b.extend_from_slice(&7u32.to_le_bytes());
    for w in [key, addr, total, offset] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(data);
    b
}

/// A READ_REQ body: op, pad, key, addr, len.
fn read_req_body(op: u32, key: u64, addr: u64, len: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&op.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    for w in [key, addr, len] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

/// A READ_RSP body: op, pad, offset, data.
fn read_rsp_body(op: u32, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&op.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b.extend_from_slice(data);
    b
}

/// An RDMA_DONE body: op, status.
fn done_body(op: u32, status: i32) -> Vec<u8> {
    let mut b = op.to_le_bytes().to_vec();
    b.extend_from_slice(&status.to_le_bytes());
    b
}

/// An EAGER_MSGRTM with message id `msg_id`, the raw address header `raw`
/// (if any) and `data`.
fn eager_rtm(msg_id: u32, raw: Option<&RawAddr>, data: &[u8]) -> Vec<u8> {
    let body = raw.map(RawAddr::to_req_hdr_body);
    let mut r = Req::new(PacketType::EagerMsgRtm);
    r.fields.msg_id = msg_id;
    r.raw_addr = body.as_ref().map(|b| RawAddrHdr::new(b).unwrap());
    r.data = data;
    let mut out = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut out).unwrap();
    out.truncate(n);
    out
}

/// A well-formed CTS: an EFA packet that names no sender.
fn cts() -> Vec<u8> {
    let c = Cts { flags: 0, connid: None, padding: 0, send_id: 1, recv_id: 2, recv_length: 4096 };
    let mut out = vec![0u8; 64];
    let n = Packet::Cts(c).emit(&mut out).unwrap();
    out.truncate(n);
    out
}

/// Two endpoints on loopback that know each other, their HANDSHAKEs
/// exchanged, and B's registered region: `GUARD` bytes of unregistered
/// memory on each side of `REGION` registered ones.
struct Pair {
    a: Ep,
    b: Ep,
    ab: Addr,
    ba: Addr,
    cqs: [Vec<Cqe>; 2],
    mem: OwnedBuf,
    key: u64,
}

const REGION: usize = 1 << 20;
const GUARD: usize = 8192;

fn open_at(port: u16) -> Ep {
    let cfg = UdpConfig { addr: Some(LO), port, mtu: Some(MTU), ..UdpConfig::default() };
    Endpoint::new(UdpDevice::open_with(cfg).unwrap(), Config::default())
}

impl Pair {
    fn new() -> Pair {
        let (mut a, mut b) = (open_at(0), open_at(0));
        let ab = a.av_insert(&b.addr()).unwrap();
        let ba = b.av_insert(&a.addr()).unwrap();
        let mut mem = OwnedBuf::from_slice(&pattern(REGION + 2 * GUARD, 77));
        let region = mem.buf().slice(GUARD, REGION).unwrap();
        let key = b.mr_reg(region, Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
        let mut p = Pair { a, b, ab, ba, cqs: [Vec::new(), Vec::new()], mem, key };
        p.messages(1, &[1]);
        p
    }

    /// The start of B's registered region.
    fn base(&mut self) -> u64 {
        self.mem.buf().addr() + GUARD as u64
    }

    fn step(&mut self) {
        self.a.progress(0);
        self.a.poll_cq(&mut self.cqs[0], usize::MAX);
        self.b.progress(0);
        self.b.poll_cq(&mut self.cqs[1], usize::MAX);
    }

    fn run(&mut self, what: &str, mut done: impl FnMut(&[Vec<Cqe>; 2]) -> bool) {
        let t = Instant::now();
        while !done(&self.cqs) {
            assert!(
                t.elapsed() < LIMIT,
                "{what}: stuck with {} / {} completions",
                self.cqs[0].len(),
                self.cqs[1].len()
            );
            self.step();
        }
    }

    /// `rounds` rounds of one message of each of `sizes` each way, untagged,
    /// every receive from the one peer: each arrives once, whole, in the
    /// receive posted for it (the order they were sent).
    fn messages(&mut self, rounds: usize, sizes: &[usize]) {
        for round in 0..rounds {
            let seeds: Vec<u64> = (0..sizes.len()).map(|k| (round * 1000 + k) as u64 + 1).collect();
            let mut dsts: [Vec<OwnedBuf>; 2] = Default::default();
            let mut srcs: Vec<OwnedBuf> = Vec::new();
            for (side, dst) in dsts.iter_mut().enumerate() {
                for (k, &n) in sizes.iter().enumerate() {
                    // One byte more than sent: a message of another sender
                    // or length would show in the completion's length.
                    let mut d = OwnedBuf::zeroed(n + 1);
                    let (ep, src) = if side == 0 { (&mut self.b, self.ba) } else { (&mut self.a, self.ab) };
                    ep.recv(d.buf(), RecvOpts { src: Some(src), context: k as u64 + 1, ..RecvOpts::default() })
                        .unwrap();
                    dst.push(d);
                }
            }
            for side in 0..2 {
                for (k, &n) in sizes.iter().enumerate() {
                    let mut s = OwnedBuf::from_slice(&pattern(n, seeds[k] + side as u64 * 7));
                    let (ep, to) = if side == 0 { (&mut self.a, self.ab) } else { (&mut self.b, self.ba) };
                    ep.send(to, s.buf(), SendOpts { context: 100 + k as u64, ..SendOpts::default() }).unwrap();
                    srcs.push(s);
                }
            }
            let n = sizes.len();
            self.run("messages", |c| c[0].len() == 2 * n && c[1].len() == 2 * n);
            for (side, cq) in self.cqs.iter().enumerate() {
                assert!(cq.iter().all(|e| e.status == Status::Success), "side {side}: {cq:?}");
            }
            // Receives of side 1 (B) got A's messages, and the other way.
            for (recv_side, dst) in dsts.iter().enumerate() {
                let cq = &self.cqs[1 - recv_side];
                for (k, &len) in sizes.iter().enumerate() {
                    let e = cq.iter().find(|e| e.context == k as u64 + 1).expect("a receive completed");
                    assert_eq!(e.len, len as u64, "round {round}, message {k} of side {recv_side}");
                    let want = pattern(len, seeds[k] + recv_side as u64 * 7);
                    assert!(dst[k].bytes()[..len] == want[..], "round {round}, message {k}: bytes");
                    assert_eq!(dst[k].bytes()[len], 0, "round {round}, message {k}: written past its length");
                }
                let sends = cq.iter().filter(|e| e.context >= 100).count();
                assert_eq!(sends, n, "every send completed once");
            }
            self.cqs = [Vec::new(), Vec::new()];
        }
    }

    /// A writes `len` bytes at `off` of B's region and reads them back.
    fn rma(&mut self, off: usize, len: usize, seed: u64) {
        let data = pattern(len, seed);
        let mut src = OwnedBuf::from_slice(&data);
        let mut back = OwnedBuf::zeroed(len);
        let at = RemoteBuf { addr: self.base() + off as u64, key: self.key };
        self.a.write(self.ab, src.buf(), at, None, 1).unwrap();
        self.run("write", |c| !c[0].is_empty());
        self.a.read(self.ab, back.buf(), at, 2).unwrap();
        self.run("read", |c| c[0].len() == 2);
        assert!(self.cqs[0].iter().all(|e| e.status == Status::Success), "{:?}", self.cqs[0]);
        assert!(back.bytes() == data.as_slice(), "read back what was written");
        self.cqs = [Vec::new(), Vec::new()];
    }
}

/// What the endpoints count of what they dropped (device and engine).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Drops {
    malformed: u64,
    rdma_malformed: u64,
    rdma_unmatched: u64,
    unknown_control: u64,
    strangers_over: u64,
    from_lost: u64,
    stale: u64,
    too_far: u64,
    duplicates: u64,
    rdma_refused: u64,
    engine_malformed: u64,
    unknown_sender: u64,
    stale_connid: u64,
    protocol_errors: u64,
}

fn drops(ep: &Ep) -> Drops {
    let (d, e) = (ep.device().stats(), ep.stats());
    Drops {
        malformed: d.malformed,
        rdma_malformed: d.rdma_malformed,
        rdma_unmatched: d.rdma_unmatched,
        unknown_control: d.unknown_control,
        strangers_over: d.strangers_over,
        from_lost: d.from_lost,
        stale: d.stale,
        too_far: d.too_far,
        duplicates: d.duplicates,
        rdma_refused: d.rdma_refused,
        engine_malformed: e.malformed,
        unknown_sender: e.unknown_sender,
        stale_connid: e.stale_connid,
        protocol_errors: e.protocol_errors,
    }
}

impl std::ops::Sub for Drops {
    type Output = Drops;
    fn sub(self, o: Drops) -> Drops {
        Drops {
            malformed: self.malformed - o.malformed,
            rdma_malformed: self.rdma_malformed - o.rdma_malformed,
            rdma_unmatched: self.rdma_unmatched - o.rdma_unmatched,
            unknown_control: self.unknown_control - o.unknown_control,
            strangers_over: self.strangers_over - o.strangers_over,
            from_lost: self.from_lost - o.from_lost,
            stale: self.stale - o.stale,
            too_far: self.too_far - o.too_far,
            duplicates: self.duplicates - o.duplicates,
            rdma_refused: self.rdma_refused - o.rdma_refused,
            engine_malformed: self.engine_malformed - o.engine_malformed,
            unknown_sender: self.unknown_sender - o.unknown_sender,
            stale_connid: self.stale_connid - o.stale_connid,
            protocol_errors: self.protocol_errors - o.protocol_errors,
        }
    }
}

const NONE: Drops = Drops {
    malformed: 0,
    rdma_malformed: 0,
    rdma_unmatched: 0,
    unknown_control: 0,
    strangers_over: 0,
    from_lost: 0,
    stale: 0,
    too_far: 0,
    duplicates: 0,
    rdma_refused: 0,
    engine_malformed: 0,
    unknown_sender: 0,
    stale_connid: 0,
    protocol_errors: 0,
};
const MALFORMED: Drops = Drops { malformed: 1, ..NONE };
const RDMA_MALFORMED: Drops = Drops { rdma_malformed: 1, ..NONE };
const RDMA_UNMATCHED: Drops = Drops { rdma_unmatched: 1, ..NONE };
const UNKNOWN_CONTROL: Drops = Drops { unknown_control: 1, ..NONE };
const STALE: Drops = Drops { stale: 1, ..NONE };
const TOO_FAR: Drops = Drops { too_far: 1, ..NONE };
const DUPLICATE: Drops = Drops { duplicates: 1, ..NONE };
const REFUSED: Drops = Drops { rdma_refused: 1, ..NONE };
const ENGINE_MALFORMED: Drops = Drops { engine_malformed: 1, ..NONE };
const UNKNOWN_SENDER: Drops = Drops { unknown_sender: 1, ..NONE };

/// One hostile datagram and what the receiver must count for it.
struct Case {
    what: String,
    dgram: Vec<u8>,
    want: Drops,
}

/// Every kind of bad datagram for B (connid `b`; A's is `a`), whose
/// registration `key` covers `[base, base + REGION)`. `fresh` gives each
/// datagram that opens a stranger's sequence its own source connid, so
/// that none of them is a duplicate of another.
fn cases(a: u32, b: u32, key: u64, base: u64) -> Vec<Case> {
    let mut out = Vec::new();
    let mut next_src = 0x5000_0000u32;
    let mut fresh = || {
        next_src += 1;
        next_src
    };
    let mut push = |what: String, dgram: Vec<u8>, want: Drops| out.push(Case { what, dgram, want });
    let good = Hdr::new(DATA, 0x4000_0000, b).with(&[0xFF; 16]);
    // The header itself.
    for m in [0x00u8, 0xD5, 0x4D, 0xFF] {
        let mut d = good.clone();
        d[0] = m;
        push(format!("magic {m:#x}"), d, MALFORMED);
    }
    for v in [0u8, 1, 3, 255] {
        let mut d = good.clone();
        d[1] = v;
        push(format!("version {v}"), d, MALFORMED);
    }
    for k in [0u8, 12, 128, 255] {
        let mut d = good.clone();
        d[2] = k;
        push(format!("kind {k}"), d, MALFORMED);
    }
    // Every length up to 40 bytes: random ones, and prefixes of a valid
    // WRITE (a header from 28 bytes on, then a body too short for it).
    let mut rng = Rng::new(41);
    for len in 0..=40 {
        let mut d = rng.bytes(len);
        if let Some(m) = d.first_mut() {
            *m = 0x11;
        }
        push(format!("{len} random bytes"), d, MALFORMED);
        let w = Hdr::new(WRITE, fresh(), b).with(&write_body(1, key, base, 8, 0, &[1; 8]));
        let want = if len < 28 { MALFORMED } else { RDMA_MALFORMED }; // the header: 28 bytes
        push(format!("WRITE cut to {len} bytes"), w[..len].to_vec(), want);
    }
    // Bodies cut short, one byte short of each kind's header at least.
    for (kind, name, whole) in [
        (WRITE, "WRITE", write_body(2, key, base, 4, 0, &[])),
        (WRITE_IMM, "WRITE_IMM", write_body(3, key, base, 4, 0, &[])),
        (READ_REQ, "READ_REQ", read_req_body(4, key, base, 4)),
        (READ_RSP, "READ_RSP", read_rsp_body(5, 0, &[])),
        (RDMA_DONE, "RDMA_DONE", done_body(6, 0)),
    ] {
        for len in 0..whole.len() {
            let d = Hdr::new(kind, fresh(), b).with(&whole[..len]);
            push(format!("{name} body of {len} bytes"), d, RDMA_MALFORMED);
        }
    }
    // For another incarnation of the port (or another endpoint): stale.
    for dst in [b ^ 1, 0, u32::MAX, a] {
        push(format!("dst_connid {dst:#x}"), Hdr::new(DATA, fresh(), dst).with(&cts()), STALE);
        push(format!("WRITE to dst_connid {dst:#x}"), Hdr::new(WRITE, fresh(), dst).with(&[0; 48]), STALE);
    }
    // Unreliable kinds from no one the device talks to are dropped and
    // counted: an ACK, a PROBE and a CLOSE naming A's connid (the device
    // keys peers by address and connid: A is not touched).
    let huge = Hdr { ack: u32::MAX, bits: u32::MAX, window: u32::MAX, ..Hdr::new(ACK, a, b) };
    push("ACK of everything, as A's connid".into(), huge.with(&[]), UNKNOWN_CONTROL);
    push("PROBE as A's connid".into(), Hdr::new(PROBE, a, b).with(&[]), UNKNOWN_CONTROL);
    push("CLOSE as A's connid".into(), Hdr::new(CLOSE, a, b).with(&[]), UNKNOWN_CONTROL);
    // A question of a name (WHO, to connid 0) shorter than its answer
    // would be: never answered (no amplification); a WHO to B's connid
    // and a NAME (an answer nobody asked B for) from a stranger.
    for len in [0usize, 1, 31] {
        push(format!("WHO of {len} bytes"), Hdr::new(WHO, fresh(), 0).with(&vec![0; len]), MALFORMED);
    }
    push("WHO to B's connid".into(), Hdr::new(WHO, fresh(), b).with(&[0; 32]), UNKNOWN_CONTROL);
    push("NAME to B".into(), Hdr::new(NAME, fresh(), b).with(&[0; 32]), UNKNOWN_CONTROL);
    // Sequence numbers out of any window.
    for (seq, want) in [(65u32, TOO_FAR), (0x7FFF_FFFF, TOO_FAR), (0x8000_0000, DUPLICATE), (u32::MAX, DUPLICATE)] {
        let h = Hdr { seq, ..Hdr::new(DATA, fresh(), b) };
        push(format!("seq {seq:#x}"), h.with(&[0xFF; 8]), want);
    }
    // Acknowledgement fields and window at their extremes, on a datagram
    // whose EFA packet is garbage: only the packet is counted.
    for (ack, bits, window) in [(u32::MAX, u32::MAX, u32::MAX), (0x8000_0000, 1, 0), (12345, 0xAAAA_AAAA, 1)] {
        let h = Hdr { ack, bits, window, flags: 0xFF, ..Hdr::new(DATA, fresh(), b) };
        push(format!("ack {ack:#x}, bits {bits:#x}, window {window:#x}"), h.with(&[0xFF; 8]), ENGINE_MALFORMED);
    }
    // A DATA datagram carrying a garbage EFA packet; a well-formed one
    // that names no sender; A's connid from another port is a stranger.
    let mut eager = eager_rtm(0, None, b"forged");
    eager[1] = 3; // protocol version 3
    for (what, pkt, want) in [
        ("an empty packet", Vec::new(), ENGINE_MALFORMED),
        ("one byte", vec![64], ENGINE_MALFORMED),
        ("an unknown type", vec![0xFE; 64], ENGINE_MALFORMED),
        ("a cut REQ header", vec![64, 4, 0], ENGINE_MALFORMED),
        ("a REQ of protocol 3", eager, ENGINE_MALFORMED),
        ("a CTS from no known sender", cts(), UNKNOWN_SENDER),
        ("a REQ from no known sender", eager_rtm(0, None, b"who?"), UNKNOWN_SENDER),
    ] {
        push(format!("DATA with {what}"), Hdr::new(DATA, fresh(), b).with(&pkt), want);
    }
    push("DATA as A's connid with garbage".into(), Hdr::new(DATA, a, b).with(&[0xEE; 40]), ENGINE_MALFORMED);
    // RDMA the owner refuses: a wrong key, bounds (before, after, across
    // the end, wrapping), a write whose segment lies past its total.
    let data = [0xC3u8; 64];
    let end = base + REGION as u64;
    for (what, k, addr, total, offset) in [
        ("a wrong key", key ^ 1, base, 64, 0),
        ("key 0", 0, base, 64, 0),
        ("an address before the region", key, base - 64, 64, 0),
        ("an address after the region", key, end, 64, 0),
        ("a range across the region's end", key, end - 32, 64, 0),
        ("an address that wraps", key, u64::MAX - 16, 64, 0),
        ("an offset that wraps", key, base, 64, u64::MAX - 8),
        ("a segment past its total", key, base, 32, 0),
        ("an offset past the region", key, base, 1 << 40, (1 << 40) - 64),
    ] {
        let body = write_body(100, k, addr, total, offset, &data);
        push(format!("WRITE with {what}"), Hdr::new(WRITE, fresh(), b).with(&body), REFUSED);
        push(format!("WRITE_IMM with {what}"), Hdr::new(WRITE_IMM, fresh(), b).with(&body), REFUSED);
    }
    for (what, k, addr, len) in [
        ("a huge length", key, base, u64::MAX),
        ("a length of 1 TiB", key, base, 1 << 40),
        ("a length past the region", key, base + 8, REGION as u64),
        ("a wrong key", key.wrapping_add(1), base, 8),
        ("an address before the region", key, base - 8, 8),
    ] {
        push(
            format!("READ_REQ with {what}"),
            Hdr::new(READ_REQ, fresh(), b).with(&read_req_body(9, k, addr, len)),
            REFUSED,
        );
    }
    // Answers to operations B never asked this sender for.
    for op in 0..4 {
        let rsp = read_rsp_body(op, 0, &[0xAB; 100]);
        push(format!("READ_RSP for op {op}"), Hdr::new(READ_RSP, fresh(), b).with(&rsp), RDMA_UNMATCHED);
        for code in [0, -1, -22] {
            let d = Hdr::new(RDMA_DONE, fresh(), b).with(&done_body(op, code));
            push(format!("RDMA_DONE {code} for op {op}"), d, RDMA_UNMATCHED);
        }
    }
    out
}

/// Each kind of bad datagram, sent alone to B: B counts it by its reason
/// (and nothing else), delivers nothing, and A is not disturbed; then the
/// pair's messages and RMA work as before, and B's memory is as it was.
#[test]
fn every_kind_of_bad_datagram_is_dropped_and_counted_by_its_reason() {
    let t = Instant::now();
    let mut p = Pair::new();
    let attacker = UdpSocket::bind((LO, 0)).unwrap();
    let to_b = p.b.device().socket_addr();
    let before_mem = p.mem.bytes().to_vec();
    let a_before = drops(&p.a);
    // A one-byte datagram after each case: malformed. When it is counted,
    // the case before it has been handled (one socket's datagrams arrive in
    // order, and the device takes them in order).
    let sentinel = [0u8];
    let (a, b) = (p.a.addr().connid(), p.b.addr().connid());
    let base = p.base();
    let all = cases(a, b, p.key, base);
    let mut mismatches = Vec::new();
    for c in &all {
        let before = drops(&p.b);
        attacker.send_to(&c.dgram, to_b).unwrap();
        attacker.send_to(&sentinel, to_b).unwrap();
        let want = Drops { malformed: c.want.malformed + 1, ..c.want };
        let t0 = Instant::now();
        while (drops(&p.b) - before).malformed < want.malformed && t0.elapsed() < Duration::from_secs(1) {
            p.step();
        }
        p.step();
        let mut got = drops(&p.b) - before;
        // A retransmission of the pair's own (its last acknowledgement
        // late) is a duplicate too.
        if got.duplicates >= want.duplicates {
            got.duplicates = want.duplicates;
        }
        if got != want {
            mismatches.push(format!("{}: want {want:?}, got {got:?}", c.what));
        }
    }
    assert!(mismatches.is_empty(), "{} of {} cases:\n{}", mismatches.len(), all.len(), mismatches.join("\n"));
    assert!(p.cqs[0].is_empty() && p.cqs[1].is_empty(), "nothing completed: {:?}", p.cqs);
    assert_eq!(
        Drops { duplicates: 0, ..drops(&p.a) - a_before },
        NONE,
        "A saw none of it (duplicates: B's retransmissions)"
    );
    assert!(p.mem.bytes() == before_mem.as_slice(), "B's memory is untouched");
    assert_eq!(p.b.unexpected_messages(), 0);
    // The pair goes on as before.
    p.messages(2, &[0, 1, 100, 5000, 20_000, 100_000]);
    p.rma(1000, 50_000, 5);
    let mut want = before_mem;
    want[GUARD + 1000..GUARD + 51_000].copy_from_slice(&pattern(50_000, 5));
    assert!(p.mem.bytes() == want.as_slice(), "only the legitimate write changed B's memory");
    println!("{} cases in {:.2} s: {:?}", all.len(), t.elapsed().as_secs_f64(), p.b.device().stats());
    assert!(t.elapsed() < LIMIT);
}

/// Datagram `d` as the `pass`-th round of a blast sends it: a header's
/// source connid one of 8 variants, its sequence number moved on every 8
/// rounds, so that later rounds are new senders and new datagrams to the
/// device, not duplicates of the first.
fn vary(d: &[u8], pass: u32) -> Vec<u8> {
    let mut d = d.to_vec();
    if d.len() >= 28 && d[0] == 0xD4 {
        d[7] ^= (pass % 8) as u8;
        let seq = u32::from_le_bytes(d[12..16].try_into().unwrap()).wrapping_add(pass / 8);
        d[12..16].copy_from_slice(&seq.to_le_bytes());
    }
    d
}

/// Messages of every size both ways (several datagrams each from 4 KiB on,
/// long-CTS from 64 KiB) and RMA writes and reads, while a stranger sends
/// both endpoints every kind of bad datagram, paced only lightly: every
/// message arrives once, whole, in order; every RMA is exact; nothing else
/// of B's memory changes; both endpoints count the garbage.
#[test]
fn the_pair_exchanges_exact_messages_and_rma_while_a_stranger_blasts_garbage() {
    let t = Instant::now();
    let mut p = Pair::new();
    let (a, b) = (p.a.addr().connid(), p.b.addr().connid());
    let base = p.base();
    // For A: the same datagrams with A's connid as destination (they are
    // then counted like B's), for B as they are.
    let for_b: Vec<Vec<u8>> = cases(a, b, p.key, base).into_iter().map(|c| c.dgram).collect();
    let for_a: Vec<Vec<u8>> = cases(b, a, p.key, base).into_iter().map(|c| c.dgram).collect();
    let targets = [p.a.device().socket_addr(), p.b.device().socket_addr()];
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let blaster = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let s = UdpSocket::bind((LO, 0)).unwrap();
            let (mut n, mut pass) = (0u64, 0u32);
            while !stop.load(Ordering::Relaxed) {
                for (to, corpus) in targets.iter().zip([&for_a, &for_b]) {
                    for d in corpus {
                        let _ = s.send_to(&vary(d, pass), *to);
                        n += 1;
                        if n % 64 == 0 {
                            // Room for the receivers' socket buffers to drain:
                            // the legitimate traffic must not only survive
                            // loss (it does) but meet the garbage.
                            std::thread::sleep(Duration::from_micros(100));
                        }
                    }
                }
                sent.store(n, Ordering::Relaxed);
                pass += 1;
            }
        })
    };
    let before = [drops(&p.a), drops(&p.b)];
    let before_mem = p.mem.bytes().to_vec();
    p.messages(10, &[0, 1, 100, 4000, 4100, 12_000, 40_000, 100_000, 300_000]);
    for k in 0..10 {
        p.rma(k * 1000, 200_000, 11 + k as u64);
    }
    p.rma(REGION - 70_000, 70_000, 30);
    p.messages(10, &[8, 64 << 10]);
    stop.store(true, Ordering::Relaxed);
    blaster.join().unwrap();
    for _ in 0..100 {
        p.step();
    }
    let mut want = before_mem;
    for k in 0..10 {
        want[GUARD + k * 1000..GUARD + k * 1000 + 200_000].copy_from_slice(&pattern(200_000, 11 + k as u64));
    }
    want[GUARD + REGION - 70_000..GUARD + REGION].copy_from_slice(&pattern(70_000, 30));
    assert!(p.mem.bytes() == want.as_slice(), "only the legitimate writes changed B's memory");
    assert!(p.cqs[0].is_empty() && p.cqs[1].is_empty(), "nothing more completed: {:?}", p.cqs);
    for (side, ep) in [&p.a, &p.b].into_iter().enumerate() {
        let d = drops(ep) - before[side];
        println!("side {side}: {d:?}; {:?}", ep.device().stats());
        assert!(d.malformed > 0 && d.stale > 0 && d.too_far > 0 && d.rdma_refused > 0, "side {side}: {d:?}");
        assert!(d.engine_malformed > 0 && d.unknown_sender > 0, "side {side}: {d:?}");
    }
    println!("{} bad datagrams sent in {:.2} s", sent.load(Ordering::Relaxed), t.elapsed().as_secs_f64());
    assert!(t.elapsed() < LIMIT, "{:?}", t.elapsed());
}

/// Datagrams from 4106 new senders (one port, a connid each): the device
/// keeps state for the first 4096 strangers (their garbage packets reach
/// the engine, which counts them malformed), drops and counts the other
/// 10, and the pair's traffic goes on.
#[test]
fn senders_past_the_strangers_the_device_keeps_are_dropped_and_counted() {
    let t = Instant::now();
    let mut p = Pair::new();
    let attacker = UdpSocket::bind((LO, 0)).unwrap();
    let to_b = p.b.device().socket_addr();
    let b = p.b.addr().connid();
    let before = drops(&p.b);
    const SENDERS: u32 = 4096 + 10;
    for batch in (0..SENDERS).collect::<Vec<_>>().chunks(64) {
        for &i in batch {
            attacker.send_to(&Hdr::new(DATA, 0x6000_0000 + i, b).with(&[0xEE; 40]), to_b).unwrap();
        }
        // Drained before the next batch: the socket's buffer drops nothing.
        let t0 = Instant::now();
        let seen = |d: Drops| d.engine_malformed + d.strangers_over;
        let want = u64::from(batch[batch.len() - 1]) + 1;
        while seen(drops(&p.b) - before) < want && t0.elapsed() < Duration::from_secs(2) {
            p.step();
        }
    }
    let got = drops(&p.b) - before;
    assert_eq!(got, Drops { engine_malformed: 4096, strangers_over: 10, ..NONE });
    p.messages(3, &[0, 100, 5000]);
    p.rma(64, 1000, 5);
    assert!(t.elapsed() < LIMIT);
}

/// A closes; a stranger binds A's port and replays what A would send
/// (A's connid, B's connid, sequence numbers from 0, REQs with A's raw
/// address): B drops it all, A's peer being closed, counts it, and
/// delivers nothing.
/// Then a new endpoint at that port (a new incarnation, a new connid)
/// talks to B as any new peer, exactly.
#[test]
fn a_closed_peers_port_taken_by_a_stranger_replays_nothing_into_b() {
    let t = Instant::now();
    let mut p = Pair::new();
    let a_raw = p.a.addr();
    let a_addr: SocketAddr = p.a.device().socket_addr();
    let b_connid = p.b.addr().connid();
    let to_b = p.b.device().socket_addr();
    // A closes (an endpoint B does not know holds its place in `p`).
    drop(std::mem::replace(&mut p.a, open_at(0)));
    // B takes A's CLOSE.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(50) {
        p.step();
    }
    let mut any = OwnedBuf::zeroed(64);
    p.b.recv(any.buf(), RecvOpts { context: 42, ..RecvOpts::default() }).unwrap();
    let before = drops(&p.b);
    let stranger = UdpSocket::bind(a_addr).expect("A's port is free again");
    for seq in 0..16u32 {
        let pkt = eager_rtm(seq, Some(&a_raw), b"replayed");
        let h = Hdr { seq, ..Hdr::new(DATA, a_raw.connid(), b_connid) };
        stranger.send_to(&h.with(&pkt), to_b).unwrap();
        let w = Hdr { seq: seq + 16, ..Hdr::new(WRITE, a_raw.connid(), b_connid) };
        let at = p.base();
        stranger.send_to(&w.with(&write_body(1, p.key, at, 8, 0, &[1; 8])), to_b).unwrap();
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        p.step();
    }
    assert!(p.cqs[1].iter().all(|e| e.context != 42), "a replayed message was delivered: {:?}", p.cqs[1]);
    assert_eq!(drops(&p.b) - before, Drops { from_lost: 32, ..NONE }, "all 32 dropped as from a closed peer");
    assert!(p.mem.bytes()[GUARD..GUARD + 8] != [1; 8], "the replayed write was not applied");
    drop(stranger);
    p.b.cancel(42).unwrap();
    for _ in 0..10 {
        p.step();
    }
    // A new incarnation at A's port: a new connid, a new peer.
    p.a = open_at(a_addr.port());
    assert_ne!(p.a.addr().connid(), a_raw.connid());
    p.ab = p.a.av_insert(&p.b.addr()).unwrap();
    p.ba = p.b.av_insert(&p.a.addr()).unwrap();
    p.cqs = [Vec::new(), Vec::new()];
    p.messages(2, &[0, 100, 5000, 100_000]);
    p.rma(64, 10_000, 9);
    assert!(t.elapsed() < LIMIT);
}

/// A stranger sends B, from its own port, the next message A would send:
/// an EAGER_MSGRTM carrying A's raw address and A's next `msg_id`. The
/// device hands it over as from no known peer (it is); the engine must
/// not take the raw address header's word that it is A's.
#[test]
fn a_stranger_cannot_pass_its_messages_off_as_a_known_peers() {
    let mut p = Pair::new();
    let a_raw = p.a.addr();
    let b_connid = p.b.addr().connid();
    let to_b = p.b.device().socket_addr();
    let mut dst = OwnedBuf::zeroed(64);
    p.b.recv(dst.buf(), RecvOpts { src: Some(p.ba), context: 1, ..RecvOpts::default() }).unwrap();
    let stranger = UdpSocket::bind((LO, 0)).unwrap();
    // A sent one message (msg_id 0) in `Pair::new`; the next is 1. A few
    // around it, each from a connid of its own.
    for (k, msg_id) in (0..4u32).enumerate() {
        let pkt = eager_rtm(msg_id, Some(&a_raw), b"forged!");
        stranger.send_to(&Hdr::new(DATA, 0x6000_0000 + k as u32, b_connid).with(&pkt), to_b).unwrap();
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(100) {
        p.step();
    }
    let real = pattern(40, 3);
    let mut s = OwnedBuf::from_slice(&real);
    p.a.send(p.ab, s.buf(), SendOpts { context: 2, ..SendOpts::default() }).unwrap();
    p.run("A's message", |c| !c[0].is_empty() && !c[1].is_empty());
    let e = p.cqs[1][0];
    assert_eq!((e.status, e.len), (Status::Success, 40), "{e:?}");
    assert!(dst.bytes()[..40] == real[..], "B got {:?}", &dst.bytes()[..8]);
}
