//! The C API: opaque handles, status codes, no protocol logic (DESIGN §4; docs/architecture.md).
//!
//! Every exported function runs inside one boundary (`boundary`): a Rust
//! panic becomes `RDM4_EINTERNAL` and never unwinds into C. A call on an
//! endpoint checks its handle first (`ep_call`: NULL, unknown and closed
//! handles give `RDM4_EBADHANDLE` instead of a crash), then its arguments
//! (`required`, `array`, `c_buf`, and for the attribute structs that carry
//! their own size `read_sized` / `write_sized`). Each endpoint sits behind
//! a lock, so every call is safe from any thread, unless it was opened
//! single-threaded (`slots`).

#![allow(non_camel_case_types)]
// C callers cannot be marked `unsafe`: every pointer is checked for NULL and
// used under the documented contract instead.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod boundary;
mod cep;
mod counters;
// Data operations: two-sided messages, then RMA and atomics.
mod msg;
mod rma;
// The C API's objects each have their own file, declared in the order of
// the header (cbindgen follows the declarations; rustfmt sorts only
// adjacent ones).
mod ep;

mod av;

mod mr;

mod cq;

mod responder;
mod slots;
mod thread;
mod types;

pub(crate) use boundary::{addr, array, boundary, c_buf, ep_call, read_sized, required, write_sized};
pub(crate) use cep::{CEp, CapEp};
pub(crate) use slots::{install, open_slots, release_slot, uninstall, EpSlot};

use std::ffi::c_char;

pub use av::*;
pub use counters::*;
pub use cq::*;
pub use ep::*;
pub use mr::*;
pub use msg::*;
pub use rma::*;
pub use types::*;

use crate::engine::Cqe;
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status;

/// Nanoseconds on a monotonic clock (since the first call): the time the
/// engine's request timeouts count in.
pub(crate) fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
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
    /// endpoint go (the locked call's exit, `slots`).
    pub(crate) parked: u32,
    /// `RDM4_PROGRESS_*` and `RDM4_THREAD_*` it was opened with.
    pub(crate) modes: (u32, u32),
    /// Its handle (set by `slots::install` before the endpoint is
    /// published): a single-threaded call checks it here.
    pub(crate) handle: u64,
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
            handle: 0,
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

    /// Hands up to `max` completions of the C API's queue (the engine's,
    /// filtered and rewritten) to `out` (with their index); returns how
    /// many.
    pub(crate) fn take_completions(&mut self, max: usize, mut out: impl FnMut(usize, &Cqe)) -> usize {
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
