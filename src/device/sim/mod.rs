//! The sim device: any number of endpoints in one process, on virtual time,
//! with seeded, reproducible reordering, delay, back-pressure and peer loss
//! (DESIGN §2.3). Every packet put on the wire is logged for tests.
//!
//! Time only moves when the test says so ([`SimNet::advance`] /
//! [`SimNet::advance_to_next`]); a packet is delivered once its random delay
//! has passed. Delivery is exactly once; with `reorder` the receiver takes a
//! random deliverable packet instead of the oldest.
//!
//! [`Device::send_gather`] is zero-copy, as a NIC's gather from a registered
//! buffer: the packet holds the header and a reference to the payload, the
//! receiver's engine copies the payload straight from the sender's buffer
//! into its own (one copy per byte, as over EFA hardware, where the NIC moves
//! the bytes), and the send completes (`SendDone`) once the receiver has taken
//! the packet. When a node disappears, the gathered packets it sent are
//! copied into their packets first (its buffers are valid until its endpoint
//! closes), and those waiting in its own inbox complete with
//! `PeerUnreachable`.
//!
//! Every capability and extension of the device contract can be modelled
//! ([`SimConfig`], [`SimConfig::shapes`]): sends that complete later
//! (`async_send`), sleeping on a descriptor (an eventfd per node), a
//! responder, hints on what follows, a doorbell (packets are held until it
//! rings), mapped memory (allocations whose atomics the accessor applies
//! itself), and operations done in the call (RDMA to any peer without its
//! owner, the express receive).

use crate::fxhash::FxHashMap;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use super::{Access, Ah, BuildFn, Caps, DevError, DevEvent, Device, Flow, RemoteAtomic, Sent};
use super::{Doorbell, InCall, Mapped, MoreFollows, Responder, Sleep};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

/// Knobs of a simulated network.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Largest packet.
    pub mtu: usize,
    /// Deliver deliverable packets in random order.
    pub reorder: bool,
    /// Each packet is delayed by a random 0..=`max_delay_ns`.
    pub max_delay_ns: u64,
    /// Per-mille chance that `send` says "try again" although there is room.
    pub again_permille: u32,
    /// Packets an inbox holds before senders get "try again".
    pub inbox_capacity: usize,
    /// Offer RDMA read and write.
    pub rdma: bool,
    /// With `rdma`: every RDMA read completes with a remote-access error
    /// (as if the peer's registration were gone), for the nack paths.
    pub fail_reads: bool,
    /// With `rdma`: the largest single RDMA transfer.
    pub max_rdma_size: u64,
    /// With `rdma`: offer RDMA write with immediate data too.
    pub write_imm: bool,
    /// The device's `Caps::longread_min` hint (default: just above the
    /// engine's default `medium_max`, so that long-read takes over where
    /// long-CTS would).
    pub longread_min: usize,
    /// Record every packet in the log.
    pub capture: bool,
    /// The device's `Caps::backlog_min` (0: it takes no hints); the hints
    /// are recorded in the log.
    pub backlog_min: u64,
    /// `send_gather` copies the payload into the packet at once, as the
    /// shm device does (`Caps::gather_in_place` false), instead of handing
    /// it over apart from the header.
    pub copy_gathered: bool,
    /// Sends complete later (`Caps::sync_send` false): each accepted packet
    /// yields its `SendDone` once the receiver has taken it.
    pub async_send: bool,
    /// The [`Sleep`] extension (an eventfd per node).
    pub sleep: bool,
    /// The [`Responder`] extension (implies `sleep`'s descriptor).
    pub responder: bool,
    /// The [`Doorbell`] extension: packets stay with the sender until the
    /// engine rings.
    pub doorbell: bool,
    /// The [`Mapped`] extension: allocations and file registrations that
    /// peers "map" (the same process), atomics on them applied by the
    /// accessor.
    pub mapped: bool,
    /// The [`InCall`] extension: RDMA done in the call to any peer (with
    /// `rdma`), and the express receive.
    pub in_call: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            mtu: 8192,
            reorder: false,
            max_delay_ns: 0,
            again_permille: 0,
            inbox_capacity: 1024,
            rdma: false,
            fail_reads: false,
            max_rdma_size: 1 << 30,
            write_imm: true,
            longread_min: 64 * 1024 + 1,
            capture: true,
            backlog_min: 0,
            copy_gathered: false,
            async_send: false,
            sleep: false,
            responder: false,
            doorbell: false,
            mapped: false,
            in_call: false,
        }
    }
}

