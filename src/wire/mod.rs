//! The bytes of every packet of protocol v4; no state (DESIGN §1; docs/architecture.md).
//!
//! Each packet has a typed representation (`Cts`, `Req`, `Handshake`, …) with
//! a `parse` that checks every length before reading and an `emit` that never
//! writes past the buffer it is given.
//! [`Packet::parse`](crate::wire::Packet::parse) dispatches on the base
//! header. Parsing never panics: a malformed packet is a
//! [`WireError`](crate::wire::WireError) saying what is wrong.
//!
//! Where the protocol document and the reference implementation (libfabric's
//! EFA provider) disagree, the layouts here follow the reference implementation
//! (see `shared/facts/wire-facts.md`); the comments cite the fact numbers.
//!
//! Decisions recorded here:
//! - Version: packets with `version < 4` are rejected (`BadVersion`); newer
//!   versions are accepted as v4, as libfabric does (wire-facts #24).
//! - Data-carrying non-REQ packets (CTSDATA, READRSP, ATOMRSP) say their data
//!   length in `seg_length`; the data is exactly that many bytes after the
//!   header and trailing bytes (device padding) are ignored.
//! - A REQ packet's application data is everything after its headers (spec §3.2,
//!   eager note 5); for segmented types (`seg_offset`) the segment must lie
//!   within `msg_length`. An `efa_rma_iov` is taken as it is, even one whose
//!   range wraps around 2^64: ranges are the memory owner's to check (the
//!   engine's registration check, the devices' RDMA), which refuses such a
//!   request with an answer the requester gets, where a packet dropped as
//!   malformed would leave it waiting.

#![forbid(unsafe_code)]

mod addr;
mod datartm;
mod handshake;
mod nonreq;
mod req;
mod types;

pub use addr::{RawAddr, RmaIov};
pub use datartm::DataRtm;
pub use handshake::{Handshake, UserRecvQp};
pub use nonreq::{AtomRsp, Cts, CtsData, Eor, IdsHdr, PeerError, ReadNack, ReadRsp, Receipt};
pub use req::{RawAddrHdr, Req, ReqFields, ReqView};
pub use types::{Category, NonReqKind, PacketType, ReqFamily, ReqInfo, Subprotocol};
pub use zerocopy::little_endian::U64 as LeU64;

/// The protocol version rdm4 speaks.
pub const PROTOCOL_VERSION: u8 = 4;
/// Size of the base header (type, version, flags).
pub const BASE_HDR_LEN: usize = 4;

/// Universal flag: the packet carries the sender's connid (spec table 1.4).
pub const CONNID_HDR: u16 = 0x8000;

/// REQ flags (spec table 3.1, plus bit 13 from wire-facts #10).
pub mod req_flags {
    /// The REQ carries the raw-address optional header.
    pub const RAW_ADDR_HDR: u16 = 0x1;
    /// The REQ carries the CQ-data optional header.
    pub const CQ_DATA_HDR: u16 = 0x2;
    /// Two-sided (set on every RTM).
    pub const MSG: u16 = 0x4;
    /// Tagged two-sided.
    pub const TAGGED: u16 = 0x8;
    /// Emulated RMA (defined; libfabric never sets it, wire-facts #11).
    pub const RMA: u16 = 0x10;
    /// Emulated atomic (set on every RTA).
    pub const ATOMIC: u16 = 0x20;
    /// The LONGCTS RTM sent after a READ_NACK; it carries no data.
    pub const READ_NACK: u16 = 0x2000;
    /// The universal connid flag: the REQ carries the connid optional header.
    pub const CONNID_HDR: u16 = super::CONNID_HDR;
    /// The bits that say which optional headers are present.
    pub const OPT_HDR_MASK: u16 = RAW_ADDR_HDR | CQ_DATA_HDR | CONNID_HDR;
}

/// CTS flag: the CTS answers a LONGCTS_RTR (spec: CTS_EMULATED_READ; wire-facts #21).
pub const CTS_READ_REQ: u16 = 0x80;

/// HANDSHAKE optional-field flags (spec table 2.3 and wire-facts).
pub mod handshake_flags {
    /// `host_id` is present.
    pub const HOST_ID_HDR: u16 = 0x1;
    /// `device_version` is present.
    pub const DEVICE_VERSION_HDR: u16 = 0x2;
    /// The legacy user-recv-QP block (`qpn`, `qkey`) is present.
    pub const USER_RECV_QP_HDR: u16 = 0x4;
    /// The HMEM p2p block is present.
    pub const HMEM_P2P_HDR: u16 = 0x8;
    /// `connid` is present (the universal flag).
    pub const CONNID_HDR: u16 = super::CONNID_HDR;
    /// Every flag that announces an optional field rdm4 knows.
    pub const OPT_MASK: u16 = HOST_ID_HDR | DEVICE_VERSION_HDR | USER_RECV_QP_HDR | HMEM_P2P_HDR | CONNID_HDR;
}

