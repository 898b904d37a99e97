//! A device shared by the application and a responder thread: the udp
//! device's peers need acknowledgements, answers to their probes and the
//! RDMA they ask of this endpoint's memory whether or not the application
//! calls ([`Responder`]). [`Shared`] holds such a device for the
//! application (it is a [`Device`] itself, every call of which enters the
//! device), and hands the responder an [`AwayWork`] by which it does the
//! device's work while the application is away from the device.
//!
//! Only the device is shared, not the endpoint: the engine and every other
//! device of the endpoint (the auto device's shm) stay the application's
//! alone, and a call that does not reach the shared device (an 8-byte
//! message to a peer of this host, through auto) pays nothing for it.
//!
//! **Exclusion.** The application's accesses never overlap (its calls on an
//! endpoint are serialised: `RDM4_THREAD_SINGLE`, or the endpoint's lock),
//! so they take no lock; the responder, which acts only while no access is
//! under way, must still never run during one. They exclude each other by
//! two words, as Dekker's algorithm does, with the costly half on the
//! responder's side:
//! - an access makes `accesses` odd, then (after a compiler barrier only)
//!   reads `responding`: while it is set, it makes `accesses` even again
//!   and waits; leaving, it makes `accesses` even;
//! - the responder sets `responding`, has every thread of the process
//!   execute a full memory barrier (`membarrier(2)`,
//!   `MEMBARRIER_CMD_PRIVATE_EXPEDITED`), then reads `accesses`: odd, an
//!   access is under way and it clears `responding` and lets go.
//!
//! After the barrier, either the access's odd count is visible to the
//! responder, or the access's read of `responding` comes after it and sees
//! it set. An access so costs two plain stores and a load. Where the kernel
//! has no such barrier, both sides execute a full fence instead (`fenced`).
//!
//! **Away.** The count also tells the responder whether the application
//! uses the device: unchanged and even since its last look, the device is
//! left alone (the application computes, waits elsewhere, or talks only to
//! peers of another device) and the responder may do its work. A thread
//! that sleeps on the device's descriptor (`Sleep::sleep_begin` to
//! `Sleep::sleep_end`) counts as present: it takes what arrives itself.
//!
//! **What the responder cannot see.** The engine's operations are not in
//! the device: which peers they await the device asks the engine for
//! ([`DevEvent::Awaiting`](super::DevEvent::Awaiting)) during the
//! application's calls, and keeps the answer while it is away (udp).

use std::cell::UnsafeCell;
use std::os::fd::RawFd;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Access, Ah, Caps, DevError, DevEvent, Device, Doorbell, Flow, Lacks, Responder, Sent, Sleep};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

/// What the responder thread holds of a [`Shared`] device.
pub trait AwayWork: Send + Sync {
    /// The application's accesses to the device so far, twice over: odd
    /// while one is under way.
    fn accesses(&self) -> u64;

    /// Whether a thread of the application sleeps on the device's
    /// descriptor (it takes what arrives itself).
    fn asleep(&self) -> bool;

    /// The device's [`Responder::respond`], when no access is under way
    /// (`None` when one is: the responder lets go at once).
    fn respond(&self) -> Option<(RawFd, i32)>;
}

/// The device and the words by which its two users exclude each other.
struct Cell<D> {
    /// Odd while the application accesses the device.
    accesses: AtomicU64,
    /// The responder is in the device.
    responding: AtomicBool,
    /// A thread of the application sleeps on the device.
    asleep: AtomicBool,
    /// No `membarrier(2)`: both sides fence.
    fenced: bool,
    /// One responder at a time (its thread, and the process's exit).
    responder: Mutex<()>,
    dev: UnsafeCell<D>,
}

// SAFETY: the device is reached by one side at a time (module docs), and
// is `Send`.
unsafe impl<D: Send> Sync for Cell<D> {}

/// A device that the application shares with a responder (module docs).
pub struct Shared<D> {
    cell: Arc<Cell<D>>,
}

/// Whether this process may use `membarrier(2)`'s private expedited
/// barrier (registered once; false when the kernel refuses).
fn barrier_available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;
        // SAFETY: a system call without pointers.
        unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
    })
}

