//! One-sided operations: RMA writes and reads, atomics, and their forms
//! done in the call (`_now`).
//!
//! The common rules of data operations are those of `msg`.

use std::ffi::c_void;

use super::types::*;
use super::{addr, c_buf, ep_call, rdm4_ep};
use crate::atomic_ops;
use crate::engine::RemoteBuf;
use crate::status::Status;

#[allow(clippy::too_many_arguments)]
fn write_common(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    data: Option<u64>,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    ep_call(ep, |g| {
        let b = c_buf(buf as *mut c_void, len)?;
        g.ep.write(addr(dest)?, b, RemoteBuf { addr: raddr, key }, data, context as u64)?;
        Ok(0)
    })
}

/// Writes `len` bytes at `buf` to the peer's memory at `raddr`, registered
/// with `key` and `RDM4_ACCESS_REMOTE_WRITE`. `raddr` is an address in the
/// target process: the `buf` the target passed to `rdm4_mr_reg`, plus the
/// offset into it (the target sends its peers that pointer and the key).
/// The completion (`RDM4_CQ_RMA | RDM4_CQ_WRITE`) says the data is in the
/// target's memory (towards rdm4 peers); a bad key, range or access
/// completes with `RDM4_EREMOTEACCESS` (`detail` 7) and the target's memory
/// unchanged. One the target has not served `rdm4_ep_attr.timeout_ms`
/// after its post (60 s by default; a peer that stopped calling the
/// library, or a legacy one that drops a request it cannot serve without
/// answering) completes with `RDM4_ETIMEDOUT`; what arrives for it later
/// is dropped, and nothing is written into `buf` after its completion. The
/// timeout is noticed by `rdm4_poll` and `rdm4_wait` (which wakes for
/// it); an event loop sleeping on `rdm4_ep_fd` bounds its sleep by the
/// timeout while such operations are outstanding.
///
/// Progress: with cross-memory attach (shm, the default where the OS allows
/// it) the target takes no part: writes and reads are done in the call
/// (a copy into memory of `rdm4_mr_alloc`, else a system call) and
/// complete at the next `rdm4_poll`, also towards a peer that never calls
/// the library; so are atomics on memory of `rdm4_mr_alloc` (by this
/// CPU's atomic instructions). One exception, for speed: a write or read
/// of ordinary registered memory that fits one packet (shm: 64 KiB),
/// towards a target that is polling at that moment (it polled in the last
/// 50 µs and is not asleep in `rdm4_wait`), goes as a request through the
/// target's ring and completes at `rdm4_poll` once the target has served
/// it; one the target leaves untaken for a quarter of a millisecond is
/// taken back and done by the system call, so none waits for a target
/// that stopped (`RDM4_SHM_RING_RMA=0`: always the system call). Other atomics, and emulated RMA (udp
/// without RDMA, no cross-memory attach, CQ data past 32 bits), are served
/// by the target's progress, so with manual progress they complete only
/// while the target polls; the first of them towards a peer also waits
/// for that peer's HANDSHAKE, which the peer sends when it next calls into
/// the library (any call that makes progress: `rdm4_poll`, `rdm4_wait`, a
/// send...), or at once with automatic progress.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf`
/// with `len > 0`, or `raddr + len` past 2^64); `RDM4_EOVERFLOW` (`len`
/// over `RDM4_MSG_MAX`); `RDM4_ENOADDR`; `RDM4_EPEER`; `RDM4_EAGAIN`.
/// Buffer: the library's until the completion is polled. Thread safety: any
/// thread.
#[no_mangle]
pub extern "C" fn rdm4_write(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    write_common(ep, buf, len, None, dest, raddr, key, context)
}

/// `rdm4_write` that also gives the target a completion
/// (`RDM4_CQ_REMOTE_WRITE | RDM4_CQ_REMOTE_CQ_DATA`) with `data`.
/// Returns as `rdm4_write`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdm4_writedata(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    write_common(ep, buf, len, Some(data), dest, raddr, key, context)
}

/// Reads `len` bytes of the peer's memory at `raddr` (the target's address
/// of its registered memory, as for `rdm4_write`; registered with `key` and
/// `RDM4_ACCESS_REMOTE_READ`) into `buf`. Completion:
/// `RDM4_CQ_RMA | RDM4_CQ_READ`, or `RDM4_EREMOTEACCESS`, or
/// `RDM4_ETIMEDOUT` (as for `rdm4_write`). Progress as for `rdm4_write`. Returns as `rdm4_write`.
#[no_mangle]
pub extern "C" fn rdm4_read(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    ep_call(ep, |g| {
        let b = c_buf(buf, len)?;
        g.ep.read(addr(dest)?, b, RemoteBuf { addr: raddr, key }, context as u64)?;
        Ok(0)
    })
}

