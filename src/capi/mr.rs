//! Memory registration: application memory registered, and memory the
//! library allocates for peers of this host to map.

use std::ffi::c_void;

use super::types::*;
use super::{c_buf, ep_call, rdm4_ep, required};
use crate::device::Access;
use crate::status::Status;

/// Registers `len` bytes at `buf` with `RDM4_ACCESS_*` rights; `*key` is the
/// key peers use for RMA and atomics on it. The memory must stay valid until
/// `rdm4_mr_close`.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `key`,
/// NULL `buf` with `len > 0`, unknown access bits); `RDM4_ENOMEM` (the
/// registration table is full). Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_mr_reg(ep: *mut rdm4_ep, buf: *mut c_void, len: usize, access: u64, key: *mut u64) -> i32 {
    ep_call(ep, |g| {
        let key = required(key)?;
        let access = c_access(access)?;
        let b = c_buf(buf, len)?;
        let k = g.ep.mr_reg(b, access)?;
        // SAFETY: non-NULL out-pointer.
        unsafe { key.write(k) };
        Ok(0)
    })
}

/// Registers `len` bytes at `buf` as `rdm4_mr_reg` does, memory the
/// application maps from the file descriptor `fd` (a `memfd_create` or
/// `shm_open` file, mapped `MAP_SHARED`) at file offset `offset`: on shm,
/// peers of this host map that file too (through `/proc/<pid>/fd`, with
/// the permission cross-memory attach needs), so that their writes, reads
/// and atomics on it are copies and CPU atomics in their own process, as
/// on memory of `rdm4_mr_alloc`; elsewhere it is an ordinary registration.
/// Unlike an allocation, such memory stays the application's after
/// `rdm4_mr_close`: a peer's access under way is waited for as for
/// `rdm4_mr_close` of any memory. The library keeps a duplicate of `fd`
/// until `rdm4_mr_close` (the caller may close its own).
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (as
/// `rdm4_mr_reg`; on shm also a negative or unusable `fd`, a file shorter
/// than `offset + len`, or `buf` and `offset` at different places of a
/// page, which one mapping of the file cannot be); `RDM4_ENOMEM` (the
/// registration table is full, no descriptor left). Thread safety: any
/// thread.
#[no_mangle]
pub extern "C" fn rdm4_mr_reg_fd(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    fd: i32,
    offset: u64,
    access: u64,
    key: *mut u64,
) -> i32 {
    ep_call(ep, |g| {
        let key = required(key)?;
        if fd < 0 {
            return Err(Status::Inval);
        }
        let access = c_access(access)?;
        let b = c_buf(buf, len)?;
        let k = g.ep.mr_reg_fd(b, fd, offset, access)?;
        // SAFETY: non-NULL out-pointer.
        unsafe { key.write(k) };
        Ok(0)
    })
}

/// `RDM4_ACCESS_*` bits as the engine's, `Inval` for unknown ones.
fn c_access(access: u64) -> Result<Access, Status> {
    if access & !(RDM4_ACCESS_LOCAL | RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE) != 0 {
        return Err(Status::Inval);
    }
    Ok(Access::from_bits_truncate(access as u32))
}

/// Allocates `len` bytes (zeroed) registered with `RDM4_ACCESS_*` rights:
/// `*ptr` is the memory, `*key` the key peers use for RMA and atomics on
/// it (as `ucp_mem_map` with allocation, `MPI_Win_allocate`,
/// `shmem_malloc`). On shm the memory lives in a file of its own that
/// peers of this host map on their first access: their writes and reads
/// of it are copies in their own process, with no system call; on udp it
/// is ordinary memory, registered. The memory is the endpoint's: valid
/// until `rdm4_mr_free` of `*key` or `rdm4_ep_close`; never pass it to
/// `free`. `rdm4_mr_close` refuses such a key (`RDM4_EINVAL`).
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `ptr`
/// or `key`, unknown access bits, `len` past `RDM4_MSG_MAX`);
/// `RDM4_ENOMEM` (no memory, the registration table is full);
/// `RDM4_EIO` (the shared file could not be made). On failure `*ptr` and
/// `*key` are not written. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_mr_alloc(
    ep: *mut rdm4_ep,
    len: usize,
    access: u64,
    ptr: *mut *mut c_void,
    key: *mut u64,
) -> i32 {
    ep_call(ep, |g| {
        let (ptr, key) = (required(ptr)?, required(key)?);
        if len as u64 > RDM4_MSG_MAX {
            return Err(Status::Inval);
        }
        let access = c_access(access)?;
        let (buf, k) = g.ep.mr_alloc(len, access)?;
        // SAFETY: non-NULL out-pointers.
        unsafe {
            ptr.write(buf.addr() as usize as *mut c_void);
            key.write(k);
        }
        Ok(0)
    })
}

/// Frees memory of `rdm4_mr_alloc` by its key. When it returns
/// `RDM4_SUCCESS`, the pointer is invalid and no peer reads or writes the
/// memory any more: accesses that start later are refused with
/// `RDM4_EREMOTEACCESS`. The free does not wait for a peer's copy or
/// atomic under way on shm: one that checked the registration before the
/// free may end after it, in the freed pages, which nothing reaches any
/// more (each allocation has pages of its own), so it took effect before
/// the free as far as anyone can tell.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (no allocation
/// has this key: unknown, freed already, or an `rdm4_mr_reg` key);
/// `RDM4_EBUSY` as `rdm4_mr_close` (the memory stays; call again). Thread
/// safety: any thread; the call may block up to 2 s.
#[no_mangle]
pub extern "C" fn rdm4_mr_free(ep: *mut rdm4_ep, key: u64) -> i32 {
    ep_call(ep, |g| {
        g.ep.mr_free(key)?;
        Ok(0)
    })
}

/// Removes a registration. When it returns `RDM4_SUCCESS`, no peer reads
/// or writes the memory any more, by any path: a peer's cross-memory-attach
/// copy under way (or copy through its mapping of memory of
/// `rdm4_mr_reg_fd`) is waited for (up to 2 s), and requests that arrive later
/// are refused with `RDM4_EREMOTEACCESS`. The memory may then be freed.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (unknown key,
/// or one of `rdm4_mr_alloc`: `rdm4_mr_free` frees those);
/// `RDM4_EBUSY` in two cases, after which the memory must stay valid and
/// the call be repeated: a peer's emulated long read or write (one that
/// moves through this endpoint's progress) is using it (the registration
/// stays as it was; try again after progress), or a peer's
/// cross-memory-attach copy into or out of it was still under way after 2 s
/// (the registration takes no new access; the next call waits again).
/// Thread safety: any thread; the call may block up to 2 s.
#[no_mangle]
pub extern "C" fn rdm4_mr_close(ep: *mut rdm4_ep, key: u64) -> i32 {
    ep_call(ep, |g| {
        g.ep.mr_dereg(key)?;
        Ok(0)
    })
}
