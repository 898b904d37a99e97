//! The protocol v4 engine of one endpoint (DESIGN §1; docs/architecture.md).
//!
//! The engine owns peers, operations, matching, protocol selection, the
//! responders of emulated RMA and atomics, memory registrations and the
//! completion queue. It is safe Rust only (`forbid(unsafe_code)`), reads no clock (time comes in
//! through [`Endpoint::progress`](crate::engine::Endpoint::progress)) and
//! touches the outside only through the [`Device`](crate::device::Device)
//! trait — so every path runs deterministically over the sim device.
//!
//! Structure of a progress call: received packets, deferred ones handed
//! over again first, handled in place (a handler never calls the device;
//! what it wants sent goes to the control queue), so that what a peer sent
//! before the device reports it lost is still handled → device events
//! (send completions, lost peers) → newly learnt senders inserted into the
//! device → registrations released → control queue and transmit queue
//! flushed until the device says "try again". Beside it, the express
//! receive ([`progress_express`](crate::engine::Endpoint::progress_express))
//! takes the usual case alone — eager messages from the last sender that
//! go straight into the oldest posted receive, while nothing is queued —
//! and leaves everything else, untouched, to the progress call.
//!
//! Decisions recorded here (where the protocol leaves room):
//! - Sends are queued, never refused for a full device queue: up to
//!   `Config::max_ops` operations may be outstanding, then posts return
//!   `Again`. An eager send that waits is a small transmit-queue entry
//!   (`op::QueuedEager`), not an operation entry, so a full device costs
//!   the sender little more than a free one.
//! - Unexpected messages are buffered up to `Config::unexpected_limit`
//!   bytes of message data. A new message that would go past it, or that
//!   arrives while `Config::max_ops` operations are outstanding (and finds
//!   no posted receive), is deferred: left with the device, which holds
//!   back the peers' new messages ("try again" on their side) and hands it
//!   over again once a receive is posted. Everything else is still taken
//!   (CTS, CTSDATA, RECEIPT, responses, later segments, RMA requests), so
//!   the endpoint's own operations and messages already begun go on.
//!   Nothing is dropped, `msg_id` order is kept, and one message is always
//!   taken when none is buffered, even one larger than the limit (up to the
//!   larger of `Config::medium_max` and an MTU). REQs that
//!   arrive ahead of their `msg_id` turn are held separately, bounded by
//!   `Config::reorder_window`, or deferred too while the limit is reached.
//! - Writes and write atomics towards a peer that advertises delivery
//!   complete use the DC types, so the requester's completion reports the
//!   target's validation (a RECEIPT, or a PEER_ERROR with the status).
//!   Writes and write atomics towards a new peer wait for its HANDSHAKE
//!   (and so do reads when the device can RDMA-read: a direct read needs
//!   the peer's feature bit), triggered by a zero-length EAGER_RTW as the
//!   reference implementation does. Towards a baseline-only peer, eager
//!   writes complete on transmit.
//! - Requests the target refuses (bad key, bounds or access, an
//!   unsupported protocol or atomic, a malformed request, no operation
//!   entry free) are answered with PEER_ERROR (`ref_kind` = operation
//!   index, `prov_errno` = the negated status code) when the request names
//!   an operation ID, to peers that advertised PEER_ERROR or whose
//!   HANDSHAKE has not arrived yet; an endpoint that behaves as a
//!   baseline-only peer (`Config::legacy`) sends none.
//! - A direct write with remote CQ data goes by the device's RDMA write
//!   with immediate data; the target's completion comes from the device's
//!   report. Long writes no direct RDMA serves go by long-read (LONGREAD_RTW)
//!   when both sides read. Writes, reads and atomics time out
//!   (`timeout.rs`); operations that have not started can be canceled, and
//!   no `msg_id` is left unused (`withdraw.rs`).

#![forbid(unsafe_code)]

