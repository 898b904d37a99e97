//! One test per forged packet case (issue 41): forged packets sent into a
//! real endpoint over the sim device are dropped and counted (`Stats`) or
//! answered with an error — never a panic, a write outside the buffers lent
//! to the engine (each sits between guard bytes), or a completion reporting
//! success for data that did not arrive — and afterwards the operation the
//! forgery aimed at, or a new one, completes with the right bytes.
//!
//! The endpoint under test talks to peers the test drives by hand: sim
//! devices that introduce themselves with a HANDSHAKE, read what the
//! endpoint sends them (to learn its `send_id` / `recv_id` values) and
//! answer, truly or falsely. A second such peer forges answers naming the
//! first one's operations (the engine must check that a response comes from
//! its operation's own peer); a stranger, a device the endpoint has never
//! heard of, sends without a raw address.

mod common;

use common::pattern;
use rdm4::atomic_ops;
use rdm4::device::sim::{SimConfig, SimDevice, SimNet};
use rdm4::device::{Ah, DevEvent, Device};
use rdm4::engine::{Addr, Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendFlags, SendOpts, Stats, ADDR_UNSPEC};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::wire::{
    extra, handshake_flags, peer_error_ref, AtomRsp, Cts, CtsData, IdsHdr, Packet, PacketType, PeerError, RawAddrHdr,
    ReadRsp, Receipt, Req, ReqFamily, ReqFields, RmaIov, Subprotocol,
};
use rdm4::Status;

const GUARD: usize = 64;
const FILL: u8 = 0xC3;

/// A buffer lent to the engine, between guard bytes.
struct Guarded {
    bytes: Box<[u8]>,
    len: usize,
}

impl Guarded {
    fn new(data: &[u8]) -> Guarded {
        let mut bytes = vec![FILL; data.len() + 2 * GUARD].into_boxed_slice();
        bytes[GUARD..GUARD + data.len()].copy_from_slice(data);
        Guarded { bytes, len: data.len() }
    }

    fn buf(&mut self) -> UserBuf {
        // SAFETY: the box is owned by the rig, which drops the endpoint
        // first (`Rig`'s field order), and the test reads it only between
        // engine calls.
        unsafe { UserBuf::from_raw(self.bytes.as_mut_ptr().add(GUARD), self.len) }.unwrap()
    }

    fn data(&self) -> &[u8] {
        &self.bytes[GUARD..GUARD + self.len]
    }

    fn guards_intact(&self) -> bool {
        let n = self.bytes.len();
        self.bytes[..GUARD].iter().chain(&self.bytes[n - GUARD..]).all(|&b| b == FILL)
    }
}

/// What the hand-driven peers advertise (runting read aside: they take
/// plain long-read RTMs).
const FEATURES: u64 = extra::RDMA_READ | extra::DELIVERY_COMPLETE | extra::READ_NACK | extra::PEER_ERROR;

/// A peer driven by the test: its device, its handle for the endpoint, and
/// the endpoint's handle for it (`ADDR_UNSPEC` for a stranger).
struct Hand {
    dev: SimDevice,
    to_ep: Ah,
    addr: Addr,
}

/// The endpoint under test and the peers around it. Fields drop in order:
/// the endpoint before the buffers lent to it.
struct Rig {
    ep: Endpoint<SimDevice>,
    net: SimNet,
    hands: Vec<Hand>,
    cq: Vec<Cqe>,
    lent: Vec<Guarded>,
}

/// A REQ a hand received, owned.
#[derive(Debug)]
struct SeenReq {
    flags: u16,
    fields: ReqFields,
    read_iov: Vec<RmaIov>,
    data: Vec<u8>,
}

impl Rig {
    /// An endpoint and `hands` peers in its address vector, each introduced
    /// by a HANDSHAKE with [`FEATURES`].
    fn new(sim: SimConfig, hands: usize) -> Rig {
        let net = SimNet::new(sim);
        let ep = Endpoint::new(net.device(), Config::default());
        let mut rig = Rig { ep, net, hands: Vec::new(), cq: Vec::new(), lent: Vec::new() };
        for _ in 0..hands {
            let h = rig.stranger();
            rig.hands[h].addr = rig.ep.av_insert(&rig.hands[h].dev.local_addr()).unwrap();
            rig.send(h, &common::handshake(FEATURES));
            let answer = rig.inbox(h);
            assert!(matches!(Packet::parse(&answer[0]), Ok(Packet::Handshake(_))), "the endpoint's HANDSHAKE");
        }
        rig
    }

    /// A peer the endpoint has never heard of.
    fn stranger(&mut self) -> usize {
        let mut dev = self.net.device();
        let to_ep = dev.insert(&self.ep.addr()).unwrap();
        self.hands.push(Hand { dev, to_ep, addr: ADDR_UNSPEC });
        self.hands.len() - 1
    }

    /// A few progress calls of the endpoint, its completions collected.
    fn pump(&mut self) {
        for _ in 0..4 {
            self.ep.progress(self.net.now());
            self.ep.poll_cq(&mut self.cq, usize::MAX);
            self.net.advance(100);
        }
    }

    /// Hand `h` sends `pkt` to the endpoint, which then progresses.
    fn send(&mut self, h: usize, pkt: &[u8]) {
        let hand = &mut self.hands[h];
        hand.dev.send(hand.to_ep, pkt, 0).unwrap();
        self.pump();
    }

    /// Hand `h` sends a CTSDATA whose header is `hdr` and whose payload
    /// `payload` travels apart (a gathered send, as rdm4 sends them).
    fn send_gathered(&mut self, h: usize, hdr: &[u8], payload: &mut OwnedBuf) {
        let hand = &mut self.hands[h];
        let build = |out: &mut [u8]| {
            out[..hdr.len()].copy_from_slice(hdr);
            hdr.len()
        };
        hand.dev.send_gather(hand.to_ep, 0, hdr.len(), build, payload.buf()).unwrap();
        self.pump();
    }

    /// What hand `h` received, each packet whole (a gathered payload after
    /// its header).
    fn inbox(&mut self, h: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.hands[h].dev.recv(4096, |_: Option<Ah>, pkt: &[u8], gathered: Option<UserBuf>| {
            let mut p = pkt.to_vec();
            if let Some(g) = gathered {
                let n = p.len();
                p.resize(n + g.len(), 0);
                assert!(g.read_at(0, &mut p[n..]));
            }
            out.push(p);
        });
        out
    }

    /// The one REQ of type `t` hand `h` has received (nothing else but
    /// HANDSHAKEs with it).
    fn expect_req(&mut self, h: usize, t: PacketType) -> SeenReq {
        let mut seen = Vec::new();
        for p in self.inbox(h) {
            match Packet::parse(&p).unwrap() {
                Packet::Req(r) if r.ptype == t => seen.push(SeenReq {
                    flags: r.flags,
                    fields: r.fields,
                    read_iov: r.read_iov.to_vec(),
                    data: r.data.to_vec(),
                }),
                Packet::Handshake(_) => {}
                other => panic!("hand {h} expected a {}, got {other:?}", t.name()),
            }
        }
        assert_eq!(seen.len(), 1, "hand {h}: one {}", t.name());
        seen.pop().unwrap()
    }