/// The byte length of `count` elements of `datatype`.
fn elems(count: usize, datatype: u32) -> Result<usize, Status> {
    count.checked_mul(atomic_ops::type_size(datatype)?).ok_or(Status::Overflow)
}

#[allow(clippy::too_many_arguments)]
fn atomic_common(
    want: atomic_ops::AtomicClass,
    ep: *mut rdm4_ep,
    operand: (*const c_void, usize),
    compare: (*const c_void, usize),
    result: (*mut c_void, usize),
    datatype: u32,
    op: u32,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    ep_call(ep, |g| {
        // The op must be of the call's kind: rdm4_atomic takes write ops,
        // rdm4_fetch_atomic fetch ops, rdm4_compare_atomic the CSWAP family.
        if atomic_ops::classify(datatype, op, want != atomic_ops::AtomicClass::Write)? != want {
            return Err(Status::Inval);
        }
        let o = c_buf(operand.0 as *mut c_void, elems(operand.1, datatype)?)?;
        let c = c_buf(compare.0 as *mut c_void, elems(compare.1, datatype)?)?;
        let r = c_buf(result.0, elems(result.1, datatype)?)?;
        let remote = RemoteBuf { addr: raddr, key };
        g.ep.atomic(addr(dest)?, datatype, op, o, c, r, remote, context as u64)?;
        Ok(0)
    })
}

/// Applies `op` (`RDM4_MIN` ... `RDM4_BXOR`, `RDM4_ATOMIC_WRITE`) with the `count`
/// elements of `datatype` at `buf` to the peer's memory at `raddr`
/// (registered with `key` and `RDM4_ACCESS_REMOTE_WRITE`). Atomics towards
/// one peer are applied in the order they were posted; one on memory of
/// `rdm4_mr_alloc` at a peer of this host is applied in the call (by this
/// CPU), not ordered with emulated ones still under way. The payload must
/// fit one packet of the device (about 64 KiB over shared memory, see
/// `RDM4_SHM_MTU`).
///
/// Atomicity: each element of 1, 2, 4 or 8 bytes at an aligned address is
/// atomic with respect to every other rdm4 atomic on it, whichever peer
/// and path applied it, and to the owner's own atomic instructions on it;
/// not to plain (non-atomic) loads and stores by the owner. Elements of 16
/// bytes (128-bit integers, double complex) and unaligned ones are atomic
/// only with respect to the other atomics the target's endpoint serves.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf`
/// with `count > 0`, `count` 0, an op of another call: `RDM4_ATOMIC_READ`
/// or a compare op); `RDM4_ENOTSUP` (the op does not apply to
/// the datatype, or `long double`); `RDM4_EOVERFLOW` (payload too large);
/// `RDM4_ENOADDR`; `RDM4_EPEER`; `RDM4_EAGAIN`. Completion:
/// `RDM4_CQ_ATOMIC | RDM4_CQ_WRITE`, or `RDM4_EREMOTEACCESS`, or
/// `RDM4_ETIMEDOUT` (as for `rdm4_write`).
/// Buffer: the library's until the completion is polled.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdm4_atomic(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    count: usize,
    datatype: u32,
    op: u32,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    atomic_common(
        atomic_ops::AtomicClass::Write,
        ep,
        (buf, count),
        (std::ptr::null(), 0),
        (std::ptr::null_mut(), 0),
        datatype,
        op,
        dest,
        raddr,
        key,
        context,
    )
}

/// Like `rdm4_atomic`, and writes the target's previous values to `result`
/// (`count` elements). With `RDM4_ATOMIC_READ`, `buf` may be NULL. The
/// memory also needs `RDM4_ACCESS_REMOTE_READ`. Completion adds
/// `RDM4_CQ_READ`. Returns as `rdm4_atomic`; `RDM4_EINVAL` also for a NULL
/// `result` or a compare op.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdm4_fetch_atomic(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    count: usize,
    result: *mut c_void,
    datatype: u32,
    op: u32,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    let operand_count = if op == RDM4_ATOMIC_READ && buf.is_null() { 0 } else { count };
    atomic_common(
        atomic_ops::AtomicClass::Fetch,
        ep,
        (buf, operand_count),
        (std::ptr::null(), 0),
        (result, count),
        datatype,
        op,
        dest,
        raddr,
        key,
        context,
    )
}

/// A compare atomic (`RDM4_CSWAP` ... `RDM4_MSWAP`): each element of the
/// target is replaced by `buf`'s when the condition on `compare`'s holds
/// (MSWAP: `compare` is the bit mask); `result` receives the previous
/// values. Returns as `rdm4_fetch_atomic`; `RDM4_EINVAL` also for a NULL
/// `compare` or an op outside the compare family.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdm4_compare_atomic(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    count: usize,
    compare: *const c_void,
    result: *mut c_void,
    datatype: u32,
    op: u32,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
    context: *mut c_void,
) -> i32 {
    let class = atomic_ops::AtomicClass::Compare;
    atomic_common(class, ep, (buf, count), (compare, count), (result, count), datatype, op, dest, raddr, key, context)
}

