//! The endpoint behind a C handle: the engine over the device the
//! application chose. The engine is compiled once per device, so each
//! device's send and receive paths inline into it as they would with no
//! choice at all (a boxed trait object's virtual call per packet, and
//! closures that could not be inlined, cost ~15% of an 8-byte message); the
//! choice costs one branch per C call (`CEp`'s methods match once and run
//! that device's engine).

use std::os::fd::RawFd;

use crate::device::shm::ShmDevice;
use crate::device::udp::UdpDevice;
use crate::device::Access;
use crate::device::Caps;
use crate::engine::{Addr, Config, Cqe, Endpoint, ProbeMode, Probed, RecvOpts, RemoteBuf, SendFlags, SendOpts, Stats};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

/// An engine over one of the devices. Each endpoint holds one, made once
/// and never moved: the variants' sizes do not matter, an indirection
/// on every call would.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CEp {
    /// Processes of one host.
    Shm(Endpoint<ShmDevice>),
    /// Hosts on an IP network.
    Udp(Endpoint<UdpDevice>),
}

/// Runs `$body` with `$e` bound to the engine inside `$self`.
macro_rules! each {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            CEp::Shm($e) => $body,
            CEp::Udp($e) => $body,
        }
    };
}

/// Methods with plain arguments, forwarded: `ref` ones take `&self`,
/// `mut` ones `&mut self`.
macro_rules! forward {
    ($( $kind:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; )*) => {
        $( forward!(@one $kind $name ($($arg: $ty),*) $ret); )*
    };
    (@one ref $name:ident ($($arg:ident: $ty:ty),*) $ret:ty) => {
        #[inline(always)]
        pub(crate) fn $name(&self $(, $arg: $ty)*) -> $ret {
            each!(self, e => e.$name($($arg),*))
        }
    };
    (@one mut $name:ident ($($arg:ident: $ty:ty),*) $ret:ty) => {
        #[inline(always)]
        pub(crate) fn $name(&mut self $(, $arg: $ty)*) -> $ret {
            each!(self, e => e.$name($($arg),*))
        }
    };
}

impl CEp {
    forward! {
        ref fn addr() -> RawAddr;
        ref fn stats() -> Stats;
        mut fn av_insert(raw: &RawAddr) -> Result<Addr, Status>;
        mut fn av_remove(addr: Addr) -> Result<(), Status>;
        ref fn av_contains(raw: &RawAddr) -> bool;
        ref fn av_lookup(addr: Addr) -> Result<RawAddr, Status>;
        mut fn mr_reg(buf: UserBuf, access: Access) -> Result<u64, Status>;
        mut fn mr_dereg(key: u64) -> Result<(), Status>;
        mut fn send(dest: Addr, buf: UserBuf, opts: SendOpts) -> Result<(), Status>;
        mut fn send_flagged(dest: Addr, buf: UserBuf, opts: SendOpts, flags: SendFlags) -> Result<(), Status>;
        mut fn inject_now(dest: Addr, buf: UserBuf, tag: Option<u64>) -> bool;
        mut fn recv(buf: UserBuf, opts: RecvOpts) -> Result<(), Status>;
        mut fn cancel(context: u64) -> Result<(), Status>;
        mut fn probe(opts: RecvOpts, mode: ProbeMode) -> Result<Option<Probed>, Status>;
        mut fn recv_claimed(claim: u64, buf: UserBuf, context: u64) -> Result<(), Status>;
        mut fn write(dest: Addr, buf: UserBuf, remote: RemoteBuf, cq_data: Option<u64>, context: u64) -> Result<(), Status>;
        mut fn read(dest: Addr, buf: UserBuf, remote: RemoteBuf, context: u64) -> Result<(), Status>;
        mut fn progress(now: u64) -> ();
        mut fn expire(now: u64) -> ();
        ref fn timers_armed() -> bool;
        ref fn next_timeout(now: u64) -> Option<u64>;
        ref fn has_queued_work() -> bool;
        mut fn sleep_begin() -> Option<(RawFd, i32)>;
        mut fn sleep_end() -> ();
        ref fn wake_sleeper() -> ();
        mut fn wait_fd() -> Option<RawFd>;
        mut fn trywait() -> bool;
        ref fn config() -> &Config;
        ref fn caps() -> Caps;
        ref fn eager_max(tagged: bool) -> usize;
        mut fn poll_cq(out: &mut Vec<Cqe>, max: usize) -> usize;
        ref fn cq_len() -> usize;
    }

    /// See [`Endpoint::atomic`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn atomic(
        &mut self,
        dest: Addr,
        datatype: u32,
        op: u32,
        operand: UserBuf,
        compare: UserBuf,
        result: UserBuf,
        remote: RemoteBuf,
        context: u64,
    ) -> Result<(), Status> {
        each!(self, e => e.atomic(dest, datatype, op, operand, compare, result, remote, context))
    }

    /// See [`Endpoint::drain_cq`].
    #[inline(always)]
    pub(crate) fn drain_cq(&mut self, max: usize, f: impl FnMut(usize, &Cqe)) -> usize {
        each!(self, e => e.drain_cq(max, f))
    }
}
