//! Two-sided messages: sends, injects, receives, probes and cancels.
//!
//! Common rules (also at the top of the header): an operation's buffers
//! belong to the library from the call until its completion is returned by
//! `rdm4_poll`; the call itself never blocks; `RDM4_EAGAIN` means too many
//! operations are outstanding — poll, then try again. Local buffers need no
//! registration. A failed call posts nothing.

use std::ffi::c_void;

use super::types::*;
use super::{addr, array, c_buf, ep_call, rdm4_ep, required, EpInner};
use crate::engine::{Addr, ProbeMode, RecvOpts, SendFlags, SendOpts, ADDR_UNSPEC};
use crate::mem::UserBuf;
use crate::status::Status;

/// The longest message `rdm4_inject` takes.
pub(crate) const INJECT_MAX: usize = 64 * 1024;

fn src_filter(a: rdm4_addr) -> Result<Option<Addr>, Status> {
    if a == RDM4_ADDR_UNSPEC {
        Ok(None)
    } else {
        addr(a).map(Some)
    }
}

fn send_common(ep: *mut rdm4_ep, buf: *const c_void, len: usize, dest: rdm4_addr, opts: SendOpts) -> i32 {
    ep_call(ep, |g| {
        let b = c_buf(buf as *mut c_void, len)?;
        g.ep.send(addr(dest)?, b, opts)?;
        Ok(0)
    })
}

/// Sends `len` bytes at `buf` to `dest` (untagged); one completion with
/// `RDM4_CQ_SEND | RDM4_CQ_MSG` follows.
///
/// Any length up to `RDM4_MSG_MAX`: eager (one packet), medium (several
/// packets, up to `rdm4_ep_attr.medium_max`) or long-CTS, chosen by length.
/// The completion's promise is stated at the top of this header.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf`
/// with `len > 0`); `RDM4_EOVERFLOW` (`len` over `RDM4_MSG_MAX`);
/// `RDM4_ENOADDR` (unknown `dest`); `RDM4_EPEER` (the peer is known to be
/// gone); `RDM4_EAGAIN`. Buffer: the library's until the completion is
/// polled. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_send(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    dest: rdm4_addr,
    context: *mut c_void,
) -> i32 {
    send_common(ep, buf, len, dest, SendOpts { tag: None, cq_data: None, context: context as u64 })
}

/// Sends a tagged message; the receiver matches `tag` (see `rdm4_trecv`).
/// Completion: `RDM4_CQ_SEND | RDM4_CQ_TAGGED`. Returns as `rdm4_send`.
#[no_mangle]
pub extern "C" fn rdm4_tsend(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    dest: rdm4_addr,
    tag: u64,
    context: *mut c_void,
) -> i32 {
    send_common(ep, buf, len, dest, SendOpts { tag: Some(tag), cq_data: None, context: context as u64 })
}

/// Sends an untagged message carrying remote CQ data: the receiver's
/// completion has `RDM4_CQ_REMOTE_CQ_DATA` and `data`. Returns as `rdm4_send`.
#[no_mangle]
pub extern "C" fn rdm4_senddata(
    ep: *mut rdm4_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: rdm4_addr,
    context: *mut c_void,
) -> i32 {
    send_common(ep, buf, len, dest, SendOpts { tag: None, cq_data: Some(data), context: context as u64 })
}

/// Sends a copy of `len` bytes at `buf`: the buffer is the caller's again
/// when the call returns, and no completion is written (a failure of the
/// transfer is not reported). At most 64 KiB. A message that fits one
/// packet goes out during the call, straight from `buf`, when nothing is
/// queued to the peer before it (the usual case); otherwise the library
/// sends a copy, in order with the peer's other messages.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf`
/// with `len > 0`, or `len` over 64 KiB); `RDM4_ENOADDR`; `RDM4_EPEER`;
/// `RDM4_EAGAIN`. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_inject(ep: *mut rdm4_ep, buf: *const c_void, len: usize, dest: rdm4_addr) -> i32 {
    inject_common(ep, buf, len, dest, None)
}

/// `rdm4_inject` of a tagged message: the receiver matches `tag` (see
/// `rdm4_trecv`). The buffer is the caller's again when the call returns;
/// no completion is written. Returns as `rdm4_inject`. Thread safety: any
/// thread.
#[no_mangle]
pub extern "C" fn rdm4_tinject(ep: *mut rdm4_ep, buf: *const c_void, len: usize, dest: rdm4_addr, tag: u64) -> i32 {
    inject_common(ep, buf, len, dest, Some(tag))
}