    /// Hand `h` got nothing.
    fn assert_quiet(&mut self, h: usize, what: &str) {
        let got: Vec<_> = self.inbox(h).iter().map(|p| PacketType::from_u8(p[0]).map_or("?", |t| t.name())).collect();
        assert!(got.is_empty(), "{what}: hand {h} got {got:?}");
    }

    /// Hand `h` takes the endpoint's long-CTS send `send_id` of `len`
    /// bytes: one CTS granting `grant` bytes (at least `len`), then the
    /// CTSDATA, each checked to lie within the message and to overlap no
    /// other. Returns the bytes.
    fn take_longcts(&mut self, h: usize, send_id: u32, recv_id: u32, len: usize, grant: u64) -> Vec<u8> {
        assert!(grant >= len as u64);
        self.send(h, &cts(send_id, recv_id, grant));
        let mut got = vec![0u8; len];
        let mut have = vec![false; len];
        let mut n = 0;
        for _ in 0..64 {
            for p in self.inbox(h) {
                let Ok(Packet::CtsData(c)) = Packet::parse(&p) else {
                    panic!("hand {h}: not a CTSDATA: {:?}", Packet::parse(&p));
                };
                assert_eq!(c.recv_id, recv_id, "CTSDATA for the CTS's recv_id");
                let off = usize::try_from(c.seg_offset).unwrap();
                let end = off + c.data.len();
                assert!(end <= len, "a CTSDATA beyond the message: {off}..{end} of {len}");
                assert!(have[off..end].iter().all(|&b| !b), "CTSDATA overlap at {off}..{end}");
                have[off..end].fill(true);
                got[off..end].copy_from_slice(c.data);
                n += c.data.len();
            }
            if n == len {
                break;
            }
            self.pump();
        }
        assert_eq!(n, len, "every byte came");
        self.pump(); // the gathered sends' completions
        got
    }

    /// Lends `data` (in a guarded buffer) to the engine: its index and view.
    fn lend(&mut self, data: &[u8]) -> (usize, UserBuf) {
        self.lent.push(Guarded::new(data));
        let i = self.lent.len() - 1;
        (i, self.lent[i].buf())
    }

    /// The bytes of lent buffer `i`.
    fn lent(&self, i: usize) -> &[u8] {
        self.lent[i].data()
    }

    fn guards_intact(&self) -> bool {
        self.lent.iter().all(Guarded::guards_intact)
    }

    /// The completion of the operation with `context`, taken.
    fn done(&mut self, context: u64) -> Option<Cqe> {
        let i = self.cq.iter().position(|e| e.context == context)?;
        Some(self.cq.remove(i))
    }

    /// Asserts that the operation with `context` completed with `status`.
    /// Peer 0's first message (msg_id 0, "ok") arrives whole into a
    /// receive of its own, and every guard is intact: the endpoint works
    /// after what was sent before it.
    fn assert_first_message_arrives(&mut self) {
        let (i, b) = self.lend(&[0u8; 2]);
        self.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
        self.send(0, &eager(0, b"ok"));
        self.assert_done(1, Status::Success);
        assert_eq!(self.lent(i), b"ok");
        assert!(self.guards_intact());
    }

    fn assert_done(&mut self, context: u64, status: Status) -> Cqe {
        let e = self.done(context).unwrap_or_else(|| panic!("op {context} not completed: {:?}", self.cq));
        assert_eq!(e.status, status, "op {context}: {e:?}");
        e
    }

    /// The drop counters moved since `before` (packets in and out left out).
    fn counted_since(&self, before: Stats) -> Stats {
        let a = self.ep.stats();
        Stats {
            rx_packets: 0,
            tx_packets: 0,
            malformed: a.malformed - before.malformed,
            stale_connid: a.stale_connid - before.stale_connid,
            unknown_sender: a.unknown_sender - before.unknown_sender,
            protocol_errors: a.protocol_errors - before.protocol_errors,
            access_errors: a.access_errors - before.access_errors,
            deferred: a.deferred - before.deferred,
            timeouts: a.timeouts - before.timeouts,
            refused_peers: a.refused_peers - before.refused_peers,
        }
    }
}

/// The bytes of `p`.
fn emit(p: &Packet<'_>) -> Vec<u8> {
    let mut b = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut b).unwrap();
    b.truncate(n);
    b
}

fn cts(send_id: u32, recv_id: u32, recv_length: u64) -> Vec<u8> {
    emit(&Packet::Cts(Cts { send_id, recv_id, recv_length, ..Cts::default() }))
}

fn ctsdata(recv_id: u32, seg_offset: u64, data: &[u8]) -> Vec<u8> {
    emit(&Packet::CtsData(CtsData { recv_id, seg_offset, data, ..CtsData::default() }))
}

fn readrsp(recv_id: u32, send_id: u32, data: &[u8]) -> Vec<u8> {
    emit(&Packet::ReadRsp(ReadRsp { recv_id, send_id, data, ..ReadRsp::default() }))
}

fn eor(send_id: u32, recv_id: u32) -> Vec<u8> {
    emit(&Packet::Eor(IdsHdr { send_id, recv_id, ..IdsHdr::default() }))
}

fn read_nack(send_id: u32, recv_id: u32) -> Vec<u8> {
    emit(&Packet::ReadNack(IdsHdr { send_id, recv_id, ..IdsHdr::default() }))
}

fn receipt(send_id: u32, msg_id: u32) -> Vec<u8> {
    emit(&Packet::Receipt(Receipt { send_id, msg_id, ..Receipt::default() }))
}

fn atomrsp(recv_id: u32, data: &[u8]) -> Vec<u8> {
    emit(&Packet::AtomRsp(AtomRsp { recv_id, data, ..AtomRsp::default() }))
}

fn peer_error(op_id: u32) -> Vec<u8> {
    emit(&Packet::PeerError(PeerError { op_id, prov_errno: 5, ..PeerError::default() }))
}

fn req(r: &Req<'_>) -> Vec<u8> {
    emit(&Packet::Req(r.clone()))
}

/// An EAGER_MSGRTM with `msg_id` carrying `data`.
fn eager(msg_id: u32, data: &[u8]) -> Vec<u8> {
    let mut r = Req::new(PacketType::EagerMsgRtm);
    r.fields.msg_id = msg_id;
    r.data = data;
    req(&r)
}

/// A LONGCTS_MSGRTM announcing `msg_length` bytes, carrying the first of them (`data`).
fn longcts_rtm(msg_id: u32, send_id: u32, msg_length: u64, data: &[u8]) -> Vec<u8> {
    let mut r = Req::new(PacketType::LongctsMsgRtm);
    r.fields.msg_id = msg_id;
    r.fields.send_id = send_id;
    r.fields.msg_length = msg_length;
    r.fields.credit_request = 64;
    r.data = data;
    req(&r)
}

/// A MEDIUM_MSGRTM segment.
fn medium(msg_id: u32, msg_length: u64, seg_offset: u64, data: &[u8]) -> Vec<u8> {
    let mut r = Req::new(PacketType::MediumMsgRtm);
    r.fields.msg_id = msg_id;
    r.fields.msg_length = msg_length;
    r.fields.seg_offset = seg_offset;
    r.data = data;
    req(&r)
}

