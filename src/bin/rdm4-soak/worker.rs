//! One process of the soak: its endpoint and regions, its rounds, the
//! checks of everything it receives, reads and has written into it, and
//! its report.
//!
//! A round: a barrier that exchanges addresses (peers that reopened are
//! removed and inserted again); receives posted for what the peers send
//! this process; then, in random order, its sends, writes, reads,
//! fetch-adds on rank 0's counter, compute phases, a probe that must find
//! nothing and the cancel of a receive nothing matches; then polls, probes
//! and sleeps on the endpoint until every completion, claimed or
//! discarded message and remote write came; a barrier; the check of what
//! the peers wrote into its memory, and of the counter on rank 0; maybe a
//! reopen. Unexpected statuses and hangs end the process (the coordinator
//! then stops the others); wrong bytes are counted and reported.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::os::fd::AsRawFd;

use rdm4::status::codes::{RDM4_EAGAIN, RDM4_ECANCELED, RDM4_ENOTSUP, RDM4_ETIMEDOUT};

use super::plan::*;
use super::*;

/// An operation posted in this round; its index + 1 is its context.
enum Op {
    /// Completed.
    Done,
    /// A send or write, counted as `Kind` when it succeeds.
    Sent(Kind),
    /// A receive into `cap` bytes of the arena at `buf`.
    Recv { buf: usize, cap: usize, want: Want },
    /// The receive that must complete canceled.
    Cancel,
    /// A read into the read arena at `buf` of the table's bytes at `off`.
    Read { kind: Kind, buf: usize, off: usize, len: usize },
    /// A fetch-add (result in `results[i]`, at least `floor`) or an add.
    Atomic { fetch: Option<(usize, u64)> },
}

/// What a receive takes.
#[derive(Clone, Copy)]
enum Want {
    /// Message `seq` of sender `s`.
    Msg(usize, usize),
    /// A message of class `Any` of any sender.
    AnyTagged,
    /// An untagged message of any sender.
    AnyUntagged,
}

/// A message this process expects in the round.
struct Inbound {
    m: Msg,
    /// Its buffer in the arena.
    buf: usize,
    /// Claimed or discarded by a probe.
    taken: bool,
    got: bool,
}

/// A peer: its address and regions as last exchanged, and its handle.
#[derive(Clone)]
struct Peer {
    info: [u8; INFO],
    handle: Option<rdm4_addr>,
    reg: u64,
    reg_key: u64,
    alloc: u64,
    alloc_key: u64,
}

/// Bytes of a process's exchanged information: its name, the open count
/// of its endpoint, its regions and their keys.
const INFO: usize = RDM4_ADDR_LEN + 5 * 8;

/// Atomics a process posts in a round at most.
const ATOMICS: usize = 8;

/// How a round waits when a poll found nothing.
#[derive(Clone, Copy, PartialEq)]
enum Sleep {
    Spin,
    Wait,
    Fd,
}

struct Worker<'a> {
    o: &'a Opts,
    rank: usize,
    n: usize,
    seed: u64,
    table: Table,
    coord: TcpStream,
    ep: *mut rdm4_ep,
    opens: u64,
    /// Registered with every endpoint; lives as long as the process (the
    /// counter survives reopens).
    region: *mut u8,
    reg_key: u64,
    /// Of `rdm4_mr_alloc`, the endpoint's.
    alloc: *mut u8,
    alloc_key: u64,
    peers: Vec<Peer>,
    ranks: HashMap<rdm4_addr, usize>,
    /// Receive buffers of a round, and read buffers (touched once at the start).
    arena: Vec<u8>,
    reads: Vec<u8>,
    operands: Vec<u64>,
    results: Vec<u64>,
    round: u64,
    deadline: Instant,
    sleep: Sleep,
    ops: Vec<Op>,
    pending: usize,
    inbox: Vec<Vec<Inbound>>,
    /// Messages still to claim or discard.
    probes_left: usize,
    /// Remote CQ data of the writes still to come: (writer, data).
    remote: Vec<(usize, u64)>,
    umode: Untagged,
    /// The messages this process sends each peer this round.
    outbox: Vec<Vec<Msg>>,
    rng: Rng,
    cq: Vec<rdm4_cqe>,
    counts: [u64; KINDS.len()],
    bytes: u64,
    errors: u64,
    retransmits: u64,
    /// Sum of the values this process added to the counter (posted, completed).
    posted_sum: u64,
    added: u64,
    /// Resident memory at the start, middle and end; the peak at the middle.
    rss: [u64; 3],
    hwm_mid: u64,
}

fn strerror(rc: i32) -> String {
    // SAFETY: rdm4_strerror returns a static NUL-terminated string.
    format!("{} ({rc})", unsafe { CStr::from_ptr(rdm4_strerror(rc)) }.to_string_lossy())
}

