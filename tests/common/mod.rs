//! Test harness: endpoints over one sim network, driven on virtual time.
#![allow(dead_code)]

use rdm4::device::sim::{SimConfig, SimDevice, SimNet};
use rdm4::engine::{Addr, Config, CqSink, Cqe, Endpoint};
use rdm4::wire::PacketType;

/// A completion list as the engine's sink (the express receive's).
struct Sink<'a>(&'a mut Vec<Cqe>);

impl CqSink for Sink<'_> {
    fn offer(&mut self, e: &Cqe) -> bool {
        self.0.push(*e);
        true
    }
}

pub struct Cluster {
    pub net: SimNet,
    pub eps: Vec<Endpoint<SimDevice>>,
    /// addrs[i][j]: endpoint i's handle for endpoint j.
    pub addrs: Vec<Vec<Addr>>,
    pub cqs: Vec<Vec<Cqe>>,
}

impl Cluster {
    pub fn new(n: usize, sim: SimConfig, cfg: Config) -> Cluster {
        Cluster::with_configs(sim, vec![cfg; n])
    }

    pub fn with_configs(sim: SimConfig, cfgs: Vec<Config>) -> Cluster {
        let net = SimNet::new(sim);
        let mut eps: Vec<_> = cfgs.into_iter().map(|c| Endpoint::new(net.device(), c)).collect();
        let raws: Vec<_> = eps.iter().map(|e| e.addr()).collect();
        let addrs = eps.iter_mut().map(|e| raws.iter().map(|r| e.av_insert(r).unwrap()).collect()).collect();
        let n = eps.len();
        Cluster { net, eps, addrs, cqs: vec![Vec::new(); n] }
    }

    /// Two endpoints whose HANDSHAKEs have been exchanged (a message each
    /// way), with the capture log cleared.
    pub fn warm(sim: SimConfig, cfgs: Vec<Config>) -> Cluster {
        let mut c = Cluster::with_configs(sim, cfgs);
        for (a, b) in [(0, 1), (1, 0)] {
            let mut s = rdm4::mem::OwnedBuf::from_slice(b"hi");
            let mut r = rdm4::mem::OwnedBuf::zeroed(2);
            let to = c.addrs[a][b];
            c.eps[b].recv(r.buf(), rdm4::engine::RecvOpts::default()).unwrap();
            c.eps[a].send(to, s.buf(), rdm4::engine::SendOpts::default()).unwrap();
            c.run_until(100_000, |c| !c.cqs[a].is_empty() && !c.cqs[b].is_empty());
            c.settle(10_000);
            c.take_cq(a);
            c.take_cq(b);
        }
        c.net.clear_log();
        c
    }

    /// One round: every endpoint progresses and its completions are
    /// collected. As the C API's poll does: the express receive first
    /// (a device without it takes nothing that way), then the general
    /// progress unless the express one found nothing more; a device with a
    /// responder gets its call first, as while the application was away.
    pub fn step(&mut self) {
        let now = self.net.now();
        for (i, ep) in self.eps.iter_mut().enumerate() {
            if ep.wants_responder() {
                ep.respond();
            }
            let mut sink = Sink(&mut self.cqs[i]);
            let (_, more) = ep.progress_express(&mut sink, 64);
            if more {
                ep.progress(now);
            }
            ep.poll_cq(&mut self.cqs[i], usize::MAX);
        }
        self.net.advance(100);
    }

    /// Steps until `done` holds; panics after `max_steps`.
    pub fn run_until(&mut self, max_steps: usize, mut done: impl FnMut(&Cluster) -> bool) {
        for _ in 0..max_steps {
            if done(self) {
                return;
            }
            self.step();
            if self.net.in_flight() > 0 && !done(self) {
                self.net.advance_to_next();
            }
        }
        assert!(done(self), "not done after {max_steps} steps");
    }

    /// Steps until the network is quiet and no endpoint has queued work.
    pub fn settle(&mut self, max_steps: usize) {
        let mut quiet = 0;
        for _ in 0..max_steps {
            self.step();
            if self.net.in_flight() == 0 {
                quiet += 1;
                if quiet > 3 {
                    return;
                }
            } else {
                quiet = 0;
                self.net.advance_to_next();
            }
        }
    }

    pub fn take_cq(&mut self, i: usize) -> Vec<Cqe> {
        std::mem::take(&mut self.cqs[i])
    }

    /// Packet types sent from `from` to `to`, as names, deduplicated in first-seen order.
    pub fn types_between(&self, from: usize, to: usize) -> Vec<&'static str> {
        let mut v = Vec::new();
        for r in self.net.log() {
            if r.from == from && r.to == to {
                let name = PacketType::from_u8(r.ptype).map_or("?", |t| t.name());
                if !v.contains(&name) {
                    v.push(name);
                }
            }
        }
        v
    }

    /// Every packet type on the wire, deduplicated and sorted.
    pub fn all_types(&self) -> Vec<&'static str> {
        let mut v: Vec<_> =
            self.net.log().iter().map(|r| PacketType::from_u8(r.ptype).map_or("?", |t| t.name())).collect();
        v.sort();
        v.dedup();
        v
    }
}

/// The golden packet vectors (`tests/data/golden_packets.json`).
pub fn golden_vectors() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden_packets.json"))
        .expect("golden file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("golden json");
    v["vectors"].as_array().expect("vectors").clone()
}

/// The bytes of a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[path = "../common_rng/mod.rs"]
mod rng;
#[allow(unused_imports)]
pub use rng::Rng;

/// A HANDSHAKE advertising extra feature bits `extra`, as a forger sends
/// it (READ_NACK and PEER_ERROR go only to a peer whose HANDSHAKE has them).
#[allow(dead_code)]
pub fn handshake(extra: u64) -> Vec<u8> {
    let words = [rdm4::wire::LeU64::new(extra)];
    let mut b = vec![0u8; 256];
    let n = rdm4::wire::Packet::Handshake(rdm4::wire::Handshake::new(&words)).emit(&mut b).unwrap();
    b.truncate(n);
    b
}
