//! Unit tests of the ring: packets crossing the ring's end, scribbled
//! headers, dense packing of small packets.

use super::consume::REPLY_LINES;
use super::produce::FULL_WAIT_MAX;
use super::*;
use crate::device::{InCall, MoreFollows};

/// Two endpoints of one process with a small ring; `b` is `a`'s peer.
fn pair(name: &str, slots: u32) -> (ShmDevice, ShmDevice, Ah) {
    let cfg =
        ShmConfig { prefix: format!("rdm4u{}{name}", std::process::id()), slots, mtu: 256, ..ShmConfig::default() };
    let a = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut b = ShmDevice::open_with(cfg).unwrap();
    let ah = b.insert(&a.local_addr()).unwrap();
    (a, b, ah)
}

fn packet(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k * 31 + i * 7) as u8).collect()
}

#[test]
fn packets_of_every_length_cross_the_ring_end_in_order_and_intact() {
    let (mut rx, mut tx, ah) = pair("order", 2);
    assert_eq!(rx.shape.ring, 1024, "2 x 256 bytes, room for two full entries");
    let mut want = std::collections::VecDeque::new();
    let (mut sent, mut got, mut again, mut skipped) = (0usize, 0usize, 0usize, 0usize);
    let mut k = 0usize;
    while got < 2000 {
        assert!(k < 100_000, "no progress");
        k += 1;
        // Lengths 0..=256 in a shuffled order; bounds exact, larger, or
        // past the MTU; bursts of up to 6 sends between reads.
        let len = (k * 97) % 257;
        let max_len = match k % 3 {
            0 => len,
            1 => len + (k % 50),
            _ => 10_000,
        };
        let p = packet(k, len);
        let r = tx.send_with(ah, 0, max_len, |buf: &mut [u8]| {
            assert_eq!(buf.len(), max_len.min(256), "the buffer is the bound");
            buf[..len].copy_from_slice(&p);
            len
        });
        match r {
            Ok(Sent::Done) => {
                sent += 1;
                // An empty packet is not delivered.
                if len > 0 {
                    want.push_back(p);
                } else {
                    skipped += 1;
                }
            }
            Err(DevError::Again) => again += 1,
            other => panic!("send: {other:?}"),
        }
        // Read a few, often none, so the ring fills now and then.
        let max = if k % 7 == 0 { [1, 3, 8][k % 3] } else { 0 };
        rx.recv(max, |from, pkt: &[u8], _| {
            assert_eq!(from, None, "the sender is not in rx's address vector");
            assert_eq!(want.pop_front().as_deref(), Some(pkt), "packet {got}");
            got += 1;
        });
    }
    assert!(again > 0, "the ring never filled");
    assert!(skipped > 0 && sent > got);
    // 2000 packets of ~128 bytes went around a 1 KiB ring many times.
    assert!(rx.head > 100 * 1024);
}

#[test]
fn a_peer_scribbling_entry_headers_gets_nothing_delivered_and_the_ring_goes_on() {
    let (mut rx, mut tx, ah) = pair("scribble", 4);
    let seal = rx.map.u64_at(off::SEAL).load(Ordering::Relaxed);
    let tail = rx.map.u64_at(off::TAIL);
    let ring = rx.shape.ring;
    // Forged entries, each in 64 bytes claimed as a producer would:
    // (length, entry length) that no producer writes.
    let forged = [(300u32, 64u32), (41, 63), (10, 0), (10, 1 << 30), (0, 64), (u32::MAX, 64)];
    for (len, span) in forged {
        let pos = tail.fetch_add(64, Ordering::Relaxed);
        let e = HDR_LEN + (pos as usize & (ring - 1));
        rx.map.u32_at(e + 16).store(len, Ordering::Relaxed);
        rx.map.u32_at(e + 20).store(span, Ordering::Relaxed);
        rx.map.u64_at(e).store((pos + 1) ^ seal, Ordering::Release);
    }
    let mut n = 0;
    rx.recv(64, |_, pkt: &[u8], _| -> () { panic!("delivered a forged entry of {} bytes", pkt.len()) });
    assert_eq!(rx.head, 64 * forged.len() as u64);
    // A real packet after them arrives.
    tx.send(ah, b"after", 0).unwrap();
    rx.recv(64, |_, pkt: &[u8], _| {
        assert_eq!(pkt, b"after");
        n += 1;
    });
    assert_eq!(n, 1);
}

