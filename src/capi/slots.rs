//! The table of open endpoints, and how a call enters and leaves one.
//!
//! Open endpoints live in a fixed table of `MAX_EPS` (4096) slots that is
//! never freed. A handle names a slot and the generation of the open that
//! filled it: (generation << 32 | slot) << 4, with generations from 1, so
//! it is never NULL, never repeats (a slot's generation only grows) and
//! looks as opaque as a pointer. A call reaches the endpoint the way its
//! slot says ([`EpSlot::way`]): directly (single-threaded: the handle is
//! compared whole with the one the endpoint holds), or, after comparing it
//! with the one the slot holds, under the slot's lock, where the handle is
//! compared again. (A responder never holds the endpoint, only its device:
//! `crate::device::away`.) Closing clears the slot's
//! handle and way under the lock before the endpoint goes, so every later
//! use of the old handle fails.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{rdm4_ep, EpInner};
use crate::device::away::AwayWork;
use crate::status::Status;

/// Endpoints open at once at most (a power of two: [`slot_of`] masks).
pub(crate) const MAX_EPS: usize = 4096;
const _: () = assert!(MAX_EPS.is_power_of_two());

/// [`EpSlot::way`]: the endpoint's address plus this, for a single-threaded
/// endpoint used without the lock.
const PLAIN: usize = 1;
// An `EpInner` is aligned to 8: its address leaves the tag bit free.
const _: () = assert!(std::mem::align_of::<EpInner>() >= 2);

/// One slot of the endpoint table. A power of two in size, so that a
/// handle's slot is found by a shift and a mask; a cache line or two of its
/// own, so that endpoints used by different threads share none.
#[repr(align(128))]
pub(crate) struct EpSlot {
    /// The handle of the open endpoint in the slot (0: none): the first
    /// check of a call that takes the lock or shares the endpoint.
    handle: AtomicU64,
    /// How calls reach the endpoint: 0 by the lock (a thread-safe
    /// endpoint, or none); else the address of the endpoint in `inner`
    /// plus [`PLAIN`] (opened with `RDM4_THREAD_SINGLE`: calls use it
    /// without the lock).
    way: AtomicUsize,
    /// Generation of the slot's last open (0: never filled).
    gen: AtomicU32,
    pub(crate) stop: AtomicBool,
    inner: Mutex<Option<Box<EpInner>>>,
    /// The device the endpoint shares with its responder (`responder`),
    /// for the responder and the process's exit.
    away: Mutex<Option<Arc<dyn AwayWork>>>,
    /// The endpoint's thread (automatic progress, or the responder).
    pub(crate) thread: Mutex<Option<super::thread::EpThread>>,
    /// What that thread is to do, until it starts.
    pub(crate) job: Mutex<Option<super::thread::Job>>,
}

impl EpSlot {
    const fn new() -> EpSlot {
        EpSlot {
            handle: AtomicU64::new(0),
            way: AtomicUsize::new(0),
            gen: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            inner: Mutex::new(None),
            away: Mutex::new(None),
            thread: Mutex::new(None),
            job: Mutex::new(None),
        }
    }

    /// The device the endpoint shares with its responder, if any. With
    /// `wait` false, `None` too while another thread looks (the process's
    /// exit, or a fork's child, must not wait for a lock).
    pub(crate) fn away(&self, wait: bool) -> Option<Arc<dyn AwayWork>> {
        match wait {
            true => self.away.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            false => self.away.try_lock().ok()?.clone(),
        }
    }

    /// Gives the endpoint's responder `away` to the slot.
    pub(crate) fn set_away(&self, away: Option<Arc<dyn AwayWork>>) {
        *self.away.lock().unwrap_or_else(|e| e.into_inner()) = away;
    }

    /// The handle of the endpoint open now (0: none).
    pub(crate) fn handle(&self) -> u64 {
        self.handle.load(Ordering::Acquire)
    }

