//! REQ packets (spec §3.1, §4): every RTM, RTW, RTR and RTA type.
//!
//! A REQ packet is its mandatory header (fixed fields, then `rma_iov[]` for
//! RTW/RTR/RTA), the optional headers in flag order — raw address, CQ data,
//! connid — then `read_iov[]` for long-read and runting-read types, then the
//! application data (spec §3.1; wire-facts #13, #16, #17).
//!
//! The fixed fields of all types are one flat [`ReqFields`]; which of them a
//! type carries, and where, is the type's [`Layout`] in the table of
//! `types.rs`. Parse and emit are both driven by that one table, so the two
//! cannot disagree. Fields a type does not carry read as zero and are not
//! written.

use zerocopy::{FromBytes, IntoBytes};

mod view;

pub use view::ReqView;

use super::{check_len, check_room, put_base, req_flags, PacketType, RawAddr, Result, RmaIov, WireError};

/// A fixed field of some REQ type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum F {
    MsgId = 0,
    Tag,
    MsgLength,
    SegOffset,
    SendId,
    RecvId,
    CreditRequest,
    /// RTR `recv_length`, a u32 (wire-facts #3).
    RecvLength32,
    RuntLength,
    AtomicDatatype,
    AtomicOp,
    Padding,
    RmaIovCount,
    ReadIovCount,
}

/// Number of [`F`] variants.
const F_COUNT: usize = 14;
/// `Layout::offs` of a field the type does not carry.
const NONE: u8 = u8::MAX;

impl F {
    /// libfabric's member name.
    const fn name(self) -> &'static str {
        match self {
            F::MsgId => "msg_id",
            F::Tag => "tag",
            F::MsgLength => "msg_length",
            F::SegOffset => "seg_offset",
            F::SendId => "send_id",
            F::RecvId => "recv_id",
            F::CreditRequest => "credit_request",
            F::RecvLength32 => "recv_length",
            F::RuntLength => "runt_length",
            F::AtomicDatatype => "atomic_datatype",
            F::AtomicOp => "atomic_op",
            F::Padding => "padding",
            F::RmaIovCount => "rma_iov_count",
            F::ReadIovCount => "read_iov_count",
        }
    }

    const fn width(self) -> usize {
        match self {
            F::Tag | F::MsgLength | F::SegOffset | F::RuntLength => 8,
            F::MsgId
            | F::SendId
            | F::RecvId
            | F::CreditRequest
            | F::RecvLength32
            | F::AtomicDatatype
            | F::AtomicOp
            | F::Padding
            | F::RmaIovCount
            | F::ReadIovCount => 4,
        }
    }
}

/// Where the fixed fields of one REQ type lie (opaque; see [`PacketType::category`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    id: LayoutId,
    len: usize,
    /// Offset of each field ([`F`] as index), `NONE` when the type lacks it.
    offs: [u8; F_COUNT],
    fields: &'static [(F, u8)],
    rma: bool,
    read: bool,
    seg: bool,
    runt: bool,
}

impl super::ReqInfo {
    /// Length of the type's fixed header (before its optional headers).
    pub fn fixed_len(&self) -> usize {
        self.layout.len
    }

    /// The names of the type's fixed fields in wire order (libfabric's
    /// member names: `msg_id`, `tag`, `msg_length`, `rma_iov_count`, ...),
    /// for tools that show packets (the pcap dissector's test).
    pub fn field_names(&self) -> impl Iterator<Item = &'static str> {
        self.layout.fields.iter().map(|(f, _)| f.name())
    }
}

impl Layout {
    const fn new(id: LayoutId, fields: &'static [(F, u8)]) -> Layout {
        let mut offs = [NONE; F_COUNT];
        let mut len = 4;
        let mut covered = 4;
        let (mut rma, mut read, mut seg, mut runt) = (false, false, false, false);
        let mut i = 0;
        while i < fields.len() {
            let (f, off) = fields[i];
            offs[f as usize] = off;
            let end = off as usize + f.width();
            covered += f.width();
            if end > len {
                len = end;
            }
            match f {
                F::RmaIovCount => rma = true,
                F::ReadIovCount => read = true,
                F::SegOffset => seg = true,
                F::RuntLength => runt = true,
                _ => {}
            }
            i += 1;
        }
        // emit writes only the fields: a layout must cover every byte once.
        assert!(covered == len, "REQ layout with a gap or an overlap");
        Layout { id, len, offs, fields, rma, read, seg, runt }
    }
}

