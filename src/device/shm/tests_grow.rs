//! Unit tests of the ring's growth (`grow.rs`): memory at open, doubling
//! when found full, order and contents across each growth with one and
//! with several producers, and notices or tails forged by a peer.

use super::produce::FULL_WAIT_MAX;
use super::*;
use std::collections::VecDeque;

fn cfg(name: &str, slots: u32, start_slots: u32, mtu: u32) -> ShmConfig {
    ShmConfig { prefix: format!("rdm4g{}{name}", std::process::id()), slots, start_slots, mtu, ..ShmConfig::default() }
}

/// Bytes of memory `/dev/shm` holds for `dev`'s segment.
fn allocated(dev: &ShmDevice) -> u64 {
    let c = segment::cstr(&format!("/dev/shm/{}", dev.segment_name()));
    // SAFETY: stat into a zeroed struct of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::stat(c.as_ptr(), &mut st) }, 0);
    st.st_blocks as u64 * 512
}

/// Packet `k`: `len` bytes (at least 8) starting with `k`.
fn packet(k: u64, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (k as usize * 13 + i * 7) as u8).collect();
    p[..8].copy_from_slice(&k.to_le_bytes());
    p
}

/// Receives what waits in `rx`, checking each packet against the front of `want`.
fn take(rx: &mut ShmDevice, want: &mut VecDeque<Vec<u8>>) -> usize {
    rx.recv(64, |_, p: &[u8], _| {
        let w = want.pop_front().expect("a packet nobody sent");
        assert_eq!(p, w.as_slice(), "packet out of order or changed");
    })
}

#[test]
fn an_endpoint_opens_with_a_small_ring_and_little_memory() {
    let dev = ShmDevice::open_with(cfg("open", 128, 16, 64 * 1024)).unwrap();
    assert_eq!(dev.ring_in_use(), (1 << 20, 0));
    assert_eq!(dev.shape.cap, 8 << 20);
    let bytes = allocated(&dev);
    assert!(bytes <= 2 << 20, "{bytes} bytes of /dev/shm at open");
    assert!(bytes >= 1 << 20, "{bytes} bytes: the starting ring is allocated at open");
}

#[test]
fn a_ring_found_full_doubles_up_to_its_whole_size_and_nothing_is_lost_or_reordered() {
    // 256-byte MTU: a 1 KiB ring at open, 32 KiB whole (five doublings).
    let mut rx = ShmDevice::open_with(cfg("double", 128, 2, 256)).unwrap();
    let mut tx = ShmDevice::open_with(cfg("double", 128, 2, 256)).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    assert_eq!(rx.ring_in_use(), (1024, 0));
    let before = allocated(&rx);
    let mut want = VecDeque::new();
    let (mut k, mut got, mut rings) = (0u64, 0usize, vec![1024]);
    // Fill the ring, then take everything, again and again: each time the
    // producer finds it full it asks, and the owner grows at its next batch.
    for _round in 0..40 {
        let mut refused = 0;
        loop {
            let p = packet(k, 8 + (k as usize * 37) % 240);
            match tx.send(ah, &p, 0) {
                Ok(Sent::Done) => {
                    want.push_back(p);
                    k += 1;
                    refused = 0;
                }
                // Refused sends after a full ring skip the look at its
                // head (`Peer::full_skip`): full once they look.
                Err(DevError::Again) if refused < FULL_WAIT_MAX => refused += 1,
                Err(DevError::Again) => break,
                other => panic!("send: {other:?}"),
            }
            assert!(k < 1_000_000);
        }
        for _ in 0..1000 {
            let before = want.len();
            let n = take(&mut rx, &mut want);
            got += before - want.len();
            if n == 0 && want.is_empty() {
                break;
            }
        }
        assert!(want.is_empty(), "{} packets sent but not received", want.len());
        if rings.last() != Some(&rx.ring_in_use().0) {
            rings.push(rx.ring_in_use().0);
        }
    }
    // Doubled at each fill, or made whole at once by a quick read.
    assert_eq!(rings[..2], [1024, 2048], "doubled when found full");
    assert!(rings.windows(2).all(|w| w[1] >= 2 * w[0]) && rings.last() == Some(&32768), "{rings:?}");
    assert_eq!(rx.ring_in_use().1 as usize, rings.len() - 1);
    assert!(got as u64 == k && k > 1000);
    assert!(before < 96 << 10 && allocated(&rx) >= 96 << 10, "the grown ring's memory is allocated");
    // A ring never found full does not grow.
    assert_eq!(tx.ring_in_use(), (1024, 0));
}