impl SimConfig {
    /// `self` with every combination of the device contract's optional
    /// capabilities and extensions that the engine treats apart:
    /// asynchronous sends, sleep and responder, hints on what follows,
    /// doorbell, mapped memory, operations in the call (with RDMA, as a
    /// device that reaches any peer). 64 shapes, each named.
    pub fn shapes(&self) -> Vec<(String, SimConfig)> {
        (0..64u32)
            .map(|bits| {
                let on = |b: u32| bits & (1 << b) != 0;
                let mut c = self.clone();
                c.async_send = on(0);
                (c.sleep, c.responder) = (on(1), on(1));
                if on(2) && c.backlog_min == 0 {
                    c.backlog_min = 16 * 1024;
                }
                c.doorbell = on(3);
                c.mapped = on(4);
                c.in_call = on(5);
                c.rdma |= c.in_call;
                let names = ["async", "sleep+responder", "more-follows", "doorbell", "mapped", "in-call"];
                let name: Vec<&str> =
                    names.iter().enumerate().filter(|(b, _)| on(*b as u32)).map(|(_, n)| *n).collect();
                (if name.is_empty() { "core".to_string() } else { name.join(",") }, c)
            })
            .collect()
    }

    /// Reordering, delays and back-pressure, all from `seed`.
    pub fn chaotic(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            reorder: true,
            max_delay_ns: 5_000,
            again_permille: 100,
            inbox_capacity: 64,
            ..SimConfig::default()
        }
    }
}

/// One packet as the log records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimRecord {
    /// Sender node.
    pub from: usize,
    /// Receiver node.
    pub to: usize,
    /// The packet type byte.
    pub ptype: u8,
    /// The base header's flags.
    pub flags: u16,
    /// Packet length.
    pub len: usize,
    /// The engine's [`Device::more_follows`] hint for the packet.
    pub more: bool,
    /// Payload bytes of the packet handed over by [`Device::send_gather`]
    /// (copied into it or gathered apart); 0 for a packet built whole.
    pub gathered: usize,
}

struct InPkt {
    from: usize,
    at: u64,
    /// Packet length; `data` is a pooled buffer of at least `len` bytes.
    len: usize,
    data: Vec<u8>,
    /// A gathered payload still in the sender's buffer.
    gathered: Option<UserBuf>,
    /// The sender's `wr_id` and address handle for the `SendDone` that
    /// follows when the packet is taken (a gathered payload, or
    /// `async_send`).
    notify: Option<(u64, Ah)>,
}

struct Mr {
    buf: UserBuf,
    access: Access,
    /// Peers "map" it ([`Mapped`]): an allocation (its memory here) or a
    /// file registration.
    mapped: Option<Option<crate::mem::OwnedBuf>>,
}

struct Node {
    addr: RawAddr,
    alive: bool,
    inbox: VecDeque<InPkt>,
    /// ah -> node index (`None` once removed).
    ahs: Vec<Option<usize>>,
    by_node: Vec<Option<Ah>>,
    events: Vec<DevEvent>,
    mrs: FxHashMap<u64, Mr>,
    /// Packets the engine deferred, in arrival order; while any are kept,
    /// senders' new messages get "try again" (`Device::control_next`).
    parked: VecDeque<InPkt>,
    /// Parked packets still to hand over in the current redelivery.
    redeliver_left: usize,
    /// Packets sent and held until the doorbell rings: (target, packet).
    held: Vec<(usize, InPkt)>,
    /// The [`Sleep`] descriptor (an eventfd), with `sleep` or `responder`.
    fd: Option<std::os::fd::OwnedFd>,
}

