//! The C API from many threads at once: every call is safe from any thread.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdm4::capi::*;

const THREADS: usize = 4;
const PER_THREAD: usize = 200;

#[derive(Clone, Copy)]
struct Ep(*mut rdm4_ep);
// SAFETY: the handle is an opaque value; the library serialises its use.
unsafe impl Send for Ep {}
unsafe impl Sync for Ep {}

impl Ep {
    /// The handle (a method, so closures capture the whole `Ep`).
    fn h(self) -> *mut rdm4_ep {
        self.0
    }
}

fn open() -> Ep {
    let mut ep = std::ptr::null_mut();
    assert_eq!(rdm4_ep_open(std::ptr::null(), &mut ep), 0);
    Ep(ep)
}

#[test]
fn many_threads_send_receive_and_poll_on_shared_endpoints() {
    std::env::set_var("RDM4_SHM_PREFIX", format!("rdm4thr{}", std::process::id()));
    let (a, b) = (open(), open());
    let mut name = [0u8; 32];
    let mut len = 32;
    assert_eq!(rdm4_ep_getname(b.0, name.as_mut_ptr().cast(), &mut len), 0);
    let mut to_b = 0;
    assert_eq!(rdm4_av_insert(a.0, name.as_ptr().cast(), 1, &mut to_b), 1);
    let received = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        // Receivers: each thread posts its own tagged receives and polls b.
        let received = received.clone();
        handles.push(std::thread::spawn(move || {
            let mut bufs: Vec<Box<[u8; 64]>> = (0..PER_THREAD).map(|_| Box::new([0u8; 64])).collect();
            for (i, buf) in bufs.iter_mut().enumerate() {
                let tag = (t << 16 | i) as u64;
                let rc =
                    rdm4_trecv(b.h(), buf.as_mut_ptr().cast(), 64, RDM4_ADDR_UNSPEC, tag, 0, buf.as_mut_ptr().cast());
                assert_eq!(rc, 0);
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 16];
            while received.load(Ordering::SeqCst) < THREADS * PER_THREAD {
                let n = rdm4_poll(b.h(), cq.as_mut_ptr(), cq.len());
                assert!(n >= 0);
                for e in &cq[..n as usize] {
                    assert_eq!(e.status, 0);
                    // The payload names its tag: it landed in the right buffer.
                    let got = unsafe { std::slice::from_raw_parts(e.context as *const u8, 8) };
                    assert_eq!(u64::from_le_bytes(got.try_into().unwrap()), e.tag);
                    received.fetch_add(1, Ordering::SeqCst);
                }
                assert!(Instant::now() < deadline, "receives timed out");
            }
            drop(bufs);
        }));
        // Senders: each thread sends its tags and polls a.
        let sent = sent.clone();
        handles.push(std::thread::spawn(move || {
            let msgs: Vec<[u8; 64]> = (0..PER_THREAD)
                .map(|i| {
                    let mut m = [0u8; 64];
                    m[..8].copy_from_slice(&((t << 16 | i) as u64).to_le_bytes());
                    m
                })
                .collect();
            let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 16];
            let mut mine = 0;
            for (i, m) in msgs.iter().enumerate() {
                let tag = (t << 16 | i) as u64;
                while rdm4_tsend(a.h(), m.as_ptr().cast(), 64, to_b, tag, std::ptr::null_mut::<c_void>()) != 0 {
                    rdm4_poll(a.h(), cq.as_mut_ptr(), cq.len());
                }
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            while sent.load(Ordering::SeqCst) < THREADS * PER_THREAD {
                let n = rdm4_poll(a.h(), cq.as_mut_ptr(), cq.len());
                assert!(n >= 0);
                mine += n as usize;
                sent.fetch_add(n as usize, Ordering::SeqCst);
                assert!(Instant::now() < deadline, "sends timed out");
            }
            let _ = mine;
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(received.load(Ordering::SeqCst), THREADS * PER_THREAD);
    assert_eq!(sent.load(Ordering::SeqCst), THREADS * PER_THREAD);
    assert_eq!(rdm4_ep_close(a.0), 0);
    assert_eq!(rdm4_ep_close(b.0), 0);
    // Closed handles are refused from any thread.
    std::thread::spawn(move || assert_eq!(rdm4_ep_close(a.h()), rdm4::status::codes::RDM4_EBADHANDLE)).join().unwrap();
}

fn open_single() -> Ep {
    let mut attr = unsafe { std::mem::zeroed::<rdm4_ep_attr>() };
    assert_eq!(rdm4_ep_attr_init(&mut attr), 0);
    attr.threading = RDM4_THREAD_SINGLE;
    let mut ep = std::ptr::null_mut();
    assert_eq!(rdm4_ep_open(&attr, &mut ep), 0);
    Ep(ep)
}

/// `RDM4_THREAD_SINGLE`: calls take no lock, so the application serialises
/// them; handing the endpoints from thread to thread between calls is
/// fine. Messages flow, and a closed endpoint's handle is refused like any
/// other, also once its table slot is reused.
#[test]
fn single_threaded_endpoints_work_from_thread_to_thread_and_their_handles_die_at_close() {
    // The same prefix as the other test: the variable is the process's.
    std::env::set_var("RDM4_SHM_PREFIX", format!("rdm4thr{}", std::process::id()));
    let (a, b) = (open_single(), open_single());
    let mut name = [0u8; 32];
    let mut len = 32;
    assert_eq!(rdm4_ep_getname(b.0, name.as_mut_ptr().cast(), &mut len), 0);
    let mut to_b = 0;
    assert_eq!(rdm4_av_insert(a.0, name.as_ptr().cast(), 1, &mut to_b), 1);
    // Four threads in turn, each running 250 tagged exchanges.
    for round in 0..4u64 {
        std::thread::spawn(move || {
            let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 8];
            let deadline = Instant::now() + Duration::from_secs(60);
            for i in 0..250u64 {
                let tag = round << 32 | i;
                let mut r = [0u8; 16];
                let s = [tag as u8; 16];
                assert_eq!(
                    rdm4_trecv(b.h(), r.as_mut_ptr().cast(), 16, RDM4_ADDR_UNSPEC, tag, 0, std::ptr::null_mut()),
                    0
                );
                assert_eq!(rdm4_tsend(a.h(), s.as_ptr().cast(), 16, to_b, tag, std::ptr::null_mut()), 0);
                let mut got = 0;
                while got < 2 {
                    for ep in [a.h(), b.h()] {
                        let n = rdm4_poll(ep, cq.as_mut_ptr(), cq.len());
                        assert!(n >= 0);
                        for e in &cq[..n as usize] {
                            assert_eq!(e.status, 0);
                            if e.flags & RDM4_CQ_RECV != 0 {
                                assert_eq!(e.tag, tag);
                            }
                        }
                        got += n;
                    }
                    assert!(Instant::now() < deadline, "exchange {round}/{i} timed out");
                }
                assert_eq!(r, s);
            }
        })
        .join()
        .unwrap();
    }
    let (old_a, old_b) = (a.h(), b.h());
    assert_eq!(rdm4_ep_close(old_a), 0);
    assert_eq!(rdm4_ep_close(old_b), 0);
    let bad = rdm4::status::codes::RDM4_EBADHANDLE;
    let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 1];
    assert_eq!(rdm4_poll(old_a, cq.as_mut_ptr(), 1), bad);
    // A new endpoint (locked or not) may take a freed slot: the old handles stay dead.
    let (c, d) = (open_single(), open());
    for old in [old_a, old_b] {
        assert_eq!(rdm4_poll(old, cq.as_mut_ptr(), 1), bad);
        assert_eq!(rdm4_tsend(old, cq.as_ptr().cast(), 1, to_b, 1, std::ptr::null_mut()), bad);
        assert_eq!(rdm4_ep_close(old), bad);
    }
    assert_eq!(rdm4_poll(c.h(), cq.as_mut_ptr(), 1), 0);
    assert_eq!(rdm4_ep_close(c.h()), 0);
    assert_eq!(rdm4_ep_close(d.h()), 0);
}

/// A handle is checked by comparing it whole with the handle of the table
/// slot it names, and the slot number is taken modulo the table's size: so
/// values that name a live endpoint's slot, but are not its handle, must
/// be refused, for locked and lock-free endpoints alike. The variants are
/// ones no other endpoint of this process can hold (a test running beside
/// this one has its own slots): unaligned, another generation of the same
/// slot, and slot numbers past the table that wrap onto this slot.
#[test]
fn values_naming_a_live_endpoints_slot_but_not_its_handle_are_refused() {
    std::env::set_var("RDM4_SHM_PREFIX", format!("rdm4thr{}", std::process::id()));
    let bad = rdm4::status::codes::RDM4_EBADHANDLE;
    let mut cq = [unsafe { std::mem::zeroed::<rdm4_cqe>() }; 1];
    for ep in [open(), open_single()] {
        let live = ep.h() as usize as u64;
        let table = 4096u64 << 4;
        let forged = [
            live | 1,
            live | 8,
            live ^ 1 << 36,
            live ^ 1 << 40,
            live ^ 1 << 63,
            live + table,
            live + 7 * table,
            live.wrapping_sub(table),
        ];
        for v in forged {
            let h = v as usize as *mut rdm4_ep;
            assert_eq!(rdm4_poll(h, cq.as_mut_ptr(), 1), bad, "poll with {v:#x} (live {live:#x})");
            assert_eq!(rdm4_trecv(h, cq.as_mut_ptr().cast(), 8, RDM4_ADDR_UNSPEC, 1, 0, std::ptr::null_mut()), bad);
            assert_eq!(rdm4_ep_close(h), bad, "close with {v:#x}");
        }
        // The real handle still works, and nothing was posted through a forged one.
        assert_eq!(rdm4_poll(ep.h(), cq.as_mut_ptr(), 1), 0);
        assert_eq!(rdm4_ep_close(ep.h()), 0);
        assert_eq!(rdm4_poll(ep.h(), cq.as_mut_ptr(), 1), bad);
    }
}
