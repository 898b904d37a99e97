//! The auto device: shm and udp behind one endpoint. Peers of this host go
//! by shared memory (its single-copy RDMA, mapped allocations and CPU
//! atomics), all others by udp; the engine above sees one device, one
//! address vector and one set of completions. See docs/architecture.md.
//!
//! - **Name.** 32 bytes, a raw address as every device's (spec table 1.5),
//!   so that names keep one length whatever the device (MPI libraries
//!   exchange names in fixed slots, at most 64 bytes): the udp address,
//!   with a shm locator in its reserved trailing 8 bytes: a 48-bit hash of
//!   the host's boot ID, then the shm endpoint number (16 bits). The
//!   devices share the connid, so the locator and the udp address give
//!   the whole shm address on the same host. Without udp the name is the
//!   shm address; without shm, the udp address (reserved bytes zero).
//!   Names of shm and udp endpoints are inserted as they are.
//! - **Same host.** A peer is reached by shm when its name is a shm address
//!   of this host's boot ID, or carries the locator of this host, and its
//!   segment opens here ([`AutoDevice::pick`]); else by udp. Processes of
//!   one boot share memory: two containers that share `/dev/shm` share the
//!   boot ID and open each other's segments, and go by shm whatever their
//!   networks; two that do not share `/dev/shm` fail to open the segment
//!   and go by udp. The segment confirms the peer itself, not only its
//!   host: it must hold the name's connid (32 random bits), so an endpoint
//!   number that another container's `/dev/shm` gives to another process
//!   is never taken for the peer. The HANDSHAKE's `host_id` is the boot-ID
//!   hash too: a peer's `host_id` equal to this endpoint's means one
//!   kernel (one machine, or containers of it), and with a segment that
//!   opened, one `/dev/shm`; a capture shows which peers share a host.
//!   The choice is made when the name is inserted (the first packet must
//!   go somewhere) and kept: a HANDSHAKE never moves a peer between
//!   devices, which would reorder its messages.
//! - **Address handles.** A udp peer's handle has bit 31 set ([`UDP`]);
//!   the engine never looks inside handles.
//! - **On the wire** nothing changes: each device frames its packets as it
//!   does alone, and the raw address a REQ carries is the one of the
//!   device it goes by ([`Device::local_addr_for`]): a peer learns a
//!   sender from it as it would without auto.
//! - **One connid** for both devices (shm's; udp takes it): the engine's
//!   packets carry one whichever device they take.
//! - **Registrations** have one key on both devices (shm chooses it, udp
//!   takes it: [`UdpDevice::reg_as`]): a key a peer got works whichever
//!   device its accesses take.
//! - **Capabilities** differ per peer ([`Device::peer_caps`]): shm sends
//!   complete at once, udp's when acknowledged; long-read only by shm;
//!   each peer its device's packet size. The endpoint's own `Caps::mtu`
//!   (what it reports, and its bound for a peer not yet placed) is the
//!   smaller of the two.
//! - **A device that cannot open** (no room in `/dev/shm`, no usable IP
//!   address) leaves the endpoint working with the other;
//!   [`AutoDevice::devices`] says which it has.

mod ext;

use std::time::{Duration, Instant};

use crate::device::away::Shared;
use crate::device::shm::{ShmConfig, ShmDevice};
use crate::device::udp::{UdpConfig, UdpDevice, UdpStats};
use crate::device::{Access, Ah, Caps, DevError, DevEvent, Device, Flow, Sent};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

/// The bit of a udp peer's address handle.
pub const UDP: Ah = 1 << 31;

/// The locator of shm endpoint `epid` on the host of boot ID `gid` (the
/// name's reserved bytes).
fn locator(gid: &[u8; 16], epid: u16) -> u64 {
    (host_hash(gid) << 16) | u64::from(epid)
}

/// A 48-bit hash of a boot ID (FNV-1a, never 0).
pub fn host_hash(gid: &[u8; 16]) -> u64 {
    let h = gid.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (h >> 16).max(1)
}

/// What to open: each device's settings, `None` for one not wanted.
#[derive(Debug, Clone, Default)]
pub struct AutoConfig {
    pub shm: Option<ShmConfig>,
    pub udp: Option<UdpConfig>,
}