impl Node {
    /// Signals the node's descriptor (a packet arrived, or a wake-up).
    fn signal(&self) {
        if let Some(fd) = &self.fd {
            let one = 1u64;
            // SAFETY: an 8-byte write from a valid buffer to our eventfd.
            unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(fd), (&one as *const u64).cast(), 8) };
        }
    }

    /// Resets the node's descriptor once nothing waits.
    fn unsignal(&self) {
        if let Some(fd) = &self.fd {
            let mut v = 0u64;
            // SAFETY: an 8-byte read into a valid buffer from our
            // non-blocking eventfd.
            unsafe { libc::read(std::os::fd::AsRawFd::as_raw_fd(fd), (&mut v as *mut u64).cast(), 8) };
        }
    }

    /// Whether a packet is ready to be handed over at `now`.
    fn ready(&self, now: u64) -> bool {
        self.redeliver_left > 0 || self.inbox.iter().any(|p| p.at <= now)
    }
}

struct Net {
    cfg: SimConfig,
    now: u64,
    rng: u64,
    nodes: Vec<Node>,
    log: Vec<SimRecord>,
    pool: Vec<Vec<u8>>,
}

impl Net {
    fn rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The bytes of an RDMA write (`write`) or read between `local` and
    /// `(remote_addr, key)` at node `target`, moved now.
    fn rdma_copy(&self, target: usize, local: UserBuf, remote_addr: u64, key: u64, write: bool) -> Result<(), Status> {
        if !self.nodes[target].alive {
            return Err(Status::PeerUnreachable);
        }
        if self.cfg.fail_reads && !write {
            return Err(Status::RemoteAccess);
        }
        let need = if write { Access::REMOTE_WRITE } else { Access::REMOTE_READ };
        let remote = self.lookup_mr(target, remote_addr, local.len(), key, need).ok_or(Status::RemoteAccess)?;
        if write {
            remote.copy_from(0, &local, 0, local.len());
        } else {
            local.copy_from(0, &remote, 0, local.len());
        }
        Ok(())
    }

    fn lookup_mr(&self, node: usize, addr: u64, len: usize, key: u64, need: Access) -> Option<UserBuf> {
        let mr = self.nodes.get(node)?.mrs.get(&key)?;
        if !mr.access.contains(need) {
            return None;
        }
        let off = addr.checked_sub(mr.buf.addr())?;
        mr.buf.slice(usize::try_from(off).ok()?, len)
    }
}

/// A simulated network; clone it to share.
#[derive(Clone)]
pub struct SimNet {
    net: Rc<RefCell<Net>>,
}

impl SimNet {
    /// Device memory registrations node `node` holds.
    pub fn registrations(&self, node: usize) -> usize {
        self.net.borrow().nodes.get(node).map_or(0, |n| n.mrs.len())
    }

    /// An empty network.
    pub fn new(cfg: SimConfig) -> SimNet {
        let rng = cfg.seed ^ 0x5151_5151;
        SimNet {
            net: Rc::new(RefCell::new(Net { cfg, now: 0, rng, nodes: Vec::new(), log: Vec::new(), pool: Vec::new() })),
        }
    }

    /// A new endpoint's device. Its qpn is its node index; its connid random.
    pub fn device(&self) -> SimDevice {
        let mut net = self.net.borrow_mut();
        let node = net.nodes.len();
        let connid = net.rand() as u32;
        let mut gid = [0u8; 16];
        gid[..4].copy_from_slice(b"sim\0");
        let addr = RawAddr::new(gid, node as u16, connid);
        let fd = (net.cfg.sleep || net.cfg.responder).then(|| {
            // SAFETY: eventfd has no memory arguments; the result is checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
            // SAFETY: a descriptor just made and owned by nobody else.
            unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        });
        net.nodes.push(Node {
            addr,
            alive: true,
            inbox: VecDeque::new(),
            ahs: Vec::new(),
            by_node: Vec::new(),
            events: Vec::new(),
            mrs: FxHashMap::default(),
            parked: VecDeque::new(),
            redeliver_left: 0,
            held: Vec::new(),
            fd,
        });
        SimDevice { net: self.net.clone(), me: node, more: false, gathering: 0, control: false, awaited: Vec::new() }
    }

    /// Virtual time in nanoseconds.
    pub fn now(&self) -> u64 {
        self.net.borrow().now
    }

    /// Moves time forward.
    pub fn advance(&self, ns: u64) {
        self.net.borrow_mut().now += ns;
    }

