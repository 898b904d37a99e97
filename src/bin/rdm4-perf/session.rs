//! A run of rdm4-perf once its endpoint is open: the connection to the
//! peer (addresses and RMA regions exchanged), the barrier and the
//! settling between tests, and each test's run, verification and line of
//! JSON.

use super::*;

/// Polls the endpoint for `time` (nothing is posted: no completion can
/// come). Some hosts give two busy-polling vCPUs their full speed only
/// after a few hundred milliseconds, so that the first short bulk runs
/// measure that ramp (docs/performance.md, "`rdm4-perf`'s method"). The
/// tests measure the library, not the ramp; `ucx_perftest` and
/// `fi_pingpong` runs of half a second and more mostly outlast it.
fn settle(c: &mut Ctx, time: Duration) {
    let start = Instant::now();
    while start.elapsed() < time {
        if ok("rdm4_poll", rdm4_poll(c.ep, c.cq.as_mut_ptr(), c.cq.len())) != 0 {
            eprintln!("rdm4-perf: a completion while nothing was posted");
            std::process::exit(1);
        }
    }
}

/// A two-way barrier over tagged messages: the client sends and then waits
/// for the answer; the server waits, runs `between` (checks and resets its
/// region; it progresses meanwhile, serving emulated RMA), then answers.
pub(super) fn barrier(c: &mut Ctx, client: bool, between: impl FnOnce(&mut Ctx)) {
    let mut v = [0u8; 8];
    let recv = |c: &mut Ctx, v: &mut [u8; 8]| {
        ok("barrier recv", rdm4_trecv(c.ep, v.as_mut_ptr().cast(), 8, c.peer, 0xFFFF, 0, std::ptr::null_mut()));
        c.complete(1);
    };
    let send = |c: &mut Ctx, v: &[u8; 8]| {
        ok("barrier send", rdm4_tsend(c.ep, v.as_ptr().cast(), 8, c.peer, 0xFFFF, std::ptr::null_mut()));
        c.complete(1);
    };
    if client {
        send(c, &v);
        recv(c, &mut v);
    } else {
        recv(c, &mut v);
        between(c);
        send(c, &v);
    }
}

fn stats(lat: &mut [f64]) -> (f64, f64, f64) {
    if lat.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let med = lat[lat.len() / 2];
    let avg = lat.iter().sum::<f64>() / lat.len() as f64;
    let p99 = lat[((lat.len() as f64 * 0.99) as usize).min(lat.len() - 1)];
    (med, avg, p99)
}

fn run_test(c: &mut Ctx, o: &Opts, client: bool, test: &str, size: usize) -> Option<String> {
    let (iters, warmup) = counts(o, test, size);
    let size = if test == "atomic_lat" { 8 } else { size };
    let mut res = match test {
        "tag_lat" => pingpong(c, client, size, iters, warmup, true),
        "msg_lat" => pingpong(c, client, size, iters, warmup, false),
        "tag_bw" | "msg_rate" => stream(c, client, size, iters, warmup, o),
        "put_lat" => put_pingpong(c, client, size, iters, warmup),
        _ if client && test.ends_with("_lat") => one_sided_lat(c, test, size, iters, warmup),
        _ if client => one_sided(c, test, size, iters, warmup, o.window),
        _ => Result::default(),
    };
    if test.starts_with("put") || test.starts_with("get") || test == "atomic_lat" {
        // Verify the last iteration: the client reads back the server's
        // pattern, or writes one last known pattern that the server checks.
        if client && test.starts_with("get") {
            check(&read_back(c, size), 0xA5, "read data");
        }
        if client && test.starts_with("put") {
            let mut b = vec![0u8; size];
            pattern(&mut b, 0xC3);
            ok(
                "verify write",
                rdm4_write(c.ep, b.as_ptr().cast(), size, c.peer, c.peer_region, c.peer_key, std::ptr::null_mut()),
            );
            c.complete(1);
        }
        barrier(c, client, |c| {
            if test.starts_with("put") {
                check(&c.region[..size], 0xC3, "written data");
            }
            if test == "atomic_lat" {
                let v = u64::from_le_bytes(c.region[c.counter..c.counter + 8].try_into().unwrap_or([0; 8]));
                if v != (iters + warmup) as u64 {
                    eprintln!("rdm4-perf: atomic total {v} != {}", iters + warmup);
                    std::process::exit(1);
                }
            }
            reset_region(c);
        });
    }
    if !client {
        return None;
    }
    let (med, avg, p99) = stats(&mut res.lat);
    let bw = if res.secs > 0.0 {
        res.bw_bytes / res.secs / 1e6
    } else if med > 0.0 {
        size as f64 / (2.0 * med)
    } else {
        0.0
    };
    let rate = if res.secs > 0.0 {
        res.msgs as f64 / res.secs
    } else if avg > 0.0 {
        1e6 / (2.0 * avg)
    } else {
        0.0
    };
    Some(format!(
        "{{\"device\":\"{}\",\"test\":\"{test}\",\"size\":{size},\"iters\":{iters},\"lat_us_median\":{med:.3},\"lat_us_avg\":{avg:.3},\"lat_us_p99\":{p99:.3},\"bw_mbps\":{bw:.3},\"msg_rate\":{rate:.0}}}",
        o.device
    ))
}

