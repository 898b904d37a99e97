//! Fuzz target for the engine's packet input (bolero): packets, whole or
//! with a gathered payload, from a known and from an unknown sender, into an
//! endpoint with posted receives and a registration that peers may read and
//! write. Each packet is one of the golden vectors (valid packets of every
//! type, `tests/data/golden_packets.json`) with fuzzed bytes overwritten and
//! a fuzzed length, or, for one input in four, a base header of a random
//! type in front of fuzzed bytes; so inputs reach the deep paths (matching,
//! placement, responders) as well as the parsers' refusals.
//!
//! For half the inputs the known sender first sends a valid HANDSHAKE (with
//! every extra feature), so that the forged requests and responses after it
//! meet an endpoint that has the peer's features, as between real peers.
//!
//! Whatever arrives, the engine must not panic, must not write outside the
//! buffers it was lent (each sits between guard bytes that are checked after
//! every input), must keep what it holds for unexpected messages under its
//! limit, and its state bounded: peers within `Config::max_peers`, held
//! REQs within the reorder window's bytes. Every packet that must be dropped
//! is counted by its reason as it arrives (`Stats`): one the wire layer
//! cannot parse as `malformed`; anything but a REQ from the stranger (no
//! raw address) as `unknown_sender`; a RECEIPT, ATOMRSP, READRSP or
//! READ_NACK, which answer requests the endpoint never made here, under
//! one of the reasons. Under `cargo test` the target is
//! bounded like those of `tests/fuzz_wire.rs`; `RDM4_FUZZ_SECONDS=N` runs
//! it for N seconds of random inputs instead (a long run without
//! cargo-bolero), and `fuzz/README.md` shows how to run it coverage-guided.

mod common;

use std::time::Duration;

use bolero::check;
use rdm4::device::sim::{SimConfig, SimNet};
use rdm4::device::{Access, Device};
use rdm4::engine::{Config, Endpoint, RecvOpts};
use rdm4::mem::UserBuf;
use rdm4::wire::PacketType;
use std::sync::OnceLock;

const ITERATIONS: usize = 200_000;
const TIME_MS: u64 = 1_000;

/// Iterations and time of this run: the bounds above, or
/// `RDM4_FUZZ_SECONDS` of random inputs.
fn bounds() -> (usize, Duration) {
    match std::env::var("RDM4_FUZZ_SECONDS").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(s) => (usize::MAX, Duration::from_secs(s)),
        None => (ITERATIONS, Duration::from_millis(TIME_MS)),
    }
}
const GUARD: usize = 64;

/// A lent buffer of `len` bytes between guard bytes.
struct Guarded {
    bytes: Box<[u8]>,
    len: usize,
}

impl Guarded {
    fn new(len: usize) -> Guarded {
        Guarded { bytes: vec![0xC3; len + 2 * GUARD].into_boxed_slice(), len }
    }

    fn buf(&mut self) -> UserBuf {
        // SAFETY: the box outlives the endpoint using it (declared first in
        // the target, dropped last), and the target reads it only after
        // the endpoint is gone or between progress calls.
        unsafe { UserBuf::from_raw(self.bytes.as_mut_ptr().add(GUARD), self.len) }.unwrap()
    }

    fn guards_intact(&self) -> bool {
        let n = self.bytes.len();
        self.bytes[..GUARD].iter().chain(&self.bytes[n - GUARD..]).all(|&b| b == 0xC3)
    }
}

/// The golden vectors' bytes.
fn golden() -> &'static [Vec<u8>] {
    static V: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    V.get_or_init(|| common::golden_vectors().iter().map(|v| common::unhex(v["hex"].as_str().unwrap())).collect())
}

/// Fuzzed packet recipe: (seed, overwrites, length, flags) — see the module docs.
type Recipe = (u16, Vec<(u16, u8)>, u16, u8);

/// The reasons a packet is dropped for (`Stats`), summed.
fn dropped(s: &rdm4::engine::Stats) -> u64 {
    s.malformed + s.stale_connid + s.unknown_sender + s.protocol_errors + s.access_errors + s.refused_peers
}

/// What `pkt` (handed whole, not gathered) must have been counted as, if
/// it arrived: checked against the counters before (`b`) and after (`a`).
fn counted_as_due(
    pkt: &[u8],
    from_known: bool,
    b: &rdm4::engine::Stats,
    a: &rdm4::engine::Stats,
) -> Result<(), String> {
    use rdm4::wire::{DataRtm, Packet};
    let parsed = if DataRtm::parse(pkt).is_some() {
        Some(true)
    } else {
        Packet::parse(pkt).ok().map(|p| matches!(p, Packet::Req(_)))
    };
    let Some(is_req) = parsed else {
        return if a.malformed == b.malformed + 1 { Ok(()) } else { Err("unparsable, not counted malformed".into()) };
    };
    if !from_known && !is_req && a.unknown_sender != b.unknown_sender + 1 {
        return Err("a stranger's non-REQ not counted unknown_sender".into());
    }
    let unsolicited = [PacketType::Receipt, PacketType::AtomRsp, PacketType::ReadRsp, PacketType::ReadNack];
    if unsolicited.iter().any(|&t| pkt[0] == t as u8) && dropped(a) <= dropped(b) {
        return Err(format!("an answer to no request (type {}) not counted", pkt[0]));
    }
    Ok(())
}

