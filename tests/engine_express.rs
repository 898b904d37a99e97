//! The express receive (`Endpoint::progress_express` over the shm device):
//! it takes the usual eager message whole, with the completion the general
//! path would give, and declines everything else without changing anything,
//! so that the general path then does what it always did.

use std::time::{Duration, Instant};

use rdm4::device::shm::{ShmConfig, ShmDevice};
use rdm4::engine::{Addr, Config, CqFlags, CqSink, Cqe, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::Status;

type Ep = Endpoint<ShmDevice>;

/// A sink that takes every entry offered.
#[derive(Default)]
struct Got(Vec<Cqe>);

impl CqSink for Got {
    fn offer(&mut self, e: &Cqe) -> bool {
        self.0.push(*e);
        true
    }
}

fn open(name: &str) -> Ep {
    let prefix = format!("rdm4x{}{name}", std::process::id());
    // The whole ring from the start: a ring that grows puts a grow notice
    // in it, which the express path leaves to the general one (as it
    // does any entry without a packet), and these tests count what the
    // express path alone takes.
    let cfg = ShmConfig { prefix, peer_check: Duration::from_millis(20), start_slots: 128, ..ShmConfig::default() };
    Endpoint::new(ShmDevice::open_with(cfg).unwrap(), Config::default())
}

/// Progresses `ep` until its queue holds `n` completions (at most 10 s).
fn until(ep: &mut Ep, n: usize) -> Vec<Cqe> {
    let mut cq = Vec::new();
    let t = Instant::now();
    while cq.len() < n {
        assert!(t.elapsed() < Duration::from_secs(10), "{} of {n} completions", cq.len());
        ep.progress(0);
        ep.poll_cq(&mut cq, usize::MAX);
    }
    cq
}

fn tagged(tag: u64, context: u64) -> SendOpts {
    SendOpts { tag: Some(tag), cq_data: None, context }
}

/// Two endpoints that know each other, one message each way done (both
/// HANDSHAKEs exchanged): a's messages to b now have the usual layout.
/// Returns (a, b, a's address of b, b's address of a).
fn pair(name: &str) -> (Ep, Ep, Addr, Addr) {
    let (mut a, mut b) = (open(name), open(name));
    let a_to_b = a.av_insert(&b.addr()).unwrap();
    let b_to_a = b.av_insert(&a.addr()).unwrap();
    one_way(&mut a, &mut b, a_to_b);
    one_way(&mut b, &mut a, b_to_a);
    (a, b, a_to_b, b_to_a)
}

/// One byte from `from` to `to` (`dest`), both completions polled.
fn one_way(from: &mut Ep, to: &mut Ep, dest: Addr) {
    let mut r = OwnedBuf::zeroed(1);
    let mut s = OwnedBuf::from_slice(&[1]);
    to.recv(r.buf(), RecvOpts::default()).unwrap();
    from.send(dest, s.buf(), SendOpts::default()).unwrap();
    until(to, 1);
    until(from, 1);
}

#[test]
fn the_usual_message_is_taken_whole_with_its_completion() {
    let (mut a, mut b, a_to_b, b_to_a) = pair("whole");
    let mut r = OwnedBuf::zeroed(16);
    let rbuf = r.buf();
    b.recv(rbuf, RecvOpts { tag: Some((0x55, 0)), src: Some(b_to_a), context: 7 }).unwrap();
    let mut s = OwnedBuf::from_slice(b"8 bytes!");
    a.send(a_to_b, s.buf(), tagged(0x55, 1)).unwrap();
    let mut got = Got::default();
    assert_eq!(b.progress_express(&mut got, 4), (1, false), "one message, none behind it");
    assert_eq!(got.0.len(), 1);
    let e = got.0[0];
    assert_eq!((e.context, e.flags), (7, CqFlags::RECV | CqFlags::TAGGED));
    assert_eq!((e.len, e.olen, e.buf, e.tag, e.src), (8, 0, rbuf.addr(), 0x55, b_to_a));
    assert_eq!(e.status, Status::Success);
    assert_eq!(&r.bytes()[..8], b"8 bytes!");
    assert_eq!(&r.bytes()[8..], &[0; 8]);
    // It was taken: nothing more to receive, nothing queued.
    assert_eq!(b.progress_express(&mut got, 4).0, 0);
    b.progress(0);
    assert_eq!((b.cq_len(), b.unexpected_messages(), got.0.len()), (0, 0, 1));
    assert_eq!(until(&mut a, 1)[0].context, 1);
}

#[test]
fn untagged_messages_truncation_and_messages_behind() {
    let (mut a, mut b, a_to_b, _) = pair("more");
    let mut r1 = OwnedBuf::zeroed(4);
    let mut r2 = OwnedBuf::zeroed(8);
    b.recv(r1.buf(), RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    b.recv(r2.buf(), RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    let mut s1 = OwnedBuf::from_slice(b"abcdefgh");
    let mut s2 = OwnedBuf::from_slice(b"ijkl");
    a.send(a_to_b, s1.buf(), SendOpts::default()).unwrap();
    a.send(a_to_b, s2.buf(), SendOpts::default()).unwrap();
    let mut got = Got::default();
    // With room for one, each call takes one and is done: the second
    // message waits in the ring for the next call, not taken by the
    // general path.
    assert_eq!(b.progress_express(&mut got, 1), (1, false));
    assert_eq!((b.cq_len(), b.unexpected_messages()), (0, 0));
    assert_eq!(b.progress_express(&mut got, 1), (1, false));
    let [e1, e2] = [got.0[0], got.0[1]];
    assert_eq!((e1.context, e1.flags), (1, CqFlags::RECV | CqFlags::MSG));
    assert_eq!((e1.status, e1.len, e1.olen), (Status::Trunc, 4, 8));
    assert_eq!(r1.bytes(), b"abcd");
    assert_eq!((e2.context, e2.status, e2.len), (2, Status::Success, 4));
    assert_eq!(&r2.bytes()[..4], b"ijkl");
}

/// One call takes waiting messages up to its room (and is done) and stops
/// at the first that is not the usual case, which it leaves for the
/// general path.
#[test]
fn a_call_takes_messages_up_to_its_room_and_stops_at_another_case() {
    let (mut a, mut b, a_to_b, _) = pair("room");
    let mut rs: Vec<OwnedBuf> = (0..4).map(|_| OwnedBuf::zeroed(8)).collect();
    for (i, r) in rs.iter_mut().enumerate() {
        b.recv(r.buf(), RecvOpts { tag: Some((1, 0)), src: None, context: i as u64 }).unwrap();
    }
    let mut ss: Vec<OwnedBuf> = (0..5u8).map(|i| OwnedBuf::from_slice(&[i; 8])).collect();
    for (i, s) in ss.iter_mut().enumerate() {
        // The last one has a tag no receive wants.
        a.send(a_to_b, s.buf(), tagged(if i < 4 { 1 } else { 2 }, 0)).unwrap();
    }
    let mut got = Got::default();
    // Room ran out: done. Then the last receive takes the fourth, and the
    // fifth finds no receive that takes it: done too, and left in the
    // ring. A call that takes nothing leaves it to the general path.
    assert_eq!(b.progress_express(&mut got, 3), (3, false));
    assert_eq!(b.progress_express(&mut got, 3), (1, false));
    assert_eq!(b.progress_express(&mut got, 3), (0, true));
    let order: Vec<u64> = got.0.iter().map(|e| e.context).collect();
    assert_eq!(order, [0, 1, 2, 3]);
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(r.bytes(), &[i as u8; 8]);
    }
    b.progress(0);
    assert_eq!((b.unexpected_messages(), b.cq_len()), (1, 0));
}

/// Each case: the express receive returns `None` and takes nothing (the
/// sink gets nothing, the message is still there), and the general path
/// then delivers the message as before.
#[test]
fn whatever_is_not_the_usual_case_is_left_to_the_general_path() {
    let mut got = Got::default();

    // First contact: the message carries the sender's raw address.
    let (mut a, mut b) = (open("first1"), open("first1"));
    let a_to_b = a.av_insert(&b.addr()).unwrap();
    let mut r = OwnedBuf::zeroed(8);
    b.recv(r.buf(), RecvOpts { context: 3, ..RecvOpts::default() }).unwrap();
    let mut s = OwnedBuf::from_slice(b"hello");
    a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
    assert_eq!(b.progress_express(&mut got, 4).0, 0);
    assert_eq!(until(&mut b, 1)[0].context, 3);
    assert_eq!(&r.bytes()[..5], b"hello");

    // No receive posted: the message becomes unexpected by the general path.
    let (mut a, mut b, a_to_b, _) = pair("unexp");
    a.send(a_to_b, s.buf(), tagged(9, 0)).unwrap();
    assert_eq!(b.progress_express(&mut got, 4).0, 0);
    b.progress(0);
    assert_eq!(b.unexpected_messages(), 1);
    let mut r = OwnedBuf::zeroed(8);
    b.recv(r.buf(), RecvOpts { tag: Some((9, 0)), src: None, context: 4 }).unwrap();
    assert_eq!(until(&mut b, 1)[0].context, 4);
    assert_eq!(&r.bytes()[..5], b"hello");

    // The oldest receive wants another tag.
    let (mut a, mut b, a_to_b, _) = pair("tag");
    let mut r6 = OwnedBuf::zeroed(8);
    b.recv(r6.buf(), RecvOpts { tag: Some((6, 0)), src: None, context: 6 }).unwrap();
    a.send(a_to_b, s.buf(), tagged(5, 0)).unwrap();
    assert_eq!(b.progress_express(&mut got, 4).0, 0);
    b.progress(0);
    assert_eq!((b.unexpected_messages(), b.cq_len()), (1, 0));

    // The oldest receive wants another sender.
    let (mut a, mut b, a_to_b, _) = pair("src");
    let c = open("src");
    let b_to_c = b.av_insert(&c.addr()).unwrap();
    let mut rc = OwnedBuf::zeroed(8);
    b.recv(rc.buf(), RecvOpts { tag: None, src: Some(b_to_c), context: 8 }).unwrap();
    a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
    assert_eq!(b.progress_express(&mut got, 4).0, 0);
    b.progress(0);
    assert_eq!((b.unexpected_messages(), b.cq_len()), (1, 0));

    // A completion is queued already: entries keep their order.
    let (mut a, mut b, a_to_b, b_to_a) = pair("order");
    let mut r = OwnedBuf::zeroed(8);
    b.recv(r.buf(), RecvOpts { context: 11, ..RecvOpts::default() }).unwrap();
    b.send(b_to_a, s.buf(), SendOpts { context: 10, ..SendOpts::default() }).unwrap();
    assert_eq!(b.cq_len(), 1, "the send completed at once and waits");
    a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
    assert_eq!(b.progress_express(&mut got, 4).0, 0);
    let order: Vec<u64> = until(&mut b, 2).iter().map(|e| e.context).collect();
    assert_eq!(order, [10, 11]);

    assert!(got.0.is_empty(), "{:?}", got.0);
}

/// A call that delivered messages stops before the next usual message when
/// no receive is posted for it, and leaves it in the ring (not taken as
/// unexpected): a receive posted before the next call takes it by the
/// express path. A call that delivers nothing takes it by the general path.
#[test]
fn a_call_that_delivered_leaves_a_message_without_a_receive_for_the_next() {
    let (mut a, mut b, a_to_b, _) = pair("ahead");
    let mut r1 = OwnedBuf::zeroed(8);
    b.recv(r1.buf(), RecvOpts { context: 1, ..RecvOpts::default() }).unwrap();
    let mut ss: Vec<OwnedBuf> = (0..3u8).map(|i| OwnedBuf::from_slice(&[i + 1; 8])).collect();
    for s in ss.iter_mut() {
        a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
    }
    let mut got = Got::default();
    assert_eq!(b.progress_express(&mut got, 8), (1, false), "done after the one with a receive");
    assert_eq!((b.cq_len(), b.unexpected_messages()), (0, 0), "the second is still in the ring");
    // A receive posted before the next call: the express path takes it.
    let mut r2 = OwnedBuf::zeroed(8);
    b.recv(r2.buf(), RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    assert_eq!(b.progress_express(&mut got, 8), (1, false));
    assert_eq!(r2.bytes(), &[2; 8]);
    // No receive: this call delivers nothing, and the general path takes
    // the third as unexpected; a later receive completes from it.
    assert_eq!(b.progress_express(&mut got, 8), (0, true));
    b.progress(0);
    assert_eq!((b.cq_len(), b.unexpected_messages()), (0, 1));
    let mut r3 = OwnedBuf::zeroed(8);
    b.recv(r3.buf(), RecvOpts { context: 3, ..RecvOpts::default() }).unwrap();
    assert_eq!(until(&mut b, 1)[0].context, 3);
    assert_eq!(r3.bytes(), &[3; 8]);
    let order: Vec<u64> = got.0.iter().map(|e| e.context).collect();
    assert_eq!(order, [1, 2]);
    assert_eq!(r1.bytes(), &[1; 8]);
}

/// The express receive runs the device's periodic peer check itself (every
/// 64th packet), so a receiver kept busy by it alone, every call taking a
/// message, still notices a peer that closed: an operation towards it
/// fails.
#[test]
fn a_receiver_fed_by_the_express_path_alone_still_checks_the_peers() {
    let (mut a, mut b, a_to_b, _) = pair("busy");
    let mut c = open("busy");
    let b_to_c = b.av_insert(&c.addr()).unwrap();
    let c_to_b = c.av_insert(&b.addr()).unwrap();
    one_way(&mut b, &mut c, b_to_c);
    one_way(&mut c, &mut b, c_to_b);
    // A long message to c waits for c's CTS, which never comes.
    let mut big = OwnedBuf::zeroed(1 << 20);
    b.send(b_to_c, big.buf(), SendOpts { context: 5, ..SendOpts::default() }).unwrap();
    b.progress(0);
    // a is the last sender again (the express path's condition).
    one_way(&mut a, &mut b, a_to_b);
    // From here on b makes progress by the express path alone, until the
    // check finds c gone (c dies: no close notice).
    c.into_device().vanish();
    let mut r = OwnedBuf::zeroed(8);
    let mut s = OwnedBuf::from_slice(b"x");
    let t = Instant::now();
    let mut taken = 0;
    while b.cq_len() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "the closed peer was never noticed");
        b.recv(r.buf(), RecvOpts::default()).unwrap();
        a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
        let mut got = Got::default();
        match b.progress_express(&mut got, 1) {
            (1, false) => taken += 1,
            // A hold behind what became a fast one-way stream (the shm
            // device's lag): nothing taken this time.
            (0, false) => {}
            // The check found c gone: the general path handles the event
            // (and takes the message).
            (0, true) => {
                b.progress(0);
                break;
            }
            other => panic!("{other:?} after {taken} messages"),
        }
        until(&mut a, 1);
    }
    assert!(taken >= 1, "{taken} messages by the express path before the check");
    let e = until(&mut b, 1);
    assert!(e.iter().any(|e| (e.context, e.status) == (5, Status::PeerUnreachable)), "{e:?}");
}

/// A poll that finds no packet does the rest of a progress call on the
/// express path: the device's peer check runs, and an operation towards a
/// peer that died fails.
#[test]
fn an_empty_express_poll_still_checks_the_peers() {
    let (a, mut b, _, b_to_a) = pair("lost");
    // A long message waits for a's CTS, which never comes.
    let mut big = OwnedBuf::zeroed(1 << 20);
    b.send(b_to_a, big.buf(), SendOpts { context: 5, ..SendOpts::default() }).unwrap();
    // a dies (no close notice): the peer check finds it.
    a.into_device().vanish();
    let mut got = Got::default();
    let t = Instant::now();
    while b.cq_len() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "the closed peer was never noticed");
        assert_eq!(b.progress_express(&mut got, 4), (0, false), "not the express path's empty poll");
    }
    let e = until(&mut b, 1)[0];
    assert_eq!((e.context, e.status), (5, Status::PeerUnreachable));
    assert!(got.0.is_empty());
}

