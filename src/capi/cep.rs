//! The endpoint behind a C handle: the engine over the device the
//! application chose. The engine is compiled once per device, so each
//! device's send and receive paths inline into it as they would with no
//! choice at all (a boxed trait object's virtual call per packet, and
//! closures that could not be inlined, cost a large part of an 8-byte
//! message: docs/performance.md, "C API handle lookup"); the choice costs
//! one branch per C call (`CEp`'s methods match once and run that device's
//! engine). With `RDM4_PCAP` set the device is wrapped in a [`Capture`],
//! behind a third variant whose calls go out of line ([`CapEp`]): the
//! engines over the bare devices stay as they were, inlined into the C
//! calls, and capture costs the endpoints without it nothing but the
//! match's third arm (see `crate::pcap`). Captured variants inlined like
//! the others would grow the C calls past what the optimiser inlines
//! (docs/performance.md, "cost of packet capture").

use std::os::fd::RawFd;

use crate::device::auto::AutoDevice;
use crate::device::away::Shared;
use crate::device::shm::ShmDevice;
use crate::device::udp::{UdpDevice, UdpStats};
use crate::device::Access;
use crate::device::Caps;
use crate::engine::{
    Addr, Config, Cqe, Endpoint, ProbeMode, Probed, RecvOpts, RemoteBuf, SendFlags, SendOpts, Stats, Traffic,
};
use crate::mem::UserBuf;
use crate::pcap::{Capture, DeviceKind, PcapFile};
use crate::status::Status;
use crate::wire::RawAddr;

/// An engine over one of the devices. Each endpoint holds one, made once
/// and never moved: the variants' sizes do not matter, an indirection
/// on every call would.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CEp {
    /// Processes of one host.
    Shm(Endpoint<ShmDevice>),
    /// Hosts on an IP network (the device shared with the responder).
    Udp(Endpoint<Shared<UdpDevice>>),
    /// Both: shm to peers of this host, udp to the rest.
    Auto(Endpoint<AutoDevice>),
    /// Either, with its packets captured (`RDM4_PCAP`).
    Captured(Box<CapEp>),
}

/// An engine over a captured device: the calls of [`CEp::Captured`]
/// (boxed there, made once: the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum CapEp {
    /// Shm, captured.
    Shm(Endpoint<Capture<ShmDevice>>),
    /// Udp, captured.
    Udp(Endpoint<Capture<Shared<UdpDevice>>>),
    /// Auto, captured (each record names the device its packet took).
    Auto(Endpoint<Capture<AutoDevice>>),
}

/// Runs `$body` with `$e` bound to the engine inside `$self`, for the bare
/// devices; `$cap` for a captured one.
macro_rules! each {
    ($self:expr, $e:ident => $body:expr, $c:ident => $cap:expr) => {
        match $self {
            CEp::Shm($e) => $body,
            CEp::Udp($e) => $body,
            CEp::Auto($e) => $body,
            CEp::Captured($c) => $cap,
        }
    };
}

/// Runs `$body` with `$e` bound to the engine inside a [`CapEp`].
macro_rules! each_cap {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            CapEp::Shm($e) => $body,
            CapEp::Udp($e) => $body,
            CapEp::Auto($e) => $body,
        }
    };
}

/// Methods with plain arguments, forwarded: `ref` ones take `&self`,
/// `mut` ones `&mut self`. Each is also a method of [`CapEp`], out of line.
macro_rules! forward {
    ($( $kind:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; )*) => {
        impl CEp {
            $( forward!(@one $kind $name ($($arg: $ty),*) $ret, always, each, c => c.$name($($arg),*)); )*
        }
        impl CapEp {
            $( forward!(@one $kind $name ($($arg: $ty),*) $ret, never, each_cap); )*
        }
    };
    (@one ref $name:ident ($($arg:ident: $ty:ty),*) $ret:ty, $inl:ident, $each:ident $(, $c:ident => $cap:expr)?) => {
        #[inline($inl)]
        pub(crate) fn $name(&self $(, $arg: $ty)*) -> $ret {
            $each!(self, e => e.$name($($arg),*) $(, $c => $cap)?)
        }
    };
    (@one mut $name:ident ($($arg:ident: $ty:ty),*) $ret:ty, $inl:ident, $each:ident $(, $c:ident => $cap:expr)?) => {
        #[inline($inl)]
        pub(crate) fn $name(&mut self $(, $arg: $ty)*) -> $ret {
            $each!(self, e => e.$name($($arg),*) $(, $c => $cap)?)
        }
    };
}