mod ahtable;
mod atomic;
mod complete;
mod cq;
mod dispatch;
mod fifo;
mod handshake;
mod keepalive;
mod longcts;
mod longread;
mod mr;
mod now;
mod op;
mod opts;
mod peer;
mod poll;
mod progress;
mod rma;
mod rtm;
mod runt;
mod send;
mod slab;
mod timeout;
mod traffic;
mod tx;
mod withdraw;

use std::collections::{HashMap, VecDeque};

pub(crate) use complete::{send_flags, RecvDone};
pub use cq::{CqFlags, CqSink, Cqe, ADDR_UNSPEC};
pub(crate) use opts::Mr;
pub use opts::{host_id, Config, ProbeMode, Probed, RecvOpts, RemoteBuf, SendFlags, SendOpts, Stats, DEVICE_VERSION};
pub use traffic::{Proto, Traffic};

use crate::device::{Caps, DevEvent, Device, InCall, Rx, Sleep};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::{self, PacketType, RawAddr, ReqFamily, Subprotocol};
use ahtable::AhTable;
use op::Op;

/// An answer that waits for its peer's HANDSHAKE: READ_NACK and PEER_ERROR
/// go only to a peer that advertised them (a type unknown to a peer is
/// fatal to libfabric's older releases).
#[derive(Debug)]
pub(crate) enum AfterHs {
    /// Long-read receiver `key`'s read failed (`Core::read_failed`), of `iovs`.
    FailedRead { key: u32, iovs: Vec<wire::RmaIov> },
    /// The peer's operation `op_id` failed with `status` (`Core::send_peer_error`).
    PeerError { op_id: u32, status: Status },
}
use peer::Peer;
use slab::Slab;

/// An address handle returned by [`Endpoint::av_insert`].
pub type Addr = u32;

pub(crate) struct Core {
    cfg: Config,
    caps: Caps,
    /// The device reaches every peer's memory itself ([`InCall::any_peer`]).
    any_peer: bool,
    /// The device has the [`crate::device::Responder`] extension.
    responder: bool,
    /// `ops.inserted()` when the device was last told which peers the
    /// operations await (`keepalive.rs`).
    told_ops: u64,
    /// The extra features this endpoint offers (`extra_bits`).
    extra: u64,
    local: RawAddr,
    peers: Slab<Peer>,
    by_ah: AhTable,
    by_raw: HashMap<[u8; 32], u32>,
    ops: Slab<Op>,
    /// Posted receives no message has matched yet, untagged [0] and tagged
    /// [1], in post order.
    posted: [fifo::Fifo<op::Posted>; 2],
    /// Unexpected messages, untagged [0] and tagged [1], in arrival order.
    unexpected: [VecDeque<op::Unexpected>; 2],
    unexpected_bytes: usize,
    /// The application posted (or tried to post) receives since the last
    /// progress call that took packets: that call ends its packet batch
    /// after an eager message that finds no receive (see `progress`).
    recvs_posted: bool,
    /// End this progress call's packet batch (the general path: after an
    /// eager message that found no receive; the express path: before one).
    rx_stop: bool,
    /// Messages claimed by a probe, by the probe's context (and whether
    /// tagged), and the operations of discarded messages whose completion
    /// nobody gets.
    claimed: FxHashMap<u64, (op::Unexpected, bool)>,
    discarding: FxHashMap<u32, ()>,
    /// The call in progress is a send that more follow (`SendFlags::more`):
    /// the device's doorbell is not rung at its end.
    more_follows: bool,
    /// A receive took an unexpected eager message when posted, and its
    /// completion may still be queued ([`Endpoint::took_unexpected`]).
    took_unexpected: bool,
    /// The packet being handled is deferred (left with the device).
    rx_defer: bool,
    /// Packets were deferred since the device last handed them over again.
    deferred: bool,
    /// Ask the device to hand the deferred packets over again (a receive
    /// was posted, buffered bytes were freed, or a sender's `msg_id` moved).
    redeliver_due: bool,
    /// Bytes of REQs held for `msg_id` order (bounded by the reorder window).
    reorder_bytes: usize,
    medium_rx: FxHashMap<(u32, u32), u32>,
    /// Control packets to send: (peer, buffer, length).
    ctrl: VecDeque<(u32, Vec<u8>, usize)>,
    pool: Vec<Vec<u8>>,
    /// Buffers of unexpected eager messages, for reuse (kept apart from
    /// `pool`, whose MTU-sized buffers would overstate `unexpected_bytes`).
    rx_pool: Vec<Vec<u8>>,
    txq: VecDeque<op::Tx>,
    /// `Tx::Eager` entries in `txq`.
    queued_eager: usize,
    cq: fifo::Fifo<Cqe>,
    mrs: FxHashMap<u64, Mr>,
    pending_insert: Vec<u32>,
    events: Vec<DevEvent>,
    stats: Stats,
    /// The largest packet to any peer (the device's MTU, or a peer's path's
    /// where larger: auto's local peers): the size of pooled packet
    /// buffers.
    mtu_max: usize,
    /// The device's [`Device::caps_epoch`] the peers' paths follow.
    caps_epoch: u32,
    /// RTM type by [protocol: eager, medium, long-CTS][tagged].
    rtm_types: [[PacketType; 2]; 3],
    /// Long-read receives: the sender's buffers still to read.
    lr_iovs: FxHashMap<u32, Vec<wire::RmaIov>>,
    /// Long-read receives whose read failed: (peer, msg_id) → receive,
    /// waiting for the sender's LONGCTS_RTM.
    nacked: FxHashMap<(u32, u32), u32>,
    /// Answers that wait for a peer's HANDSHAKE, which decides what the
    /// peer understands (`AfterHs`); at most `Config::max_ops`.
    after_hs: Vec<(u32, AfterHs)>,
    /// Device registrations of finished long-read sends, to drop.
    dereg: Vec<u64>,
    /// Packets by type and operations by protocol.
    traffic: Traffic,
    /// Packets the general progress call took from the device.
    packets_in: u64,
    /// Allocations (`Endpoint::mr_alloc`): the device's (`None`), or
    /// ordinary memory the engine holds where the device has none to map.
    allocs: FxHashMap<u64, Option<crate::mem::OwnedBuf>>,
    /// Timed requests in post order: (operation, deadline (0: not set
    /// yet), its context).
    timed: VecDeque<(u32, u64, u64)>,
}

