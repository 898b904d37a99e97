//! The data-path RTMs (EAGER and MEDIUM, untagged and tagged) at fixed
//! offsets: the engine's hot path in both directions, beside the general
//! reader and writer of `req.rs`.

use super::req::le_u64;
use super::{check_room, req_flags, PacketType, Req, ReqFields, Result, WireError};

/// The data-path RTMs — EAGER and MEDIUM, untagged and tagged, without a
/// raw address header — read and written at fixed offsets: the engine's
/// hot path in both directions. It checks exactly what [`super::ReqView::parse`]
/// checks for these types and agrees with it on every packet it accepts
/// (tested on the golden vectors and by property tests). Anything else —
/// another type, a raw address header, a malformed packet — parses to
/// `None`, and the caller falls back to [`super::Packet::parse`], which says
/// what is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRtm<'a> {
    /// EAGER_MSGRTM, EAGER_TAGRTM, MEDIUM_MSGRTM or MEDIUM_TAGRTM.
    pub ptype: PacketType,
    /// The flags. On emit the CQ data and connid bits are recomputed from
    /// the options below and the raw address bit is cleared.
    pub flags: u16,
    /// Message ID.
    pub msg_id: u32,
    /// Tag (0 when untagged).
    pub tag: u64,
    /// Medium: the whole message length (eager: not on the wire; parse sets
    /// it to the data length).
    pub msg_length: u64,
    /// Medium: this segment's offset (eager: 0).
    pub seg_offset: u64,
    /// Remote CQ data.
    pub cq_data: Option<u64>,
    /// Sender's connid header.
    pub connid: Option<u32>,
    /// This packet's part of the message.
    pub data: &'a [u8],
}

/// The flags of an eager RTM of type `t` in the usual layout: the default
/// flags and the connid header alone.
const fn usual_flags(t: PacketType) -> u16 {
    t.default_req_flags() | req_flags::CONNID_HDR
}

/// The first four bytes (type, version, flags) of an eager RTM of type `t`
/// in the usual layout.
const fn usual_lead(t: PacketType) -> u32 {
    let f = usual_flags(t);
    u32::from_le_bytes([t as u8, super::PROTOCOL_VERSION, f as u8, (f >> 8) as u8])
}

/// `(type, medium, tagged)` of a data-path RTM type byte.
#[inline(always)]
fn data_rtm_kind(t: u8) -> Option<(PacketType, bool, bool)> {
    match t {
        64 => Some((PacketType::EagerMsgRtm, false, false)),
        65 => Some((PacketType::EagerTagRtm, false, true)),
        66 => Some((PacketType::MediumMsgRtm, true, false)),
        67 => Some((PacketType::MediumTagRtm, true, true)),
        _ => None,
    }
}