impl AutoConfig {
    /// Both devices, with the settings of the environment.
    pub fn from_env() -> Result<AutoConfig, Status> {
        Ok(AutoConfig { shm: Some(ShmConfig::from_env()?), udp: Some(UdpConfig::from_env()?) })
    }
}

/// Shm and udp behind one endpoint (module docs).
pub struct AutoDevice {
    shm: Option<ShmDevice>,
    /// Shared with the C API's responder thread, which does udp's work
    /// while the application leaves udp alone ([`Shared`]): it computes,
    /// or talks only to peers of this host.
    udp: Option<Shared<UdpDevice>>,
    caps: Caps,
    sleep: ext::SleepSet,
    /// Receives that left an idle udp alone since the clock was last read.
    skipped: u32,
    /// Polls of udp in a row that found nothing.
    udp_idle: u32,
    /// When an idle udp was last polled.
    udp_last: Instant,
    /// The next receive polls udp (its idle period is over, or the
    /// endpoint slept).
    udp_pending: bool,
    /// `recv` polled udp since the last `events`.
    udp_polled: bool,
    /// Something went to udp since the last doorbell: only then does the
    /// doorbell flush udp (the engine rings after every send, shm's too).
    udp_rung: bool,
}

/// After this many udp polls in a row without a packet, udp counts as
/// idle and is polled once per [`UDP_IDLE_PERIOD`] only: a udp poll is a
/// system call, which a process whose traffic is local would otherwise pay
/// on each of its polls (its latency is a fraction of one). While udp
/// brings packets it is polled on every receive.
const UDP_IDLE: u32 = 1024;

/// How long an idle udp is left unpolled while the application polls: the
/// most its first packet after a quiet spell waits (a sleep on the
/// endpoint's descriptor ends it at once).
const UDP_IDLE_PERIOD: Duration = Duration::from_micros(100);

/// Receives between two readings of the clock while udp is idle (one
/// reading costs about what a receive that finds nothing does).
const UDP_CLOCK_EVERY: u32 = 16;

/// Which device a handle names, and the device's own handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Shm(Ah),
    Udp(Ah),
}

fn via(ah: Ah) -> Via {
    if ah & UDP != 0 {
        Via::Udp(ah & !UDP)
    } else {
        Via::Shm(ah)
    }
}

/// The engine's handle of a device's handle.
fn shm_ah(ah: Ah) -> Ah {
    ah
}

fn udp_ah(ah: Ah) -> Ah {
    ah | UDP
}

/// Runs `$e` on the device `$ah` names, with `$d` the device and `$a` its
/// handle; an error when that device is not open.
macro_rules! on {
    ($self:expr, $ah:expr, $d:ident, $a:ident => $e:expr) => {
        match via($ah) {
            Via::Shm($a) => match $self.shm.as_mut() {
                Some($d) => $e,
                None => Err(DevError::Failed(Status::NoAddr)),
            },
            Via::Udp($a) => match $self.udp.as_mut() {
                Some($d) => $e,
                None => Err(DevError::Failed(Status::NoAddr)),
            },
        }
    };
}

impl AutoDevice {
    /// Opens both devices with the settings of the environment.
    pub fn open() -> Result<AutoDevice, Status> {
        AutoDevice::open_with(AutoConfig::from_env()?)
    }

    /// Opens the devices `cfg` asks for; one that fails to open is left
    /// out (logged). `NoAddr` when neither opens.
    pub fn open_with(cfg: AutoConfig) -> Result<AutoDevice, Status> {
        let shm = cfg.shm.map(ShmDevice::open_with).and_then(|r| {
            r.inspect_err(|e| crate::log::log!(crate::log::WARN, "auto: shm did not open ({e:?}): udp only")).ok()
        });
        let udp = cfg.udp.map(UdpDevice::open_with).and_then(|r| {
            r.inspect_err(|e| crate::log::log!(crate::log::WARN, "auto: udp did not open ({e:?}): shm only")).ok()
        });
        if shm.is_none() && udp.is_none() {
            return Err(Status::NoAddr);
        }
        // One connid: packets carry it whichever device they take.
        let mut udp = udp;
        if let (Some(s), Some(u)) = (&shm, udp.as_mut()) {
            u.take_connid(s.local_addr().connid());
        }
        let caps = merged(shm.as_ref().map(Device::caps), udp.as_ref().map(Device::caps));
        let udp = udp.map(Shared::new);
        let mut dev = AutoDevice {
            shm,
            udp,
            caps,
            sleep: ext::SleepSet::default(),
            skipped: 0,
            udp_idle: 0,
            udp_last: Instant::now(),
            udp_pending: false,
            udp_polled: false,
            udp_rung: false,
        };
        // A WHO (`rdm4_resolve`) is answered with the whole name.
        let name = dev.name();
        if let Some(u) = dev.udp.as_mut() {
            u.with_mut(|u| u.set_public_name(name));
        }
        Ok(dev)
    }