/// One endpoint: the engine over a device.
pub struct Endpoint<D: Device> {
    dev: D,
    core: Core,
}

/// `q.pop_front()`, and when that empties the queue, its next entries start
/// again at the front of its buffer (`clear` resets the head): a queue that
/// once grew large (a backlog of unexpected messages, completions nobody
/// polled) otherwise walks its whole capacity, a cold cache line per entry.
pub(crate) fn pop_front_hot<T>(q: &mut VecDeque<T>) -> Option<T> {
    let v = q.pop_front();
    if q.is_empty() {
        q.clear();
    }
    v
}

fn raw_key(raw: &RawAddr) -> [u8; 32] {
    let mut k = raw.to_bytes();
    k[24..].fill(0); // the reserved word is not part of the identity
    k
}

impl<D: Device> Endpoint<D> {
    /// Opens an endpoint over `dev`.
    pub fn new(mut dev: D, cfg: Config) -> Endpoint<D> {
        let caps = dev.caps();
        let any_peer = dev.as_in_call_ref().is_some_and(|c| c.any_peer());
        let responder = dev.as_responder().is_some();
        let local = dev.local_addr();
        let core = Core {
            cfg,
            caps,
            any_peer,
            responder,
            told_ops: 0,
            extra: 0,
            local,
            peers: Slab::default(),
            by_ah: AhTable::default(),
            by_raw: HashMap::new(),
            ops: Slab::default(),
            posted: Default::default(),
            unexpected: Default::default(),
            unexpected_bytes: 0,
            recvs_posted: false,
            rx_stop: false,
            more_follows: false,
            claimed: FxHashMap::default(),
            discarding: FxHashMap::default(),
            took_unexpected: false,
            rx_defer: false,
            deferred: false,
            redeliver_due: false,
            reorder_bytes: 0,
            medium_rx: FxHashMap::default(),
            ctrl: VecDeque::new(),
            pool: Vec::new(),
            rx_pool: Vec::new(),
            txq: VecDeque::new(),
            queued_eager: 0,
            cq: fifo::Fifo::default(),
            mrs: FxHashMap::default(),
            pending_insert: Vec::new(),
            events: Vec::new(),
            stats: Stats::default(),
            mtu_max: caps.mtu,
            caps_epoch: 0,
            rtm_types: [[PacketType::EagerMsgRtm; 2]; 3],
            lr_iovs: FxHashMap::default(),
            nacked: FxHashMap::default(),
            after_hs: Vec::new(),
            dereg: Vec::new(),
            timed: VecDeque::new(),
            traffic: Traffic::default(),
            packets_in: 0,
            allocs: FxHashMap::default(),
        };
        let mut core = core;
        // An endpoint whose every send is delivery complete never completes
        // a send at once: the engine's copy of the device's capabilities
        // says so, and the eager fast path stays off without a test of
        // its own.
        core.caps.sync_send &= !core.cfg.delivery_complete;
        core.extra = core.extra_bits(&core.caps);
        for (i, proto) in [Subprotocol::Eager, Subprotocol::Medium, Subprotocol::Longcts].into_iter().enumerate() {
            for tagged in [false, true] {
                if let Some(t) = PacketType::req_type(ReqFamily::Rtm, proto, tagged, false) {
                    core.rtm_types[i][usize::from(tagged)] = t;
                }
            }
        }
        Endpoint { dev, core }
    }

