//! A job on two hosts over the auto device (issue 39): two network
//! namespaces ("hosts") joined by a veth pair (MTU 9000), two processes in
//! each (this test binary run again with a role and a rank: ranks 0 and 1 on
//! host A, 2 and 3 on host B), all four on `AutoDevice` with shm and udp.
//!
//! - `four_processes_on_two_hosts_go_by_shm_locally_and_by_udp_across` (and
//!   `..._with_5_percent_loss_on_udp`, the same with 5% of every process's
//!   datagrams dropped): names exchanged through files, then three phases
//!   with a barrier (files) after each:
//!   1. *local*: each process with its local partner only: messages of 0 B
//!      to 64 MiB both ways (tagged, directed receives), RMA writes of a
//!      slice into the partner's registered and `mr_alloc` regions, read
//!      back with the partner's own slice. No udp peer is inserted yet:
//!      each process's udp device must have sent no datagram at all while
//!      its engine sent packets (so they went by shm).
//!   2. *remote*: the same with both peers of the other host at once. Every
//!      engine packet of the phase must have been a udp datagram (udp
//!      datagrams sent in the phase ≥ engine packets sent in it).
//!   3. *atomics*: all four (rank 0 through its own address) do fetch-adds
//!      on two counters of rank 0, one registered, one allocated; the
//!      totals and the set of old values (each value exactly once) are
//!      exact. Rank 1's adds on allocated memory are CPU atomics (shm
//!      mapping), the remote ranks' are emulated over udp: one counter sees
//!      both kinds at once.
//!
//!   Every byte is verified: messages by the receiver, RMA by the reader
//!   and by the region's owner after the phase.
//! - `losing_a_remote_or_a_local_peer_leaves_the_other_traffic_alone`: rank 3
//!   (host B) is killed with SIGKILL while ranks 0 and 1 (for whom it is a
//!   remote peer, by udp) and rank 2 (its local peer, by shm) have a 64 MiB
//!   send, reads and small sends towards it. Those not complete by the kill
//!   end with `PeerUnreachable` within [`KILL_BOUND`], while the survivors
//!   exchange messages and RMA with each other: 0 and 1 by shm, both with 2
//!   by udp.
//!
//! **Shared memory per host.** Namespaces of one machine share `/dev/shm`
//! and the boot ID, so the test gives each host its own: a directory of the
//! machine's `/dev/shm` (tmpfs) per host, bind-mounted over `/dev/shm` in a
//! private mount namespace (`unshare --mount`) inside `ip netns exec`. A
//! tmpfs mounted afresh in each process would not do: both processes of a
//! host must see the same one, and each `ip netns exec` has its own mount
//! namespace. Both hosts use one segment prefix, so their endpoint numbers
//! collide: a name of the other host, whose locator carries this host's
//! boot-ID hash, opens a segment of this host with another connid (or none)
//! and `AutoDevice::pick` falls back to udp, as it must. Where the bind
//! mount cannot be made, each host gets its own segment prefix instead
//! (printed), which separates the hosts the same way.
//!
//! Skipped, with a message saying why, where namespaces cannot be made.

#[path = "common_netns/mod.rs"]
mod common_netns;

use common_netns::Netns;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdm4::atomic_ops;
use rdm4::device::auto::{AutoConfig, AutoDevice};
use rdm4::device::shm::{remove_stale_segments, ShmConfig};
use rdm4::device::udp::{Faults, UdpConfig};
use rdm4::device::Access;
use rdm4::engine::{Addr, Config, Cqe, Endpoint, Proto, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::wire::RawAddr;
use rdm4::Status;

type Ep = Endpoint<AutoDevice>;

/// The longest any one wait of a process may take.
const LIMIT: Duration = Duration::from_secs(90);
/// The longest a whole scenario may take (the parent kills what is left).
const RUN_LIMIT: Duration = Duration::from_secs(240);
const RANKS: usize = 4;
const ALL: [usize; RANKS] = [0, 1, 2, 3];
const SIZES: [usize; 9] = [0, 1, 1000, 9000, 65_536, 300_000, 1 << 20, 16 << 20, 64 << 20];
/// Each process's slice of every registered region, and of every allocated one.
const REG_SLICE: usize = 2 << 20;
const ALLOC_SLICE: usize = 256 << 10;
/// Fetch-adds per process on each counter.
const ROUNDS: u64 = 100;
const COUNTER_RANK: usize = 0;
/// The killed process, and the time within which its peers' operations end.
const VICTIM: usize = 3;
const KILL_BOUND: Duration = Duration::from_secs(2);
const LIVE_SIZES: [usize; 5] = [0, 1000, 65_536, 1 << 20, 16 << 20];
const IPS: [&str; 2] = ["10.78.0.1", "10.78.0.2"];

/// Operation kinds in the top bits of a context.
const RECV: u64 = 1 << 40;
const SEND: u64 = 2 << 40;
const WRITE: u64 = 3 << 40;
const READ: u64 = 4 << 40;
const ATOM: u64 = 5 << 40;
const DEAD: u64 = 6 << 40;

/// One parent scenario at a time: each runs four busy processes.
static SERIAL: Mutex<()> = Mutex::new(());

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

fn host_of(rank: usize) -> usize {
    rank / 2
}

/// The data kinds, for seeds.
#[derive(Clone, Copy)]
enum Kind {
    Msg = 1,
    Reg = 2,
    Alloc = 3,
}

/// The seed of the bytes `from` puts at `to` (`k`: message size index).
fn seed(from: usize, to: usize, k: usize, kind: Kind) -> u64 {
    ((((from * RANKS + to) * 64 + k) as u64) << 2 | kind as u64) + 1
}

/// Deterministic pseudo-random 8-byte words (xorshift).
fn words(seed: u64) -> impl Iterator<Item = [u8; 8]> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x.to_le_bytes()
    })
}