/// `b` with the little-endian u32 at `at` replaced by `v`.
fn patch32(b: &[u8], at: usize, v: u32) -> Vec<u8> {
    let mut b = b.to_vec();
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    b
}

/// `b` with the little-endian u64 at `at` replaced by `v`.
fn patch64(b: &[u8], at: usize, v: u64) -> Vec<u8> {
    let mut b = b.to_vec();
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    b
}

/// IDs no operation of these tests has (the engine's keys are a 20-bit
/// slab index under a generation): indexes never allocated, under the
/// first and the last generation, and a low index under a generation never
/// reached.
const NEVER: [u32; 3] = [u32::MAX, (1 << 20) | 0xF_FFF0, 0x7FF0_0042];

/// Long enough for long-CTS (more than `Config::medium_max`).
const LONG: usize = 100_000;

/// Case 1: CTS with a stale, never-allocated or foreign `send_id`, and one
/// granting 0 bytes, are counted and dropped; one granting an absurd
/// length moves only the message's bytes, and the send completes.
#[test]
fn cts_with_bad_ids_or_zero_length_is_counted_and_the_send_completes() {
    let mut rig = Rig::new(SimConfig::default(), 2);
    let (p, q) = (0, 1);
    let first = pattern(LONG, 1);
    let (_, b1) = rig.lend(&first);
    rig.ep.send(rig.hands[p].addr, b1, SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let old = rig.expect_req(p, PacketType::LongctsMsgRtm).fields.send_id;
    assert_eq!(rig.take_longcts(p, old, 0x1111, LONG, LONG as u64), first);
    rig.assert_done(1, Status::Success);

    let second = pattern(LONG, 2);
    let (_, b2) = rig.lend(&second);
    rig.ep.send(rig.hands[p].addr, b2, SendOpts { context: 2, ..SendOpts::default() }).unwrap();
    let r = rig.expect_req(p, PacketType::LongctsMsgRtm);
    let id = r.fields.send_id;
    assert_eq!(r.fields.msg_length, LONG as u64);
    assert_ne!(id, old, "a new operation, a new id");

    let before = rig.ep.stats();
    rig.send(p, &cts(old, 0x2222, LONG as u64)); // stale: the op finished
    for never in NEVER {
        rig.send(p, &cts(never, 0x2222, LONG as u64));
    }
    rig.send(q, &cts(id, 0x3333, LONG as u64)); // another peer's op
    rig.send(p, &cts(id, 0x2222, 0)); // grants nothing
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 6, ..Stats::default() });
    rig.assert_quiet(p, "no CTSDATA for a refused CTS");
    rig.assert_quiet(q, "no CTSDATA to a peer that does not own the op");
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);

    // An absurd window: only the message's bytes go.
    assert_eq!(rig.take_longcts(p, id, 0x2222, LONG, u64::MAX), second);
    rig.assert_done(2, Status::Success);
    let before = rig.ep.stats();
    rig.send(p, &cts(id, 0x2222, LONG as u64)); // the op finished
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    rig.assert_quiet(p, "nothing for a finished op");
    assert!(rig.guards_intact());
}

/// The endpoint receives a long-CTS message of `len` bytes from hand 0
/// into a lent buffer (context 1): hand 0 sends the RTM (`msg_id` 0,
/// `send_id` 0x55) with no data. Returns the buffer's index and the
/// `recv_id` of the endpoint's CTS.
fn receive_longcts(rig: &mut Rig, len: usize) -> (usize, u32) {
    let (i, buf) = rig.lend(&vec![0u8; len]);
    rig.ep.recv(buf, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    rig.send(0, &longcts_rtm(0, 0x55, len as u64, &[]));
    let got = rig.inbox(0);
    assert_eq!(got.len(), 1);
    let Ok(Packet::Cts(c)) = Packet::parse(&got[0]) else { panic!("a CTS: {:?}", Packet::parse(&got[0])) };
    assert_eq!(c.send_id, 0x55);
    assert!(c.recv_length >= len as u64, "the whole message in one window");
    (i, c.recv_id)
}

/// Case 2: CTSDATA for an unknown `recv_id`, another peer's receive, or
/// bytes beyond the message, and another peer's PEER_ERROR ending the
/// message, are counted and dropped; one whose
/// `seg_offset + seg_length` overflows u64 (whole or gathered) is
/// malformed. The message then arrives whole.
#[test]
fn ctsdata_with_unknown_id_or_outside_the_message_is_counted_and_the_message_arrives() {
    let mut rig = Rig::new(SimConfig::default(), 2);
    let len = 32 * 1024;
    let (i, recv_id) = receive_longcts(&mut rig, len);
    let msg = pattern(len, 3);
    let junk = [0xEE; 64];

    let before = rig.ep.stats();
    for never in NEVER {
        rig.send(0, &ctsdata(never, 0, &junk));
    }
    rig.send(0, &ctsdata(recv_id ^ (1 << 20), 0, &junk)); // another generation
    rig.send(1, &ctsdata(recv_id, 0, &junk)); // another peer's receive
    let end = PeerError { op_id: 0, ref_kind: peer_error_ref::MSG_ID, prov_errno: 5, ..PeerError::default() };
    rig.send(1, &emit(&Packet::PeerError(end))); // ends another peer's message 0
    rig.send(0, &ctsdata(recv_id, len as u64 - 10, &junk)); // past the end
    rig.send(0, &ctsdata(recv_id, len as u64, &junk[..1]));
    rig.send(0, &ctsdata(recv_id, u64::MAX - 100, &junk[..1]));
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 9, ..Stats::default() });

    // seg_offset + seg_length past 2^64: emit refuses it, so patched.
    let before = rig.ep.stats();
    let valid = ctsdata(recv_id, 0, &junk);
    rig.send(0, &patch64(&valid, 16, u64::MAX - 10));
    rig.send(0, &patch64(&patch64(&valid, 16, 1), 8, u64::MAX)); // by seg_length
    let mut payload = OwnedBuf::from_slice(&junk);
    let mut hdr = vec![0u8; 64];
    let n = CtsData { recv_id, ..CtsData::default() }.emit_headers_only(&mut hdr, junk.len() as u64).unwrap();
    rig.send_gathered(0, &patch64(&hdr[..n], 16, u64::MAX - 10), &mut payload);
    assert_eq!(rig.counted_since(before), Stats { malformed: 3, ..Stats::default() });
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert!(rig.lent(i).iter().all(|&b| b == 0), "nothing placed");

    for off in (0..len).step_by(4096) {
        rig.send(0, &ctsdata(recv_id, off as u64, &msg[off..off + 4096]));
    }
    let e = rig.assert_done(1, Status::Success);
    assert_eq!(e.len, len as u64);
    assert_eq!(rig.lent(i), &msg[..]);
    let before = rig.ep.stats();
    rig.send(0, &ctsdata(recv_id, 0, &msg[..4096])); // the receive finished
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    assert!(rig.guards_intact());
}

