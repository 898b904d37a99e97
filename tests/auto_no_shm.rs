//! A process whose shared memory cannot open still talks to everyone by
//! udp (issue 39), through the C API on the default device (auto).
//!
//! The test process opens an endpoint (shm and udp). It starts this binary
//! again in a mount namespace of its own (`unshare --mount`) whose
//! `/dev/shm` is a tmpfs of 8 KiB: no room for a segment, so that child's
//! auto endpoint opens with udp alone, as on a host whose `/dev/shm` is
//! full. The two exchange names through files, then the child sends
//! messages of 8 B to 4 MiB, receives them back, writes and reads the
//! parent's registered memory while the parent sleeps without calling the
//! library (its responder serves them), and adds to a counter in it with
//! 100 fetch-adds while the parent polls; every byte and every old value
//! is checked. The parent's
//! name carries its shm locator, which the child cannot use: both sides go
//! by udp, which their counters show.
//!
//! Skipped, with a message saying why, where the mount namespace cannot be
//! made (not root, no `unshare` or `mount`).

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdm4::capi::*;

const SIZES: [usize; 3] = [8, 100_000, 4 << 20];
const REGION: usize = 64 << 10;
const ADDS: u64 = 100;
const BOUND: Duration = Duration::from_secs(60);

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed * 7) as u8).collect()
}

/// An operation's context: a number.
fn ctx(n: usize) -> *mut c_void {
    n as *mut c_void
}

fn ok(what: &str, rc: i32) {
    assert_eq!(rc, 0, "{what}: {rc}");
}

fn open() -> *mut rdm4_ep {
    let mut ep = std::ptr::null_mut();
    ok("rdm4_ep_open", rdm4_ep_open(std::ptr::null(), &mut ep));
    ep
}

fn devices(ep: *mut rdm4_ep) -> (u32, u64) {
    // SAFETY: plain data, zero is valid for every field.
    let mut info: rdm4_ep_info = unsafe { std::mem::zeroed() };
    info.size = std::mem::size_of::<rdm4_ep_info>();
    ok("rdm4_ep_query", rdm4_ep_query(ep, &mut info));
    (info.device, info.devices)
}

fn name(ep: *mut rdm4_ep) -> [u8; RDM4_ADDR_LEN] {
    let mut n = [0u8; RDM4_ADDR_LEN];
    let mut len = n.len();
    ok("rdm4_ep_getname", rdm4_ep_getname(ep, n.as_mut_ptr().cast(), &mut len));
    n
}

fn insert(ep: *mut rdm4_ep, name: &[u8]) -> rdm4_addr {
    let mut a = 0;
    assert_eq!(rdm4_av_insert(ep, name.as_ptr().cast(), 1, &mut a), 1, "rdm4_av_insert");
    a
}

/// The named counter of `ep`.
fn counter(ep: *mut rdm4_ep, want: &str) -> u64 {
    let mut names = [std::ptr::null(); 512];
    let mut values = [0u64; 512];
    let n = rdm4_counters(ep, 0, names.as_mut_ptr(), values.as_mut_ptr(), names.len());
    assert!(n > 0, "rdm4_counters: {n}");
    (0..n as usize)
        // SAFETY: names the library returned, NUL-terminated and static.
        .find(|&i| unsafe { std::ffi::CStr::from_ptr(names[i]) }.to_str() == Ok(want))
        .map(|i| values[i])
        .unwrap_or_else(|| panic!("no counter {want}"))
}

/// Polls `ep` until the completion of `context` (its status and length).
fn wait(ep: *mut rdm4_ep, context: usize) -> (i32, u64) {
    let t = Instant::now();
    loop {
        // SAFETY: plain data.
        let mut cqe: [rdm4_cqe; 8] = unsafe { std::mem::zeroed() };
        let n = rdm4_poll(ep, cqe.as_mut_ptr(), cqe.len());
        assert!(n >= 0, "rdm4_poll: {n}");
        if let Some(c) = cqe[..n as usize].iter().find(|c| c.context as usize == context) {
            return (c.status, c.len);
        }
        assert!(t.elapsed() < BOUND, "no completion of {context} within {BOUND:?}");
    }
}

