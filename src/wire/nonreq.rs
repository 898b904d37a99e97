//! Non-REQ packets: CTS, CTSDATA, READRSP, EOR, ATOMRSP, RECEIPT, READ_NACK,
//! PEER_ERROR (spec §3.2–§4.7; layouts from wire-facts "Header sizes").
//!
//! Types with a multiuse slot keep it as `connid` when the CONNID_HDR flag is
//! set and as `padding` otherwise, so a packet re-encodes to its own bytes
//! (wire-facts #14). The `flags` fields hold the type-specific bits; emit
//! derives CONNID_HDR from `connid`.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{
    check_len, check_room, join_multiuse, put_base, split_multiuse, PacketType, Result, WireError, CONNID_HDR,
};

/// Reads the fixed header `H` at the start of `buf`.
#[inline]
fn read_hdr<'b, H: FromBytes + KnownLayout + Immutable>(buf: &'b [u8], what: &'static str) -> Result<(H, &'b [u8])> {
    check_len(buf, core::mem::size_of::<H>(), what)?;
    H::read_from_prefix(buf).map_err(|_| WireError::Truncated {
        what,
        need: core::mem::size_of::<H>(),
        have: buf.len(),
    })
}

/// The first `seg_length` bytes of `rest`: the data of a data-carrying packet.
#[inline]
fn seg_data(rest: &[u8], seg_length: u64, hdr_len: usize) -> Result<&[u8]> {
    if seg_length > rest.len() as u64 {
        return Err(WireError::Truncated {
            what: "data announced by seg_length",
            need: hdr_len.saturating_add(usize::try_from(seg_length).unwrap_or(usize::MAX)),
            have: hdr_len + rest.len(),
        });
    }
    Ok(&rest[..seg_length as usize])
}

/// Writes header `hdr` then `data` into `buf`; returns the length.
#[inline]
fn emit_with<H: IntoBytes + Immutable>(buf: &mut [u8], hdr: &H, opt: &[u8], data: &[u8]) -> Result<usize> {
    let h = hdr.as_bytes();
    let total = h.len() + opt.len() + data.len();
    check_room(buf, total)?;
    buf[..h.len()].copy_from_slice(h);
    buf[h.len()..h.len() + opt.len()].copy_from_slice(opt);
    buf[h.len() + opt.len()..total].copy_from_slice(data);
    Ok(total)
}

fn base(ptype: PacketType, flags: u16) -> [u8; 4] {
    let mut b = [0u8; 4];
    put_base(&mut b, ptype, flags);
    b
}

fn flags_of(base: &[u8; 4]) -> u16 {
    u16::from_le_bytes([base[2], base[3]])
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct CtsWire {
    base: [u8; 4],
    multiuse: U32,
    send_id: U32,
    recv_id: U32,
    recv_length: U64,
}

/// CTS: the receiver grants `recv_length` bytes (spec table 3.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cts {
    /// Type-specific flags ([`super::CTS_READ_REQ`]).
    pub flags: u16,
    /// Sender's connid.
    pub connid: Option<u32>,
    /// The multiuse slot when it holds no connid.
    pub padding: u32,
    /// The `send_id` of the REQ being answered.
    pub send_id: u32,
    /// The receiver's operation ID, for CTSDATA.
    pub recv_id: u32,
    /// Bytes the receiver is ready for (must be > 0 to make progress).
    pub recv_length: u64,
}

impl Cts {
    /// Length on the wire.
    pub const LEN: usize = 24;

    /// Parses a CTS.
    pub fn parse(buf: &[u8]) -> Result<Cts> {
        let (w, _) = read_hdr::<CtsWire>(buf, "CTS header")?;
        let flags = flags_of(&w.base);
        let (connid, padding) = split_multiuse(flags, w.multiuse.get());
        Ok(Cts {
            flags: flags & !CONNID_HDR,
            connid,
            padding,
            send_id: w.send_id.get(),
            recv_id: w.recv_id.get(),
            recv_length: w.recv_length.get(),
        })
    }

    /// Writes the CTS.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (flags, multiuse) = join_multiuse(self.flags, self.connid, self.padding);
        let w = CtsWire {
            base: base(PacketType::Cts, flags),
            multiuse: U32::new(multiuse),
            send_id: U32::new(self.send_id),
            recv_id: U32::new(self.recv_id),
            recv_length: U64::new(self.recv_length),
        };
        emit_with(buf, &w, &[], &[])
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct CtsDataWire {
    base: [u8; 4],
    recv_id: U32,
    seg_length: U64,
    seg_offset: U64,
}

/// CTSDATA: one segment of a long-CTS transfer (spec table 3.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtsData<'a> {
    /// Flags other than CONNID_HDR.
    pub flags: u16,
    /// The `recv_id` from the CTS.
    pub recv_id: u32,
    /// Offset of `data` in the message.
    pub seg_offset: u64,
    /// Sender's connid, carried in an 8-byte block after the header (wire-facts #14).
    pub connid: Option<u32>,
    /// The segment (`seg_length` is its length).
    pub data: &'a [u8],
}

