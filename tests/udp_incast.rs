//! Incast over the udp device: four senders streaming 1 MiB messages to one
//! receiver whose socket buffer is small (64 KiB), against one sender alone
//! (issue 29). All data is checked; goodput and the retransmission ratio
//! (datagrams sent again per message byte's datagram) are printed. Each
//! sender runs in its own thread with its own endpoint, so they contend
//! for the receiver's socket buffer as separate processes would.

mod common;

use common::pattern;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdm4::device::udp::{UdpConfig, UdpDevice};
use rdm4::device::Device;
use rdm4::engine::{Config, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;
use rdm4::Status;

const MSG: usize = 1 << 20;
const PER_SENDER: usize = 24;

fn cfg(sock_buf: usize) -> UdpConfig {
    UdpConfig { addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), sock_buf: Some(sock_buf), ..UdpConfig::default() }
}

/// `senders` threads stream `PER_SENDER` messages each to one receiver;
/// returns (goodput MB/s, retransmissions per datagram of data).
fn incast(senders: usize) -> (f64, f64) {
    let mut rx = Endpoint::new(UdpDevice::open_with(cfg(64 << 10)).unwrap(), Config::default());
    let to: RawAddr = rx.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let threads: Vec<_> = (0..senders)
        .map(|s| {
            let stop = stop.clone();
            let ready = ready_tx.clone();
            std::thread::spawn(move || {
                let mut ep = Endpoint::new(UdpDevice::open_with(cfg(4 << 20)).unwrap(), Config::default());
                ready.send(ep.addr()).unwrap();
                let dest = ep.av_insert(&to).unwrap();
                let mut bufs: Vec<OwnedBuf> =
                    (0..PER_SENDER).map(|k| OwnedBuf::from_slice(&pattern(MSG, (s * 1000 + k) as u64))).collect();
                for (k, b) in bufs.iter_mut().enumerate() {
                    ep.send(dest, b.buf(), SendOpts { tag: Some((s * 1000 + k) as u64), ..SendOpts::default() })
                        .unwrap();
                }
                let mut cq = Vec::new();
                let t = Instant::now();
                while cq.len() < PER_SENDER && !stop.load(Ordering::Relaxed) {
                    assert!(t.elapsed() < Duration::from_secs(120), "sender {s} stuck");
                    ep.progress(0);
                    ep.poll_cq(&mut cq, usize::MAX);
                }
                assert!(cq.iter().all(|e| e.status == Status::Success), "sender {s}: {cq:?}");
                // Stay until the receiver has everything (it may still need acks).
                while !stop.load(Ordering::Relaxed) {
                    ep.progress(0);
                    std::thread::sleep(Duration::from_micros(50));
                }
                ep.device().stats().retransmits
            })
        })
        .collect();
    for _ in 0..senders {
        let a = ready_rx.recv().unwrap();
        rx.av_insert(&a).unwrap();
    }
    let n = senders * PER_SENDER;
    let mut dsts: Vec<OwnedBuf> = (0..n).map(|_| OwnedBuf::zeroed(MSG)).collect();
    for (i, d) in dsts.iter_mut().enumerate() {
        let (s, k) = (i / PER_SENDER, i % PER_SENDER);
        let opts = RecvOpts { tag: Some(((s * 1000 + k) as u64, 0)), context: i as u64, ..RecvOpts::default() };
        rx.recv(d.buf(), opts).unwrap();
    }
    let mut cq = Vec::new();
    let t = Instant::now();
    while cq.len() < n {
        assert!(t.elapsed() < Duration::from_secs(120), "receiver stuck at {} of {n}", cq.len());
        rx.progress(0);
        rx.poll_cq(&mut cq, usize::MAX);
    }
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let retransmits: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    for (i, d) in dsts.iter().enumerate() {
        let (s, k) = (i / PER_SENDER, i % PER_SENDER);
        assert!(d.bytes() == pattern(MSG, (s * 1000 + k) as u64), "message {k} of sender {s}");
    }
    let datagrams = (n * MSG) as f64 / rx.device().caps().mtu as f64;
    ((n * MSG) as f64 / secs / 1e6, retransmits as f64 / datagrams)
}

#[test]
fn four_senders_into_a_small_buffer_deliver_every_byte_and_report_goodput() {
    let (one_bw, one_rt) = incast(1);
    let (four_bw, four_rt) = incast(4);
    println!("incast, 1 MiB messages, receiver socket buffer 64 KiB:");
    println!("  1 sender:  {one_bw:8.1} MB/s, {:.3} retransmissions per data datagram", one_rt);
    println!("  4 senders: {four_bw:8.1} MB/s, {:.3} retransmissions per data datagram", four_rt);
    // Goodput is reported, not asserted (timing on a shared 2-vCPU
    // machine); asserted are every byte of every sender, and that one
    // sender keeps within the receiver's window: it does not overrun the
    // small buffer (0.5 datagrams sent again per datagram before the
    // receiver granted a window; ~0.03 with it).
    assert!(one_rt < 0.2, "a single sender overran the receiver: {one_rt:.3} retransmissions per datagram");
}