/// Reads the fixed fields of `l` from `buf` (at least `l.len` bytes).
/// Inlined with a constant layout, the loop unrolls into straight loads.
#[inline(always)]
fn read_with(l: &'static Layout, buf: &[u8], out: &mut ReqFields, rma: &mut u64, read: &mut u64) {
    for &(f, off) in l.fields {
        let at = buf.get(off as usize..).unwrap_or(&[]);
        let v = if f.width() == 8 { le_u64(at) } else { le_u32(at).into() };
        out.set(f, v, rma, read);
    }
}

/// Writes the fixed fields of `l` into `buf` (at least `l.len` bytes).
#[inline(always)]
fn write_with(l: &'static Layout, buf: &mut [u8], fields: &ReqFields, rma: u32, read: u32) {
    for &(f, off) in l.fields {
        let off = off as usize;
        let v = fields.get(f, rma, read);
        if f.width() == 8 {
            buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
        } else {
            buf[off..off + 4].copy_from_slice(&(v as u32).to_le_bytes());
        }
    }
}

/// Declares the layouts (named after the libfabric header structs,
/// wire-facts "Header sizes") and the dispatch that specialises parse and
/// emit for each, from one list.
macro_rules! layouts {
    ($( $(#[$doc:meta])* $name:ident = [$( ($f:ident, $off:literal) ),* $(,)?]; )*) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum LayoutId { $( $name ),* }

        pub(crate) mod layouts {
            use super::{Layout, LayoutId, F::*};
            $( $(#[$doc])* pub const $name: Layout = Layout::new(LayoutId::$name, &[$( ($f, $off) ),*]); )*
        }

        fn read_fixed(id: LayoutId, buf: &[u8], out: &mut ReqFields, rma: &mut u64, read: &mut u64) {
            match id {
                $( LayoutId::$name => read_with(&layouts::$name, buf, out, rma, read), )*
            }
        }

        /// `ReqView::parse` and `Req::emit` specialised for each layout: one
        /// function per layout, in which every offset, length and layout
        /// property is a constant. (Kept out of line so that the optimiser
        /// cannot fold the copies back into one body reading the table.)
        #[allow(non_snake_case)]
        mod specialised {
            use super::*;
            $(
                pub(super) mod $name {
                    use super::*;
                    #[inline(never)]
                    pub(in super::super) fn parse(ptype: PacketType, buf: &[u8]) -> Result<ReqView<'_>> {
                        parse_view_with(&layouts::$name, ptype, buf)
                    }
                    #[inline(never)]
                    pub(in super::super) fn emit(req: &Req<'_>, buf: &mut [u8]) -> Result<usize> {
                        emit_with(&layouts::$name, req, buf)
                    }
                }
            )*
        }

        fn parse_view(ptype: PacketType, id: LayoutId, buf: &[u8]) -> Result<ReqView<'_>> {
            match id {
                $( LayoutId::$name => specialised::$name::parse(ptype, buf), )*
            }
        }

        fn emit_req(id: LayoutId, req: &Req<'_>, buf: &mut [u8]) -> Result<usize> {
            match id {
                $( LayoutId::$name => specialised::$name::emit(req, buf), )*
            }
        }
    };
}

layouts! {
    EAGER_MSGRTM = [(MsgId, 4)];
    EAGER_TAGRTM = [(MsgId, 4), (Tag, 8)];
    /// wire-facts #2: the first u64 is the whole message length.
    MEDIUM_MSGRTM = [(MsgId, 4), (MsgLength, 8), (SegOffset, 16)];
    MEDIUM_TAGRTM = [(MsgId, 4), (MsgLength, 8), (SegOffset, 16), (Tag, 24)];
    LONGCTS_MSGRTM = [(MsgId, 4), (MsgLength, 8), (SendId, 16), (CreditRequest, 20)];
    LONGCTS_TAGRTM = [(MsgId, 4), (MsgLength, 8), (SendId, 16), (CreditRequest, 20), (Tag, 24)];
    LONGREAD_MSGRTM = [(MsgId, 4), (MsgLength, 8), (SendId, 16), (ReadIovCount, 20)];
    /// wire-facts #4: the tag is the last member.
    LONGREAD_TAGRTM = [(MsgId, 4), (MsgLength, 8), (SendId, 16), (ReadIovCount, 20), (Tag, 24)];
    /// wire-facts #8: the DC layouts.
    DC_EAGER_MSGRTM = [(MsgId, 4), (SendId, 8), (Padding, 12)];
    DC_EAGER_TAGRTM = [(MsgId, 4), (SendId, 8), (Padding, 12), (Tag, 16)];
    DC_MEDIUM_MSGRTM = [(MsgId, 4), (SendId, 8), (Padding, 12), (MsgLength, 16), (SegOffset, 24)];
    DC_MEDIUM_TAGRTM = [(MsgId, 4), (SendId, 8), (Padding, 12), (MsgLength, 16), (SegOffset, 24), (Tag, 32)];
    /// wire-facts #5: runting types.
    RUNTCTS_MSGRTM = [(MsgId, 4), (MsgLength, 8), (SendId, 16), (CreditRequest, 20), (SegOffset, 24), (RuntLength, 32)];
    RUNTCTS_TAGRTM = [
        (MsgId, 4), (MsgLength, 8), (SendId, 16), (CreditRequest, 20), (SegOffset, 24), (RuntLength, 32), (Tag, 40),
    ];
    RUNTREAD_MSGRTM = [(MsgId, 4), (MsgLength, 8), (SendId, 16), (ReadIovCount, 20), (SegOffset, 24), (RuntLength, 32)];
    RUNTREAD_TAGRTM = [
        (MsgId, 4), (MsgLength, 8), (SendId, 16), (ReadIovCount, 20), (SegOffset, 24), (RuntLength, 32), (Tag, 40),
    ];
    EAGER_RTW = [(RmaIovCount, 4)];
    DC_EAGER_RTW = [(RmaIovCount, 4), (SendId, 8), (Padding, 12)];
    LONGCTS_RTW = [(RmaIovCount, 4), (MsgLength, 8), (SendId, 16), (CreditRequest, 20)];
    LONGREAD_RTW = [(RmaIovCount, 4), (MsgLength, 8), (SendId, 16), (ReadIovCount, 20)];
    /// wire-facts #17: rma_iov right after the fixed fields, as the structs say.
    RUNTCTS_RTW = [(RmaIovCount, 4), (MsgLength, 8), (SendId, 16), (CreditRequest, 20), (SegOffset, 24), (RuntLength, 32)];
    RUNTREAD_RTW = [(RmaIovCount, 4), (MsgLength, 8), (SendId, 16), (ReadIovCount, 20), (SegOffset, 24), (RuntLength, 32)];
    /// wire-facts #3: SHORT_RTR and LONGCTS_RTR share one struct.
    RTR = [(RmaIovCount, 4), (MsgLength, 8), (RecvId, 16), (RecvLength32, 20)];
    /// wire-facts #9: the last u32 of an RTA is a union.
    WRITE_RTA = [(MsgId, 4), (RmaIovCount, 8), (AtomicDatatype, 12), (AtomicOp, 16), (Padding, 20)];
    FETCH_RTA = [(MsgId, 4), (RmaIovCount, 8), (AtomicDatatype, 12), (AtomicOp, 16), (RecvId, 20)];
    DC_WRITE_RTA = [(MsgId, 4), (RmaIovCount, 8), (AtomicDatatype, 12), (AtomicOp, 16), (SendId, 20)];
}

/// The fixed fields of every REQ type, flat. A type carries only some of them
/// (see the module docs); `rma_iov_count` and `read_iov_count` are not here
/// because they are the lengths of [`Req::rma_iov`] and [`Req::read_iov`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReqFields {
    /// Message ID: send order of RTMs and RTAs (spec §3.2).
    pub msg_id: u32,
    /// Tag of a tagged RTM.
    pub tag: u64,
    /// Length of the whole message or RMA buffer.
    pub msg_length: u64,
    /// Offset of this packet's data in the message (medium, runting).
    pub seg_offset: u64,
    /// The requester's operation ID, echoed in CTS / EOR / RECEIPT / READ_NACK.
    pub send_id: u32,
    /// The requester's receive-operation ID (RTR, FETCH/COMPARE RTA).
    pub recv_id: u32,
    /// Number of CTSDATA packets the sender would like to send (long-CTS).
    pub credit_request: u32,
    /// RTR: bytes the requester is ready to receive (a u32 on the wire).
    pub recv_length: u32,
    /// Runting read: total runt bytes of the message (wire-facts #16).
    pub runt_length: u64,
    /// Atomic datatype (libfabric `enum fi_datatype`).
    pub atomic_datatype: u32,
    /// Atomic operation (libfabric `enum fi_op`).
    pub atomic_op: u32,
    /// The padding word of DC eager types and WRITE_RTA, as received.
    pub padding: u32,
}

impl ReqFields {
    #[inline(always)]
    fn set(&mut self, f: F, v: u64, rma: &mut u64, read: &mut u64) {
        // Width-4 fields were read as u32, so the casts below are exact.
        match f {
            F::MsgId => self.msg_id = v as u32,
            F::Tag => self.tag = v,
            F::MsgLength => self.msg_length = v,
            F::SegOffset => self.seg_offset = v,
            F::SendId => self.send_id = v as u32,
            F::RecvId => self.recv_id = v as u32,
            F::CreditRequest => self.credit_request = v as u32,
            F::RecvLength32 => self.recv_length = v as u32,
            F::RuntLength => self.runt_length = v,
            F::AtomicDatatype => self.atomic_datatype = v as u32,
            F::AtomicOp => self.atomic_op = v as u32,
            F::Padding => self.padding = v as u32,
            F::RmaIovCount => *rma = v,
            F::ReadIovCount => *read = v,
        }
    }

    #[inline(always)]
    fn get(&self, f: F, rma: u32, read: u32) -> u64 {
        match f {
            F::MsgId => self.msg_id.into(),
            F::Tag => self.tag,
            F::MsgLength => self.msg_length,
            F::SegOffset => self.seg_offset,
            F::SendId => self.send_id.into(),
            F::RecvId => self.recv_id.into(),
            F::CreditRequest => self.credit_request.into(),
            F::RecvLength32 => self.recv_length.into(),
            F::RuntLength => self.runt_length,
            F::AtomicDatatype => self.atomic_datatype.into(),
            F::AtomicOp => self.atomic_op.into(),
            F::Padding => self.padding.into(),
            F::RmaIovCount => rma.into(),
            F::ReadIovCount => read.into(),
        }
    }
}

/// The REQ raw-address optional header: `size` then `size` bytes, of which the
/// first 32 are the sender's [`RawAddr`]. libfabric sends `size = 36`
/// (wire-facts #12); any size from 32 up is accepted and honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawAddrHdr<'a> {
    bytes: &'a [u8],
}