impl<'a> CtsData<'a> {
    /// Length of the fixed header.
    pub const HDR_LEN: usize = 24;

    /// Parses a CTSDATA.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<CtsData<'a>> {
        let (mut c, seg_length, rest) = Self::parse_headers(buf)?;
        c.data = seg_data(rest, seg_length, buf.len() - rest.len())?;
        Ok(c)
    }

    /// Parses the headers of a CTSDATA whose segment travels apart from them
    /// (a gathered send): `hdr` must hold the headers and nothing more.
    /// Returns them with empty `data`, and `seg_length`. Unlike
    /// [`CtsData::parse`], which [`super::Packet::parse`] calls after
    /// checking the base header, this checks the type and version itself.
    #[inline]
    pub fn parse_headers_only(hdr: &'a [u8]) -> Result<(CtsData<'a>, u64)> {
        let (ptype, _) = super::parse_base(hdr)?;
        if ptype != PacketType::CtsData {
            return Err(WireError::BadField { what: "type of gathered packet", value: ptype as u64 });
        }
        let (c, seg_length, rest) = Self::parse_headers(hdr)?;
        if !rest.is_empty() {
            return Err(WireError::BadField { what: "bytes after gathered CTSDATA headers", value: rest.len() as u64 });
        }
        Ok((c, seg_length))
    }

    /// The headers (with empty `data`), `seg_length`, and what follows them.
    #[inline]
    fn parse_headers(buf: &'a [u8]) -> Result<(CtsData<'a>, u64, &'a [u8])> {
        let (w, mut rest) = read_hdr::<CtsDataWire>(buf, "CTSDATA header")?;
        let flags = flags_of(&w.base);
        let connid = if flags & CONNID_HDR != 0 {
            check_len(buf, Self::HDR_LEN + 8, "CTSDATA connid block")?;
            let c = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            rest = &rest[8..];
            Some(c)
        } else {
            None
        };
        let seg_length = w.seg_length.get();
        if w.seg_offset.get().checked_add(seg_length).is_none() {
            return Err(WireError::LengthOverflow { what: "CTSDATA seg_offset + seg_length" });
        }
        let c = CtsData {
            flags: flags & !CONNID_HDR,
            recv_id: w.recv_id.get(),
            seg_offset: w.seg_offset.get(),
            connid,
            data: &[],
        };
        Ok((c, seg_length, rest))
    }

    /// Length of the headers (fixed + connid block).
    pub fn header_len(&self) -> usize {
        Self::HDR_LEN + if self.connid.is_some() { 8 } else { 0 }
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.data.len()
    }

    /// Writes the CTSDATA.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_parts(buf, self.data.len() as u64, self.data)
    }

    /// Writes only the headers of a CTSDATA whose `seg_length` bytes of data
    /// travel apart from them (a gathered send); `data` is ignored.
    #[inline]
    pub fn emit_headers_only(&self, buf: &mut [u8], seg_length: u64) -> Result<usize> {
        self.emit_parts(buf, seg_length, &[])
    }

    fn emit_parts(&self, buf: &mut [u8], seg_length: u64, data: &[u8]) -> Result<usize> {
        if self.seg_offset.checked_add(seg_length).is_none() {
            return Err(WireError::LengthOverflow { what: "CTSDATA seg_offset + seg_length" });
        }
        let (flags, _) = join_multiuse(self.flags, self.connid, 0);
        let w = CtsDataWire {
            base: base(PacketType::CtsData, flags),
            recv_id: U32::new(self.recv_id),
            seg_length: U64::new(seg_length),
            seg_offset: U64::new(self.seg_offset),
        };
        let mut block = [0u8; 8];
        let opt: &[u8] = match self.connid {
            Some(c) => {
                block[..4].copy_from_slice(&c.to_le_bytes());
                &block
            }
            None => &[],
        };
        emit_with(buf, &w, opt, data)
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct ReadRspWire {
    base: [u8; 4],
    multiuse: U32,
    recv_id: U32,
    send_id: U32,
    seg_length: U64,
}

/// READRSP: the data of an emulated read. Field order as libfabric:
/// `recv_id` at 8, `send_id` at 12 (wire-facts #1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadRsp<'a> {
    /// Flags other than CONNID_HDR.
    pub flags: u16,
    /// Sender's connid.
    pub connid: Option<u32>,
    /// The multiuse slot when it holds no connid.
    pub padding: u32,
    /// The requester's `recv_id` from the RTR.
    pub recv_id: u32,
    /// The responder's own operation ID.
    pub send_id: u32,
    /// The data (`seg_length` is its length).
    pub data: &'a [u8],
}

