//! Operation entries: one per application operation or per remote request
//! being served. They live in a generational slab; their keys are the
//! `send_id` / `recv_id` values put on the wire. Their states and
//! transitions per protocol: docs/architecture.md.

use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::{PacketType, RmaIov};

/// Atomic request details.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AtomicReq {
    pub datatype: u32,
    pub op: u32,
    pub compare: UserBuf,
    pub result: UserBuf,
}

/// One operation entry: the head every operation has, and its [`State`].
#[derive(Debug)]
pub(crate) struct Op {
    pub peer: u32,
    pub context: u64,
    /// Source (sends, writes, served reads) or destination (receives,
    /// reads, served writes).
    pub buf: UserBuf,
    /// The bytes the operation moves (a receive: the message's length).
    pub len: u64,
    /// Bytes handed to the device (senders), or whose reads were issued
    /// (long-read receivers).
    pub sent: u64,
    /// Bytes received (receivers, reads): each byte of the message once.
    pub received: u64,
    /// Which bytes of the message arrived in segments ([`Op::place_data`]).
    pub got: Ranges,
    /// The peer's operation ID (from the REQ, CTS or READRSP).
    pub remote_id: u32,
    /// Packets or RDMA handed to the device whose completion has not come back.
    pub inflight: u32,
    /// In the transmit queue.
    pub queued: bool,
    /// Ended (with `status`) while the device still held packets or RDMA
    /// of it: it completes when `inflight` reaches 0, so the application
    /// gets its buffer back only once the device is done with it.
    pub closing: bool,
    /// First failure.
    pub status: Status,
    /// The peer's error number when the peer reported the failure.
    pub detail: u32,
    pub state: State,
}

/// What an operation is and the protocol state it is in; each variant
/// carries exactly its own data. Transitions per protocol:
/// docs/architecture.md.
#[derive(Debug)]
pub(crate) enum State {
    /// Sender of a two-sided message. `backlog`: its `len` counts in its
    /// peer's `tx_bytes` (until its last byte goes to the device).
    Send { msg: Msg, out: Out, backlog: bool },
    /// Requester of a write.
    Write { rma: RmaIov, cq_data: Option<u64>, out: Out },
    /// Requester of a read; `grant`: the windows it grants a long-CTS
    /// read's responder. `into`: an emulated read a long-read receiver
    /// does for itself (its key), which gets the completion.
    Read { rma: RmaIov, out: Out, grant: Grant, into: Option<u32> },
    /// Requester of an atomic; the RTA takes a `msg_id`.
    Atomic { rma: RmaIov, req: AtomicReq, msg_id: u32, out: Out },
    /// Receiver of a message, matched with a receive.
    Recv { msg: Msg, via: RxVia },
    /// A message no receive has taken yet: its data so far in `bounce`.
    Unexpected { msg: Msg, via: RxVia, bounce: Vec<u8> },
    /// Target of a long-CTS or long-read write: receives into `buf` (a
    /// registered region), or into `regions` in order when the request
    /// named several (`rma_iov` entries). `keys`: the registrations it
    /// keeps busy.
    ServeWrite { via: RxVia, cq_data: Option<u64>, dc: bool, keys: Box<[u64]>, regions: Option<Box<[UserBuf]>> },
    /// Responder of a long-CTS read: sends from `buf`, or `regions` in
    /// order, a READRSP then CTSDATA; `keys` as for `ServeWrite`.
    ServeRead { out: Out, keys: Box<[u64]>, regions: Option<Box<[UserBuf]>> },
}

/// A message's identity.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Msg {
    pub tagged: bool,
    pub tag: u64,
    pub msg_id: u32,
    pub cq_data: Option<u64>,
    /// Delivery complete: the receiver sends a RECEIPT.
    pub dc: bool,
}

/// Where a requester (or a served read) is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    /// The REQ it sends; `None` for direct RDMA, a served read, and a
    /// write whose protocol waits for the peer's HANDSHAKE.
    pub ptype: Option<PacketType>,
    /// How its bytes go.
    pub via: Via,
    /// Its first packet (REQ, or a served read's READRSP) went out.
    pub started: bool,
    /// The answer it waits for after its packets.
    pub awaits: Option<Awaits>,
}

impl Out {
    pub fn new(ptype: Option<PacketType>, via: Via) -> Out {
        Out { ptype, via, started: false, awaits: None }
    }
}