fn inject_common(ep: *mut rdm4_ep, buf: *const c_void, len: usize, dest: rdm4_addr, tag: Option<u64>) -> i32 {
    ep_call(ep, |g| {
        if len > INJECT_MAX {
            return Err(Status::Inval);
        }
        let src = c_buf(buf as *mut c_void, len)?;
        inject_bufs(g, addr(dest)?, &[src], tag, None)
    })
}

/// Sends a copy of `bufs` (at most `INJECT_MAX` bytes in all, checked by
/// the caller) with no completion.
fn inject_bufs(
    g: &mut EpInner,
    dest: Addr,
    bufs: &[UserBuf],
    tag: Option<u64>,
    cq_data: Option<u64>,
) -> Result<i32, Status> {
    // Straight from the caller's buffer when it goes out now: no copy
    // to keep and no completion to drop, so polls keep passing the
    // engine's completions through (`EpInner::passes_through`).
    let single = match bufs {
        [] => Some(UserBuf::empty()),
        [one] => Some(*one),
        _ => None,
    };
    if let Some(one) = single {
        if g.ep.inject_now(dest, one, tag, cq_data) {
            return Ok(0);
        }
    }
    let mut bytes = Vec::new();
    for b in bufs {
        b.with_slice(|s| bytes.extend_from_slice(s));
    }
    let (copy, ctx) = g.inject_copy(&bytes);
    if let Err(e) = g.ep.send(dest, copy, SendOpts { tag, cq_data, context: ctx }) {
        g.take_injected(ctx);
        return Err(e);
    }
    Ok(0)
}

/// The buffers of an `rdm4_msg`: one (the usual case) without a heap
/// allocation.
enum Iovs {
    One([UserBuf; 1]),
    Many(Vec<UserBuf>),
}

impl Iovs {
    fn as_slice(&self) -> &[UserBuf] {
        match self {
            Iovs::One(b) => b,
            Iovs::Many(v) => v,
        }
    }
}

/// The buffers of an `rdm4_msg`, checked.
fn msg_iovs(msg: &rdm4_msg) -> Result<Iovs, Status> {
    let iov = array(msg.iov, msg.iov_count)?;
    if msg.iov_count == 0 {
        return Ok(Iovs::Many(Vec::new()));
    }
    if msg.iov_count > 1024 {
        return Err(Status::Inval);
    }
    // SAFETY: `iov_count` iovecs at `iov` (not NULL), per the contract.
    let iovs = unsafe { std::slice::from_raw_parts(iov, msg.iov_count) };
    if let [v] = iovs {
        let b = c_buf(v.iov_base, v.iov_len)?;
        if b.len() as u64 > RDM4_MSG_MAX {
            return Err(Status::Overflow);
        }
        return Ok(Iovs::One([b]));
    }
    let bufs: Result<Vec<UserBuf>, Status> = iovs.iter().map(|v| c_buf(v.iov_base, v.iov_len)).collect();
    let bufs = bufs?;
    bufs.iter()
        .try_fold(0usize, |t, b| t.checked_add(b.len()))
        .filter(|&t| t as u64 <= RDM4_MSG_MAX)
        .ok_or(Status::Overflow)?;
    Ok(Iovs::Many(bufs))
}

fn read_msg(msg: *const rdm4_msg, flags: u64, allowed: u64) -> Result<rdm4_msg, Status> {
    let msg = required(msg)?;
    if flags & !allowed != 0 {
        return Err(Status::Inval);
    }
    // SAFETY: non-NULL, points to an rdm4_msg by the contract.
    Ok(unsafe { msg.read() })
}

