//! The measurements of rdm4-perf: timing, ping-pong, streaming and
//! one-sided tests.

use super::*;

/// Timestamps for per-operation latencies. The monotonic clock costs about
/// as much as a poll on some machines (docs/performance.md, "The machine"),
/// so on x86_64 the CPU's time-stamp counter is read instead and converted to
/// time with the rate measured against the monotonic clock over the whole
/// test (Linux uses the same counter as its clock source where it is
/// stable). Elsewhere the monotonic clock is used directly.
pub(super) struct Ticks {
    pub(super) t0: Instant,
    c0: u64,
}

impl Ticks {
    pub(super) fn start() -> Ticks {
        Ticks { t0: Instant::now(), c0: Ticks::now() }
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) fn now() -> u64 {
        // SAFETY: RDTSC has no preconditions on x86_64.
        unsafe { std::arch::x86_64::_rdtsc() }
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn now() -> u64 {
        static T0: once_cell::sync::Lazy<Instant> = once_cell::sync::Lazy::new(Instant::now);
        T0.elapsed().as_nanos() as u64
    }

    /// Converts tick differences in `lat` to microseconds (times `scale`).
    pub(super) fn finish(&self, lat: &mut [f64], scale: f64) {
        let secs = self.t0.elapsed().as_secs_f64();
        let ticks = Ticks::now().wrapping_sub(self.c0).max(1) as f64;
        let us_per_tick = secs * 1e6 / ticks;
        for l in lat {
            *l *= us_per_tick * scale;
        }
    }
}

/// Per-iteration times from one timestamp per iteration, each taken at the
/// same point of its iteration: a sample runs from one timestamp to the
/// next, so the samples add up to the whole timed run and nothing between
/// iterations is left out. One reading instead of two (start and end) also
/// halves what the clock adds (docs/performance.md, "`rdm4-perf`'s method").
#[derive(Default)]
pub(super) struct Laps {
    pub(super) last: u64,
    pub(super) lat: Vec<f64>,
}

impl Laps {
    /// Takes a timestamp; `keep`: the time since the previous one is a
    /// sample.
    pub(super) fn lap(&mut self, keep: bool) {
        let t = Ticks::now();
        if keep {
            self.lat.push(t.wrapping_sub(self.last) as f64);
        }
        self.last = t;
    }
}

/// The pattern seed of streamed messages.
pub(super) const STREAM_SEED: u8 = 0x3C;

pub(super) fn pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

pub(super) fn check(buf: &[u8], seed: u8, what: &str) {
    let mut want = vec![0u8; buf.len()];
    pattern(&mut want, seed);
    if buf != want.as_slice() {
        eprintln!("rdm4-perf: data check failed: {what}");
        std::process::exit(1);
    }
}

/// Iterations and warm-up for a test and size (defaults shrink with size;
/// streaming tests move about 256 MB, so that start-up costs — first
/// registrations, first page pins — do not count).
pub(super) fn counts(o: &Opts, test: &str, size: usize) -> (usize, usize) {
    let streaming = test.ends_with("_bw") || test == "msg_rate";
    let auto = if streaming {
        // About 0.2 s at 10 M msg/s or 10 GB/s: shorter runs at small
        // sizes measure mostly start-up and the machine's jitter.
        (2_000_000_000 / (size + 1000)).clamp(100, 2_000_000)
    } else if test == "tag_lat" || test == "msg_lat" {
        // About 50-80 ms per size (200,000 round trips at 8 B): a few
        // milliseconds, as one-sided tests take, are too short to compare
        // with `ucx_perftest` runs of half a second on a machine whose
        // speed drifts.
        (200_000_000 / (size + 2000)).clamp(20, 200_000)
    } else {
        (20_000_000 / (size + 2000)).clamp(20, 20_000)
    };
    let iters = if o.iters > 0 { o.iters } else { auto };
    let warmup = if o.warmup > 0 || o.iters > 0 { o.warmup } else { iters / 10 };
    (iters, warmup)
}

/// Two-sided ping-pong; `tag` picks tsend/trecv.
pub(super) fn pingpong(c: &mut Ctx, client: bool, size: usize, iters: usize, warmup: usize, tag: bool) -> Result {
    let mut s = vec![0u8; size];
    let mut r = vec![0u8; size];
    let mut res = Result::default();
    let clock = Ticks::start();
    let mut laps = Laps::default();
    for i in 0..warmup + iters {
        let last = i + 1 == warmup + iters;
        // Only the last round trip is checked; writing the pattern every
        // iteration would put a pass over `size` bytes between the server's
        // pong and its next receive, inside the client's timed round trip.
        if client && (i == 0 || last) {
            pattern(&mut s, i as u8);
        }
        let post_recv = |c: &mut Ctx, r: &mut Vec<u8>| {
            let rc = if tag {
                rdm4_trecv(c.ep, r.as_mut_ptr().cast(), size, c.peer, 7, 0, std::ptr::null_mut())
            } else {
                rdm4_recv(c.ep, r.as_mut_ptr().cast(), size, c.peer, std::ptr::null_mut())
            };
            ok("recv", rc);
        };
        let send = |c: &mut Ctx, s: &Vec<u8>| {
            let rc = if tag {
                rdm4_tsend(c.ep, s.as_ptr().cast(), size, c.peer, 7, std::ptr::null_mut())
            } else {
                rdm4_send(c.ep, s.as_ptr().cast(), size, c.peer, std::ptr::null_mut())
            };
            ok("send", rc);
        };
        if client {
            // The ping leaves first and the pong's receive is posted while
            // it travels (as `ucx_perftest` does): the pong cannot be back
            // before a local call returns, and posting first would put
            // that call into every timed round trip.
            send(c, &s);
            // The round trip's timestamp is taken while the ping travels,
            // where its cost stays off the round trip (`ucx_perftest`
            // reads its clock once per iteration, after the pong).
            laps.lap(i > warmup);
            post_recv(c, &mut r);
            c.complete(2);
            if last {
                laps.lap(i >= warmup);
            }
        } else {
            post_recv(c, &mut r);
            c.complete(1);
            send(c, &r);
            c.complete(1);
        }
        if last {
            check(&r, i as u8, "ping-pong payload");
        }
    }
    // One-way latency: half the round trip.
    res.lat = laps.lat;
    clock.finish(&mut res.lat, 0.5);
    res
}

/// Streaming: the client keeps `window` sends in flight, the server as many
/// receives; the server acknowledges the end. As in `osu_bw` and
/// `ucx_perftest`, every operation of the window uses the same buffer (one
/// per side): the test measures the library, not how fast the machine
/// streams `window` distinct buffers through its memory. The receiver checks
/// the buffer after the last message.
pub(super) fn stream(c: &mut Ctx, client: bool, size: usize, iters: usize, warmup: usize, o: &Opts) -> Result {
    let (window, inject) = (o.window, o.inject);
    // The receive buffer is written once too, so that its pages exist
    // before the clock starts; a fresh allocation would time page faults.
    let mut buf = vec![0xA5u8; size];
    if client {
        pattern(&mut buf, STREAM_SEED);
    }
    let mut ack = [0u8; 1];
    // One stream of `warmup + iters` messages with `window` in flight; the
    // clock starts once `warmup` have completed, as `ucx_perftest` times.
    // A warm-up round apart would let the sender run ahead at the boundary
    // and time a receiver that takes each message as unexpected, a state
    // the library leaves by itself (`Endpoint::took_unexpected`) but not
    // at once (docs/performance.md, "`rdm4-perf`'s method").
    let total = warmup + iters;
    // `--inject`: the client's sends are done when the call returns (no
    // completion); it still posts at most `window` between polls.
    let inject = inject && client && size <= 64 * 1024;
    let (mut posted, mut done) = (0usize, 0usize);
    let mut start = None;
    while done < total {
        if start.is_none() && done >= warmup {
            start = Some((Instant::now(), done));
        }
        let pass_end = (posted + window).min(total);
        while posted < pass_end && posted - done < window {
            let ctx = (posted % window) as *mut c_void;
            let rc = if inject {
                rdm4_tinject(c.ep, buf.as_ptr().cast(), size, c.peer, 9)
            } else if client && o.more {
                // The window's sends leave together at the poll below.
                let iov = libc::iovec { iov_base: buf.as_ptr() as *mut c_void, iov_len: size };
                let m = rdm4_msg { iov: &iov, iov_count: 1, addr: c.peer, tag: 9, ignore: 0, context: ctx, data: 0 };
                rdm4_sendmsg(c.ep, &m, RDM4_MSG_TAGGED | RDM4_MSG_MORE)
            } else if client {
                rdm4_tsend(c.ep, buf.as_ptr().cast(), size, c.peer, 9, ctx)
            } else {
                rdm4_trecv(c.ep, buf.as_mut_ptr().cast(), size, c.peer, 9, 0, ctx)
            };
            if rc == RDM4_EAGAIN {
                break;
            }
            ok("stream post", rc);
            posted += 1;
            done += usize::from(inject);
        }
        let k = ok("rdm4_poll", rdm4_poll(c.ep, c.cq.as_mut_ptr(), c.cq.len())) as usize;
        for e in &c.cq[..k] {
            ok("stream operation", e.status);
        }
        done += k;
    }
    // Counted from completions after the clock started (no messages: an
    // empty interval).
    let (t, before) = start.unwrap_or((Instant::now(), total));
    let msgs = total - before;
    if client {
        ok("ack recv", rdm4_recv(c.ep, ack.as_mut_ptr().cast(), 1, c.peer, std::ptr::null_mut()));
        c.complete(1);
    } else {
        if iters + warmup > 0 {
            check(&buf, STREAM_SEED, "streamed payload");
        }
        ok("ack send", rdm4_send(c.ep, ack.as_ptr().cast(), 1, c.peer, std::ptr::null_mut()));
        c.complete(1);
    }
    let secs = t.elapsed().as_secs_f64();
    Result { lat: Vec::new(), bw_bytes: (size * msgs) as f64, secs, msgs }
}

/// Posts one operation of a one-sided test (`put_*`: write `local`;
/// `get_*`: read into `local`; `atomic_lat`: fetch-add 1 to the peer's
/// counter into `local`); returns the library's status. The source of the
/// writes is filled once per test by `one_sided_buffer`, not per operation:
/// as in `ucx_perftest`, the loop times the library, not the filling of the
/// buffer (which at 64 KiB would take most of each iteration;
/// docs/performance.md, "one-sided operations on one host (issue 31,
/// second part)"). The data is verified by the last, separate write of
/// `run_test`.
pub(super) fn post_one_sided(c: &Ctx, kind: OneSided, local: &mut [u8], size: usize) -> i32 {
    let null = std::ptr::null_mut();
    if c.now {
        return post_now(c, kind, local, size);
    }
    if kind == OneSided::Put {
        rdm4_write(c.ep, local.as_ptr().cast(), size, c.peer, c.peer_region, c.peer_key, null)
    } else if kind == OneSided::Get {
        rdm4_read(c.ep, local.as_mut_ptr().cast(), size, c.peer, c.peer_region, c.peer_key, null)
    } else {
        let one = 1u64.to_le_bytes();
        let counter = c.peer_region + c.counter as u64;
        let result = local.as_mut_ptr().cast();
        rdm4_fetch_atomic(
            c.ep,
            one.as_ptr().cast(),
            1,
            result,
            RDM4_UINT64,
            RDM4_SUM,
            c.peer,
            counter,
            c.peer_key,
            null,
        )
    }
}

/// The operation of a one-sided test, told from its name once per test
/// rather than per operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OneSided {
    Put,
    Get,
    FetchAdd,
}

