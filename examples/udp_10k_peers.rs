//! One udp endpoint and 10,000 real peers (issue 41, "many peers"): the
//! target process inserts every peer's address (as an MPI job's address
//! vector does), then each peer — endpoints of a few sender processes, many
//! each — sends it one 8-byte message (its first packet: the handshakes
//! ride with it), and the target answers each. Printed: the target's
//! memory per peer inserted and per peer met, the time for every first
//! message to arrive and for every answer to be acknowledged, and the
//! target's empty poll with all of them known.
//!
//! ```sh
//! cargo run --release --example udp_10k_peers -- 10000 4   # peers, sender processes
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdm4::device::udp::{UdpConfig, UdpDevice};
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;

type Ep = Endpoint<UdpDevice>;

fn open(max_peers: usize) -> Ep {
    let cfg = UdpConfig { addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), ..UdpConfig::default() };
    Endpoint::new(UdpDevice::open_with(cfg).expect("udp open"), Config { max_peers, ..Config::default() })
}

/// Resident memory in KiB.
fn rss_kib() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4
}

/// A sender process: `n` endpoints; prints their addresses (hex, one a
/// line), reads the target's, then on "go" each sends it one message and
/// waits for its answer; prints "done" when all have one.
fn sender(n: usize) {
    let mut eps: Vec<Ep> = (0..n).map(|_| open(16)).collect();
    let mut out = std::io::stdout().lock();
    for ep in &eps {
        writeln!(out, "{}", hex(&ep.addr().to_bytes())).unwrap();
    }
    out.flush().unwrap();
    let mut line = String::new();
    let mut stdin = BufReader::new(std::io::stdin());
    stdin.read_line(&mut line).unwrap();
    let target = RawAddr::from_bytes(&unhex(line.trim())).unwrap();
    let to: Vec<_> = eps.iter_mut().map(|ep| ep.av_insert(&target).unwrap()).collect();
    line.clear();
    stdin.read_line(&mut line).unwrap(); // "go"
    let (mut sbufs, mut rbufs): (Vec<OwnedBuf>, Vec<OwnedBuf>) =
        (0..n).map(|_| (OwnedBuf::from_slice(&[7u8; 8]), OwnedBuf::zeroed(8))).unzip();
    for (i, ep) in eps.iter_mut().enumerate() {
        ep.recv(rbufs[i].buf(), RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
        ep.send(to[i], sbufs[i].buf(), SendOpts::default()).unwrap();
    }
    let mut answered = vec![false; n];
    let (mut left, mut cq) = (n, Vec::<Cqe>::new());
    let deadline = Instant::now() + Duration::from_secs(120);
    while left > 0 && Instant::now() < deadline {
        for (i, ep) in eps.iter_mut().enumerate() {
            ep.progress(0);
            cq.clear();
            ep.poll_cq(&mut cq, 8);
            if !answered[i] && cq.iter().any(|c| c.context == 1) {
                answered[i] = true;
                left -= 1;
            }
        }
    }
    if left > 0 {
        let (mut lost, mut given_up, mut retx, mut probes, mut polls) = (0, 0, 0, 0, 0);
        for (i, ep) in eps.iter().enumerate() {
            let u = ep.device().stats();
            given_up += u.peers_given_up + u.peers_refused;
            retx += u.retransmits;
            probes += u.probes;
            polls += u.recv_calls;
            lost += usize::from(!answered[i]);
        }
        eprintln!(
            "sender: {lost} unanswered; given up {given_up}, retransmits {retx}, probes {probes}, recv calls {polls}"
        );
    }
    writeln!(out, "done {}", n - left).unwrap();
    out.flush().unwrap();
    // Stay until told, so that the target's last acknowledgements land.
    let mut rest = String::new();
    let _ = std::io::stdin().read_to_string(&mut rest);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--sender") {
        return sender(args[2].parse().unwrap());
    }
    let peers: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let procs: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    let mut kids: Vec<_> = (0..procs)
        .map(|k| {
            let n = peers / procs + usize::from(k < peers % procs);
            Command::new(&args[0])
                .args(["--sender", &n.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut readers: Vec<_> = kids.iter_mut().map(|k| BufReader::new(k.stdout.take().unwrap())).collect();
    let mut addrs = Vec::new();
    for (k, r) in readers.iter_mut().enumerate() {
        let n = peers / procs + usize::from(k < peers % procs);
        for _ in 0..n {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            addrs.push(RawAddr::from_bytes(&unhex(line.trim())).unwrap());
        }
    }
    let mut t = open(peers + 16);
    let rss0 = rss_kib();
    let start = Instant::now();
    let handles: Vec<_> = addrs.iter().map(|a| t.av_insert(a).unwrap()).collect();
    let insert_s = start.elapsed().as_secs_f64();
    let rss1 = rss_kib();
    for k in &mut kids {
        let stdin = k.stdin.as_mut().unwrap();
        writeln!(stdin, "{}\ngo", hex(&t.addr().to_bytes())).unwrap();
        stdin.flush().unwrap();
    }
    // Every peer's first message, each answered at once.
    let mut bufs: Vec<OwnedBuf> = (0..peers).map(|_| OwnedBuf::zeroed(8)).collect();
    for b in bufs.iter_mut() {
        t.recv(b.buf(), RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    }
    let mut answer = OwnedBuf::from_slice(&[9u8; 8]);
    let start = Instant::now();
    let (mut got, mut cq, mut refused) = (0usize, Vec::<Cqe>::new(), 0usize);
    let deadline = start + Duration::from_secs(120);
    let mut first_all = None;
    while got < peers && Instant::now() < deadline {
        t.progress(0);
        cq.clear();
        t.poll_cq(&mut cq, 64);
        for c in cq.iter().filter(|c| c.context == 1) {
            got += 1;
            if let Err(e) = t.send(c.src, answer.buf(), SendOpts::default()) {
                refused += 1;
                if refused == 1 {
                    eprintln!("answer to peer {} refused: {e:?}; {:?}", c.src, t.device().stats());
                }
            }
        }
    }
    if got == peers {
        first_all = Some(start.elapsed().as_secs_f64());
    }
    let rss2 = rss_kib();
    let mut done = 0;
    for r in readers.iter_mut() {
        let mut line = String::new();
        while !line.starts_with("done") {
            line.clear();
            // The target progresses while the senders wait for its answers.
            t.progress(0);
            if r.read_line(&mut line).unwrap() == 0 {
                break;
            }
        }
        done += line.trim().trim_start_matches("done ").parse::<usize>().unwrap_or(0);
    }
    let all_s = start.elapsed().as_secs_f64();
    let polls = 20_000;
    let tp = Instant::now();
    for _ in 0..polls {
        t.progress(0);
    }
    let poll_us = tp.elapsed().as_secs_f64() * 1e6 / polls as f64;
    drop(kids);
    if got < peers || done < peers {
        eprintln!("target: {:?}\n{:?}", t.stats(), t.device().stats());
    }
    println!(
        "peers {peers} ({procs} processes): insert {:.2} us and {:.0} B each; first messages {got} in {:.3} s ({}), \
         answers {done} acknowledged after {:.3} s; {:.0} B per peer met; empty poll {poll_us:.2} us; {} peers known",
        insert_s * 1e6 / peers as f64,
        (rss1 - rss0) as f64 * 1024.0 / peers as f64,
        first_all.unwrap_or(f64::NAN),
        if got == peers { "all" } else { "NOT all" },
        all_s,
        (rss2 - rss1) as f64 * 1024.0 / peers as f64,
        handles.len(),
    );
}