/// How a sender's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// In its REQs (eager and medium messages, eager writes, atomics) —
    /// or none (reads: the request is all they send).
    Req,
    /// Long-CTS: the first bytes in the REQ (`nodata`: none), the rest by
    /// CTSDATA up to `window_end`, which the peer's CTS moves on.
    /// `nacked`: the REQ answers the receiver's READ_NACK (REQ flag
    /// READ_NACK, wire-facts #10).
    LongCts { window_end: u64, nodata: bool, nacked: bool },
    /// Long read: the buffer registered with the device (`mr`, once done)
    /// for the peer to read; a runting read's first `runt` bytes go in
    /// REQs (taken from the peer's runt budget until the send ends).
    LongRead { mr: Option<u64>, runt: u64 },
    /// The device's RDMA moves the bytes.
    Direct,
}

/// What a requester waits for once its packets are out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Awaits {
    /// Delivery complete (sends, writes, write atomics).
    Receipt,
    /// A long read's end (long-read sends and writes).
    Eor,
    /// The old values (fetch and compare atomics).
    AtomRsp,
    /// The data (emulated reads).
    ReadRsp,
}

/// How a receiver's bytes come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxVia {
    /// Whole in one REQ.
    Eager,
    /// In segments, one REQ each.
    Medium,
    /// Long-CTS: the receiver grants windows.
    LongCts(Grant),
    /// Long read: the receiver reads (the `read_iov` in `Core::lr_iovs`)
    /// after the first `runt` bytes, which come in REQs (runting read).
    LongRead { runt: u64 },
}

/// A long-CTS receiver's windows: the CTSDATA per window the sender asked
/// for, and the end of the bytes granted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Grant {
    pub credits: u32,
    pub end: u64,
}

impl Op {
    pub fn new(peer: u32, context: u64, buf: UserBuf, len: u64, state: State) -> Op {
        Op {
            peer,
            context,
            buf,
            len,
            sent: 0,
            received: 0,
            got: Ranges::default(),
            remote_id: 0,
            inflight: 0,
            queued: false,
            closing: false,
            status: Status::Success,
            detail: 0,
            state,
        }
    }

    /// The requester's (or served read's) progress.
    pub fn out(&self) -> Option<&Out> {
        match &self.state {
            State::Send { out, .. }
            | State::Write { out, .. }
            | State::Read { out, .. }
            | State::Atomic { out, .. }
            | State::ServeRead { out, .. } => Some(out),
            State::Recv { .. } | State::Unexpected { .. } | State::ServeWrite { .. } => None,
        }
    }

    /// [`Self::out`], mutable.
    pub fn out_mut(&mut self) -> Option<&mut Out> {
        match &mut self.state {
            State::Send { out, .. }
            | State::Write { out, .. }
            | State::Read { out, .. }
            | State::Atomic { out, .. }
            | State::ServeRead { out, .. } => Some(out),
            State::Recv { .. } | State::Unexpected { .. } | State::ServeWrite { .. } => None,
        }
    }

    /// The first packet went out.
    pub fn started(&self) -> bool {
        self.out().is_some_and(|o| o.started)
    }

    /// The message's identity (sends and received messages).
    pub fn msg(&self) -> Option<&Msg> {
        match &self.state {
            State::Send { msg, .. } | State::Recv { msg, .. } | State::Unexpected { msg, .. } => Some(msg),
            _ => None,
        }
    }

    /// The message's tag (0: none).
    pub fn tag(&self) -> u64 {
        self.msg().map_or(0, |m| m.tag)
    }

    /// The receiver's protocol (received messages and served writes).
    pub fn rx_via(&self) -> Option<RxVia> {
        match &self.state {
            State::Recv { via, .. } | State::Unexpected { via, .. } | State::ServeWrite { via, .. } => Some(*via),
            _ => None,
        }
    }

    /// The long-CTS windows this operation grants, if it receives by long-CTS.
    pub fn grant_mut(&mut self) -> Option<&mut Grant> {
        match &mut self.state {
            State::Recv { via: RxVia::LongCts(g), .. }
            | State::Unexpected { via: RxVia::LongCts(g), .. }
            | State::ServeWrite { via: RxVia::LongCts(g), .. }
            | State::Read { grant: g, .. } => Some(g),
            _ => None,
        }
    }

    /// The endpoint's own request (a send, write, read or atomic), as
    /// opposed to a receive or a peer's request being served.
    pub fn is_request(&self) -> bool {
        matches!(self.state, State::Send { .. } | State::Write { .. } | State::Read { .. } | State::Atomic { .. })
    }

