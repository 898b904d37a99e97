//! rdm4-soak across two "hosts" (issue 41, "Soak"): two network namespaces
//! joined by a veth pair, two processes in each, all four on the default
//! device (auto) for 20 s with faults injected on udp. Each host has a
//! segment prefix of its own, so that the processes of one host reach each
//! other by shm and the other host's by udp, as on two machines (the
//! counters must show both). The coordinator's side reports all four
//! ranks: every operation kind, bytes verified, no error, an exact atomic
//! total. Skipped with a note where namespaces cannot be made (not root).

#[path = "common_netns/mod.rs"]
mod common_netns;
#[path = "common_soak/mod.rs"]
mod common_soak;

use std::net::TcpListener;
use std::process::{Command, Stdio};

use common_netns::Netns;
use common_soak::field;

/// A port free on this host now (the coordinator's, in the first
/// namespace, where nothing else listens).
fn some_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn soak_across_two_namespaces_auto_with_faults_20s() {
    let Some(net) = Netns::pair("sk", "10.81.0", 1500) else {
        println!("soak_netns: cannot make network namespaces here (needs root): skipped");
        return;
    };
    let port = some_port();
    let id = std::process::id();
    let soak = env!("CARGO_BIN_EXE_rdm4-soak");
    let common = ["--procs", "4", "--procs-here", "2", "--seconds", "20", "--reopen-every", "5", "--timeout", "90"];
    let host = |h: usize, extra: &[String]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &net.ns[h], soak]).args(common).args(["--device", "auto", "--faults"]).args(extra);
        c.env("RDM4_SHM_PREFIX", format!("soakns{id}h{h}"))
            .env("RDM4_UDP_ADDR", format!("10.81.0.{}", h + 1))
            .env_remove("RDM4_UDP_FAULTS")
            .env_remove("RDM4_DEVICE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let first = host(0, &["--listen".into(), format!("10.81.0.1:{port}")]);
    let second = host(1, &["--rank-base".into(), "2".into(), "--coordinator".into(), format!("10.81.0.1:{port}")]);
    let (a, b) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
    let (out_a, out_b) = (String::from_utf8_lossy(&a.stdout), String::from_utf8_lossy(&b.stdout));
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    println!("host 0:\n{out_a}\nhost 1:\n{out_b}");
    assert!(a.status.success(), "host 0: {}\n{out_a}\n{}", a.status, err(&a));
    assert!(b.status.success(), "host 1: {}\n{out_b}\n{}", b.status, err(&b));
    assert!(out_b.contains("rdm4-soak: ok, 2 processes here exited cleanly"), "{out_b}");
    let total = out_a.lines().find(|l| l.starts_with("total: ")).expect("a total line on the coordinator's side");
    for (k, v) in total["total: ".len()..].split_whitespace().filter_map(|w| w.split_once('=')) {
        if k != "errors" {
            assert!(v.parse::<u64>().unwrap() > 0, "no {k}: {total}");
        }
    }
    assert_eq!(field(total, "errors"), 0, "{total}");
    assert!(field(total, "retransmits") > 0, "faults were injected on udp: {total}");
    let atomic = out_a.lines().find(|l| l.starts_with("atomic: ")).expect("an atomic line");
    assert!(field(atomic, "counter") > 0 && field(atomic, "counter") == field(atomic, "expected"), "{atomic}");
    let ranks: Vec<&str> = out_a.lines().filter(|l| l.starts_with("rank ")).collect();
    assert_eq!(ranks.len(), 4, "the coordinator reports every rank: {out_a}");
    for r in ranks {
        // Both devices open in every process, and udp carried traffic
        // (what it retransmitted) in every one.
        assert!(r.contains(" device=shm+udp "), "{r}");
        assert!(field(r, "retransmits") > 0 && field(r, "errors") == 0, "{r}");
        // Memory flat after the middle of the run (as tests/soak.rs).
        let mid = field(r, "hwm_mid_kib");
        assert!(field(r, "rss_end_kib") <= mid + (16 << 10) && field(r, "hwm_kib") <= mid + (16 << 10), "{r}");
    }
    drop(net);
}