/// A receive that takes an unexpected message when posted marks the queue
/// (its completion waits there) until a look finds the queue empty: the C
/// API's poll then hands the queue out first, so that the express path may
/// run.
#[test]
fn a_receive_that_took_an_unexpected_message_marks_the_queue_until_emptied() {
    let (mut a, mut b, a_to_b, b_to_a) = pair("mark");
    let mut s = OwnedBuf::from_slice(b"early");
    a.send(a_to_b, s.buf(), SendOpts::default()).unwrap();
    let mut got = Got::default();
    assert_eq!(b.progress_express(&mut got, 4), (0, true), "no receive: the general path's");
    b.progress(0);
    assert_eq!(b.unexpected_messages(), 1);
    assert!(!b.took_unexpected(), "nothing taken by a receive yet");
    // A send's completion first, then the receive that takes the message.
    b.send(b_to_a, s.buf(), SendOpts { context: 1, ..SendOpts::default() }).unwrap();
    let mut r = OwnedBuf::zeroed(8);
    b.recv(r.buf(), RecvOpts { context: 2, ..RecvOpts::default() }).unwrap();
    assert!(b.took_unexpected());
    assert_eq!(b.cq_len(), 2);
    let mut order = Vec::new();
    assert_eq!(b.drain_cq(1, |_, e| order.push(e.context)), 1);
    assert!(b.took_unexpected(), "its entry may still wait");
    assert_eq!(b.drain_cq(8, |_, e| order.push(e.context)), 1);
    assert!(b.took_unexpected(), "marked until a look finds the queue empty");
    assert!(!b.took_unexpected(), "the last look found the queue empty");
    assert_eq!(order, [1, 2]);
    assert_eq!(&r.bytes()[..5], b"early");
    until(&mut a, 1);
}

