//! Streams 8-byte tagged messages between two shm endpoints of one process
//! through the public C API, in rounds of `window`: the receiver posts
//! `window` receives, the sender `window` sends, then each polls its
//! completions. No idle polling, so instruction counts per message are
//! exact and do not drift with the machine's speed (run twice under
//! callgrind with different N and divide the difference by the difference
//! of N; `--toggle-collect=rdm4_*` counts the library alone):
//!
//! ```sh
//! cargo build --release --example capi_pair
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/capi_pair 100000
//! ```
//!
//! A second argument `directed` makes the receives name their source (as
//! `rdm4-perf` does) instead of taking any; `idle` adds 16 polls that find
//! nothing per endpoint and round (the cost of an empty poll: the
//! difference to a plain run, divided by 32 × rounds); `ahead` keeps the
//! sender one message ahead of the receives (as in `rdm4-perf`'s stream,
//! where the sender runs ahead): every poll of the receiver finds one
//! message more than it has receives for; `inject` sends with
//! `rdm4_tinject`, which leaves no completion to poll; `write_now` makes
//! the N operations 8-byte `rdm4_write_now`s into memory of the peer's
//! `rdm4_mr_alloc` (one message first, for the handshake), the
//! one-sided put as `rdm4-perf --alloc --now` makes it.

use std::ffi::c_void;

use rdm4::capi::*;

mod common;
use common::{ok, open};

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mode = std::env::args().nth(2).unwrap_or_default();
    let (directed, idle, ahead, inject) = (mode == "directed", mode == "idle", mode == "ahead", mode == "inject");
    // A third argument sets the round's size (default 16; 1: every
    // message polled on its own, as in a ping-pong).
    let window: usize = std::env::args().nth(3).and_then(|a| a.parse().ok()).filter(|&w| w > 0).unwrap_or(16);
    let (a, a_name) = open();
    let (b, b_name) = open();
    let (mut to_b, mut to_a) = (0, 0);
    ok("av", rdm4_av_insert(a, b_name.as_ptr().cast(), 1, &mut to_b));
    ok("av", rdm4_av_insert(b, a_name.as_ptr().cast(), 1, &mut to_a));
    let src = if directed { to_a } else { RDM4_ADDR_UNSPEC };
    let s = [7u8; 8];
    if mode == "write_now" {
        write_now(a, b, to_b, n);
        rdm4_ep_close(a);
        rdm4_ep_close(b);
        return;
    }
    let mut r = vec![[0u8; 8]; window];
    // SAFETY: rdm4_cqe is plain data.
    let mut cq = vec![unsafe { std::mem::zeroed::<rdm4_cqe>() }; window];
    // The first message carries the handshake: not part of the count.
    for round in 0..n.div_ceil(window) + 1 {
        let k = if round == 0 { 1 } else { window };
        for buf in r.iter_mut().take(k) {
            ok("trecv", rdm4_trecv(b, buf.as_mut_ptr().cast(), 8, src, 1, 0, std::ptr::null_mut()));
        }
        // In `ahead` mode the first round's send is doubled: one message
        // more than receives is in flight from then on (and one is left).
        let sends = if ahead && round == 0 { 2 } else { k };
        for _ in 0..sends {
            if inject {
                ok("tinject", rdm4_tinject(a, s.as_ptr().cast(), 8, to_b, 1));
            } else {
                ok("tsend", rdm4_tsend(a, s.as_ptr().cast(), 8, to_b, 1, std::ptr::null_mut::<c_void>()));
            }
        }
        let want_a = if inject { 0 } else { sends };
        let (mut got_b, mut got_a) = (0, 0);
        for _ in 0..1000 {
            got_b += ok("poll b", rdm4_poll(b, cq.as_mut_ptr(), window)) as usize;
            got_a += ok("poll a", rdm4_poll(a, cq.as_mut_ptr(), window)) as usize;
            if got_a == want_a && got_b == k {
                break;
            }
        }
        assert!(got_a == want_a && got_b == k, "round {round}: {got_a}/{got_b} of {k} completions");
        for _ in 0..if idle { 16 } else { 0 } {
            assert_eq!(ok("poll b", rdm4_poll(b, cq.as_mut_ptr(), window)), 0);
            assert_eq!(ok("poll a", rdm4_poll(a, cq.as_mut_ptr(), window)), 0);
        }
    }
    assert!(r.iter().all(|m| m == &s));
    rdm4_ep_close(a);
    rdm4_ep_close(b);
}

/// `n` 8-byte `rdm4_write_now`s from `a` into memory that `b` allocated,
/// after one message from `a` to `b` (its handshake tells `a` what `b`
/// offers).
fn write_now(a: *mut rdm4_ep, b: *mut rdm4_ep, to_b: rdm4_addr, n: usize) {
    let (mut region, mut key) = (std::ptr::null_mut::<c_void>(), 0u64);
    ok("mr_alloc", rdm4_mr_alloc(b, 4096, RDM4_ACCESS_REMOTE_WRITE, &mut region, &mut key));
    let s = [7u8; 8];
    let mut r = [0u8; 8];
    // SAFETY: rdm4_cqe is plain data.
    let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 4];
    ok("trecv", rdm4_trecv(b, r.as_mut_ptr().cast(), 8, RDM4_ADDR_UNSPEC, 1, 0, std::ptr::null_mut()));
    ok("tsend", rdm4_tsend(a, s.as_ptr().cast(), 8, to_b, 1, std::ptr::null_mut()));
    let (mut got_a, mut got_b) = (0, 0);
    for _ in 0..1000 {
        got_b += ok("poll b", rdm4_poll(b, cq.as_mut_ptr(), 4));
        got_a += ok("poll a", rdm4_poll(a, cq.as_mut_ptr(), 4));
        if got_a == 1 && got_b == 1 {
            break;
        }
    }
    assert!(got_a == 1 && got_b == 1, "the first message: {got_a}/{got_b}");
    let raddr = region as usize as u64;
    for i in 0..n {
        let v = (i as u64).to_le_bytes();
        ok("write_now", rdm4_write_now(a, v.as_ptr().cast(), 8, to_b, raddr, key));
    }
    // SAFETY: b's allocation of 4096 bytes, written by the last write.
    let last = unsafe { region.cast::<u64>().read_volatile() };
    assert_eq!(last, n.saturating_sub(1) as u64);
}
