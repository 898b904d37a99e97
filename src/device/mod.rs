//! The device contract: what an EFA NIC gives (DESIGN §2; docs/architecture.md).
//!
//! 1. `send` delivers a packet of at most `mtu()` bytes reliably, exactly
//!    once, in **any order**; it may refuse with
//!    [`DevError::Again`](crate::device::DevError::Again) when its queue is
//!    full. Each accepted send later yields a
//!    [`DevEvent::SendDone`](crate::device::DevEvent::SendDone) with success
//!    or [`Status::PeerUnreachable`].
//! 2. Received packets come with the sender's address handle, or `None`
//!    ("unknown sender": the packet must carry the raw address header).
//! 3. Address handles: `insert(raw) -> Ah`, `remove(ah)`.
//! 4. Memory registration with access flags and unguessable keys.
//! 5. Optional RDMA read/write, validated by the memory owner's side.
//! 6. Capabilities.
//! 7. Deferral: the receive callback may leave a packet with the device
//!    ([`Rx::Defer`](crate::device::Rx::Defer): the engine cannot take it
//!    now, its unexpected messages being at their limit). The device keeps
//!    it, hands it over again, before newer packets, after
//!    [`Device::redeliver`](crate::device::Device::redeliver), and
//!    meanwhile holds back new messages (RTM and RTA packets) that peers
//!    send it, answering them "try again", while it still takes every
//!    other packet
//!    ([`Device::control_next`](crate::device::Device::control_next)).
//!    Memory for deferred packets is bounded by what was in flight when the
//!    holding began.
//! 8. Peers that end: a peer that closes is reported lost
//!    ([`DevEvent::PeerLost`](crate::device::DevEvent::PeerLost)) at the
//!    next poll of every endpoint it knew (shm: a close notice in their
//!    rings; udp: a close datagram), and a send that reaches a closed peer
//!    fails rather than succeeding into nothing; a peer that dies silently
//!    is reported within the device's documented bound (shm:
//!    `RDM4_SHM_PEER_CHECK_MS`; udp: its give-up time), and at once when an
//!    RDMA finds it gone.
//! 9. Deregistration: when `dereg` returns `Ok`, no peer reads or writes
//!    the memory any more, RDMA under way included (`Busy` when one does
//!    not end in time).
//!
//! The engine assumes nothing more: in particular no ordering, and no clock
//! other than the `now` passed to its progress call.
//!
//! Beyond this core, a device may have extensions ([`ext`]: sleeping on a
//! descriptor, a responder, hints on what follows, memory that peers of one
//! host map, operations done in the call), each a trait of its own that the
//! engine asks for where it uses it. docs/architecture.md draws the whole.
//!
//! The packet builders and the receive callback are generic closures, not
//! trait objects: the engine is compiled for each device, and building or
//! handling a packet inlines into the device's send and receive loops (so
//! `Device` is not object-safe; a run-time choice of device is an enum,
//! see `capi::CDevice`).

pub mod auto;
pub mod away;
pub mod ext;
pub mod shm;
pub mod sim;
pub mod udp;

pub use ext::{Doorbell, InCall, Lacks, Mapped, MoreFollows, Responder, Sleep};

use bitflags::bitflags;

use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

/// An address handle: the device's name for a peer.
pub type Ah = u32;

/// A packet builder as [`Device::send_with`] and [`Device::send_gather`]
/// take it, behind a reference (for devices that pass it on to helpers that
/// are not generic): it writes into the device's buffer and returns the
/// length, 0 for nothing.
pub type BuildFn<'a> = dyn FnMut(&mut [u8]) -> usize + 'a;

bitflags! {
    /// Access rights of a memory registration.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// Local use as a send or receive buffer.
        const LOCAL = 1 << 0;
        /// Peers may read it.
        const REMOTE_READ = 1 << 1;
        /// Peers may write it (and run atomics on it).
        const REMOTE_WRITE = 1 << 2;
    }
}