impl OneSided {
    fn of(test: &str) -> OneSided {
        if test.starts_with("put_") {
            OneSided::Put
        } else if test.starts_with("get_") {
            OneSided::Get
        } else {
            OneSided::FetchAdd
        }
    }
}

/// [`post_one_sided`] by the `_now` calls (`--now`): done when it returns.
fn post_now(c: &Ctx, kind: OneSided, local: &mut [u8], size: usize) -> i32 {
    if kind == OneSided::Put {
        rdm4_write_now(c.ep, local.as_ptr().cast(), size, c.peer, c.peer_region, c.peer_key)
    } else if kind == OneSided::Get {
        rdm4_read_now(c.ep, local.as_mut_ptr().cast(), size, c.peer, c.peer_region, c.peer_key)
    } else {
        let one = 1u64.to_le_bytes();
        let counter = c.peer_region + c.counter as u64;
        let (cmp, result) = (std::ptr::null(), local.as_mut_ptr().cast());
        rdm4_atomic_now(c.ep, one.as_ptr().cast(), cmp, result, 1, RDM4_UINT64, RDM4_SUM, c.peer, counter, c.peer_key)
    }
}

/// The local buffer of a one-sided test: written once (its pages exist
/// before the clock starts), with a pattern for the puts.
fn one_sided_buffer(size: usize) -> Vec<u8> {
    let mut local = vec![0u8; size.max(8)];
    pattern(&mut local[..size], 0x5A);
    local
}

