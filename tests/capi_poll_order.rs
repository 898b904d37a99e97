//! `rdm4_poll` hands completions out oldest first and writes no more than
//! `max` of them, whether an entry was queued or written straight into the
//! caller's array while the message was received; injected messages leave
//! none, whichever way they went out.

use std::ffi::c_void;

use rdm4::capi::*;

struct Pair {
    a: *mut rdm4_ep,
    b: *mut rdm4_ep,
    to_a: rdm4_addr,
    to_b: rdm4_addr,
}

impl Pair {
    fn open() -> Pair {
        // One prefix for the whole process: the variable is the process's.
        std::env::set_var("RDM4_SHM_PREFIX", format!("rdm4ord{}", std::process::id()));
        let open = || {
            let mut ep = std::ptr::null_mut();
            assert_eq!(rdm4_ep_open(std::ptr::null(), &mut ep), 0);
            let mut name = [0u8; 32];
            let mut len = name.len();
            assert_eq!(rdm4_ep_getname(ep, name.as_mut_ptr().cast(), &mut len), 0);
            (ep, name)
        };
        let ((a, a_name), (b, b_name)) = (open(), open());
        let (mut to_a, mut to_b) = (0, 0);
        assert_eq!(rdm4_av_insert(a, b_name.as_ptr().cast(), 1, &mut to_b), 1);
        assert_eq!(rdm4_av_insert(b, a_name.as_ptr().cast(), 1, &mut to_a), 1);
        Pair { a, b, to_a, to_b }
    }

    /// One exchange each way, polled to the end: the HANDSHAKEs are done,
    /// so later messages take the common path.
    fn warm_up(&self) {
        let mut r = [0u8; 1];
        let s = [1u8; 1];
        for (from, to, dest) in [(self.a, self.b, self.to_b), (self.b, self.a, self.to_a)] {
            assert_eq!(rdm4_recv(to, r.as_mut_ptr().cast(), 1, RDM4_ADDR_UNSPEC, std::ptr::null_mut()), 0);
            assert_eq!(rdm4_send(from, s.as_ptr().cast(), 1, dest, std::ptr::null_mut()), 0);
            assert_eq!(drain(from, 1).len(), 1);
            assert_eq!(drain(to, 1).len(), 1);
        }
    }
}

impl Pair {
    /// b posts `n` tagged receives from `src` (contexts 10, 11, ...), then a
    /// sends `n` messages, the k-th all bytes k (contexts 20, 21, ...).
    /// Returns the receive buffers, lent to b until their completions.
    fn a_to_b(&self, n: usize, src: rdm4_addr) -> Vec<[u8; 8]> {
        let mut bufs = vec![[0u8; 8]; n];
        for (i, r) in bufs.iter_mut().enumerate() {
            assert_eq!(rdm4_trecv(self.b, r.as_mut_ptr().cast(), 8, src, 5, 0, ctx(10 + i)), 0);
        }
        for i in 0..n {
            let m = [i as u8; 8];
            assert_eq!(rdm4_tsend(self.a, m.as_ptr().cast(), 8, self.to_b, 5, ctx(20 + i)), 0);
        }
        bufs
    }
}

impl Pair {
    /// A warm pair where b's own send (context 100) completed at once over
    /// shm and waits in its queue, and then three messages a -> b as
    /// [`Pair::a_to_b`] from `to_a` (contexts 10-12).
    fn queued_send_then_three() -> (Pair, Vec<[u8; 8]>) {
        let p = Pair::open();
        p.warm_up();
        let s = [9u8; 8];
        assert_eq!(rdm4_tsend(p.b, s.as_ptr().cast(), 8, p.to_a, 6, ctx(100)), 0);
        let bufs = p.a_to_b(3, p.to_a);
        (p, bufs)
    }
}

/// Receive buffer k holds message k.
fn check(bufs: &[[u8; 8]]) {
    for (i, r) in bufs.iter().enumerate() {
        assert_eq!(r, &[i as u8; 8]);
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        assert_eq!(rdm4_ep_close(self.a), 0);
        assert_eq!(rdm4_ep_close(self.b), 0);
    }
}

