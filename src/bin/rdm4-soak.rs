//! rdm4-soak: a long run of N processes that all talk to each other over
//! rdm4's C API the way real programs do, checking every byte, every
//! status and every total, and reporting operations, bytes verified,
//! errors, retransmissions and memory (`man/rdm4-soak.1`).
//!
//! The process started by the user is the launcher: it starts the
//! coordinator (a TCP server, unless `--coordinator` names one elsewhere)
//! and its share of the processes, copies of itself with
//! `RDM4_SOAK_RANK` set (`worker.rs`). The coordinator is the barrier of
//! every round, outside rdm4: each process sends it a frame, and once all
//! have, it answers each with all the frames and whether the time is up.
//! The rounds' traffic is derived from a seed the coordinator hands out
//! (`plan.rs`), so that every receiver and target knows what to expect.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdm4::capi::*;

#[path = "rdm4-soak/plan.rs"]
mod plan;
#[path = "rdm4-soak/worker.rs"]
mod worker;

const SYNOPSIS: &str = "usage: rdm4-soak [OPTION...]
       rdm4-soak --procs N --procs-here K --listen ADDR:PORT [OPTION...]
       rdm4-soak --procs N --procs-here K --rank-base B --coordinator HOST:PORT [OPTION...]
The first form runs all N processes on this host. Split over two hosts (or
network namespaces), the first of the other two forms runs the coordinator
and ranks 0..K-1, the second the ranks from B on; give both the same
options otherwise.";

/// The operation kinds counted: `Kind` and their names in `KINDS`, in
/// the order of the report.
macro_rules! kinds {
    ($($kind:ident $name:literal)*) => {
        #[derive(Clone, Copy)]
        pub enum Kind { $($kind),* }
        pub const KINDS: &[&str] = &[$($name),*];
    };
}
kinds! {
    Send "send" TSend "tsend" SendData "senddata" Inject "inject" SendMsg "sendmsg" Dc "dc"
    Recv "recv" Claim "claim" Discard "discard" Probe "probe" Cancel "cancel"
    Write "write" WriteData "writedata" WriteAlloc "write_alloc" Read "read" ReadAlloc "read_alloc"
    Atomic "atomic" Compute "compute" Wait "wait" Barrier "barrier" Reopen "reopen"
}

/// The faults `--faults` injects (each process with its own seed).
const FAULTS: &str = "drop=0.02,dup=0.01,reorder=0.02";

#[derive(Debug, Clone)]
pub struct Opts {
    procs: usize,
    seconds: u64,
    device: String,
    faults: bool,
    reopen_every: u64,
    seed: u64,
    compute_ms: u64,
    timeout: u64,
    procs_here: Option<usize>,
    rank_base: usize,
    coordinator: Option<String>,
    listen: String,
}

type Setter = fn(&mut Opts, &str) -> Result<(), String>;

/// A command-line option: the parser and `--help` read the same table.
struct Opt {
    name: &'static str,
    arg: &'static str,
    help: &'static str,
    default: &'static str,
    set: Setter,
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("bad {name} {value}"))
}

