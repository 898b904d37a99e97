//! The C API: opaque handles, status codes, no protocol logic (DESIGN §4).
//!
//! Every exported function runs inside `boundary`: a Rust panic becomes
//! `RDM4_EINTERNAL` and never unwinds into C. Endpoint handles are checked
//! before use, so NULL, unknown and closed handles give `RDM4_EBADHANDLE`
//! instead of a crash. Each endpoint sits behind a mutex: every call is safe
//! from any thread.
//!
//! Open endpoints live in a fixed table of `MAX_EPS` (4096) slots that is
//! never freed. A handle names a slot and the generation of the open that
//! filled it: (generation << 32 | slot + 1) << 4, so it is never NULL, never
//! repeats (a slot's generation only grows) and looks as opaque as a
//! pointer. A call checks the generation, locks the slot and checks it
//! again under the lock: no shared lock, no reference count, no hash on the
//! way in. Closing bumps the generation under the lock, so every later use
//! of the old handle fails.

#![allow(non_camel_case_types)]
// C callers cannot be marked `unsafe`: every pointer is checked for NULL and
// used under the documented contract instead.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod cep;
mod counters;
mod data;
// The C API's objects (ep, av, mr, cq) each have their own file.
mod av;
mod cq;
mod ep;
mod mr;
mod responder;
mod shared;
mod types;

pub(crate) use cep::{CEp, CapEp};

use std::ffi::{c_char, c_void};
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

pub use av::*;
pub use counters::*;
pub use cq::*;
pub use data::*;
pub use ep::*;
pub use mr::*;
pub use types::*;

use crate::engine::Cqe;
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::{self, Status};

/// Nanoseconds on a monotonic clock (since the first call): the time the
/// engine's request timeouts count in.
pub(crate) fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

/// Runs an exported function's body: `Ok(n)` returns `n`, `Err(s)` the
/// status code, a panic `RDM4_EINTERNAL`.
#[inline(always)]
pub(crate) fn boundary(f: impl FnOnce() -> Result<i32, Status>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(s)) => s.code(),
        Err(_) => Status::Internal.code(),
    }
}

// Operations on a library-owned copy (injected sends, messages of several
// buffers) use the copy's address as their engine context: no application
// context can equal it (it would have to point into the library's own
// allocation), so the completions are told apart by looking them up.

/// A library copy standing for the application's buffers.
struct Bounce {
    user_context: u64,
    copy: Box<[u8]>,
    /// Receive: where the copy goes on completion.
    scatter: Vec<UserBuf>,
}

/// Endpoints open at once at most (a power of two: [`lookup`] masks).
pub(crate) const MAX_EPS: usize = 4096;
const _: () = assert!(MAX_EPS.is_power_of_two());

/// One slot of the endpoint table.
pub(crate) struct EpSlot {
    /// Generation of the slot's last open (0: never filled).
    gen: AtomicU32,
    /// The handle of the open endpoint in the slot (0: none): every call's
    /// first check, one comparison (see [`lookup`]).
    handle: AtomicU64,
    inner: Mutex<Option<Box<EpInner>>>,
    /// The endpoint in `inner` when it was opened with
    /// `RDM4_THREAD_SINGLE` (null otherwise): calls use it without the lock.
    /// Tagged with [`shared::SHARED`] when it shares the endpoint with a
    /// responder (`shared`).
    single: AtomicPtr<EpInner>,
    /// The responder holds a shared endpoint (`shared`).
    responding: AtomicBool,
    pub(crate) stop: AtomicBool,
    /// The endpoint's thread (automatic progress, or the responder).
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
    /// Calls of the application on the endpoint (see `responder`): 2 more
    /// per call, under the lock; a shared endpoint's is odd during a call
    /// (`shared`). Read by the responder.
    pub(crate) calls: AtomicU64,
}

impl EpSlot {
    const fn new() -> EpSlot {
        EpSlot {
            gen: AtomicU32::new(0),
            handle: AtomicU64::new(0),
            inner: Mutex::new(None),
            single: AtomicPtr::new(std::ptr::null_mut()),
            responding: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
            calls: AtomicU64::new(0),
        }
    }