/// Sends the message described by `msg` with `RDM4_MSG_*` `flags` (tagged,
/// remote CQ data, more): the concatenation of its `iov_count` buffers (at
/// most 1024). `msg` and the iovec array are only read during the call; the
/// buffers are the library's until the completion is polled (with more
/// than one buffer the library sends a copy).
///
/// `RDM4_MSG_MORE` says that the application sends again at once (as
/// libfabric's `FI_MORE`): the library may hold this message's packets and
/// put them on the wire with the next ones, in fewer system calls (the udp
/// device sends up to 64 datagrams in one). Held packets leave at the next
/// call on the endpoint that is not such a send: a send without the flag,
/// a receive, read, write or atomic, `rdm4_poll`, `rdm4_wait`,
/// `rdm4_ep_close`. So end every burst with such a call, in particular
/// before sleeping on `rdm4_ep_fd`. Devices that send at once (shm) ignore
/// the flag.
///
/// `RDM4_MSG_INJECT` makes it an inject (as `rdm4_inject`, and as
/// libfabric's `fi_tinjectdata` with the other flags): the buffers are
/// the caller's again when the call returns, no completion is written
/// (`context` is not used) and a failure of the transfer is not
/// reported; at most 64 KiB in all, and not with
/// `RDM4_MSG_DELIVERY_COMPLETE`.
///
/// `RDM4_MSG_DELIVERY_COMPLETE` (as `FI_DELIVERY_COMPLETE`): the send
/// completes once the receiver has the whole message, not once it left
/// (the protocol's DC messages and their RECEIPT); a peer without the
/// feature (a baseline or legacy one) fails it with `RDM4_ENOTSUP` rather
/// than give a weaker guarantee. `RDM4_EP_DELIVERY_COMPLETE` asks it for
/// every send of the endpoint. A receive that fails at the peer fails the
/// send with the peer's error (PEER_ERROR); towards a peer that cannot
/// report one, the send is timed (`rdm4_ep_attr.timeout_ms`).
///
/// Returns as `rdm4_send`, `RDM4_ENOTSUP` (delivery complete from a legacy
/// endpoint), and `RDM4_EINVAL` (NULL `msg`, unknown flags,
/// NULL `iov` with `iov_count` > 0, more than 1024 buffers, a NULL buffer
/// with a non-zero length; an inject of more than 64 KiB or with
/// delivery complete), `RDM4_EOVERFLOW` (total length too large).
#[no_mangle]
pub extern "C" fn rdm4_sendmsg(ep: *mut rdm4_ep, msg: *const rdm4_msg, flags: u64) -> i32 {
    ep_call(ep, |g| {
        let known =
            RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA | RDM4_MSG_MORE | RDM4_MSG_DELIVERY_COMPLETE | RDM4_MSG_INJECT;
        let m = read_msg(msg, flags, known)?;
        let iovs = msg_iovs(&m)?;
        let inject = flags & RDM4_MSG_INJECT != 0;
        if inject
            && (flags & RDM4_MSG_DELIVERY_COMPLETE != 0
                || iovs.as_slice().iter().map(|b| b.len()).sum::<usize>() > INJECT_MAX)
        {
            return Err(Status::Inval);
        }
        let dest = addr(m.addr)?;
        if inject {
            let tag = (flags & RDM4_MSG_TAGGED != 0).then_some(m.tag);
            let cq_data = (flags & RDM4_MSG_REMOTE_CQ_DATA != 0).then_some(m.data);
            return inject_bufs(g, dest, iovs.as_slice(), tag, cq_data);
        }
        let mut opts = SendOpts {
            tag: (flags & RDM4_MSG_TAGGED != 0).then_some(m.tag),
            cq_data: (flags & RDM4_MSG_REMOTE_CQ_DATA != 0).then_some(m.data),
            context: m.context as u64,
        };
        let sf = SendFlags { more: flags & RDM4_MSG_MORE != 0, dc: flags & RDM4_MSG_DELIVERY_COMPLETE != 0 };
        match iovs.as_slice() {
            [] => g.ep.send_flagged(dest, UserBuf::empty(), opts, sf)?,
            [one] => g.ep.send_flagged(dest, *one, opts, sf)?,
            many => {
                // Several buffers: gathered into one library-owned copy.
                let (buf, ctx) = g.bounce_gather(many, opts.context);
                opts.context = ctx;
                if let Err(e) = g.ep.send_flagged(dest, buf, opts, sf) {
                    g.drop_bounce(ctx);
                    return Err(e);
                }
            }
        }
        Ok(0)
    })
}

/// `tagged`: match `tag` under `ignore`. The tag pair comes as two words,
/// not an `Option` of a pair: that is passed through memory and read back
/// with one 16-byte load from the caller's two 8-byte stores, which the CPU
/// cannot forward (a stall on every receive posted: docs/performance.md,
/// "Eager fast path and inject").
#[allow(clippy::too_many_arguments)]
fn recv_common(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    src: rdm4_addr,
    tagged: bool,
    tag: u64,
    ignore: u64,
    ctx: u64,
) -> i32 {
    ep_call(ep, |g| {
        let b = c_buf(buf, len)?;
        let tag = tagged.then_some((tag, ignore));
        g.ep.recv(b, RecvOpts { tag, src: src_filter(src)?, context: ctx })?;
        Ok(0)
    })
}

