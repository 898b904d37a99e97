//! The udp device's per-poll cost as its peers grow (issue 41, "many
//! peers"): an endpoint with N peers inserted (addresses on loopback that
//! nobody listens at; they are never sent to) and one real peer, and the
//! time of an empty poll (on average, and the slowest) and of a ping-pong
//! round trip with the real peer.
//!
//! ```sh
//! cargo run --release --example udp_many_peers -- 10000
//! ```

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use rdm4::device::udp::{UdpConfig, UdpDevice};
use rdm4::engine::{Config, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let cfg = || UdpConfig { addr: Some(ip), ..UdpConfig::default() };
    let engine = Config { max_peers: n + 16, ..Config::default() };
    let mut a = Endpoint::new(UdpDevice::open_with(cfg()).unwrap(), engine.clone());
    let mut b = Endpoint::new(UdpDevice::open_with(cfg()).unwrap(), engine);
    let gid = Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets();
    let t = Instant::now();
    for i in 0..n {
        a.av_insert(&RawAddr::new(gid, 20_000 + (i % 40_000) as u16, 0x5EED_0000 + i as u32)).unwrap();
    }
    let insert_us = t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    let to_b = a.av_insert(&b.addr()).unwrap();
    let to_a = b.av_insert(&a.addr()).unwrap();
    // 200 ms of empty polls: twenty passes of the liveness rules (every
    // 10 ms), whose poll is the slowest.
    let (mut polls, mut slowest) = (0u64, 0f64);
    let t = Instant::now();
    while t.elapsed().as_millis() < 200 {
        let p = Instant::now();
        a.progress(0);
        slowest = slowest.max(p.elapsed().as_secs_f64() * 1e6);
        polls += 1;
    }
    let poll_us = t.elapsed().as_secs_f64() * 1e6 / polls as f64;
    let (mut sbuf, mut rbuf) = (OwnedBuf::zeroed(8), OwnedBuf::zeroed(8));
    let rounds = 2000;
    // Until `ep` completes its receive (context 1); other completions dropped.
    let received = |ep: &mut Endpoint<UdpDevice>, out: &mut Vec<rdm4::engine::Cqe>| {
        out.clear();
        ep.poll_cq(out, 16);
        out.iter().any(|c| c.context == 1)
    };
    let mut out = Vec::new();
    let recv = RecvOpts { context: 1, ..RecvOpts::default() };
    let mut round = |a: &mut Endpoint<UdpDevice>, b: &mut Endpoint<UdpDevice>| {
        b.recv(rbuf.buf(), recv).unwrap();
        a.send(to_b, sbuf.buf(), SendOpts::default()).unwrap();
        while !received(b, &mut out) {
            a.progress(0);
            b.progress(0);
        }
        a.recv(rbuf.buf(), recv).unwrap();
        b.send(to_a, sbuf.buf(), SendOpts::default()).unwrap();
        while !received(a, &mut out) {
            a.progress(0);
            b.progress(0);
        }
    };
    for _ in 0..100 {
        round(&mut a, &mut b);
    }
    let t = Instant::now();
    for _ in 0..rounds {
        round(&mut a, &mut b);
    }
    let rtt_us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    println!(
        "peers {n}: insert {insert_us:.2} us each, empty poll {poll_us:.3} us (slowest {slowest:.1} us), 8 B round trip {rtt_us:.1} us"
    );
}