#[test]
fn a_ring_read_quickly_grows_whole_at_once_and_one_read_slowly_keeps_its_size() {
    // 64 KiB MTU: a 1 MiB ring at open, 8 MiB whole. A stream of small
    // packets, each taken as soon as it is sent: never full, but read at
    // well over 100 MB/s of ring.
    let mut rx = ShmDevice::open_with(cfg("quick", 128, 16, 64 * 1024)).unwrap();
    let mut tx = ShmDevice::open_with(cfg("quick", 128, 16, 64 * 1024)).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    let mut want = VecDeque::new();
    for k in 0..40_000 {
        let p = packet(k, 16);
        assert_eq!(tx.send(ah, &p, 0), Ok(Sent::Done), "packet {k}");
        want.push_back(p);
        assert_eq!(take(&mut rx, &mut want), 1);
    }
    assert_eq!(rx.ring_in_use(), (8 << 20, 1), "whole at once");
    assert!(allocated(&rx) >= 8 << 20);
    // The same stream at 1 packet per 20 us (3 MB/s of ring lines): the
    // ring stays as it was opened (16 eighths of the ring read, bounded).
    let mut rx = ShmDevice::open_with(cfg("slow", 128, 2, 256)).unwrap();
    let mut tx = ShmDevice::open_with(cfg("slow", 128, 2, 256)).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    for k in 0..256 {
        let p = packet(k, 16);
        assert_eq!(tx.send(ah, &p, 0), Ok(Sent::Done), "packet {k}");
        want.push_back(p);
        std::thread::sleep(std::time::Duration::from_micros(20));
        assert_eq!(take(&mut rx, &mut want), 1);
    }
    assert_eq!(rx.ring_in_use(), (1024, 0));
}

#[test]
fn packets_in_flight_when_the_ring_grows_are_read_in_the_old_ring_then_the_new() {
    // The producer fills the ring, the owner takes two packets (which
    // grows the ring), and the producer sends on while the old ring's
    // packets still wait: into the room the old ring has (the grown ring
    // gives more only once the notice is read); all arrive in order, and
    // the grown ring holds about twice as many.
    let mut rx = ShmDevice::open_with(cfg("inflight", 64, 2, 256)).unwrap();
    let mut tx = ShmDevice::open_with(cfg("inflight", 64, 2, 256)).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    let mut want = VecDeque::new();
    let mut k = 0u64;
    // Until the ring is full: a producer that found it full refuses a
    // few sends without looking again (`Peer::full_skip`).
    let mut send_all = |tx: &mut ShmDevice, want: &mut VecDeque<Vec<u8>>| {
        let (mut n, mut refused) = (0, 0);
        while refused <= FULL_WAIT_MAX {
            if tx.send(ah, &packet(k, 40), 0) == Ok(Sent::Done) {
                want.push_back(packet(k, 40));
                (k, n, refused) = (k + 1, n + 1, 0);
            } else {
                refused += 1;
            }
        }
        n
    };
    let mut filled = send_all(&mut tx, &mut want);
    for _ in 0..5 {
        if rx.ring_in_use().0 == rx.shape.cap {
            break;
        }
        assert!(filled > 0);
        let ring = rx.ring_in_use().0;
        // Take only a few: the ring grows behind the packets still waiting.
        let n = rx.recv(2, |_, p: &[u8], _| assert_eq!(p, want.pop_front().unwrap().as_slice()));
        assert_eq!(n, 2);
        assert_eq!(rx.ring_in_use().0, ring, "grown only once the notice is read");
        assert!(rx.grow.pending.is_some(), "grew at that batch");
        let meanwhile = send_all(&mut tx, &mut want);
        assert!(meanwhile <= 2, "{meanwhile} sent into two packets' room");
        for _ in 0..100 {
            if take(&mut rx, &mut want) == 0 {
                break;
            }
        }
        assert!(want.is_empty());
        assert!(rx.ring_in_use().0 >= 2 * ring, "grown (again, if the producer found it full meanwhile)");
        let before = filled;
        filled = send_all(&mut tx, &mut want);
        assert!(filled >= 2 * before - 2, "{filled} packets fill the grown ring, {before} the old one");
    }
    assert_eq!(rx.ring_in_use().0, rx.shape.cap);
}

