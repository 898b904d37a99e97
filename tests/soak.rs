//! rdm4-soak (issue 41) for 20 s on each device: shm, udp with injected
//! faults, auto; and 10 s of two processes whose large reads are helped,
//! on shm and on auto; one at a time (80 s in all). Each run must exit 0 and
//! report every operation kind, bytes verified, an exact atomic total,
//! and memory that did not grow after the middle of the run: the end's
//! resident memory and the final peak are within 16 MiB of the peak at
//! the middle. (The peak, not the middle sample: a reopened endpoint's
//! shm rings start small and grow again, so two samples of one process
//! differ by tens of MiB either way, leak or not.)

#[path = "common_soak/mod.rs"]
mod common_soak;

use std::process::Command;
use std::sync::Mutex;

use common_soak::field;

/// The runs take the machine's cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const KINDS: [&str; 21] = [
    "send",
    "tsend",
    "senddata",
    "inject",
    "sendmsg",
    "dc",
    "recv",
    "claim",
    "discard",
    "probe",
    "cancel",
    "write",
    "writedata",
    "write_alloc",
    "read",
    "read_alloc",
    "atomic",
    "compute",
    "wait",
    "barrier",
    "reopen",
];

/// Growth allowed after the middle of the run.
const GROWTH_KIB: u64 = 16 << 10;

fn soak(device: &str, faults: bool) {
    soak_with(device, faults, 4, "20", &[]);
}

/// A run of `procs` processes for `seconds` with `envs` set; its stderr.
fn soak_with(device: &str, faults: bool, procs: usize, seconds: &str, envs: &[(&str, &str)]) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdm4-soak"));
    let n = procs.to_string();
    cmd.args(["--procs", &n, "--seconds", seconds, "--device", device, "--reopen-every", "5", "--timeout", "60"]);
    if faults {
        cmd.arg("--faults");
    }
    let out = cmd
        .env("RDM4_SHM_PREFIX", format!("soak{}{device}{procs}", std::process::id()))
        .env_remove("RDM4_UDP_FAULTS")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(out.status.success(), "{device}: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let total = stdout.lines().find(|l| l.starts_with("total: ")).expect("a total line");
    // These, and any kind added later.
    for k in KINDS {
        field(total, k);
    }
    for (k, v) in total["total: ".len()..].split_whitespace().filter_map(|w| w.split_once('=')) {
        if !["errors", "retransmits"].contains(&k) {
            assert!(v.parse::<u64>().unwrap() > 0, "{device}: no {k}: {total}");
        }
    }
    assert_eq!(field(total, "errors"), 0, "{total}");
    let atomic = stdout.lines().find(|l| l.starts_with("atomic: ")).expect("an atomic line");
    assert!(field(atomic, "counter") > 0 && field(atomic, "counter") == field(atomic, "expected"), "{atomic}");
    assert!(atomic.ends_with(" ok"), "{atomic}");
    let ranks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("rank ")).collect();
    assert_eq!(ranks.len(), procs, "{stdout}");
    for r in ranks {
        let mid = field(r, "hwm_mid_kib");
        assert!(field(r, "rss_start_kib") > 0 && mid > 0, "{r}");
        assert!(field(r, "rss_end_kib") <= mid + GROWTH_KIB, "{device}: resident memory grew: {r}");
        assert!(field(r, "hwm_kib") <= mid + GROWTH_KIB, "{device}: peak memory grew: {r}");
    }
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn soak_shm_20s() {
    soak("shm", false);
}

#[test]
fn soak_udp_with_faults_20s() {
    soak("udp", true);
}

#[test]
fn soak_auto_20s() {
    soak("auto", false);
}

/// Two processes (not crowded on two CPUs), every peer taken as far
/// (`RDM4_SHM_FAR_NS=0`: messages from 64 KiB by long-read), so that
/// large reads ask their owner for help (`src/device/shm/help.rs`) among
/// the soak's reopens, compute phases and sleeps: every byte checked as
/// above, and owners did copy chunks (each endpoint's counts at close,
/// `RDM4_LOG=info`).
#[test]
fn soak_shm_two_handed_reads_10s() {
    two_handed("shm");
}

/// The same over auto, whose peers on this host go by its shm device.
#[test]
fn soak_auto_two_handed_reads_10s() {
    two_handed("auto");
}

fn two_handed(device: &str) {
    let stderr = soak_with(device, false, 2, "10", &[("RDM4_SHM_FAR_NS", "0"), ("RDM4_LOG", "info")]);
    let (mut asked, mut by_owners) = (0u64, 0u64);
    for l in stderr.lines().filter_map(|l| l.split_once("two-handed reads: ").map(|(_, r)| r)) {
        let n: Vec<u64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        asked += n[0];
        by_owners += n[1];
    }
    assert!(asked > 0 && by_owners > 0, "{device}: {asked} asked, {by_owners} chunks by owners\n{stderr}");
}
