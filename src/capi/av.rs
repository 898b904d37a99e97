//! The address vector: peers inserted, removed and printed.

use std::ffi::{c_char, c_void};

use super::types::*;
use super::{array, boundary, ep_call, rdm4_ep, required};
use crate::status::Status;
use crate::wire::RawAddr;

/// Inserts `count` raw addresses (`count * RDM4_ADDR_LEN` bytes at `addrs`)
/// and writes their handles to `out[0..count]`. Inserting an address twice
/// gives the same handle. All or nothing: on failure no address stays inserted.
///
/// Returns the number inserted (`count`); `RDM4_EBADHANDLE`; `RDM4_EINVAL`
/// (NULL `addrs` or `out` with `count > 0`); `RDM4_ENOADDR` (an address no
/// device of this endpoint can reach, e.g. another host's shared memory or a
/// closed endpoint); `RDM4_ENOTSUP` (a shm peer whose MTU is smaller than
/// this endpoint's: `RDM4_SHM_MTU` must not be larger here than there).
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_av_insert(ep: *mut rdm4_ep, addrs: *const c_void, count: usize, out: *mut rdm4_addr) -> i32 {
    ep_call(ep, |g| {
        let addrs = array(addrs, count)?;
        let out = array(out, count)?;
        if count == 0 {
            return Ok(0);
        }
        if count > i32::MAX as usize / RDM4_ADDR_LEN {
            return Err(Status::Inval);
        }
        // SAFETY: the caller gives `count` addresses of RDM4_ADDR_LEN bytes.
        let bytes = unsafe { std::slice::from_raw_parts(addrs.cast::<u8>(), count * RDM4_ADDR_LEN) };
        let mut done: Vec<u32> = Vec::with_capacity(count);
        let mut fresh: Vec<u32> = Vec::new();
        for chunk in bytes.chunks(RDM4_ADDR_LEN) {
            let name = RawAddr::from_bytes(chunk).ok_or(Status::Inval)?;
            // Auto: the device the peer is reached by (shm or udp).
            let raw = match g.ep.reach(&name) {
                Ok(r) => r,
                Err(e) => {
                    for a in fresh {
                        let _ = g.ep.av_remove(a);
                    }
                    return Err(e);
                }
            };
            let known = g.ep.av_contains(&raw);
            match g.ep.av_insert(&raw) {
                Ok(a) => {
                    done.push(a);
                    if !known {
                        fresh.push(a);
                    }
                }
                Err(e) => {
                    // Undo only what this call added.
                    for a in fresh {
                        let _ = g.ep.av_remove(a);
                    }
                    return Err(e);
                }
            }
        }
        for (i, a) in done.iter().enumerate() {
            // SAFETY: `out` has room for `count` handles.
            unsafe { out.add(i).write(u64::from(*a)) };
        }
        Ok(count as i32)
    })
}

/// Removes `count` address handles. Operations towards them, and posted
/// receives that accept only one of them, complete with `RDM4_ECANCELED`.
/// All handles are checked first: nothing is removed when one is unknown.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `addrs`
/// with `count > 0`); `RDM4_ENOADDR` (an unknown handle).
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_av_remove(ep: *mut rdm4_ep, addrs: *const rdm4_addr, count: usize) -> i32 {
    ep_call(ep, |g| {
        let addrs = array(addrs, count)?;
        if count == 0 {
            return Ok(0);
        }
        // SAFETY: `count` handles at `addrs`.
        let list = unsafe { std::slice::from_raw_parts(addrs, count) };
        let handles: Result<Vec<u32>, Status> = list
            .iter()
            .map(|&a| u32::try_from(a).ok().filter(|&a| g.ep.av_lookup(a).is_ok()).ok_or(Status::NoAddr))
            .collect();
        for a in handles? {
            g.ep.av_remove(a)?;
        }
        Ok(0)
    })
}

/// Copies the raw address of handle `addr` into `buf`: a peer inserted,
/// or a sender learnt from its first packet (the source of a completion).
/// It is the address the endpoint's device reaches the peer by: the
/// peer's name on shm and udp; on auto, the shm address of a peer on
/// this host and the udp address (the name without its shared-memory
/// locator) of any other. `*len` holds the buffer size on entry and the
/// address length on return; as `rdm4_ep_getname`, a NULL `buf` asks for
/// the size.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `len`);
/// `RDM4_ENOADDR` (`addr` is no handle of this endpoint: never given, or
/// removed); `RDM4_ETOOSMALL` when `buf` is NULL or `*len < RDM4_ADDR_LEN`
/// (then `*len` is set to `RDM4_ADDR_LEN` and nothing is copied).
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_av_lookup(ep: *mut rdm4_ep, addr: rdm4_addr, buf: *mut c_void, len: *mut usize) -> i32 {
    ep_call(ep, |g| {
        let raw = u32::try_from(addr).map_err(|_| Status::NoAddr).and_then(|a| g.ep.av_lookup(a))?;
        copy_name(&raw, buf, len)
    })
}