/// The express receive applies the same checks: forged entries that name
/// the last sender are not handed over and stay for `recv`, which skips
/// them; so does a packet marked `MORE` (for the trail), which `recv`
/// delivers; a real packet after them goes the express way.
#[test]
fn the_express_receive_hands_over_no_forged_entry() {
    let (mut rx, mut tx, ah) = pair("scribblex", 4);
    let from_tx = rx.insert(&tx.local_addr()).unwrap();
    tx.send(ah, b"first", 0).unwrap();
    assert_eq!(rx.recv(64, |from, _: &[u8], _| assert_eq!(from, Some(from_tx))), 1);
    let seal = rx.map.u64_at(off::SEAL).load(Ordering::Relaxed);
    let ring = rx.shape.ring;
    // One at a time, each at the head: (length, entry length, whether
    // `recv` delivers it).
    let entries = [(300u32, 64u32, false), (41, 63, false), (10, 0, false), (10, 1 << 30, false)];
    let more = [(0, 64, false), (u32::MAX, 64, false), (60, 64, false), (10, 64 | segment::MORE, true)];
    for (len, span, real) in entries.into_iter().chain(more) {
        let pos = rx.map.u64_at(off::TAIL).fetch_add(64, Ordering::Relaxed);
        let e = HDR_LEN + (pos as usize & (ring - 1));
        rx.map.u64_at(e + 8).store(segment::word(tx.epid, tx.connid), Ordering::Relaxed);
        rx.map.u32_at(e + 16).store(len, Ordering::Relaxed);
        rx.map.u32_at(e + 20).store(span, Ordering::Relaxed);
        rx.map.u64_at(e).store((pos + 1) ^ seal, Ordering::Release);
        let took = rx.recv_express(64, |_, pkt: &[u8]| panic!("handed over ({len}, {span}): {} bytes", pkt.len()));
        assert_eq!((took, rx.head), ((0, true), pos), "({len}, {span})");
        let mut n = 0;
        rx.recv(64, |_, _: &[u8], _| n += 1);
        assert_eq!((n, rx.head), (usize::from(real), pos + 64), "({len}, {span})");
    }
    tx.send(ah, b"after", 0).unwrap();
    let mut got = Vec::new();
    assert_eq!(
        rx.recv_express(64, |from, pkt: &[u8]| {
            got.push((from, pkt.to_vec()));
            true
        }),
        (1, false)
    );
    assert_eq!(got, [(from_tx, b"after".to_vec())]);
}

#[test]
fn small_packets_take_one_cache_line_each() {
    let (mut rx, mut tx, ah) = pair("dense", 2);
    for k in 0..10u8 {
        tx.send_with(ah, 0, 40, |buf: &mut [u8]| {
            buf[..8].fill(k);
            8
        })
        .unwrap();
    }
    let mut seen = Vec::new();
    assert_eq!(rx.recv(64, |_, p: &[u8], _| seen.push(p[0])), 10);
    assert_eq!(seen, (0..10).collect::<Vec<u8>>());
    assert_eq!(rx.head, 640, "ten entries of 24 + 40 bytes");
}

#[test]
fn a_gathered_send_is_copied_into_the_ring_and_arrives_whole() {
    let (mut rx, mut tx, ah) = pair("gather", 2);
    let mut payload = crate::mem::OwnedBuf::from_slice(&packet(5, 200));
    let hdr = [0xA5u8; 24];
    let r = tx.send_gather(
        ah,
        9,
        hdr.len(),
        |buf: &mut [u8]| {
            buf[..hdr.len()].copy_from_slice(&hdr);
            hdr.len()
        },
        payload.buf(),
    );
    assert_eq!(r, Ok(Sent::Done), "the shm device copies at once: the buffer is free on return");
    payload.bytes_mut().fill(0);
    let mut got = Vec::new();
    assert_eq!(
        rx.recv(8, |_, p: &[u8], gathered| {
            assert!(gathered.is_none(), "the payload is in the packet");
            got = p.to_vec();
        }),
        1
    );
    assert_eq!(&got[..24], &hdr[..]);
    assert_eq!(&got[24..], &packet(5, 200)[..]);
    // A header and payload larger than the MTU is refused, nothing is sent.
    let mut big = crate::mem::OwnedBuf::zeroed(240);
    let r = tx.send_gather(
        ah,
        10,
        hdr.len(),
        |buf: &mut [u8]| {
            buf[..hdr.len()].copy_from_slice(&hdr);
            hdr.len()
        },
        big.buf(),
    );
    assert_eq!(r, Err(DevError::Failed(Status::Inval)));
    assert_eq!(rx.recv(8, |_, _: &[u8], _| -> () { panic!("an oversized packet was delivered") }), 0);
}

/// Minor page faults of the calling thread so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    ru.ru_minflt
}