/// Case 2, overlapping segments: the same segment twice, or a range over
/// two received ones, must not count twice: the message completes only
/// once every byte is in, with the right bytes.
#[test]
fn ctsdata_overlapping_segments_do_not_complete_the_message_early() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let len = 32 * 1024;
    let (i, recv_id) = receive_longcts(&mut rig, len);
    let msg = pattern(len, 4);
    let seg = |off: usize, n: usize| ctsdata(recv_id, off as u64, &msg[off..off + n]);

    let before = rig.ep.stats();
    rig.send(0, &seg(0, 4096));
    rig.send(0, &seg(0, 4096)); // the same segment again
    rig.send(0, &seg(4096, 4096));
    rig.send(0, &seg(2048, 4096)); // over both
    rig.send(0, &seg(4000, 200)); // inside them
    for off in (8192..len - 8192).step_by(4096) {
        rig.send(0, &seg(off, 4096));
    }
    assert!(rig.cq.is_empty(), "completed with {} bytes missing: {:?}", 8192, rig.cq);
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 3, ..Stats::default() });
    rig.send(0, &seg(len - 8192, 8192 - 100));
    assert!(rig.cq.is_empty(), "completed with 100 bytes missing: {:?}", rig.cq);
    rig.send(0, &seg(len - 100, 100));
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), &msg[..]);
    assert!(rig.guards_intact());
}

/// Case 3: READRSP for no operation, for another peer's read, or with more
/// bytes than the read asked for is counted and dropped; the read then
/// completes with the right bytes.
#[test]
fn readrsp_with_bad_ids_or_too_much_data_is_counted_and_the_read_completes() {
    let mut rig = Rig::new(SimConfig::default(), 2);
    let len = 1000;
    let (i, buf) = rig.lend(&vec![0u8; len]);
    let remote = RemoteBuf { addr: 0x10_0000, key: 0x77 };
    rig.ep.read(rig.hands[0].addr, buf, remote, 1).unwrap();
    let r = rig.expect_req(0, PacketType::ShortRtr);
    let id = r.fields.recv_id;
    assert_eq!(r.fields.msg_length, len as u64);
    let data = pattern(len, 5);
    let junk = vec![0xEE; len];

    let before = rig.ep.stats();
    for never in NEVER {
        rig.send(0, &readrsp(never, 9, &junk));
    }
    rig.send(1, &readrsp(id, 9, &junk)); // another peer's read
    rig.send(0, &readrsp(id, 9, &pattern(len + 500, 6))); // more than asked
    rig.send(0, &readrsp(id, 9, &pattern(len + 1, 6)));
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 6, ..Stats::default() });
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert!(rig.lent(i).iter().all(|&b| b == 0), "nothing placed");
    assert!(rig.guards_intact());

    rig.send(0, &readrsp(id, 9, &data));
    let e = rig.assert_done(1, Status::Success);
    assert_eq!(e.len, len as u64);
    assert_eq!(rig.lent(i), &data[..]);
    let before = rig.ep.stats();
    rig.send(0, &readrsp(id, 9, &junk)); // the read finished
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    assert_eq!(rig.lent(i), &data[..]);
    assert!(rig.guards_intact());
}

/// A rig whose device reads (long-read sends to the hands).
fn reading_rig() -> Rig {
    Rig::new(SimConfig { rdma: true, ..SimConfig::default() }, 2)
}

/// Hand `h` reads the endpoint's long-read send by RDMA, as a receiver
/// does; the bytes.
fn read_by_rdma(rig: &mut Rig, h: usize, r: &SeenReq) -> Vec<u8> {
    assert_eq!(r.read_iov.len(), 1);
    let v = r.read_iov[0];
    let mut local = OwnedBuf::zeroed(usize::try_from(v.len()).unwrap());
    let hand = &mut rig.hands[h];
    hand.dev.rdma_read(hand.to_ep, local.buf(), v.addr(), v.key(), 1).unwrap();
    let mut events = Vec::new();
    hand.dev.events(&mut events);
    let read = |e: &DevEvent| matches!(e, DevEvent::SendDone { wr_id: 1, status: Ok(()), .. });
    assert!(events.iter().any(read), "{events:?}");
    local.bytes().to_vec()
}

/// Case 4: EOR with a stale, never-allocated or foreign `send_id` is
/// counted and dropped (a send is not completed by another peer's EOR);
/// the long-read send completes on its own peer's EOR.
#[test]
fn eor_with_stale_or_foreign_ids_is_counted_and_the_send_completes_on_its_own() {
    let mut rig = reading_rig();
    let msg = pattern(LONG, 7);
    let (_, buf) = rig.lend(&msg);
    rig.ep.send(rig.hands[0].addr, buf, SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let r = rig.expect_req(0, PacketType::LongreadMsgRtm);
    let id = r.fields.send_id;

    let before = rig.ep.stats();
    rig.send(1, &eor(id, 5)); // another peer's send
    for never in NEVER {
        rig.send(0, &eor(never, 5));
    }
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 4, ..Stats::default() });
    assert!(rig.cq.is_empty(), "a send completed by a forged EOR: {:?}", rig.cq);

    assert_eq!(read_by_rdma(&mut rig, 0, &r), msg);
    rig.send(0, &eor(id, 5));
    rig.assert_done(1, Status::Success);
    let before = rig.ep.stats();
    rig.send(0, &eor(id, 5)); // stale: the send finished
    rig.send(0, &read_nack(id, 5));
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 2, ..Stats::default() });

    // Still working: another long-read send.
    let (_, buf) = rig.lend(&msg);
    rig.ep.send(rig.hands[0].addr, buf, SendOpts { context: 2, ..SendOpts::default() }).unwrap();
    let r = rig.expect_req(0, PacketType::LongreadMsgRtm);
    assert_eq!(read_by_rdma(&mut rig, 0, &r), msg);
    rig.send(0, &eor(r.fields.send_id, 6));
    rig.assert_done(2, Status::Success);
    assert!(rig.guards_intact());
}

/// Case 4: READ_NACK with a stale, never-allocated or foreign `send_id`
/// is counted and dropped (no fallback to long-CTS, nothing sent); the
/// own peer's READ_NACK makes the send go by long-CTS, after which a
/// second READ_NACK or an EOR for it is counted too.
#[test]
fn read_nack_with_stale_or_foreign_ids_is_counted_and_the_send_falls_back_once() {
    let mut rig = reading_rig();
    let msg = pattern(LONG, 8);
    let (_, buf) = rig.lend(&msg);
    rig.ep.send(rig.hands[0].addr, buf, SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let r = rig.expect_req(0, PacketType::LongreadMsgRtm);
    let id = r.fields.send_id;

    let before = rig.ep.stats();
    rig.send(1, &read_nack(id, 5)); // another peer's send
    for never in NEVER {
        rig.send(0, &read_nack(never, 5));
    }
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 4, ..Stats::default() });
    rig.assert_quiet(0, "no fallback on a forged READ_NACK");
    rig.assert_quiet(1, "nothing to the forger");

    rig.send(0, &read_nack(id, 5));
    let again = rig.expect_req(0, PacketType::LongctsMsgRtm);
    assert_eq!(again.fields.msg_id, r.fields.msg_id);
    assert_ne!(again.flags & rdm4::wire::req_flags::READ_NACK, 0);
    assert!(again.data.is_empty());
    let id = again.fields.send_id;
    let before = rig.ep.stats();
    rig.send(0, &read_nack(id, 5)); // nacked already
    rig.send(0, &eor(id, 5)); // it no longer waits for an EOR
    rig.send(1, &cts(id, 5, LONG as u64)); // another peer's send
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 3, ..Stats::default() });
    rig.assert_quiet(0, "nothing for the refused packets");
    rig.assert_quiet(1, "nothing to the forger");

    assert_eq!(rig.take_longcts(0, id, 0x4444, LONG, LONG as u64), msg);
    rig.assert_done(1, Status::Success);
    let before = rig.ep.stats();
    rig.send(0, &read_nack(id, 5)); // stale
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    assert!(rig.guards_intact());
}