    /// The raw address peers insert to reach this endpoint.
    pub fn addr(&self) -> RawAddr {
        self.core.local
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The device, to act on it beside the engine: tests use it to put
    /// forged packets on the wire as a peer would.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    /// Ends the endpoint, handing its device back (operations are dropped
    /// unfinished, as when the endpoint is dropped).
    pub fn into_device(self) -> D {
        self.dev
    }

    /// Counters of refused network input, and packets in and out.
    pub fn stats(&self) -> Stats {
        Stats { rx_packets: self.core.traffic.rx_total(), tx_packets: self.core.traffic.tx_total(), ..self.core.stats }
    }

    /// Packets [`Self::progress_into`] has taken from the device (the
    /// express path's aside): a cheap sign of activity.
    pub fn packets_in(&self) -> u64 {
        self.core.packets_in
    }

    /// Packets sent and received by type, operations by protocol.
    pub fn traffic(&self) -> &Traffic {
        &self.core.traffic
    }

    /// The `host_id` and `device_version` that the peer at `addr` sent in
    /// its HANDSHAKE (`None` for a field it did not send, or before its
    /// HANDSHAKE arrived). Peers with this endpoint's `host_id` run on
    /// this host.
    pub fn peer_identity(&self, addr: Addr) -> Result<(Option<u64>, Option<u32>), Status> {
        let p = self.core.peers.get(addr).ok_or(Status::NoAddr)?;
        Ok(match p.theirs {
            peer::TheirHandshake::Known { host_id, device_version, .. } => (host_id, device_version),
            _ => (None, None),
        })
    }

    /// The settings the endpoint runs with.
    pub fn config(&self) -> &Config {
        &self.core.cfg
    }

    /// What the device offers.
    pub fn caps(&self) -> Caps {
        self.core.caps
    }

    /// Whether the device reaches every peer's memory itself, without its
    /// owner's help ([`InCall::any_peer`]).
    pub fn any_peer(&self) -> bool {
        self.core.any_peer
    }

    /// The largest message sent with the eager protocol.
    pub fn eager_max(&self, tagged: bool) -> usize {
        self.core.eager_caps(self.core.caps.mtu)[usize::from(tagged)]
    }

    /// Bytes held for unexpected messages.
    pub fn unexpected_bytes(&self) -> usize {
        self.core.unexpected_bytes
    }

    /// Messages that arrived before a receive took them.
    pub fn unexpected_messages(&self) -> usize {
        self.core.unexpected[0].len() + self.core.unexpected[1].len()
    }

    /// Bytes of REQs held until their `msg_id` turn.
    pub fn reorder_bytes(&self) -> usize {
        self.core.reorder_bytes
    }

    /// Peers known: inserted and learnt (at most `Config::max_peers`).
    pub fn peer_count(&self) -> usize {
        self.core.peers.len()
    }

    /// Operations not yet completed (including target-side ones).
    pub fn pending_ops(&self) -> usize {
        self.core.outstanding()
    }

    /// Inserts a peer's raw address; the same address gives the same handle.
    pub fn av_insert(&mut self, raw: &RawAddr) -> Result<Addr, Status> {
        let key = raw_key(raw);
        if let Some(&p) = self.core.by_raw.get(&key) {
            if self.core.peers.get(p).ok_or(Status::Internal)?.ah.is_none() {
                let ah = self.dev.insert(raw)?;
                let path = self.core.path_of(&self.dev, ah);
                let peer = self.core.peers.get_mut(p).ok_or(Status::Internal)?;
                peer.ah = Some(ah);
                peer.path = path;
                self.core.by_ah.insert(ah, p);
                self.core.follow_caps(&self.dev);
            }
            self.core.peers.get_mut(p).ok_or(Status::Internal)?.in_av = true;
            return Ok(p);
        }
        if self.core.peers.len() >= self.core.cfg.max_peers {
            crate::log::log!(crate::log::WARN, "peer {raw:?} refused: {} peers, the limit", self.core.peers.len());
            return Err(Status::NoMem);
        }
        let ah = self.dev.insert(raw)?;
        crate::log::log!(crate::log::INFO, "peer added: {raw:?}");
        let path = self.core.path_of(&self.dev, ah);
        let mut peer = Peer::new(*raw, Some(ah), self.core.cfg.first_msg_id, path);
        peer.in_av = true;
        let p = self.core.peers.insert(peer).ok_or(Status::NoMem)?;
        self.core.by_ah.insert(ah, p);
        self.core.by_raw.insert(key, p);
        self.core.follow_caps(&self.dev);
        Ok(p)
    }

    /// Removes an address. Operations towards it fail with `Canceled`. The
    /// peer's protocol state (message IDs, handshake) is kept: inserting the
    /// address again resumes the same stream, as its other end expects.
    pub fn av_remove(&mut self, addr: Addr) -> Result<(), Status> {
        self.core.live_peer(addr)?;
        self.core.cancel_ops_of(addr, Status::Canceled, false);
        self.core.cancel_recvs_from(addr);
        if let Some(p) = self.core.peers.get_mut(addr) {
            p.in_av = false;
        }
        Ok(())
    }

    /// Looks for the oldest message that has arrived (whole or in part)
    /// without a receive and that a receive with `opts`' source and tag
    /// filter would take, as MPI_Iprobe (`Peek`), MPI_Improbe (`Claim`: no
    /// later receive matches it; [`Self::recv_claimed`] with
    /// `opts.context` takes it; `Inval` when that context holds a claimed
    /// message already) or a probe that drops it (`Discard`). `Ok(None)`:
    /// none waits. It looks at what progress has brought in; the caller
    /// progresses.
    pub fn probe(&mut self, opts: RecvOpts, mode: ProbeMode) -> Result<Option<Probed>, Status> {
        let r = self.core.probe(opts, mode);
        self.core.flush(&mut self.dev); // a discarded long-CTS message is granted
        r
    }

    /// Receives the message that [`Self::probe`] claimed with context
    /// `claim` into `buf`, completing with `context` as a receive does.
    /// `NoEnt`: no such
    /// claim (it was received already, or its sender was lost).
    pub fn recv_claimed(&mut self, claim: u64, buf: UserBuf, context: u64) -> Result<(), Status> {
        let r = self.core.recv_claimed(claim, buf, context);
        self.core.flush(&mut self.dev);
        r
    }

    /// Cancels the operation with `context`: a posted receive that no
    /// message has begun to fill, else a send, write, read or atomic of
    /// this endpoint that has not started (see `withdraw.rs`). It completes
    /// with `Canceled`. `NoEnt` when there is none (it matched, completed,
    /// or never was); `Busy` when it has started, or holds a message number
    /// its peer cannot be told to skip (a peer without PEER_ERROR).
    pub fn cancel(&mut self, context: u64) -> Result<(), Status> {
        let r = match self.core.cancel_recv(context) {
            Err(Status::NoEnt) => self.core.cancel_op(context),
            r => r,
        };
        self.core.flush(&mut self.dev);
        r
    }

    /// True when `raw` is in the address vector.
    pub fn av_contains(&self, raw: &RawAddr) -> bool {
        self.core.by_raw.get(&raw_key(raw)).and_then(|&p| self.core.peers.get(p)).is_some_and(|p| p.in_av)
    }

    /// The raw address of a handle.
    pub fn av_lookup(&self, addr: Addr) -> Result<RawAddr, Status> {
        self.core.peers.get(addr).map(|p| p.raw).ok_or(Status::NoAddr)
    }

    /// Sends `buf` to `dest` (two-sided).
    #[inline(always)]
    pub fn send(&mut self, dest: Addr, buf: UserBuf, opts: SendOpts) -> Result<(), Status> {
        self.send_flagged(dest, buf, opts, SendFlags::default())
    }

    /// [`Self::send`] with [`SendFlags`].
    #[inline(always)]
    pub fn send_flagged(&mut self, dest: Addr, buf: UserBuf, opts: SendOpts, flags: SendFlags) -> Result<(), Status> {
        if self.dev.as_doorbell().is_none() {
            return self.send_inner(dest, buf, opts, flags.dc);
        }
        self.core.more_follows = flags.more;
        let r = self.send_inner(dest, buf, opts, flags.dc);
        self.core.more_follows = false;
        r
    }

    #[inline(always)]
    fn send_inner(&mut self, dest: Addr, buf: UserBuf, opts: SendOpts, dc: bool) -> Result<(), Status> {
        // The eager fast path: never taken with delivery complete (for an
        // endpoint whose every send is, `caps.sync_send` is off).
        if !dc {
            if let Some(done) = self.core.send_now::<D, true>(&mut self.dev, dest, buf, opts) {
                return done;
            }
        }
        // Beyond the eager fast path: the device's per-peer long-read size
        // may have changed since the last send (shm's far peers).
        self.core.follow_caps(&self.dev);
        if dc || self.core.cfg.delivery_complete {
            self.core.post_send(dest, buf, opts, true)?;
            self.core.flush(&mut self.dev);
            return Ok(());
        }
        if self.core.queue_eager(dest, buf, opts)? {
            self.core.flush(&mut self.dev);
            return Ok(());
        }
        if let Some(key) = self.core.post_send(dest, buf, opts, false)? {
            self.core.register_longread(&mut self.dev, key);
        }
        self.core.flush(&mut self.dev);
        Ok(())
    }

    /// Sends `buf` now, without a completion, when it can go out at once
    /// by the eager fast path of [`Self::send`] (it fits one packet,
    /// nothing is queued before it, the peer's HANDSHAKE is known and the
    /// device takes the packet whole): then its bytes are in the device
    /// when this returns, and the caller may reuse `buf`. False: nothing
    /// was sent, and the caller sends a copy the usual way (which keeps
    /// messages to one peer in order: this path is taken only when nothing
    /// is queued). `tag`: a tagged message.
    pub fn inject_now(&mut self, dest: Addr, buf: UserBuf, tag: Option<u64>, cq_data: Option<u64>) -> bool {
        let opts = SendOpts { tag, cq_data, context: 0 };
        self.core.send_now::<D, false>(&mut self.dev, dest, buf, opts) == Some(Ok(()))
    }

    /// Posts a receive into `buf`.
    #[inline(always)]
    pub fn recv(&mut self, buf: UserBuf, opts: RecvOpts) -> Result<(), Status> {
        // A receive that only joined the queue has nothing to send: the
        // flush's checks stay off the posting path (8 B streams post one
        // receive per message).
        if self.core.post_recv(buf, opts)? {
            self.core.flush(&mut self.dev);
        } else {
            self.core.ring(&mut self.dev); // what sends with `more` left
        }
        Ok(())
    }
}

impl Core {
    /// Keeps the buffer of an unexpected message for the next one (up to
    /// 256 buffers of at most an MTU).
    pub(crate) fn recycle_bounce(&mut self, b: Vec<u8>) {
        if b.capacity() <= self.mtu_max && self.rx_pool.len() < 256 {
            self.rx_pool.push(b);
        }
    }