#[test]
fn the_first_pass_through_a_ring_takes_no_page_faults() {
    // A 256 KiB ring (64 pages), whole from the start (a ring that grows
    // has the page tables of its new part filled as it grows, which
    // counts as faults), mapped by both devices of this process.
    let cfg = ShmConfig {
        prefix: format!("rdm4u{}faults", std::process::id()),
        slots: 64,
        start_slots: 64,
        mtu: 4096,
        ..ShmConfig::default()
    };
    let mut rx = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut tx = ShmDevice::open_with(cfg).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    let payload = [0x5Au8; 4000];
    let mut got = 0usize;
    let before = minor_faults();
    // 256 packets of ~4 KiB: every page of the ring written and read once.
    for _ in 0..256 {
        tx.send_with(ah, 0, payload.len(), |buf: &mut [u8]| {
            buf[..payload.len()].copy_from_slice(&payload);
            payload.len()
        })
        .unwrap();
        rx.recv(8, |_, p: &[u8], _| got += usize::from(p.len() == payload.len()));
    }
    let faults = minor_faults() - before;
    assert_eq!(got, 256);
    // Without MAP_POPULATE: one fault per page per mapping, about 128.
    assert!(faults < 16, "{faults} page faults on the data path");
}

#[test]
fn a_sender_that_finds_the_ring_full_looks_at_its_head_again_only_after_a_growing_wait() {
    let (mut rx, mut tx, ah) = pair("backoff", 2);
    let full = |tx: &mut ShmDevice| tx.send(ah, &[7u8; 200], 0);
    // Fill the ring (two full-size entries).
    let mut filled = 0;
    while full(&mut tx).is_ok() {
        filled += 1;
        assert!(filled < 10, "a 1 KiB ring took {filled} entries of 256 bytes");
    }
    // That refusal read the head and found no room: wait 1. Each further
    // refusal after a wait reads the head again and doubles the wait while
    // the ring stays full: 1, 3, 7, 15, then 16 at most.
    let mut waits = Vec::new();
    for _ in 0..5 {
        let mut refused = 0;
        // Refused without a look until the wait is over, then refused
        // again after a look (nothing was read in between).
        while tx.peer(ah).unwrap().full_skip > 0 {
            assert_eq!(full(&mut tx), Err(DevError::Again));
            refused += 1;
        }
        assert_eq!(full(&mut tx), Err(DevError::Again));
        waits.push(refused);
    }
    assert_eq!(waits, [1, 3, 7, 15, 16]);
    // The owner reads everything: the sender still waits out its current
    // wait (16 refusals without a look), then finds the room at its next
    // look and starts afresh.
    assert_eq!(rx.recv(64, |_, _, _| ()), filled);
    for _ in 0..FULL_WAIT_MAX {
        assert_eq!(full(&mut tx), Err(DevError::Again));
    }
    assert_eq!(full(&mut tx), Ok(Sent::Done));
    assert_eq!(tx.peer(ah).unwrap().full_wait, 0);
}

/// A pair whose owner `rx` trails by `trail` bytes, with a 16 KiB ring
/// (in use from the start).
fn trail_pair(name: &str, trail: usize) -> (ShmDevice, ShmDevice, Ah) {
    let cfg = ShmConfig {
        prefix: format!("rdm4t{}{name}", std::process::id()),
        slots: 64,
        start_slots: 64,
        mtu: 256,
        trail: Some(trail),
        ..ShmConfig::default()
    };
    let a = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut b = ShmDevice::open_with(cfg).unwrap();
    let ah = b.insert(&a.local_addr()).unwrap();
    (a, b, ah)
}

/// Claims one 64-byte entry in `rx`'s ring as a producer that has not yet
/// written it; returns its position.
fn claim_unsealed(rx: &ShmDevice) -> u64 {
    rx.map.u64_at(off::TAIL).fetch_add(64, Ordering::Relaxed)
}

/// Publishes the entry claimed at `pos` as 64 bytes of padding.
fn seal_padding(rx: &ShmDevice, pos: u64) {
    let e = HDR_LEN + rx.shape.at(pos);
    rx.map.u64_at(e + 16).store(segment::word(0, 64), Ordering::Relaxed);
    rx.map.u64_at(e).store(rx.shape.sealed(pos), Ordering::Release);
}

/// Sends packet `k` of 200 bytes, marked as having a stream behind it or not.
fn send_marked(tx: &mut ShmDevice, ah: Ah, k: usize, more: bool) {
    tx.more_follows(more);
    assert_eq!(tx.send(ah, &packet(k, 200), 0), Ok(Sent::Done));
}