/// Copies `raw` into `buf` of `*len` bytes (`*len` set to `RDM4_ADDR_LEN`):
/// `TooSmall` when `buf` is NULL or short.
pub(super) fn copy_name(raw: &RawAddr, buf: *mut c_void, len: *mut usize) -> Result<i32, Status> {
    let len = required(len)?;
    // SAFETY: `len` is non-NULL; `buf`, when non-NULL, has `*len` bytes.
    unsafe {
        let have = len.read();
        len.write(RDM4_ADDR_LEN);
        if buf.is_null() || have < RDM4_ADDR_LEN {
            return Err(Status::TooSmall);
        }
        std::ptr::copy_nonoverlapping(raw.to_bytes().as_ptr(), buf.cast::<u8>(), RDM4_ADDR_LEN);
    }
    Ok(0)
}

/// Writes a readable form of a raw address (`RDM4_ADDR_LEN` bytes at `addr`)
/// as a NUL-terminated string into `buf`; `*len` holds the buffer size on
/// entry and the needed size (NUL included) on return. As
/// `rdm4_ep_getname`: a NULL `buf` asks for the size.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EINVAL` (NULL `addr` or `len`, or an
/// address no endpoint could have); `RDM4_ETOOSMALL` when `buf` is NULL or
/// `*len` is short (nothing written, `*len` set to the size needed).
/// Thread safety: any thread; no endpoint needed.
#[no_mangle]
pub extern "C" fn rdm4_av_straddr(addr: *const c_void, buf: *mut c_char, len: *mut usize) -> i32 {
    boundary(|| {
        let (addr, len) = (required(addr)?, required(len)?);
        // SAFETY: RDM4_ADDR_LEN readable bytes at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), RDM4_ADDR_LEN) };
        let raw = RawAddr::from_bytes(bytes).ok_or(Status::Inval)?;
        let gid: Vec<String> = raw.gid.chunks(2).map(|p| format!("{:02x}{:02x}", p[0], p[1])).collect();
        let text = format!("rdm4://[{}]:{}/{:#010x}", gid.join(":"), raw.qpn(), raw.connid());
        // SAFETY: `len` is non-NULL.
        let have = unsafe { len.read() };
        if buf.is_null() || have < text.len() + 1 {
            // SAFETY: as above.
            unsafe { len.write(text.len() + 1) };
            return Err(Status::TooSmall);
        }
        // SAFETY: as above.
        unsafe { len.write(text.len() + 1) };
        // SAFETY: `buf` has `have` >= text.len() + 1 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
            buf.add(text.len()).write(0);
        }
        Ok(0)
    })
}

/// Asks the host `node` (a host name or an IP address) which endpoint's
/// udp device is bound at UDP port `service` (a decimal number), and
/// copies that endpoint's name (`RDM4_ADDR_LEN` bytes, what its
/// `rdm4_ep_getname` gives: an auto endpoint's, with its shared-memory
/// locator) into `addr`, for `rdm4_av_insert`. For programs that know only
/// where a server listens (its `RDM4_UDP_ADDR` and `RDM4_UDP_PORT`): a name
/// carries a connection id that no host and port give. The server answers
/// whatever it is doing (a call, or its progress thread while its
/// application is away). Asks again with growing pauses (20 ms, doubling up
/// to 320 ms) until `timeout_ms`, also while the port is still closed (a
/// server that is starting). `*len` holds the buffer size on entry and the
/// address length on return.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EINVAL` (NULL `node`, `service` or `len`,
/// a `service` that is no port from 1 to 65535, `timeout_ms <= 0`);
/// `RDM4_ETOOSMALL` when `addr` is NULL or `*len < RDM4_ADDR_LEN` (nothing
/// is asked; `*len` is set to `RDM4_ADDR_LEN`); `RDM4_ENOADDR` (`node`
/// names no address); `RDM4_EPEER` (nothing was bound at the port until
/// `timeout_ms`: the host refused); `RDM4_ETIMEDOUT` (no answer: no such
/// host, or the port is no rdm4 endpoint's); `RDM4_EIO` (no socket).
/// Thread safety: any thread; no endpoint needed; blocks up to `timeout_ms`.
#[no_mangle]
pub extern "C" fn rdm4_resolve(
    node: *const c_char,
    service: *const c_char,
    timeout_ms: i32,
    addr: *mut c_void,
    len: *mut usize,
) -> i32 {
    boundary(|| {
        let (node, service, len) = (required(node)?, required(service)?, required(len)?);
        // SAFETY: NUL-terminated strings, by the contract.
        let (node, service) = unsafe { (std::ffi::CStr::from_ptr(node), std::ffi::CStr::from_ptr(service)) };
        let node = node.to_str().map_err(|_| Status::Inval)?;
        let port: u16 = service.to_str().ok().and_then(|s| s.parse().ok()).filter(|&p| p != 0).ok_or(Status::Inval)?;
        if timeout_ms <= 0 {
            return Err(Status::Inval);
        }
        // SAFETY: `len` is non-NULL.
        let have = unsafe { len.read() };
        // SAFETY: as above.
        unsafe { len.write(RDM4_ADDR_LEN) };
        if addr.is_null() || have < RDM4_ADDR_LEN {
            return Err(Status::TooSmall);
        }
        let timeout = std::time::Duration::from_millis(timeout_ms as u64);
        let name = crate::device::udp::resolve(node, port, timeout)?.to_bytes();
        // SAFETY: `addr` has `have` >= RDM4_ADDR_LEN bytes.
        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), addr.cast::<u8>(), RDM4_ADDR_LEN) };
        Ok(0)
    })
}