/// Extra feature / request bits of `extra_info[0]` (spec table 2.1, wire-facts).
pub mod extra {
    /// RDMA-read based transfer (long-read, runting read, direct read).
    pub const RDMA_READ: u64 = 1 << 0;
    /// Delivery complete (DC REQ types and RECEIPT).
    pub const DELIVERY_COMPLETE: u64 = 1 << 1;
    /// Request: keep the REQ header length constant.
    pub const CONSTANT_HEADER_LENGTH: u64 = 1 << 2;
    /// Request: put the sender's connid in every packet.
    pub const CONNID_HEADER: u64 = 1 << 3;
    /// Runting read message protocol.
    pub const RUNT: u64 = 1 << 4;
    /// RDMA-write based transfer (direct write).
    pub const RDMA_WRITE: u64 = 1 << 5;
    /// READ_NACK fallback from long-read / runting read to long-CTS.
    pub const READ_NACK: u64 = 1 << 6;
    /// User receive QP (libfabric-internal; never set by rdm4).
    pub const USER_RECV_QP: u64 = 1 << 7;
    /// Unsolicited write receive (never set by rdm4).
    pub const UNSOLICITED_WRITE_RECV: u64 = 1 << 8;
    /// PEER_ERROR packets understood.
    pub const PEER_ERROR: u64 = 1 << 9;
    /// Number of defined extra features/requests.
    pub const COUNT: u32 = 10;
}

/// PEER_ERROR `ref_kind` values.
pub mod peer_error_ref {
    /// `op_id` names an operation entry.
    pub const OPE_INDEX: u32 = 0;
    /// `op_id` names a message ID.
    pub const MSG_ID: u32 = 1;
    /// `op_id` names a message ID the receiver should skip.
    pub const MSG_ID_SKIP: u32 = 2;
}