/// What the device can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Largest packet `send` accepts.
    pub mtu: usize,
    /// Largest single RDMA transfer (0 without RDMA).
    pub max_rdma_size: u64,
    /// RDMA read supported.
    pub rdma_read: bool,
    /// RDMA write supported.
    pub rdma_write: bool,
    /// RDMA write with immediate data supported ([`Device::rdma_write_imm`]).
    pub rdma_write_imm: bool,
    /// Every successful `send_with` completes at once (`Sent::Done`): the
    /// engine may then complete an eager send without keeping an entry for
    /// it. (`send_gather` may still answer `Pending`.)
    pub sync_send: bool,
    /// `send_gather` hands the payload over in place, without copying it (a
    /// NIC's gather from registered memory; the sim device). The engine then
    /// sends long-CTS RTMs without data, so that every byte of the message
    /// moves by gathered CTSDATA (copied once, by the receiver) rather than
    /// the first segment being copied into the RTM and out again. Over a
    /// device that copies (false), a long-CTS RTM carries data, handed over
    /// by `send_gather` as CTSDATA payloads are, so that the device copies
    /// all of a message's bytes the same way (shm: past the caches when the
    /// receiver is far).
    pub gather_in_place: bool,
    /// Smallest two-sided message the device would rather move by one RDMA
    /// read than by packets (`usize::MAX`: never). The engine uses long-read
    /// only from the larger of this and `Config::longread_min`, for any
    /// message above the eager size (medium ones too).
    pub longread_min: usize,
    /// A long-read message may send its first bytes as packets (runting
    /// read, `Config::runt_size`) while the receiver reads the rest. False
    /// where packets cost more than the read they overlap: the shm device
    /// when its processes outnumber the CPUs ([`ShmConfig`]'s crowded mode).
    ///
    /// [`ShmConfig`]: crate::device::shm::ShmConfig
    pub runt: bool,
}

/// The operation of [`Mapped::atomic`]: libfabric datatype and operation,
/// and the application's buffers (operands, compare values, results).
#[derive(Debug, Clone, Copy)]
pub struct RemoteAtomic {
    pub datatype: u32,
    pub op: u32,
    pub operand: UserBuf,
    pub compare: UserBuf,
    pub result: UserBuf,
}

/// What became of an accepted send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Delivered (or handed to a medium that cannot fail any more): no
    /// [`DevEvent::SendDone`] follows. The shm and sim devices complete this way.
    Done,
    /// A [`DevEvent::SendDone`] with the `wr_id` follows.
    Pending,
}

/// Why the device refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevError {
    /// Queue full: try again after progress.
    Again,
    /// A permanent failure with this status.
    Failed(Status),
}

/// Something the device reports to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevEvent {
    /// An accepted send (or RDMA operation) finished.
    SendDone {
        /// The `wr_id` given to `send`.
        wr_id: u64,
        /// The peer it was for.
        ah: Ah,
        /// `Ok` or why it failed (`PeerUnreachable`, `RemoteAccess`).
        status: Result<(), Status>,
    },
    /// The device gave up on a peer: every operation towards it must fail.
    PeerLost {
        /// The peer.
        ah: Ah,
    },
    /// A peer's RDMA write with immediate data ([`Device::rdma_write_imm`])
    /// has put every byte into this endpoint's memory.
    WriteImm {
        /// The writer (`None`: a peer not inserted).
        ah: Option<Ah>,
        /// The writer's raw address as this device knows it, from which
        /// the engine learns a writer not inserted (its completion then
        /// names the writer, as a message's does).
        raw: RawAddr,
        /// The immediate data.
        imm: u32,
        /// Bytes written.
        len: u64,
    },
    /// The device asks which peers the endpoint's operations await: the
    /// engine answers in the same progress call with [`Device::awaiting`]
    /// for each (a device shared with a responder cannot look at the
    /// engine itself: udp asks every 100 ms during the application's
    /// calls, and keeps the answer while it is away).
    Awaiting,
}

