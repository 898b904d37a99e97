//! HANDSHAKE (spec §2.1, table 2.2, and the newer optional fields of the
//! reference implementation: the legacy user-recv-QP block and HMEM p2p,
//! wire-facts #15 and "If you work from an older copy").
//!
//! Layout: base header, `nextra_p3` u32, `extra_info[nextra_p3 - 3]` u64, then
//! 8-byte optional blocks in this order, each present when its flag is set:
//! connid (u32 + pad), host_id (u64), device_version (u32 + reserved),
//! user-recv-QP (qpn u32, qkey u32), HMEM p2p (u8 + reserved). Pad bytes are
//! ignored on parse and written as zero. Unknown flag bits are kept in `flags`
//! and their fields (which would follow the known ones) are not read.

use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, IntoBytes};

use super::{check_len, check_room, handshake_flags as hf, put_base, PacketType, Result, WireError};

/// The legacy user-recv-QP block of a HANDSHAKE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserRecvQp {
    /// QP number.
    pub qpn: u32,
    /// QP key.
    pub qkey: u32,
}

/// A HANDSHAKE packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake<'a> {
    /// Flags other than those of the known optional fields (kept as received).
    pub flags: u16,
    /// The extra feature/request words; `nextra_p3` is their count plus 3.
    pub extra_info: &'a [U64],
    /// The sender's connid.
    pub connid: Option<u32>,
    /// The sender's host ID (libfabric omits it when zero).
    pub host_id: Option<u64>,
    /// The sender's device version.
    pub device_version: Option<u32>,
    /// The legacy user-recv-QP block.
    pub user_recv_qp: Option<UserRecvQp>,
    /// HMEM p2p support.
    pub p2p_supported: Option<u8>,
}

impl<'a> Handshake<'a> {
    /// Length of the fixed part (base header and `nextra_p3`).
    pub const FIXED_LEN: usize = 8;

    /// A handshake carrying `extra_info` and nothing optional.
    pub fn new(extra_info: &'a [U64]) -> Handshake<'a> {
        Handshake {
            flags: 0,
            extra_info,
            connid: None,
            host_id: None,
            device_version: None,
            user_recv_qp: None,
            p2p_supported: None,
        }
    }

    /// The `nextra_p3` field.
    pub fn nextra_p3(&self) -> u32 {
        self.extra_info.len() as u32 + 3
    }

    /// True when the sender set extra feature/request bit `id` (spec §2.1: bit
    /// `id % 64` of word `id / 64`).
    pub fn has_extra(&self, id: u32) -> bool {
        self.extra_info.get((id / 64) as usize).is_some_and(|w| w.get() & (1u64 << (id % 64)) != 0)
    }

    /// Parses a HANDSHAKE.
    pub fn parse(buf: &'a [u8]) -> Result<Handshake<'a>> {
        check_len(buf, Self::FIXED_LEN, "HANDSHAKE header")?;
        let wire_flags = u16::from_le_bytes([buf[2], buf[3]]);
        let nextra_p3 = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let count =
            nextra_p3.checked_sub(3).ok_or(WireError::BadField { what: "nextra_p3", value: nextra_p3.into() })?;
        let rest = &buf[Self::FIXED_LEN..];
        let (extra_info, mut opt) = <[U64]>::ref_from_prefix_with_elems(rest, count as usize)
            .map_err(|_| WireError::CountTooLarge { what: "extra_info", count: count.into(), room: rest.len() })?;
        let mut field = |flag: u16, what: &'static str| -> Result<Option<[u8; 8]>> {
            if wire_flags & flag == 0 {
                return Ok(None);
            }
            let have = buf.len() - opt.len();
            let (block, tail) =
                opt.split_first_chunk::<8>().ok_or(WireError::Truncated { what, need: have + 8, have: buf.len() })?;
            opt = tail;
            Ok(Some(*block))
        };
        let lo32 = |b: [u8; 8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let connid = field(hf::CONNID_HDR, "HANDSHAKE connid")?.map(lo32);
        let host_id = field(hf::HOST_ID_HDR, "HANDSHAKE host_id")?.map(u64::from_le_bytes);
        let device_version = field(hf::DEVICE_VERSION_HDR, "HANDSHAKE device_version")?.map(lo32);
        let user_recv_qp = field(hf::USER_RECV_QP_HDR, "HANDSHAKE user recv QP")?
            .map(|b| UserRecvQp { qpn: lo32(b), qkey: u32::from_le_bytes([b[4], b[5], b[6], b[7]]) });
        let p2p_supported = field(hf::HMEM_P2P_HDR, "HANDSHAKE HMEM p2p")?.map(|b| b[0]);
        Ok(Handshake {
            flags: wire_flags & !hf::OPT_MASK,
            extra_info,
            connid,
            host_id,
            device_version,
            user_recv_qp,
            p2p_supported,
        })
    }

    fn opt_blocks(&self) -> [(u16, Option<[u8; 8]>); 5] {
        let lo32 = |v: u32| {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&v.to_le_bytes());
            b
        };
        [
            (hf::CONNID_HDR, self.connid.map(lo32)),
            (hf::HOST_ID_HDR, self.host_id.map(u64::to_le_bytes)),
            (hf::DEVICE_VERSION_HDR, self.device_version.map(lo32)),
            (
                hf::USER_RECV_QP_HDR,
                self.user_recv_qp.map(|q| (u64::from(q.qkey) << 32 | u64::from(q.qpn)).to_le_bytes()),
            ),
            (hf::HMEM_P2P_HDR, self.p2p_supported.map(|p| u64::from(p).to_le_bytes())),
        ]
    }

    /// Length of the optional fields.
    pub fn opt_len(&self) -> usize {
        self.opt_blocks().iter().filter(|(_, b)| b.is_some()).count() * 8
    }

    /// Length of the mandatory part (`extra_info` included).
    pub fn hdr_len(&self) -> usize {
        Self::FIXED_LEN + self.extra_info.len() * 8
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        self.hdr_len() + self.opt_len()
    }

    /// Writes the HANDSHAKE.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        check_room(buf, total)?;
        let blocks = self.opt_blocks();
        let flags = blocks.iter().fold(self.flags & !hf::OPT_MASK, |f, (bit, b)| if b.is_some() { f | bit } else { f });
        put_base(buf, PacketType::Handshake, flags);
        buf[4..8].copy_from_slice(&self.nextra_p3().to_le_bytes());
        let mut pos = Self::FIXED_LEN;
        let words = self.extra_info.as_bytes();
        buf[pos..pos + words.len()].copy_from_slice(words);
        pos += words.len();
        for block in blocks.iter().filter_map(|(_, b)| *b) {
            buf[pos..pos + 8].copy_from_slice(&block);
            pos += 8;
        }
        Ok(total)
    }
}
