//! The udp device between processes on loopback: a peer killed with
//! SIGKILL is given up at once (its host reports its port closed), a peer
//! stopped with SIGSTOP (silent, as a host gone from the network) after
//! the give-up time and not before; every operation towards it ends with
//! an error, and the survivor keeps working with its other peer (issues
//! 29, 37); a peer that stops while the application sleeps on its
//! descriptor is given up all the same, and the sleeper woken (issue 39:
//! the responder keeps which peers are awaited).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdm4::device::udp::{UdpConfig, UdpDevice};
use rdm4::engine::{Config, Cqe, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;
use rdm4::Status;

const LIMIT: Duration = Duration::from_secs(60);

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

fn publish(dir: &Path, name: &str, addr: &RawAddr) {
    let hex: String = addr.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(dir.join(format!("{name}.tmp")), hex).unwrap();
    std::fs::rename(dir.join(format!("{name}.tmp")), dir.join(name)).unwrap();
}

fn read_addr(dir: &Path, name: &str) -> RawAddr {
    let t = Instant::now();
    loop {
        if let Ok(hex) = std::fs::read_to_string(dir.join(name)) {
            let b: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            return RawAddr::from_bytes(&b).unwrap();
        }
        assert!(t.elapsed() < LIMIT, "{name} never published");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A child: answers every 8-byte message from the parent with the same bytes.
#[test]
fn child_echo() {
    if env("RDM4_CHILD_ROLE") != "echo" {
        return;
    }
    let dir = PathBuf::from(env("RDM4_CHILD_DIR"));
    let me = env("RDM4_CHILD_NAME");
    let mut ep = Endpoint::new(UdpDevice::open().unwrap(), Config::default());
    publish(&dir, &me, &ep.addr());
    let parent = ep.av_insert(&read_addr(&dir, "parent")).unwrap();
    let mut buf = OwnedBuf::zeroed(8);
    let mut out = OwnedBuf::zeroed(8);
    let mut cq = Vec::new();
    let t = Instant::now();
    while t.elapsed() < LIMIT && !dir.join("stop").exists() {
        ep.recv(buf.buf(), RecvOpts { src: Some(parent), context: 1, ..RecvOpts::default() }).unwrap();
        loop {
            ep.progress(0);
            ep.poll_cq(&mut cq, usize::MAX);
            if cq.iter().any(|e| e.context == 1) || dir.join("stop").exists() || t.elapsed() > LIMIT {
                break;
            }
        }
        cq.retain(|e| e.context != 1);
        out.bytes_mut().copy_from_slice(buf.bytes());
        ep.send(parent, out.buf(), SendOpts { context: 2, ..SendOpts::default() }).unwrap();
    }
}

fn spawn(dir: &Path, name: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_echo", "--nocapture", "--test-threads=1"])
        .env("RDM4_CHILD_ROLE", "echo")
        .env("RDM4_CHILD_DIR", dir)
        .env("RDM4_CHILD_NAME", name)
        .env("RDM4_UDP_ADDR", "127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// One round trip to `to`: an 8-byte ping and its echo.
fn ping(ep: &mut Endpoint<UdpDevice>, to: u32, k: u64) {
    let mut out = OwnedBuf::from_slice(&k.to_le_bytes());
    let mut back = OwnedBuf::zeroed(8);
    ep.recv(back.buf(), RecvOpts { src: Some(to), context: 100, ..RecvOpts::default() }).unwrap();
    ep.send(to, out.buf(), SendOpts { context: 101, ..SendOpts::default() }).unwrap();
    let mut cq: Vec<Cqe> = Vec::new();
    let t = Instant::now();
    while cq.len() < 2 {
        assert!(t.elapsed() < LIMIT, "ping {k}: {cq:?}");
        ep.progress(0);
        ep.poll_cq(&mut cq, usize::MAX);
    }
    assert!(cq.iter().all(|e| e.status == Status::Success), "{cq:?}");
    assert_eq!(u64::from_le_bytes(back.bytes().try_into().unwrap()), k);
}

/// How a victim leaves: killed (its port closes) or stopped (silent, its
/// port still open, as a host that fell off the network).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Leave {
    Killed,
    Stopped,
}

/// Runs the parent of a scenario: pings the victim and the survivor, makes
/// the victim leave, sends it a long message, and checks that the send ends
/// with `PeerUnreachable` in `expect` (its start counted from the start of
/// the victim's last ping, its end from the send), later sends fail at
/// once, and the
/// survivor keeps working. Returns how long the loss took.
fn lose_a_peer(how: Leave, giveup: Duration, expect: std::ops::Range<Duration>) -> Duration {
    let dir = std::env::temp_dir().join(format!("rdm4udp{how:?}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = UdpConfig { addr: Some("127.0.0.1".parse().unwrap()), giveup, ..UdpConfig::default() };
    let mut ep = Endpoint::new(UdpDevice::open_with(cfg).unwrap(), Config::default());
    publish(&dir, "parent", &ep.addr());
    let mut victim = spawn(&dir, "victim");
    let mut survivor = spawn(&dir, "survivor");
    let to_victim = ep.av_insert(&read_addr(&dir, "victim")).unwrap();
    let to_survivor = ep.av_insert(&read_addr(&dir, "survivor")).unwrap();
    let mut last_ping_start = Instant::now();
    for k in 0..10 {
        ping(&mut ep, to_survivor, 100 + k);
        last_ping_start = Instant::now();
        ping(&mut ep, to_victim, k);
    }
    // Silence is counted from the last datagram heard from the victim,
    // which came after the start of its last ping: the loss comes at least
    // the give-up time after that start.
    let heard_after = last_ping_start;
    let pid = victim.id() as libc::pid_t;
    // SAFETY: signals to the child this test started.
    unsafe { libc::kill(pid, if how == Leave::Killed { libc::SIGKILL } else { libc::SIGSTOP }) };
    if how == Leave::Stopped {
        // Stopped for sure before anything is sent to it.
        let t = Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| st.contains(") T ")) {
            assert!(t.elapsed() < LIMIT, "the victim never stopped");
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    // A killed victim is reaped (its port closes with it); a stopped one
    // after the scenario.
    let mut victim = if how == Leave::Killed {
        let _ = victim.wait();
        None
    } else {
        Some(victim)
    };
    // A long message to the peer that left: it ends with an error.
    let mut long = OwnedBuf::from_slice(&vec![1u8; 1 << 20]);
    ep.send(to_victim, long.buf(), SendOpts { context: 7, ..SendOpts::default() }).unwrap();
    let t = Instant::now();
    let mut cq = Vec::new();
    while !cq.iter().any(|e: &Cqe| e.context == 7) {
        assert!(t.elapsed() < expect.end, "{how:?}: the peer was not given up in {:?}: {cq:?}", expect.end);
        ep.progress(0);
        ep.poll_cq(&mut cq, usize::MAX);
    }
    let took = t.elapsed();
    let since_heard = heard_after.elapsed();
    let e = cq.iter().find(|e| e.context == 7).unwrap();
    assert_eq!(e.status, Status::PeerUnreachable, "{how:?}: {e:?} after {took:?}");
    assert!(
        took < expect.end && since_heard >= expect.start,
        "{how:?}: given up after {took:?} ({since_heard:?} after the last ping began), outside {expect:?}"
    );
    let mut small = OwnedBuf::from_slice(b"x");
    assert_eq!(ep.send(to_victim, small.buf(), SendOpts::default()), Err(Status::PeerUnreachable));
    // The survivor is unaffected.
    for k in 0..10 {
        ping(&mut ep, to_survivor, 200 + k);
    }
    if let Some(v) = &mut victim {
        let _ = v.kill();
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let _ = v.wait();
    }
    std::fs::write(dir.join("stop"), b"1").unwrap();
    let _ = survivor.wait();
    let _ = std::fs::remove_dir_all(&dir);
    took
}

#[test]
fn a_killed_peer_is_given_up_at_once_when_its_host_reports_its_port_closed() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    // A give-up time far beyond the test: the port unreachable decides.
    let took = lose_a_peer(Leave::Killed, Duration::from_secs(60), Duration::ZERO..Duration::from_secs(1));
    println!("the killed peer was given up after {took:?}");
}

#[test]
fn a_silent_peer_is_given_up_after_the_giveup_time_and_not_before() {
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let giveup = Duration::from_millis(500);
    let took = lose_a_peer(Leave::Stopped, giveup, giveup..giveup * 6);
    println!("the stopped peer was given up after {took:?} (give-up time {giveup:?})");
}

/// The application of a C API endpoint over udp sleeps on its descriptor
/// (`rdm4_trywait`, then `poll(2)`) while a long send awaits a peer that
/// stops (SIGSTOP) after it acknowledged the send's first packets: nothing
/// of ours is unacknowledged, only the operation awaits the peer. The
/// responder keeps the engine's last answer on which peers are awaited
/// while the application sleeps (`DevEvent::Awaiting`), probes the silent
/// peer, gives it up after the give-up time and wakes the descriptor: the
/// send ends with `RDM4_EPEER`.
#[test]
fn a_peer_that_stops_while_the_application_sleeps_on_its_descriptor_is_given_up_and_the_sleeper_woken() {
    use rdm4::capi::*;
    if !env("RDM4_CHILD_ROLE").is_empty() {
        return;
    }
    let ok = |what: &str, rc: i32| assert!(rc >= 0, "{what}: {rc}");
    let dir = std::env::temp_dir().join(format!("rdm4udpsleep{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Read at open (tests of this file open their own devices otherwise).
    std::env::set_var("RDM4_UDP_GIVEUP_MS", "500");
    let mut attr = std::mem::MaybeUninit::<rdm4_ep_attr>::uninit();
    ok("attr", rdm4_ep_attr_init(attr.as_mut_ptr()));
    // SAFETY: initialised by rdm4_ep_attr_init.
    let mut attr = unsafe { attr.assume_init() };
    attr.device = RDM4_DEVICE_UDP;
    attr.progress = RDM4_PROGRESS_MANUAL;
    attr.threading = RDM4_THREAD_SINGLE;
    std::env::set_var("RDM4_UDP_ADDR", "127.0.0.1");
    let mut ep = std::ptr::null_mut();
    ok("open", rdm4_ep_open(&attr, &mut ep));
    let mut name = [0u8; 32];
    let mut len = name.len();
    ok("getname", rdm4_ep_getname(ep, name.as_mut_ptr().cast(), &mut len));
    publish(&dir, "parent", &RawAddr::from_bytes(&name).unwrap());
    let mut victim = spawn(&dir, "victim");
    let vname = read_addr(&dir, "victim").to_bytes();
    let mut to = 0;
    ok("av", rdm4_av_insert(ep, vname.as_ptr().cast(), 1, &mut to));
    // SAFETY: rdm4_cqe is plain data.
    let mut cq = vec![unsafe { std::mem::zeroed::<rdm4_cqe>() }; 16];
    let poll_for = |ep, cq: &mut Vec<rdm4_cqe>, ctx: usize, within: Duration| -> Option<rdm4_cqe> {
        // Polls at least once.
        let t = Instant::now();
        loop {
            let n = rdm4_poll(ep, cq.as_mut_ptr(), cq.len());
            assert!(n >= 0, "poll: {n}");
            if let Some(e) = cq[..n as usize].iter().find(|e| e.context as usize == ctx) {
                return Some(*e);
            }
            if t.elapsed() >= within {
                return None;
            }
        }
    };
    // A round trip: the victim answers (handshakes done both ways).
    let (mut out, mut back) = (7u64.to_le_bytes(), [0u8; 8]);
    ok("recv", rdm4_recv(ep, back.as_mut_ptr().cast(), 8, to, 1 as _));
    ok("send", rdm4_send(ep, out.as_mut_ptr().cast(), 8, to, 2 as _));
    assert!(poll_for(ep, &mut cq, 1, LIMIT).is_some_and(|e| e.status == 0), "no echo");
    assert_eq!(back, out);
    // A long tagged message that the victim never receives (it posts
    // untagged 8-byte receives): its first packets are acknowledged, then
    // it waits for the victim's engine.
    let long = vec![3u8; 1 << 20];
    ok("tsend", rdm4_tsend(ep, long.as_ptr().cast(), long.len(), to, 99, 7 as _));
    assert!(poll_for(ep, &mut cq, 7, Duration::from_millis(100)).is_none(), "the long send completed");
    let pid = victim.id() as libc::pid_t;
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| st.contains(") T ")) {
        assert!(t.elapsed() < LIMIT, "the victim never stopped");
        std::thread::sleep(Duration::from_micros(100));
    }
    // The application sleeps on its descriptor, each time for up to 5 s,
    // until the send ends.
    let fd = rdm4_ep_fd(ep);
    assert!(fd >= 0, "rdm4_ep_fd: {fd}");
    let (t, mut sleeps) = (Instant::now(), 0);
    let done = loop {
        assert!(t.elapsed() < Duration::from_secs(8), "the send never ended ({sleeps} sleeps)");
        if let Some(e) = poll_for(ep, &mut cq, 7, Duration::ZERO) {
            break e;
        }
        if rdm4_trywait(ep) != Status::Success.code() {
            continue;
        }
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 5000) };
        sleeps += 1;
    };
    let took = t.elapsed();
    assert_eq!(done.status, Status::PeerUnreachable.code(), "the send ended with {}", done.status);
    // Given up after 500 ms of silence, with probes every 125 ms: well
    // within 5 s, so the sleeper was woken for it, not by its timeout.
    assert!(took < Duration::from_secs(4), "given up after {took:?} ({sleeps} sleeps)");
    println!("the stopped peer was given up {took:?} after the application went to sleep ({sleeps} sleeps)");
    let _ = victim.kill();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let _ = victim.wait();
    ok("close", rdm4_ep_close(ep));
    let _ = std::fs::remove_dir_all(&dir);
}