forward! {
    ref fn addr() -> RawAddr;
    ref fn stats() -> Stats;
    ref fn traffic() -> &Traffic;
    ref fn packets_in() -> u64;
    mut fn av_insert(raw: &RawAddr) -> Result<Addr, Status>;
    mut fn av_remove(addr: Addr) -> Result<(), Status>;
    ref fn av_contains(raw: &RawAddr) -> bool;
    ref fn av_lookup(addr: Addr) -> Result<RawAddr, Status>;
    mut fn mr_reg(buf: UserBuf, access: Access) -> Result<u64, Status>;
    mut fn mr_reg_fd(buf: UserBuf, fd: i32, offset: u64, access: Access) -> Result<u64, Status>;
    mut fn mr_dereg(key: u64) -> Result<(), Status>;
    mut fn mr_alloc(len: usize, access: Access) -> Result<(UserBuf, u64), Status>;
    mut fn mr_free(key: u64) -> Result<(), Status>;
    mut fn send(dest: Addr, buf: UserBuf, opts: SendOpts) -> Result<(), Status>;
    mut fn send_flagged(dest: Addr, buf: UserBuf, opts: SendOpts, flags: SendFlags) -> Result<(), Status>;
    mut fn inject_now(dest: Addr, buf: UserBuf, tag: Option<u64>, cq_data: Option<u64>) -> bool;
    mut fn recv(buf: UserBuf, opts: RecvOpts) -> Result<(), Status>;
    mut fn cancel(context: u64) -> Result<(), Status>;
    mut fn probe(opts: RecvOpts, mode: ProbeMode) -> Result<Option<Probed>, Status>;
    mut fn recv_claimed(claim: u64, buf: UserBuf, context: u64) -> Result<(), Status>;
    mut fn write(dest: Addr, buf: UserBuf, remote: RemoteBuf, cq_data: Option<u64>, context: u64) -> Result<(), Status>;
    mut fn read(dest: Addr, buf: UserBuf, remote: RemoteBuf, context: u64) -> Result<(), Status>;
    mut fn rma_in_call(dest: Addr, buf: UserBuf, remote: RemoteBuf, write: bool) -> Result<(), Status>;
    mut fn atomic_in_call(dest: Addr, datatype: u32, op: u32, bufs: (UserBuf, UserBuf, UserBuf), remote: RemoteBuf) -> Result<(), Status>;
    mut fn progress(now: u64) -> ();
    mut fn expire(now: u64) -> ();
    ref fn timers_armed() -> bool;
    ref fn next_timeout(now: u64) -> Option<u64>;
    ref fn has_queued_work() -> bool;
    mut fn sleep_begin() -> Option<(RawFd, i32)>;
    ref fn wants_responder() -> bool;
    mut fn responder_fds() -> Vec<RawFd>;
    mut fn away() -> Option<std::sync::Arc<dyn crate::device::away::AwayWork>>;
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

/// The arguments of [`Endpoint::atomic`], passed on as they are.
type AtomicArgs = (Addr, u32, u32, UserBuf, UserBuf, UserBuf, RemoteBuf, u64);

/// Runs [`Endpoint::atomic`] on `e`.
#[inline(always)]
fn atomic_on<D: crate::device::Device>(e: &mut Endpoint<D>, a: AtomicArgs) -> Result<(), Status> {
    e.atomic(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7)
}

impl CEp {
    /// The engine over `dev`, capturing to `pcap` when given.
    pub(crate) fn open_shm(dev: ShmDevice, cfg: Config, pcap: Option<PcapFile>) -> CEp {
        match pcap {
            None => CEp::Shm(Endpoint::new(dev, cfg)),
            Some(f) => CEp::Captured(Box::new(CapEp::Shm(Endpoint::new(Capture::new(dev, f, DeviceKind::Shm), cfg)))),
        }
    }

    /// [`CEp::open_shm`] for the udp device.
    pub(crate) fn open_udp(dev: UdpDevice, cfg: Config, pcap: Option<PcapFile>) -> CEp {
        let dev = Shared::new(dev);
        match pcap {
            None => CEp::Udp(Endpoint::new(dev, cfg)),
            Some(f) => CEp::Captured(Box::new(CapEp::Udp(Endpoint::new(Capture::new(dev, f, DeviceKind::Udp), cfg)))),
        }
    }

    /// [`CEp::open_shm`] for the auto device.
    pub(crate) fn open_auto(dev: AutoDevice, mut cfg: Config, pcap: Option<PcapFile>) -> CEp {
        if cfg.host_id == 0 {
            // Peers see which of them share this host (module docs of auto).
            cfg.host_id = dev.host_id().unwrap_or(0);
        }
        match pcap {
            None => CEp::Auto(Endpoint::new(dev, cfg)),
            Some(f) => CEp::Captured(Box::new(CapEp::Auto(Endpoint::new(Capture::new(dev, f, DeviceKind::Auto), cfg)))),
        }
    }

    /// The auto device under the engine, captured or not.
    fn auto(&self) -> Option<&AutoDevice> {
        match self {
            CEp::Auto(e) => Some(e.device()),
            CEp::Captured(c) => match &**c {
                CapEp::Auto(e) => Some(e.device().inner()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The name peers insert: the engine's address, but for auto (its
    /// name with the shm locator).
    pub(crate) fn name(&self) -> RawAddr {
        self.auto().map_or_else(|| self.addr(), AutoDevice::name)
    }

    /// The address by which the engine reaches the endpoint named `name`
    /// (the auto device picks shm or udp; the others take it as it is).
    pub(crate) fn reach(&mut self, name: &RawAddr) -> Result<RawAddr, Status> {
        match self {
            CEp::Auto(e) => e.device_mut().pick(name),
            CEp::Captured(c) => match &mut **c {
                CapEp::Auto(e) => e.device_mut().inner_mut().pick(name),
                _ => Ok(*name),
            },
            _ => Ok(*name),
        }
    }

    /// The devices an auto endpoint has (shm, udp); the one of the others.
    pub(crate) fn devices(&self) -> (bool, bool) {
        self.auto().map_or_else(
            || (self.device_kind() == super::RDM4_DEVICE_SHM, self.device_kind() == super::RDM4_DEVICE_UDP),
            AutoDevice::devices,
        )
    }

    /// The device's `RDM4_DEVICE_*` number.
    pub(crate) fn device_kind(&self) -> u32 {
        match self {
            CEp::Shm(_) => super::RDM4_DEVICE_SHM,
            CEp::Udp(_) => super::RDM4_DEVICE_UDP,
            CEp::Auto(_) => super::RDM4_DEVICE_AUTO,
            CEp::Captured(c) => match &**c {
                CapEp::Shm(_) => super::RDM4_DEVICE_SHM,
                CapEp::Udp(_) => super::RDM4_DEVICE_UDP,
                CapEp::Auto(_) => super::RDM4_DEVICE_AUTO,
            },
        }
    }

    /// The udp device's counters (zero for another device).
    pub(crate) fn udp_stats(&self) -> UdpStats {
        let udp = match self {
            CEp::Udp(e) => Some(e.device().with(UdpDevice::stats)),
            CEp::Captured(c) => match &**c {
                CapEp::Udp(e) => Some(e.device().inner().with(UdpDevice::stats)),
                _ => self.auto().and_then(AutoDevice::udp_stats),
            },
            _ => self.auto().and_then(AutoDevice::udp_stats),
        };
        udp.unwrap_or_default()
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
        let a = (dest, datatype, op, operand, compare, result, remote, context);
        each!(self, e => atomic_on(e, a), c => c.atomic(a))
    }
}

impl CapEp {
    /// See [`Endpoint::atomic`].
    #[inline(never)]
    fn atomic(&mut self, a: AtomicArgs) -> Result<(), Status> {
        each_cap!(self, e => atomic_on(e, a))
    }
}