impl<'a> ReadRsp<'a> {
    /// Length of the header.
    pub const HDR_LEN: usize = 24;

    /// Parses a READRSP.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<ReadRsp<'a>> {
        let (w, rest) = read_hdr::<ReadRspWire>(buf, "READRSP header")?;
        let flags = flags_of(&w.base);
        let (connid, padding) = split_multiuse(flags, w.multiuse.get());
        let data = seg_data(rest, w.seg_length.get(), Self::HDR_LEN)?;
        Ok(ReadRsp {
            flags: flags & !CONNID_HDR,
            connid,
            padding,
            recv_id: w.recv_id.get(),
            send_id: w.send_id.get(),
            data,
        })
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        Self::HDR_LEN + self.data.len()
    }

    /// Writes the READRSP.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (flags, multiuse) = join_multiuse(self.flags, self.connid, self.padding);
        let w = ReadRspWire {
            base: base(PacketType::ReadRsp, flags),
            multiuse: U32::new(multiuse),
            recv_id: U32::new(self.recv_id),
            send_id: U32::new(self.send_id),
            seg_length: U64::new(self.data.len() as u64),
        };
        emit_with(buf, &w, &[], self.data)
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct IdsWire {
    base: [u8; 4],
    send_id: U32,
    recv_id: U32,
    multiuse: U32,
}

/// The shared layout of EOR (spec table 4.2) and READ_NACK (spec §4.7):
/// `send_id`, `recv_id`, then the multiuse slot at offset 12.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdsHdr {
    /// Flags other than CONNID_HDR.
    pub flags: u16,
    /// The sender's `send_id` from the RTM.
    pub send_id: u32,
    /// The receiver's operation ID.
    pub recv_id: u32,
    /// Sender's connid.
    pub connid: Option<u32>,
    /// The multiuse slot when it holds no connid.
    pub padding: u32,
}

/// EOR: the receiver finished its RDMA reads (spec §4.1).
pub type Eor = IdsHdr;
/// READ_NACK: the receiver cannot read; fall back to long-CTS (spec §4.7).
pub type ReadNack = IdsHdr;

impl IdsHdr {
    /// Length on the wire.
    pub const LEN: usize = 16;

    /// Parses an EOR or READ_NACK (`ptype` names which, for error texts only).
    pub fn parse_as(ptype: PacketType, buf: &[u8]) -> Result<IdsHdr> {
        let what = if ptype == PacketType::Eor { "EOR header" } else { "READ_NACK header" };
        let (w, _) = read_hdr::<IdsWire>(buf, what)?;
        let flags = flags_of(&w.base);
        let (connid, padding) = split_multiuse(flags, w.multiuse.get());
        Ok(IdsHdr { flags: flags & !CONNID_HDR, send_id: w.send_id.get(), recv_id: w.recv_id.get(), connid, padding })
    }

    /// Writes the packet as `ptype` (EOR or READ_NACK).
    pub fn emit_as(&self, ptype: PacketType, buf: &mut [u8]) -> Result<usize> {
        let (flags, multiuse) = join_multiuse(self.flags, self.connid, self.padding);
        let w = IdsWire {
            base: base(ptype, flags),
            send_id: U32::new(self.send_id),
            recv_id: U32::new(self.recv_id),
            multiuse: U32::new(multiuse),
        };
        emit_with(buf, &w, &[], &[])
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct AtomRspWire {
    base: [u8; 4],
    multiuse: U32,
    reserved: U32,
    recv_id: U32,
    seg_length: U64,
}

/// ATOMRSP: the fetched values of a fetch/compare atomic (spec table 3.15).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtomRsp<'a> {
    /// Flags other than CONNID_HDR.
    pub flags: u16,
    /// Sender's connid.
    pub connid: Option<u32>,
    /// The multiuse slot when it holds no connid.
    pub padding: u32,
    /// The reserved word, as received.
    pub reserved: u32,
    /// The requester's `recv_id` from the RTA.
    pub recv_id: u32,
    /// The fetched values.
    pub data: &'a [u8],
}

impl<'a> AtomRsp<'a> {
    /// Length of the header.
    pub const HDR_LEN: usize = 24;

