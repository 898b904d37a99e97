//! A producer killed while it writes into a survivor's ring must not block
//! that ring (issue 37, point 5): S reads 64 MiB from V and sends it 64 MiB
//! while V is killed with SIGKILL; then S and T, both alive, ping-pong 20
//! messages (0 B and 1 MiB alternately), every byte and every completion
//! checked, every wait bounded. Twenty rounds, without and with
//! cross-memory attach. S is this process; V and T are this test binary
//! run again with a role in their environment.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdm4::device::shm::{remove_stale_segments, ShmConfig, ShmDevice};
use rdm4::device::Access;
use rdm4::engine::{Addr, Config, Cqe, Endpoint, RecvOpts, RemoteBuf, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;
use rdm4::Status;

const ROUNDS: usize = 20;
const BIG: usize = 64 << 20;
const PINGS: usize = 20;
const PING_BIG: usize = 1 << 20;
/// The longest any one wait of a round may take: a ring blocked behind a
/// dead producer shows as a reply that never comes within it.
const WAIT: Duration = Duration::from_secs(5);
/// A child gives up (and fails) after this long.
const CHILD_LIMIT: Duration = Duration::from_secs(30);
/// The survivors' peer check (ms).
const PEER_CHECK_MS: u64 = 20;

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

/// `len` bytes of a pattern of `seed`, a word at a time (64 MiB in a few
/// milliseconds).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn ping_len(k: usize) -> usize {
    if k % 2 == 0 {
        0
    } else {
        PING_BIG
    }
}

fn publish(dir: &Path, who: &str, addr: &RawAddr, region: u64, key: u64) {
    let hex: String = addr.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!("{who}.tmp"));
    std::fs::write(&tmp, format!("{hex} {region} {key}")).unwrap();
    std::fs::rename(tmp, dir.join(format!("{who}.addr"))).unwrap();
}