impl<'a> DataRtm<'a> {
    /// Reads `buf` if it is a well-formed data-path RTM.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Option<DataRtm<'a>> {
        let (ptype, medium, tagged) = data_rtm_kind(*buf.first()?)?;
        if medium {
            Self::parse_as::<true>(buf, ptype, tagged)
        } else {
            Self::parse_as::<false>(buf, ptype, tagged)
        }
    }

    /// [`DataRtm::parse`] for EAGER_MSGRTM and EAGER_TAGRTM only (`None`
    /// for every other packet): the receiver's hot path.
    #[inline(always)]
    pub fn parse_eager(buf: &'a [u8]) -> Option<DataRtm<'a>> {
        match *buf.first()? {
            64 => Self::parse_as::<false>(buf, PacketType::EagerMsgRtm, false),
            65 => Self::parse_as::<false>(buf, PacketType::EagerTagRtm, true),
            _ => None,
        }
    }

    /// [`DataRtm::parse_eager`] for the one layout an rdm4 sender uses once
    /// it has the receiver's HANDSHAKE: version 4, the type's default request
    /// flags plus the connid header, and nothing else. Its first four bytes
    /// are then one of two words, so one comparison stands for the type,
    /// version and flag checks, and the fields are read with those flags as
    /// constants. `None` for anything else, which `parse_eager` still reads:
    /// this is only the cheaper way to the same result (tested on every
    /// packet of the property tests).
    #[inline(always)]
    pub fn parse_eager_usual(buf: &'a [u8]) -> Option<DataRtm<'a>> {
        const TAG: PacketType = PacketType::EagerTagRtm;
        const MSG: PacketType = PacketType::EagerMsgRtm;
        let lead = u32::from_le_bytes(*buf.first_chunk::<4>()?);
        if lead == usual_lead(TAG) {
            Self::parse_fields::<false>(buf, TAG, true, usual_flags(TAG))
        } else if lead == usual_lead(MSG) {
            Self::parse_fields::<false>(buf, MSG, false, usual_flags(MSG))
        } else {
            None
        }
    }

    /// `parse` once the type is known: every fixed offset is a constant.
    #[inline(always)]
    fn parse_as<const MEDIUM: bool>(buf: &'a [u8], ptype: PacketType, tagged: bool) -> Option<DataRtm<'a>> {
        let &[_, version, f0, f1] = buf.first_chunk::<4>()?;
        let flags = u16::from_le_bytes([f0, f1]);
        if version < super::PROTOCOL_VERSION || flags & req_flags::RAW_ADDR_HDR != 0 {
            return None;
        }
        Self::parse_fields::<MEDIUM>(buf, ptype, tagged, flags)
    }

    /// The fields after the base header checks, by `flags` (which the
    /// caller read, or knows).
    #[inline(always)]
    fn parse_fields<const MEDIUM: bool>(
        buf: &'a [u8],
        ptype: PacketType,
        tagged: bool,
        flags: u16,
    ) -> Option<DataRtm<'a>> {
        if buf.len() > u32::MAX as usize {
            return None;
        }
        let (msg_id, mut rest) = buf.get(4..)?.split_first_chunk::<4>()?;
        let (mut msg_length, mut seg_offset, mut tag) = (0, 0, 0);
        if MEDIUM {
            let (m, r) = rest.split_first_chunk::<16>()?;
            msg_length = le_u64(m);
            seg_offset = le_u64(&m[8..]);
            rest = r;
        }
        if tagged {
            let (t, r) = rest.split_first_chunk::<8>()?;
            tag = u64::from_le_bytes(*t);
            rest = r;
        }
        let mut cq_data = None;
        if flags & req_flags::CQ_DATA_HDR != 0 {
            let (c, r) = rest.split_first_chunk::<8>()?;
            cq_data = Some(u64::from_le_bytes(*c));
            rest = r;
        }
        let mut connid = None;
        if flags & req_flags::CONNID_HDR != 0 {
            let (c, r) = rest.split_first_chunk::<4>()?;
            connid = Some(u32::from_le_bytes(*c));
            rest = r;
        }
        if !MEDIUM {
            msg_length = rest.len() as u64;
        } else if !matches!(seg_offset.checked_add(rest.len() as u64), Some(e) if e <= msg_length) {
            return None;
        }
        Some(DataRtm {
            ptype,
            flags,
            msg_id: u32::from_le_bytes(*msg_id),
            tag,
            msg_length,
            seg_offset,
            cq_data,
            connid,
            data: rest,
        })
    }

    /// EAGER_TAGRTM or MEDIUM_TAGRTM.
    pub fn tagged(&self) -> bool {
        data_rtm_kind(self.ptype as u8).is_some_and(|(_, _, t)| t)
    }

    /// MEDIUM_MSGRTM or MEDIUM_TAGRTM.
    pub fn medium(&self) -> bool {
        data_rtm_kind(self.ptype as u8).is_some_and(|(_, m, _)| m)
    }

    /// Header bytes of a data-path RTM of this shape.
    #[inline(always)]
    pub const fn hdr_len(medium: bool, tagged: bool, cq_data: bool, connid: bool) -> usize {
        8 + 16 * medium as usize + 8 * tagged as usize + 8 * cq_data as usize + 4 * connid as usize
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        let (_, medium, tagged) = data_rtm_kind(self.ptype as u8).unwrap_or((self.ptype, false, false));
        Self::hdr_len(medium, tagged, self.cq_data.is_some(), self.connid.is_some()) + self.data.len()
    }

    /// Writes the packet at the start of `buf` — the same bytes
    /// [`Req::emit`] writes for the same values — and returns its length.
    /// Fails like `Req::emit` does: a type that is not a data-path RTM, a
    /// medium segment beyond `msg_length`, or too small a buffer.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        match self.ptype {
            PacketType::EagerMsgRtm => self.emit_as::<false, false>(buf),
            PacketType::EagerTagRtm => self.emit_as::<false, true>(buf),
            PacketType::MediumMsgRtm => self.emit_as::<true, false>(buf),
            PacketType::MediumTagRtm => self.emit_as::<true, true>(buf),
            t => Err(WireError::BadField { what: "data-path RTM type", value: (t as u8).into() }),
        }
    }

    /// `emit` for one type: every fixed offset is a constant.
    #[inline(always)]
    fn emit_as<const MEDIUM: bool, const TAGGED: bool>(&self, buf: &mut [u8]) -> Result<usize> {
        let fixed_len = Self::hdr_len(MEDIUM, TAGGED, false, false);
        if MEDIUM && !matches!(self.seg_offset.checked_add(self.data.len() as u64), Some(e) if e <= self.msg_length) {
            return Err(WireError::LengthOverflow { what: "seg_offset + data beyond msg_length" });
        }
        let hdr_len = Self::hdr_len(MEDIUM, TAGGED, self.cq_data.is_some(), self.connid.is_some());
        let total = hdr_len + self.data.len();
        check_room(buf, total)?;
        let (hdr, rest) = buf.split_at_mut(hdr_len);
        let mut flags = self.flags & !req_flags::OPT_HDR_MASK;
        if MEDIUM {
            hdr[8..16].copy_from_slice(&self.msg_length.to_le_bytes());
            hdr[16..24].copy_from_slice(&self.seg_offset.to_le_bytes());
        }
        if TAGGED {
            hdr[fixed_len - 8..fixed_len].copy_from_slice(&self.tag.to_le_bytes());
        }
        let mut pos = fixed_len;
        if let Some(c) = self.cq_data {
            flags |= req_flags::CQ_DATA_HDR;
            hdr[pos..pos + 8].copy_from_slice(&c.to_le_bytes());
            pos += 8;
        }
        if let Some(c) = self.connid {
            flags |= req_flags::CONNID_HDR;
            hdr[pos..pos + 4].copy_from_slice(&c.to_le_bytes());
        }
        crate::mem::copy_slice(&mut rest[..self.data.len()], self.data);
        // type, version, flags and msg_id in one word: one store.
        let first = u64::from(self.ptype as u8)
            | u64::from(super::PROTOCOL_VERSION) << 8
            | u64::from(flags) << 16
            | u64::from(self.msg_id) << 32;
        hdr[..8].copy_from_slice(&first.to_le_bytes());
        Ok(total)
    }

    /// Header bytes of an eager RTM with the given optional headers.
    #[inline(always)]
    pub const fn eager_hdr_len(tagged: bool, cq_data: bool, connid: bool) -> usize {
        Self::hdr_len(false, tagged, cq_data, connid)
    }

    /// Writes an EAGER_MSGRTM (`tagged` false) or EAGER_TAGRTM packet with
    /// the default request flags at the start of `out` — [`DataRtm::emit`]
    /// with the type fixed by the caller, so without its type dispatch —
    /// and returns its length; 0 when `out` is too small. The sender's hot
    /// path.
    #[inline(always)]
    pub fn emit_eager(
        out: &mut [u8],
        tagged: bool,
        msg_id: u32,
        tag: u64,
        cq_data: Option<u64>,
        connid: Option<u32>,
        data: &[u8],
    ) -> usize {
        // Two copies of the writer: the usual layout's (see
        // `parse_eager_usual`), its optional headers constants, and any other.
        if let (None, Some(c)) = (cq_data, connid) {
            return Self::emit_eager_with(out, tagged, msg_id, tag, None, Some(c), data);
        }
        Self::emit_eager_with(out, tagged, msg_id, tag, cq_data, connid, data)
    }

    /// [`DataRtm::emit_eager`] itself; a function, not a closure over the
    /// arguments: as a closure its two uses lose the constants
    /// (docs/performance.md, "Eager fast path and inject").
    #[inline(always)]
    fn emit_eager_with(
        out: &mut [u8],
        tagged: bool,
        msg_id: u32,
        tag: u64,
        cq_data: Option<u64>,
        connid: Option<u32>,
        data: &[u8],
    ) -> usize {
        const TAG: (PacketType, u16) = (PacketType::EagerTagRtm, PacketType::EagerTagRtm.default_req_flags());
        const MSG: (PacketType, u16) = (PacketType::EagerMsgRtm, PacketType::EagerMsgRtm.default_req_flags());
        let ((ptype, flags), len) = (if tagged { TAG } else { MSG }, data.len() as u64);
        let d = DataRtm { ptype, flags, msg_id, tag, msg_length: len, seg_offset: 0, cq_data, connid, data };
        let n = if tagged { d.emit_as::<false, true>(out) } else { d.emit_as::<false, false>(out) };
        n.unwrap_or(0)
    }

    /// The general typed value.
    pub fn to_req(&self) -> Req<'a> {
        Req {
            ptype: self.ptype,
            flags: self.flags,
            fields: ReqFields {
                msg_id: self.msg_id,
                tag: self.tag,
                msg_length: if self.medium() { self.msg_length } else { 0 },
                seg_offset: self.seg_offset,
                ..ReqFields::default()
            },
            rma_iov: &[],
            raw_addr: None,
            cq_data: self.cq_data,
            connid: self.connid,
            read_iov: &[],
            data: self.data,
        }
    }
}