fn fill(buf: &mut [u8], seed: u64) {
    for (c, w) in buf.chunks_mut(8).zip(words(seed)) {
        c.copy_from_slice(&w[..c.len()]);
    }
}

fn filled(len: usize, seed: u64) -> OwnedBuf {
    let mut b = OwnedBuf::zeroed(len);
    fill(b.bytes_mut(), seed);
    b
}

/// The first offset where `buf` differs from the bytes of `seed`.
fn first_diff(buf: &[u8], seed: u64) -> Option<usize> {
    buf.chunks(8).zip(words(seed)).position(|(c, w)| c != &w[..c.len()]).map(|i| i * 8)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the
/// machine, namespaces included.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The first 8-aligned address at or after `a`.
fn align8(a: u64) -> u64 {
    a.div_ceil(8) * 8
}

/// Where a process's counters are: after the slices of its regions.
fn reg_counter(reg: u64) -> u64 {
    align8(reg + (RANKS * REG_SLICE) as u64)
}

fn alloc_counter(alloc: u64) -> u64 {
    align8(alloc + (RANKS * ALLOC_SLICE) as u64)
}

/// What a process publishes: its name and its two regions.
#[derive(Clone, Copy)]
struct Card {
    name: RawAddr,
    reg: u64,
    reg_key: u64,
    alloc: u64,
    alloc_key: u64,
}

fn publish(dir: &Path, rank: usize, c: &Card) {
    let hex: String = c.name.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!("{rank}.tmp"));
    std::fs::write(&tmp, format!("{hex} {} {} {} {}", c.reg, c.reg_key, c.alloc, c.alloc_key)).unwrap();
    std::fs::rename(tmp, dir.join(format!("{rank}.card"))).unwrap();
}

