//! rdm4-perf: the demo and benchmark tool, in the spirit of `ucx_perftest`
//! and `fi_pingpong`. It drives rdm4 through its public C API, so it
//! measures what C programs get.
//!
//! With no arguments it starts a second process itself, runs a short sweep
//! of every test over the default device and prints a table. The two
//! processes exchange their addresses over a TCP socket (loopback when it
//! spawns its peer; `--server` / `--client HOST` across hosts) and are pinned
//! to different CPUs unless `--no-pin`. Its endpoints are opened with
//! `RDM4_THREAD_SINGLE` (each process calls from one thread), as
//! `ucx_perftest` and `fi_pingpong` open theirs single-threaded;
//! `--thread-safe` measures the locked mode instead. Before the first test
//! both processes poll for `--settle-ms` (default 500): where the host
//! brings busy vCPUs to full copying speed only after a few hundred
//! milliseconds, the first tests would measure that ramp. `--inject` makes
//! the streams' sends `rdm4_tinject` calls (up to 64 KiB), which leave no
//! completion to poll, as `ucx_perftest`'s sends that complete in place;
//! the default sends with `rdm4_tsend` and polls every completion.
//! `--more` makes them `rdm4_sendmsg` calls with `RDM4_MSG_MORE`, each
//! window's sends leaving together at the poll that follows them.
//! `--help` lists every option with its default (from [`OPTIONS`], the
//! table the parser reads); `man/rdm4-perf.1` describes the tests and
//! the output.
//!
//! Honesty rules: data is verified on the last iteration of every size;
//! ping-pong latency is half the round trip; bandwidth counts completed
//! operations only; one-sided latencies (put, get, atomic) are the time from
//! post to local completion.

use std::ffi::{c_void, CStr};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdm4::capi::*;
use rdm4::status::codes::RDM4_EAGAIN;

#[path = "rdm4-perf/measure.rs"]
mod measure;
use measure::*;
#[path = "rdm4-perf/session.rs"]
mod session;
use session::{barrier, run};

/// The synopsis: the first lines of `--help`, and what an argument error
/// prints after its message.
const SYNOPSIS: &str = "usage: rdm4-perf [OPTION...]
       rdm4-perf --server [--oob-port P] [OPTION...]
       rdm4-perf --client HOST --oob-port P [OPTION...]
The first form starts the peer process on this host. Across two hosts, run
--server on one and --client on the other, with the same test options.";

const TESTS: [&str; 9] =
    ["tag_lat", "msg_lat", "tag_bw", "msg_rate", "put_lat", "put_bw", "get_lat", "get_bw", "atomic_lat"];
const DEFAULT_SIZES: [usize; 8] = [8, 64, 512, 4096, 32768, 262_144, 1 << 20, 4 << 20];
/// Default of `--settle-ms`.
const SETTLE_MS: u64 = 500;

#[derive(Debug, Clone, PartialEq)]
struct Opts {
    device: String,
    tests: Vec<String>,
    sizes: Vec<usize>,
    iters: usize,
    warmup: usize,
    window: usize,
    /// Milliseconds both processes poll before the first test ([`settle`]).
    settle_ms: u64,
    json: bool,
    pin: bool,
    /// Open the endpoints with `RDM4_THREAD_SAFE` (locked calls).
    thread_safe: bool,
    /// Streams send with `rdm4_tinject` (sizes up to 64 KiB): no send
    /// completions, as `ucx_perftest`'s sends that complete in place.
    inject: bool,
    /// Streams send with `rdm4_sendmsg` and `RDM4_MSG_MORE`.
    more: bool,
    /// Print the endpoint's counters after the run (`rdm4_counters`).
    stats: bool,
    /// The RMA regions come from `rdm4_mr_alloc` (memory same-host peers
    /// map), not `rdm4_mr_reg` of ordinary memory.
    alloc: bool,
    /// One-sided tests by `rdm4_write_now`, `rdm4_read_now` and
    /// `rdm4_atomic_now`: done in the call, no completion to poll.
    now: bool,
    role: Role,
    port: u16,
}