    /// Moves time to the next pending delivery; false when nothing is pending.
    pub fn advance_to_next(&self) -> bool {
        let mut net = self.net.borrow_mut();
        let next = net.nodes.iter().flat_map(|n| n.inbox.iter().map(|p| p.at)).min();
        match next {
            Some(at) => {
                net.now = net.now.max(at);
                true
            }
            None => false,
        }
    }

    /// Packets waiting in inboxes.
    pub fn in_flight(&self) -> usize {
        self.net.borrow().nodes.iter().map(|n| n.inbox.len()).sum()
    }

    /// Makes node `node` disappear: its inbox is dropped, sends to it fail,
    /// and every node that knows it is told the peer is lost.
    pub fn kill(&self, node: usize) {
        let mut net = self.net.borrow_mut();
        if !net.nodes[node].alive {
            return;
        }
        net.nodes[node].alive = false;
        let mut dropped: Vec<_> = net.nodes[node].inbox.drain(..).collect();
        dropped.extend(net.nodes[node].parked.drain(..));
        net.nodes[node].redeliver_left = 0;
        // What it held for its doorbell never went out.
        let held: Vec<_> = net.nodes[node].held.drain(..).map(|(_, p)| p).collect();
        net.nodes[node].fd = None;
        for p in dropped {
            if let Some((wr_id, ah)) = p.notify {
                let status = Err(Status::PeerUnreachable);
                net.nodes[p.from].events.push(DevEvent::SendDone { wr_id, ah, status });
            }
            net.pool.push(p.data);
        }
        for p in held {
            net.pool.push(p.data);
        }

        for n in net.nodes.iter_mut() {
            if let Some(&Some(ah)) = n.by_node.get(node) {
                n.events.push(DevEvent::PeerLost { ah });
            }
            // Its packets still arrive, but its buffers go away with it.
            for p in n.inbox.iter_mut().filter(|p| p.from == node) {
                if let Some(payload) = p.gathered.take() {
                    p.data.resize(p.len + payload.len(), 0);
                    payload.read_at(0, &mut p.data[p.len..]);
                    p.len += payload.len();
                }
            }
        }
    }

    /// The packets sent so far (when `capture` is on).
    pub fn log(&self) -> Vec<SimRecord> {
        self.net.borrow().log.clone()
    }

    /// Clears the log.
    pub fn clear_log(&self) {
        self.net.borrow_mut().log.clear();
    }
}

/// One endpoint's view of a [`SimNet`].
pub struct SimDevice {
    net: Rc<RefCell<Net>>,
    me: usize,
    /// The hint for the next packet ([`Device::more_follows`]).
    more: bool,
    /// The payload length of the `send_gather` being copied, for the log.
    gathering: usize,
    /// The hint for the next packet ([`Device::control_next`]).
    control: bool,
    /// The peers the engine said it awaits ([`Device::awaiting`]), as the
    /// nodes they are, since the last [`SimDevice::take_awaited`].
    awaited: Vec<usize>,
}

impl SimDevice {
    /// This device's node index in the net.
    pub fn node(&self) -> usize {
        self.me
    }