    /// The `msg_id` of a message or atomic.
    pub fn msg_id_mut(&mut self) -> Option<&mut u32> {
        match &mut self.state {
            State::Send { msg, .. } | State::Recv { msg, .. } | State::Unexpected { msg, .. } => Some(&mut msg.msg_id),
            State::Atomic { msg_id, .. } => Some(msg_id),
            _ => None,
        }
    }

    /// The regions a served request names, when several.
    fn regions(&self) -> Option<&[UserBuf]> {
        match &self.state {
            State::ServeWrite { regions, .. } | State::ServeRead { regions, .. } => regions.as_deref(),
            _ => None,
        }
    }

    /// Bytes of the operation's memory: its buffer, or its regions.
    pub fn room(&self) -> u64 {
        match self.regions() {
            Some(r) => r.iter().map(|b| b.len() as u64).sum(),
            None => self.buf.len() as u64,
        }
    }

    /// The memory at offset `off`, at most `n` bytes: within one region
    /// (shorter at a region's end); `None` past the end.
    pub fn span(&self, off: u64, n: usize) -> Option<UserBuf> {
        let Some(regions) = self.regions() else {
            let off = usize::try_from(off).ok()?;
            return self.buf.slice(off, n.min(self.buf.len().checked_sub(off)?));
        };
        let mut at = 0u64;
        for r in regions {
            let end = at + r.len() as u64;
            if off < end {
                let inner = (off - at) as usize;
                return r.slice(inner, n.min(r.len() - inner));
            }
            at = end;
        }
        None
    }

    /// Writes `data` at message offset `off` into `buf` (or, for an
    /// unexpected message, its bounce buffer), dropping what lies beyond the
    /// buffer (truncation); counts it as received. False, with nothing
    /// written: the segment overlaps bytes that already arrived (a
    /// duplicate or a forgery: the message is not complete until every
    /// byte came once), or the message arrived in too many pieces.
    pub fn place(&mut self, off: u64, data: &[u8]) -> bool {
        self.place_data(off, Data::Inline(data))
    }

    /// [`Op::place`] for data in the packet or gathered from the sender.
    pub fn place_data(&mut self, off: u64, data: Data<'_>) -> bool {
        let len = data.len();
        if self.got.add(off, len as u64).is_none() {
            return false;
        }
        if let State::Unexpected { bounce, .. } = &mut self.state {
            // Not matched yet: into the bounce buffer (sized for the message).
            let at = off as usize;
            if let Some(dst) = bounce.get_mut(at..at + len) {
                data.read_into(dst);
            }
            self.received += len as u64;
            return true;
        }
        if self.regions().is_some() {
            // Region by region.
            let mut done = 0;
            while done < len {
                let Some(dst) = self.span(off + done as u64, len - done) else { break };
                data.write_part(&dst, done);
                done += dst.len();
            }
            self.received += len as u64;
            return true;
        }
        let cap = self.buf.len() as u64;
        if off < cap {
            let n = (cap - off).min(len as u64) as usize;
            data.write_to(&self.buf, off as usize, n);
        }
        self.received += len as u64;
        true
    }
}

/// The byte ranges of a message that arrived, each `[start, end)`, sorted
/// and merged. Segments that arrive in order extend one range, kept inline
/// (no allocation); out of order they take a list of at most
/// [`Ranges::MAX`] ranges, so that a peer cannot grow it without bound.
#[derive(Debug, Default)]
pub(crate) struct Ranges {
    first: (u64, u64),
    more: Vec<(u64, u64)>,
}

impl Ranges {
    /// Most disjoint ranges held: far above the segments one grant lets
    /// arrive out of order (`Config::max_credits`).
    pub const MAX: usize = 1024;

    /// Adds `[off, off + len)`: `Some` when none of its bytes had arrived,
    /// `None` (nothing added) when some had, or at [`Ranges::MAX`].
    #[inline]
    pub fn add(&mut self, off: u64, len: u64) -> Option<()> {
        let end = off.checked_add(len)?;
        if len == 0 {
            return Some(());
        }
        if self.more.is_empty() {
            let (s, e) = self.first;
            if s == e {
                self.first = (off, end);
                return Some(());
            }
            if off == e {
                self.first.1 = end;
                return Some(());
            }
            if end == s {
                self.first.0 = off;
                return Some(());
            }
            if off < e && end > s {
                return None;
            }
            self.more.push(self.first);
        }
        self.add_apart(off, end)
    }