fn read_card(dir: &Path, rank: usize) -> Card {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.join(format!("{rank}.card"))) {
            let f: Vec<&str> = s.split_whitespace().collect();
            let bytes: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&f[0][i..i + 2], 16).unwrap()).collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            return Card {
                name: RawAddr::from_bytes(&bytes).unwrap(),
                reg: n(1),
                reg_key: n(2),
                alloc: n(3),
                alloc_key: n(4),
            };
        }
        assert!(t.elapsed() < LIMIT, "rank {rank} never published its name");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One process: its endpoint, completions (with the time each was
/// polled), peers, and regions.
struct Proc {
    rank: usize,
    dir: PathBuf,
    ep: Ep,
    cq: Vec<(Cqe, u64)>,
    polled: Vec<Cqe>,
    cards: Vec<Card>,
    addr: [Option<Addr>; RANKS],
    /// Registered: a slice per rank, then the counter.
    region: OwnedBuf,
    /// Allocated (`mr_alloc`): the same layout.
    alloc: UserBuf,
    scan: Instant,
}

impl Proc {
    /// Opens the auto device on this host's address, sets up and
    /// publishes the regions, and reads every card.
    fn open(rank: usize, dir: &Path) -> Proc {
        let ip: IpAddr = env("RDM4_CHILD_IP").parse().unwrap();
        let loss: f64 = env("RDM4_CHILD_DROP").parse().unwrap_or(0.0);
        let faults = Faults { drop: loss, seed: 100 + rank as u64, ..Faults::default() };
        let cfg = AutoConfig {
            shm: Some(ShmConfig { prefix: env("RDM4_CHILD_PREFIX"), ..ShmConfig::default() }),
            udp: Some(UdpConfig { addr: Some(ip), faults, ..UdpConfig::default() }),
        };
        if env("RDM4_CHILD_PRIVATE_SHM") == "1" {
            // This host's own /dev/shm: the machine's, where the hosts'
            // directories are, is out of sight.
            let seen: Vec<String> = std::fs::read_dir("/dev/shm")
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert!(!seen.iter().any(|n| n.starts_with("autons-")), "rank {rank}: /dev/shm is the machine's: {seen:?}");
        }
        let dev = AutoDevice::open_with(cfg).expect("open the auto device");
        assert_eq!(dev.devices(), (true, true), "rank {rank}: shm and udp open");
        let mut ep = Endpoint::new(dev, Config::default());
        let access = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let mut region = OwnedBuf::zeroed(RANKS * REG_SLICE + 64);
        fill(&mut region.bytes_mut()[rank * REG_SLICE..(rank + 1) * REG_SLICE], seed(rank, rank, 0, Kind::Reg));
        let reg_key = ep.mr_reg(region.buf(), access).unwrap();
        let (alloc, alloc_key) = ep.mr_alloc(RANKS * ALLOC_SLICE + 64, access).expect("mr_alloc");
        alloc.write_at(rank * ALLOC_SLICE, filled(ALLOC_SLICE, seed(rank, rank, 0, Kind::Alloc)).bytes());
        let card = Card { name: ep.device().name(), reg: region.buf().addr(), reg_key, alloc: alloc.addr(), alloc_key };
        assert_eq!(card.name.to_bytes().len(), RawAddr::LEN);
        publish(dir, rank, &card);
        let cards: Vec<Card> = ALL.iter().map(|&r| read_card(dir, r)).collect();
        for (r, c) in cards.iter().enumerate() {
            // One machine, one boot ID: every name carries this host's hash,
            // so only the segment's opening tells the hosts apart.
            assert_eq!(c.name.reserved() >> 16, card.name.reserved() >> 16, "rank {r}'s locator");
        }
        Proc {
            rank,
            dir: dir.to_path_buf(),
            ep,
            cq: Vec::new(),
            polled: Vec::new(),
            cards,
            addr: [None; RANKS],
            region,
            alloc,
            scan: Instant::now(),
        }
    }

    /// Inserts `peer` by the device `pick` chooses, and checks the choice:
    /// a shm address for this host's processes (itself included), the
    /// peer's udp address for the other host's.
    fn connect(&mut self, peer: usize) -> Addr {
        let name = self.cards[peer].name;
        let raw = self.ep.device_mut().pick(&name).unwrap();
        if host_of(peer) == host_of(self.rank) {
            assert_ne!(raw.gid, name.gid, "rank {} reaches local rank {peer} by shm", self.rank);
        } else {
            assert_eq!(raw, name.with_reserved(0), "rank {} reaches remote rank {peer} by udp", self.rank);
        }
        let a = self.ep.av_insert(&raw).unwrap();
        self.addr[peer] = Some(a);
        a
    }

    fn to(&self, peer: usize) -> Addr {
        self.addr[peer].expect("connected")
    }

    fn udp_sent(&self) -> u64 {
        self.ep.device().udp_stats().unwrap().datagrams_sent
    }

    /// One progress call; completions are stamped with the time they
    /// were polled.
    fn step(&mut self) {
        if self.scan.elapsed() >= Duration::from_millis(100) {
            self.scan = Instant::now();
            self.ep.keepalive();
        }
        let before = self.ep.packets_in();
        self.ep.progress(0);
        let n = self.ep.poll_cq(&mut self.polled, usize::MAX);
        if n == 0 && self.ep.packets_in() == before {
            // Four busy processes on as few as two CPUs: let the others run.
            std::thread::yield_now();
        }
        let now = monotonic_ns();
        self.cq.extend(self.polled.drain(..).map(|e| (e, now)));
    }

    /// Posts with `f`, again after progress while it says `Again`.
    fn post(&mut self, what: &str, mut f: impl FnMut(&mut Ep) -> Result<(), Status>) {
        let t = Instant::now();
        loop {
            match f(&mut self.ep) {
                Ok(()) => return,
                Err(Status::Again) if t.elapsed() < LIMIT => self.step(),
                Err(e) => panic!("rank {}: {what}: {e:?}", self.rank),
            }
        }
    }

    /// Progresses until the completions of `ctxs` are all in; takes them
    /// out, in the order of `ctxs`.
    fn wait_for(&mut self, ctxs: &[u64], what: &str) -> Vec<(Cqe, u64)> {
        let t = Instant::now();
        let have = |cq: &[(Cqe, u64)]| ctxs.iter().filter(|c| cq.iter().any(|(e, _)| e.context == **c)).count();
        while have(&self.cq) < ctxs.len() {
            assert!(
                t.elapsed() < LIMIT,
                "rank {}: {what}: {} of {} completions after {LIMIT:?}",
                self.rank,
                have(&self.cq),
                ctxs.len()
            );
            self.step();
        }
        ctxs.iter()
            .map(|c| {
                let i = self.cq.iter().position(|(e, _)| e.context == *c).unwrap();
                self.cq.remove(i)
            })
            .collect()
    }

    /// Waits for `ctxs` and checks that each succeeded.
    fn wait_ok(&mut self, ctxs: &[u64], what: &str) -> Vec<Cqe> {
        let done = self.wait_for(ctxs, what);
        for (e, _) in &done {
            assert_eq!(e.status, Status::Success, "rank {}: {what}: operation {:#x}", self.rank, e.context);
        }
        done.into_iter().map(|(e, _)| e).collect()
    }

    /// Arrives at barrier `what` of `ranks` and progresses until all have.
    fn barrier(&mut self, what: &str, ranks: &[usize]) {
        std::fs::write(self.dir.join(format!("{what}.{}", self.rank)), b"").unwrap();
        let t = Instant::now();
        let mut check = Instant::now();
        loop {
            if check.elapsed() >= Duration::from_millis(1) {
                check = Instant::now();
                if ranks.iter().all(|r| self.dir.join(format!("{what}.{r}")).exists()) {
                    return;
                }
                assert!(t.elapsed() < LIMIT, "rank {}: barrier {what}: not everyone came", self.rank);
            }
            self.step();
        }
    }

    /// Posts receives of every size from each of `peers` (tagged with
    /// sender and size, directed) and sends of every size to each; returns
    /// the buffers and the contexts to wait for.
    fn post_messages(&mut self, peers: &[usize], sizes: &[usize]) -> Messages {
        let me = self.rank;
        let mut m = Messages { recvs: Vec::new(), _sends: Vec::new(), ctxs: Vec::new() };
        for &p in peers {
            for (k, &n) in sizes.iter().enumerate() {
                let mut b = OwnedBuf::zeroed(n);
                let tag = (p << 8 | k) as u64;
                let opts = RecvOpts { tag: Some((tag, 0)), src: Some(self.to(p)), context: RECV | tag };
                let buf = b.buf();
                self.post("recv", |ep| ep.recv(buf, opts));
                m.recvs.push((p, k, b));
                m.ctxs.push(RECV | tag);
            }
        }
        for &p in peers {
            for (k, &n) in sizes.iter().enumerate() {
                let mut b = filled(n, seed(me, p, k, Kind::Msg));
                let ctx = SEND | (p << 8 | k) as u64;
                let (dest, buf) = (self.to(p), b.buf());
                let opts = SendOpts { tag: Some((me << 8 | k) as u64), context: ctx, ..SendOpts::default() };
                self.post("send", |ep| ep.send(dest, buf, opts));
                m._sends.push(b);
                m.ctxs.push(ctx);
            }
        }
        m
    }

    /// Checks received messages: length and every byte.
    fn check_messages(&self, m: &Messages, done: &[Cqe], sizes: &[usize]) {
        for (p, k, b) in &m.recvs {
            let ctx = RECV | (*p << 8 | *k) as u64;
            let e = done.iter().find(|e| e.context == ctx).unwrap();
            let n = sizes[*k];
            assert_eq!(e.len, n as u64, "rank {}: {n} B from rank {p}: length", self.rank);
            assert_eq!(
                first_diff(b.bytes(), seed(*p, self.rank, *k, Kind::Msg)),
                None,
                "rank {}: {n} B from rank {p}",
                self.rank
            );
        }
    }

    /// Every ordered pair of this process and `peers`, both ways, every size.
    fn messages(&mut self, peers: &[usize], sizes: &[usize]) {
        let m = self.post_messages(peers, sizes);
        let done = self.wait_ok(&m.ctxs, "messages");
        self.check_messages(&m, &done, sizes);
    }

    /// Writes this process's slice into each peer's registered and
    /// allocated region, reads it back and reads the peer's own slice.
    fn rma(&mut self, peers: &[usize]) {
        let me = self.rank;
        let mut keep = Vec::new();
        let mut ctxs = Vec::new();
        for &p in peers {
            let (c, dest) = (self.cards[p], self.to(p));
            for (i, (len, at, key, kind)) in [
                (REG_SLICE, c.reg + (me * REG_SLICE) as u64, c.reg_key, Kind::Reg),
                (ALLOC_SLICE, c.alloc + (me * ALLOC_SLICE) as u64, c.alloc_key, Kind::Alloc),
            ]
            .into_iter()
            .enumerate()
            {
                let mut w = filled(len, seed(me, p, 0, kind));
                let (buf, ctx) = (w.buf(), WRITE | (p << 8 | i) as u64);
                self.post("write", |ep| ep.write(dest, buf, RemoteBuf { addr: at, key }, None, ctx));
                keep.push(w);
                ctxs.push(ctx);
            }
        }
        self.wait_ok(&ctxs, "writes");
        drop(keep);
        // (buffer, seed it must hold, context)
        let mut backs: Vec<(OwnedBuf, u64, u64)> = Vec::new();
        for &p in peers {
            let (c, dest) = (self.cards[p], self.to(p));
            let reads = [
                (REG_SLICE, c.reg + (me * REG_SLICE) as u64, c.reg_key, seed(me, p, 0, Kind::Reg)),
                (ALLOC_SLICE, c.alloc + (me * ALLOC_SLICE) as u64, c.alloc_key, seed(me, p, 0, Kind::Alloc)),
                (REG_SLICE, c.reg + (p * REG_SLICE) as u64, c.reg_key, seed(p, p, 0, Kind::Reg)),
                (ALLOC_SLICE, c.alloc + (p * ALLOC_SLICE) as u64, c.alloc_key, seed(p, p, 0, Kind::Alloc)),
            ];
            for (i, (len, at, key, s)) in reads.into_iter().enumerate() {
                let mut b = OwnedBuf::zeroed(len);
                let (buf, ctx) = (b.buf(), READ | (p << 8 | i) as u64);
                self.post("read", |ep| ep.read(dest, buf, RemoteBuf { addr: at, key }, ctx));
                backs.push((b, s, ctx));
            }
        }
        let ctxs: Vec<u64> = backs.iter().map(|b| b.2).collect();
        self.wait_ok(&ctxs, "reads");
        for (b, s, ctx) in &backs {
            assert_eq!(first_diff(b.bytes(), *s), None, "rank {me}: read {ctx:#x}");
        }
    }

    /// Checks the slices `writers` put into this process's regions.
    fn check_regions(&self, writers: &[usize]) {
        let me = self.rank;
        for &q in writers {
            let reg = &self.region.bytes()[q * REG_SLICE..(q + 1) * REG_SLICE];
            assert_eq!(first_diff(reg, seed(q, me, 0, Kind::Reg)), None, "rank {me}: rank {q}'s slice (registered)");
            let mut a = vec![0u8; ALLOC_SLICE];
            assert!(self.alloc.read_at(q * ALLOC_SLICE, &mut a));
            assert_eq!(first_diff(&a, seed(q, me, 0, Kind::Alloc)), None, "rank {me}: rank {q}'s slice (allocated)");
        }
    }

    /// `ROUNDS` fetch-adds of 1 on each of the counter owner's counters;
    /// the old values, (registered, allocated).
    fn atomics(&mut self) -> (Vec<u64>, Vec<u64>) {
        let (u64t, sum) = (atomic_ops::datatype::UINT64, atomic_ops::op::SUM);
        let (c, dest) = (self.cards[COUNTER_RANK], self.to(COUNTER_RANK));
        let targets = [
            RemoteBuf { addr: reg_counter(c.reg), key: c.reg_key },
            RemoteBuf { addr: alloc_counter(c.alloc), key: c.alloc_key },
        ];
        let mut olds = (Vec::new(), Vec::new());
        let mut one = OwnedBuf::from_slice(&1u64.to_le_bytes());
        for round in 0..ROUNDS {
            let mut res = [OwnedBuf::zeroed(8), OwnedBuf::zeroed(8)];
            let mut ctxs = Vec::new();
            for (i, (t, r)) in targets.iter().zip(&mut res).enumerate() {
                let (op, rb, ctx) = (one.buf(), r.buf(), ATOM | round << 1 | i as u64);
                self.post("atomic", |ep| ep.atomic(dest, u64t, sum, op, UserBuf::empty(), rb, *t, ctx));
                ctxs.push(ctx);
            }
            self.wait_ok(&ctxs, "atomics");
            let v = |b: &OwnedBuf| u64::from_le_bytes(b.bytes().try_into().unwrap());
            olds.0.push(v(&res[0]));
            olds.1.push(v(&res[1]));
        }
        olds
    }
}

/// Messages under way: receive buffers (sender, size index, buffer), send
/// buffers, and the contexts of both.
struct Messages {
    recvs: Vec<(usize, usize, OwnedBuf)>,
    _sends: Vec<OwnedBuf>,
    ctxs: Vec<u64>,
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// A process of the four-process scenario (module docs).
fn scenario(rank: usize, dir: &Path) {
    let mut p = Proc::open(rank, dir);
    let local = rank ^ 1;
    let remote: Vec<usize> = ALL.iter().copied().filter(|&r| host_of(r) != host_of(rank)).collect();
    p.connect(local);
    if rank == COUNTER_RANK {
        p.connect(rank);
    }
    // 1. Local: by shm only.
    let t = Instant::now();
    p.messages(&[local], &SIZES);
    p.rma(&[local]);
    let (tx_l, udp_l) = (p.ep.traffic().tx_total(), p.udp_sent());
    p.barrier("local", &ALL);
    let t_local = secs(t);
    p.check_regions(&[local]);
    assert!(tx_l > 0, "rank {rank}: the engine sent packets");
    assert_eq!(udp_l, 0, "rank {rank}: {tx_l} packets to its local peer, none by udp");
    // 2. Remote: by udp.
    let t = Instant::now();
    for &r in &remote {
        p.connect(r);
    }
    p.messages(&remote, &SIZES);
    p.rma(&remote);
    let (tx_r, udp_r) = (p.ep.traffic().tx_total() - tx_l, p.udp_sent() - udp_l);
    let stats = p.ep.device().udp_stats().unwrap();
    p.barrier("remote", &ALL);
    let t_remote = secs(t);
    p.check_regions(&remote);
    assert!(tx_r > 0 && udp_r >= tx_r, "rank {rank}: {tx_r} packets to remote peers, {udp_r} udp datagrams");
    if env("RDM4_CHILD_DROP").parse().unwrap_or(0.0) > 0.0 {
        assert!(
            stats.injected_drops > 0 && stats.retransmits > 0,
            "rank {rank}: loss injected and repaired: {stats:?}"
        );
    }
    // 3. Atomics on rank 0's counters, from all four at once.
    let t = Instant::now();
    if rank != COUNTER_RANK && p.addr[COUNTER_RANK].is_none() {
        p.connect(COUNTER_RANK);
    }
    let before = (p.ep.traffic().ops(Proto::AtomicDirect), p.ep.traffic().ops(Proto::Atomic));
    let olds = p.atomics();
    let direct = p.ep.traffic().ops(Proto::AtomicDirect) - before.0;
    let emulated = p.ep.traffic().ops(Proto::Atomic) - before.1;
    if host_of(rank) != host_of(COUNTER_RANK) {
        assert_eq!((direct, emulated), (0, 2 * ROUNDS), "rank {rank}: remote atomics are emulated (by udp)");
    } else if rank != COUNTER_RANK {
        assert_eq!(direct, ROUNDS, "rank {rank}: atomics on allocated memory of a local peer are the CPU's");
    }
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
    std::fs::write(dir.join(format!("olds.{rank}")), format!("{}\n{}\n", list(&olds.0), list(&olds.1))).unwrap();
    p.barrier("atomics", &ALL);
    let t_atomics = secs(t);
    if rank == COUNTER_RANK {
        let mut reg = BTreeSet::new();
        let mut alloc = BTreeSet::new();
        for r in ALL {
            let s = std::fs::read_to_string(dir.join(format!("olds.{r}"))).unwrap();
            let mut lines = s.lines();
            for (set, line) in [(&mut reg, lines.next()), (&mut alloc, lines.next())] {
                for v in line.unwrap().split_whitespace() {
                    assert!(set.insert(v.parse::<u64>().unwrap()), "old value {v} seen twice");
                }
            }
        }
        let total = RANKS as u64 * ROUNDS;
        let want: BTreeSet<u64> = (0..total).collect();
        assert!(reg == want && alloc == want, "every old value exactly once");
        let at = (reg_counter(p.region.buf().addr()) - p.region.buf().addr()) as usize;
        let counted = u64::from_le_bytes(p.region.bytes()[at..at + 8].try_into().unwrap());
        let mut c = [0u8; 8];
        assert!(p.alloc.read_at((alloc_counter(p.alloc.addr()) - p.alloc.addr()) as usize, &mut c));
        assert_eq!((counted, u64::from_le_bytes(c)), (total, total), "exact totals");
        println!(
            "auto_netns: rank 0: local {t_local}, remote {t_remote}, atomics {t_atomics}; \
             udp datagrams {udp_l} then {udp_r} (engine packets {tx_l} then {tx_r}); \
             udp retransmits {}, injected drops {}",
            stats.retransmits, stats.injected_drops
        );
    }
    p.barrier("end", &ALL);
}

#[test]
fn child_scenario() {
    if env("RDM4_CHILD_ROLE") == "scenario" {
        scenario(env("RDM4_CHILD_RANK").parse().unwrap(), &PathBuf::from(env("RDM4_CHILD_DIR")));
    }
}

/// A process of the killed-peer scenario (module docs). The victim
/// serves slowly (a progress call every 20 ms, no receive posted) so that
/// the operations towards it are under way when it dies.
fn kill_scenario(rank: usize, dir: &Path) {
    let mut p = Proc::open(rank, dir);
    let others: Vec<usize> = ALL.iter().copied().filter(|&r| r != rank).collect();
    for &r in &others {
        p.connect(r);
    }
    p.messages(&others, &[8]);
    p.barrier("warm", &ALL);
    if rank == VICTIM {
        let t = Instant::now();
        while t.elapsed() < LIMIT {
            p.ep.progress(0);
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the victim was never killed");
    }
    // Towards the victim: a 64 MiB send (never matched), reads of its
    // memory, small sends.
    let v = p.to(VICTIM);
    let mut big = filled(64 << 20, 7);
    let mut dead = Vec::new();
    let buf = big.buf();
    p.post("big send", |ep| ep.send(v, buf, SendOpts { context: DEAD | 1, ..SendOpts::default() }));
    dead.push(DEAD | 1);
    let c = p.cards[VICTIM];
    let mut backs: Vec<OwnedBuf> = (0..RANKS).map(|_| OwnedBuf::zeroed(REG_SLICE)).collect();
    for (i, b) in backs.iter_mut().enumerate() {
        let remote = RemoteBuf { addr: c.reg + (i * REG_SLICE) as u64, key: c.reg_key };
        let (buf, ctx) = (b.buf(), DEAD | (10 + i as u64));
        p.post("read", |ep| ep.read(v, buf, remote, ctx));
        dead.push(ctx);
    }
    let mut smalls: Vec<OwnedBuf> = (0..4).map(|i| OwnedBuf::from_slice(&[i as u8; 8])).collect();
    for (i, s) in smalls.iter_mut().enumerate() {
        let (buf, ctx) = (s.buf(), DEAD | (20 + i as u64));
        p.post("small send", |ep| ep.send(v, buf, SendOpts { context: ctx, ..SendOpts::default() }));
        dead.push(ctx);
    }
    std::fs::write(dir.join(format!("posted.{rank}")), b"").unwrap();
    let t = Instant::now();
    while !dir.join("killed").exists() {
        assert!(t.elapsed() < LIMIT, "rank {rank}: the victim was never killed");
        for _ in 0..100 {
            p.step();
        }
    }
    let killed: u64 = std::fs::read_to_string(dir.join("killed")).unwrap().parse().unwrap();
    // Meanwhile, with the living: messages both ways, local and remote.
    let live: Vec<usize> = others.iter().copied().filter(|&r| r != VICTIM).collect();
    let m = p.post_messages(&live, &LIVE_SIZES);
    let mut ctxs = m.ctxs.clone();
    ctxs.extend(&dead);
    let mut done = p.wait_for(&ctxs, "live messages and operations towards the dead");
    let towards_dead = done.split_off(m.ctxs.len());
    let live_done: Vec<Cqe> = done.into_iter().map(|(e, _)| e).collect();
    for e in &live_done {
        assert_eq!(e.status, Status::Success, "rank {rank}: live operation {:#x}", e.context);
    }
    p.check_messages(&m, &live_done, &LIVE_SIZES);
    // Those towards the victim: done before the kill, or ended by it in time.
    let after: Vec<&(Cqe, u64)> = towards_dead.iter().filter(|(_, at)| *at >= killed).collect();
    assert!(after.iter().any(|(e, _)| e.context == DEAD | 1), "rank {rank}: the 64 MiB send ended before the kill");
    // One served just before the kill may be polled after it: success
    // or PeerUnreachable then; the unmatched send can only fail.
    for (e, at) in &towards_dead {
        let ok = match e.status {
            Status::Success => e.context != DEAD | 1,
            Status::PeerUnreachable => *at >= killed,
            _ => false,
        };
        assert!(ok, "rank {rank}: operation {:#x} towards the victim: {:?}", e.context, e.status);
    }
    let took = Duration::from_nanos(after.iter().map(|(_, at)| at - killed).max().unwrap());
    let how = if host_of(rank) == host_of(VICTIM) { "local (shm)" } else { "remote (udp)" };
    println!(
        "auto_netns: rank {rank}: {} operations towards its {how} dead peer ended {took:?} after the kill",
        after.len()
    );
    assert!(took < KILL_BOUND, "rank {rank}: operations towards the dead peer ended {took:?} after the kill");
    // A new one towards it: refused, or ends so, in bounded time.
    let mut one = OwnedBuf::from_slice(&[9; 8]);
    match p.ep.send(v, one.buf(), SendOpts { context: DEAD | 99, ..SendOpts::default() }) {
        Err(Status::PeerUnreachable) => {}
        Err(e) => panic!("rank {rank}: a send to the dead peer: {e:?}"),
        Ok(()) => {
            let t = Instant::now();
            let (e, _) = p.wait_for(&[DEAD | 99], "a send to the dead peer").remove(0);
            assert_eq!(e.status, Status::PeerUnreachable, "rank {rank}: a send to the dead peer");
            assert!(t.elapsed() < KILL_BOUND, "rank {rank}: a send to the dead peer took {:?}", t.elapsed());
        }
    }
    // RMA with the living.
    p.rma(&live);
    let survivors = [0, 1, 2];
    p.barrier("done", &survivors);
    p.check_regions(&live);
    p.barrier("end", &survivors);
    drop((big, backs, smalls));
}

#[test]
fn child_kill_scenario() {
    if env("RDM4_CHILD_ROLE") == "kill" {
        kill_scenario(env("RDM4_CHILD_RANK").parse().unwrap(), &PathBuf::from(env("RDM4_CHILD_DIR")));
    }
}

// ---- The parent: hosts, processes. ----

/// Binds `$0` over /dev/shm, then runs the rest.
const PRIVATE_SHM: &str = r#"mount --bind "$0" /dev/shm && exec "$@""#;

/// Two namespaces joined by a veth pair, each with its own /dev/shm
/// directory (module docs); all removed on drop.
struct Hosts {
    ns: [String; 2],
    /// The namespaces themselves, removed when the hosts are dropped.
    _net: Netns,
    /// Each host's /dev/shm (a directory of the machine's), or `None`
    /// where bind mounts cannot be made (then: a prefix per host).
    shm: [Option<PathBuf>; 2],
}

impl Hosts {
    /// The segment prefix of host `h`'s processes: one for both hosts
    /// when each has its own /dev/shm.
    fn prefix(&self, h: usize) -> String {
        let pid = std::process::id();
        match self.shm[h] {
            Some(_) => format!("rdm4an{pid}"),
            None => format!("rdm4an{pid}h{h}"),
        }
    }
}

impl Hosts {
    fn make(tag: &str) -> Option<Hosts> {
        let id = std::process::id();
        let net = Netns::pair(&format!("x{tag}"), "10.78.0", 9000)?;
        let ns = net.ns.clone();
        let mut hosts = Hosts { ns: ns.clone(), _net: net, shm: [None, None] };
        for (h, name) in ns.iter().enumerate() {
            // Not named like a segment: stale-segment sweeps of other
            // processes leave it alone.
            let d = PathBuf::from(format!("/dev/shm/autons-{tag}-{id}-{h}"));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            let probe = Command::new("ip")
                .args(["netns", "exec", name, "unshare", "--mount", "sh", "-c", PRIVATE_SHM])
                .arg(&d)
                .args(["touch", "/dev/shm/probe"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if probe && d.join("probe").exists() {
                std::fs::remove_file(d.join("probe")).unwrap();
                hosts.shm[h] = Some(d);
            } else {
                let _ = std::fs::remove_dir_all(&d);
            }
        }
        if hosts.shm.iter().any(Option::is_none) {
            println!("auto_netns: /dev/shm cannot be bind-mounted per host here: a segment prefix per host instead");
            hosts.shm = [None, None];
        }
        Some(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for h in 0..2 {
            match &self.shm[h] {
                Some(d) => drop(std::fs::remove_dir_all(d)),
                // The machine's /dev/shm: a killed process's segment stays.
                None => drop(remove_stale_segments(&self.prefix(h))),
            }
        }
    }
}

/// The four processes of a scenario; those still running on drop are
/// killed (by their PID) and reaped.
struct Kids {
    kids: Vec<Option<Child>>,
    dir: PathBuf,
}

impl Kids {
    /// Starts ranks 0 to 3 with `role` in their hosts.
    fn spawn(hosts: &Hosts, dir: &Path, role: &str, test: &str, loss: f64) -> Kids {
        let kids = ALL
            .iter()
            .map(|&rank| {
                let h = host_of(rank);
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", &hosts.ns[h]]);
                if let Some(d) = &hosts.shm[h] {
                    // `unshare` and `sh` exec the test binary: the child's PID is its.
                    cmd.args(["unshare", "--mount", "sh", "-c", PRIVATE_SHM]).arg(d);
                }
                let out = std::fs::File::create(dir.join(format!("{rank}.out"))).unwrap();
                let err = std::fs::File::create(dir.join(format!("{rank}.err"))).unwrap();
                let child = cmd
                    .arg(std::env::current_exe().unwrap())
                    .args(["--exact", test, "--nocapture", "--test-threads=1"])
                    .env("RDM4_CHILD_ROLE", role)
                    .env("RDM4_CHILD_RANK", rank.to_string())
                    .env("RDM4_CHILD_DIR", dir)
                    .env("RDM4_CHILD_IP", IPS[h])
                    .env("RDM4_CHILD_DROP", loss.to_string())
                    .env("RDM4_CHILD_PREFIX", hosts.prefix(h))
                    .env("RDM4_CHILD_PRIVATE_SHM", if hosts.shm[h].is_some() { "1" } else { "0" })
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .spawn()
                    .expect("spawn a process");
                Some(child)
            })
            .collect();
        Kids { kids, dir: dir.to_path_buf() }
    }

    fn output(&self, rank: usize) -> String {
        let f = |s: &str| std::fs::read_to_string(self.dir.join(format!("{rank}.{s}"))).unwrap_or_default();
        format!("{}{}", f("out"), f("err"))
    }

    /// Kills `rank` with SIGKILL, by its PID.
    fn kill(&mut self, rank: usize) {
        if let Some(mut k) = self.kids[rank].take() {
            let _ = k.kill();
            let _ = k.wait();
        }
    }

    /// Waits for every process; the first that fails ends the others.
    /// The failures' outputs, and the lines the processes report.
    fn wait(&mut self, started: Instant) -> (Vec<String>, Vec<String>) {
        let mut failures = Vec::new();
        loop {
            let mut running = 0;
            for rank in ALL {
                let Some(k) = self.kids[rank].as_mut() else { continue };
                match k.try_wait().unwrap() {
                    None => running += 1,
                    Some(status) => {
                        self.kids[rank] = None;
                        if !status.success() {
                            failures.push(format!("rank {rank}: {status}\n{}", self.output(rank)));
                        }
                    }
                }
            }
            if running == 0 {
                break;
            }
            if !failures.is_empty() || started.elapsed() > RUN_LIMIT {
                if failures.is_empty() {
                    failures.push(format!("still running after {RUN_LIMIT:?}"));
                }
                for rank in ALL {
                    self.kill(rank);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let reports = ALL
            .iter()
            .flat_map(|&r| {
                let out = self.output(r);
                // The harness's "test ... " may precede it on the line.
                out.lines().filter_map(|l| l.find("auto_netns:").map(|i| l[i..].to_string())).collect::<Vec<_>>()
            })
            .collect();
        (failures, reports)
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        for rank in ALL {
            self.kill(rank);
        }
    }
}

/// The scratch directory of a scenario, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("rdm4autons{}{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn skip() {
    println!("skip: network namespaces cannot be made here (`ip netns add` failed; needs root and iproute2)");
}

fn four_processes(tag: &str, loss: f64) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(hosts) = Hosts::make(tag) else { return skip() };
    let scratch = Scratch::new(tag);
    let t = Instant::now();
    let mut kids = Kids::spawn(&hosts, &scratch.0, "scenario", "child_scenario", loss);
    let (failures, reports) = kids.wait(t);
    drop(kids);
    drop(hosts);
    assert!(failures.is_empty(), "loss {loss}:\n{}", failures.join("\n---\n"));
    for r in reports {
        println!("{r}");
    }
    println!("auto_netns: four processes, loss {loss}: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn four_processes_on_two_hosts_go_by_shm_locally_and_by_udp_across() {
    if env("RDM4_CHILD_ROLE").is_empty() {
        four_processes("p", 0.0);
    }
}

#[test]
fn four_processes_on_two_hosts_with_5_percent_loss_on_udp() {
    if env("RDM4_CHILD_ROLE").is_empty() {
        four_processes("l", 0.05);
    }
}

#[test]
fn losing_a_remote_or_a_local_peer_leaves_the_other_traffic_alone() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(hosts) = Hosts::make("k") else { return skip() };
    let scratch = Scratch::new("k");
    let dir = &scratch.0;
    let t = Instant::now();
    let mut kids = Kids::spawn(&hosts, dir, "kill", "child_kill_scenario", 0.0);
    let posted = |r: &usize| dir.join(format!("posted.{r}")).exists();
    while ![0, 1, 2].iter().all(posted) {
        let ended = ALL.iter().any(|&r| kids.kids[r].as_mut().is_some_and(|k| k.try_wait().unwrap().is_some()));
        if ended || t.elapsed() > LIMIT {
            break; // `wait` below reports it
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let at = monotonic_ns();
    kids.kill(VICTIM);
    std::fs::write(dir.join("killed.tmp"), at.to_string()).unwrap();
    std::fs::rename(dir.join("killed.tmp"), dir.join("killed")).unwrap();
    let (failures, reports) = kids.wait(t);
    drop(kids);
    drop(hosts);
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
    for r in reports {
        println!("{r}");
    }
    println!("auto_netns: killed peer: {:.1} s", t.elapsed().as_secs_f64());
}