/// Reads the server's region pattern back with one more read (verification).
fn read_back(c: &mut Ctx, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    ok(
        "verify read",
        rdm4_read(c.ep, b.as_mut_ptr().cast(), size, c.peer, c.peer_region, c.peer_key, std::ptr::null_mut()),
    );
    c.complete(1);
    b
}

/// The region: the pattern 0xA5 for reads, then the atomic counter at 0.
fn reset_region(c: &mut Ctx) {
    let counter = c.counter;
    pattern(&mut c.region[..counter], 0xA5);
    c.region[counter..counter + 8].copy_from_slice(&0u64.to_le_bytes());
}

fn exchange(sock: &mut TcpStream, mine: &[u8; 48]) -> [u8; 48] {
    sock.write_all(mine).unwrap_or_else(|e| fail(&format!("address exchange: {e}")));
    let mut theirs = [0u8; 48];
    sock.read_exact(&mut theirs).unwrap_or_else(|e| fail(&format!("address exchange: {e}")));
    theirs
}

/// Registers the RMA region and exchanges addresses with the peer over `sock`.
fn connect(ep: *mut rdm4_ep, sock: &mut TcpStream, max_size: usize, alloc: bool) -> Ctx {
    let counter = max_size.div_ceil(8) * 8;
    let len = counter + 8;
    let mut key = 0u64;
    let access = RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE;
    let region: &'static mut [u8] = if alloc {
        let mut p = std::ptr::null_mut();
        ok("rdm4_mr_alloc", rdm4_mr_alloc(ep, len, access, &mut p, &mut key));
        // SAFETY: `len` bytes the endpoint owns until it closes, at the end
        // of the run; only this process's code touches them meanwhile.
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) }
    } else {
        let region = Box::leak(vec![0u8; len].into_boxed_slice());
        ok("rdm4_mr_reg", rdm4_mr_reg(ep, region.as_mut_ptr().cast(), region.len(), access, &mut key));
        region
    };
    let mut mine = [0u8; 48];
    let mut len = 32usize;
    ok("rdm4_ep_getname", rdm4_ep_getname(ep, mine.as_mut_ptr().cast(), &mut len));
    mine[32..40].copy_from_slice(&(region.as_ptr() as u64).to_le_bytes());
    mine[40..48].copy_from_slice(&key.to_le_bytes());
    let theirs = exchange(sock, &mine);
    let mut peer = 0;
    ok("rdm4_av_insert", rdm4_av_insert(ep, theirs.as_ptr().cast(), 1, &mut peer));
    let mut c = Ctx {
        ep,
        peer,
        region,
        peer_region: u64::from_le_bytes(theirs[32..40].try_into().unwrap_or([0; 8])),
        peer_key: u64::from_le_bytes(theirs[40..48].try_into().unwrap_or([0; 8])),
        counter,
        cq: vec![unsafe { std::mem::zeroed() }; 64],
        now: false,
    };
    reset_region(&mut c);
    c
}

pub(super) fn run(o: &Opts, ep: *mut rdm4_ep, mut sock: TcpStream, client: bool) -> Vec<String> {
    let max = o.sizes.iter().copied().max().unwrap_or(8);
    let mut c = connect(ep, &mut sock, max, o.alloc);
    c.now = o.now;
    barrier(&mut c, client, |_| {}); // both sides ready (and handshaken)
    if o.settle_ms > 0 {
        settle(&mut c, Duration::from_millis(o.settle_ms));
        barrier(&mut c, client, |_| {});
    }
    let mut out = Vec::new();
    for test in &o.tests {
        let sizes: Vec<usize> = if test == "atomic_lat" { vec![8] } else { o.sizes.clone() };
        for &size in &sizes {
            if client && !o.json {
                eprint!("\r  running {test} {size} B ...        ");
            }
            if let Some(line) = run_test(&mut c, o, client, test, size) {
                out.push(line);
            }
        }
    }
    if client && !o.json {
        eprint!("\r{:40}\r", "");
    }
    barrier(&mut c, client, |_| {});
    if o.stats {
        print_counters(c.ep, if client { "client" } else { "server" });
    }
    ok("rdm4_ep_close", rdm4_ep_close(c.ep));
    out
}

/// Prints every counter of `ep` that is not zero, one per line, to stderr.
fn print_counters(ep: *mut rdm4_ep, side: &str) {
    let mut names = [std::ptr::null::<std::ffi::c_char>(); 16];
    let mut values = [0u64; 16];
    let mut first = 0;
    loop {
        let n = rdm4_counters(ep, first, names.as_mut_ptr(), values.as_mut_ptr(), names.len());
        if n <= 0 {
            break;
        }
        for i in 0..n as usize {
            // SAFETY: the library's static, NUL-terminated counter names.
            let name = unsafe { CStr::from_ptr(names[i]) }.to_string_lossy();
            if values[i] != 0 {
                eprintln!("{side} {name} {}", values[i]);
            }
        }
        first += n as usize;
    }
}