    /// The endpoint of `handle`, locked, for the progress thread (no call
    /// counted, no wake-up on release); `None` once closed (a panic in
    /// another call does not poison it for good).
    pub(crate) fn lock_raw(&self, handle: u64) -> Option<MutexGuard<'_, Option<Box<EpInner>>>> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.is_some() && self.handle.load(Ordering::Relaxed) == handle).then_some(g)
    }

    /// A call enters the endpoint of `handle` by its lock; `None` once
    /// closed.
    #[inline]
    fn enter_locked(&'static self, handle: u64) -> Option<(*mut EpInner, Exit)> {
        let mut g = self.lock_raw(handle)?;
        let inner: *mut EpInner = &mut **g.as_mut()?;
        Some((inner, Exit::Locked(ManuallyDrop::new(g))))
    }
}

static SLOTS: [EpSlot; MAX_EPS] = [const { EpSlot::new() }; MAX_EPS];

/// The slots of the endpoints open now, with their handles.
pub(crate) fn open_slots() -> impl Iterator<Item = (&'static EpSlot, u64)> {
    SLOTS.iter().filter_map(|s| {
        let h = s.handle();
        (h != 0).then_some((s, h))
    })
}

/// Slots to reuse, and the first never used.
static FREE: Mutex<(Vec<u32>, u32)> = Mutex::new((Vec::new(), 0));

/// The largest generation a handle holds.
const GEN_MAX: u32 = (1 << 28) - 1;

/// The handle of the open of generation `gen` (1..=[`GEN_MAX`]) in slot
/// `idx`: 28 bits of generation, 32 of slot number, 4 zero bits.
fn handle_of(idx: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32 | idx as u64) << 4
}

/// The slot number a handle value names: its own for a handle, some slot
/// for any other value (the slot number masked to the table), whose
/// handle that value then does not equal.
#[inline(always)]
fn slot_index(v: u64) -> usize {
    (v >> 4) as usize & (MAX_EPS - 1)
}

/// The slot a handle value names (see [`slot_index`]).
#[inline(always)]
fn slot_of(v: u64) -> &'static EpSlot {
    &SLOTS[slot_index(v)]
}

/// How a call leaves the endpoint it entered (on drop, also when the call
/// panics). Nothing to do for a single-threaded endpoint: its drop is one
/// test on the call's path.
enum Exit {
    /// Used without the lock.
    Plain,
    /// Locked: a sleeping progress thread is woken when the call left it
    /// work, then the lock goes.
    Locked(ManuallyDrop<MutexGuard<'static, Option<Box<EpInner>>>>),
}

impl Drop for Exit {
    /// A plain call's exit is one test; the locked one out of line.
    #[inline(always)]
    fn drop(&mut self) {
        if !matches!(self, Exit::Plain) {
            self.leave();
        }
    }
}

impl Exit {
    #[inline(never)]
    fn leave(&mut self) {
        if let Exit::Locked(g) = self {
            // Before the lock goes: a packet arriving wakes the thread
            // anyway, work only progress does would not.
            if let Some(inner) = g.as_deref().filter(|i| i.parked > 0) {
                wake_if_queued(inner);
            }
            // SAFETY: dropped once, here; the variant is not used again.
            unsafe { ManuallyDrop::drop(g) };
        }
    }
}

#[cold]
fn wake_if_queued(inner: &EpInner) {
    if inner.ep.has_queued_work() {
        inner.ep.wake_sleeper();
    }
}

/// Runs `f` on the open endpoint behind a C handle, entered for the call
/// (see the module docs); `BadHandle` for NULL, unknown and closed
/// handles, without running `f`.
#[inline(always)]
pub(crate) fn on_ep<R>(ep: *mut rdm4_ep, f: impl FnOnce(&mut EpInner) -> Result<R, Status>) -> Result<R, Status> {
    let v = ep as usize as u64;
    let slot = slot_of(v);
    let w = slot.way.load(Ordering::Acquire);
    let (inner, _exit) = if w & PLAIN != 0 {
        let inner = w.wrapping_sub(PLAIN) as *mut EpInner;
        // One comparison with the handle the endpoint holds (which any
        // other value, NULL included, does not equal).
        // SAFETY: the endpoint `install` published (fully made before the
        // word), which lives until `uninstall` has cleared the word: a
        // call after a close reads 0 or a later endpoint's word, and none
        // overlaps a close (below). `handle` is not written after
        // `install`.
        if unsafe { (*inner).handle } != v {
            return Err(Status::BadHandle);
        }
        (inner, Exit::Plain)
    } else {
        // NULL names slot 0, which holds handle 0 until it is first filled.
        if v == 0 || slot.handle.load(Ordering::Acquire) != v {
            return Err(Status::BadHandle);
        }
        slot.enter_locked(v).ok_or(Status::BadHandle)?
    };
    // SAFETY: without the lock, `install` published the address of the
    // endpoint that the slot owns until `uninstall` clears it; the handle
    // matched, so the call is that endpoint's, and the application promised
    // (`RDM4_THREAD_SINGLE`) that no other call on it, `rdm4_ep_close`
    // included, overlaps this one. With the lock, the endpoint is the
    // locked slot's. Either way it is this call's until `_exit` drops,
    // after `f`.
    f(unsafe { &mut *inner })
}

/// Has a child process made by `fork()` inherit no endpoint (registered
/// once, at the first open): in the child, every handle of the parent
/// gives `BadHandle`, and nothing of the parent's endpoints is closed or
/// freed there (their segments and sockets are the parent's; closing them
/// would tell the parent's peers that it left). The endpoints stay in
/// their slots, reachable, until the child exits; the child may open its
/// own. Only atomic stores, as a child of a threaded process may do.
pub(crate) fn forget_endpoints_in_forked_children() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn child() {
            for s in &SLOTS {
                s.handle.store(0, Ordering::Relaxed);
                s.way.store(0, Ordering::Relaxed);
                s.stop.store(true, Ordering::Relaxed);
            }
        }
        // SAFETY: registers a handler without arguments that only stores
        // to atomics of the static table.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    });
}