/// Case 5: RECEIPT for a finished send, no send, another peer's send, or
/// a second time is counted and dropped (and so is another peer's
/// PEER_ERROR for it); the delivery-complete send completes on its own
/// peer's first RECEIPT only.
#[test]
fn receipt_with_stale_foreign_or_duplicate_ids_is_counted() {
    let mut rig = Rig::new(SimConfig::default(), 2);
    let dc = SendFlags { dc: true, ..SendFlags::default() };
    let addr = rig.hands[0].addr;
    let (_, b0) = rig.lend(b"first");
    rig.ep.send_flagged(addr, b0, SendOpts { context: 1, ..SendOpts::default() }, dc).unwrap();
    let r0 = rig.expect_req(0, PacketType::DcEagerMsgRtm);
    assert_eq!(r0.data, b"first");
    rig.send(0, &receipt(r0.fields.send_id, r0.fields.msg_id));
    rig.assert_done(1, Status::Success);

    let (_, b1) = rig.lend(b"second");
    rig.ep.send_flagged(addr, b1, SendOpts { context: 2, ..SendOpts::default() }, dc).unwrap();
    let r1 = rig.expect_req(0, PacketType::DcEagerMsgRtm);
    let (id, msg_id) = (r1.fields.send_id, r1.fields.msg_id);
    // A long send that asked for no receipt.
    let (_, b2) = rig.lend(&pattern(LONG, 9));
    rig.ep.send(addr, b2, SendOpts { context: 3, ..SendOpts::default() }).unwrap();
    let long = rig.expect_req(0, PacketType::LongctsMsgRtm).fields.send_id;

    let before = rig.ep.stats();
    rig.send(0, &receipt(r0.fields.send_id, r0.fields.msg_id)); // stale
    for never in NEVER {
        rig.send(0, &receipt(never, msg_id));
    }
    rig.send(1, &receipt(id, msg_id)); // another peer's send
    rig.send(0, &receipt(long, msg_id)); // a send that waits for none
    rig.send(1, &peer_error(id)); // another peer's send fails
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 7, ..Stats::default() });
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);

    rig.send(0, &receipt(id, msg_id));
    rig.assert_done(2, Status::Success);
    let before = rig.ep.stats();
    rig.send(0, &receipt(id, msg_id)); // the same RECEIPT again
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    assert_eq!(rig.take_longcts(0, long, 7, LONG, LONG as u64), pattern(LONG, 9));
    rig.assert_done(3, Status::Success);
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert!(rig.guards_intact());
}

/// Posts a fetch-and-add of one u64 to hand 0 with context `ctx`, its
/// result into a lent buffer: (that buffer's index, the RTA's `recv_id`).
fn fetch_add(rig: &mut Rig, ctx: u64) -> (usize, u32) {
    let (_, operand) = rig.lend(&1u64.to_le_bytes());
    let (i, result) = rig.lend(&[0u8; 8]);
    let remote = RemoteBuf { addr: 0x20_0000, key: 0x99 };
    let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
    let addr = rig.hands[0].addr;
    rig.ep.atomic(addr, u64t, sum, operand, UserBuf::empty(), result, remote, ctx).unwrap();
    let r = rig.expect_req(0, PacketType::FetchRta);
    (i, r.fields.recv_id)
}

/// Case 6: ATOMRSP for no operation, for another peer's atomic, for a
/// finished one, or for an operation that is no atomic is counted and
/// dropped; one larger than the result buffer fails its atomic (`Proto`)
/// without writing past the buffer; the endpoint's atomics then still work.
#[test]
fn atomrsp_for_no_foreign_or_oversized_op_is_counted_or_fails_it() {
    let mut rig = Rig::new(SimConfig::default(), 2);
    let old = 0x0102_0304_0506_0708u64.to_le_bytes();
    let (i, id) = fetch_add(&mut rig, 1);
    // A read: an operation, but no atomic.
    let (_, rbuf) = rig.lend(&[0u8; 8]);
    rig.ep.read(rig.hands[0].addr, rbuf, RemoteBuf { addr: 0x1000, key: 1 }, 9).unwrap();
    let read = rig.expect_req(0, PacketType::ShortRtr).fields.recv_id;

    let before = rig.ep.stats();
    for never in NEVER {
        rig.send(0, &atomrsp(never, &old));
    }
    rig.send(1, &atomrsp(id, &[0xEE; 8])); // another peer's atomic
    rig.send(0, &atomrsp(read, &[0xEE; 8])); // no atomic
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 5, ..Stats::default() });
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert_eq!(rig.lent(i), &[0u8; 8]);

    rig.send(0, &atomrsp(id, &old));
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), &old);
    let before = rig.ep.stats();
    rig.send(0, &atomrsp(id, &[0xEE; 8])); // finished
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    assert_eq!(rig.lent(i), &old);

    // Larger than the result: the atomic fails, nothing written.
    let (i, id) = fetch_add(&mut rig, 2);
    let before = rig.ep.stats();
    rig.send(0, &atomrsp(id, &[0xEE; 64]));
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    rig.assert_done(2, Status::Proto);
    assert_eq!(rig.lent(i), &[0u8; 8]);
    assert!(rig.guards_intact());

    let (i, id) = fetch_add(&mut rig, 3);
    rig.send(0, &atomrsp(id, &old));
    rig.assert_done(3, Status::Success);
    assert_eq!(rig.lent(i), &old);
    rig.send(0, &readrsp(read, 0, &old));
    rig.assert_done(9, Status::Success);
    assert!(rig.guards_intact());
}