    /// The devices it has: (shm, udp).
    pub fn devices(&self) -> (bool, bool) {
        (self.shm.is_some(), self.udp.is_some())
    }

    /// Its name (module docs).
    pub fn name(&self) -> RawAddr {
        match (&self.shm, &self.udp) {
            (Some(s), Some(u)) => {
                let sa = s.local_addr();
                u.local_addr().with_reserved(locator(&sa.gid, sa.qpn()))
            }
            (Some(s), None) => s.local_addr(),
            (None, Some(u)) => u.local_addr(),
            (None, None) => unreachable!("an auto device has one device at least"),
        }
    }

    /// The raw address of peer `name` (an auto, shm or udp endpoint's)
    /// that this endpoint reaches it by: a shm address when the peer is on
    /// this host and its segment opens here, else its udp address. `NoAddr`
    /// when neither device reaches it.
    pub fn pick(&mut self, name: &RawAddr) -> Result<RawAddr, Status> {
        let own = self.shm.as_ref().map(|s| s.local_addr().gid);
        if let (Some(shm), Some(own)) = (self.shm.as_mut(), own) {
            let r = name.reserved();
            let local = if name.gid == own {
                Some(*name)
            } else {
                (r != 0 && r >> 16 == host_hash(&own)).then(|| RawAddr::new(own, r as u16, name.connid()))
            };
            if let Some(raw) = local.filter(|raw| shm.insert(raw).is_ok()) {
                return Ok(raw);
            }
        }
        // A shm address of this host whose segment did not open holds no
        // udp address.
        if self.udp.is_none() || (name.reserved() == 0 && Some(name.gid) == own) {
            return Err(Status::NoAddr);
        }
        Ok(name.with_reserved(0))
    }

    /// The hash of this host's boot ID (the HANDSHAKE's `host_id`), when
    /// shm is open.
    pub fn host_id(&self) -> Option<u64> {
        self.shm.as_ref().map(|s| host_hash(&s.local_addr().gid))
    }

    /// Something goes to the peer of `ah`: for a udp peer, the doorbell
    /// flushes udp, and udp counts as busy again (its acknowledgements and
    /// answers come soon: polled on every receive until it has been
    /// [`UDP_IDLE`] polls without a packet).
    #[inline(always)]
    fn going(&mut self, ah: Ah) {
        if ah & UDP != 0 {
            self.udp_rung = true;
            self.udp_idle = 0;
        }
    }

    /// Whether this receive polls udp: while it is busy, else once per
    /// [`UDP_IDLE_PERIOD`] (the clock read once in [`UDP_CLOCK_EVERY`]).
    #[inline(always)]
    fn udp_due(&mut self) -> bool {
        if self.udp_idle < UDP_IDLE || self.udp_pending {
            return true;
        }
        self.skipped = self.skipped.wrapping_add(1);
        self.skipped % UDP_CLOCK_EVERY == 0 && self.idle_period_over()
    }

    #[cold]
    #[inline(never)]
    fn idle_period_over(&mut self) -> bool {
        let now = Instant::now();
        self.udp_pending = now.duration_since(self.udp_last) >= UDP_IDLE_PERIOD;
        self.udp_pending
    }

    /// The udp device's counters, if it is open.
    pub fn udp_stats(&self) -> Option<UdpStats> {
        self.udp.as_ref().map(|u| u.with(UdpDevice::stats))
    }
}

