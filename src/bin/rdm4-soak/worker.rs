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

use rdm4::status::codes::{RDM4_EAGAIN, RDM4_ENOTSUP, RDM4_ETIMEDOUT};

use super::plan::*;
use super::*;

#[path = "checks.rs"]
mod checks;
#[path = "endpoint.rs"]
mod endpoint;

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