fn received(rx: &mut ShmDevice) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    rx.recv(64, |_, p: &[u8], _| got.push(p.to_vec()));
    got
}

#[test]
fn a_marked_packet_waits_while_an_entry_within_the_trail_is_being_written() {
    let (mut rx, mut tx, ah) = trail_pair("wait", 1024);
    assert_eq!(rx.trail, 1024);
    send_marked(&mut tx, ah, 1, true);
    let pos = claim_unsealed(&rx);
    for _ in 0..100 {
        assert!(received(&mut rx).is_empty(), "read while its producer writes within the trail");
    }
    assert_eq!(rx.head, 0);
    // The producer finishes: the packet is read (and the padding skipped).
    seal_padding(&rx, pos);
    assert_eq!(received(&mut rx), [packet(1, 200)]);
    assert_eq!(rx.head, pos + 64);
}

#[test]
fn a_marked_packet_is_read_at_once_when_no_entry_is_being_written() {
    let (mut rx, mut tx, ah) = trail_pair("idle", 1024);
    send_marked(&mut tx, ah, 1, true);
    send_marked(&mut tx, ah, 2, true);
    assert_eq!(received(&mut rx), [packet(1, 200), packet(2, 200)]);
}

#[test]
fn unmarked_packets_and_packets_a_trail_behind_are_not_held() {
    let (mut rx, mut tx, ah) = trail_pair("far", 1024);
    // Unmarked: read although an entry after it is being written.
    send_marked(&mut tx, ah, 1, false);
    let pos = claim_unsealed(&rx);
    assert_eq!(received(&mut rx), [packet(1, 200)]);
    seal_padding(&rx, pos);
    assert!(received(&mut rx).is_empty());
    // Marked, with a trail's worth (4 x 256 bytes) written after it before
    // the entry being written: read, and the packets after it too.
    send_marked(&mut tx, ah, 2, true);
    for k in 3..7 {
        send_marked(&mut tx, ah, k, false);
    }
    let pos = claim_unsealed(&rx);
    assert_eq!(received(&mut rx), (2..7).map(|k| packet(k, 200)).collect::<Vec<_>>());
    seal_padding(&rx, pos);
    // The hint is for one packet: the next send is unmarked again.
    tx.more_follows(true);
    tx.send(ah, &packet(7, 200), 0).unwrap();
    tx.send(ah, &packet(8, 200), 0).unwrap();
    let _pos = claim_unsealed(&rx);
    assert!(received(&mut rx).is_empty(), "the marked packet 7 waits");
    let sizes = |rx: &ShmDevice, at: u64| rx.map.u64_at(HDR_LEN + rx.shape.at(at) + 16).load(Ordering::Relaxed);
    let head = rx.head;
    let span = segment::halves(sizes(&rx, head)).1;
    assert_eq!(span & segment::MORE, segment::MORE);
    let next = head + u64::from(span & !segment::MORE);
    assert_eq!(segment::halves(sizes(&rx, next)).1 & segment::MORE, 0, "packet 8 is not marked");
}

#[test]
fn a_claim_never_sealed_holds_a_marked_packet_for_a_bounded_number_of_polls() {
    let (mut rx, mut tx, ah) = trail_pair("dead", 1024);
    send_marked(&mut tx, ah, 1, true);
    claim_unsealed(&rx); // a producer that died mid-write
    let mut polls = 0u32;
    while received(&mut rx).is_empty() {
        polls += 1;
        assert!(polls <= 2 << 20, "held for ever");
    }
    assert!(polls >= 1 << 20, "released after {polls} polls");
}

#[test]
fn the_default_trail_follows_the_l2_size_within_a_quarter_of_the_ring() {
    let cfg = ShmConfig::default();
    let t = cfg.trail_bytes();
    assert!(t >= 3 * 64 * 1024 && t % 1024 == 0, "{t}");
    assert_eq!(ShmConfig { trail: Some(0), ..cfg.clone() }.trail_bytes(), 0);
    let (rx, _tx, _ah) = trail_pair("cap", 1 << 30);
    assert_eq!(rx.trail, rx.shape.ring as u64 / 4);
}