/// Case 7: every response type (and a HANDSHAKE, a PEER_ERROR and an RTM)
/// from a sender the endpoint does not know, without a raw address, is
/// counted as from an unknown sender, even naming live operations, and
/// gets no answer; responses from a known peer with another connid are
/// stale. The operations then complete by their own peer.
#[test]
fn responses_from_an_unknown_sender_are_counted_and_change_nothing() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let addr = rig.hands[0].addr;
    // A long send, a read, a fetch atomic and a delivery-complete send, pending.
    let msg = pattern(LONG, 10);
    let (_, b) = rig.lend(&msg);
    rig.ep.send(addr, b, SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let send = rig.expect_req(0, PacketType::LongctsMsgRtm).fields.send_id;
    let (ri, rbuf) = rig.lend(&[0u8; 100]);
    rig.ep.read(addr, rbuf, RemoteBuf { addr: 0x1000, key: 1 }, 2).unwrap();
    let read = rig.expect_req(0, PacketType::ShortRtr).fields.recv_id;
    let (ai, atomic) = fetch_add(&mut rig, 3);
    let (_, dbuf) = rig.lend(b"dc");
    let dc = SendFlags { dc: true, ..SendFlags::default() };
    rig.ep.send_flagged(addr, dbuf, SendOpts { context: 4, ..SendOpts::default() }, dc).unwrap();
    let d = rig.expect_req(0, PacketType::DcEagerMsgRtm).fields;
    let (ii, ibuf) = rig.lend(&[0u8; 16]);
    rig.ep.recv(ibuf, RecvOpts { context: 5, ..RecvOpts::default() }).unwrap();

    let s = rig.stranger();
    let junk = [0xEE; 100];
    let forged = [
        cts(send, 1, LONG as u64),
        ctsdata(read, 0, &junk),
        readrsp(read, 0, &junk),
        eor(send, 1),
        read_nack(send, 1),
        receipt(d.send_id, d.msg_id),
        atomrsp(atomic, &junk[..8]),
        peer_error(send),
        common::handshake(FEATURES),
        eager(0, b"from nobody"),
    ];
    let before = rig.ep.stats();
    for p in &forged {
        rig.send(s, p);
    }
    let mut payload = OwnedBuf::from_slice(&junk);
    let mut hdr = vec![0u8; 64];
    let n = CtsData { recv_id: read, ..CtsData::default() }.emit_headers_only(&mut hdr, junk.len() as u64).unwrap();
    rig.send_gathered(s, &hdr[..n], &mut payload);
    let forged_n = forged.len() as u64 + 1;
    assert_eq!(rig.counted_since(before), Stats { unknown_sender: forged_n, ..Stats::default() });
    rig.assert_quiet(s, "no answer to an unknown sender");
    rig.assert_quiet(0, "nothing moved for the forgeries");
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert_eq!(rig.ep.peer_count(), 1, "nobody learnt");

    // The known peer, with a connid that is not its own.
    let wrong = rig.hands[0].dev.local_addr().connid() ^ 0x5A5A;
    let before = rig.ep.stats();
    let mut stale = Cts { send_id: send, recv_id: 1, recv_length: LONG as u64, ..Cts::default() };
    stale.connid = Some(wrong);
    rig.send(0, &emit(&Packet::Cts(stale)));
    let end = IdsHdr { send_id: send, recv_id: 1, connid: Some(wrong), ..IdsHdr::default() };
    rig.send(0, &emit(&Packet::Eor(end)));
    let rsp = ReadRsp { recv_id: read, data: &junk, connid: Some(wrong), ..ReadRsp::default() };
    rig.send(0, &emit(&Packet::ReadRsp(rsp)));
    assert_eq!(rig.counted_since(before), Stats { stale_connid: 3, ..Stats::default() });
    rig.assert_quiet(0, "nothing moved for the stale packets");
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);

    assert_eq!(rig.take_longcts(0, send, 0x77, LONG, LONG as u64), msg);
    rig.assert_done(1, Status::Success);
    let data = pattern(100, 11);
    rig.send(0, &readrsp(read, 0, &data));
    rig.assert_done(2, Status::Success);
    assert_eq!(rig.lent(ri), &data[..]);
    rig.send(0, &atomrsp(atomic, &7u64.to_le_bytes()));
    rig.assert_done(3, Status::Success);
    assert_eq!(rig.lent(ai), &7u64.to_le_bytes());
    rig.send(0, &receipt(d.send_id, d.msg_id));
    rig.assert_done(4, Status::Success);
    rig.send(0, &eager(0, b"from the peer"));
    let e = rig.assert_done(5, Status::Success);
    assert_eq!(e.len, 13);
    assert_eq!(&rig.lent(ii)[..13], b"from the peer");
    assert!(rig.guards_intact());
}

/// Case 8: REQs whose `rma_iov_count` or `read_iov_count` is larger than
/// the packet holds (counts patched into emitted REQs), whose raw address
/// header is smaller than an address, or which claims more bytes than the
/// packet has, are malformed, from a stranger (which is not learnt) and
/// from a known peer alike; no `msg_id` is used up, no answer goes out.
#[test]
fn reqs_with_impossible_counts_or_raw_address_sizes_are_malformed() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let s = rig.stranger();
    let body = rig.hands[s].dev.local_addr().to_req_hdr_body();
    let raw = RawAddrHdr::new(&body).unwrap();
    let iov = [RmaIov::new(0x1000, 8, 0x77)];
    let data = [0x5Au8; 8];
    let with_raw = |ptype: PacketType| {
        let mut r = Req::new(ptype);
        r.raw_addr = Some(raw);
        r.fields.msg_length = 8;
        r.fields.recv_length = 8;
        r.fields.atomic_datatype = atomic_ops::datatype::UINT64;
        r.fields.atomic_op = atomic_ops::op::SUM;
        r
    };
    // (type, offset of the count patched)
    let counted = [
        (PacketType::EagerRtw, 4),
        (PacketType::LongctsRtw, 4),
        (PacketType::DcEagerRtw, 4),
        (PacketType::ShortRtr, 4),
        (PacketType::WriteRta, 8),
        (PacketType::LongreadRtw, 4),
        (PacketType::LongreadRtw, 20),
        (PacketType::LongreadMsgRtm, 20),
        (PacketType::RuntreadMsgRtm, 20),
    ];
    let mut bad = Vec::new();
    for (ptype, at) in counted {
        let info = ptype.req_info().unwrap();
        let mut r = with_raw(ptype);
        if matches!(info.family, ReqFamily::Rtw | ReqFamily::Rtr | ReqFamily::Rta) {
            r.rma_iov = &iov;
        }
        if matches!(info.proto, Subprotocol::Longread | Subprotocol::Runtread) {
            r.read_iov = &iov;
        } else if info.family != ReqFamily::Rtr {
            r.data = &data;
        }
        let ok = req(&r);
        assert!(Packet::parse(&ok).is_ok(), "{}", ptype.name());
        assert_eq!(u32::from_le_bytes(ok[at..at + 4].try_into().unwrap()), 1, "{} count at {at}", ptype.name());
        for count in [2, 1 << 16, 0x0AAA_AAAB, 0x8000_0000, u32::MAX] {
            bad.push(patch32(&ok, at, count));
        }
    }
    // The raw address header's size: short of an address, or past the end.
    let ok = req(&{
        let mut r = with_raw(PacketType::EagerMsgRtm);
        r.data = &data;
        r
    });
    let at = 8; // after EAGER_MSGRTM's fixed header
    assert_eq!(u32::from_le_bytes(ok[at..at + 4].try_into().unwrap()), 36);
    for size in [0, 4, 16, 31, 37 + data.len() as u32, 4096, u32::MAX - 3, u32::MAX] {
        bad.push(patch32(&ok, at, size));
    }
    bad.push(ok[..at + 4 + 20].to_vec()); // cut inside the address

    let before = rig.ep.stats();
    for p in &bad {
        rig.send(s, p);
        rig.send(0, p);
    }
    let n = 2 * bad.len() as u64;
    assert_eq!(rig.counted_since(before), Stats { malformed: n, ..Stats::default() });
    assert_eq!(rig.ep.peer_count(), 1, "the stranger is not learnt");
    rig.assert_quiet(s, "no answer to a malformed REQ");
    rig.assert_quiet(0, "no answer to a malformed REQ");
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);

    // Both still get through, with the first msg_id.
    let (i, b) = rig.lend(&[0u8; 8]);
    rig.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    let (j, b) = rig.lend(&[0u8; 8]);
    rig.ep.recv(b, RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    rig.send(s, &ok);
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), &data);
    assert_eq!(rig.ep.peer_count(), 2, "the stranger learnt from a valid REQ");
    rig.send(0, &eager(0, b"knownpr!"));
    rig.assert_done(2, Status::Success);
    assert_eq!(rig.lent(j), b"knownpr!");
    assert!(rig.guards_intact());
}