    /// Nothing queued for a progress call to do, and packets may be taken:
    /// the express receive's condition.
    #[inline(always)]
    fn quiet(&self) -> bool {
        self.cq.is_empty()
            && self.ctrl.is_empty()
            && self.txq.is_empty()
            && self.pending_insert.is_empty()
            && self.dereg.is_empty()
            && !self.redeliver_due
    }

    /// Whether a new unexpected message of `need` bytes may be buffered:
    /// what is held (unexpected messages and REQs ahead of their turn)
    /// stays within the limit, or nothing is held and the message is no
    /// larger than the limit, `medium_max` and an MTU all allow (a forged
    /// `msg_length` never sizes a buffer: such a message waits for its
    /// receive).
    #[inline(always)]
    pub(crate) fn unexpected_room(&self, need: usize) -> bool {
        let held = self.unexpected_bytes + self.reorder_bytes;
        let limit = self.cfg.unexpected_limit;
        if held == 0 {
            need <= limit.max(self.cfg.medium_max).max(self.caps.mtu)
        } else {
            held.saturating_add(need) <= limit
        }
    }

    /// Leaves the packet being handled (from `peer`) with the device.
    pub(crate) fn defer_packet(&mut self, peer: u32) {
        self.rx_defer = true;
        self.deferred = true;
        self.stats.deferred += 1;
        crate::log::log!(crate::log::DEBUG, "left a new message of peer {peer} with the device: unexpected limit");
        if let Some(p) = self.peers.get_mut(peer) {
            p.deferred = true;
        }
    }