impl Opts {
    /// The settings without options.
    fn defaults() -> Opts {
        Opts {
            // The library's default device, unless the environment pins one.
            device: std::env::var("RDM4_DEVICE").ok().filter(|d| !d.is_empty()).unwrap_or_else(|| "auto".into()),
            tests: TESTS.iter().map(|s| s.to_string()).collect(),
            sizes: DEFAULT_SIZES.to_vec(),
            iters: 0,
            warmup: 0,
            window: 64,
            settle_ms: SETTLE_MS,
            json: false,
            pin: true,
            thread_safe: false,
            inject: false,
            more: false,
            stats: false,
            alloc: false,
            now: false,
            role: Role::Local,
            port: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Role {
    /// Spawn the peer and drive the tests.
    Local,
    /// Wait for a client (another host, or the spawned peer).
    Server,
    /// Connect to a server.
    Client(String),
}

/// What `--help` shows as an option's default.
#[derive(Clone, Copy)]
enum Shown {
    /// A value the option takes: giving it changes nothing (a unit test
    /// checks each against [`Opts::defaults`]).
    Value(&'static str),
    /// What happens without the option, in words.
    Words(&'static str),
}

/// Applies an option's value (`""` for a switch) or says what is wrong
/// with it.
type Setter = fn(&mut Opts, &str) -> std::result::Result<(), String>;

/// A command-line option. The parser accepts the options of [`OPTIONS`]
/// and `-h`/`--help`, nothing else, and `--help` lists the same table, so
/// the two cannot drift apart.
struct Opt {
    /// `--name`.
    name: &'static str,
    /// What the value that follows it looks like; `""` for a switch.
    arg: &'static str,
    /// What it does.
    help: &'static str,
    default: Shown,
    set: Setter,
}

/// `value` of option `name` as a number.
fn number<T: std::str::FromStr>(name: &str, value: &str) -> std::result::Result<T, String> {
    value.parse().map_err(|_| format!("bad {name} {value}"))
}

#[rustfmt::skip]
const OPTIONS: &[Opt] = &[
    Opt { name: "--device", arg: "shm|udp|auto", default: Shown::Words("auto, the library's default (RDM4_DEVICE when set)"),
        help: "the device of both endpoints",
        set: |o, v| { o.device = v.to_string(); Ok(()) } },
    Opt { name: "--test", arg: "NAME[,NAME...]", default: Shown::Words("all, in the order below"),
        help: "the tests to run, in this order",
        set: |o, v| {
            o.tests = v.split(',').map(str::to_string).collect();
            match o.tests.iter().find(|t| !TESTS.contains(&t.as_str())) {
                Some(t) => Err(format!("unknown test {t}")),
                None => Ok(()),
            }
        } },
    Opt { name: "--sizes", arg: "N[,N...]", default: Shown::Value("8,64,512,4096,32768,262144,1048576,4194304"),
        help: "sizes in bytes (atomic_lat: 8 only)",
        set: |o, v| {
            let size = |s: &str| s.parse().map_err(|_| format!("bad size {s}"));
            o.sizes = v.split(',').map(size).collect::<std::result::Result<_, _>>()?;
            Ok(())
        } },
    Opt { name: "--iters", arg: "N", default: Shown::Value("0"),
        help: "timed iterations per test and size; 0: set by test and size",
        set: |o, v| { o.iters = number("--iters", v)?; Ok(()) } },
    Opt { name: "--warmup", arg: "N", default: Shown::Value("0"),
        help: "untimed iterations first; 0: a tenth of them, none with --iters",
        set: |o, v| { o.warmup = number("--warmup", v)?; Ok(()) } },
    Opt { name: "--window", arg: "N", default: Shown::Value("64"),
        help: "operations in flight in the _bw tests and msg_rate",
        set: |o, v| { o.window = number("--window", v)?; Ok(()) } },
    Opt { name: "--settle-ms", arg: "MS", default: Shown::Value("500"),
        help: "both processes poll this long before the first test",
        set: |o, v| { o.settle_ms = number("--settle-ms", v)?; Ok(()) } },
    Opt { name: "--json", arg: "", default: Shown::Words("a table"),
        help: "print one JSON object per test and size",
        set: |o, _| { o.json = true; Ok(()) } },
    Opt { name: "--no-pin", arg: "", default: Shown::Words("pinned to CPUs 0 and 1"),
        help: "do not pin the two processes",
        set: |o, _| { o.pin = false; Ok(()) } },
    Opt { name: "--thread-safe", arg: "", default: Shown::Words("RDM4_THREAD_SINGLE"),
        help: "locked endpoints: RDM4_THREAD_SAFE",
        set: |o, _| { o.thread_safe = true; Ok(()) } },
    Opt { name: "--inject", arg: "", default: Shown::Words("rdm4_tsend"),
        help: "tag_bw, msg_rate send by rdm4_tinject (up to 64 KiB)",
        set: |o, _| { o.inject = true; Ok(()) } },
    Opt { name: "--more", arg: "", default: Shown::Words("rdm4_tsend"),
        help: "tag_bw, msg_rate send by rdm4_sendmsg with RDM4_MSG_MORE",
        set: |o, _| { o.more = true; Ok(()) } },
    Opt { name: "--stats", arg: "", default: Shown::Words("off"),
        help: "print each side's counters (rdm4_counters) to stderr after the run",
        set: |o, _| { o.stats = true; Ok(()) } },
    Opt { name: "--alloc", arg: "", default: Shown::Words("rdm4_mr_reg"),
        help: "RMA regions from rdm4_mr_alloc (mapped by same-host peers)",
        set: |o, _| { o.alloc = true; Ok(()) } },
    Opt { name: "--now", arg: "", default: Shown::Words("rdm4_write, rdm4_read, rdm4_fetch_atomic"),
        help: "one-sided tests by rdm4_write_now, rdm4_read_now, rdm4_atomic_now (done in the call, no completion)",
        set: |o, _| { o.now = true; Ok(()) } },
    Opt { name: "--server", arg: "", default: Shown::Words("start the peer here"),
        help: "wait for a --client, then run the tests",
        set: |o, _| { o.role = Role::Server; Ok(()) } },
    Opt { name: "--client", arg: "HOST", default: Shown::Words("start the peer here"),
        help: "connect to the --server on HOST",
        set: |o, v| { o.role = Role::Client(v.to_string()); Ok(()) } },
    Opt { name: "--oob-port", arg: "P", default: Shown::Value("0"),
        help: "TCP port of --server and --client; 0: any, printed",
        set: |o, v| { o.port = number("--oob-port", v)?; Ok(()) } },
];

/// The `--help` text: the synopsis, every option of [`OPTIONS`] on a line
/// of its own with its default, and the tests.
fn help() -> String {
    let head = |o: &Opt| if o.arg.is_empty() { o.name.to_string() } else { format!("{} {}", o.name, o.arg) };
    let width = OPTIONS.iter().map(|o| head(o).len()).max().unwrap_or(0);
    let mut s = format!("{SYNOPSIS}\n\noptions:\n");
    for o in OPTIONS {
        let (Shown::Value(default) | Shown::Words(default)) = o.default;
        s += &format!("  {:<width$}  {} (default: {default})\n", head(o), o.help);
    }
    s += &format!("  {:<width$}  print this help and exit\n", "-h, --help");
    s += &format!("\ntests: {}\n", TESTS.join(" "));
    s
}

fn fail(msg: &str) -> ! {
    eprintln!("rdm4-perf: {msg}\n{SYNOPSIS}\n(rdm4-perf --help lists the options)");
    std::process::exit(2);
}

/// Parses the arguments (without the program name); `None` when they ask
/// for `--help`.
fn parse<I: IntoIterator<Item = String>>(args: I) -> std::result::Result<Option<Opts>, String> {
    let mut o = Opts::defaults();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "-h" || a == "--help" {
            return Ok(None);
        }
        let opt = OPTIONS.iter().find(|o| o.name == a).ok_or_else(|| format!("unknown argument {a}"))?;
        let value = if opt.arg.is_empty() {
            String::new()
        } else {
            args.next().ok_or_else(|| format!("{} needs a value", opt.name))?
        };
        (opt.set)(&mut o, &value)?;
    }
    if o.window == 0 || o.sizes.is_empty() {
        return Err("--window and --sizes must not be empty".into());
    }
    if !["shm", "udp", "auto"].contains(&o.device.as_str()) {
        return Err(format!("unknown device {}", o.device));
    }
    Ok(Some(o))
}

fn parse_args() -> Opts {
    match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", help());
            std::process::exit(0);
        }
        Err(msg) => fail(&msg),
    }
}

/// Checks a C API status; reports it with `rdm4_strerror` and exits on failure.
fn ok(what: &str, rc: i32) -> i32 {
    if rc < 0 {
        // SAFETY: rdm4_strerror returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(rdm4_strerror(rc)) }.to_string_lossy();
        eprintln!("rdm4-perf: {what} failed: {text} ({rc})");
        std::process::exit(1);
    }
    rc
}

fn pin(cpu: usize) {
    // SAFETY: sysconf has no preconditions; the cpu set is a zeroed local.
    unsafe {
        let n = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % n, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The endpoint, its peer and a registered region.
struct Ctx {
    ep: *mut rdm4_ep,
    peer: rdm4_addr,
    /// Registered (`rdm4_mr_reg` of a leaked vector) or allocated
    /// (`rdm4_mr_alloc`): valid until the endpoint closes.
    region: &'static mut [u8],
    peer_region: u64,
    peer_key: u64,
    /// Offset of the atomic counter in both regions (after the largest size).
    counter: usize,
    cq: Vec<rdm4_cqe>,
    /// One-sided operations by the `_now` calls (`--now`).
    now: bool,
}

impl Ctx {
    /// Polls until `n` completions arrived; checks they succeeded.
    fn complete(&mut self, n: usize) {
        let mut got = 0;
        let mut deadline = None;
        let mut polls = 0u32;
        while got < n {
            let k = ok("rdm4_poll", rdm4_poll(self.ep, self.cq.as_mut_ptr(), self.cq.len()));
            for e in &self.cq[..k as usize] {
                if e.status != 0 {
                    ok("operation", e.status);
                }
            }
            got += k as usize;
            // Reading the clock costs as much as a poll: look every 1024 polls.
            polls = polls.wrapping_add(1);
            if polls % 1024 == 0 {
                let now = Instant::now();
                if now > *deadline.get_or_insert(now + Duration::from_secs(120)) {
                    eprintln!("rdm4-perf: timed out waiting for completions");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// What one test measured.
#[derive(Default)]
struct Result {
    lat: Vec<f64>,
    bw_bytes: f64,
    secs: f64,
    msgs: usize,
}

/// Opens the endpoint, before any peer is started or contacted: a device
/// that cannot open (e.g. one this build lacks) is then reported once, by
/// the process the user started, and no peer process is left waiting.
fn open_ep(o: &Opts) -> *mut rdm4_ep {
    std::env::set_var("RDM4_DEVICE", &o.device);
    let mut attr = std::mem::MaybeUninit::<rdm4_ep_attr>::uninit();
    ok("rdm4_ep_attr_init", rdm4_ep_attr_init(attr.as_mut_ptr()));
    // SAFETY: initialised by rdm4_ep_attr_init.
    let mut attr = unsafe { attr.assume_init() };
    attr.progress = RDM4_PROGRESS_MANUAL;
    attr.threading = if o.thread_safe { RDM4_THREAD_SAFE } else { RDM4_THREAD_SINGLE };
    let mut ep = std::ptr::null_mut();
    ok("rdm4_ep_open", rdm4_ep_open(&attr, &mut ep));
    ep
}

fn spawn_peer(o: &Opts, port: u16) -> Child {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("cannot find myself: {e}")));
    let mut args: Vec<String> = vec!["--client".into(), "127.0.0.1".into(), "--oob-port".into(), port.to_string()];
    args.extend(["--device".into(), o.device.clone(), "--window".into(), o.window.to_string()]);
    args.extend(["--settle-ms".into(), o.settle_ms.to_string()]);
    args.extend([
        "--test".into(),
        o.tests.join(","),
        "--sizes".into(),
        o.sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
    ]);
    if o.iters > 0 {
        args.extend(["--iters".into(), o.iters.to_string()]);
    }
    if o.warmup > 0 {
        args.extend(["--warmup".into(), o.warmup.to_string()]);
    }
    if !o.pin {
        args.push("--no-pin".into());
    }
    if o.thread_safe {
        args.push("--thread-safe".into());
    }
    // The spawned peer is the client, the side that sends in tag_bw and
    // msg_rate: the options of its sends go to it too.
    if o.inject {
        args.push("--inject".into());
    }
    if o.more {
        args.push("--more".into());
    }
    if o.stats {
        args.push("--stats".into());
    }
    if o.alloc {
        args.push("--alloc".into());
    }
    if o.now {
        args.push("--now".into());
    }
    args.push("--json".into());
    Command::new(exe)
        .args(args)
        .env("RDM4_PERF_SPAWNED", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start the peer process: {e}")))
}

fn print_table(lines: &[String]) {
    println!(
        "{:<11} {:>9} {:>10} {:>10} {:>10} {:>11} {:>12}",
        "test", "size", "lat med", "lat avg", "lat p99", "bw MB/s", "msg/s"
    );
    for l in lines {
        let get = |k: &str| -> String {
            let at = l.find(&format!("\"{k}\":")).map(|i| i + k.len() + 3).unwrap_or(0);
            l[at..].split([',', '}']).next().unwrap_or("").trim_matches('"').to_string()
        };
        println!(
            "{:<11} {:>9} {:>10} {:>10} {:>10} {:>11} {:>12}",
            get("test"),
            get("size"),
            get("lat_us_median"),
            get("lat_us_avg"),
            get("lat_us_p99"),
            get("bw_mbps"),
            get("msg_rate")
        );
    }
    println!("(latencies in microseconds; ping-pong latency is half the round trip)");
}

fn main() {
    let o = parse_args();
    let spawned = std::env::var_os("RDM4_PERF_SPAWNED").is_some();
    match &o.role {
        Role::Client(host) => {
            if o.pin && spawned {
                pin(1);
            }
            let ep = open_ep(&o);
            let sock = TcpStream::connect((host.as_str(), o.port)).unwrap_or_else(|e| fail(&format!("connect: {e}")));
            let lines = run(&o, ep, sock, true);
            for l in &lines {
                println!("{l}");
            }
            if !o.json && !spawned {
                print_table(&lines);
            }
        }
        Role::Server => {
            let ep = open_ep(&o);
            let l = TcpListener::bind(("0.0.0.0", o.port)).unwrap_or_else(|e| fail(&format!("listen: {e}")));
            eprintln!("rdm4-perf: waiting for a client on port {}", l.local_addr().map(|a| a.port()).unwrap_or(0));
            let (sock, _) = l.accept().unwrap_or_else(|e| fail(&format!("accept: {e}")));
            run(&o, ep, sock, false);
        }
        Role::Local => {
            if o.pin {
                pin(0);
            }
            let ep = open_ep(&o);
            // SAFETY: rdm4_version_string returns a static string.
            let v = unsafe { CStr::from_ptr(rdm4_version_string()) }.to_string_lossy();
            if !o.json {
                println!(
                    "rdm4 {v}: {} device, two processes{}",
                    o.device,
                    if o.pin { ", pinned to CPUs 0 and 1" } else { "" }
                );
            }
            let l = TcpListener::bind(("127.0.0.1", 0)).unwrap_or_else(|e| fail(&format!("listen: {e}")));
            let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
            let child = spawn_peer(&o, port);
            let (sock, _) = l.accept().unwrap_or_else(|e| fail(&format!("accept: {e}")));
            run(&o, ep, sock, false);
            let out = child.wait_with_output().unwrap_or_else(|e| fail(&format!("peer: {e}")));
            if !out.status.success() {
                eprintln!("rdm4-perf: the peer process failed ({})", out.status);
                std::process::exit(1);
            }
            let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
            if o.json {
                for l in &lines {
                    println!("{l}");
                }
            } else {
                print_table(&lines);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{help, parse, Laps, Opts, Shown, OPTIONS};

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// The default `--help` shows for an option that takes a value is the
    /// value it has without the option.
    #[test]
    fn every_default_the_help_shows_is_the_default() {
        for o in OPTIONS {
            if let Shown::Value(v) = o.default {
                assert_eq!(parse(args(&[o.name, v])), Ok(Some(Opts::defaults())), "{} {v}", o.name);
            }
        }
        assert_eq!(parse(args(&[])), Ok(Some(Opts::defaults())));
    }

    #[test]
    fn the_parser_takes_the_options_of_the_table_and_help() {
        for o in OPTIONS {
            let given = if o.arg.is_empty() { args(&[o.name]) } else { args(&[o.name, "x"]) };
            // Accepted, or refused for its value: never an unknown argument.
            if let Err(e) = parse(given) {
                assert!(!e.contains("unknown argument"), "{}: {e}", o.name);
            }
            assert!(help().lines().any(|l| l.trim_start().starts_with(o.name)), "{}", o.name);
        }
        assert_eq!(parse(args(&["--help"])), Ok(None));
        assert_eq!(parse(args(&["--json", "-h"])), Ok(None));
        assert_eq!(parse(args(&["--nope"])), Err("unknown argument --nope".to_string()));
        assert_eq!(parse(args(&["--iters"])), Err("--iters needs a value".to_string()));
    }

    /// As `one_sided_lat` takes them: `iters` samples that together span
    /// from the first timed iteration's start to the end, once.
    #[test]
    fn laps_cover_the_timed_run_once() {
        for (warmup, iters) in [(0, 1), (0, 5), (2, 5), (3, 1)] {
            let mut laps = Laps::default();
            let mut start = 0;
            for i in 0..warmup + iters {
                laps.lap(i > warmup);
                if i == warmup {
                    start = laps.last;
                }
            }
            laps.lap(iters > 0);
            assert_eq!(laps.lat.len(), iters, "warmup {warmup}, iters {iters}");
            // Each sample is one iteration's time (a loop's, far below a
            // second), never a time since some earlier point.
            assert!(laps.lat.iter().all(|&t| t < 1e9), "{:?}", laps.lat);
            let sum: f64 = laps.lat.iter().sum();
            assert_eq!(sum as u64, laps.last - start, "warmup {warmup}, iters {iters}");
        }
    }
}
