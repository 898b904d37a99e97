//! Where one-way latency goes: a ping-pong of 8-byte messages between two
//! processes pinned to CPUs 0 and 1, measured at four levels in one run —
//!
//! - `line`: one cache line per direction, a sequence number written and
//!   spun on (the cross-process floor, as `../shared/bench/peers.py`'s
//!   "shm flag" rows);
//! - `device`: the shm device alone ([`ShmDevice::send`] and
//!   [`Device::recv`], packets of 40 bytes, the size of an 8-byte eager
//!   message with its usual header), polled in a tight loop and with a
//!   PAUSE (`spin_loop`) after each empty poll;
//! - `engine`: [`Endpoint`] on the shm device, tagged 8-byte messages with
//!   receives naming their source, every completion polled through the
//!   general path (`progress`, `poll_cq`);
//! - `C API`: the same through `rdm4_tsend` / `rdm4_trecv` / `rdm4_poll`,
//!   as `rdm4-perf --test tag_lat` calls them. `rdm4_poll` takes these
//!   messages by the express receive (`Endpoint::progress_express`), so
//!   this row can be below the engine's.
//!
//! The two device rows show what a tight poll loop costs: the receiver's
//! loads take the line back while the sender's stores wait for it. A poll
//! of the whole stack is long enough (~150 instructions) to act as that
//! pause already: a PAUSE there only adds to the time to notice a packet.
//!
//! A last row gives each CPU's throughput on independent integer work,
//! measured by both processes at once: it falls by about a third when the
//! host runs another tenant on the core's other hardware thread, while the
//! line floor stays (seen 7.5-7.9 against 10.6-11.3 on the VM this was
//! written on). Latencies dominated by instructions, as the library's, rise
//! with it; those dominated by line transfers hardly move.
//!
//! The differences say what each layer adds. One-way time
//! is half a round trip; each figure is the median over batches of 1000
//! round trips (so it compares with rdm4-perf's average more than its
//! median).
//!
//! ```sh
//! cargo run --release --example shm_pingpong [ROUND_TRIPS]
//! ```

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rdm4::capi::*;

mod common;
use common::ok;
use rdm4::device::shm::ShmDevice;
use rdm4::device::Device;
use rdm4::engine::{Config, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::RawAddr;

const BATCH: usize = 1000;

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Median one-way nanoseconds of `batches` batches of `round_trip`.
fn time(batches: usize, mut round_trip: impl FnMut()) -> f64 {
    let mut per = Vec::with_capacity(batches);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            round_trip();
        }
        per.push(t.elapsed().as_nanos() as f64 / BATCH as f64 / 2.0);
    }
    per.sort_by(f64::total_cmp);
    per[per.len() / 2]
}

/// The two ends' pipes: (write, read) for this process.
struct Link {
    w: std::fs::File,
    r: std::fs::File,
}

impl Link {
    fn swap(&mut self, mine: &[u8; 32]) -> [u8; 32] {
        self.w.write_all(mine).expect("pipe write");
        let mut theirs = [0u8; 32];
        self.r.read_exact(&mut theirs).expect("pipe read");
        theirs
    }
}

/// Ends the process when the other one has not answered for 10 s (it died).
fn check_alive(spins: &mut u32, since: &mut Option<Instant>) {
    *spins = spins.wrapping_add(1);
    if *spins % (1 << 20) == 0 && since.get_or_insert_with(Instant::now).elapsed().as_secs() >= 10 {
        eprintln!("shm_pingpong: no answer from the other process for 10 s");
        std::process::exit(1);
    }
}

/// Spins until `word` holds `want`.
fn wait_for(word: &AtomicU64, want: u64) {
    let (mut spins, mut since) = (0, None);
    while word.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
        check_alive(&mut spins, &mut since);
    }
}

fn line(client: bool, lines: &[AtomicU64], batches: usize) -> f64 {
    // Ping in line 0, pong in line 1 (8 words apart).
    let (ping, pong) = (&lines[0], &lines[8]);
    let mut seq = 0u64;
    if client {
        time(batches, || {
            seq += 1;
            ping.store(seq, Ordering::Release);
            wait_for(pong, seq);
        })
    } else {
        for _ in 0..batches * BATCH {
            seq += 1;
            wait_for(ping, seq);
            pong.store(seq, Ordering::Release);
        }
        0.0
    }
}

