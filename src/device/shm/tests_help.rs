//! Unit tests of two-handed reads (`help.rs`): an owner that polls copies
//! chunks of a large read, one that does not leaves it to the reader, and a
//! notice that does not check out copies nothing.

use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::help::{chunk_len, HELP_LEN};
use super::*;
use crate::mem::OwnedBuf;

fn config(name: &str) -> ShmConfig {
    ShmConfig { prefix: format!("rdm4h{}{name}", std::process::id()), ..ShmConfig::default() }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed ^ (i >> 12) as u8)).collect()
}

/// Polls `dev` twice: a help notice is noted by the first poll that
/// meets it and served at the start of the next.
fn poll(dev: &mut ShmDevice) {
    for _ in 0..2 {
        dev.recv(64, |_, _: &[u8], _| -> () {});
        let mut ev = Vec::new();
        dev.events(&mut ev);
    }
}

/// Reads `len` bytes at `addr` (key `key`) of peer `ah` into a new buffer
/// by the device's RDMA read; the buffer once the read completed.
fn read(reader: &mut ShmDevice, ah: Ah, addr: u64, key: u64, len: usize) -> OwnedBuf {
    let mut dst = OwnedBuf::zeroed(len);
    reader.rdma(ah, dst.buf(), addr, key, 7, false).unwrap();
    let mut ev = Vec::new();
    reader.events(&mut ev);
    assert!(
        ev.iter().any(|e| matches!(e, DevEvent::SendDone { wr_id: 7, status: Ok(()), .. })),
        "the read completed: {ev:?}"
    );
    dst
}

#[test]
fn a_large_read_is_helped_by_an_owner_that_polls_and_arrives_whole() {
    let cfg = config("polls");
    let mut reader = ShmDevice::open_with(cfg.clone()).unwrap();
    let reader_addr = reader.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let size = 3 * 1024 * 1024 + 4097;
    let owner = {
        let (stop, cfg) = (stop.clone(), cfg.clone());
        std::thread::spawn(move || {
            let mut owner = ShmDevice::open_with(cfg).unwrap();
            owner.insert(&reader_addr).unwrap();
            let mut mem = OwnedBuf::from_slice(&pattern(size, 5));
            let key = owner.table_reg(mem.buf(), Access::REMOTE_READ).unwrap();
            tx.send((owner.local_addr(), mem.buf().addr(), key)).unwrap();
            let limit = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Acquire) && Instant::now() < limit {
                poll(&mut owner);
            }
            let stats = owner.help_stats();
            drop(mem);
            stats
        })
    };
    let (owner_addr, addr, key) = rx.recv().unwrap();
    let ah = reader.insert(&owner_addr).unwrap();
    let want = pattern(size, 5);
    // Sizes with a short last chunk, from the least that asks; repeated
    // until a read was helped (the owner's thread must be running then).
    let start = Instant::now();
    let mut reads = 0;
    while reader.help_stats().1 == 0 && start.elapsed() < Duration::from_secs(10) {
        for (off, len) in [(0, cfg.help_min), (4096, 1024 * 1024 + 4097), (0, size)] {
            let got = read(&mut reader, ah, addr + off as u64, key, len);
            assert!(got.bytes() == &want[off..off + len], "{len} bytes at {off}: every byte");
            reads += 1;
        }
    }
    stop.store(true, Ordering::Release);
    let (asked, helped, given) = reader.help_stats();
    let (_, _, owner_given) = owner.join().unwrap();
    assert_eq!(asked, reads, "every read asked");
    assert!(helped > 0, "the owner copied chunks of some read");
    assert_eq!(given, 0, "the reader copied nothing for others");
    assert_eq!(owner_given, helped, "what the owner copied is what the reader counted");
}

#[test]
fn a_reader_whose_owner_does_not_poll_copies_alone_and_a_late_notice_takes_nothing() {
    let cfg = config("idle");
    let mut owner = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut reader = ShmDevice::open_with(cfg).unwrap();
    owner.insert(&reader.local_addr()).unwrap();
    let ah = reader.insert(&owner.local_addr()).unwrap();
    let len = 1024 * 1024;
    let mut mem = OwnedBuf::from_slice(&pattern(len, 9));
    let key = owner.table_reg(mem.buf(), Access::REMOTE_READ).unwrap();
    let got = read(&mut reader, ah, mem.buf().addr(), key, len);
    assert!(got.bytes() == &pattern(len, 9)[..], "every byte, copied by the reader alone");
    assert_eq!(reader.help_stats(), (1, 0, 0), "asked once, helped with nothing");
    // The owner meets the notice now, with other bytes in its memory: the
    // job ended, it copies nothing into the reader's buffer.
    mem.bytes_mut().fill(0xAB);
    poll(&mut owner);
    assert_eq!(owner.help_stats().2, 0, "a late notice takes no chunk");
    assert!(got.bytes() == &pattern(len, 9)[..], "the reader's buffer is untouched");
}