    /// Parses an ATOMRSP.
    pub fn parse(buf: &'a [u8]) -> Result<AtomRsp<'a>> {
        let (w, rest) = read_hdr::<AtomRspWire>(buf, "ATOMRSP header")?;
        let flags = flags_of(&w.base);
        let (connid, padding) = split_multiuse(flags, w.multiuse.get());
        let data = seg_data(rest, w.seg_length.get(), Self::HDR_LEN)?;
        Ok(AtomRsp {
            flags: flags & !CONNID_HDR,
            connid,
            padding,
            reserved: w.reserved.get(),
            recv_id: w.recv_id.get(),
            data,
        })
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        Self::HDR_LEN + self.data.len()
    }

    /// Writes the ATOMRSP.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (flags, multiuse) = join_multiuse(self.flags, self.connid, self.padding);
        let w = AtomRspWire {
            base: base(PacketType::AtomRsp, flags),
            multiuse: U32::new(multiuse),
            reserved: U32::new(self.reserved),
            recv_id: U32::new(self.recv_id),
            seg_length: U64::new(self.data.len() as u64),
        };
        emit_with(buf, &w, &[], self.data)
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct ReceiptWire {
    base: [u8; 4],
    tx_id: U32,
    msg_id: U32,
    multiuse: U32,
}

/// RECEIPT: the data was delivered (spec §4.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    /// Flags other than CONNID_HDR.
    pub flags: u16,
    /// The sender's `send_id` (libfabric: `tx_id`, wire-facts #18).
    pub send_id: u32,
    /// The message ID of the delivered message.
    pub msg_id: u32,
    /// Sender's connid.
    pub connid: Option<u32>,
    /// The multiuse slot when it holds no connid.
    pub padding: u32,
}

impl Receipt {
    /// Length on the wire.
    pub const LEN: usize = 16;

    /// Parses a RECEIPT.
    pub fn parse(buf: &[u8]) -> Result<Receipt> {
        let (w, _) = read_hdr::<ReceiptWire>(buf, "RECEIPT header")?;
        let flags = flags_of(&w.base);
        let (connid, padding) = split_multiuse(flags, w.multiuse.get());
        Ok(Receipt { flags: flags & !CONNID_HDR, send_id: w.tx_id.get(), msg_id: w.msg_id.get(), connid, padding })
    }

    /// Writes the RECEIPT.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (flags, multiuse) = join_multiuse(self.flags, self.connid, self.padding);
        let w = ReceiptWire {
            base: base(PacketType::Receipt, flags),
            tx_id: U32::new(self.send_id),
            msg_id: U32::new(self.msg_id),
            multiuse: U32::new(multiuse),
        };
        emit_with(buf, &w, &[], &[])
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct PeerErrorWire {
    base: [u8; 4],
    op_id: U32,
    ref_kind: U32,
    prov_errno: U32,
    multiuse: U32,
}

/// PEER_ERROR: the peer reports the failure of a request it refused (to
/// peers that announce [`crate::wire::extra::PEER_ERROR`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerError {
    /// Flags other than CONNID_HDR.
    pub flags: u16,
    /// What `ref_kind` refers to.
    pub op_id: u32,
    /// See [`super::peer_error_ref`].
    pub ref_kind: u32,
    /// The sender's error number (libfabric: its provider error number;
    /// rdm4: its status code, negated).
    pub prov_errno: u32,
    /// Sender's connid.
    pub connid: Option<u32>,
    /// The multiuse slot when it holds no connid.
    pub padding: u32,
}

impl PeerError {
    /// Length on the wire.
    pub const LEN: usize = 20;

    /// Parses a PEER_ERROR.
    pub fn parse(buf: &[u8]) -> Result<PeerError> {
        let (w, _) = read_hdr::<PeerErrorWire>(buf, "PEER_ERROR header")?;
        let flags = flags_of(&w.base);
        let (connid, padding) = split_multiuse(flags, w.multiuse.get());
        Ok(PeerError {
            flags: flags & !CONNID_HDR,
            op_id: w.op_id.get(),
            ref_kind: w.ref_kind.get(),
            prov_errno: w.prov_errno.get(),
            connid,
            padding,
        })
    }

    /// Writes the PEER_ERROR.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (flags, multiuse) = join_multiuse(self.flags, self.connid, self.padding);
        let w = PeerErrorWire {
            base: base(PacketType::PeerError, flags),
            op_id: U32::new(self.op_id),
            ref_kind: U32::new(self.ref_kind),
            prov_errno: U32::new(self.prov_errno),
            multiuse: U32::new(multiuse),
        };
        emit_with(buf, &w, &[], &[])
    }
}