#[rustfmt::skip]
const OPTIONS: &[Opt] = &[
    Opt { name: "--procs", arg: "N", default: "4", help: "processes in all (at least 2)",
        set: |o, v| { o.procs = number("--procs", v)?; Ok(()) } },
    Opt { name: "--seconds", arg: "S", default: "60", help: "run rounds until this much time has passed",
        set: |o, v| { o.seconds = number("--seconds", v)?; Ok(()) } },
    Opt { name: "--device", arg: "shm|udp|auto", default: "RDM4_DEVICE, else auto", help: "the device (sets RDM4_DEVICE)",
        set: |o, v| { o.device = v.to_string(); Ok(()) } },
    Opt { name: "--faults", arg: "", default: "RDM4_UDP_FAULTS as set, else none",
        help: "on udp and auto, RDM4_UDP_FAULTS=drop=0.02,dup=0.01,reorder=0.02 with a seed per process, unless set",
        set: |o, _| { o.faults = true; Ok(()) } },
    Opt { name: "--reopen-every", arg: "R", default: "100", help: "every R rounds one process (in turn) reopens its endpoint; 0: never",
        set: |o, v| { o.reopen_every = number("--reopen-every", v)?; Ok(()) } },
    Opt { name: "--seed", arg: "N", default: "0, from the clock", help: "the seed of the traffic (printed)",
        set: |o, v| { o.seed = number("--seed", v)?; Ok(()) } },
    Opt { name: "--compute-ms", arg: "MS", default: "20", help: "compute phases (no library call) last up to this long",
        set: |o, v| { o.compute_ms = number("--compute-ms", v)?; Ok(()) } },
    Opt { name: "--timeout", arg: "S", default: "120", help: "the bound on every wait (a round, a barrier): past it, an error",
        set: |o, v| { o.timeout = number("--timeout", v)?; Ok(()) } },
    Opt { name: "--procs-here", arg: "K", default: "all", help: "processes started on this host",
        set: |o, v| { o.procs_here = Some(number("--procs-here", v)?); Ok(()) } },
    Opt { name: "--rank-base", arg: "B", default: "0", help: "rank of the first process started here",
        set: |o, v| { o.rank_base = number("--rank-base", v)?; Ok(()) } },
    Opt { name: "--coordinator", arg: "HOST:PORT", default: "start one here", help: "join the coordinator there",
        set: |o, v| { o.coordinator = Some(v.to_string()); Ok(()) } },
    Opt { name: "--listen", arg: "ADDR:PORT", default: "127.0.0.1:0", help: "where the coordinator started here listens",
        set: |o, v| { o.listen = v.to_string(); Ok(()) } },
];

fn help() -> String {
    let head = |o: &Opt| if o.arg.is_empty() { o.name.to_string() } else { format!("{} {}", o.name, o.arg) };
    let width = OPTIONS.iter().map(|o| head(o).len()).max().unwrap_or(0);
    let mut s = format!("{SYNOPSIS}\n\noptions:\n");
    for o in OPTIONS {
        s += &format!("  {:<width$}  {} (default: {})\n", head(o), o.help, o.default);
    }
    s + &format!("  {:<width$}  print this help and exit\n", "-h, --help")
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        procs: 4,
        seconds: 60,
        device: std::env::var("RDM4_DEVICE").ok().filter(|d| !d.is_empty()).unwrap_or_else(|| "auto".into()),
        faults: false,
        reopen_every: 100,
        seed: 0,
        compute_ms: 20,
        timeout: 120,
        procs_here: None,
        rank_base: 0,
        coordinator: None,
        listen: "127.0.0.1:0".into(),
    };
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "-h" || a == "--help" {
            return Ok(None);
        }
        let opt = OPTIONS.iter().find(|o| o.name == a).ok_or_else(|| format!("unknown argument {a}"))?;
        let value =
            if opt.arg.is_empty() { String::new() } else { args.next().ok_or_else(|| format!("{a} needs a value"))? };
        (opt.set)(&mut o, &value)?;
    }
    if !["shm", "udp", "auto"].contains(&o.device.as_str()) {
        return Err(format!("unknown device {}", o.device));
    }
    if o.procs < 2 || o.procs >= 1 << 16 || o.rank_base + o.procs_here.unwrap_or(o.procs) > o.procs {
        return Err("need 2 <= --procs < 65536 and --rank-base + --procs-here <= --procs".into());
    }
    Ok(Some(o))
}

fn fail(msg: &str) -> ! {
    eprintln!("rdm4-soak: {msg}");
    std::process::exit(2);
}

/// A frame to or from the coordinator: a kind byte, a length, the bytes.
pub fn send_frame(sock: &mut TcpStream, kind: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut f = vec![kind];
    f.extend((payload.len() as u32).to_le_bytes());
    f.extend(payload);
    sock.write_all(&f)
}

pub fn read_frame(sock: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    sock.read_exact(&mut head)?;
    let mut payload = vec![0u8; u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize];
    sock.read_exact(&mut payload)?;
    Ok((head[0], payload))
}

