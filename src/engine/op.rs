//! Operation entries: one per application operation or per remote request
//! being served. They live in a generational slab; their keys are the
//! `send_id` / `recv_id` values put on the wire. Their states and
//! transitions per protocol: docs/architecture.md.

use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::{PacketType, RmaIov};

/// What an operation entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// Two-sided send.
    Send,
    /// Posted receive (matched or waiting).
    Recv,
    /// A message that arrived before its receive: data in `bounce`.
    Unexpected,
    /// RMA write requester.
    Write,
    /// Target side of a long-CTS write: receives into `buf` (the target region).
    RemoteWrite,
    /// RMA read requester: receives into `buf`.
    Read,
    /// Responder of a long-CTS read: sends from `buf` (the source region).
    ReadResponder,
    /// Atomic requester.
    Atomic,
}

/// Atomic request details.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AtomicReq {
    pub datatype: u32,
    pub op: u32,
    pub compare: UserBuf,
    pub result: UserBuf,
}

/// One operation entry.
#[derive(Debug)]
pub(crate) struct Op {
    pub kind: OpKind,
    pub peer: u32,
    pub context: u64,
    /// Source (sends, writes, read responders) or destination (receives, reads).
    pub buf: UserBuf,
    /// The REQ this operation sends (requester side).
    pub ptype: Option<PacketType>,
    pub tagged: bool,
    pub tag: u64,
    /// Receive: bits of the tag to ignore.
    pub ignore: u64,
    /// Receive: accept only this peer.
    pub src: Option<u32>,
    pub msg_id: u32,
    pub cq_data: Option<u64>,
    pub rma: RmaIov,
    pub atomic: Option<AtomicReq>,
    /// Sender: total bytes to send. Receiver: the message length.
    pub len: u64,
    /// Sender: bytes handed to the device so far.
    pub sent: u64,
    /// Sender: bytes the peer allows so far (long-CTS windows).
    pub window_end: u64,
    /// Sender: the REQ (or first READRSP) went out.
    pub started: bool,
    /// Packets handed to the device whose completion has not come back.
    pub inflight: u32,
    /// Requester waits for a response (RECEIPT, ATOMRSP, read data).
    pub awaiting: bool,
    /// Receiver: bytes received so far.
    pub received: u64,
    /// The peer's operation ID (from the REQ, CTS or READRSP).
    pub remote_id: u32,
    /// Receiver: CTSDATA packets the sender asked for per window.
    pub credits: u32,
    /// Receiver: the sender wants a RECEIPT (DC types).
    pub dc: bool,
    /// Unexpected message: the data received so far.
    pub bounce: Vec<u8>,
    /// Memory registration key this entry keeps busy.
    pub mr_key: Option<u64>,
    /// First failure.
    pub status: Status,
    /// The peer's error number when the peer reported the failure.
    pub detail: u32,
    /// In the transmit queue.
    pub queued: bool,
    /// Direct read or write: the device's RDMA moves the bytes.
    pub direct: bool,
    /// Long-read send: the device registration of `buf`.
    pub lr_mr: Option<u64>,
    /// Long-CTS send after a READ_NACK: the RTM carries no data (spec §4.7).
    pub nodata: bool,
    /// Long-CTS send after the receiver's READ_NACK: its RTM carries the
    /// REQ flag READ_NACK (wire-facts #10).
    pub nacked: bool,
    /// Runting read: the runt's length (sender: taken from the peer's
    /// budget; receiver: the bytes that come in packets, the rest read).
    pub runt: u64,
    /// Ended (with `status`) while the device still held packets or RDMA
    /// of it: it completes when `inflight` reaches 0, so the application
    /// gets its buffer back only once the device is done with it.
    pub closing: bool,
    /// A send whose `len` counts in its peer's `tx_bytes` (until its last
    /// byte goes to the device).
    pub backlog: bool,
}

impl Op {
    pub fn new(kind: OpKind, peer: u32, context: u64, buf: UserBuf) -> Op {
        Op {
            kind,
            peer,
            context,
            buf,
            ptype: None,
            tagged: false,
            tag: 0,
            ignore: 0,
            src: None,
            msg_id: 0,
            cq_data: None,
            rma: RmaIov::new(0, 0, 0),
            atomic: None,
            len: 0,
            sent: 0,
            window_end: 0,
            started: false,
            inflight: 0,
            awaiting: false,
            received: 0,
            remote_id: 0,
            credits: 0,
            dc: false,
            bounce: Vec::new(),
            mr_key: None,
            status: Status::Success,
            detail: 0,
            queued: false,
            direct: false,
            lr_mr: None,
            nodata: false,
            nacked: false,
            runt: 0,
            closing: false,
            backlog: false,
        }
    }

    /// Writes `data` at message offset `off` into `buf` (or, for an
    /// unexpected message, its bounce buffer), dropping what lies beyond the
    /// buffer (truncation); counts it as received.
    pub fn place(&mut self, off: u64, data: &[u8]) {
        self.place_data(off, Data::Inline(data));
    }

    /// [`Op::place`] for data in the packet or gathered from the sender.
    pub fn place_data(&mut self, off: u64, data: Data<'_>) {
        let len = data.len();
        if self.kind == OpKind::Unexpected {
            // Not matched yet: into the bounce buffer (sized for the message).
            let at = off as usize;
            if let Some(dst) = self.bounce.get_mut(at..at + len) {
                data.read_into(dst);
            }
            self.received += len as u64;
            return;
        }
        let cap = self.buf.len() as u64;
        if off < cap {
            let n = (cap - off).min(len as u64) as usize;
            data.write_to(&self.buf, off as usize, n);
        }
        self.received += len as u64;
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
    /// The receive as an operation entry (`tagged`: it came from the tagged queue).
    pub fn into_op(self, tagged: bool) -> Op {
        let mut op = Op::new(OpKind::Recv, self.src.unwrap_or(u32::MAX), self.context, self.buf);
        op.tagged = tagged;
        (op.tag, op.ignore) = (self.tag, self.ignore);
        op.src = self.src;
        op
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
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finished {
    pub kind: OpKind,
    pub peer: u32,
    pub context: u64,
    pub buf: UserBuf,
    pub tagged: bool,
    pub tag: u64,
    pub msg_id: u32,
    pub cq_data: Option<u64>,
    pub atomic: Option<AtomicReq>,
    pub len: u64,
    pub remote_id: u32,
    pub dc: bool,
    pub bounce_len: usize,
    /// A medium message (it may have an entry in the segment map).
    pub medium: bool,
    pub mr_key: Option<u64>,
    /// Long-read send: the device registration to drop.
    pub lr_mr: Option<u64>,
    /// Runting-read send: the runt to give back to its peer's budget.
    pub runt: u64,
    pub status: Status,
    pub detail: u32,
}

impl From<&mut Op> for Finished {
    fn from(op: &mut Op) -> Finished {
        Finished {
            kind: op.kind,
            peer: op.peer,
            context: op.context,
            buf: op.buf,
            tagged: op.tagged,
            tag: op.tag,
            msg_id: op.msg_id,
            cq_data: op.cq_data,
            atomic: op.atomic,
            len: op.len,
            remote_id: op.remote_id,
            dc: op.dc,
            bounce_len: op.bounce.len(),
            medium: op.ptype.and_then(|t| t.req_info()).is_some_and(|i| i.proto == crate::wire::Subprotocol::Medium),
            lr_mr: op.lr_mr,
            runt: if op.kind == OpKind::Send { op.runt } else { 0 },
            mr_key: op.mr_key,
            status: op.status,
            detail: op.detail,
        }
    }
}