/// One-sided bandwidth tests run by the client with `window` operations in
/// flight; the server keeps progressing until the client's end-of-test
/// message. The clock starts once `warmup` operations have completed.
pub(super) fn one_sided(c: &mut Ctx, test: &str, size: usize, iters: usize, warmup: usize, window: usize) -> Result {
    let kind = OneSided::of(test);
    let mut local = one_sided_buffer(size);
    let mut res = Result::default();
    let total = warmup + iters;
    let mut t0 = (warmup == 0).then(Instant::now);
    let (mut posted, mut done) = (0usize, 0usize);
    while done < total {
        while posted < total && posted - done < window {
            let rc = post_one_sided(c, kind, &mut local, size);
            if rc == RDM4_EAGAIN {
                break;
            }
            ok(test, rc);
            posted += 1;
            // Done in the call: no completion comes.
            if c.now {
                done += 1;
                if t0.is_none() && done >= warmup {
                    t0 = Some(Instant::now());
                }
            }
        }
        let k = ok("rdm4_poll", rdm4_poll(c.ep, c.cq.as_mut_ptr(), c.cq.len())) as usize;
        for e in &c.cq[..k] {
            ok(test, e.status);
        }
        done += k;
        if t0.is_none() && done >= warmup {
            t0 = Some(Instant::now());
        }
    }
    res.secs = t0.map_or(0.0, |t| t.elapsed().as_secs_f64());
    res.bw_bytes = (size * iters) as f64;
    res.msgs = iters;
    res
}