#[test]
fn a_read_below_the_least_size_or_of_a_sleeping_or_reading_owner_asks_no_help() {
    let cfg = config("small");
    let owner = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut reader = ShmDevice::open_with(cfg.clone()).unwrap();
    let ah = reader.insert(&owner.local_addr()).unwrap();
    assert!(!reader.help_wanted(ah, cfg.help_min - 1));
    assert!(reader.help_wanted(ah, cfg.help_min));
    owner.map.hdr_u32::<{ off::SLEEPING }>().store(1, Ordering::SeqCst);
    assert!(!reader.help_wanted(ah, cfg.help_min), "an owner asleep in a wait is not woken for it");
    owner.map.hdr_u32::<{ off::SLEEPING }>().store(0, Ordering::SeqCst);
    let open = owner.map.u64_at(owner.shape.help_off() + 24);
    open.store(1, Ordering::Relaxed);
    assert!(!reader.help_wanted(ah, cfg.help_min), "an owner running a read of its own is not asked");
    open.store(0, Ordering::Relaxed);
    assert!(reader.help_wanted(ah, cfg.help_min));
    let off = ShmDevice::open_with(ShmConfig { help_min: usize::MAX, ..config("off") }).unwrap();
    let mut r2 = ShmDevice::open_with(ShmConfig { help_min: usize::MAX, ..config("off") }).unwrap();
    let ah2 = r2.insert(&off.local_addr()).unwrap();
    assert!(!r2.help_wanted(ah2, 1 << 30), "RDM4_SHM_HELP_MIN=off");
    assert_eq!(chunk_len(64 * 1024), 32 * 1024, "two chunks at least");
    assert_eq!(chunk_len(128 * 1024), 64 * 1024);
    assert_eq!(chunk_len(1024 * 1024), 128 * 1024);
    assert_eq!(chunk_len(64 << 20), 1024 * 1024);
}

/// Writes a job into `reader`'s slot by hand, as a scribbler could.
fn forge_job(reader: &ShmDevice, gen: u32, (src, dst, len, key, chunk): (u64, u64, u64, u64, u64)) {
    let slot = reader.map.block(reader.shape.help_off(), HELP_LEN);
    for (off, v) in [(64, src), (72, dst), (80, len), (88, key), (96, chunk), (8, 0), (16, 0)] {
        slot.u64(off).store(v, Ordering::Relaxed);
    }
    slot.u64(0).store(u64::from(gen) << 32, Ordering::Release);
}

#[test]
fn a_help_notice_that_does_not_check_out_copies_nothing() {
    let cfg = config("forged");
    let mut owner = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut reader = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut stranger = ShmDevice::open_with(cfg).unwrap();
    owner.insert(&reader.local_addr()).unwrap();
    let ah = reader.insert(&owner.local_addr()).unwrap();
    let len = 256 * 1024;
    let mut writable = OwnedBuf::from_slice(&pattern(len, 1));
    let mut readable = OwnedBuf::from_slice(&pattern(len, 2));
    let wkey = owner.table_reg(writable.buf(), Access::REMOTE_WRITE).unwrap();
    let rkey = owner.table_reg(readable.buf(), Access::REMOTE_READ).unwrap();
    let mut dst = OwnedBuf::zeroed(len);
    let d = dst.buf().addr();
    let (w, r) = (writable.buf().addr(), readable.buf().addr());
    let jobs: [(u64, u64, u64, u64, u64); 6] = [
        (w, d, len as u64, wkey, 64 * 1024),           // memory not registered for reads
        (r, d, len as u64, wkey, 64 * 1024),           // another registration's key
        (r + 4096, d, len as u64, rkey, 64 * 1024),    // past the registration's end
        (r, d, len as u64, rkey, 512),                 // chunks too small
        (r, d, u64::MAX - 8, rkey, 64 * 1024),         // a length that overflows
        (r, u64::MAX - 4096, len as u64, rkey, 65536), // a destination that overflows
    ];
    for (i, job) in jobs.into_iter().enumerate() {
        let gen = 100 + i as u32;
        forge_job(&reader, gen, job);
        assert!(reader.send_help_notice(ah, gen));
        poll(&mut owner);
        assert_eq!(owner.help_stats().2, 0, "job {i}: no chunk copied");
    }
    // A notice naming another generation than the slot's.
    forge_job(&reader, 200, (r, d, len as u64, rkey, 64 * 1024));
    assert!(reader.send_help_notice(ah, 199));
    poll(&mut owner);
    assert_eq!(owner.help_stats().2, 0, "a stale generation: no chunk copied");
    // A sound job from an endpoint the owner does not know.
    let sah = stranger.insert(&owner.local_addr()).unwrap();
    forge_job(&stranger, 300, (r, dst.buf().addr(), len as u64, rkey, 64 * 1024));
    assert!(stranger.send_help_notice(sah, 300));
    poll(&mut owner);
    assert_eq!(owner.help_stats().2, 0, "a stranger's notice: no chunk copied");
    assert!(dst.bytes().iter().all(|&b| b == 0), "nothing written into the destination");
    // The same sound job from the reader is served: the checks above were
    // what refused the others.
    forge_job(&reader, 400, (r, d, len as u64, rkey, 64 * 1024));
    assert!(reader.send_help_notice(ah, 400));
    owner.recv(64, |_, _: &[u8], _| -> () {});
    assert_eq!(owner.help_stats().2, 0, "the poll that meets the notice only notes it");
    owner.recv(64, |_, _: &[u8], _| -> () {});
    assert_eq!(owner.help_stats().2, 4, "the next poll copies the four chunks first");
    assert!(dst.bytes() == readable.bytes(), "every byte of the registration");
    let _ = (writable.bytes_mut(), readable.bytes_mut());
}