#[test]
fn bulk_payloads_written_past_the_caches_arrive_whole_at_any_alignment() {
    let cfg = ShmConfig {
        prefix: format!("rdm4u{}nt", std::process::id()),
        slots: 8,
        mtu: 64 * 1024,
        far_ns: Some(0),
        ..ShmConfig::default()
    };
    let mut rx = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut tx = ShmDevice::open_with(cfg).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    assert!(tx.gather_nt(ah, far::NT_MIN), "far_ns Some(0): always past the caches");
    assert!(!tx.gather_nt(ah, far::NT_MIN - 1), "small payloads never");
    let src = packet(3, 64 * 1024);
    // Headers of 1 to 64 bytes put the payload at every alignment; payload
    // lengths around NT_MIN and up to the MTU, and sources at odd offsets.
    for (k, (hdr_len, plen, src_off)) in
        (1..=64).map(|h| (h, far::NT_MIN + 61 * h % 200, h % 7)).chain([(8, 64 * 1024 - 8, 0)]).enumerate()
    {
        let mut payload = crate::mem::OwnedBuf::from_slice(&src[src_off..src_off + plen]);
        let r = tx.send_gather(
            ah,
            k as u64,
            hdr_len,
            |buf: &mut [u8]| {
                buf[..hdr_len].fill(0xA5);
                hdr_len
            },
            payload.buf(),
        );
        assert_eq!(r, Ok(Sent::Done), "packet {k}");
        // One packet, maybe behind the padding that skips the ring's end.
        let mut got = Vec::new();
        for _ in 0..2 {
            if got.is_empty() {
                rx.recv(1, |_, p: &[u8], _| got = p.to_vec());
            }
        }
        assert_eq!(got.len(), hdr_len + plen, "packet {k}");
        assert!(got[..hdr_len].iter().all(|&b| b == 0xA5), "packet {k}: header");
        assert!(got[hdr_len..] == src[src_off..src_off + plen], "packet {k}: payload ({hdr_len}, {plen}, {src_off})");
    }
}

#[test]
fn only_an_answering_endpoint_asks_for_its_reply_lines_as_many_as_it_received() {
    // A receiver whose last packet was received (a one-way stream) never asks.
    assert_eq!(reply_lines(false, true, 64), 0);
    // Only after the first packet of a poll.
    assert_eq!(reply_lines(true, false, 64), 0);
    // One line for an entry of one line (an 8 B message), two for two, at
    // most REPLY_LINES for anything longer.
    assert_eq!(reply_lines(true, true, 64), 1);
    assert_eq!(reply_lines(true, true, 128), 2);
    assert_eq!(reply_lines(true, true, 4160), REPLY_LINES);
    assert_eq!(reply_lines(true, true, 65536), REPLY_LINES);
}

#[test]
fn ping_pongs_whose_replies_are_asked_for_ahead_cross_the_ring_end_intact() {
    // Both directions; every reply is asked for ahead (each side sent
    // last), over rings of 1 KiB whose ends the asked-for lines cross.
    let (mut a, mut b, to_a) = pair("pingpong", 2);
    let to_b = a.insert(&b.local_addr()).unwrap();
    for k in 0..600usize {
        let len = [8, 40, 100, 200, 256][k % 5];
        let (ping, pong) = (packet(k, len), packet(k + 1000, len));
        assert_eq!(a.send(to_b, &ping, 0), Ok(Sent::Done));
        let mut got = 0;
        b.recv(4, |from, pkt: &[u8], _| {
            assert_eq!((from, pkt), (Some(to_a), ping.as_slice()), "ping {k}");
            got += 1;
        });
        assert_eq!(got, 1);
        assert_eq!(b.send(to_a, &pong, 0), Ok(Sent::Done));
        a.recv(4, |from, pkt: &[u8], _| {
            assert_eq!((from, pkt), (Some(to_b), pong.as_slice()), "pong {k}");
            got += 1;
        });
        assert_eq!(got, 2);
    }
    // 600 entries of up to 320 bytes each way went around 1 KiB rings.
    assert!(a.head > 50 * 1024 && b.head > 50 * 1024);
}

/// `rx`, `tx` with a ring of 64 KiB (in use from the start) and a lag of
/// 4 KiB (64 lines), `rx`
/// knowing `tx` (so that the express receive takes its packets), and a
/// first packet already taken.
fn lag_pair(name: &str, lag: usize) -> (ShmDevice, ShmDevice, Ah, Ah) {
    let cfg = ShmConfig {
        prefix: format!("rdm4u{}{name}", std::process::id()),
        slots: 256,
        start_slots: 256,
        mtu: 256,
        lag,
        ..ShmConfig::default()
    };
    let mut rx = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut tx = ShmDevice::open_with(cfg).unwrap();
    let ah = tx.insert(&rx.local_addr()).unwrap();
    let from_tx = rx.insert(&tx.local_addr()).unwrap();
    tx.send(ah, b"hello", 0).unwrap();
    assert_eq!(rx.recv(64, |from, _: &[u8], _| assert_eq!(from, Some(from_tx))), 1);
    (rx, tx, ah, from_tx)
}