/// Posts a receive of an untagged message from `src` (`RDM4_ADDR_UNSPEC`:
/// any source) into `len` bytes at `buf`. Messages match receives in the
/// order both were posted/sent. A longer message fills the buffer and
/// completes with `RDM4_ETRUNC` (`olen` = its length); nothing is written
/// past the buffer.
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf` with
/// `len > 0`); `RDM4_ENOADDR` (unknown `src`); `RDM4_EAGAIN`. Buffer: the
/// library's until the completion is polled. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_recv(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    src: rdm4_addr,
    context: *mut c_void,
) -> i32 {
    recv_common(ep, buf, len, src, false, 0, 0, context as u64)
}

/// Posts a tagged receive: it takes the first message whose tag equals
/// `tag` in every bit not set in `ignore`. Returns as `rdm4_recv`.
#[no_mangle]
pub extern "C" fn rdm4_trecv(
    ep: *mut rdm4_ep,
    buf: *mut c_void,
    len: usize,
    src: rdm4_addr,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> i32 {
    recv_common(ep, buf, len, src, true, tag, ignore, context as u64)
}

/// Posts the receive described by `msg` (`addr` is the source filter;
/// `RDM4_MSG_TAGGED` uses `tag` and `ignore`): the message fills the
/// buffers in order. With more than one buffer the completion's `buf` is
/// NULL. Returns as `rdm4_recv`, and `RDM4_EINVAL` / `RDM4_EOVERFLOW` as
/// `rdm4_sendmsg`.
#[no_mangle]
pub extern "C" fn rdm4_recvmsg(ep: *mut rdm4_ep, msg: *const rdm4_msg, flags: u64) -> i32 {
    ep_call(ep, |g| {
        let m = read_msg(msg, flags, RDM4_MSG_TAGGED)?;
        let iovs = msg_iovs(&m)?;
        let tag = (flags & RDM4_MSG_TAGGED != 0).then_some((m.tag, m.ignore));
        let src = src_filter(m.addr)?;
        match iovs.as_slice() {
            [] => g.ep.recv(UserBuf::empty(), RecvOpts { tag, src, context: m.context as u64 })?,
            [one] => g.ep.recv(*one, RecvOpts { tag, src, context: m.context as u64 })?,
            many => {
                // Several buffers: received into one copy, scattered on completion.
                let (buf, ctx) = g.bounce_scatter(many, m.context as u64);
                if let Err(e) = g.ep.recv(buf, RecvOpts { tag, src, context: ctx }) {
                    g.drop_bounce(ctx);
                    return Err(e);
                }
            }
        }
        Ok(0)
    })
}

/// Looks for a message that has arrived (whole or in part) without a
/// receive and that a receive from `src` (`RDM4_ADDR_UNSPEC`: any) would
/// take: with `RDM4_MSG_TAGGED` in `flags` a tagged one whose tag equals
/// `tag` in every bit not set in `ignore`, else an untagged one; the oldest
/// such. It makes progress first, so that a loop of probes advances.
/// What it does with the message, by `flags`:
/// - neither flag below: nothing; a later receive takes it (as
///   `MPI_Iprobe`);
/// - `RDM4_PROBE_CLAIM`: no receive matches it any more;
///   `rdm4_recv_claimed` with the same `context` takes it (as
///   `MPI_Improbe` and `MPI_Mrecv`);
/// - `RDM4_PROBE_DISCARD`: it is dropped, and its sender's send completes
///   as usual.
///
/// `*entry` is filled as the message's receive completion would be
/// (`flags` `RDM4_CQ_RECV`, `RDM4_CQ_TAGGED` or `RDM4_CQ_MSG`,
/// `RDM4_CQ_REMOTE_CQ_DATA` with `data`; `len` its whole length; `tag`,
/// `src`), with `context`, `buf` NULL and status `RDM4_SUCCESS`; it is
/// only written to when a message is found.
///
/// Returns 1 (found), 0 (none waits); `RDM4_EBADHANDLE`; `RDM4_EINVAL`
/// (NULL `entry`, unknown flags, both `RDM4_PROBE_CLAIM` and
/// `RDM4_PROBE_DISCARD`, or a claim with a `context` that holds a claimed
/// message already); `RDM4_ENOADDR` (unknown `src`). Thread safety: any
/// thread.
#[no_mangle]
pub extern "C" fn rdm4_probe(
    ep: *mut rdm4_ep,
    src: rdm4_addr,
    tag: u64,
    ignore: u64,
    flags: u64,
    context: *mut c_void,
    entry: *mut rdm4_cqe,
) -> i32 {
    ep_call(ep, |g| {
        let entry = required(entry)?;
        let known = RDM4_MSG_TAGGED | RDM4_PROBE_CLAIM | RDM4_PROBE_DISCARD;
        let both = RDM4_PROBE_CLAIM | RDM4_PROBE_DISCARD;
        if flags & !known != 0 || flags & both == both {
            return Err(Status::Inval);
        }
        let mode = if flags & RDM4_PROBE_CLAIM != 0 {
            ProbeMode::Claim
        } else if flags & RDM4_PROBE_DISCARD != 0 {
            ProbeMode::Discard
        } else {
            ProbeMode::Peek
        };
        let src = src_filter(src)?;
        let tagged = flags & RDM4_MSG_TAGGED != 0;
        g.progress_once();
        let opts = RecvOpts { tag: tagged.then_some((tag, ignore)), src, context: context as u64 };
        let Some(p) = g.ep.probe(opts, mode)? else { return Ok(0) };
        let mut cq_flags = RDM4_CQ_RECV | if p.tagged { RDM4_CQ_TAGGED } else { RDM4_CQ_MSG };
        if p.cq_data.is_some() {
            cq_flags |= RDM4_CQ_REMOTE_CQ_DATA;
        }
        let e = rdm4_cqe {
            context,
            flags: cq_flags,
            len: p.len,
            buf: std::ptr::null_mut(),
            data: p.cq_data.unwrap_or(0),
            tag: p.tag,
            src: if p.src == ADDR_UNSPEC { RDM4_ADDR_UNSPEC } else { u64::from(p.src) },
            status: 0,
            detail: 0,
            olen: 0,
            reserved: [0; 2],
        };
        // SAFETY: non-null, and the caller's entry to write.
        unsafe { entry.write(e) };
        Ok(1)
    })
}

/// Receives the message that `rdm4_probe` with `RDM4_PROBE_CLAIM` claimed
/// with `context` into `len` bytes at `buf`: it completes as a receive
/// with that context (`RDM4_ETRUNC` when longer than `len`).
///
/// Returns `RDM4_SUCCESS`; `RDM4_EBADHANDLE`; `RDM4_EINVAL` (NULL `buf`
/// with `len > 0`); `RDM4_ENOENT` (no message is claimed with `context`:
/// it was received already, or its sender was lost). Buffer: the
/// library's until the completion is polled. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_recv_claimed(ep: *mut rdm4_ep, context: *mut c_void, buf: *mut c_void, len: usize) -> i32 {
    ep_call(ep, |g| {
        let b = c_buf(buf, len)?;
        g.ep.recv_claimed(context as u64, b, context as u64)?;
        Ok(0)
    })
}

/// Cancels the posted receive (any kind: `rdm4_recv`, `rdm4_trecv`,
/// `rdm4_recvmsg`) whose `context` is given, if no message has begun to
/// fill it: it completes with `RDM4_ECANCELED` (`len` 0) at a later
/// `rdm4_poll`, and its buffers are the caller's again once that completion
/// is polled. When several wait with the same context, the oldest goes.
/// Receives that accept one source are also canceled when that address is
/// removed (`rdm4_av_remove`).
///
/// With no such receive, it cancels the send, write, read or atomic with
/// `context` that has not started: one that waits for its peer's first
/// answer (the peer's features decide its protocol), or is queued with
/// none of its packets handed to the device yet. It completes with
/// `RDM4_ECANCELED` and nothing of it reaches the peer; a message's place
/// in the peer's message order is given up with a PEER_ERROR the peer
/// skips it by. An operation under way is not canceled (it completes as
/// usual), nor is a message or atomic queued for a peer that cannot be
/// told to skip it (a peer without the PEER_ERROR feature). Injected sends
/// have no context and cannot be canceled.
///
/// Returns `RDM4_SUCCESS`; `RDM4_ENOENT` (no such receive or operation
/// waits: it matched, completed or was canceled, or never was);
/// `RDM4_EBUSY` (the operation has started, or its peer cannot skip it);
/// `RDM4_EBADHANDLE`. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_cancel(ep: *mut rdm4_ep, context: *mut c_void) -> i32 {
    ep_call(ep, |g| {
        let user = context as u64;
        match g.ep.cancel(user) {
            Err(Status::NoEnt) => {
                // A receive of several buffers waits under its copy's context.
                let inner = g.bounces.iter().find(|(_, b)| b.user_context == user && !b.scatter.is_empty());
                let inner = inner.map(|(&k, _)| k).ok_or(Status::NoEnt)?;
                g.ep.cancel(inner)?;
            }
            r => r?,
        }
        Ok(0)
    })
}