/// What each side publishes: its name, then (the parent) its region.
fn publish(dir: &Path, who: &str, bytes: &[u8]) {
    let tmp = dir.join(format!("{who}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(tmp, dir.join(who)).unwrap();
}

fn read_card(dir: &Path, who: &str) -> Vec<u8> {
    let t = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(dir.join(who)) {
            return b;
        }
        assert!(t.elapsed() < BOUND, "no card from {who}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// The child: its endpoint has udp alone; every operation towards the
/// parent, checked.
#[test]
fn child_without_shm() {
    let Some(dir) = env("RDM4_NOSHM_DIR").map(PathBuf::from) else { return };
    let ep = open();
    assert_eq!(devices(ep), (RDM4_DEVICE_AUTO, 2), "the child's auto endpoint has udp alone");
    publish(&dir, "child", &name(ep));
    let card = read_card(&dir, "parent");
    let parent = insert(ep, &card[..RDM4_ADDR_LEN]);
    let raddr = u64::from_le_bytes(card[32..40].try_into().unwrap());
    let key = u64::from_le_bytes(card[40..48].try_into().unwrap());
    // Messages both ways.
    for (i, &len) in SIZES.iter().enumerate() {
        let out = pattern(len, i as u64);
        ok("rdm4_tsend", rdm4_tsend(ep, out.as_ptr().cast(), len, parent, i as u64, ctx(1)));
        assert_eq!(wait(ep, 1).0, 0, "send of {len} B");
        let mut back = vec![0u8; len];
        let c = ctx(2);
        ok("rdm4_trecv", rdm4_trecv(ep, back.as_mut_ptr().cast(), len, parent, 100 + i as u64, 0, c));
        assert_eq!(wait(ep, 2), (0, len as u64), "receive of {len} B");
        assert!(back == pattern(len, 100 + i as u64), "{len} B back: every byte");
    }
    // RMA into the parent's registered region, and back.
    let data = pattern(REGION - 8, 7);
    ok("rdm4_write", rdm4_write(ep, data.as_ptr().cast(), data.len(), parent, raddr + 8, key, ctx(3)));
    assert_eq!(wait(ep, 3).0, 0, "write");
    let mut read = vec![0u8; data.len()];
    ok("rdm4_read", rdm4_read(ep, read.as_mut_ptr().cast(), read.len(), parent, raddr + 8, key, ctx(4)));
    assert_eq!(wait(ep, 4).0, 0, "read");
    assert!(read == data, "read back: every byte");
    publish(&dir, "rma", b"1");
    // Fetch-adds on the counter at the region's start: old values 0..ADDS.
    for k in 0..ADDS {
        let (one, mut old) = (1u64, u64::MAX);
        let rc = rdm4_fetch_atomic(
            ep,
            (&one as *const u64).cast(),
            1,
            (&mut old as *mut u64).cast(),
            RDM4_UINT64,
            RDM4_SUM,
            parent,
            raddr,
            key,
            ctx(5),
        );
        ok("rdm4_fetch_atomic", rc);
        assert_eq!(wait(ep, 5).0, 0, "fetch-add {k}");
        assert_eq!(old, k, "fetch-add {k}: the old value");
    }
    assert!(counter(ep, "udp_datagrams_sent") > 0, "the child went by udp");
    publish(&dir, "done", b"1");
    ok("rdm4_ep_close", rdm4_ep_close(ep));
}

#[test]
fn a_process_whose_shm_cannot_open_talks_to_everyone_by_udp() {
    if env("RDM4_NOSHM_DIR").is_some() {
        return; // the child's run of this binary
    }
    // SAFETY: no arguments.
    let have = |tool: &str| Command::new(tool).arg("--version").output().is_ok();
    if unsafe { libc::geteuid() } != 0 || !have("unshare") || !have("mount") {
        eprintln!("skipped: needs root, unshare(1) and mount(8) for a mount namespace with a full /dev/shm");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rdm4-noshm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = format!("rdm4-noshm-{}", std::process::id());
    std::env::set_var("RDM4_SHM_PREFIX", &prefix);
    std::env::set_var("RDM4_UDP_ADDR", "127.0.0.1");
    std::env::remove_var("RDM4_DEVICE");
    let ep = open();
    assert_eq!(devices(ep), (RDM4_DEVICE_AUTO, 3), "the default device is auto, with shm and udp");
    let mut region = vec![0u64; REGION / 8];
    let mut key = 0;
    let access = RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE;
    ok("rdm4_mr_reg", rdm4_mr_reg(ep, region.as_mut_ptr().cast(), REGION, access, &mut key));
    let mut card = name(ep).to_vec();
    card.extend_from_slice(&(region.as_ptr() as u64).to_le_bytes());
    card.extend_from_slice(&key.to_le_bytes());
    publish(&dir, "parent", &card);

    let exe = std::env::current_exe().unwrap();
    let script = "mount -t tmpfs -o size=8k rdm4-full /dev/shm && exec \"$0\" --exact child_without_shm --nocapture";
    let mut child = Command::new("unshare")
        .args(["--mount", "sh", "-c", script])
        .arg(&exe)
        .env("RDM4_NOSHM_DIR", &dir)
        .spawn()
        .expect("start the child");

    let peer = insert(ep, &read_card(&dir, "child"));
    for (i, &len) in SIZES.iter().enumerate() {
        let mut got = vec![0u8; len];
        let c = ctx(1);
        ok("rdm4_trecv", rdm4_trecv(ep, got.as_mut_ptr().cast(), len, peer, i as u64, 0, c));
        assert_eq!(wait(ep, 1), (0, len as u64), "receive of {len} B");
        assert!(got == pattern(len, i as u64), "{len} B: every byte");
        let out = pattern(len, 100 + i as u64);
        ok("rdm4_tsend", rdm4_tsend(ep, out.as_ptr().cast(), len, peer, 100 + i as u64, ctx(2)));
        assert_eq!(wait(ep, 2).0, 0, "send of {len} B");
    }
    // The child's writes and reads of this process's memory go by udp's
    // RDMA, which this endpoint's responder serves while the process makes
    // no call at all (it sleeps, as a program computing or waiting
    // elsewhere would).
    let t = Instant::now();
    while !dir.join("rma").exists() {
        assert!(t.elapsed() < BOUND, "the child's RMA did not complete while this process was away");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Its atomics are the emulated protocol: they need this endpoint's
    // own progress.
    while !dir.join("done").exists() {
        // SAFETY: plain data.
        let mut cqe: [rdm4_cqe; 8] = unsafe { std::mem::zeroed() };
        rdm4_poll(ep, cqe.as_mut_ptr(), cqe.len());
        assert!(t.elapsed() < BOUND, "the child did not finish");
        if let Ok(Some(st)) = child.try_wait() {
            assert!(st.success(), "the child failed: {st}");
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "the child failed: {status}");
    // Written by the child's RMA, behind the compiler's back.
    // SAFETY: reads of the live vector's own elements.
    let region: Vec<u64> =
        (0..region.len()).map(|i| unsafe { std::ptr::read_volatile(region.as_ptr().add(i)) }).collect();
    let bytes: Vec<u8> = region.iter().flat_map(|w| w.to_le_bytes()).collect();
    assert!(bytes[8..] == pattern(REGION - 8, 7)[..], "the child's write: every byte");
    assert_eq!(region[0], ADDS, "the counter: every fetch-add once");
    assert!(counter(ep, "udp_datagrams_sent") > 0, "the parent answered by udp");
    ok("rdm4_mr_close", rdm4_mr_close(ep, key));
    ok("rdm4_ep_close", rdm4_ep_close(ep));
    let _ = std::fs::remove_dir_all(&dir);
}