/// A HANDSHAKE's bytes as given: `flags`, `nextra_p3`, `words`, then `tail`.
fn raw_handshake(flags: u16, nextra_p3: u32, words: &[u64], tail: &[u8]) -> Vec<u8> {
    let mut b = vec![PacketType::Handshake as u8, 4];
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(&nextra_p3.to_le_bytes());
    for w in words {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(tail);
    b
}

/// Case 9: HANDSHAKEs with an `nextra_p3` below 3 or past the packet's
/// end (255, u32::MAX), truncated in the fixed part or in an optional
/// field, are malformed and change nothing; one with 252 well-formed
/// words is taken.
#[test]
fn handshakes_with_absurd_nextra_or_truncated_are_malformed() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let addr = rig.hands[0].addr;
    let host = handshake_flags::HOST_ID_HDR;
    rig.send(0, &raw_handshake(host, 4, &[FEATURES], &0xAAAAu64.to_le_bytes()));
    assert_eq!(rig.ep.peer_identity(addr), Ok((Some(0xAAAA), None)));
    let valid = raw_handshake(host, 4, &[FEATURES], &0xBBBBu64.to_le_bytes());
    let mut bad = vec![
        raw_handshake(host, 255, &[FEATURES], &0xBBBBu64.to_le_bytes()),
        raw_handshake(host, u32::MAX, &[FEATURES], &0xBBBBu64.to_le_bytes()),
        raw_handshake(0, u32::MAX, &[], &[]),
        raw_handshake(host, 5, &[FEATURES], &0xBBBBu64.to_le_bytes()), // one word short
        raw_handshake(host, 4, &[FEATURES], &[0xBB; 7]),               // host_id cut
        raw_handshake(host | handshake_flags::DEVICE_VERSION_HDR, 4, &[FEATURES], &0xBBBBu64.to_le_bytes()),
        raw_handshake(rdm4::wire::CONNID_HDR, 4, &[FEATURES], &[1, 2, 3, 4]),
    ];
    for n in 0..3 {
        bad.push(raw_handshake(host, n, &[FEATURES], &0xBBBBu64.to_le_bytes()));
    }
    for cut in 4..8 {
        bad.push(valid[..cut].to_vec());
    }
    let before = rig.ep.stats();
    for p in &bad {
        rig.send(0, p);
    }
    assert_eq!(rig.counted_since(before), Stats { malformed: bad.len() as u64, ..Stats::default() });
    assert_eq!(rig.ep.peer_identity(addr), Ok((Some(0xAAAA), None)), "no malformed HANDSHAKE taken");
    rig.assert_quiet(0, "no answer to a malformed HANDSHAKE");

    // 252 words, the packet as long as they say: taken (the first word is
    // the one that has bits today).
    let mut words = vec![u64::MAX; 252];
    words[0] = FEATURES;
    let before = rig.ep.stats();
    rig.send(0, &raw_handshake(host, 255, &words, &0xCCCCu64.to_le_bytes()));
    assert_eq!(rig.counted_since(before), Stats::default());
    assert_eq!(rig.ep.peer_identity(addr), Ok((Some(0xCCCC), None)));
    let (i, b) = rig.lend(&[0u8; 5]);
    rig.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    rig.send(0, &eager(0, b"still"));
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), b"still");
    assert!(rig.guards_intact());
}

/// Case 9: a second HANDSHAKE that takes features away mid-stream: what
/// is under way finishes as begun (a long-read send still ends on its
/// EOR), and what is posted after follows the new HANDSHAKE (long-CTS, no
/// delivery complete); nothing is counted, nothing breaks.
#[test]
fn a_second_handshake_changing_features_mid_stream_is_followed_from_then_on() {
    let mut rig = reading_rig();
    let addr = rig.hands[0].addr;
    let msg = pattern(LONG, 12);
    let (_, b) = rig.lend(&msg);
    rig.ep.send(addr, b, SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let r = rig.expect_req(0, PacketType::LongreadMsgRtm);

    let before = rig.ep.stats();
    rig.send(0, &common::handshake(0)); // a baseline peer now
    assert_eq!(rig.counted_since(before), Stats::default());
    rig.assert_quiet(0, "a second HANDSHAKE gets no answer");
    assert_eq!(read_by_rdma(&mut rig, 0, &r), msg);
    rig.send(0, &eor(r.fields.send_id, 1));
    rig.assert_done(1, Status::Success);

    let (_, b) = rig.lend(&msg);
    rig.ep.send(addr, b, SendOpts { context: 2, ..SendOpts::default() }).unwrap();
    let id = rig.expect_req(0, PacketType::LongctsMsgRtm).fields.send_id;
    assert_eq!(rig.take_longcts(0, id, 3, LONG, LONG as u64), msg);
    rig.assert_done(2, Status::Success);
    let (_, b) = rig.lend(b"dc");
    let dc = SendFlags { dc: true, ..SendFlags::default() };
    assert_eq!(rig.ep.send_flagged(addr, b, SendOpts::default(), dc), Err(Status::NotSup));

    // And back: the features return.
    rig.send(0, &common::handshake(FEATURES));
    rig.ep.send_flagged(addr, b, SendOpts { context: 3, ..SendOpts::default() }, dc).unwrap();
    let d = rig.expect_req(0, PacketType::DcEagerMsgRtm).fields;
    rig.send(0, &receipt(d.send_id, d.msg_id));
    rig.assert_done(3, Status::Success);
    assert_eq!(rig.counted_since(before), Stats::default());
    assert!(rig.guards_intact());
}

/// Case 10: every type byte that names no wire packet is malformed, from a
/// known peer and from a stranger; the peer's messages still arrive.
#[test]
fn unknown_packet_types_are_malformed() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let s = rig.stranger();
    let unknown: Vec<u8> = (0..=255u8).filter(|&t| PacketType::from_u8(t).is_none()).collect();
    assert!(unknown.len() > 200);
    let before = rig.ep.stats();
    for &t in &unknown {
        let mut p = vec![t, 4, 0, 0];
        p.extend_from_slice(&[0u8; 60]);
        rig.send(0, &p);
        rig.send(s, &p);
        // With every flag, a raw address header among them.
        p[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
        rig.send(s, &p);
    }
    let n = 3 * unknown.len() as u64;
    assert_eq!(rig.counted_since(before), Stats { malformed: n, ..Stats::default() });
    rig.assert_quiet(0, "no answer");
    rig.assert_quiet(s, "no answer");
    assert_eq!(rig.ep.peer_count(), 1);
    rig.assert_first_message_arrives();
}

/// Case 10: protocol versions 0 to 3 are malformed (a message with one is
/// not delivered, a response with one moves nothing); versions above 4
/// are taken as 4 (wire-facts #24: libfabric rejects only older ones;
/// `src/wire/mod.rs` records the decision).
#[test]
fn protocol_versions_below_4_are_malformed_and_later_ones_taken_as_4() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let (i, b) = rig.lend(&[0u8; 5]);
    rig.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    let (j, b) = rig.lend(&[0u8; 5]);
    rig.ep.recv(b, RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    let (k, rbuf) = rig.lend(&[0u8; 5]);
    rig.ep.read(rig.hands[0].addr, rbuf, RemoteBuf { addr: 0x1000, key: 1 }, 3).unwrap();
    let read = rig.expect_req(0, PacketType::ShortRtr).fields.recv_id;
    let old = eager(0, b"stale");
    let rsp = readrsp(read, 0, b"stale");
    let before = rig.ep.stats();
    for v in 0..4u8 {
        let mut p = old.clone();
        p[1] = v;
        rig.send(0, &p);
        let mut p = rsp.clone();
        p[1] = v;
        rig.send(0, &p);
        rig.send(0, &[PacketType::Cts as u8, v, 0, 0]);
    }
    assert_eq!(rig.counted_since(before), Stats { malformed: 12, ..Stats::default() });
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);

    for (msg_id, v, text) in [(0, 5u8, b"five!"), (1, 255, b"later")] {
        let mut p = eager(msg_id, text);
        p[1] = v;
        rig.send(0, &p);
    }
    let mut p = readrsp(read, 0, b"newer");
    p[1] = 200;
    rig.send(0, &p);
    rig.assert_done(1, Status::Success);
    rig.assert_done(2, Status::Success);
    rig.assert_done(3, Status::Success);
    assert_eq!((rig.lent(i), rig.lent(j), rig.lent(k)), (&b"five!"[..], &b"later"[..], &b"newer"[..]));
    assert_eq!(rig.counted_since(before), Stats { malformed: 12, ..Stats::default() });
    assert!(rig.guards_intact());
}