/// The responder's side of the exclusion: every thread of the process
/// executes a full memory barrier (or, `fenced`, this one does).
fn barrier(fenced: bool) {
    if !fenced {
        const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        // SAFETY: a system call without pointers; registered when the
        // device was shared (`barrier_available`).
        unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED, 0, 0) };
    }
    fence(Ordering::SeqCst);
}

/// An access of the application, from [`Cell::enter`] until dropped.
struct Entered<'a>(&'a AtomicU64);

impl Drop for Entered<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(self.0.load(Ordering::Relaxed) + 1, Ordering::Release);
    }
}

impl<D> Cell<D> {
    /// The application enters the device (inlined into every access: two
    /// plain stores and a load when the responder is out).
    #[inline(always)]
    fn enter(&self) -> Entered<'_> {
        if let Err(c) = self.try_enter() {
            self.enter_after_responder(c);
        }
        Entered(&self.accesses)
    }

    /// Makes the count odd, then looks for the responder: `Err` with the
    /// count before when it is in.
    #[inline(always)]
    fn try_enter(&self) -> Result<(), u64> {
        let c = self.accesses.load(Ordering::Relaxed);
        self.accesses.store(c | 1, Ordering::Relaxed);
        if self.fenced {
            fence(Ordering::SeqCst);
        } else {
            compiler_fence(Ordering::SeqCst);
        }
        if self.responding.load(Ordering::Acquire) {
            Err(c)
        } else {
            Ok(())
        }
    }

    /// [`Cell::enter`] when it met the responder: steps back, waits until
    /// it is out, and enters again.
    #[cold]
    #[inline(never)]
    fn enter_after_responder(&self, mut c: u64) {
        loop {
            self.accesses.store((c | 1) + 1, Ordering::Release);
            let mut n = 0u32;
            while self.responding.load(Ordering::Acquire) {
                n += 1;
                if n < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            match self.try_enter() {
                Ok(()) => return,
                Err(again) => c = again,
            }
        }
    }
}

/// Clears `responding` when the responder's turn ends (also by a panic,
/// which would otherwise keep the application out for good).
struct Responding<'a>(&'a AtomicBool);

impl Drop for Responding<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<D: Responder + Send> AwayWork for Cell<D> {
    fn accesses(&self) -> u64 {
        self.accesses.load(Ordering::Relaxed)
    }

    fn asleep(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }

    fn respond(&self) -> Option<(RawFd, i32)> {
        let _one = self.responder.lock().unwrap_or_else(|e| e.into_inner());
        self.responding.store(true, Ordering::SeqCst);
        let _out = Responding(&self.responding);
        barrier(self.fenced);
        if self.accesses.load(Ordering::Acquire) & 1 != 0 {
            return None;
        }
        // SAFETY: no access of the application is under way, and none can
        // begin until `responding` is cleared (module docs); the lock makes
        // this the only responder.
        Some(unsafe { &mut *self.dev.get() }.respond())
    }
}

impl<D> Shared<D> {
    /// Shares `dev` with a responder.
    pub fn new(dev: D) -> Shared<D> {
        Shared::with_fences(dev, !barrier_available())
    }

    /// [`Shared::new`], fencing on both sides or not.
    fn with_fences(dev: D, fenced: bool) -> Shared<D> {
        Shared {
            cell: Arc::new(Cell {
                accesses: AtomicU64::new(0),
                responding: AtomicBool::new(false),
                asleep: AtomicBool::new(false),
                fenced,
                responder: Mutex::new(()),
                dev: UnsafeCell::new(dev),
            }),
        }
    }

    /// Runs `f` on the device, entered.
    #[inline(always)]
    pub fn with_mut<R>(&mut self, f: impl FnOnce(&mut D) -> R) -> R {
        let _in = self.cell.enter();
        // SAFETY: entered: the responder is out until `_in` drops, and
        // `&mut self` excludes the application's other accesses.
        f(unsafe { &mut *self.cell.dev.get() })
    }

    /// Runs `f` on the device by reference, entered. The application's
    /// accesses never overlap (module docs), the `&self` ones included.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(&D) -> R) -> R {
        let _in = self.cell.enter();
        // SAFETY: entered, as in `with_mut`.
        f(unsafe { &*self.cell.dev.get() })
    }
}