/// Latency of one-sided operations: post to completion, one at a time.
pub(super) fn one_sided_lat(c: &mut Ctx, test: &str, size: usize, iters: usize, warmup: usize) -> Result {
    let kind = OneSided::of(test);
    let mut local = one_sided_buffer(size);
    let mut res = Result::default();
    let clock = Ticks::start();
    let mut laps = Laps::default();
    for i in 0..warmup + iters {
        laps.lap(i > warmup);
        let rc = post_one_sided(c, kind, &mut local, size);
        ok(test, rc);
        if !c.now {
            c.complete(1);
        }
    }
    laps.lap(iters > 0);
    res.lat = laps.lat;
    clock.finish(&mut res.lat, 1.0);
    res
}

/// `put_lat` as `ucx_perftest`'s `ucp_put_lat`: the client writes `size`
/// bytes into the server's region, the server polls the region's last
/// byte until it shows the iteration's mark, then writes back into the
/// client's region, which the client polls likewise; a sample is half a
/// round trip (the clock's scale 0.5). Both sides progress while they poll
/// (emulated writes need the target's progress); write completions are
/// drained as they come.
pub(super) fn put_pingpong(c: &mut Ctx, client: bool, size: usize, iters: usize, warmup: usize) -> Result {
    let size = size.max(1);
    let mut local = vec![0u8; size];
    pattern(&mut local, 0x5A);
    // No mark yet in either region, then both start together.
    c.region[size - 1] = 0;
    barrier(c, client, |_| {});
    let mut res = Result::default();
    let clock = Ticks::start();
    let mut laps = Laps::default();
    let mut pending = 0usize;
    for i in 0..warmup + iters {
        let mark = (i % 251) as u8 + 1;
        if client {
            laps.lap(i > warmup);
            pending += put_mark(c, &mut local, size, mark);
            pending -= wait_mark(c, size, mark, pending);
        } else {
            pending -= wait_mark(c, size, mark, pending);
            pending += put_mark(c, &mut local, size, mark);
        }
    }
    laps.lap(client && iters > 0);
    c.complete(pending);
    res.lat = laps.lat;
    clock.finish(&mut res.lat, 0.5);
    res
}

/// Writes `local` with `mark` as its last byte into the peer's region;
/// returns the completions it owes (1).
fn put_mark(c: &mut Ctx, local: &mut [u8], size: usize, mark: u8) -> usize {
    local[size - 1] = mark;
    if c.now {
        let rc = rdm4_write_now(c.ep, local.as_ptr().cast(), size, c.peer, c.peer_region, c.peer_key);
        ok("put_lat write", rc);
        return 0;
    }
    let rc = rdm4_write(c.ep, local.as_ptr().cast(), size, c.peer, c.peer_region, c.peer_key, std::ptr::null_mut());
    ok("put_lat write", rc);
    1
}

/// Polls (progressing) until this side's region ends with `mark`; returns
/// how many of the `pending` write completions came meanwhile.
/// With no completion owed it polls the library only every 64th look at
/// the memory (as `ucp_put_lat` looks at memory alone), so that an
/// emulated write, which needs this side's progress, still lands.
fn wait_mark(c: &mut Ctx, size: usize, mark: u8, pending: usize) -> usize {
    let (mut got, mut spins) = (0, 0u32);
    // SAFETY: a byte of our own region, written by the peer's device.
    while unsafe { std::ptr::read_volatile(&c.region[size - 1]) } != mark {
        spins = spins.wrapping_add(1);
        if got == pending && spins % 64 != 0 {
            std::hint::spin_loop();
            continue;
        }
        let k = ok("rdm4_poll", rdm4_poll(c.ep, c.cq.as_mut_ptr(), c.cq.len().min(pending.saturating_sub(got)).max(1)))
            as usize;
        for e in &c.cq[..k] {
            ok("put_lat", e.status);
        }
        got += k;
    }
    got
}