    /// The endpoint of `handle`, locked; `None` once closed (a panic in
    /// another call does not poison it for good).
    pub(crate) fn lock(&self, handle: u64) -> Option<EpGuard<'_>> {
        let g = self.lock_raw(handle)?;
        // Under the lock: a plain increment, no atomic read-modify-write.
        self.calls.store(self.calls.load(Ordering::Relaxed).wrapping_add(2), Ordering::Relaxed);
        Some(EpGuard::Locked(Locked { g }))
    }

    /// [`Self::lock_raw`] when the lock is free now; `None` when a call
    /// holds it or the endpoint is closed.
    pub(crate) fn try_lock_raw(&self, handle: u64) -> Option<MutexGuard<'_, Option<Box<EpInner>>>> {
        let g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        (g.is_some() && self.handle.load(Ordering::Relaxed) == handle).then_some(g)
    }

    /// [`Self::lock`] without the wake-up on release: for the progress
    /// thread itself.
    pub(crate) fn lock_raw(&self, handle: u64) -> Option<MutexGuard<'_, Option<Box<EpInner>>>> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.is_some() && self.handle.load(Ordering::Relaxed) == handle).then_some(g)
    }
}

static SLOTS: [EpSlot; MAX_EPS] = [const { EpSlot::new() }; MAX_EPS];

/// The slots of the endpoints open now, with their handles.
pub(crate) fn open_slots() -> impl Iterator<Item = (&'static EpSlot, u64)> {
    SLOTS.iter().filter_map(|s| {
        let h = s.handle.load(Ordering::Acquire);
        (h != 0).then_some((s, h))
    })
}
/// Slots to reuse, and the first never used.
static FREE: Mutex<(Vec<u32>, u32)> = Mutex::new((Vec::new(), 0));

/// An open endpoint for the length of a call: locked, or (opened with
/// `RDM4_THREAD_SINGLE`) used under the application's promise that no
/// other call overlaps, and (shared) the responder kept out.
pub(crate) enum EpGuard<'a> {
    Locked(Locked<'a>),
    /// (Shared with a responder, the call leaves on drop: `shared`.)
    Single(&'a mut EpInner),
}

impl Drop for EpGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if let EpGuard::Single(inner) = self {
            shared::leave(inner);
        }
    }
}

/// A locked endpoint (the lock's guard, one word: the guard is returned
/// in registers on every call).
pub(crate) struct Locked<'a> {
    g: MutexGuard<'a, Option<Box<EpInner>>>,
}

impl Drop for Locked<'_> {
    /// Wakes the endpoint's sleeping progress thread (before the lock
    /// goes) when the call left work queued that only progress does (a
    /// packet arriving wakes it anyway).
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(inner) = self.g.as_deref().filter(|i| i.parked > 0) {
            wake_if_queued(inner);
        }
    }
}

/// Out of line: keeps every call's guard drop small (it is inlined into
/// each C call).
#[cold]
#[inline(never)]
fn wake_if_queued(inner: &EpInner) {
    if inner.ep.has_queued_work() {
        inner.ep.wake_sleeper();
    }
}

impl Deref for EpGuard<'_> {
    type Target = EpInner;
    fn deref(&self) -> &EpInner {
        match self {
            // `EpSlot::lock` hands out guards of filled slots only.
            EpGuard::Locked(l) => l.g.as_deref().expect("guard of an empty slot"),
            EpGuard::Single(e) => e,
        }
    }
}

impl DerefMut for EpGuard<'_> {
    fn deref_mut(&mut self) -> &mut EpInner {
        match self {
            EpGuard::Locked(l) => l.g.as_deref_mut().expect("guard of an empty slot"),
            EpGuard::Single(e) => e,
        }
    }
}

/// The largest generation a handle holds.
const GEN_MAX: u32 = (1 << 28) - 1;

/// The handle of the open of generation `gen` (1..=[`GEN_MAX`]) in slot
/// `idx`: 28 bits of generation, 32 of slot number plus one, 4 zero bits.
fn handle_of(idx: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32 | (idx as u64 + 1)) << 4
}