/// Sends packets `ks` (8 bytes each, one line per entry).
fn send_small(tx: &mut ShmDevice, ah: Ah, ks: std::ops::Range<usize>) {
    for k in ks {
        assert_eq!(tx.send(ah, &packet(k, 8), 0), Ok(Sent::Done));
    }
}

/// One express poll: the packets taken, checked against `next`, `next + 1`, ...
fn take_express(rx: &mut ShmDevice, next: &mut usize, from: Ah) -> (usize, bool) {
    rx.recv_express(1000, |ah, pkt: &[u8]| {
        assert_eq!((ah, pkt), (from, packet(*next, 8).as_slice()), "packet {next}");
        *next += 1;
        true
    })
}

/// [`lag_pair`], `rx` in a fast one-way stream whose times do not get old.
fn lagging(name: &str, lag: usize) -> (ShmDevice, ShmDevice, Ah, Ah) {
    let (mut rx, tx, ah, from) = lag_pair(name, lag);
    rx.enter_stream(None);
    (rx, tx, ah, from)
}

#[test]
fn behind_a_fast_one_way_stream_packets_are_taken_a_lag_behind_the_tail_after_a_hold_or_10_us() {
    let (mut rx, mut tx, ah, from) = lagging("lagx", 4096);
    assert_eq!(rx.lag, 4096);
    let mut next = 0;
    // 100 lines claimed: the 36 more than 64 lines behind the tail are taken.
    send_small(&mut tx, ah, 0..100);
    assert_eq!(take_express(&mut rx, &mut next, from), (36, false));
    // Now all that is there lies within the lag: a hold begins, and polls
    // of either path read nothing while it lasts.
    assert_eq!(take_express(&mut rx, &mut next, from), (0, false));
    assert_eq!(rx.recv(64, |_, _: &[u8], _| -> () { panic!("read during a hold") }), 0);
    assert_eq!(take_express(&mut rx, &mut next, from), (0, false));
    // The first poll after the hold takes everything.
    std::thread::sleep(lag::HOLD * 2);
    assert_eq!(take_express(&mut rx, &mut next, from), (64, false));
    assert_eq!(next, 100);
    // A packet after that waits for one hold at most.
    send_small(&mut tx, ah, 100..101);
    assert_eq!(take_express(&mut rx, &mut next, from), (0, false));
    std::thread::sleep(lag::HOLD * 2);
    assert_eq!(take_express(&mut rx, &mut next, from), (1, false));
    // A stream whose last mark is older than a run's worth of gaps is
    // over: what comes after a pause is taken at once.
    rx.enter_stream(Some(lag::STREAM_GAP * lag::STREAM_RUN * 2));
    send_small(&mut tx, ah, 101..102);
    assert_eq!(take_express(&mut rx, &mut next, from), (1, false));
    assert!(!rx.in_stream());
    // A poll that finds the last one to take everything 10 us ago takes
    // everything, however much lies within the lag.
    send_small(&mut tx, ah, 102..202);
    rx.enter_stream(Some(lag::WAIT_MAX * 2));
    assert_eq!(take_express(&mut rx, &mut next, from), (100, false));
    // Sending ends the run: the next poll takes everything at once.
    rx.enter_stream(None);
    send_small(&mut tx, ah, 202..210);
    assert_eq!(take_express(&mut rx, &mut next, from), (0, false));
    let to_tx = rx.insert(&tx.local_addr()).unwrap();
    assert_eq!(rx.send(to_tx, b"answer", 0), Ok(Sent::Done));
    assert_eq!(take_express(&mut rx, &mut next, from), (8, false));
    assert!(!rx.in_stream());
}

#[test]
fn a_quick_run_of_one_way_packets_counts_as_a_stream_and_a_slow_one_never_does() {
    let (mut rx, mut tx, ah, from) = lag_pair("lagrun", 4096);
    let mut next = 0;
    // A trickle: a sleep between packets (at least a microsecond, 4x the
    // longest gap of a stream); every packet is taken by the first poll.
    for k in 0..3 * lag::STREAM_RUN as usize {
        std::thread::sleep(std::time::Duration::from_micros(1));
        send_small(&mut tx, ah, k..k + 1);
        assert_eq!(take_express(&mut rx, &mut next, from), (1, false), "packet {k}");
        assert!(!rx.in_stream());
    }
    // Runs of back-to-back packets in rounds of 64. A preempted run may
    // miss the rate; one of twenty has to make it.
    let mut sent = next;
    let mut stream = false;
    for _ in 0..20 {
        for _ in 0..2 * lag::STREAM_RUN / 64 {
            send_small(&mut tx, ah, sent..sent + 64);
            sent += 64;
            while take_express(&mut rx, &mut next, from).0 > 0 {}
        }
        stream |= rx.in_stream();
        if stream {
            break;
        }
    }
    assert!(stream, "no run of {} packets counted as a stream", 2 * lag::STREAM_RUN);
    // Held packets still arrive: the rest are taken within a few holds.
    send_small(&mut tx, ah, sent..sent + 100);
    sent += 100;
    for _ in 0..1000 {
        take_express(&mut rx, &mut next, from);
        if next == sent {
            break;
        }
        std::thread::sleep(lag::HOLD);
    }
    assert_eq!(next, sent);
}