fn zero() -> rdm4_cqe {
    // SAFETY: rdm4_cqe is plain data; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Polls `ep` (up to 8 at a time) until `n` entries came (at most 2 s).
fn drain(ep: *mut rdm4_ep, n: usize) -> Vec<rdm4_cqe> {
    let mut got = Vec::new();
    let mut cq = [zero(); 8];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while got.len() < n && std::time::Instant::now() < deadline {
        let k = rdm4_poll(ep, cq.as_mut_ptr(), cq.len());
        assert!(k >= 0, "rdm4_poll: {k}");
        got.extend_from_slice(&cq[..k as usize]);
    }
    got
}

fn ctx(v: usize) -> *mut c_void {
    v as *mut c_void
}

/// A send completion queued before messages arrive comes out before their
/// receives, one entry per call with `max` 1, and then the receives in
/// the order their messages were sent.
#[test]
fn queued_entries_come_out_before_entries_of_later_messages() {
    let (p, bufs) = Pair::queued_send_then_three();
    let mut order = Vec::new();
    let mut cq = [zero(); 2];
    for _ in 0..1000 {
        cq[1].context = ctx(0xdead);
        let k = rdm4_poll(p.b, cq.as_mut_ptr(), 1);
        assert!((0..=1).contains(&k), "rdm4_poll with max 1 gave {k}");
        assert_eq!(cq[1].context, ctx(0xdead), "an entry written past max");
        if k == 1 {
            assert_eq!(cq[0].status, 0);
            order.push(cq[0].context as usize);
        }
        if order.len() == 4 {
            break;
        }
    }
    assert_eq!(order, [100, 10, 11, 12]);
    check(&bufs);
    assert_eq!(drain(p.a, 3).len(), 3);
}

/// With room for all, one call hands out the queued send completion and
/// then the receives taken in that call, each written once, in order,
/// none past the count returned.
#[test]
fn a_queued_entry_and_the_receives_behind_it_come_out_in_one_call() {
    let (p, bufs) = Pair::queued_send_then_three();
    let mut cq = [zero(); 6];
    for e in &mut cq {
        e.context = ctx(0xdead);
    }
    let k = rdm4_poll(p.b, cq.as_mut_ptr(), 5);
    let got: Vec<usize> = cq[..k as usize].iter().map(|e| e.context as usize).collect();
    assert_eq!(got, [100, 10, 11, 12], "shm: the messages are in b's ring before the call");
    assert_eq!(cq[0].flags, RDM4_CQ_SEND | RDM4_CQ_TAGGED);
    assert!(cq[1..4].iter().all(|e| e.flags == RDM4_CQ_RECV | RDM4_CQ_TAGGED && e.len == 8 && e.src == p.to_a));
    assert_eq!([cq[4].context, cq[5].context], [ctx(0xdead), ctx(0xdead)]);
    check(&bufs);
    assert_eq!(drain(p.a, 3).len(), 3);
}

/// Messages that arrive together are spread over calls by `max`: none is
/// lost or written past the room given, the rest come out in order, and a
/// call with no room (NULL, 0) takes none.
#[test]
fn entries_beyond_max_wait_for_the_next_call_in_order() {
    let p = Pair::open();
    p.warm_up();
    let bufs = p.a_to_b(5, RDM4_ADDR_UNSPEC);
    assert_eq!(rdm4_poll(p.b, std::ptr::null_mut(), 0), 0);
    let mut cq = [zero(); 4];
    for e in &mut cq {
        e.context = ctx(0xdead);
    }
    assert_eq!(rdm4_poll(p.b, cq.as_mut_ptr(), 2), 2);
    assert_eq!([cq[0].context as usize, cq[1].context as usize], [10, 11]);
    assert_eq!([cq[2].context, cq[3].context], [ctx(0xdead), ctx(0xdead)]);
    assert_eq!(cq[0].src, p.to_a);
    assert_eq!(cq[0].flags, RDM4_CQ_RECV | RDM4_CQ_TAGGED);
    assert_eq!(cq[0].len, 8);
    let rest: Vec<usize> = drain(p.b, 3).iter().map(|e| e.context as usize).collect();
    assert_eq!(rest, [12, 13, 14]);
    check(&bufs);
    assert_eq!(drain(p.a, 5).len(), 5);
}

/// a injects three tagged messages (the k-th all bytes `first + k`) into
/// one buffer, overwriting it after each call, as the caller may; b has
/// receives posted for them (contexts 10 + `first`, ...).
fn inject_three(p: &Pair, first: u8, bufs: &mut [[u8; 8]]) {
    for (i, r) in bufs.iter_mut().enumerate() {
        let c = ctx(10 + usize::from(first) + i);
        assert_eq!(rdm4_trecv(p.b, r.as_mut_ptr().cast(), 8, RDM4_ADDR_UNSPEC, 5, 0, c), 0);
    }
    let mut m = [0u8; 8];
    for i in 0..3 {
        m.fill(first + i);
        assert_eq!(rdm4_tinject(p.a, m.as_ptr().cast(), 8, p.to_b, 5), 0);
        m.fill(0xEE);
    }
}

/// Injected messages arrive intact and in order, both before the peer's
/// HANDSHAKE is known (the library sends a copy) and after it (straight
/// from the caller's buffer during the call), and the sender's queue gets
/// no entry for any of them: its next send's completion is the only one.
#[test]
fn injected_messages_arrive_in_order_and_complete_nothing() {
    let p = Pair::open();
    let mut cold = [[0u8; 8]; 3];
    inject_three(&p, 0, &mut cold);
    let got: Vec<usize> = drain(p.b, 3).iter().map(|e| e.context as usize).collect();
    assert_eq!(got, [10, 11, 12]);
    check(&cold);
    // a takes b's HANDSHAKE (and finds no entry) before the warm round.
    assert!(drain(p.a, 1).is_empty(), "an inject before the HANDSHAKE completed");
    let mut warm = [[0u8; 8]; 3];
    inject_three(&p, 3, &mut warm);
    let got: Vec<usize> = drain(p.b, 3).iter().map(|e| e.context as usize).collect();
    assert_eq!(got, [13, 14, 15]);
    for (i, r) in warm.iter().enumerate() {
        assert_eq!(r, &[3 + i as u8; 8]);
    }
    let mut r = [0u8; 8];
    assert_eq!(rdm4_trecv(p.b, r.as_mut_ptr().cast(), 8, RDM4_ADDR_UNSPEC, 5, 0, ctx(30)), 0);
    assert_eq!(rdm4_tsend(p.a, [7u8; 8].as_ptr().cast(), 8, p.to_b, 5, ctx(40)), 0);
    let sent: Vec<usize> = drain(p.a, 2).iter().map(|e| e.context as usize).collect();
    assert_eq!(sent, [40], "a's only entry is its send's");
    assert_eq!(drain(p.b, 1)[0].context, ctx(30));
    assert_eq!(r, [7u8; 8]);
}