/// The slot a handle value names: its own for a handle, some slot for any
/// other value (the slot number masked to the table), whose handle that
/// value then does not equal.
#[inline(always)]
fn slot_index(v: u64) -> usize {
    ((v >> 4) as usize).wrapping_sub(1) & (MAX_EPS - 1)
}

/// The open endpoint behind a C handle, locked for the length of a call.
///
/// The check compares the whole value with the handle held by the slot it
/// names ([`slot_index`]): one load and one comparison, where decoding and
/// checking each field took ~20 instructions, three times per 8 B
/// ping-pong message (send, receive, poll).
#[inline(always)]
pub(crate) fn lookup(ep: *mut rdm4_ep) -> Result<EpGuard<'static>, Status> {
    let v = ep as usize as u64;
    let slot = &SLOTS[slot_index(v)];
    // A cheap first check, so that stale handles do not wait for the lock.
    if v == 0 || slot.handle.load(Ordering::Acquire) != v {
        return Err(Status::BadHandle);
    }
    let single = slot.single.load(Ordering::Acquire);
    if !single.is_null() {
        if single as usize & shared::SHARED != 0 {
            // SAFETY: as below; `enter` keeps the responder out.
            return Ok(unsafe { shared::enter(slot, single) });
        }
        // SAFETY: `install` published the pointer of the endpoint that the
        // slot owns until `uninstall` clears it; the handle matched, so
        // the handle is that endpoint's, and the application promised
        // (`RDM4_THREAD_SINGLE`) that no other call on it, `rdm4_ep_close`
        // included, overlaps this one.
        return Ok(EpGuard::Single(unsafe { &mut *single }));
    }
    slot.lock(v).ok_or(Status::BadHandle)
}

/// Fills a free slot with `inner`; returns the slot and the handle. `None`:
/// the table is full.
/// With `single`, calls use the endpoint without the slot's lock; with
/// `shared` too, they share it with a responder (`shared`).
pub(crate) fn install(inner: EpInner, single: bool, shared: bool) -> Option<(&'static EpSlot, u64)> {
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
    let mut boxed = Box::new(inner);
    boxed.slot_calls = (single && shared).then_some(&slot.calls);
    let ptr: *mut EpInner = if single { &mut *boxed } else { std::ptr::null_mut() };
    let ptr = if single && shared { (ptr as usize | shared::SHARED) as *mut EpInner } else { ptr };
    *g = Some(boxed);
    slot.calls.store(0, Ordering::Relaxed);
    slot.responding.store(false, Ordering::Relaxed);
    slot.single.store(ptr, Ordering::Release);
    slot.stop.store(false, Ordering::Relaxed);
    slot.gen.store(gen, Ordering::Release);
    let handle = handle_of(idx as usize, gen);
    slot.handle.store(handle, Ordering::Release);
    drop(g);
    Some((slot, handle))
}