    /// [`Ranges::add`] into the list.
    #[cold]
    fn add_apart(&mut self, off: u64, end: u64) -> Option<()> {
        let i = self.more.partition_point(|r| r.1 <= off);
        if self.more.get(i).is_some_and(|r| r.0 < end) {
            return None;
        }
        let joins_left = i > 0 && self.more[i - 1].1 == off;
        let joins_right = self.more.get(i).is_some_and(|r| r.0 == end);
        match (joins_left, joins_right) {
            (true, true) => {
                self.more[i - 1].1 = self.more[i].1;
                self.more.remove(i);
            }
            (true, false) => self.more[i - 1].1 = end,
            (false, true) => self.more[i].0 = off,
            (false, false) if self.more.len() >= Self::MAX => return None,
            (false, false) => self.more.insert(i, (off, end)),
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn ranges_take_each_byte_once_in_any_order_and_refuse_overlaps() {
        let mut r = Ranges::default();
        assert_eq!(r.add(0, 100), Some(()));
        assert_eq!(r.add(100, 50), Some(()));
        assert_eq!(r.add(0, 1), None, "a byte again");
        assert_eq!(r.add(149, 10), None, "overlapping the end");
        assert!(r.more.is_empty(), "in order: one range, inline");
        assert_eq!(r.add(300, 10), Some(()));
        assert_eq!(r.add(200, 10), Some(()));
        assert_eq!(r.add(205, 1), None);
        assert_eq!(r.add(150, 50), Some(()), "fills the gap: merged");
        assert_eq!(r.more, vec![(0, 210), (300, 310)]);
        assert_eq!(r.add(210, 90), Some(()));
        assert_eq!(r.more, vec![(0, 310)]);
        assert_eq!(r.add(u64::MAX, 2), None, "wraps");
        // Disjoint pieces: at most MAX.
        let mut r = Ranges::default();
        for k in 0..Ranges::MAX as u64 {
            assert_eq!(r.add(k * 10, 5), Some(()));
        }
        assert_eq!(r.add(100_000, 5), None);
        assert_eq!(r.add(5, 5), Some(()), "merging takes no new range");
    }
}

/// Data arriving for an operation: in the packet, or still in the sender's
/// buffer, gathered by the device (`Device::send_gather`) and readable only
/// while the packet is being handled.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Data<'a> {
    /// The bytes after the packet's headers.
    Inline(&'a [u8]),
    /// The sender's bytes.
    Gathered(UserBuf),
}

impl Data<'_> {
    pub fn len(&self) -> usize {
        match self {
            Data::Inline(d) => d.len(),
            Data::Gathered(b) => b.len(),
        }
    }

    /// Copies the first `dst.len()` bytes into `dst`.
    fn read_into(&self, dst: &mut [u8]) {
        match self {
            Data::Inline(d) => dst.copy_from_slice(&d[..dst.len()]),
            Data::Gathered(b) => {
                b.read_at(0, dst);
            }
        }
    }

    /// Copies bytes `from..from + dst.len()` into `dst` (in bounds: checked by the caller).
    fn write_part(&self, dst: &UserBuf, from: usize) {
        match self {
            Data::Inline(d) => {
                dst.write_at(0, &d[from..from + dst.len()]);
            }
            Data::Gathered(b) => {
                dst.copy_from(0, b, from, dst.len());
            }
        }
    }

    /// Copies the first `n` bytes into `dst` at `off` (in bounds: checked by the caller).
    fn write_to(&self, dst: &UserBuf, off: usize, n: usize) {
        match self {
            Data::Inline(d) => {
                dst.write_at(off, &d[..n]);
            }
            Data::Gathered(b) => {
                dst.copy_from(off, b, 0, n);
            }
        }
    }
}

/// A posted receive that no message has matched yet. It is kept small and
/// in its queue rather than in the operation slab: an eager message that
/// matches it completes it straight away, and only a message that needs an
/// entry (medium, long-CTS, long-read, or one that asks for a receipt)
/// turns it into an [`Op`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Posted {
    pub buf: UserBuf,
    pub context: u64,
    /// Tagged receives: the tag and the bits of it to ignore.
    pub tag: u64,
    pub ignore: u64,
    /// Accept only this peer.
    pub src: Option<u32>,
}