impl<'a> RawAddrHdr<'a> {
    /// A header whose body is `bytes` (at least 32 bytes: the address first).
    pub fn new(bytes: &'a [u8]) -> Result<RawAddrHdr<'a>> {
        let size = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        if bytes.len() < RawAddr::LEN || size == u32::MAX {
            return Err(WireError::OptHeaderSize { what: "raw address", size });
        }
        Ok(RawAddrHdr { bytes })
    }

    /// The sender's raw address.
    pub fn addr(&self) -> RawAddr {
        // `new` and `parse` guarantee at least 32 bytes.
        RawAddr::from_bytes(self.bytes).unwrap_or_else(|| RawAddr::new([0; 16], 0, 0))
    }

    /// The whole body, trailing pad included.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The `size` field.
    pub fn size(&self) -> u32 {
        self.bytes.len() as u32
    }

    /// Bytes the header takes on the wire (`size` field and address).
    pub fn wire_len(&self) -> usize {
        4 + self.bytes.len()
    }
}

/// Any REQ packet (spec §3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req<'a> {
    /// The packet type (a REQ type).
    pub ptype: PacketType,
    /// The flags. On emit the optional-header bits (raw address, CQ data,
    /// connid) are recomputed from the options below; the rest (MSG, TAGGED,
    /// RMA, ATOMIC, READ_NACK, unknown bits) are written as given.
    pub flags: u16,
    /// The fixed fields.
    pub fields: ReqFields,
    /// RTW / RTR / RTA: the responder's buffers.
    pub rma_iov: &'a [RmaIov],
    /// The sender's raw address (before the handshake, spec §2.2).
    pub raw_addr: Option<RawAddrHdr<'a>>,
    /// Remote CQ data.
    pub cq_data: Option<u64>,
    /// The sender's connid header (spec §4.4).
    pub connid: Option<u32>,
    /// Long-read / runting read: the sender's buffers to read.
    pub read_iov: &'a [RmaIov],
    /// Application data (for COMPARE_RTA: the operands then the compare values).
    pub data: &'a [u8],
}