#[test]
fn a_reader_stops_waiting_for_a_chunk_of_a_dead_owner_or_one_that_never_comes() {
    use super::help::wait_done;
    let dev = ShmDevice::open_with(config("wait")).unwrap();
    let slot = dev.map.block(dev.shape.help_off(), HELP_LEN);
    // Two chunks of four counted: the other two were claimed and never
    // copied.
    slot.u64(8).store(2, Ordering::Relaxed);
    // An owner that is gone (no process has pid 0 as a peer): at once.
    let t = Instant::now();
    assert_eq!(wait_done(&slot, 4, (0, 0)), Err(()), "a gone owner ends the wait");
    assert!(t.elapsed() < Duration::from_secs(1));
    // An owner alive (this process) whose chunks never come: the stall's
    // bound, then the count short of the job.
    let me = std::process::id();
    let start = super::segment::start_time(me).unwrap();
    let t = Instant::now();
    assert_eq!(wait_done(&slot, 4, (me, start)), Ok(2), "short of the job after the stall");
    assert!(t.elapsed() >= Duration::from_millis(200) && t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A helper at work (`busy`) keeps it waiting past that stall, until
    // its chunks come in.
    slot.u64(32).store(1, Ordering::Relaxed);
    let t = Instant::now();
    let done_word = slot.u64(8);
    let done = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            done_word.store(4, Ordering::Release);
        });
        wait_done(&slot, 4, (me, start))
    });
    assert_eq!(done, Ok(4), "the busy helper's chunks, after {:?}", t.elapsed());
    assert!(t.elapsed() >= Duration::from_millis(450));
}

#[test]
fn an_owner_that_polls_with_its_descriptor_handed_out_counts_as_polling() {
    let cfg = config("fdmode");
    let mut owner = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut reader = ShmDevice::open_with(cfg.clone()).unwrap();
    let ah = reader.insert(&owner.local_addr()).unwrap();
    // Polling now and then, in rounds that stamp (every 64th poll): seen
    // as polling at some round (a descheduling between the stamp and the
    // look may hide one).
    let polling = |owner: &mut ShmDevice, reader: &mut ShmDevice| {
        (0..200).any(|_| {
            for _ in 0..64 {
                owner.recv(8, |_, _: &[u8], _| -> () {});
                owner.events(&mut Vec::new());
            }
            reader.progressing(ah) && reader.help_wanted(ah, cfg.help_min)
        })
    };
    assert!(polling(&mut owner, &mut reader));
    // Its descriptor handed out: the sleeping flag stays set while it
    // polls, and it is still taken to poll (ring RMA, help).
    crate::device::Sleep::wait_fd(&mut owner).unwrap();
    assert_ne!(owner.map.hdr_u32::<{ off::SLEEPING }>().load(Ordering::SeqCst), 0);
    assert!(polling(&mut owner, &mut reader), "an fd-mode owner that polls is taken to sleep");
    // Once it stops, no longer.
    std::thread::sleep(Duration::from_millis(2));
    assert!(!reader.progressing(ah));
    assert!(!reader.help_wanted(ah, cfg.help_min));
}