impl<D> Device for Shared<D>
where
    D: Device<Sleep = D, Responder = D, Doorbell = D, MoreFollows = Lacks, Mapped = Lacks, InCall = Lacks>
        + Sleep
        + Responder
        + Doorbell
        + Send
        + 'static,
{
    type Sleep = Self;
    type Responder = Self;
    type MoreFollows = Lacks;
    type Doorbell = Self;
    type Mapped = Lacks;
    type InCall = Lacks;

    fn caps(&self) -> Caps {
        self.with(|d| d.caps())
    }

    fn local_addr(&self) -> RawAddr {
        self.with(|d| d.local_addr())
    }

    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status> {
        self.with_mut(|d| d.insert(addr))
    }

    fn peer_caps(&self, ah: Ah) -> Caps {
        self.with(|d| d.peer_caps(ah))
    }

    fn caps_epoch(&self) -> u32 {
        self.with(|d| d.caps_epoch())
    }

    fn local_addr_for(&self, ah: Ah) -> RawAddr {
        self.with(|d| d.local_addr_for(ah))
    }

    fn remove(&mut self, ah: Ah) {
        self.with_mut(|d| d.remove(ah))
    }

    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        self.with_mut(|d| d.send_with(ah, wr_id, max_len, build))
    }

    fn send(&mut self, ah: Ah, pkt: &[u8], wr_id: u64) -> Result<Sent, DevError> {
        self.with_mut(|d| d.send(ah, pkt, wr_id))
    }

    fn send_gather(
        &mut self,
        ah: Ah,
        wr_id: u64,
        hdr_max: usize,
        build: impl FnMut(&mut [u8]) -> usize,
        payload: UserBuf,
    ) -> Result<Sent, DevError> {
        self.with_mut(|d| d.send_gather(ah, wr_id, hdr_max, build, payload))
    }

    fn control_next(&mut self) {
        self.with_mut(|d| d.control_next())
    }

    fn recv<R: Flow>(&mut self, max: usize, f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        self.with_mut(|d| d.recv(max, f))
    }

    fn redeliver(&mut self) {
        self.with_mut(|d| d.redeliver())
    }

    fn events(&mut self, out: &mut Vec<DevEvent>) {
        self.with_mut(|d| d.events(out))
    }

    fn awaiting(&mut self, ah: Ah) {
        self.with_mut(|d| d.awaiting(ah))
    }

    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        self.with_mut(|d| d.reg(buf, access))
    }

    fn dereg(&mut self, key: u64) -> Result<(), Status> {
        self.with_mut(|d| d.dereg(key))
    }

    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.with_mut(|d| d.rdma_read(ah, local, remote_addr, key, wr_id))
    }

    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.with_mut(|d| d.rdma_write(ah, local, remote_addr, key, wr_id))
    }

    fn rdma_write_imm(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        imm: u32,
        wr_id: u64,
    ) -> Result<(), DevError> {
        self.with_mut(|d| d.rdma_write_imm(ah, local, remote_addr, key, imm, wr_id))
    }

    crate::has_extensions!(as_sleep, as_sleeper, as_responder, as_doorbell);
}

impl<D: Sleep> Sleep for Shared<D> {
    fn wait_fd(&mut self) -> Option<RawFd> {
        self.with_mut(|d| d.wait_fd())
    }

    /// Blocks entered: the responder stays out meanwhile.
    fn wait(&mut self, timeout_ms: i32) -> bool {
        self.with_mut(|d| d.wait(timeout_ms))
    }

    fn trywait(&mut self) -> bool {
        self.with_mut(|d| d.trywait())
    }

    /// The sleeper counts as present until [`Sleep::sleep_end`] (module
    /// docs).
    fn sleep_begin(&mut self) -> Option<(RawFd, i32)> {
        let r = self.with_mut(|d| d.sleep_begin());
        if r.is_some() {
            self.cell.asleep.store(true, Ordering::Relaxed);
        }
        r
    }