/// What a [`Device::recv`] callback returns: whether to go on with the
/// next packet, and whether it took this one.
pub trait Flow {
    /// True: hand over the next packet too.
    fn go_on(self) -> bool;

    /// True: the packet was not taken; keep it for a later
    /// [`Device::redeliver`].
    fn defer(&self) -> bool {
        false
    }
}

/// A [`Device::recv`] callback's verdict on a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rx {
    /// Taken; go on.
    Next,
    /// Taken; end the call.
    Stop,
    /// Not taken: keep it, and go on.
    Defer,
}

impl Flow for Rx {
    #[inline(always)]
    fn go_on(self) -> bool {
        self != Rx::Stop
    }

    #[inline(always)]
    fn defer(&self) -> bool {
        *self == Rx::Defer
    }
}

impl Flow for () {
    #[inline(always)]
    fn go_on(self) -> bool {
        true
    }
}

impl Flow for bool {
    #[inline(always)]
    fn go_on(self) -> bool {
        self
    }
}

/// Hands the packets a device kept for the engine ([`Rx::Defer`]) to `f`
/// again, at most `max`, in their order; those it defers again stay, in
/// order, and so do those after a call that stops early. `from` and
/// `bytes` read a kept packet's sender and bytes. Returns how many were
/// handed over and whether some of this redelivery are left for the next
/// call.
pub(crate) fn redeliver_parked<P, R: Flow>(
    parked: &mut std::collections::VecDeque<P>,
    max: usize,
    from: impl Fn(&P) -> Option<Ah>,
    bytes: fn(&P) -> &[u8],
    f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
) -> (usize, bool) {
    let mut kept = std::collections::VecDeque::with_capacity(parked.len());
    let (mut n, mut go_on, mut rest) = (0, true, false);
    while let Some(p) = parked.pop_front() {
        if n == max || !go_on {
            rest = true;
            kept.push_back(p);
            continue;
        }
        n += 1;
        let verdict = f(from(&p), bytes(&p), None);
        if verdict.defer() {
            kept.push_back(p);
        }
        go_on = verdict.go_on();
    }
    *parked = kept;
    (n, rest)
}

/// [`Device::send_gather`] by copying: the packet is the header `build`
/// writes followed by a copy of `payload` (with non-temporal stores when
/// `nt`), sent by [`Device::send_with`]; `Err(Failed(Inval))` when the two
/// exceed the MTU.
pub(crate) fn copy_gather<D: Device + ?Sized>(
    dev: &mut D,
    ah: Ah,
    wr_id: u64,
    hdr_max: usize,
    build: &mut BuildFn<'_>,
    payload: UserBuf,
    nt: bool,
) -> Result<Sent, DevError> {
    let plen = payload.len();
    if hdr_max.saturating_add(plen) > dev.caps().mtu {
        return Err(DevError::Failed(Status::Inval));
    }
    dev.send_with(ah, wr_id, hdr_max + plen, |buf: &mut [u8]| {
        let n = build(buf);
        let copied = n > 0 && buf.get_mut(n..n + plen).is_some_and(|dst| payload.read_at_with(0, dst, nt));
        if copied {
            n + plen
        } else {
            0
        }
    })
}

/// A reliable, unordered datagram device (see the module docs): the core
/// every device implements, and its optional extensions ([`ext`]), each an
/// associated type that is the device itself where it has the extension and
/// [`Lacks`] where it has not.
pub trait Device {
    /// Sleeping on a descriptor.
    type Sleep: Sleep;
    /// Work done while the application is away.
    type Responder: Responder;
    /// Hints on the bytes queued behind a packet.
    type MoreFollows: MoreFollows;
    /// The end of a call's packets.
    type Doorbell: Doorbell;
    /// Memory peers of one host map.
    type Mapped: Mapped;
    /// Operations done in the call.
    type InCall: InCall;