    /// The nodes the engine said it awaits since the last call, sorted,
    /// each once.
    pub fn take_awaited(&mut self) -> Vec<usize> {
        let mut v = std::mem::take(&mut self.awaited);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Queues a packet for `ah`: `build` writes it (or its header, when
    /// `gathered` holds the payload) into a pooled buffer of `min(max_len, mtu)` bytes.
    fn queue(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        build: &mut BuildFn<'_>,
        gathered: Option<UserBuf>,
    ) -> Result<Sent, DevError> {
        let more = std::mem::take(&mut self.more);
        let copied = std::mem::take(&mut self.gathering);
        let control = std::mem::take(&mut self.control);
        let mut net = self.net.borrow_mut();
        let me = self.me;
        let target = net.nodes[me].ahs.get(ah as usize).copied().flatten().ok_or(DevError::Failed(Status::NoAddr))?;
        let alive = net.nodes[target].alive;
        let extra = gathered.map_or(0, |p| p.len());
        if gathered.is_some() && max_len.saturating_add(extra) > net.cfg.mtu {
            return Err(DevError::Failed(Status::Inval));
        }
        let held = net.nodes[me].held.iter().filter(|(t, _)| *t == target).count();
        if alive && net.nodes[target].inbox.len() + held >= net.cfg.inbox_capacity {
            return Err(DevError::Again);
        }
        if alive && !control && !net.nodes[target].parked.is_empty() {
            return Err(DevError::Again); // it holds back new messages
        }
        if net.cfg.again_permille > 0 && (net.rand() % 1000) < u64::from(net.cfg.again_permille) {
            return Err(DevError::Again);
        }
        // Exactly the bytes the caller asked for: a bound too small shows.
        let cap = max_len.min(net.cfg.mtu - extra);
        let mut data = net.pool.pop().unwrap_or_default();
        if data.len() < cap {
            data.resize(cap, 0); // pooled buffers keep their length: cleared once
        }
        let len = build(&mut data[..cap]).min(cap);
        if len == 0 || !alive {
            net.pool.push(data);
            return if alive { Ok(Sent::Done) } else { Err(DevError::Failed(Status::PeerUnreachable)) };
        }
        let delay = if net.cfg.max_delay_ns > 0 { net.rand() % (net.cfg.max_delay_ns + 1) } else { 0 };
        let at = net.now + delay;
        if net.cfg.capture {
            net.log.push(SimRecord {
                from: me,
                to: target,
                ptype: data[0],
                flags: u16::from_le_bytes([data[2], data[3]]),
                len: len + extra,
                more,
                gathered: extra + copied,
            });
        }
        let sent = if gathered.is_some() || net.cfg.async_send { Sent::Pending } else { Sent::Done };
        let notify = (sent == Sent::Pending).then_some((wr_id, ah));
        let pkt = InPkt { from: me, at, len, data, gathered, notify };
        if net.cfg.doorbell {
            net.nodes[me].held.push((target, pkt));
        } else {
            net.nodes[target].inbox.push_back(pkt);
            net.nodes[target].signal();
        }
        Ok(sent)
    }

    fn rdma(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        wr_id: u64,
        // A write (with its immediate data, if any), or a read.
        write: Option<Option<u32>>,
    ) -> Result<(), DevError> {
        let (imm, write) = (write.flatten(), write.is_some());
        let mut net = self.net.borrow_mut();
        if !net.cfg.rdma || (imm.is_some() && !net.cfg.write_imm) {
            return Err(DevError::Failed(Status::NotSup));
        }
        if local.len() as u64 > net.cfg.max_rdma_size {
            return Err(DevError::Failed(Status::Inval));
        }
        let me = self.me;
        let target = net.nodes[me].ahs.get(ah as usize).copied().flatten().ok_or(DevError::Failed(Status::NoAddr))?;
        let status = net.rdma_copy(target, local, remote_addr, key, write);
        if let (Some(imm), Ok(())) = (imm, status) {
            // The target's device reports the write once its bytes are in.
            let from = net.nodes[target].ahs.iter().position(|a| *a == Some(me)).map(|a| a as Ah);
            let raw = net.nodes[me].addr;
            net.nodes[target].events.push(DevEvent::WriteImm { ah: from, raw, imm, len: local.len() as u64 });
        }
        net.nodes[me].events.push(DevEvent::SendDone { wr_id, ah, status });
        Ok(())
    }
}

impl SimDevice {
    /// A packet handed to the engine: parked when deferred, else done with.
    fn after_recv(&mut self, pkt: InPkt, deferred: bool) {
        let mut net = self.net.borrow_mut();
        if deferred {
            net.nodes[self.me].parked.push_back(pkt);
            return;
        }
        if let Some((wr_id, ah)) = pkt.notify {
            // The receiver has taken the packet: the sender's buffer is free.
            net.nodes[pkt.from].events.push(DevEvent::SendDone { wr_id, ah, status: Ok(()) });
        }
        net.pool.push(pkt.data);
        let now = net.now;
        let node = &net.nodes[self.me];
        if !node.ready(now) {
            node.unsignal();
        }
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        // Closing an endpoint is a peer disappearing, seen from the others.
        // Packets held for the doorbell go out first, as a real device's
        // queued packets would.
        self.ring();
        let net = SimNet { net: self.net.clone() };
        net.kill(self.me);
    }
}

mod device;