/// `VmRSS` and `VmHWM` of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get =
        |k: &str| status.lines().find_map(|l| l.strip_prefix(k)?.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    (get("VmRSS:"), get("VmHWM:"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

pub fn run(o: &Opts, rank: usize, coordinator: &str) -> ! {
    let mut coord = connect(coordinator, Duration::from_secs(o.timeout));
    let _ = coord.set_read_timeout(Some(Duration::from_secs(o.timeout)));
    let mut hello = (rank as u32).to_le_bytes().to_vec();
    hello.extend((o.procs as u32).to_le_bytes());
    let seed = match send_frame(&mut coord, HELLO, &hello).and_then(|_| read_frame(&mut coord)) {
        Ok((GO, p)) if p.len() == 8 => u64_at(&p, 0),
        _ => fail(&format!("rank {rank}: no answer to its hello from the coordinator")),
    };
    let n = o.procs;
    let region = Box::leak(vec![0u64; region_len(n).div_ceil(8)].into_boxed_slice()).as_mut_ptr().cast::<u8>();
    let mut w = Worker {
        o,
        rank,
        n,
        seed,
        table: Table::new(seed),
        coord,
        ep: std::ptr::null_mut(),
        opens: 0,
        region,
        reg_key: 0,
        alloc: std::ptr::null_mut(),
        alloc_key: 0,
        peers: Vec::new(),
        ranks: HashMap::new(),
        arena: vec![1; (n - 1) * PAIR_BUDGET],
        reads: vec![1; (n - 1) * 2 * READ_MAX],
        operands: vec![rank as u64 + 1; ATOMICS],
        results: vec![0; ATOMICS],
        round: 0,
        deadline: Instant::now(),
        sleep: Sleep::Spin,
        ops: Vec::new(),
        pending: 0,
        inbox: Vec::new(),
        probes_left: 0,
        remote: Vec::new(),
        umode: Untagged::Directed,
        outbox: Vec::new(),
        rng: Rng(mix(&[seed, rank as u64, 5])),
        // SAFETY: a completion entry is plain data; all zeroes is valid.
        cq: vec![unsafe { std::mem::zeroed() }; 16],
        counts: [0; KINDS.len()],
        bytes: 0,
        errors: 0,
        retransmits: 0,
        posted_sum: 0,
        added: 0,
        rss: [0; 3],
        hwm_mid: 0,
    };
    // SAFETY: the region is ours for the life of the process; the read
    // area holds its window of the table, the rest is touched once.
    unsafe {
        std::ptr::write_bytes(region, 0, region_len(n));
        std::ptr::copy_nonoverlapping(
            w.table.bytes(read_area(seed, rank), READ_LEN).as_ptr(),
            region.add(READ_AT),
            READ_LEN,
        );
    }
    w.open();
    let start = Instant::now();
    loop {
        if !w.exchange() {
            break;
        }
        if w.round == 0 {
            w.rss[0] = memory().0;
        }
        w.run_round();
        w.end_round();
        if w.rss[1] == 0 && start.elapsed() >= Duration::from_secs(o.seconds) / 2 {
            (w.rss[1], w.hwm_mid) = memory();
        }
        w.round += 1;
        let r = o.reopen_every;
        if r > 0 && w.round % r == 0 && (w.round / r - 1) as usize % n == rank {
            w.close();
            w.open();
            w.count(Kind::Reopen);
        }
    }
    w.rss[2] = memory().0;
    w.retransmits += w.retransmits();
    let report = w.report();
    w.barrier(REPORT, report.as_bytes());
    w.close();
    let _ = send_frame(&mut w.coord, CLOSED, &[]);
    std::process::exit(i32::from(w.errors > 0));
}

impl Worker<'_> {
    fn count(&mut self, k: Kind) {
        self.counts[k as usize] += 1;
    }

    fn error(&mut self, msg: &str) {
        self.errors += 1;
        if self.errors <= 20 {
            eprintln!("rdm4-soak: rank {} round {}: {msg}", self.rank, self.round);
        }
    }

    fn fatal(&self, msg: &str) -> ! {
        eprintln!("rdm4-soak: rank {} round {}: {msg}", self.rank, self.round);
        std::process::exit(1);
    }

    /// Checks a call's status.
    fn ok(&self, what: &str, rc: i32) -> i32 {
        if rc < 0 {
            self.fatal(&format!("{what} failed: {}", strerror(rc)));
        }
        rc
    }

    /// Opens an endpoint with a random progress and threading mode,
    /// registers the region and allocates the other; every peer is to be
    /// inserted again.
    fn open(&mut self) {
        let mut attr = std::mem::MaybeUninit::<rdm4_ep_attr>::uninit();
        self.ok("rdm4_ep_attr_init", rdm4_ep_attr_init(attr.as_mut_ptr()));
        // SAFETY: initialised by rdm4_ep_attr_init.
        let mut attr = unsafe { attr.assume_init() };
        (attr.progress, attr.threading) = match self.rng.below(3) {
            0 => (RDM4_PROGRESS_MANUAL, RDM4_THREAD_SINGLE),
            1 => (RDM4_PROGRESS_MANUAL, RDM4_THREAD_SAFE),
            _ => (RDM4_PROGRESS_AUTO, RDM4_THREAD_SAFE),
        };
        let rc = rdm4_ep_open(&attr, &mut self.ep);
        self.ok("rdm4_ep_open", rc);
        self.opens += 1;
        let access = RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE;
        let len = region_len(self.n);
        let rc = rdm4_mr_reg(self.ep, self.region.cast(), len, access, &mut self.reg_key);
        self.ok("rdm4_mr_reg", rc);
        let mut p = std::ptr::null_mut();
        let rc = rdm4_mr_alloc(self.ep, len, access, &mut p, &mut self.alloc_key);
        self.ok("rdm4_mr_alloc", rc);
        self.alloc = p.cast();
        // SAFETY: `len` bytes of the endpoint's until it closes.
        unsafe {
            std::ptr::write_bytes(self.alloc, 0, len);
            let area = self.table.bytes(read_area(self.seed, self.rank), READ_LEN);
            std::ptr::copy_nonoverlapping(area.as_ptr(), self.alloc.add(READ_AT), READ_LEN);
        }
        let none = Peer { info: [0; INFO], handle: None, reg: 0, reg_key: 0, alloc: 0, alloc_key: 0 };
        self.peers = vec![none; self.n];
        self.ranks.clear();
    }

    fn close(&mut self) {
        self.retransmits += self.retransmits();
        self.ok("rdm4_mr_close", rdm4_mr_close(self.ep, self.reg_key));
        self.ok("rdm4_ep_close", rdm4_ep_close(self.ep));
    }

    /// The endpoint's `udp_retransmits` counter.
    fn retransmits(&self) -> u64 {
        let (mut names, mut values) = ([std::ptr::null(); 16], [0u64; 16]);
        let mut first = 0;
        loop {
            let got = rdm4_counters(self.ep, first, names.as_mut_ptr(), values.as_mut_ptr(), 16);
            if got <= 0 {
                return 0;
            }
            for i in 0..got as usize {
                // SAFETY: the library's static counter names.
                if unsafe { CStr::from_ptr(names[i]) } == c"udp_retransmits" {
                    return values[i];
                }
            }
            first += got as usize;
        }
    }

    /// A barrier at the coordinator with `payload`; the endpoint is
    /// polled and slept on meanwhile. The frames of all processes, and
    /// whether to go on.
    fn barrier(&mut self, kind: u8, payload: &[u8]) -> (bool, Vec<Vec<u8>>) {
        if send_frame(&mut self.coord, kind, payload).is_err() {
            self.fatal("the coordinator is gone");
        }
        let deadline = Instant::now() + Duration::from_secs(self.o.timeout);
        loop {
            // Only a peer's write of the next round may complete here.
            let rc = rdm4_poll(self.ep, self.cq.as_mut_ptr(), self.cq.len());
            for i in 0..self.ok("rdm4_poll", rc) as usize {
                match self.cq[i] {
                    e if e.context.is_null() => self.remote_write(&e),
                    _ => self.error("a completion while nothing was posted"),
                }
            }
            let ep_fd = if rdm4_trywait(self.ep) == 0 { rdm4_ep_fd(self.ep) } else { -1 };
            let mut fds = [
                libc::pollfd { fd: self.coord.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: ep_fd, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: two valid pollfd entries (a negative fd is ignored).
            unsafe { libc::poll(fds.as_mut_ptr(), 2, if ep_fd >= 0 { 20 } else { 1 }) };
            if fds[0].revents != 0 {
                break;
            }
            if Instant::now() > deadline {
                self.fatal(&format!("no barrier in {} s", self.o.timeout));
            }
        }
        match read_frame(&mut self.coord) {
            Ok((flag @ (GO | STOP), p)) => {
                let mut frames = Vec::new();
                let mut at = 0;
                while at + 4 <= p.len() {
                    let len = u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes")) as usize;
                    frames.push(p[at + 4..at + 4 + len].to_vec());
                    at += 4 + len;
                }
                if kind == BARRIER {
                    self.count(Kind::Barrier);
                }
                (flag == GO, frames)
            }
            Ok(_) => self.fatal("stopped by the coordinator"),
            Err(e) => self.fatal(&format!("the coordinator is gone ({e})")),
        }
    }

    /// The round's first barrier: exchanges names and regions; a peer
    /// whose endpoint is new is removed and inserted again. False when
    /// the time is up.
    fn exchange(&mut self) -> bool {
        let mut name = [0u8; RDM4_ADDR_LEN];
        let mut len = name.len();
        self.ok("rdm4_ep_getname", rdm4_ep_getname(self.ep, name.as_mut_ptr().cast(), &mut len));
        let mut info = name.to_vec();
        for v in [self.opens, self.region as u64, self.reg_key, self.alloc as u64, self.alloc_key] {
            info.extend(v.to_le_bytes());
        }
        // The remote writes of the round may come as soon as a peer has
        // this process's address.
        let (me, k) = (self.rank, self.round);
        self.remote = (0..self.n)
            .filter(|&s| s != me)
            .flat_map(|s| writes(self.seed, k, s, me).into_iter().filter_map(move |w| Some((s, w.data?))))
            .collect();
        let (go, frames) = self.barrier(BARRIER, &info);
        if !go {
            return false;
        }
        let mut changed = false;
        for (rank, f) in frames.iter().enumerate() {
            if f.len() != INFO {
                self.fatal("a bad address frame");
            }
            if f[..] == self.peers[rank].info[..] {
                continue;
            }
            if let Some(old) = self.peers[rank].handle.take() {
                self.ok("rdm4_av_remove", rdm4_av_remove(self.ep, &old, 1));
                self.ranks.remove(&old);
            }
            changed = true;
            let mut handle = 0;
            self.ok("rdm4_av_insert", rdm4_av_insert(self.ep, f.as_ptr().cast(), 1, &mut handle));
            self.ranks.insert(handle, rank);
            let at = |i: usize| u64_at(f, RDM4_ADDR_LEN + 8 * i);
            self.peers[rank] = Peer {
                info: f[..].try_into().expect("INFO bytes"),
                handle: Some(handle),
                reg: at(1),
                reg_key: at(2),
                alloc: at(3),
                alloc_key: at(4),
            };
        }
        // Every process saw the same change: all take this barrier, and
        // start only once everyone has the new addresses.
        if changed {
            self.barrier(BARRIER, &[]);
        }
        true
    }

    fn handle(&self, rank: usize) -> rdm4_addr {
        self.peers[rank].handle.expect("inserted")
    }

    /// Busy for 0 to `--compute-ms` milliseconds, no library call.
    fn compute(&mut self) {
        let t = Instant::now();
        let d = Duration::from_micros(self.rng.below(self.o.compute_ms as usize * 1000 + 1) as u64);
        let mut x = 1u64;
        while t.elapsed() < d {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        self.count(Kind::Compute);
    }

    fn check_deadline(&self, what: &str) {
        if Instant::now() > self.deadline {
            let left = self.ops.iter().filter(|o| !matches!(o, Op::Done)).count();
            self.fatal(&format!(
                "hang: {what}: after {} s, {left} operations, {} probes and {} remote writes outstanding",
                self.o.timeout,
                self.probes_left,
                self.remote.len()
            ));
        }
    }

    /// Calls `f` until it does not say "try again" (progress between).
    fn call(&mut self, what: &str, mut f: impl FnMut(*mut rdm4_ep) -> i32) -> i32 {
        loop {
            let rc = f(self.ep);
            if rc != RDM4_EAGAIN {
                return rc;
            }
            self.poll();
            self.check_deadline(what);
        }
    }

    /// Posts an operation with a completion to come.
    fn post(&mut self, op: Op, what: &str, mut f: impl FnMut(*mut rdm4_ep, *mut c_void) -> i32) {
        self.ops.push(op);
        let ctx = self.ops.len() as *mut c_void;
        let rc = self.call(what, |ep| f(ep, ctx));
        self.ok(what, rc);
        self.pending += 1;
    }

    /// One poll; handles what came.
    fn poll(&mut self) -> usize {
        let rc = rdm4_poll(self.ep, self.cq.as_mut_ptr(), self.cq.len());
        let got = self.ok("rdm4_poll", rc) as usize;
        for i in 0..got {
            let e = self.cq[i];
            self.complete(&e);
        }
        got
    }

    fn run_round(&mut self) {
        let (me, n, k, seed) = (self.rank, self.n, self.round, self.seed);
        self.deadline = Instant::now() + Duration::from_secs(self.o.timeout);
        self.sleep = [Sleep::Spin, Sleep::Wait, Sleep::Fd][self.rng.below(3)];
        self.ops.clear();
        self.pending = 0;
        // What comes in, and where each message goes in the arena.
        self.umode = untagged_mode(seed, k, me);
        let mut at = 0;
        self.inbox = (0..n)
            .map(|s| {
                let msgs = if s == me { Vec::new() } else { msgs(seed, k, s, me, self.umode) };
                at = (s - usize::from(s > me)) * PAIR_BUDGET;
                msgs.into_iter()
                    .map(|m| {
                        let buf = at;
                        at += need(m.class, m.len, self.umode);
                        Inbound { m, buf, taken: false, got: false }
                    })
                    .collect()
            })
            .collect();
        let probed = |m: &Msg, mode| {
            matches!(m.class, Class::Claim | Class::Discard) || m.class == Class::Untagged && mode == Untagged::Claim
        };
        self.probes_left = self.inbox.iter().flatten().filter(|i| probed(&i.m, self.umode)).count();
        self.outbox = (0..n)
            .map(|t| if t == me { Vec::new() } else { msgs(seed, k, me, t, untagged_mode(seed, k, t)) })
            .collect();
        if self.rng.chance(30) {
            self.compute();
        }
        for s in 0..n {
            for seq in 0..self.inbox[s].len() {
                self.post_recv(s, seq);
            }
        }
        let arena = self.arena.as_mut_ptr().cast::<c_void>();
        let never = class_tag(Class::Never);
        self.post(Op::Cancel, "rdm4_trecv", |ep, ctx| rdm4_trecv(ep, arena, 0, RDM4_ADDR_UNSPEC, never, 0, ctx));
        let cancel = self.ops.len();

        // The actions, shuffled; each peer's sends stay in their order.
        #[derive(Clone, Copy)]
        enum Action {
            Send(usize, usize),
            Write(usize, PlannedWrite),
            Read(usize, bool),
            Atomic,
            Compute,
            Cancel,
            ProbeNever,
        }
        let mut actions = vec![Action::Cancel, Action::ProbeNever];
        for t in (0..n).filter(|&t| t != me) {
            actions.extend((0..self.outbox[t].len()).map(|seq| Action::Send(t, seq)));
            actions.extend(writes(seed, k, me, t).into_iter().map(|w| Action::Write(t, w)));
            actions.extend([false, true].into_iter().filter(|_| self.rng.chance(60)).map(|a| Action::Read(t, a)));
        }
        actions.extend((0..1 + self.rng.below(ATOMICS)).map(|_| Action::Atomic));
        actions.extend((0..self.rng.below(3)).map(|_| Action::Compute));
        for i in (1..actions.len()).rev() {
            actions.swap(i, self.rng.below(i + 1));
        }
        let mut next = vec![0; n];
        for a in &mut actions {
            if let Action::Send(t, seq) = a {
                *seq = next[*t];
                next[*t] += 1;
            }
        }
        let mut atomics = 0;
        for a in actions {
            match a {
                Action::Send(t, seq) => self.send(t, seq),
                Action::Write(t, w) => self.write(t, w),
                Action::Read(t, alloc) => self.read(t, alloc),
                Action::Atomic => {
                    self.atomic(atomics);
                    atomics += 1;
                }
                Action::Compute => self.compute(),
                Action::Cancel => {
                    let rc = rdm4_cancel(self.ep, cancel as *mut c_void);
                    self.ok("rdm4_cancel", rc);
                }
                Action::ProbeNever => {
                    // SAFETY: plain data.
                    let mut e: rdm4_cqe = unsafe { std::mem::zeroed() };
                    let flags = RDM4_MSG_TAGGED;
                    let rc = rdm4_probe(self.ep, RDM4_ADDR_UNSPEC, never, 0, flags, std::ptr::null_mut(), &mut e);
                    match self.ok("rdm4_probe", rc) {
                        0 => self.count(Kind::Probe),
                        _ => self.error("rdm4_probe found a message nobody sent"),
                    }
                }
            }
            self.poll();
        }
        while self.pending > 0 || self.probes_left > 0 || !self.remote.is_empty() {
            let mut busy = self.poll() > 0;
            if self.probes_left > 0 {
                busy |= self.probe();
            }
            if !busy {
                self.idle();
            }
            self.check_deadline("the round's completions");
        }
    }

    /// When a poll found nothing: spin, `rdm4_wait`, or sleep on the
    /// endpoint's descriptor when `rdm4_trywait` allows.
    fn idle(&mut self) {
        match self.sleep {
            Sleep::Spin => {}
            Sleep::Wait => {
                let rc = rdm4_wait(self.ep, 5);
                if rc != RDM4_ETIMEDOUT {
                    self.ok("rdm4_wait", rc);
                }
                self.count(Kind::Wait);
            }
            Sleep::Fd => match rdm4_trywait(self.ep) {
                0 => {
                    let fd = self.ok("rdm4_ep_fd", rdm4_ep_fd(self.ep));
                    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 5) };
                    self.count(Kind::Wait);
                }
                RDM4_ENOTSUP => self.sleep = Sleep::Wait,
                rc if rc != RDM4_EAGAIN => {
                    self.ok("rdm4_trywait", rc);
                }
                _ => {}
            },
        }
    }

    /// Posts the receive of message `seq` of `s`, unless a probe takes it.
    fn post_recv(&mut self, s: usize, seq: usize) {
        let Inbound { m, buf, .. } = self.inbox[s][seq];
        let (src, tag, ignore, cap, want) = match (m.class, self.umode) {
            (Class::Exact, _) => (Some(s), m.tag, 0, m.len, Want::Msg(s, seq)),
            (Class::Ordered, _) => (Some(s), m.tag & !IGNORE_SEQ, IGNORE_SEQ, m.len, Want::Msg(s, seq)),
            (Class::Any, _) => (None, class_tag(Class::Any), IGNORE_BUT_CLASS, ANY_BUF, Want::AnyTagged),
            (Class::Untagged, Untagged::Directed) => (Some(s), 0, 0, m.len, Want::Msg(s, seq)),
            (Class::Untagged, Untagged::Any) => (None, 0, 0, ANY_BUF, Want::AnyUntagged),
            _ => return,
        };
        let src = src.map_or(RDM4_ADDR_UNSPEC, |s| self.handle(s));
        let tagged = m.class != Class::Untagged;
        let p = self.arena[buf..].as_mut_ptr();
        let half = cap / 2;
        let iov = [
            libc::iovec { iov_base: p.cast(), iov_len: half },
            // SAFETY: within the arena (`cap` bytes from `buf`).
            libc::iovec { iov_base: unsafe { p.add(half) }.cast(), iov_len: cap - half },
        ];
        let split = self.rng.chance(25);
        self.post(Op::Recv { buf, cap, want }, "a receive", |ep, ctx| match (split, tagged) {
            (true, _) => {
                let msg = rdm4_msg { iov: iov.as_ptr(), iov_count: 2, addr: src, tag, ignore, data: 0, context: ctx };
                rdm4_recvmsg(ep, &msg, if tagged { RDM4_MSG_TAGGED } else { 0 })
            }
            (false, true) => rdm4_trecv(ep, p.cast(), cap, src, tag, ignore, ctx),
            (false, false) => rdm4_recv(ep, p.cast(), cap, src, ctx),
        });
    }

    /// Sends message `seq` of this round to `t`.
    fn send(&mut self, t: usize, seq: usize) {
        let m = self.outbox[t][seq];
        let dest = self.handle(t);
        let p = self.table.bytes(m.off, m.len).as_ptr();
        let tagged = m.class != Class::Untagged;
        let (kind, flags, split) = match m.how {
            How::Plain => (if tagged { Kind::TSend } else { Kind::Send }, None, false),
            How::Inject => {
                let rc = self.call("an inject", |ep| {
                    if tagged {
                        rdm4_tinject(ep, p.cast(), m.len, dest, m.tag)
                    } else {
                        rdm4_inject(ep, p.cast(), m.len, dest)
                    }
                });
                self.ok("an inject", rc);
                return self.count(Kind::Inject);
            }
            How::Data if !tagged => (Kind::SendData, None, false),
            How::Data => (Kind::SendMsg, Some(0), false),
            How::Msg { more, split } => (Kind::SendMsg, Some(if more { RDM4_MSG_MORE } else { 0 }), split),
            How::Dc { split } => (Kind::Dc, Some(RDM4_MSG_DELIVERY_COMPLETE), split),
        };
        let half = if split { m.len / 2 } else { m.len };
        let iov = [
            libc::iovec { iov_base: p.cast_mut().cast(), iov_len: half },
            // SAFETY: within the table (`m.len` bytes from `p`).
            libc::iovec { iov_base: unsafe { p.add(half) }.cast_mut().cast(), iov_len: m.len - half },
        ];
        self.post(Op::Sent(kind), "a send", |ep, ctx| match flags {
            None if tagged => rdm4_tsend(ep, p.cast(), m.len, dest, m.tag, ctx),
            None => match m.data {
                Some(d) => rdm4_senddata(ep, p.cast(), m.len, d, dest, ctx),
                None => rdm4_send(ep, p.cast(), m.len, dest, ctx),
            },
            Some(f) => {
                let data = m.data.unwrap_or(0);
                let msg = rdm4_msg {
                    iov: iov.as_ptr(),
                    iov_count: 1 + usize::from(split),
                    addr: dest,
                    tag: m.tag,
                    ignore: 0,
                    data,
                    context: ctx,
                };
                let f = f
                    | if tagged { RDM4_MSG_TAGGED } else { 0 }
                    | if m.data.is_some() { RDM4_MSG_REMOTE_CQ_DATA } else { 0 };
                rdm4_sendmsg(ep, &msg, f)
            }
        });
    }

    fn write(&mut self, t: usize, w: PlannedWrite) {
        let peer = &self.peers[t];
        let (base, key) = if w.alloc { (peer.alloc, peer.alloc_key) } else { (peer.reg, peer.reg_key) };
        let (dest, raddr) = (self.handle(t), base + w.at as u64);
        let p = self.table.bytes(w.off, w.len).as_ptr().cast::<c_void>();
        let kind = match (w.alloc, w.data) {
            (true, _) => Kind::WriteAlloc,
            (false, Some(_)) => Kind::WriteData,
            (false, None) => Kind::Write,
        };
        if w.now {
            match rdm4_write_now(self.ep, p, w.len, dest, raddr, key) {
                0 => return self.count(kind),
                RDM4_ENOTSUP | RDM4_EAGAIN => {}
                rc => self.fatal(&format!("rdm4_write_now failed: {}", strerror(rc))),
            }
        }
        self.post(Op::Sent(kind), "a write", |ep, ctx| match w.data {
            Some(d) => rdm4_writedata(ep, p, w.len, d, dest, raddr, key, ctx),
            None => rdm4_write(ep, p, w.len, dest, raddr, key, ctx),
        });
    }

    /// Reads a random part of `t`'s read area.
    fn read(&mut self, t: usize, alloc: bool) {
        let peer = &self.peers[t];
        let (base, key) = if alloc { (peer.alloc, peer.alloc_key) } else { (peer.reg, peer.reg_key) };
        let len = size(&mut self.rng, READ_MAX);
        let at = self.rng.below(READ_LEN - len + 1);
        let (dest, raddr) = (self.handle(t), base + (READ_AT + at) as u64);
        let buf = (t - usize::from(t > self.rank)) * 2 * READ_MAX + usize::from(alloc) * READ_MAX;
        let p = self.reads[buf..].as_mut_ptr().cast::<c_void>();
        let kind = if alloc { Kind::ReadAlloc } else { Kind::Read };
        let op = Op::Read { kind, buf, off: read_area(self.seed, t) + at, len };
        if self.rng.chance(25) {
            match rdm4_read_now(self.ep, p, len, dest, raddr, key) {
                0 => return self.check_read(op),
                RDM4_ENOTSUP | RDM4_EAGAIN => {}
                rc => self.fatal(&format!("rdm4_read_now failed: {}", strerror(rc))),
            }
        }
        self.post(op, "a read", |ep, ctx| rdm4_read(ep, p, len, dest, raddr, key, ctx));
    }

    fn check_read(&mut self, op: Op) {
        let Op::Read { kind, buf, off, len } = op else { return };
        if self.reads[buf..buf + len] != *self.table.bytes(off, len) {
            self.error(&format!("a read of {len} bytes brought wrong bytes"));
        }
        self.bytes += len as u64;
        self.count(kind);
    }

    /// Adds this rank + 1 to rank 0's counter, fetching the old value or not.
    fn atomic(&mut self, i: usize) {
        let peer = &self.peers[0];
        let (dest, raddr, key) = (self.handle(0), peer.reg, peer.reg_key);
        let operand = &self.operands[i] as *const u64 as *const c_void;
        let result = &mut self.results[i] as *mut u64 as *mut c_void;
        let fetch = self.rng.chance(70).then_some((i, self.posted_sum));
        self.posted_sum += self.rank as u64 + 1;
        self.post(Op::Atomic { fetch }, "an atomic", |ep, ctx| match fetch {
            Some(_) => rdm4_fetch_atomic(ep, operand, 1, result, RDM4_UINT64, RDM4_SUM, dest, raddr, key, ctx),
            None => rdm4_atomic(ep, operand, 1, RDM4_UINT64, RDM4_SUM, dest, raddr, key, ctx),
        });
    }

    /// Probes for the messages that probes take: claims them (and
    /// receives them) or discards them. True when one was found.
    fn probe(&mut self) -> bool {
        // SAFETY: plain data.
        let mut e: rdm4_cqe = unsafe { std::mem::zeroed() };
        let ctx = (self.ops.len() + 1) as *mut c_void;
        let (any, all, null) = (RDM4_ADDR_UNSPEC, IGNORE_BUT_CLASS, std::ptr::null_mut());
        let (tagged, claim, discard) = (RDM4_MSG_TAGGED, RDM4_PROBE_CLAIM, RDM4_PROBE_DISCARD);
        let class = if self.found(rdm4_probe(self.ep, any, class_tag(Class::Claim), all, tagged | claim, ctx, &mut e)) {
            Class::Claim
        } else if self.found(rdm4_probe(self.ep, any, class_tag(Class::Discard), all, tagged | discard, null, &mut e)) {
            Class::Discard
        } else if self.umode == Untagged::Claim && self.found(rdm4_probe(self.ep, any, 0, 0, claim, ctx, &mut e)) {
            Class::Untagged
        } else {
            return false;
        };
        let Some(&s) = self.ranks.get(&e.src) else {
            self.fatal(&format!("a probe found a message of an unknown source {}", e.src));
        };
        // A tagged message names itself; an untagged one is its sender's oldest.
        let seq = if class == Class::Untagged {
            self.inbox[s].iter().position(|i| i.m.class == Class::Untagged && !i.taken)
        } else {
            Some((e.tag >> SEQ_SHIFT) as usize & 0xFF_FFFF).filter(|_| (e.tag >> SENDER_SHIFT) as usize & 0xFFFF == s)
        };
        let Some(seq) = seq.filter(|&q| self.inbox[s].get(q).is_some_and(|i| i.m.class == class && !i.taken)) else {
            self.fatal(&format!("a probe found a message nobody sent (from {s}, tag {:#x})", e.tag));
        };
        let (m, buf) = (self.inbox[s][seq].m, self.inbox[s][seq].buf);
        self.inbox[s][seq].taken = true;
        self.probes_left -= 1;
        if e.len != m.len as u64 || (class != Class::Untagged && e.tag != m.tag) {
            self.error(&format!(
                "a probe found {} bytes, tag {:#x}; sent {} bytes, tag {:#x}",
                e.len, e.tag, m.len, m.tag
            ));
        }
        if class == Class::Discard {
            self.inbox[s][seq].got = true;
            self.count(Kind::Discard);
            return true;
        }
        self.count(Kind::Claim);
        let p = self.arena[buf..].as_mut_ptr().cast::<c_void>();
        let op = Op::Recv { buf, cap: m.len, want: Want::Msg(s, seq) };
        self.post(op, "rdm4_recv_claimed", |ep, ctx| rdm4_recv_claimed(ep, ctx, p, m.len));
        true
    }

    fn found(&self, rc: i32) -> bool {
        self.ok("rdm4_probe", rc) == 1
    }

    /// Handles one completion.
    fn complete(&mut self, e: &rdm4_cqe) {
        if e.context.is_null() {
            return self.remote_write(e);
        }
        let Some(op) = self.ops.get_mut(e.context as usize - 1).map(|o| std::mem::replace(o, Op::Done)) else {
            self.fatal(&format!("a completion of an unknown context {:?}", e.context));
        };
        self.pending -= 1;
        match (op, e.status) {
            (Op::Done, _) => self.fatal("a second completion of one operation"),
            (Op::Cancel, RDM4_ECANCELED) if e.len == 0 => self.count(Kind::Cancel),
            (Op::Cancel, rc) => self.fatal(&format!("the canceled receive completed with {}", strerror(rc))),
            (_, rc) if rc != 0 => self.fatal(&format!("an operation completed with {}", strerror(rc))),
            (Op::Sent(kind), _) => self.count(kind),
            (op @ Op::Read { .. }, _) => self.check_read(op),
            (Op::Recv { buf, cap, want }, _) => self.received(e, buf, cap, want),
            (Op::Atomic { fetch }, _) => {
                self.added += self.rank as u64 + 1;
                self.count(Kind::Atomic);
                if let Some((i, floor)) = fetch {
                    if self.results[i] < floor {
                        let got = self.results[i];
                        self.error(&format!(
                            "a fetch-add returned {got}, below this process's own adds before it ({floor})"
                        ));
                    }
                }
            }
        }
    }

    /// A write with remote CQ data into this process's memory.
    fn remote_write(&mut self, e: &rdm4_cqe) {
        let s = self.ranks.get(&e.src).copied().unwrap_or(usize::MAX);
        let pos = self.remote.iter().position(|&(w, d)| w == s && d == e.data);
        let want = RDM4_CQ_REMOTE_WRITE | RDM4_CQ_REMOTE_CQ_DATA;
        match pos {
            Some(i) if e.status == 0 && e.flags & want == want => {
                self.remote.swap_remove(i);
            }
            _ => self.fatal(&format!(
                "an unexpected remote write: status {}, flags {:#x}, data {:#x}, from {s}",
                e.status, e.flags, e.data
            )),
        }
    }

    /// Checks a receive's message: which one it is, its length, tag,
    /// remote CQ data and every byte.
    fn received(&mut self, e: &rdm4_cqe, buf: usize, cap: usize, want: Want) {
        let Some(&s) = self.ranks.get(&e.src) else {
            return self.error(&format!("a message from an unknown source {}", e.src));
        };
        let len = e.len as usize;
        if len > cap {
            return self.error(&format!("a receive of {cap} bytes reports {len}"));
        }
        let bytes = &self.arena[buf..buf + len];
        let same = |m: &Msg| m.len == len && *self.table.bytes(m.off, len) == *bytes;
        let seq = match want {
            Want::Msg(from, seq) => Some(seq).filter(|_| from == s),
            Want::AnyTagged => Some((e.tag >> SEQ_SHIFT) as usize & 0xFF_FFFF)
                .filter(|_| (e.tag >> SENDER_SHIFT) as usize & 0xFFFF == s),
            Want::AnyUntagged => {
                self.inbox[s].iter().position(|i| i.m.class == Class::Untagged && !i.got && same(&i.m))
            }
        };
        let Some((seq, m)) = seq.and_then(|q| self.inbox[s].get(q).filter(|i| !i.got).map(|i| (q, i.m))) else {
            return self.error(&format!("{len} bytes, tag {:#x} from {s}: no such message was sent, or twice", e.tag));
        };
        let same = same(&m);
        let tagged = m.class != Class::Untagged;
        let data = (e.flags & RDM4_CQ_REMOTE_CQ_DATA != 0).then_some(e.data);
        let flags = RDM4_CQ_RECV | if tagged { RDM4_CQ_TAGGED } else { RDM4_CQ_MSG };
        if len != m.len || (tagged && e.tag != m.tag) || data != m.data || e.flags & flags != flags {
            let got = format!("{len} bytes, tag {:#x}, data {data:?}, flags {:#x}", e.tag, e.flags);
            let sent = format!("{} bytes, tag {:#x}, data {:?}", m.len, m.tag, m.data);
            return self.error(&format!("message {seq} from {s}: {got}; sent {sent}"));
        }
        if !same {
            self.error(&format!("message {seq} from {s} ({len} bytes): wrong bytes"));
        }
        self.inbox[s][seq].got = true;
        self.bytes += len as u64;
        self.count(Kind::Recv);
    }

    /// The round's last barrier, after which everything the peers wrote
    /// is in place: checks it, and rank 0 checks its counter.
    fn end_round(&mut self) {
        let (_, sums) = self.barrier(BARRIER, &self.added.to_le_bytes());
        let me = self.rank;
        for s in (0..self.n).filter(|&s| s != me) {
            for w in writes(self.seed, self.round, s, me) {
                let base = if w.alloc { self.alloc } else { self.region };
                // SAFETY: within the region (`writes` keeps to it); no one writes it now.
                let got = unsafe { std::slice::from_raw_parts(base.add(w.at), w.len) };
                if *got != *self.table.bytes(w.off, w.len) {
                    self.error(&format!("{} bytes written by {s} at {}: wrong bytes", w.len, w.at));
                }
                self.bytes += w.len as u64;
            }
        }
        if self.rank == 0 {
            let expected: u64 = sums.iter().map(|s| u64_at(s, 0)).sum();
            let counter = self.counter();
            if counter != expected {
                self.error(&format!("the atomic counter is {counter}, the processes added {expected}"));
            }
        }
    }

    fn counter(&self) -> u64 {
        // SAFETY: the region's first 8 bytes, 8-byte aligned; peers change
        // it only by atomics, none under way here.
        unsafe { std::ptr::read_volatile(self.region.cast::<u64>()) }
    }

    fn report(&self) -> String {
        // SAFETY: plain data.
        let mut info: rdm4_ep_info = unsafe { std::mem::zeroed() };
        info.size = std::mem::size_of::<rdm4_ep_info>();
        self.ok("rdm4_ep_query", rdm4_ep_query(self.ep, &mut info));
        let device = ["none", "shm", "udp", "shm+udp"][info.devices as usize & 3];
        let mut r = format!("pid={} device={device} rounds={}", std::process::id(), self.round);
        for (k, c) in KINDS.iter().zip(self.counts) {
            r += &format!(" {k}={c}");
        }
        r += &format!(" bytes={} errors={} retransmits={}", self.bytes, self.errors, self.retransmits);
        r += &format!(" atomic_added={}", self.added);
        if self.rank == 0 {
            r += &format!(" atomic_counter={}", self.counter());
        }
        let ([start, mid, end], hwm) = (self.rss, memory().1);
        r + &format!(
            " rss_start_kib={start} rss_mid_kib={mid} rss_end_kib={end} hwm_mid_kib={} hwm_kib={hwm}",
            self.hwm_mid
        )
    }
}
