//! The receive path's view of a REQ packet: checked once, read on demand.

use super::*;

/// A checked view of a REQ packet: `parse` validates everything
/// [`Req::parse_as`] does — lengths, counts, optional header sizes, segment
/// and iov bounds — but only records where things are; the accessors read
/// the bytes on demand. This is the receive path's cheap parse.
#[derive(Debug, Clone, Copy)]
pub struct ReqView<'a> {
    pub(super) buf: &'a [u8],
    pub(super) ptype: PacketType,
    pub(super) layout: &'static Layout,
    pub(super) flags: u16,
    pub(super) rma_count: u32,
    pub(super) read_count: u32,
    /// Offsets of the raw address size, CQ data, connid header, read_iov and data.
    pub(super) raw_at: u32,
    pub(super) cq_at: u32,
    pub(super) connid_at: u32,
    pub(super) read_at: u32,
    pub(super) data_at: u32,
}

impl<'a> ReqView<'a> {
    /// Validates `buf` as a REQ of type `ptype` (from its base header).
    #[inline]
    pub fn parse(ptype: PacketType, buf: &'a [u8]) -> Result<ReqView<'a>> {
        let layout = ptype.req_info().ok_or(WireError::UnknownType(ptype as u8))?.layout;
        parse_view(ptype, layout.id, buf)
    }

    #[inline]
    pub(super) fn get(&self, f: F) -> u64 {
        match self.layout.offs[f as usize] {
            NONE => 0,
            off if f.width() == 8 => le_u64(&self.buf[off as usize..]),
            off => le_u32(&self.buf[off as usize..]).into(),
        }
    }

    /// The packet type.
    pub fn ptype(&self) -> PacketType {
        self.ptype
    }

    /// The flags as received.
    pub fn flags(&self) -> u16 {
        self.flags
    }

    /// `msg_id` (0 for types without one).
    pub fn msg_id(&self) -> u32 {
        self.get(F::MsgId) as u32
    }

    /// `tag` (0 for untagged types).
    pub fn tag(&self) -> u64 {
        self.get(F::Tag)
    }

    /// `msg_length`.
    pub fn msg_length(&self) -> u64 {
        self.get(F::MsgLength)
    }

    /// `seg_offset`.
    pub fn seg_offset(&self) -> u64 {
        self.get(F::SegOffset)
    }

    /// Every fixed field.
    pub fn fields(&self) -> ReqFields {
        let (mut f, mut rma, mut read) = (ReqFields::default(), 0, 0);
        read_fixed(self.layout.id, self.buf, &mut f, &mut rma, &mut read);
        f
    }

    /// The raw address header.
    pub fn raw_addr(&self) -> Option<RawAddrHdr<'a>> {
        (self.flags & req_flags::RAW_ADDR_HDR != 0).then(|| {
            let at = self.raw_at as usize + 4;
            RawAddrHdr { bytes: &self.buf[at..self.cq_at as usize] }
        })
    }

    /// The CQ data header.
    pub fn cq_data(&self) -> Option<u64> {
        (self.flags & req_flags::CQ_DATA_HDR != 0).then(|| le_u64(&self.buf[self.cq_at as usize..]))
    }

    /// The connid header.
    pub fn connid(&self) -> Option<u32> {
        (self.flags & req_flags::CONNID_HDR != 0).then(|| le_u32(&self.buf[self.connid_at as usize..]))
    }

    fn iovs(&self, at: usize, count: u32) -> &'a [RmaIov] {
        <[RmaIov]>::ref_from_prefix_with_elems(&self.buf[at..], count as usize).map_or(&[], |(v, _)| v)
    }

    /// `rma_iov[]`.
    pub fn rma_iov(&self) -> &'a [RmaIov] {
        self.iovs(self.layout.len, self.rma_count)
    }

    /// `read_iov[]`.
    pub fn read_iov(&self) -> &'a [RmaIov] {
        self.iovs(self.read_at as usize, self.read_count)
    }

    /// The application data.
    pub fn data(&self) -> &'a [u8] {
        &self.buf[self.data_at as usize..]
    }

    /// The typed value.
    pub fn to_req(&self) -> Req<'a> {
        Req {
            ptype: self.ptype,
            flags: self.flags,
            fields: self.fields(),
            rma_iov: self.rma_iov(),
            raw_addr: self.raw_addr(),
            cq_data: self.cq_data(),
            connid: self.connid(),
            read_iov: self.read_iov(),
            data: self.data(),
        }
    }
}