#[test]
fn without_a_lag_no_run_counts_as_a_stream() {
    let (mut rx, mut tx, ah, from) = lag_pair("lagoff", 0);
    assert_eq!(rx.lag, 0);
    let mut next = 0;
    for _ in 0..4 * lag::STREAM_RUN / 64 {
        send_small(&mut tx, ah, next..next + 64);
        assert_eq!(take_express(&mut rx, &mut next, from), (64, false));
        assert!(!rx.in_stream());
    }
}

#[test]
fn an_odd_lag_is_rounded_to_lines_and_a_forged_tail_only_moves_the_limit() {
    let (mut rx, mut tx, ah, from) = lagging("lagodd", 1000);
    assert_eq!(rx.lag, 1024);
    let mut next = 0;
    // 17 lines: the one more than 16 lines behind the tail is taken.
    send_small(&mut tx, ah, 0..17);
    assert_eq!(take_express(&mut rx, &mut next, from), (1, false));
    // A peer moves the tail a few bytes past the lag: one more is taken
    // (never none, so a stream that ends there is read to its end).
    let tail = |rx: &ShmDevice, v: u64| rx.map.u64_at(off::TAIL).store(v, Ordering::Relaxed);
    tail(&rx, rx.head + 1024 + 8);
    assert_eq!(take_express(&mut rx, &mut next, from), (1, false));
    // A tail far ahead lets everything sealed be read, and nothing more.
    tail(&rx, u64::MAX / 2);
    assert_eq!(take_express(&mut rx, &mut next, from), (15, false));
    // A tail behind the head: a hold, then everything (none is left).
    tail(&rx, 0);
    assert_eq!(take_express(&mut rx, &mut next, from), (0, false));
    assert_eq!(next, 17);
}