/// The engine's view of both devices: the smaller packet, RDMA where either
/// has it (each peer's own in [`Device::peer_caps`]).
fn merged(shm: Option<Caps>, udp: Option<Caps>) -> Caps {
    match (shm, udp) {
        (Some(s), None) => s,
        (None, Some(u)) => u,
        (Some(s), Some(u)) => Caps {
            mtu: s.mtu.min(u.mtu),
            max_rdma_size: s.max_rdma_size.max(u.max_rdma_size),
            rdma_read: s.rdma_read || u.rdma_read,
            rdma_write: s.rdma_write || u.rdma_write,
            rdma_write_imm: s.rdma_write_imm || u.rdma_write_imm,
            sync_send: s.sync_send && u.sync_send,
            gather_in_place: s.gather_in_place && u.gather_in_place,
            longread_min: s.longread_min.min(u.longread_min),
            runt: s.runt && u.runt,
        },
        (None, None) => unreachable!("an auto device has one device at least"),
    }
}

impl Device for AutoDevice {
    type Sleep = Self;
    type Responder = Self;
    type MoreFollows = Self;
    type Doorbell = Self;
    type Mapped = Self;
    type InCall = Self;

    fn caps(&self) -> Caps {
        self.caps
    }

    fn peer_caps(&self, ah: Ah) -> Caps {
        let own = match via(ah) {
            Via::Shm(a) => self.shm.as_ref().map(|s| s.peer_caps(a)),
            Via::Udp(_) => self.udp.as_ref().map(Device::caps),
        };
        own.unwrap_or(self.caps)
    }

    fn caps_epoch(&self) -> u32 {
        self.shm.as_ref().map_or(0, Device::caps_epoch)
    }

    fn local_addr(&self) -> RawAddr {
        match (&self.udp, &self.shm) {
            (Some(u), _) => u.local_addr(),
            (None, Some(s)) => s.local_addr(),
            (None, None) => unreachable!("an auto device has one device at least"),
        }
    }

    fn local_addr_for(&self, ah: Ah) -> RawAddr {
        match (via(ah), &self.shm) {
            (Via::Shm(_), Some(s)) => s.local_addr(),
            _ => self.local_addr(),
        }
    }

    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status> {
        if let Some(shm) = self.shm.as_mut() {
            if addr.gid == shm.local_addr().gid {
                return shm.insert(addr).map(shm_ah);
            }
        }
        self.udp.as_mut().ok_or(Status::NoAddr)?.insert(addr).map(udp_ah)
    }

    fn remove(&mut self, ah: Ah) {
        let _ = on!(self, ah, d, a => {
            d.remove(a);
            Ok(())
        });
    }