impl Posted {
    /// The receive as an operation entry, for a message from `peer` of
    /// `len` bytes coming by `via` (`tagged`: it came from the tagged queue).
    pub fn into_op(self, tagged: bool, peer: u32, len: u64, msg: Msg, via: RxVia) -> Op {
        Op::new(peer, self.context, self.buf, len, State::Recv { msg: Msg { tagged, ..msg }, via })
    }
}

/// An eager send that could not go out at once (the device pushed back,
/// or sends queued before it): kept small in the transmit queue, without an
/// operation entry, like the fast path it waits to take (devices that
/// complete sends at once only).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueuedEager {
    pub peer: u32,
    pub buf: UserBuf,
    pub tag: Option<u64>,
    pub cq_data: Option<u64>,
    pub context: u64,
    /// Taken from the peer's sequence when the send was posted.
    pub msg_id: u32,
}

/// An entry of the transmit queue.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tx {
    /// An operation with packets to send.
    Op(u32),
    /// A whole eager message.
    Eager(QueuedEager),
}

/// An unexpected message in its queue.
#[derive(Debug)]
pub(crate) enum Unexpected {
    /// Held by an operation entry (medium, long-CTS, long-read, or an
    /// eager message taken by the general path).
    Op(u32),
    /// An eager message received whole (the common small case): no
    /// operation entry; a matching receive completes from it at once.
    Eager(EagerMsg),
}

/// A whole eager message nobody had asked for yet.
#[derive(Debug)]
pub(crate) struct EagerMsg {
    pub peer: u32,
    pub tag: u64,
    pub cq_data: Option<u64>,
    pub data: Vec<u8>,
}

/// What completing an operation needs of its entry (copied out so the large
/// entry is dropped in place rather than moved).
#[derive(Debug)]
pub(crate) struct Finished {
    pub peer: u32,
    pub context: u64,
    pub buf: UserBuf,
    pub len: u64,
    pub remote_id: u32,
    pub status: Status,
    pub detail: u32,
    pub what: Ended,
}

/// What kind of operation ended, with what its end releases or sends.
#[derive(Debug)]
pub(crate) enum Ended {
    /// A send: `runt` to give back to its peer's budget, `mr` its
    /// long-read registration to drop.
    Send {
        msg: Msg,
        runt: u64,
        mr: Option<u64>,
    },
    Write {
        mr: Option<u64>,
    },
    Read {
        into: Option<u32>,
    },
    Atomic {
        fetches: bool,
    },
    /// A received message; `unexpected`: no receive had taken it (its
    /// bounce buffer held `bounce_len` bytes).
    Recv {
        msg: Msg,
        via: RxVia,
        unexpected: Option<usize>,
    },
    ServeWrite {
        cq_data: Option<u64>,
        dc: bool,
        keys: Box<[u64]>,
    },
    ServeRead {
        keys: Box<[u64]>,
    },
}

impl From<&mut Op> for Finished {
    fn from(op: &mut Op) -> Finished {
        let lr_mr = |out: &Out| match out.via {
            Via::LongRead { mr, .. } => mr,
            _ => None,
        };
        let what = match &mut op.state {
            State::Send { msg, out, .. } => {
                let runt = match out.via {
                    Via::LongRead { runt, .. } => runt,
                    _ => 0,
                };
                Ended::Send { msg: *msg, runt, mr: lr_mr(out) }
            }
            State::Write { out, .. } => Ended::Write { mr: lr_mr(out) },
            State::Read { into, .. } => Ended::Read { into: *into },
            State::Atomic { req, .. } => Ended::Atomic { fetches: !req.result.is_empty() },
            State::Recv { msg, via } => Ended::Recv { msg: *msg, via: *via, unexpected: None },
            State::Unexpected { msg, via, bounce } => {
                Ended::Recv { msg: *msg, via: *via, unexpected: Some(bounce.len()) }
            }
            State::ServeWrite { cq_data, dc, keys, .. } => {
                Ended::ServeWrite { cq_data: *cq_data, dc: *dc, keys: std::mem::take(keys) }
            }
            State::ServeRead { keys, .. } => Ended::ServeRead { keys: std::mem::take(keys) },
        };
        Finished {
            peer: op.peer,
            context: op.context,
            buf: op.buf,
            len: op.len,
            remote_id: op.remote_id,
            status: op.status,
            detail: op.detail,
            what,
        }
    }
}