    /// Capabilities.
    fn caps(&self) -> Caps;

    /// This endpoint's raw address.
    fn local_addr(&self) -> RawAddr;

    /// Adds a peer; inserting the same address twice returns the same handle.
    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status>;

    /// What the device can do towards peer `ah`, where it reaches peers by
    /// different paths (the auto device: shm to peers of its host, udp to
    /// the rest); the same as [`Self::caps`] on other devices. Its `mtu` is
    /// [`Self::caps`]'s.
    fn peer_caps(&self, _ah: Ah) -> Caps {
        self.caps()
    }

    /// A number that changes when [`Self::peer_caps`] of peers already
    /// inserted may have changed (the shm device's crowded mode, which
    /// inserts and removals switch): the engine then asks again for every
    /// peer, and takes what may change in the middle of a stream (the
    /// long-read size and the runt), never the packet size.
    fn caps_epoch(&self) -> u32 {
        0
    }

    /// This endpoint's raw address as peer `ah`'s device knows it: what
    /// REQs to it carry in their raw address header ([`Self::local_addr`]
    /// but on a device with several paths).
    fn local_addr_for(&self, _ah: Ah) -> RawAddr {
        self.local_addr()
    }

    /// Forgets a peer.
    fn remove(&mut self, ah: Ah);

    /// Queues a packet for `ah`, built by `build` directly in the device's
    /// buffer of `min(max_len, mtu)` bytes: `build` returns the packet's
    /// length, or 0 to send nothing (then `Ok(Done)` and no event).
    /// `max_len` is the caller's bound on the packet: a device may reserve
    /// only that much (the shm ring packs small packets densely). The
    /// device checks for room before calling `build`. With `Ok(Pending)`,
    /// `wr_id` comes back in [`DevEvent::SendDone`]; a send that fails at
    /// once is `Err(Failed(..))`.
    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError>;

    /// Queues `pkt` (at most the peer's `mtu` bytes: [`Device::peer_caps`]) for `ah`: [`Device::send_with`] with a copy.
    fn send(&mut self, ah: Ah, pkt: &[u8], wr_id: u64) -> Result<Sent, DevError> {
        if pkt.len() > self.peer_caps(ah).mtu {
            return Err(DevError::Failed(Status::Inval));
        }
        self.send_with(ah, wr_id, pkt.len(), |buf: &mut [u8]| {
            buf[..pkt.len()].copy_from_slice(pkt);
            pkt.len()
        })
    }

    /// Queues a packet made of a header, built by `build` in the device's
    /// buffer of `min(hdr_max, mtu)` bytes as in [`Device::send_with`], followed by
    /// `payload`, which the device gathers from the application's buffer (as a
    /// NIC reads a registered send buffer: no copy by the engine). When
    /// `hdr_max` plus the payload exceeds `mtu` nothing is sent:
    /// `Err(Failed(Inval))`.
    ///
    /// The device may read `payload` until the send completes: with
    /// `Ok(Pending)` the caller keeps the buffer untouched until the
    /// [`DevEvent::SendDone`] for `wr_id`. The default copies the payload into
    /// the packet at once (`send_with`), so the packet arrives whole; a device
    /// that defers the read hands the payload to the receiver apart from the
    /// header (the `gathered` argument of [`Device::recv`]'s callback).
    fn send_gather(
        &mut self,
        ah: Ah,
        wr_id: u64,
        hdr_max: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
        payload: UserBuf,
    ) -> Result<Sent, DevError> {
        copy_gather(self, ah, wr_id, hdr_max, &mut build, payload, false)
    }

    /// Says that the next packet sent is no new message (not an RTM or
    /// RTA, or a later segment of a message already begun): a peer that
    /// holds back new messages (it deferred packets) takes it anyway. A
    /// hint for that one packet; devices that never defer ignore it.
    fn control_next(&mut self) {}