/// Connects to the coordinator, trying again until `bound` has passed
/// (across hosts it may start later).
pub fn connect(coordinator: &str, bound: Duration) -> TcpStream {
    let deadline = Instant::now() + bound;
    loop {
        let addrs = coordinator.to_socket_addrs().unwrap_or_else(|e| fail(&format!("{coordinator}: {e}")));
        for a in addrs {
            match TcpStream::connect_timeout(&a, Duration::from_secs(1)) {
                Ok(s) => return s,
                Err(e) if Instant::now() > deadline => fail(&format!("connect {coordinator}: {e}")),
                Err(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Frame kinds: a worker's hello, barrier, report and goodbye; the
/// coordinator's answers.
pub const HELLO: u8 = b'H';
pub const BARRIER: u8 = b'B';
pub const REPORT: u8 = b'R';
pub const CLOSED: u8 = b'C';
pub const GO: u8 = b'g';
pub const STOP: u8 = b's';
pub const ABORT: u8 = b'a';

/// The coordinator: takes every process's hello, then answers every
/// barrier, and prints the summary from the reports. False when anything
/// failed.
fn coordinate(o: &Opts, listener: TcpListener, seed: u64) -> bool {
    let bound = Duration::from_secs(o.timeout);
    let deadline = Instant::now() + bound;
    let mut socks: Vec<Option<TcpStream>> = (0..o.procs).map(|_| None).collect();
    let _ = listener.set_nonblocking(true);
    while socks.iter().any(Option::is_none) {
        match listener.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(bound));
                match read_frame(&mut s) {
                    Ok((HELLO, p)) if p.len() == 8 => {
                        let rank = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
                        let procs = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize;
                        if procs != o.procs || rank >= procs || socks[rank].is_some() {
                            eprintln!("rdm4-soak: coordinator: bad hello (rank {rank} of {procs})");
                            return abort(&mut socks);
                        }
                        if send_frame(&mut s, GO, &seed.to_le_bytes()).is_ok() {
                            socks[rank] = Some(s);
                        }
                    }
                    _ => eprintln!("rdm4-soak: coordinator: a connection without a hello"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    eprintln!("rdm4-soak: coordinator: not every process connected in {} s", o.timeout);
                    return abort(&mut socks);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => fail(&format!("accept: {e}")),
        }
    }
    let start = Instant::now();
    let mut reports = Vec::new();
    let ok = 'run: loop {
        let mut frames = Vec::new();
        for (rank, s) in socks.iter_mut().enumerate() {
            match read_frame(s.as_mut().expect("connected")) {
                Ok(f) => frames.push(f),
                Err(e) => {
                    eprintln!("rdm4-soak: coordinator: rank {rank} is gone ({e})");
                    break 'run abort(&mut socks);
                }
            }
        }
        let kind = frames[0].0;
        if frames.iter().any(|f| f.0 != kind) {
            eprintln!("rdm4-soak: coordinator: the processes are out of step");
            break abort(&mut socks);
        }
        if kind == CLOSED {
            break true;
        }
        if kind == REPORT {
            reports = frames.iter().map(|f| String::from_utf8_lossy(&f.1).into_owned()).collect();
        }
        let mut all = Vec::new();
        for f in &frames {
            all.extend((f.1.len() as u32).to_le_bytes());
            all.extend(&f.1);
        }
        let flag = if start.elapsed() >= Duration::from_secs(o.seconds) { STOP } else { GO };
        for s in socks.iter_mut().flatten() {
            let _ = send_frame(s, flag, &all);
        }
    };
    // The reports are printed also when a process failed after them.
    !reports.is_empty() && summary(&reports) && ok
}

/// Tells every process to stop; false.
fn abort(socks: &mut [Option<TcpStream>]) -> bool {
    for s in socks.iter_mut().flatten() {
        let _ = send_frame(s, ABORT, &[]);
    }
    false
}

/// The value of `key` in a report of `key=value` words.
fn field(report: &str, key: &str) -> Option<u64> {
    report.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// Prints the per-process reports, the totals and the atomic check; true
/// when all is well.
fn summary(reports: &[String]) -> bool {
    for (rank, r) in reports.iter().enumerate() {
        println!("rank {rank}: {r}");
    }
    let sum = |k: &str| reports.iter().map(|r| field(r, k).unwrap_or(0)).sum::<u64>();
    let mut total = format!("rounds={}", field(&reports[0], "rounds").unwrap_or(0));
    for k in KINDS.iter().chain(&["bytes", "errors", "retransmits"]) {
        total += &format!(" {k}={}", sum(k));
    }
    println!("total: {total}");
    let (counter, expected) = (field(&reports[0], "atomic_counter"), sum("atomic_added"));
    let atomic_ok = counter == Some(expected);
    println!("atomic: counter={} expected={expected} {}", counter.unwrap_or(0), if atomic_ok { "ok" } else { "WRONG" });
    atomic_ok && sum("errors") == 0
}

fn main() {
    let o = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", help());
            return;
        }
        Err(msg) => fail(&format!("{msg}\n{SYNOPSIS}\n(rdm4-soak --help lists the options)")),
    };
    if let (Ok(rank), Ok(coordinator)) = (std::env::var("RDM4_SOAK_RANK"), std::env::var("RDM4_SOAK_COORDINATOR")) {
        worker::run(&o, rank.parse().unwrap_or_else(|_| fail("bad RDM4_SOAK_RANK")), &coordinator);
    }
    let (listener, coordinator) = match &o.coordinator {
        Some(c) => (None, c.clone()),
        None => {
            let l = TcpListener::bind(&o.listen).unwrap_or_else(|e| fail(&format!("listen on {}: {e}", o.listen)));
            let addr = l.local_addr().unwrap_or_else(|e| fail(&format!("listen: {e}")));
            (Some(l), addr.to_string())
        }
    };
    let seed = if o.seed != 0 {
        o.seed
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000)
    };
    let faults = std::env::var("RDM4_UDP_FAULTS").ok().filter(|f| !f.is_empty());
    let inject = o.faults && faults.is_none() && o.device != "shm";
    let here = o.procs_here.unwrap_or(o.procs);
    if listener.is_some() {
        // SAFETY: rdm4_version_string returns a static string.
        let v = unsafe { std::ffi::CStr::from_ptr(rdm4_version_string()) }.to_string_lossy();
        let faults = if inject { format!("{FAULTS},seed=<rank>") } else { faults.unwrap_or_else(|| "none".into()) };
        println!(
            "rdm4-soak {v}: {} processes ({here} here), device {}, {} s, seed {seed}, reopen every {} rounds, \
             faults {faults}, coordinator {coordinator}",
            o.procs, o.device, o.seconds, o.reopen_every
        );
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("cannot find myself: {e}")));
    let mut children: Vec<(usize, Child)> = (o.rank_base..o.rank_base + here)
        .map(|rank| {
            let mut cmd = Command::new(&exe);
            cmd.args(std::env::args().skip(1))
                .env("RDM4_SOAK_RANK", rank.to_string())
                .env("RDM4_SOAK_COORDINATOR", &coordinator)
                .env("RDM4_DEVICE", &o.device);
            if inject {
                cmd.env("RDM4_UDP_FAULTS", format!("{FAULTS},seed={}", seed * 1000 + rank as u64));
            }
            (rank, cmd.spawn().unwrap_or_else(|e| fail(&format!("cannot start a process: {e}"))))
        })
        .collect();
    let mut ok = listener.is_none_or(|l| coordinate(&o, l, seed));
    // Every process ends within its own bounds once the coordinator is
    // done with it; one that does not is killed.
    let deadline = Instant::now() + Duration::from_secs(o.timeout + 10);
    for (rank, child) in &mut children {
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        if !status.is_some_and(|s| s.success()) {
            eprintln!("rdm4-soak: rank {rank} (pid {}) did not exit cleanly: {status:?}", child.id());
            ok = false;
        }
    }
    if ok {
        println!("rdm4-soak: ok, {here} processes here exited cleanly");
    } else {
        println!("rdm4-soak: FAILED");
        std::process::exit(1);
    }
}