fn device(client: bool, link: &mut Link, batches: usize, pause: bool) -> f64 {
    let mut dev = ShmDevice::open().expect("shm device");
    let theirs = link.swap(&dev.local_addr().to_bytes());
    let ah = dev.insert(&RawAddr::from_bytes(&theirs).expect("address")).expect("insert");
    let pkt = [7u8; 40];
    let round = |dev: &mut ShmDevice, send_first: bool| {
        if send_first {
            dev.send(ah, &pkt, 0).expect("send");
        }
        let (mut got, mut spins, mut since) = (0, 0, None);
        while got == 0 {
            check_alive(&mut spins, &mut since);
            got = dev.recv(16, |_, p: &[u8], _| assert_eq!(p.len(), pkt.len()));
            if got == 0 && pause {
                std::hint::spin_loop();
            }
        }
        if !send_first {
            dev.send(ah, &pkt, 0).expect("send");
        }
    };
    // Both ends inserted before the first packet.
    link.swap(&[0; 32]);
    if client {
        time(batches, || round(&mut dev, true))
    } else {
        for _ in 0..batches * BATCH {
            round(&mut dev, false);
        }
        0.0
    }
}

/// The engine on the shm device: 8-byte tagged messages, each completion
/// polled (what `rdm4-perf` does, without the C API).
fn engine(client: bool, link: &mut Link, batches: usize) -> f64 {
    let mut ep = Endpoint::new(ShmDevice::open().expect("shm device"), Config::default());
    let theirs = link.swap(&ep.addr().to_bytes());
    let to = ep.av_insert(&RawAddr::from_bytes(&theirs).expect("address")).expect("insert");
    let (mut s, mut r) = (OwnedBuf::from_slice(&[7u8; 8]), OwnedBuf::zeroed(8));
    let mut cq = Vec::with_capacity(16);
    let mut complete = |ep: &mut Endpoint<ShmDevice>, n: usize| {
        let (mut got, mut spins, mut since) = (0, 0, None);
        while got < n {
            check_alive(&mut spins, &mut since);
            ep.progress(0);
            cq.clear();
            got += ep.poll_cq(&mut cq, 16);
        }
    };
    let tag = |t| RecvOpts { tag: Some((t, 0)), src: Some(to), context: 0 };
    link.swap(&[0; 32]);
    if client {
        time(batches, || {
            ep.send(to, s.buf(), SendOpts { tag: Some(1), ..Default::default() }).expect("send");
            ep.recv(r.buf(), tag(1)).expect("recv");
            complete(&mut ep, 2);
        })
    } else {
        for _ in 0..batches * BATCH {
            ep.recv(r.buf(), tag(1)).expect("recv");
            complete(&mut ep, 1);
            ep.send(to, s.buf(), SendOpts { tag: Some(1), ..Default::default() }).expect("send");
            complete(&mut ep, 1);
        }
        0.0
    }
}

/// The C API, as `rdm4-perf --test tag_lat` calls it (manual progress, one
/// thread, tagged 8-byte messages, receives naming their source).
fn capi(client: bool, link: &mut Link, batches: usize) -> f64 {
    let (ep, name) = common::open();
    let theirs = link.swap(&name);
    let mut to = 0;
    ok("av", rdm4_av_insert(ep, theirs.as_ptr().cast(), 1, &mut to));
    let (s, mut r) = ([7u8; 8], [0u8; 8]);
    // SAFETY: rdm4_cqe is plain data.
    let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 16];
    let null = std::ptr::null_mut();
    let mut complete = |n: usize| {
        let (mut got, mut spins, mut since) = (0, 0, None);
        while got < n {
            check_alive(&mut spins, &mut since);
            let k = rdm4_poll(ep, cq.as_mut_ptr(), cq.len());
            ok("poll", k);
            got += k as usize;
        }
    };
    link.swap(&[0; 32]);
    let ms = if client {
        time(batches, || {
            ok("send", rdm4_tsend(ep, s.as_ptr().cast(), 8, to, 1, null));
            ok("recv", rdm4_trecv(ep, r.as_mut_ptr().cast(), 8, to, 1, 0, null));
            complete(2);
        })
    } else {
        for _ in 0..batches * BATCH {
            ok("recv", rdm4_trecv(ep, r.as_mut_ptr().cast(), 8, to, 1, 0, null));
            complete(1);
            ok("send", rdm4_tsend(ep, s.as_ptr().cast(), 8, to, 1, null));
            complete(1);
        }
        0.0
    };
    // Both ends done before either closes.
    link.swap(&[0; 32]);
    ok("close", rdm4_ep_close(ep));
    ms
}