impl Req<'static> {
    /// A REQ of type `ptype` with libfabric's default flags, zero fields and
    /// nothing optional.
    pub fn new(ptype: PacketType) -> Req<'static> {
        Req {
            ptype,
            flags: ptype.default_req_flags(),
            fields: ReqFields::default(),
            rma_iov: &[],
            raw_addr: None,
            cq_data: None,
            connid: None,
            read_iov: &[],
            data: &[],
        }
    }
}

#[inline]
fn take_iovs<'a>(buf: &'a [u8], pos: &mut usize, count: u64, what: &'static str) -> Result<&'a [RmaIov]> {
    if count == 0 {
        return Ok(&[]);
    }
    let rest = buf.get(*pos..).unwrap_or(&[]);
    if count.saturating_mul(RmaIov::LEN as u64) > rest.len() as u64 {
        return Err(WireError::CountTooLarge { what, count, room: rest.len() });
    }
    let (iovs, _) = <[RmaIov]>::ref_from_prefix_with_elems(rest, count as usize)
        .map_err(|_| WireError::CountTooLarge { what, count, room: rest.len() })?;
    *pos += iovs.len() * RmaIov::LEN;
    Ok(iovs)
}

#[inline]
fn take<'a>(buf: &'a [u8], pos: &mut usize, n: usize, what: &'static str) -> Result<&'a [u8]> {
    let end = *pos + n;
    check_len(buf, end, what)?;
    let s = &buf[*pos..end];
    *pos = end;
    Ok(s)
}