    /// Unexpected bytes were freed, or a receive posted: deferred packets
    /// may be taken now.
    #[inline(always)]
    pub(crate) fn may_take_deferred(&mut self) {
        if self.deferred {
            self.redeliver_due = true;
        }
    }

    /// Has the device hand the deferred packets over again; they are
    /// judged afresh (and those deferred again are marked again).
    #[cold]
    fn start_redelivery<D: Device>(&mut self, dev: &mut D) {
        self.redeliver_due = false;
        self.deferred = false;
        for k in self.peers.keys() {
            if let Some(p) = self.peers.get_mut(k) {
                p.deferred = false;
            }
        }
        dev.redeliver();
    }

    fn new_op(&mut self, op: Op) -> Result<u32, Status> {
        self.new_op_with(|| op)
    }

    /// [`Self::new_op`] with the entry built in its slot.
    fn new_op_with(&mut self, make: impl FnOnce() -> Op) -> Result<u32, Status> {
        if self.outstanding() >= self.cfg.max_ops {
            return Err(Status::Again);
        }
        self.ops.insert_with(make).ok_or(Status::Again)
    }

    /// Operations not completed: entries and posted receives.
    fn outstanding(&self) -> usize {
        self.ops.len() + self.posted[0].len() + self.posted[1].len() + self.queued_eager
    }

    fn live_peer(&self, addr: Addr) -> Result<&Peer, Status> {
        let p = self.peers.get(addr).ok_or(Status::NoAddr)?;
        if !p.in_av {
            return Err(Status::NoAddr);
        }
        Ok(p)
    }

    /// A peer an operation may be posted to: in the address vector and not lost.
    pub(crate) fn reachable_peer(&self, addr: Addr) -> Result<&Peer, Status> {
        let p = self.live_peer(addr)?;
        if p.lost {
            return Err(Status::PeerUnreachable);
        }
        Ok(p)
    }
}