/// Billions of simple integer operations per second on this CPU: four
/// independent xorshift generators, so the work is bound by how many
/// instructions the core issues for this thread, not by a dependency chain.
fn alu_rate() -> f64 {
    const STEPS: u64 = 10_000_000;
    let mut x = std::hint::black_box([1u64, 2, 3, 4]);
    let t = Instant::now();
    for _ in 0..STEPS {
        for v in &mut x {
            *v ^= *v << 13;
            *v ^= *v >> 7;
            *v ^= *v << 17;
        }
    }
    std::hint::black_box(x);
    (STEPS * 4 * 6) as f64 / t.elapsed().as_nanos() as f64
}

fn main() {
    let round_trips: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let batches = round_trips.div_ceil(BATCH).max(1);
    // Two lines shared by both processes (mapped before the fork).
    // SAFETY: a fresh anonymous shared mapping; checked below.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED, "mmap");
    // SAFETY: 4096 zeroed, 8-aligned bytes, shared; atomics only.
    let lines = unsafe { std::slice::from_raw_parts(mem.cast::<AtomicU64>(), 512) };
    let (mut a, mut b) = ([0i32; 2], [0i32; 2]);
    // SAFETY: two arrays of two descriptors.
    assert!(unsafe { libc::pipe(a.as_mut_ptr()) == 0 && libc::pipe(b.as_mut_ptr()) == 0 }, "pipe");
    // SAFETY: no other threads exist yet.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    let client = pid == 0;
    let (w, r) = if client { (a[1], b[0]) } else { (b[1], a[0]) };
    // SAFETY: descriptors of this process, each owned by one File.
    let mut link = unsafe { Link { w: std::fs::File::from_raw_fd(w), r: std::fs::File::from_raw_fd(r) } };
    pin(usize::from(client));
    // Warm-up, then the measured runs; the client reports.
    line(client, lines, batches / 10 + 1);
    let l = line(client, lines, batches);
    let [d, p] = [false, true].map(|pause| {
        device(client, &mut link, batches / 10 + 1, pause);
        device(client, &mut link, batches, pause)
    });
    engine(client, &mut link, batches / 10 + 1);
    let e = engine(client, &mut link, batches);
    capi(client, &mut link, batches / 10 + 1);
    let c = capi(client, &mut link, batches);
    // Both processes at once, each on its own CPU; the server's figure
    // crosses the pipe.
    let mut mine = [0u8; 32];
    mine[..8].copy_from_slice(&alu_rate().to_le_bytes());
    let theirs = link.swap(&mine);
    let rate = |b: &[u8; 32]| f64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    if client {
        let (cpu0, cpu1) = (rate(&theirs), rate(&mine));
        println!("one-way ns, median of {batches} batches of {BATCH} round trips:");
        println!("  line (floor)             {l:6.1}");
        println!("  shm device, tight poll   {d:6.1}  (+{:.1})", d - l);
        println!("  shm device, PAUSE        {p:6.1}  (+{:.1})", p - l);
        println!("  engine (8 B tagged)      {e:6.1}  (+{:.1} over the device with PAUSE)", e - p);
        println!("  C API (8 B tagged)       {c:6.1}  (+{:.1} over the engine)", c - e);
        println!("CPU throughput, G integer ops/s: cpu0 {cpu0:.2} cpu1 {cpu1:.2} min {:.2}", cpu0.min(cpu1));
    } else {
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
}