/// Fills a free slot with `inner`; returns the slot and the handle. `None`:
/// the table is full.
/// With `single`, calls use the endpoint without the slot's lock.
pub(crate) fn install(inner: EpInner, single: bool) -> Option<(&'static EpSlot, u64)> {
    let idx = {
        let mut f = FREE.lock().unwrap_or_else(|e| e.into_inner());
        match f.0.pop() {
            Some(i) => i,
            None if (f.1 as usize) < MAX_EPS => {
                f.1 += 1;
                f.1 - 1
            }
            None => return None,
        }
    };
    let slot = &SLOTS[idx as usize];
    let mut g = slot.inner.lock().unwrap_or_else(|e| e.into_inner());
    let gen = slot.gen.load(Ordering::Relaxed).checked_add(1)?;
    let handle = handle_of(idx as usize, gen);
    let mut boxed = Box::new(inner);
    boxed.handle = handle;
    let addr = &mut *boxed as *mut EpInner as usize;
    let way = if single { addr + PLAIN } else { 0 };
    *g = Some(boxed);
    slot.way.store(way, Ordering::Release);
    slot.stop.store(false, Ordering::Relaxed);
    slot.gen.store(gen, Ordering::Release);
    slot.handle.store(handle, Ordering::Release);
    drop(g);
    Some((slot, handle))
}

/// Empties the slot of `ep`: later uses of the handle fail. Returns the
/// endpoint and the slot's progress thread (to join before dropping it).
pub(crate) fn uninstall(ep: *mut rdm4_ep) -> Result<(Box<EpInner>, Option<super::thread::EpThread>), Status> {
    let v = ep as usize as u64;
    let slot = slot_of(v);
    let inner = {
        let mut g = slot.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() || slot.handle.load(Ordering::Relaxed) != v {
            return Err(Status::BadHandle);
        }
        // Under the lock: every call that checks after this fails. The
        // next open takes the next generation.
        slot.handle.store(0, Ordering::Release);
        slot.way.store(0, Ordering::Release);
        g.take()
    };
    slot.stop.store(true, Ordering::Release);
    slot.set_away(None);
    let thread = slot.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok((inner.ok_or(Status::BadHandle)?, thread))
}

/// Gives the slot of a closed endpoint (the handle `uninstall` took) back,
/// after its thread has ended. A slot whose next generation would not fit
/// in a handle is retired instead.
pub(crate) fn release_slot(ep: *mut rdm4_ep) {
    let idx = slot_index(ep as usize as u64);
    if SLOTS[idx].gen.load(Ordering::Relaxed) < GEN_MAX {
        FREE.lock().unwrap_or_else(|e| e.into_inner()).0.push(idx as u32);
    }
}