#[test]
fn several_producer_threads_stream_through_growing_rings_in_order() {
    const PRODUCERS: u64 = 3;
    const EACH: u64 = 20_000;
    let mut rx = ShmDevice::open_with(cfg("threads", 256, 2, 256)).unwrap();
    let addr = rx.local_addr();
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut tx = ShmDevice::open_with(cfg("threads", 256, 2, 256)).unwrap();
                let ah = tx.insert(&addr).unwrap();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                for i in 0..EACH {
                    let p = packet(t << 32 | i, 8 + (i as usize % 200));
                    while tx.send(ah, &p, 0) == Err(DevError::Again) {
                        assert!(std::time::Instant::now() < deadline, "producer {t} stuck at {i}");
                        std::hint::spin_loop();
                    }
                }
                tx
            })
        })
        .collect();
    let mut next = [0u64; PRODUCERS as usize];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while next.iter().sum::<u64>() < PRODUCERS * EACH {
        assert!(std::time::Instant::now() < deadline, "received {next:?}");
        rx.recv(64, |_, p: &[u8], _| {
            let k = u64::from_le_bytes(p[..8].try_into().unwrap());
            let (t, i) = ((k >> 32) as usize, k & 0xFFFF_FFFF);
            assert_eq!(i, next[t], "producer {t}'s packets out of order");
            assert_eq!(p, packet(k, 8 + (i as usize % 200)).as_slice());
            next[t] += 1;
        });
    }
    let producers: Vec<ShmDevice> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(rx.ring_in_use().1 >= 1, "three producers filled a 1 KiB ring");
    drop(producers);
}

#[test]
fn a_forged_grow_notice_is_skipped_and_a_forged_shrink_stays_within_the_segment() {
    let mut rx = ShmDevice::open_with(cfg("forged", 64, 2, 256)).unwrap();
    let mut tx = ShmDevice::open_with(cfg("forged", 64, 2, 256)).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    // A grow notice at the head that the owner did not write: a peer
    // scribbling. It is skipped like padding; the ring stays as it is.
    let pos = {
        let tail = rx.map.hdr_u64::<{ off::TAIL }>();
        let w = tail.load(Ordering::Relaxed);
        tail.store(w + 64, Ordering::Relaxed);
        segment::tail_pos(w)
    };
    let e = HDR_LEN + rx.shape.at(pos);
    rx.map.u64_at(e + 16).store(segment::word(0, 64 | segment::GROW_NOTICE), Ordering::Relaxed);
    rx.map.u64_at(e).store(rx.shape.sealed(pos), Ordering::Release);
    tx.send(ah, &packet(1, 50), 0).unwrap();
    let mut want = VecDeque::from([packet(1, 50)]);
    assert_eq!(take(&mut rx, &mut want), 2, "the forged notice and the packet after it");
    assert!(want.is_empty());
    assert_eq!(rx.ring_in_use(), (1024, 0));
    // Shrink bits that ask for more halvings than the segment allows, or
    // for none: a producer's claim stays within the ring the segment has.
    for shrink in [segment::SHRINK, 0] {
        let tail = rx.map.hdr_u64::<{ off::TAIL }>();
        let w = tail.load(Ordering::Relaxed);
        tail.store(segment::tail_pos(w) | shrink, Ordering::Relaxed);
        let ring = tx.peer(ah).unwrap().shape.in_use(tail.load(Ordering::Relaxed));
        assert!(ring >= 1024 && ring <= tx.peer(ah).unwrap().shape.cap, "ring {ring}");
        let _ = tx.send(ah, &packet(2, 50), 0);
    }
}

#[test]
fn a_hundred_and_twenty_eight_endpoints_take_under_150_mib_at_open() {
    let eps: Vec<ShmDevice> =
        (0..128).map(|_| ShmDevice::open_with(cfg("many", 128, 16, 64 * 1024)).unwrap()).collect();
    let total: u64 = eps.iter().map(allocated).sum();
    assert!(total <= 150 << 20, "{} MiB of /dev/shm for 128 endpoints", total >> 20);
    eprintln!("128 endpoints at open: {:.1} MiB of /dev/shm", total as f64 / (1 << 20) as f64);
}