    #[inline(always)]
    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        match via(ah) {
            Via::Shm(a) => match self.shm.as_mut() {
                Some(d) => d.send_with_inline(a, wr_id, max_len, build),
                None => Err(DevError::Failed(Status::NoAddr)),
            },
            Via::Udp(a) => {
                self.going(ah);
                // By reference: one direct call of `build` (shm's) is left.
                let mut build = build;
                let build: &mut dyn FnMut(&mut [u8]) -> usize = &mut build;
                match self.udp.as_mut() {
                    Some(d) => d.send_with(a, wr_id, max_len, build),
                    None => Err(DevError::Failed(Status::NoAddr)),
                }
            }
        }
    }

    fn send_gather(
        &mut self,
        ah: Ah,
        wr_id: u64,
        hdr_max: usize,
        build: impl FnMut(&mut [u8]) -> usize,
        payload: UserBuf,
    ) -> Result<Sent, DevError> {
        self.going(ah);
        on!(self, ah, d, a => d.send_gather(a, wr_id, hdr_max, build, payload))
    }

    fn control_next(&mut self) {
        if let Some(s) = self.shm.as_mut() {
            s.control_next();
        }
        if let Some(u) = self.udp.as_mut() {
            u.control_next();
        }
    }

    #[inline(always)]
    fn recv<R: Flow>(&mut self, max: usize, mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        let mut n = 0;
        if let Some(s) = self.shm.as_mut() {
            n = s.recv(max, |ah, p, g| f(ah.map(shm_ah), p, g));
        }
        // While udp is busy, else once per `UDP_IDLE_PERIOD`.
        if self.udp.is_some() && n < max && self.udp_due() {
            if let Some(u) = self.udp.as_mut() {
                let m = u.recv(max - n, |ah, p, g| f(ah.map(udp_ah), p, g));
                self.udp_idle = if m > 0 { 0 } else { self.udp_idle.saturating_add(1) };
                if self.udp_idle >= UDP_IDLE {
                    self.udp_last = Instant::now();
                }
                self.udp_pending = false;
                self.udp_polled = true;
                n += m;
            }
        }
        n
    }

    fn redeliver(&mut self) {
        if let Some(s) = self.shm.as_mut() {
            s.redeliver();
        }
        if let Some(u) = self.udp.as_mut() {
            u.redeliver();
        }
    }

    fn events(&mut self, out: &mut Vec<DevEvent>) {
        if let Some(s) = self.shm.as_mut() {
            s.events(out);
        }
        let from = out.len();
        // Udp's events (and its timers, which `recv` ran if it polled it)
        // as often as `recv` polls it.
        let due = std::mem::take(&mut self.udp_polled);
        if let Some(u) = self.udp.as_mut().filter(|_| due) {
            u.events(out);
        }
        for e in &mut out[from..] {
            match e {
                DevEvent::SendDone { ah, .. } | DevEvent::PeerLost { ah } => *ah = udp_ah(*ah),
                DevEvent::WriteImm { ah, .. } => *ah = ah.map(udp_ah),
                DevEvent::Awaiting => {}
            }
        }
    }

    fn awaiting(&mut self, ah: Ah) {
        let _ = on!(self, ah, d, a => {
            d.awaiting(a);
            Ok(())
        });
    }

    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        match (self.shm.as_mut(), self.udp.as_mut()) {
            (Some(s), udp) => {
                let key = s.reg(buf, access)?;
                if let Some(u) = udp {
                    if let Err(e) = u.with_mut(|u| u.reg_as(buf, access, key)) {
                        let _ = s.dereg(key);
                        return Err(e);
                    }
                }
                Ok(key)
            }
            (None, Some(u)) => u.reg(buf, access),
            (None, None) => Err(Status::NoAddr),
        }
    }

    fn dereg(&mut self, key: u64) -> Result<(), Status> {
        let s = self.shm.as_mut().map(|s| s.dereg(key));
        let u = self.udp.as_mut().map(|u| u.dereg(key));
        match (s, u) {
            (Some(Ok(())), _) | (None, Some(Ok(()))) => Ok(()),
            (Some(Err(e)), _) | (None, Some(Err(e))) => Err(e),
            (None, None) => Err(Status::Inval),
        }
    }

    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.going(ah);
        on!(self, ah, d, a => d.rdma_read(a, local, remote_addr, key, wr_id))
    }

    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.going(ah);
        on!(self, ah, d, a => d.rdma_write(a, local, remote_addr, key, wr_id))
    }

    fn rdma_write_imm(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        imm: u32,
        wr_id: u64,
    ) -> Result<(), DevError> {
        self.going(ah);
        on!(self, ah, d, a => d.rdma_write_imm(a, local, remote_addr, key, imm, wr_id))
    }

    fn as_sleep(&mut self) -> Option<&mut Self> {
        Some(self)
    }

    fn as_sleeper(&self) -> Option<&Self> {
        Some(self)
    }

    fn as_responder(&mut self) -> Option<&mut Self> {
        self.udp.is_some().then_some(self)
    }

    fn as_more_follows(&mut self) -> Option<&mut Self> {
        self.shm.is_some().then_some(self)
    }

    fn as_doorbell(&mut self) -> Option<&mut Self> {
        self.udp.is_some().then_some(self)
    }

    fn as_mapped(&mut self) -> Option<&mut Self> {
        self.shm.is_some().then_some(self)
    }

    #[inline(always)]
    fn as_in_call(&mut self) -> Option<&mut Self> {
        self.shm.is_some().then_some(self)
    }

    fn as_in_call_ref(&self) -> Option<&Self> {
        self.shm.is_some().then_some(self)
    }
}
