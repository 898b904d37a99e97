//! The C API: opaque handles, status codes, no protocol logic (DESIGN §4).
//!
//! Every exported function runs inside [`boundary`]: a Rust panic becomes
//! `RDM4_EINTERNAL` and never unwinds into C. Endpoint handles are checked
//! against a registry of open endpoints before use, so NULL, unknown and
//! closed handles give `RDM4_EBADHANDLE` instead of a crash. Each endpoint
//! sits behind a mutex: every call is safe from any thread.
//!
//! The registry is read-locked for the length of a call (a shared lock: calls
//! on any endpoints from any threads run side by side); opening and closing
//! take it exclusively. A call that may block for long (`rdm4_wait`) holds a
//! counted reference instead, so that it never holds up opens and closes.

#![allow(non_camel_case_types)]
// C callers cannot be marked `unsafe`: every pointer is checked for NULL and
// used under the documented contract instead.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod data;
mod ep;
mod types;

use std::ffi::{c_char, c_void};
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;

use once_cell::sync::Lazy;

pub use data::*;
pub use ep::*;
pub use types::*;

use crate::device::Device;
use crate::engine::{Cqe, Endpoint};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::{self, Status};

/// Runs an exported function's body: `Ok(n)` returns `n`, `Err(s)` the
/// status code, a panic `RDM4_EINTERNAL`.
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

/// What the C handle stands for.
pub(crate) struct EpHandle {
    inner: Mutex<EpInner>,
    pub(crate) stop: AtomicBool,
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
}

impl EpHandle {
    fn new(inner: EpInner) -> EpHandle {
        EpHandle { inner: Mutex::new(inner), stop: AtomicBool::new(false), thread: Mutex::new(None) }
    }

    /// The endpoint, locked (a panic in another call does not poison it for good).
    pub(crate) fn lock(&self) -> MutexGuard<'_, EpInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An endpoint and the library-owned copies of injected messages.
pub(crate) struct EpInner {
    pub(crate) ep: Endpoint<Box<dyn Device + Send>>,
    injected: FxHashMap<u64, Box<[u8]>>,
    bounces: FxHashMap<u64, Bounce>,
    /// Completions collected but not yet polled (`rdm4_wait` looks ahead).
    ready: Vec<Cqe>,
    /// Reused buffer for the engine's completions.
    scratch: Vec<Cqe>,
}

impl EpInner {
    fn new(ep: Endpoint<Box<dyn Device + Send>>) -> EpInner {
        EpInner {
            ep,
            injected: FxHashMap::default(),
            bounces: FxHashMap::default(),
            ready: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// One progress call; true when it produced completions.
    pub(crate) fn progress_once(&mut self) -> bool {
        let before = self.ep.cq_len();
        self.ep.progress(0);
        self.ep.cq_len() > before
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

    /// Hands up to `max` completions to `out` (with their index); returns how many.
    pub(crate) fn take_completions(&mut self, max: usize, mut out: impl FnMut(usize, &Cqe)) -> usize {
        if self.ready.is_empty() && self.injected.is_empty() && self.bounces.is_empty() {
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

/// A fresh handle value: a counter, never reused, so a stale handle can
/// never name a newer endpoint. Multiples of 16, so they look like (and are
/// as opaque as) pointers.
pub(crate) fn new_handle() -> *mut rdm4_ep {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 4) as *mut rdm4_ep
}

/// Open endpoints by handle value.
type Registry = FxHashMap<usize, Arc<EpHandle>>;

fn registry_lock() -> &'static RwLock<Registry> {
    static REG: Lazy<RwLock<Registry>> = Lazy::new(|| RwLock::new(FxHashMap::default()));
    &REG
}

/// The registry, for opening and closing (exclusive).
pub(crate) fn registry() -> RwLockWriteGuard<'static, Registry> {
    registry_lock().write().unwrap_or_else(|e| e.into_inner())
}

/// An open endpoint, kept open (the registry read-locked) while this lives.
pub(crate) struct EpRef {
    reg: RwLockReadGuard<'static, Registry>,
    key: usize,
}

impl Deref for EpRef {
    type Target = EpHandle;

    fn deref(&self) -> &EpHandle {
        // `lookup` found the key, and nothing can remove it while `reg` is held.
        self.reg.get(&self.key).expect("endpoint removed under a read lock")
    }
}

/// The endpoint behind a C handle, if it is open, for the length of a call.
pub(crate) fn lookup(ep: *mut rdm4_ep) -> Result<EpRef, Status> {
    let reg = registry_lock().read().unwrap_or_else(|e| e.into_inner());
    let key = ep as usize;
    if !reg.contains_key(&key) {
        return Err(Status::BadHandle);
    }
    Ok(EpRef { reg, key })
}

/// The endpoint behind a C handle, as a counted reference: for calls that
/// may block, which must not hold the registry.
pub(crate) fn lookup_shared(ep: *mut rdm4_ep) -> Result<Arc<EpHandle>, Status> {
    registry_lock().read().unwrap_or_else(|e| e.into_inner()).get(&(ep as usize)).cloned().ok_or(Status::BadHandle)
}

/// A lent buffer from a C pointer and length (NULL only with length 0).
pub(crate) fn c_buf(ptr: *mut c_void, len: usize) -> Result<UserBuf, Status> {
    if len > isize::MAX as usize {
        return Err(Status::Inval);
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