fn packet(types: &[u8], (seed, writes, len, flags): &Recipe) -> Vec<u8> {
    let g = golden();
    let mut pkt = if flags & 3 == 0 {
        let mut p = vec![types[usize::from(*seed) % types.len()], 4, (*seed >> 8) as u8, 0];
        p.extend(writes.iter().map(|w| w.1));
        p
    } else {
        g[usize::from(*seed) % g.len()].clone()
    };
    for &(at, b) in writes.iter().take(4) {
        let n = pkt.len().max(1);
        if let Some(x) = pkt.get_mut(usize::from(at) % n) {
            *x = b;
        }
    }
    if flags & 4 != 0 {
        pkt.resize(usize::from(*len) % 9000, 0);
    }
    pkt
}

#[test]
fn fuzz_engine_packet_input() {
    let types: Vec<u8> = (0..=255u8).filter(|&t| PacketType::from_u8(t).is_some()).collect();
    let (iterations, time) = bounds();
    check!()
        .with_iterations(iterations)
        .with_test_time(time)
        .with_type::<(Vec<(Recipe, bool, bool)>, u16, bool)>()
        .for_each(|(packets, payload_len, introduced)| {
            let mut bufs: Vec<Guarded> = [16usize, 100, 9000].iter().map(|&n| Guarded::new(n)).collect();
            let mut mr = Guarded::new(4096);
            let mut payload = Guarded::new(usize::from(*payload_len) % 9000);
            let net = SimNet::new(SimConfig { capture: false, ..SimConfig::default() });
            let cfg = Config { unexpected_limit: 1 << 16, max_peers: 16, ..Config::default() };
            let mut ep = Endpoint::new(net.device(), cfg);
            let mut known = net.device();
            let mut stranger = net.device();
            let to_ep = known.insert(&ep.addr()).unwrap();
            let from_stranger = stranger.insert(&ep.addr()).unwrap();
            ep.av_insert(&known.local_addr()).unwrap();
            ep.mr_reg(mr.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL).unwrap();
            if *introduced {
                let hs = common::handshake((1 << rdm4::wire::extra::COUNT) - 1);
                let _ = known.send_with(to_ep, 1, hs.len(), &mut |out: &mut [u8]| {
                    out[..hs.len()].copy_from_slice(&hs);
                    hs.len()
                });
                ep.progress(0);
            }
            for (i, b) in bufs.iter_mut().enumerate() {
                let tag = (i % 2 == 1).then_some((i as u64, 0));
                ep.recv(b.buf(), RecvOpts { tag, ..RecvOpts::default() }).unwrap();
            }
            for (recipe, gathered, from_known) in packets.iter().take(16) {
                let mut pkt = packet(&types, recipe);
                pkt.truncate(known.caps().mtu - 64 - if *gathered { payload.len } else { 0 });
                let dev = if *from_known { &mut known } else { &mut stranger };
                let ah = if *from_known { to_ep } else { from_stranger };
                let build = &mut |out: &mut [u8]| {
                    out[..pkt.len()].copy_from_slice(&pkt);
                    pkt.len()
                };
                let _ = if *gathered {
                    dev.send_gather(ah, 1, pkt.len(), build, payload.buf())
                } else {
                    dev.send_with(ah, 1, pkt.len(), build)
                };
                let before = ep.stats();
                ep.progress(0);
                let after = ep.stats();
                // The packet arrived alone (nothing else was in flight): it
                // is counted by its reason now.
                if after.rx_packets == before.rx_packets + 1 {
                    if *gathered {
                        // A gathered packet is a CTSDATA segment or malformed;
                        // from the stranger it is dropped either way.
                        assert!(
                            *from_known || dropped(&after) > dropped(&before),
                            "a stranger's gathered packet not counted"
                        );
                    } else if let Err(why) = counted_as_due(&pkt, *from_known, &before, &after) {
                        panic!("{why}: {:02x?}", &pkt[..pkt.len().min(64)]);
                    }
                }
                // The limit, plus one message taken when nothing was held
                // (at most the larger of medium_max and an MTU).
                let one = Config::default().medium_max.max(known.caps().mtu);
                assert!(ep.unexpected_bytes() <= (1 << 16) + one, "unexpected bytes unbounded");
                assert!(ep.peer_count() <= 16, "{} peers", ep.peer_count());
                // The reorder window (in messages) times the largest packet.
                let held = Config::default().reorder_window as usize * known.caps().mtu;
                assert!(ep.reorder_bytes() <= held, "{} bytes held for msg_id order", ep.reorder_bytes());
            }
            for _ in 0..4 {
                ep.progress(0);
            }
            drop(ep);
            assert!(bufs.iter().all(Guarded::guards_intact), "a receive buffer was overrun");
            assert!(mr.guards_intact(), "a write went outside the registration");
            assert!(payload.guards_intact());
        });
}