fn read_peer(dir: &Path, who: &str) -> Option<(RawAddr, u64, u64)> {
    let s = std::fs::read_to_string(dir.join(format!("{who}.addr"))).ok()?;
    let mut it = s.split_whitespace();
    let hex = it.next()?;
    let bytes: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    Some((RawAddr::from_bytes(&bytes)?, it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Waits (bounded) for `who` to publish its address.
fn await_peer(dir: &Path, who: &str, limit: Duration) -> Result<(RawAddr, u64, u64), String> {
    let t = Instant::now();
    loop {
        if let Some(p) = read_peer(dir, who) {
            return Ok(p);
        }
        if t.elapsed() > limit {
            return Err(format!("{who} never published its address"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

struct Ep {
    ep: Endpoint<ShmDevice>,
    cq: Vec<Cqe>,
}

impl Ep {
    fn progress(&mut self) {
        self.ep.progress(0);
        self.ep.poll_cq(&mut self.cq, usize::MAX);
    }

    /// Progresses until a completion of `context` is collected, at most
    /// `limit`; returns it (taken out of the queue).
    fn take(&mut self, context: u64, limit: Duration, what: &str) -> Result<Cqe, String> {
        let t = Instant::now();
        loop {
            if let Some(i) = self.cq.iter().position(|c| c.context == context) {
                return Ok(self.cq.remove(i));
            }
            if t.elapsed() > limit {
                return Err(format!("{what}: no completion after {limit:?}"));
            }
            self.progress();
        }
    }
}

/// V: the victim. Serves reads of its 64 MiB region and receives S's 64
/// MiB message, until it is killed.
fn victim() {
    let dir = PathBuf::from(env("RDM4_CHILD_DIR"));
    let dev = ShmDevice::open().expect("open");
    let mut e = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    let mut region = OwnedBuf::from_slice(&pattern(BIG, 1));
    let key = e.ep.mr_reg(region.buf(), Access::REMOTE_READ).unwrap();
    // Faulted in now: while S's bytes come, V copies, not faults.
    let mut rbuf = OwnedBuf::zeroed(BIG);
    rbuf.bytes_mut().fill(1);
    e.ep.recv(rbuf.buf(), RecvOpts::default()).unwrap();
    publish(&dir, "v", &e.ep.addr(), region.buf().addr(), key);
    let t = Instant::now();
    while t.elapsed() < CHILD_LIMIT {
        e.progress();
    }
}

/// T: the other survivor. Answers each of S's messages with one of the
/// same length; every byte and completion checked, every wait bounded.
fn survivor() {
    let dir = PathBuf::from(env("RDM4_CHILD_DIR"));
    let dev = ShmDevice::open().expect("open");
    let mut e = Ep { ep: Endpoint::new(dev, Config::default()), cq: Vec::new() };
    publish(&dir, "t", &e.ep.addr(), 0, 0);
    let (s_addr, _, _) = await_peer(&dir, "s", CHILD_LIMIT).unwrap();
    let s = e.ep.av_insert(&s_addr).unwrap();
    for k in 0..PINGS {
        let len = ping_len(k);
        let mut rbuf = OwnedBuf::zeroed(len);
        e.ep.recv(rbuf.buf(), RecvOpts { tag: None, src: None, context: 1 }).unwrap();
        let c = e.take(1, CHILD_LIMIT, &format!("T: message {k}")).unwrap();
        assert_eq!((c.status, c.len), (Status::Success, len as u64), "T: message {k}: {c:?}");
        assert!(rbuf.bytes() == pattern(len, 100 + k as u64), "T: message {k}: bytes");
        let mut sbuf = OwnedBuf::from_slice(&pattern(len, 200 + k as u64));
        e.ep.send(s, sbuf.buf(), SendOpts { tag: None, cq_data: None, context: 2 }).unwrap();
        let c = e.take(2, CHILD_LIMIT, &format!("T: reply {k}")).unwrap();
        assert_eq!(c.status, Status::Success, "T: reply {k}: {c:?}");
    }
}

fn spawn(role: &str, dir: &Path, prefix: &str, cma: bool) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", role, "--nocapture", "--test-threads=1"])
        .env("RDM4_CHILD_ROLE", role)
        .env("RDM4_CHILD_DIR", dir)
        .env("RDM4_SHM_PREFIX", prefix)
        .env("RDM4_SHM_CMA", if cma { "1" } else { "0" })
        .env("RDM4_SHM_PEER_CHECK_MS", PEER_CHECK_MS.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// Kills `c` if it still runs, and reaps it.
fn end(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Waits (bounded) for T to end, and says how it ended.
fn finish(mut c: Child) -> Result<(), String> {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > WAIT {
            let _ = c.kill();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = c.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("T failed: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

/// One round: S (here) reads from and sends 64 MiB to V, kills V after
/// `kill_after` of it, then ping-pongs with T. Returns how often S's ring
/// skipped entries claimed by V and never published.
fn round(
    dir: &Path,
    prefix: &str,
    cma: bool,
    kill_after: Duration,
    data: &[u8],
    got: &mut OwnedBuf,
) -> Result<u64, String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut v = Some(spawn("child_victim", dir, prefix, cma));
    let t = spawn("child_survivor", dir, prefix, cma);
    let mut result = || {
        let cfg = ShmConfig {
            prefix: prefix.to_string(),
            cma,
            peer_check: Duration::from_millis(PEER_CHECK_MS),
            ..ShmConfig::default()
        };
        let mut s = Ep { ep: Endpoint::new(ShmDevice::open_with(cfg).unwrap(), Config::default()), cq: Vec::new() };
        publish(dir, "s", &s.ep.addr(), 0, 0);
        let (v_addr, region, key) = await_peer(dir, "v", WAIT)?;
        let (t_addr, _, _) = await_peer(dir, "t", WAIT)?;
        let to_v: Addr = s.ep.av_insert(&v_addr).unwrap();
        let to_t: Addr = s.ep.av_insert(&t_addr).unwrap();
        // The read and the send, V killed while they move.
        got.bytes_mut().fill(0);
        s.ep.read(to_v, got.buf(), RemoteBuf { addr: region, key }, 10).unwrap();
        let mut out = OwnedBuf::from_slice(data);
        s.ep.send(to_v, out.buf(), SendOpts { tag: None, cq_data: None, context: 11 }).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < kill_after {
            s.progress();
        }
        end(v.take().unwrap());
        for (ctx, what) in [(10, "the read from V"), (11, "the send to V")] {
            let c = s.take(ctx, WAIT, what)?;
            if !matches!(c.status, Status::Success | Status::PeerUnreachable) {
                return Err(format!("{what}: {c:?}"));
            }
            if ctx == 10 && c.status == Status::Success && got.bytes() != pattern(BIG, 1) {
                return Err("the read from V: wrong bytes".into());
            }
        }
        // The survivors' ping-pong.
        for k in 0..PINGS {
            let len = ping_len(k);
            let mut rbuf = OwnedBuf::zeroed(len);
            s.ep.recv(rbuf.buf(), RecvOpts { tag: None, src: Some(to_t), context: 20 }).unwrap();
            let mut sbuf = OwnedBuf::from_slice(&pattern(len, 100 + k as u64));
            s.ep.send(to_t, sbuf.buf(), SendOpts { tag: None, cq_data: None, context: 21 }).unwrap();
            let c = s.take(21, WAIT, &format!("message {k} to T"))?;
            if c.status != Status::Success {
                return Err(format!("message {k} to T: {c:?}"));
            }
            let c = s.take(20, WAIT, &format!("reply {k} from T"))?;
            if (c.status, c.len) != (Status::Success, len as u64) {
                return Err(format!("reply {k} from T: {c:?}"));
            }
            if rbuf.bytes() != pattern(len, 200 + k as u64) {
                return Err(format!("reply {k} from T: wrong bytes"));
            }
        }
        if let Some(c) = s.cq.first() {
            return Err(format!("an unexpected completion: {c:?}"));
        }
        Ok(s.ep.device().dead_claims_skipped())
    };
    let result = result();
    if let Some(v) = v {
        end(v);
    }
    match result {
        Ok(skips) => finish(t).map(|()| skips),
        Err(e) => {
            end(t);
            Err(e)
        }
    }
}

/// Twenty rounds: what failed.
fn twenty_rounds(name: &str, cma: bool) -> Vec<String> {
    let prefix = format!("rdm4t{}{name}", std::process::id());
    let dir = std::env::temp_dir().join(&prefix);
    let _ = std::fs::remove_dir_all(&dir);
    let data = pattern(BIG, 2);
    let mut got = OwnedBuf::zeroed(BIG);
    let mut failed = Vec::new();
    let mut skipped = 0;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for r in 0..ROUNDS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Anywhere in the first 40 ms of the transfer.
        let kill_after = Duration::from_micros(1000 + x % 40_000);
        match round(&dir.join(r.to_string()), &prefix, cma, kill_after, &data, &mut got) {
            Ok(skips) => skipped += usize::from(skips > 0),
            Err(e) => failed.push(format!("{name} round {r} (V killed after {kill_after:?}): {e}")),
        }
    }
    println!("{name}: {skipped} of {ROUNDS} rounds skipped an entry V claimed and never published");
    remove_stale_segments(&prefix);
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    if !left.is_empty() {
        failed.push(format!("{name}: segments left in /dev/shm: {left:?}"));
    }
    failed
}

#[test]
fn child_victim() {
    if env("RDM4_CHILD_ROLE") == "child_victim" {
        victim();
    }
}

#[test]
fn child_survivor() {
    if env("RDM4_CHILD_ROLE") == "child_survivor" {
        survivor();
    }
}

/// The rounds without cross-memory attach (V's read responses come
/// through S's ring), then with it: one test, so that the rounds of the
/// two do not compete for the CPUs.
#[test]
fn a_producer_killed_mid_transfer_never_blocks_the_survivors_ring() {
    if env("RDM4_CHILD_ROLE").is_empty() {
        let mut failed = twenty_rounds("dpemu", false);
        failed.append(&mut twenty_rounds("dpcma", true));
        assert!(failed.is_empty(), "{} of {} rounds failed:\n{}", failed.len(), 2 * ROUNDS, failed.join("\n"));
    }
}
