//! The boundary every exported function crosses, and the checks of its
//! arguments: one way to run a call, to check an endpoint handle, a
//! required pointer, an array, a lent buffer and a struct that carries its
//! own size.
//!
//! The order of checks is the same for every call: the handle first
//! (`RDM4_EBADHANDLE`), then the arguments, then the work.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::types::{rdm4_addr, rdm4_ep_attr, rdm4_ep_info, RDM4_MSG_MAX};
use super::{rdm4_ep, slots, EpInner};
use crate::engine::Addr;
use crate::mem::UserBuf;
use crate::status::Status;

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

/// Runs the body of a call on the endpoint `ep` inside [`boundary`]: the
/// handle is checked first (`BadHandle` for NULL, unknown and closed ones,
/// without running `f`), then `f` checks the arguments and does the work
/// on the endpoint, entered for the length of the call (`slots`).
#[inline(always)]
pub(crate) fn ep_call(ep: *mut rdm4_ep, f: impl FnOnce(&mut EpInner) -> Result<i32, Status>) -> i32 {
    boundary(|| slots::on_ep(ep, f))
}

/// A pointer, for the NULL checks.
pub(crate) trait Pointer: Copy {
    fn is_null(self) -> bool;
}

impl<T> Pointer for *const T {
    #[inline(always)]
    fn is_null(self) -> bool {
        <*const T>::is_null(self)
    }
}

impl<T> Pointer for *mut T {
    #[inline(always)]
    fn is_null(self) -> bool {
        <*mut T>::is_null(self)
    }
}

/// `p`, which the call requires: `Inval` when NULL.
#[inline(always)]
pub(crate) fn required<P: Pointer>(p: P) -> Result<P, Status> {
    if p.is_null() {
        return Err(Status::Inval);
    }
    Ok(p)
}

/// `p`, an array of `n` elements the call reads or writes: NULL only with
/// `n == 0`, else `Inval`.
#[inline(always)]
pub(crate) fn array<P: Pointer>(p: P, n: usize) -> Result<P, Status> {
    if n > 0 && p.is_null() {
        return Err(Status::Inval);
    }
    Ok(p)
}

/// A lent buffer from a C pointer and length (NULL only with length 0,
/// else `Inval`; `Overflow` past `RDM4_MSG_MAX`).
#[inline(always)]
pub(crate) fn c_buf(ptr: *mut c_void, len: usize) -> Result<UserBuf, Status> {
    if len as u64 > RDM4_MSG_MAX {
        return Err(Status::Overflow);
    }
    // SAFETY: the C contract: `len` bytes at `ptr` belong to the library until
    // the operation's completion has been polled.
    unsafe { UserBuf::from_raw(ptr.cast(), len) }.ok_or(Status::Inval)
}

/// An address handle of the endpoint's address vector (`NoAddr` for a
/// value no handle can have).
#[inline(always)]
pub(crate) fn addr(a: rdm4_addr) -> Result<Addr, Status> {
    u32::try_from(a).map_err(|_| Status::NoAddr)
}

/// A C struct that starts with its own size (`size_t size`), set by the
/// caller to the size it was compiled with: the struct only grows at its
/// end, so the library and the caller share the prefix both know.
///
/// # Safety
/// `Self` is `#[repr(C)]` and its first field is `size: usize`.
pub(crate) unsafe trait SizePrefixed: Sized {
    /// The shortest prefix a caller may pass: the size and the fields every
    /// version had.
    const MIN: usize;
    fn set_size(&mut self, size: usize);
}

// SAFETY: both are `#[repr(C)]` and begin with `size: usize`.
unsafe impl SizePrefixed for rdm4_ep_attr {
    const MIN: usize = std::mem::offset_of!(rdm4_ep_attr, device) + 4;
    fn set_size(&mut self, size: usize) {
        self.size = size;
    }
}

// SAFETY: as above.
unsafe impl SizePrefixed for rdm4_ep_info {
    const MIN: usize = std::mem::offset_of!(rdm4_ep_info, device) + 4;
    fn set_size(&mut self, size: usize) {
        self.size = size;
    }
}

/// The size the caller's struct at `p` (not NULL) says it has: `Inval`
/// below `T::MIN`.
fn caller_size<T: SizePrefixed>(p: *const T) -> Result<usize, Status> {
    // SAFETY: not NULL; the struct starts with its size (`SizePrefixed`),
    // read as the caller wrote it (perhaps unaligned).
    let size = unsafe { p.cast::<usize>().read_unaligned() };
    if size < T::MIN {
        return Err(Status::Inval);
    }
    Ok(size)
}

/// Reads the caller's struct at `p` (not NULL) over `base`: the prefix both
/// know comes from the caller, the rest keeps `base`'s values, and the
/// size is that prefix's. `Inval` when the caller's size is below
/// `T::MIN`.
pub(crate) fn read_sized<T: SizePrefixed>(p: *const T, mut base: T) -> Result<T, Status> {
    let n = caller_size(p)?.min(std::mem::size_of::<T>());
    // SAFETY: the caller's struct has at least its size in readable
    // bytes; `n` is at most that and at most `T`'s size.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut base as *mut T).cast::<u8>(), n) };
    base.set_size(n);
    Ok(base)
}

/// Writes `v` into the caller's struct at `p` (not NULL): the prefix both
/// know, with that prefix's size; nothing past the caller's size. `Inval`
/// (nothing written) when the caller's size is below `T::MIN`.
pub(crate) fn write_sized<T: SizePrefixed>(p: *mut T, mut v: T) -> Result<(), Status> {
    let n = caller_size(p)?.min(std::mem::size_of::<T>());
    v.set_size(n);
    // SAFETY: the caller's struct holds its size in writable bytes; `n`
    // is at most that and at most `T`'s size.
    unsafe { std::ptr::copy_nonoverlapping((&v as *const T).cast::<u8>(), p.cast::<u8>(), n) };
    Ok(())
}