/// Polls `ep` by `Endpoint::poll_into` with room for `room` entries until
/// `n` came (at most 10 s); each poll must hand out its entries at
/// indices 0, 1, ... below the room. Returns their contexts in the order
/// handed out.
fn poll_into_until(ep: &mut Ep, room: usize, n: usize) -> Vec<u64> {
    let mut contexts = Vec::new();
    let t = Instant::now();
    while contexts.len() < n {
        assert!(t.elapsed() < Duration::from_secs(10), "{} of {n} completions", contexts.len());
        let seen = std::cell::RefCell::new(Vec::new());
        let k = ep.poll_into(room, || 0, |i, e: &Cqe| seen.borrow_mut().push((i, e.context)));
        let seen = seen.into_inner();
        assert!(k <= room && k == seen.len(), "{k} handed out, {} written, room {room}", seen.len());
        assert!(seen.iter().enumerate().all(|(at, &(i, _))| i == at), "indices {seen:?}");
        contexts.extend(seen.iter().map(|&(_, c)| c));
    }
    contexts
}

#[test]
fn poll_into_hands_out_every_completion_once_oldest_first_within_its_room() {
    let (mut a, mut b, a_to_b, b_to_a) = pair("pollinto");
    let mut r: Vec<OwnedBuf> = (0..5).map(|_| OwnedBuf::zeroed(8)).collect();
    for (i, r) in r.iter_mut().enumerate() {
        b.recv(r.buf(), RecvOpts { tag: Some((9, 0)), src: Some(b_to_a), context: 10 + i as u64 }).unwrap();
    }
    let mut s = OwnedBuf::from_slice(b"8 bytes!");
    for i in 0..5 {
        a.send(a_to_b, s.buf(), tagged(9, 20 + i)).unwrap();
    }
    // Receives by the express path and the general one, two at a time.
    assert_eq!(poll_into_until(&mut b, 2, 5), [10, 11, 12, 13, 14]);
    assert_eq!(poll_into_until(&mut a, 8, 5), [20, 21, 22, 23, 24]);
    assert_eq!(b.poll_into(2, || 0, |_, e: &Cqe| panic!("nothing more: {e:?}")), 0);
    assert!(r.iter().all(|r| r.bytes() == b"8 bytes!"));
}