fn le_u32(b: &[u8]) -> u32 {
    b.first_chunk::<4>().map_or(0, |a| u32::from_le_bytes(*a))
}

pub(super) fn le_u64(b: &[u8]) -> u64 {
    b.first_chunk::<8>().map_or(0, |a| u64::from_le_bytes(*a))
}

/// The body of [`ReqView::parse`] for one layout.
#[inline(always)]
fn parse_view_with<'a>(layout: &'static Layout, ptype: PacketType, buf: &'a [u8]) -> Result<ReqView<'a>> {
    check_len(buf, layout.len, "REQ mandatory header")?;
    if buf.len() > u32::MAX as usize {
        return Err(WireError::LengthOverflow { what: "packet length" });
    }
    let flags = u16::from_le_bytes([buf[2], buf[3]]);
    let read32 = |f: F| match layout.offs[f as usize] {
        NONE => 0,
        off => le_u32(&buf[off as usize..]),
    };
    let (rma_count, read_count) = (read32(F::RmaIovCount), read32(F::ReadIovCount));
    let mut pos = layout.len;
    take_iovs(buf, &mut pos, rma_count.into(), "rma_iov")?;
    let raw_at = pos as u32;
    if flags & req_flags::RAW_ADDR_HDR != 0 {
        let size = le_u32(take(buf, &mut pos, 4, "raw address header size")?);
        if (size as usize) < RawAddr::LEN {
            return Err(WireError::OptHeaderSize { what: "raw address", size });
        }
        take(buf, &mut pos, size as usize, "raw address header")?;
    }
    let cq_at = pos as u32;
    if flags & req_flags::CQ_DATA_HDR != 0 {
        take(buf, &mut pos, 8, "CQ data header")?;
    }
    let connid_at = pos as u32;
    if flags & req_flags::CONNID_HDR != 0 {
        take(buf, &mut pos, 4, "connid header")?;
    }
    let read_at = pos as u32;
    take_iovs(buf, &mut pos, read_count.into(), "read_iov")?;
    let v = ReqView {
        buf,
        ptype,
        layout,
        flags,
        rma_count,
        read_count,
        raw_at,
        cq_at,
        connid_at,
        read_at,
        data_at: pos as u32,
    };
    if layout.seg {
        let end = v.get(F::SegOffset).checked_add((buf.len() - pos) as u64);
        if !matches!(end, Some(e) if e <= v.get(F::MsgLength)) {
            return Err(WireError::LengthOverflow { what: "seg_offset + data beyond msg_length" });
        }
    }
    if layout.runt && v.get(F::RuntLength) > v.get(F::MsgLength) {
        return Err(WireError::LengthOverflow { what: "runt_length beyond msg_length" });
    }
    Ok(v)
}