    fn sleep_end(&mut self) {
        self.cell.asleep.store(false, Ordering::Relaxed);
        self.with_mut(|d| d.sleep_end())
    }

    /// From any thread, without entering (its contract): the device's
    /// wake-up uses only what it set up at open.
    fn wake_sleeper(&self) {
        // SAFETY: `Sleep::wake_sleeper` may run beside any other use of the
        // device; it reads only what never changes after open.
        unsafe { &*self.cell.dev.get() }.wake_sleeper()
    }
}

impl<D: Responder + Send + 'static> Responder for Shared<D> {
    /// The application's own call of the responder's work (entered).
    fn respond(&mut self) -> (RawFd, i32) {
        self.with_mut(|d| d.respond())
    }

    fn responder_fds(&self) -> Vec<RawFd> {
        self.with(|d| d.responder_fds())
    }

    fn away(&self) -> Option<Arc<dyn AwayWork>> {
        Some(self.cell.clone())
    }
}

impl<D: Doorbell> Doorbell for Shared<D> {
    fn doorbell(&mut self) {
        self.with_mut(|d| d.doorbell())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device stand-in that counts the responder's calls and checks that
    /// no access overlaps one.
    struct Probe {
        inside: AtomicBool,
        responds: u64,
        touched: u64,
    }

    impl Responder for Probe {
        fn respond(&mut self) -> (RawFd, i32) {
            assert!(!self.inside.swap(true, Ordering::SeqCst), "an access overlapped the responder");
            self.responds += 1;
            // A while inside, so that an overlap would be caught.
            (0..64).for_each(|_| std::hint::spin_loop());
            self.inside.store(false, Ordering::SeqCst);
            (-1, 0)
        }
        fn responder_fds(&self) -> Vec<RawFd> {
            Vec::new()
        }
    }

    impl Shared<Probe> {
        fn touch(&mut self) {
            self.with_mut(|d| {
                assert!(!d.inside.swap(true, Ordering::SeqCst), "the responder overlapped an access");
                d.touched += 1;
                (0..64).for_each(|_| std::hint::spin_loop());
                d.inside.store(false, Ordering::SeqCst);
            })
        }
    }

    #[test]
    fn accesses_and_the_responder_never_overlap_and_the_count_shows_presence() {
        assert!(barrier_available(), "this kernel has no membarrier: the fenced test covers it alone");
        exclusion(false);
    }

    #[test]
    fn without_membarrier_both_sides_fence_and_still_never_overlap() {
        exclusion(true);
    }

    fn exclusion(fenced: bool) {
        let probe = Probe { inside: AtomicBool::new(false), responds: 0, touched: 0 };
        let mut s = Shared::with_fences(probe, fenced);
        let away: Arc<dyn AwayWork> = s.cell.clone();
        assert_eq!(away.accesses(), 0);
        s.touch();
        assert_eq!(away.accesses(), 2, "an access adds two");
        // An access under way: the responder lets go.
        {
            let _in = s.cell.enter();
            assert_eq!(away.accesses() & 1, 1);
            assert!(away.respond().is_none());
        }
        assert!(away.respond().is_some());
        // Both at once: the accesses go on until the responder has had
        // many turns among them (at most 5 s).
        let stop = Arc::new(AtomicBool::new(false));
        let turns = Arc::new(AtomicU64::new(0));
        let (a, st, tu) = (away.clone(), stop.clone(), turns.clone());
        let t = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if a.respond().is_some() {
                    tu.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::yield_now();
            }
        });
        let (t0, mut touches) = (std::time::Instant::now(), 1u64);
        while (touches < 5_000 || turns.load(Ordering::Relaxed) < 200) && t0.elapsed().as_secs() < 5 {
            s.touch();
            touches += 1;
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        let responded = turns.load(Ordering::Relaxed);
        assert!(responded >= 200, "the responder had {responded} turns");
        let d = s.with(|d| (d.touched, d.responds));
        assert_eq!(d.0, touches);
        assert_eq!(d.1, responded + 1);
        // Two per access, and two more each time one met the responder
        // and stepped back.
        let n = away.accesses();
        assert!(n % 2 == 0 && n >= 2 * (touches + 2), "{n} for {} accesses", touches + 2);
    }
}