/// What is wrong with a packet (parse) or a build request (emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The packet ends before a part that must be there.
    #[error("truncated: {what} needs {need} bytes, packet has {have}")]
    Truncated { what: &'static str, need: usize, have: usize },
    /// The base header's version is older than 4.
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    /// The type byte names no packet that can be on the wire.
    #[error("unknown packet type {0}")]
    UnknownType(u8),
    /// An iov or extra-info count does not fit in the packet.
    #[error("{what} count {count} does not fit in the {room} bytes left")]
    CountTooLarge { what: &'static str, count: u64, room: usize },
    /// An optional header's own size field is impossible.
    #[error("optional header {what} has impossible size {size}")]
    OptHeaderSize { what: &'static str, size: u32 },
    /// A length or offset field overflows, or a segment lies outside its message.
    #[error("length overflow in {what}")]
    LengthOverflow { what: &'static str },
    /// A field holds a value the protocol forbids.
    #[error("bad value {value} in {what}")]
    BadField { what: &'static str, value: u64 },
    /// `emit` was given a buffer smaller than the packet.
    #[error("buffer of {have} bytes too small for {need}-byte packet")]
    BufferTooSmall { need: usize, have: usize },
}

/// Shorthand for results of this module.
pub type Result<T> = std::result::Result<T, WireError>;

/// Any packet of protocol v4, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    /// HANDSHAKE (spec §2.1).
    Handshake(Handshake<'a>),
    /// CTS (spec table 3.6).
    Cts(Cts),
    /// CTSDATA (spec table 3.7).
    CtsData(CtsData<'a>),
    /// READRSP (spec table 3.11, libfabric field order: wire-facts #1).
    ReadRsp(ReadRsp<'a>),
    /// EOR (spec table 4.2).
    Eor(Eor),
    /// ATOMRSP (spec table 3.15).
    AtomRsp(AtomRsp<'a>),
    /// RECEIPT (spec §4.2).
    Receipt(Receipt),
    /// READ_NACK (spec §4.7).
    ReadNack(ReadNack),
    /// PEER_ERROR (the engine answers requests it refuses with it).
    PeerError(PeerError),
    /// Any REQ packet (types 64 and up).
    Req(Req<'a>),
}

/// The type, version and flags of the base header; checked but not interpreted further.
#[inline]
pub fn parse_base(buf: &[u8]) -> Result<(PacketType, u16)> {
    let [t, version, f0, f1, ..] = *buf else {
        return Err(WireError::Truncated { what: "base header", need: BASE_HDR_LEN, have: buf.len() });
    };
    if version < PROTOCOL_VERSION {
        return Err(WireError::BadVersion(version));
    }
    let ptype = PacketType::from_u8(t).ok_or(WireError::UnknownType(t))?;
    Ok((ptype, u16::from_le_bytes([f0, f1])))
}

impl<'a> Packet<'a> {
    /// Parses and validates a whole packet of `buf.len()` bytes.
    pub fn parse(buf: &'a [u8]) -> Result<Packet<'a>> {
        let (ptype, _) = parse_base(buf)?;
        use types::NonReqKind as K;
        Ok(match ptype.category() {
            Category::Req(_) => Packet::Req(Req::parse_as(ptype, buf)?),
            Category::NonReq(kind) => match kind {
                K::Handshake => Packet::Handshake(Handshake::parse(buf)?),
                K::Cts => Packet::Cts(Cts::parse(buf)?),
                K::CtsData => Packet::CtsData(CtsData::parse(buf)?),
                K::ReadRsp => Packet::ReadRsp(ReadRsp::parse(buf)?),
                K::Eor => Packet::Eor(Eor::parse_as(ptype, buf)?),
                K::AtomRsp => Packet::AtomRsp(AtomRsp::parse(buf)?),
                K::Receipt => Packet::Receipt(Receipt::parse(buf)?),
                K::ReadNack => Packet::ReadNack(ReadNack::parse_as(ptype, buf)?),
                K::PeerError => Packet::PeerError(PeerError::parse(buf)?),
            },
        })
    }

    /// The packet type.
    pub fn ptype(&self) -> PacketType {
        match self {
            Packet::Handshake(_) => PacketType::Handshake,
            Packet::Cts(_) => PacketType::Cts,
            Packet::CtsData(_) => PacketType::CtsData,
            Packet::ReadRsp(_) => PacketType::ReadRsp,
            Packet::Eor(_) => PacketType::Eor,
            Packet::AtomRsp(_) => PacketType::AtomRsp,
            Packet::Receipt(_) => PacketType::Receipt,
            Packet::ReadNack(_) => PacketType::ReadNack,
            Packet::PeerError(_) => PacketType::PeerError,
            Packet::Req(r) => r.ptype,
        }
    }

    /// The connid this packet carries in its own connid slot, if the flag says so.
    pub fn connid(&self) -> Option<u32> {
        match self {
            Packet::Handshake(p) => p.connid,
            Packet::Cts(p) => p.connid,
            Packet::CtsData(p) => p.connid,
            Packet::ReadRsp(p) => p.connid,
            Packet::Eor(p) | Packet::ReadNack(p) => p.connid,
            Packet::AtomRsp(p) => p.connid,
            Packet::Receipt(p) => p.connid,
            Packet::PeerError(p) => p.connid,
            Packet::Req(r) => r.connid,
        }
    }

    /// The connid that identifies the sender: for a REQ with a raw address
    /// header, the raw address's connid (which wins over a connid header,
    /// wire-facts #13); otherwise [`Packet::connid`].
    pub fn sender_connid(&self) -> Option<u32> {
        match self {
            Packet::Req(r) => r.sender_connid(),
            other => other.connid(),
        }
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        match self {
            Packet::Handshake(p) => p.buffer_len(),
            Packet::Cts(_) => Cts::LEN,
            Packet::CtsData(p) => p.buffer_len(),
            Packet::ReadRsp(p) => p.buffer_len(),
            Packet::Eor(_) | Packet::ReadNack(_) => IdsHdr::LEN,
            Packet::AtomRsp(p) => p.buffer_len(),
            Packet::Receipt(_) => Receipt::LEN,
            Packet::PeerError(_) => PeerError::LEN,
            Packet::Req(r) => r.buffer_len(),
        }
    }

    /// Writes the packet at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        match self {
            Packet::Handshake(p) => p.emit(buf),
            Packet::Cts(p) => p.emit(buf),
            Packet::CtsData(p) => p.emit(buf),
            Packet::ReadRsp(p) => p.emit(buf),
            Packet::Eor(p) => p.emit_as(PacketType::Eor, buf),
            Packet::ReadNack(p) => p.emit_as(PacketType::ReadNack, buf),
            Packet::AtomRsp(p) => p.emit(buf),
            Packet::Receipt(p) => p.emit(buf),
            Packet::PeerError(p) => p.emit(buf),
            Packet::Req(r) => r.emit(buf),
        }
    }
}

/// Fails with `BufferTooSmall` unless `buf` holds `need` bytes.
pub(crate) fn check_room(buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        return Err(WireError::BufferTooSmall { need, have: buf.len() });
    }
    Ok(())
}

/// Fails with `Truncated` unless `buf` holds `need` bytes.
#[inline]
pub(crate) fn check_len(buf: &[u8], need: usize, what: &'static str) -> Result<()> {
    if buf.len() < need {
        return Err(WireError::Truncated { what, need, have: buf.len() });
    }
    Ok(())
}

/// Writes the 4-byte base header.
pub(crate) fn put_base(buf: &mut [u8], ptype: PacketType, flags: u16) {
    buf[0] = ptype as u8;
    buf[1] = PROTOCOL_VERSION;
    buf[2..4].copy_from_slice(&flags.to_le_bytes());
}

/// Splits a multiuse slot into (connid, padding) by the CONNID_HDR flag.
pub(crate) fn split_multiuse(flags: u16, multiuse: u32) -> (Option<u32>, u32) {
    if flags & CONNID_HDR != 0 {
        (Some(multiuse), 0)
    } else {
        (None, multiuse)
    }
}

/// The (flags, multiuse) pair to write for a connid / padding choice.
pub(crate) fn join_multiuse(flags: u16, connid: Option<u32>, padding: u32) -> (u16, u32) {
    match connid {
        Some(c) => (flags | CONNID_HDR, c),
        None => (flags & !CONNID_HDR, padding),
    }
}