/// The body of [`Req::emit`] for one layout.
#[inline(always)]
fn emit_with(layout: &'static Layout, req: &Req<'_>, buf: &mut [u8]) -> Result<usize> {
    if (!layout.rma && !req.rma_iov.is_empty()) || (!layout.read && !req.read_iov.is_empty()) {
        return Err(WireError::BadField { what: "iov list on a type without one", value: 0 });
    }
    let rma = u32::try_from(req.rma_iov.len()).map_err(|_| WireError::LengthOverflow { what: "rma_iov_count" })?;
    let read = u32::try_from(req.read_iov.len()).map_err(|_| WireError::LengthOverflow { what: "read_iov_count" })?;
    // Build only what parse accepts (the same rules as `ReqView::parse`).
    let f = &req.fields;
    if layout.seg && !matches!(f.seg_offset.checked_add(req.data.len() as u64), Some(e) if e <= f.msg_length) {
        return Err(WireError::LengthOverflow { what: "seg_offset + data beyond msg_length" });
    }
    if layout.runt && f.runt_length > f.msg_length {
        return Err(WireError::LengthOverflow { what: "runt_length beyond msg_length" });
    }
    let rma_bytes = req.rma_iov.as_bytes();
    let read_bytes = req.read_iov.as_bytes();
    let opt = req.opt_hdr_len();
    let total = layout.len + rma_bytes.len() + opt + read_bytes.len() + req.data.len();
    check_room(buf, total)?;
    let buf = &mut buf[..total];
    // The layouts leave no gaps (checked when they are built), so every
    // header byte is written below.
    put_base(buf, req.ptype, req.wire_flags());
    write_with(layout, buf, &req.fields, rma, read);
    let mut pos = layout.len;
    buf[pos..pos + rma_bytes.len()].copy_from_slice(rma_bytes);
    pos += rma_bytes.len();
    if opt > 0 {
        if let Some(r) = req.raw_addr {
            buf[pos..pos + 4].copy_from_slice(&r.size().to_le_bytes());
            buf[pos + 4..pos + 4 + r.bytes.len()].copy_from_slice(r.bytes);
            pos += 4 + r.bytes.len();
        }
        if let Some(c) = req.cq_data {
            buf[pos..pos + 8].copy_from_slice(&c.to_le_bytes());
            pos += 8;
        }
        if let Some(c) = req.connid {
            buf[pos..pos + 4].copy_from_slice(&c.to_le_bytes());
            pos += 4;
        }
    }
    buf[pos..pos + read_bytes.len()].copy_from_slice(read_bytes);
    pos += read_bytes.len();
    buf[pos..].copy_from_slice(req.data);
    Ok(total)
}

impl<'a> Req<'a> {
    fn layout(&self) -> Result<&'static Layout> {
        self.ptype.req_info().map(|i| i.layout).ok_or(WireError::UnknownType(self.ptype as u8))
    }

    /// Parses `buf` as a REQ packet of type `ptype` (from the base header).
    pub fn parse_as(ptype: PacketType, buf: &'a [u8]) -> Result<Req<'a>> {
        ReqView::parse(ptype, buf).map(|v| v.to_req())
    }

    /// The connid identifying the sender: the raw address's when present,
    /// else the connid header's (wire-facts #13).
    pub fn sender_connid(&self) -> Option<u32> {
        self.raw_addr.map(|r| r.addr().connid()).or(self.connid)
    }

    /// Length of the mandatory header, `rma_iov[]` included.
    pub fn hdr_len(&self) -> usize {
        self.layout().map_or(0, |l| l.len) + self.rma_iov.len() * RmaIov::LEN
    }

    /// Length of the optional headers.
    pub fn opt_hdr_len(&self) -> usize {
        self.raw_addr.map_or(0, |r| r.wire_len()) + self.cq_data.map_or(0, |_| 8) + self.connid.map_or(0, |_| 4)
    }

    /// Where the application data starts (after `read_iov[]` where there is one).
    pub fn app_data_offset(&self) -> usize {
        self.hdr_len() + self.opt_hdr_len() + self.read_iov.len() * RmaIov::LEN
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        self.app_data_offset() + self.data.len()
    }

    /// The flags as `emit` writes them.
    pub fn wire_flags(&self) -> u16 {
        let mut f = self.flags & !req_flags::OPT_HDR_MASK;
        if self.raw_addr.is_some() {
            f |= req_flags::RAW_ADDR_HDR;
        }
        if self.cq_data.is_some() {
            f |= req_flags::CQ_DATA_HDR;
        }
        if self.connid.is_some() {
            f |= req_flags::CONNID_HDR;
        }
        f
    }

    /// Writes the packet at the start of `buf`; returns its length.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        emit_req(self.layout()?.id, self, buf)
    }
}