/// Writes `len` bytes at `buf` to the peer's memory at `raddr` (registered
/// with `key` and `RDM4_ACCESS_REMOTE_WRITE`, as for `rdm4_write`) in this
/// call: when it returns `RDM4_SUCCESS` the data is in the target's memory
/// and `buf` is the caller's again. No completion is written, whatever
/// the outcome. The target takes no part (a peer that never calls the
/// library is reached). For puts that are complete when they return
/// (`shmem_put`, `MPI_Put` with a flush): no completion to poll for.
///
/// Done where the device reaches the target's memory itself: shm with
/// cross-memory attach (memory of `rdm4_mr_alloc` by a copy, other memory
/// by a system call; never through the target's ring). Elsewhere (udp, no
/// cross-memory attach, a peer that offers no RDMA) `RDM4_ENOTSUP`:
/// use `rdm4_write`.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf`
/// with `len > 0`, or `raddr + len` past 2^64); `RDM4_EOVERFLOW` (`len`
/// over `RDM4_MSG_MAX`); `RDM4_ENOADDR`; `RDM4_EPEER`; `RDM4_ENOTSUP`;
/// `RDM4_EREMOTEACCESS` (bad key, range or access: nothing written);
/// `RDM4_EAGAIN` (small `rdm4_write`s or `rdm4_read`s of this endpoint to
/// the peer still wait in its ring and this write must not pass them:
/// poll, then call again). Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_write_now(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
) -> i32 {
    rma_now_common(ep, (buf as *mut c_void, len), dest, (raddr, key), true)
}

/// Reads `len` bytes of the peer's memory at `raddr` (registered with `key`
/// and `RDM4_ACCESS_REMOTE_READ`) into `buf` in this call: when it returns
/// `RDM4_SUCCESS` the bytes are in `buf`. No completion is written. Done
/// where `rdm4_write_now` is. Returns as `rdm4_write_now` (nothing is
/// written into `buf` on failure). Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_read_now(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
) -> i32 {
    rma_now_common(ep, (buf, len), dest, (raddr, key), false)
}

fn rma_now_common(
    ep: *mut rdm4_ep,
    (buf, len): (*mut c_void, usize),
    dest: rdm4_addr,
    (raddr, key): (u64, u64),
    write: bool,
) -> i32 {
    ep_call(ep, |g| {
        let b = c_buf(buf, len)?;
        g.ep.rma_in_call(addr(dest)?, b, RemoteBuf { addr: raddr, key }, write)?;
        Ok(0)
    })
}

/// An atomic done in this call: `op` with the `count` elements of
/// `datatype` at `buf` (and at `compare`, for the compare ops) on the
/// peer's memory at `raddr`; with `result` not NULL the target's previous
/// values are written there when it returns `RDM4_SUCCESS`. The op's kind
/// follows from the arguments: a write op (`RDM4_MIN` ... `RDM4_BXOR`,
/// `RDM4_ATOMIC_WRITE`) with `result` NULL, a fetch op with `result`
/// (`buf` may be NULL for `RDM4_ATOMIC_READ`), a compare op with `compare`
/// and `result`. No completion is written. Atomicity as for
/// `rdm4_atomic`.
///
/// Done only on memory of `rdm4_mr_alloc` at a peer of this host, by this
/// CPU's atomic instructions; elsewhere `RDM4_ENOTSUP` (nothing applied):
/// use `rdm4_atomic`, `rdm4_fetch_atomic` or `rdm4_compare_atomic`.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (a NULL
/// buffer the op needs, `count` 0, a compare op without `compare` or
/// `result`); `RDM4_ENOTSUP` (as above, or the op does not apply to the
/// datatype); `RDM4_EOVERFLOW`; `RDM4_ENOADDR`; `RDM4_EPEER`;
/// `RDM4_EREMOTEACCESS` (bad key, range or access: nothing applied).
/// Thread safety: any thread.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdm4_atomic_now(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    count: usize,
    datatype: u32,
    op: u32,
    dest: rdm4_addr,
    raddr: u64,
    key: u64,
) -> i32 {
    ep_call(ep, |g| {
        let class = atomic_ops::classify(datatype, op, !result.is_null())?;
        let n = elems(count, datatype)?;
        let operand_len = if op == RDM4_ATOMIC_READ && buf.is_null() { 0 } else { n };
        let compare_len = if class == atomic_ops::AtomicClass::Compare { n } else { 0 };
        let o = c_buf(buf as *mut c_void, operand_len)?;
        let c = c_buf(compare as *mut c_void, compare_len)?;
        let r = c_buf(result, if result.is_null() { 0 } else { n })?;
        g.ep.atomic_in_call(addr(dest)?, datatype, op, (o, c, r), RemoteBuf { addr: raddr, key })?;
        Ok(0)
    })
}