/// Forged RDMA requests and answers (`ringrma.rs`) from a peer: a request
/// too short for its head is skipped, one whose write data overruns its
/// entry, one with a huge read length, one with a wrong key are refused
/// (answered, nothing written); a sound one is served; an answer naming no
/// request of ours completes nothing. No panic, and the ring goes on.
#[test]
fn forged_rdma_requests_and_answers_are_refused_or_dropped() {
    let (mut rx, mut tx, _) = pair("forgedrdma", 4);
    // The owner answers only peers it knows.
    rx.insert(&tx.local_addr()).unwrap();
    let mut mem = crate::mem::OwnedBuf::zeroed(64);
    let key = rx.table_reg(mem.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let addr = mem.buf().addr();
    let seal = rx.map.u64_at(off::SEAL).load(Ordering::Relaxed);
    let ring = rx.shape.ring;
    let tx_tail = || tx.map.u64_at(off::TAIL).load(Ordering::Relaxed);
    let answers_before = tx_tail();
    // (token, addr, key, len, write, span): 64-byte entries (40 bytes of
    // head, no room for data), one of 128 with 8 bytes of data.
    let reqs: [(u64, u64, u64, u64, u8, u32); 5] = [
        (1, addr, key, 100, 1, 64),      // write data past the entry
        (2, addr, key, u64::MAX, 0, 64), // a read length that overflows
        (3, addr, key ^ 4, 8, 1, 128),   // wrong key
        (4, addr, key, 8, 1, 128),       // sound
        (5, addr, key, 8, 0, 64),        // sound read, answered with data
    ];
    for (token, a, k, len, write, span) in reqs {
        let pos = rx.map.u64_at(off::TAIL).fetch_add(u64::from(span), Ordering::Relaxed);
        let e = HDR_LEN + (pos as usize & (ring - 1));
        // SAFETY: the claimed entry, inside the ring.
        let b = unsafe { rx.map.bytes(e + SLOT_HDR, span as usize - SLOT_HDR) };
        b[..8].copy_from_slice(&token.to_le_bytes());
        b[8..16].copy_from_slice(&a.to_le_bytes());
        b[16..24].copy_from_slice(&k.to_le_bytes());
        b[24..32].copy_from_slice(&len.to_le_bytes());
        b[32] = write;
        if span == 128 {
            b[40..48].copy_from_slice(&[0xEE; 8]);
        }
        rx.map.u64_at(e + 8).store(segment::word(tx.epid, tx.connid), Ordering::Relaxed);
        rx.map.u32_at(e + 16).store(0, Ordering::Relaxed);
        rx.map.u32_at(e + 20).store(span | segment::RDMA_REQ, Ordering::Relaxed);
        rx.map.u64_at(e).store((pos + 1) ^ seal, Ordering::Release);
    }
    // A request too short for its head: skipped, no answer.
    let pos = rx.map.u64_at(off::TAIL).fetch_add(64, Ordering::Relaxed);
    let e = HDR_LEN + (pos as usize & (ring - 1));
    rx.map.u64_at(e + 8).store(segment::word(tx.epid, tx.connid), Ordering::Relaxed);
    rx.map.u32_at(e + 16).store(0, Ordering::Relaxed);
    rx.map.u32_at(e + 20).store(32 | segment::RDMA_REQ, Ordering::Relaxed);
    rx.map.u64_at(e).store((pos + 1) ^ seal, Ordering::Release);
    rx.recv(64, |_, pkt: &[u8], _| -> () { panic!("delivered a notice as a packet of {} bytes", pkt.len()) });
    assert_eq!(mem.bytes()[..8], [0xEE; 8], "the sound write was served");
    assert!(mem.bytes()[8..].iter().all(|&x| x == 0), "nothing else written");
    // Five answers went to tx's ring; tx asked for none of them: nothing completes.
    assert_eq!(tx_tail() - answers_before, 5 * 64, "an answer per request with a whole head");
    let mut events = Vec::new();
    tx.recv(64, |_, pkt: &[u8], _| -> () { panic!("delivered an answer as a packet of {} bytes", pkt.len()) });
    tx.events(&mut events);
    assert!(events.iter().all(|e| !matches!(e, DevEvent::SendDone { .. })), "{events:?}");
    // The ring goes on.
    let to_rx = tx.insert(&rx.local_addr()).unwrap();
    tx.send(to_rx, b"after", 0).unwrap();
    let mut n = 0;
    rx.recv(64, |_, pkt: &[u8], _| {
        assert_eq!(pkt, b"after");
        n += 1;
    });
    assert_eq!(n, 1);
}

#[test]
fn a_peer_found_far_gets_long_read_above_64_kib_without_runt_and_the_epoch_tells() {
    // A limit of 1 ns: every timed load of the peer's head is "over".
    let cfg = ShmConfig { prefix: format!("rdm4u{}far", std::process::id()), far_ns: Some(1), ..ShmConfig::default() };
    let a = ShmDevice::open_with(cfg.clone()).unwrap();
    let mut b = ShmDevice::open_with(cfg.clone()).unwrap();
    let ah = b.insert(&a.local_addr()).unwrap();
    let close = b.peer_caps(ah);
    assert_eq!((close.longread_min, close.runt), (usize::MAX, true), "close: the ring");
    let epoch = b.caps_epoch();
    // Large packets: one head load timed per 16, the head moved before
    // each; the third high time makes the peer far.
    let head = a.map.u64_at(off::HEAD); // a's ring head, which b times
    let mut flipped_at = None;
    for k in 0..48u32 {
        head.fetch_add(1, Ordering::Relaxed);
        assert!(!b.gather_nt(ah, 64 << 10) || flipped_at.is_some() || k >= 32, "plain stores while close");
        if flipped_at.is_none() && b.caps_epoch() != epoch {
            flipped_at = Some(k);
        }
    }
    assert_eq!(flipped_at, Some(32), "far at the third timed load (packet 32), the epoch changed then");
    let far = b.peer_caps(ah);
    assert_eq!((far.longread_min, far.runt), (64 << 10, false), "far: long-read from 64 KiB, no runt");
    assert!(b.gather_nt(ah, 64 << 10), "far: bulk packets past the caches");
    // The device's own caps (and so a new peer's before it is timed) stay.
    assert_eq!(b.caps().longread_min, usize::MAX);
    // The application's long-read size wins over the far one.
    let set = ShmConfig {
        longread_min: 1 << 30,
        crowded_longread_min: usize::MAX,
        far_longread_min: usize::MAX,
        far_ns: Some(0),
        ..cfg
    };
    let mut c = ShmDevice::open_with(set).unwrap();
    let ah = c.insert(&a.local_addr()).unwrap();
    assert_eq!(c.peer_caps(ah).longread_min, 1 << 30, "RDM4_SHM_LONGREAD_MIN set: no far long-read");
}