    /// Hands received packets to `f`, at most `max`; returns how many. `f`
    /// gets the sender (or `None`), the packet's bytes and, for a packet sent
    /// by a device-deferred [`Device::send_gather`], the payload that follows
    /// those bytes (valid only during the call); `None` for a whole packet.
    /// `f` returns `()`, or a `bool`: false ends the call after that packet.
    fn recv<R: Flow>(&mut self, max: usize, f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize;

    /// Hands the packets deferred so far ([`Rx::Defer`]) to `recv` again,
    /// first and in their order, from its next call on.
    fn redeliver(&mut self) {}

    /// Moves pending events into `out`.
    fn events(&mut self, out: &mut Vec<DevEvent>);

    /// Says that the engine awaits an answer from peer `ah` (it has
    /// operations with it): the device makes sure the peer is alive, and
    /// reports it lost ([`DevEvent::PeerLost`]) within its documented bound
    /// when it is not (udp: probes while it is silent). The engine says it
    /// when the device asks ([`DevEvent::Awaiting`]) and before it sleeps
    /// on the device; the default does nothing (a
    /// device that learns of dead peers otherwise, shm: by their pid).
    fn awaiting(&mut self, _ah: Ah) {}

    /// Registers `buf` with `access`; returns its key.
    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status>;

    /// Removes a registration.
    fn dereg(&mut self, key: u64) -> Result<(), Status>;

    /// RDMA-reads `local.len()` bytes from the peer's `(remote_addr, key)`
    /// into `local`. Devices without RDMA read return `Failed(NotSup)`.
    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError>;

    /// RDMA-writes `local` to the peer's `(remote_addr, key)`.
    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError>;

    /// [`Device::rdma_write`] carrying 32-bit immediate data: once every
    /// byte is in the target's memory, the target's device reports
    /// [`DevEvent::WriteImm`] (a refused write reports nothing there).
    /// Devices without it ([`Caps::rdma_write_imm`] false) answer
    /// `Failed(NotSup)`.
    fn rdma_write_imm(
        &mut self,
        _ah: Ah,
        _local: UserBuf,
        _remote_addr: u64,
        _key: u64,
        _imm: u32,
        _wr_id: u64,
    ) -> Result<(), DevError> {
        Err(DevError::Failed(Status::NotSup))
    }

    /// The [`Sleep`] extension, if the device has it.
    #[inline(always)]
    fn as_sleep(&mut self) -> Option<&mut Self::Sleep> {
        None
    }

    /// [`Device::as_sleep`] for [`Sleep::wake_sleeper`], from another thread.
    #[inline(always)]
    fn as_sleeper(&self) -> Option<&Self::Sleep> {
        None
    }

    /// The [`Responder`] extension, if the device has it.
    #[inline(always)]
    fn as_responder(&mut self) -> Option<&mut Self::Responder> {
        None
    }

    /// The [`MoreFollows`] extension, if the device has it.
    #[inline(always)]
    fn as_more_follows(&mut self) -> Option<&mut Self::MoreFollows> {
        None
    }

    /// The [`Doorbell`] extension, if the device has it.
    #[inline(always)]
    fn as_doorbell(&mut self) -> Option<&mut Self::Doorbell> {
        None
    }

    /// The [`Mapped`] extension, if the device has it.
    #[inline(always)]
    fn as_mapped(&mut self) -> Option<&mut Self::Mapped> {
        None
    }

    /// The [`InCall`] extension, if the device has it.
    #[inline(always)]
    fn as_in_call(&mut self) -> Option<&mut Self::InCall> {
        None
    }

    /// [`Device::as_in_call`] for [`InCall::any_peer`], by reference.
    #[inline(always)]
    fn as_in_call_ref(&self) -> Option<&Self::InCall> {
        None
    }
}