/// Case 10: a base header cut short (1 to 3 bytes; the sim device delivers
/// no empty packet), and a fixed header cut short, are malformed.
#[test]
fn truncated_headers_are_malformed() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let s = rig.stranger();
    let mut bad: Vec<Vec<u8>> = Vec::new();
    for n in 1..4 {
        bad.push(eager(0, b"x")[..n].to_vec());
        bad.push(cts(1, 1, 1)[..n].to_vec());
    }
    for t in [PacketType::Cts, PacketType::CtsData, PacketType::ReadRsp, PacketType::Eor, PacketType::AtomRsp] {
        bad.push(vec![t as u8, 4, 0, 0, 1, 2, 3, 4, 5, 6, 7]);
    }
    bad.push(ctsdata(1, 0, &[1; 100])[..60].to_vec()); // data cut
    bad.push(medium(0, 10, 0, &[1; 4])[..20].to_vec());
    let before = rig.ep.stats();
    for p in &bad {
        rig.send(0, p);
        rig.send(s, p);
    }
    assert_eq!(rig.counted_since(before), Stats { malformed: 2 * bad.len() as u64, ..Stats::default() });
    rig.assert_quiet(0, "no answer");
    rig.assert_quiet(s, "no answer");
    rig.assert_first_message_arrives();
}

/// Case 11: an eager RTM replayed after its delivery (with its old
/// `msg_id`) is counted, not delivered again — neither into a posted
/// receive nor as an unexpected message.
#[test]
fn a_replayed_eager_rtm_is_not_delivered_twice() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let (i, b) = rig.lend(&[0u8; 5]);
    rig.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    let first = eager(0, b"first");
    rig.send(0, &first);
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), b"first");

    let before = rig.ep.stats();
    rig.send(0, &first); // no receive posted
    assert_eq!(rig.ep.unexpected_messages(), 0, "taken as a new message");
    let (j, b) = rig.lend(&[0u8; 5]);
    rig.ep.recv(b, RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    rig.send(0, &first); // a receive posted
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 2, ..Stats::default() });
    assert!(rig.cq.is_empty(), "delivered twice: {:?}", rig.cq);
    rig.send(0, &eager(1, b"next!"));
    rig.assert_done(2, Status::Success);
    assert_eq!(rig.lent(j), b"next!");
    assert!(rig.guards_intact());
}

/// Case 11: a long-CTS RTM replayed while its message is under way and
/// after it is counted and gets no second CTS; its data is not counted
/// twice.
#[test]
fn a_replayed_longcts_rtm_is_counted_and_changes_nothing() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let len = 20_000;
    let msg = pattern(len, 13);
    let (i, b) = rig.lend(&vec![0u8; len]);
    rig.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    let rtm = longcts_rtm(0, 0x66, len as u64, &msg[..4000]);
    rig.send(0, &rtm);
    let got = rig.inbox(0);
    let Ok(Packet::Cts(c)) = Packet::parse(&got[0]) else { panic!("a CTS") };
    assert_eq!(got.len(), 1);

    let before = rig.ep.stats();
    rig.send(0, &rtm);
    rig.send(0, &rtm);
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 2, ..Stats::default() });
    rig.assert_quiet(0, "no second CTS");
    for off in (4000..len - 4000).step_by(4000) {
        rig.send(0, &ctsdata(c.recv_id, off as u64, &msg[off..off + 4000]));
    }
    assert!(rig.cq.is_empty(), "completed with bytes missing: {:?}", rig.cq);
    rig.send(0, &ctsdata(c.recv_id, (len - 4000) as u64, &msg[len - 4000..]));
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), &msg[..]);
    let before = rig.ep.stats();
    rig.send(0, &rtm); // after the message
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    rig.assert_quiet(0, "no CTS for a replay");
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert!(rig.guards_intact());
}

/// Case 11 (and case 2 for medium messages): a medium segment replayed
/// while its message is under way must not count twice: the message
/// completes only once every byte is in.
#[test]
fn a_replayed_medium_segment_does_not_complete_the_message_early() {
    let mut rig = Rig::new(SimConfig::default(), 1);
    let len = 12_000;
    let msg = pattern(len, 14);
    let (i, b) = rig.lend(&vec![0u8; len]);
    rig.ep.recv(b, RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    let seg = |off: usize| medium(0, len as u64, off as u64, &msg[off..off + 4000]);
    let before = rig.ep.stats();
    rig.send(0, &seg(0));
    rig.send(0, &seg(0)); // replayed
    rig.send(0, &seg(4000));
    assert!(rig.cq.is_empty(), "completed with 4000 bytes missing: {:?}", rig.cq);
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    rig.send(0, &seg(8000));
    rig.assert_done(1, Status::Success);
    assert_eq!(rig.lent(i), &msg[..]);
    let before = rig.ep.stats();
    rig.send(0, &seg(4000)); // after the message
    assert_eq!(rig.counted_since(before), Stats { protocol_errors: 1, ..Stats::default() });
    assert!(rig.cq.is_empty(), "{:?}", rig.cq);
    assert!(rig.guards_intact());
}