/// Empties the slot of `ep`: later uses of the handle fail. Returns the
/// endpoint and the slot's progress thread (to join before dropping it).
pub(crate) fn uninstall(ep: *mut rdm4_ep) -> Result<(Box<EpInner>, Option<JoinHandle<()>>), Status> {
    let v = ep as usize as u64;
    let slot = &SLOTS[slot_index(v)];
    let p = slot.single.load(Ordering::Acquire);
    if p as usize & shared::SHARED != 0 && slot.handle.load(Ordering::Acquire) == v {
        // Kept out of the endpoint as a call keeps it out, for good: the
        // call never ends (the slot's next open starts afresh).
        // SAFETY: the slot's published pointer, its handle checked.
        std::mem::forget(unsafe { shared::enter(slot, p) });
    }
    let inner = {
        let mut g = slot.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() || slot.handle.load(Ordering::Relaxed) != v {
            return Err(Status::BadHandle);
        }
        // Under the lock: every call that checks after this fails. The
        // next open takes the next generation.
        slot.handle.store(0, Ordering::Release);
        slot.single.store(std::ptr::null_mut(), Ordering::Release);
        g.take()
    };
    slot.stop.store(true, Ordering::Release);
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

/// An endpoint and the library-owned copies of injected messages.
pub(crate) struct EpInner {
    pub(crate) ep: CEp,
    injected: FxHashMap<u64, Box<[u8]>>,
    bounces: FxHashMap<u64, Bounce>,
    /// Completions collected but not yet polled (`rdm4_wait` looks ahead).
    ready: Vec<Cqe>,
    /// Reused buffer for the engine's completions.
    scratch: Vec<Cqe>,
    /// Threads sleeping outside the lock (the automatic progress thread,
    /// callers of `rdm4_wait`) until a packet, a timeout, or a wake-up: a
    /// call that may have queued work for them wakes them when it lets the
    /// endpoint go ([`Locked`]'s drop).
    pub(crate) parked: u32,
    /// `RDM4_PROGRESS_*` and `RDM4_THREAD_*` it was opened with.
    pub(crate) modes: (u32, u32),
    /// The process that opened it (a forked child's copy is not its own).
    pub(crate) pid: u32,
    /// Its slot's call count (set by `install`): a shared endpoint's call
    /// leaves through it (`shared::leave`).
    pub(crate) slot_calls: Option<&'static AtomicU64>,
}

impl EpInner {
    fn new(ep: CEp) -> EpInner {
        EpInner {
            ep,
            injected: FxHashMap::default(),
            bounces: FxHashMap::default(),
            ready: Vec::new(),
            scratch: Vec::new(),
            parked: 0,
            modes: (0, 0),
            pid: std::process::id(),
            slot_calls: None,
        }
    }

    /// One progress call; true when it produced completions.
    #[inline(always)]
    pub(crate) fn progress_once(&mut self) -> bool {
        let before = self.ep.cq_len();
        if self.ep.timers_armed() {
            self.ep.expire(now_ns());
        }
        self.ep.progress(0);
        self.ep.cq_len() > before
    }

    /// True when the engine's completions go to the application as they are
    /// (nothing collected ahead, no injected send or bounce copy to filter).
    #[inline(always)]
    pub(crate) fn passes_through(&self) -> bool {
        self.ready.is_empty() && self.injected.is_empty() && self.bounces.is_empty()
    }

    /// Pulls the engine's completions, dropping those of injected sends.
    fn collect(&mut self) {
        if self.ep.cq_len() == 0 {
            return;
        }
        let mut fresh = std::mem::take(&mut self.scratch);
        self.ep.poll_cq(&mut fresh, usize::MAX);
        for mut e in fresh.drain(..) {
            if !self.injected.is_empty() && self.injected.remove(&e.context).is_some() {
                continue;
            }
            if let Some(b) = if self.bounces.is_empty() { None } else { self.bounces.remove(&e.context) } {
                let mut at = 0usize;
                let got = e.len as usize;
                for dst in &b.scatter {
                    let n = dst.len().min(got.saturating_sub(at));
                    dst.write_at(0, &b.copy[at..at + n]);
                    at += n;
                }
                e.context = b.user_context;
                e.buf = 0;
            }
            self.ready.push(e);
        }
        self.scratch = fresh;
    }

    pub(crate) fn has_completions(&mut self) -> bool {
        self.collect();
        !self.ready.is_empty()
    }

    /// Hands up to `max` completions to `out` (with their index); returns
    /// how many. `pass`: [`Self::passes_through`], which the caller already
    /// knows.
    #[inline(always)]
    pub(crate) fn take_completions(&mut self, max: usize, pass: bool, mut out: impl FnMut(usize, &Cqe)) -> usize {
        if pass {
            // Nothing to filter or rewrite: straight from the engine's queue.
            return self.ep.drain_cq(max, out);
        }
        self.collect();
        let n = max.min(self.ready.len());
        for (i, e) in self.ready.drain(..n).enumerate() {
            out(i, &e);
        }
        n
    }

    fn bounce(&mut self, copy: Box<[u8]>, user_context: u64, scatter: Vec<UserBuf>) -> (UserBuf, u64) {
        let (copy, buf, ctx) = owned_copy(copy);
        self.bounces.insert(ctx, Bounce { user_context, copy, scatter });
        (buf, ctx)
    }

    /// A copy of the concatenated `bufs` for a send.
    pub(crate) fn bounce_gather(&mut self, bufs: &[UserBuf], user_context: u64) -> (UserBuf, u64) {
        let mut copy = Vec::with_capacity(bufs.iter().map(UserBuf::len).sum());
        for b in bufs {
            b.with_slice(|s| copy.extend_from_slice(s));
        }
        self.bounce(copy.into_boxed_slice(), user_context, Vec::new())
    }

    /// A buffer as long as `bufs` together, scattered into them on completion.
    pub(crate) fn bounce_scatter(&mut self, bufs: &[UserBuf], user_context: u64) -> (UserBuf, u64) {
        let total = bufs.iter().map(UserBuf::len).sum();
        self.bounce(vec![0u8; total].into_boxed_slice(), user_context, bufs.to_vec())
    }

    /// Forgets a copy whose operation was refused.
    pub(crate) fn drop_bounce(&mut self, ctx: u64) {
        self.bounces.remove(&ctx);
    }

    /// Forgets an injected copy whose send was refused.
    pub(crate) fn take_injected(&mut self, ctx: u64) {
        self.injected.remove(&ctx);
    }

    /// Keeps a copy of `data` for an injected send; returns its buffer and context.
    pub(crate) fn inject_copy(&mut self, data: &[u8]) -> (UserBuf, u64) {
        let (copy, buf, ctx) = owned_copy(data.into());
        self.injected.insert(ctx, copy);
        (buf, ctx)
    }
}

/// A library-owned copy lent to the engine: the copy (at least one byte, so
/// its address is unique), the buffer over its first `len` bytes, and the
/// context naming it.
fn owned_copy(copy: Box<[u8]>) -> (Box<[u8]>, UserBuf, u64) {
    let len = copy.len();
    let mut copy = if len == 0 { vec![0u8; 1].into_boxed_slice() } else { copy };
    // SAFETY: the box is kept (in `injected` or `bounces`) until the
    // operation's completion removes it; only the engine uses these bytes.
    let buf = unsafe { UserBuf::from_raw(copy.as_mut_ptr(), len) }.unwrap_or(UserBuf::empty());
    let ctx = copy.as_ptr() as usize as u64;
    (copy, buf, ctx)
}

/// A lent buffer from a C pointer and length (NULL only with length 0;
/// `Overflow` past `RDM4_MSG_MAX`).
pub(crate) fn c_buf(ptr: *mut c_void, len: usize) -> Result<UserBuf, Status> {
    if len as u64 > RDM4_MSG_MAX {
        return Err(Status::Overflow);
    }
    // SAFETY: the C contract: `len` bytes at `ptr` belong to the library until
    // the operation's completion has been polled.
    unsafe { UserBuf::from_raw(ptr.cast(), len) }.ok_or(Status::Inval)
}

/// The version of the library that is loaded, as `(major << 16) | (minor << 8) | patch`.
///
/// Compare with the header's `RDM4_VERSION` to detect a program built against
/// another version. Never fails; callable from any thread at any time.
#[no_mangle]
pub extern "C" fn rdm4_version() -> u32 {
    crate::VERSION_NUMBER
}

/// The version of the loaded library as a static NUL-terminated string, e.g. "0.1.0".
///
/// The string is owned by the library and valid for the life of the process;
/// do not free it. Never fails; callable from any thread at any time.
#[no_mangle]
pub extern "C" fn rdm4_version_string() -> *const c_char {
    crate::VERSION_CSTR.as_ptr()
}

/// A static English description of a status code (`0` or any `RDM4_E*` value).
///
/// Unknown codes give "unknown status code". The string is owned by the
/// library and valid for the life of the process; do not free it. Never
/// returns NULL; callable from any thread at any time.
#[no_mangle]
pub extern "C" fn rdm4_strerror(status: i32) -> *const c_char {
    status::c_message(status).as_ptr()
}
