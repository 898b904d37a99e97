//! The udp device's datagram: a 28-byte device header, then (for some
//! kinds) a body. Every field is little-endian. Byte for byte:
//!
//! ```text
//! offset size field
//! 0      1    magic      0xD4
//! 1      1    version    2
//! 2      1    kind       1 DATA, 2 ACK, 3 CLOSE, 4 WRITE, 5 READ_REQ,
//!                        6 READ_RSP, 7 RDMA_DONE, 8 WRITE_IMM, 9 PROBE,
//!                        10 WHO, 11 NAME
//! 3      1    flags      bit 0 HOLD: the sender holds back new messages
//!                        (it deferred packets); send it only control
//!                        packets (no RTM, no RTA) until a datagram
//!                        without the bit arrives
//!                        bit 1 RETX: this datagram is sent again, its
//!                        timeout having fired
//!                        bit 2 DUP: since its last datagram to the
//!                        receiver, the sender received a RETX datagram
//!                        it already had and had not acknowledged yet:
//!                        the receiver's timeout fired too early (after
//!                        TCP's D-SACK, RFC 2883)
//! 4      4    src_connid the sender's connid
//! 8      4    dst_connid the receiver's connid as the sender knows it
//!                        (a datagram for another incarnation of the port
//!                        is dropped and counted); 0 in a WHO
//! 12     4    seq        sequence number of this datagram in the
//!                        sender-to-receiver stream (reliable kinds: DATA,
//!                        WRITE, READ_REQ, READ_RSP, RDMA_DONE); 0 for ACK,
//!                        CLOSE and PROBE; the asker's nonce in WHO and NAME
//! 16     4    ack        the first sequence number the sender has not yet
//!                        received from the receiver (cumulative)
//! 20     4    ack_bits   bit i: sequence number ack + 1 + i was received
//! 24     4    window     bytes of datagrams the sender takes from the
//!                        receiver in flight (its receive window for it:
//!                        its socket buffer shared among the peers that
//!                        send to it); one datagram may always be in flight
//! 28     -    body       by kind:
//!   DATA       one EFA RDM packet (protocol v4), to the end of the datagram
//!   ACK, CLOSE nothing
//!   PROBE      nothing: "are you there?", answered at once with an ACK by
//!              the peer's device (its application's call or, while the
//!              application is away, its responder)
//!   WRITE      op u32, pad u32, key u64, addr u64, total u64, offset u64,
//!              then the bytes to write at addr + offset (40-byte header)
//!   WRITE_IMM  as WRITE, the u32 at offset 4 the immediate data: the
//!              owner reports it once every byte of the write is in its
//!              memory (every segment of the write carries it)
//!   READ_REQ   op u32, pad u32, key u64, addr u64, len u64 (32 bytes)
//!   READ_RSP   op u32, pad u32, offset u64, then the bytes read (16-byte
//!              header)
//!   RDMA_DONE  op u32, status i32 (an rdm4 status code: 0 or negative)
//!   WHO        "whose endpoint is bound at this port?" (`rdm4_resolve`),
//!              from a socket of no endpoint: zero bytes, at least 32 of
//!              them, so that the answer is never larger than the question
//!              (a forged source gains no amplification); a shorter WHO is
//!              dropped as malformed
//!   NAME       the answer to a WHO, to its source: the endpoint's name
//!              (32 bytes, `rdm4_ep_getname`: an auto endpoint's carries
//!              its shm locator); ack, ack_bits and window 0
//! ```
//!
//! `op` names the requester's RDMA operation; the memory owner answers a
//! write with RDMA_DONE once every byte of it was written (or refused), a
//! read with READ_RSP segments or an RDMA_DONE carrying the error.

/// Bytes of the device header.
pub(crate) const HDR: usize = 28;
const MAGIC: u8 = 0xD4;
const VERSION: u8 = 2;

/// Flag: the sender holds back new messages.
pub(crate) const HOLD: u8 = 1;
/// Flag: a datagram sent again.
pub(crate) const RETX: u8 = 2;
/// Flag: the sender received a datagram sent again that it already had.
pub(crate) const DUP: u8 = 4;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Data = 1,
    Ack = 2,
    Close = 3,
    Write = 4,
    ReadReq = 5,
    ReadRsp = 6,
    RdmaDone = 7,
    WriteImm = 8,
    Probe = 9,
    Who = 10,
    Name = 11,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Close,
            4 => Kind::Write,
            5 => Kind::ReadReq,
            6 => Kind::ReadRsp,
            7 => Kind::RdmaDone,
            8 => Kind::WriteImm,
            9 => Kind::Probe,
            10 => Kind::Who,
            11 => Kind::Name,
            _ => return None,
        })
    }

    /// Kinds that take a sequence number and are retransmitted until acknowledged.
    pub(crate) fn reliable(self) -> bool {
        !matches!(self, Kind::Ack | Kind::Close | Kind::Probe | Kind::Who | Kind::Name)
    }
}

/// A device header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hdr {
    pub kind: Kind,
    pub flags: u8,
    pub src_connid: u32,
    pub dst_connid: u32,
    pub seq: u32,
    pub ack: u32,
    pub ack_bits: u32,
    pub window: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Hdr {
    /// The header of `dgram` and its body; `None` for a datagram too
    /// short, of another magic or version, or of an unknown kind.
    pub(crate) fn parse(dgram: &[u8]) -> Option<(Hdr, &[u8])> {
        if dgram.len() < HDR || dgram[0] != MAGIC || dgram[1] != VERSION {
            return None;
        }
        let h = Hdr {
            kind: Kind::from_u8(dgram[2])?,
            flags: dgram[3],
            src_connid: u32_at(dgram, 4),
            dst_connid: u32_at(dgram, 8),
            seq: u32_at(dgram, 12),
            ack: u32_at(dgram, 16),
            ack_bits: u32_at(dgram, 20),
            window: u32_at(dgram, 24),
        };
        Some((h, &dgram[HDR..]))
    }

    /// Writes the header into the first [`HDR`] bytes of `out`.
    pub(crate) fn write(&self, out: &mut [u8]) {
        out[0] = MAGIC;
        out[1] = VERSION;
        out[2] = self.kind as u8;
        out[3] = self.flags;
        out[4..8].copy_from_slice(&self.src_connid.to_le_bytes());
        out[8..12].copy_from_slice(&self.dst_connid.to_le_bytes());
        out[12..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..20].copy_from_slice(&self.ack.to_le_bytes());
        out[20..24].copy_from_slice(&self.ack_bits.to_le_bytes());
        out[24..28].copy_from_slice(&self.window.to_le_bytes());
    }

    /// Rewrites the acknowledgement fields, window and flags of an encoded
    /// header (a retransmission carries the newest ones).
    pub(crate) fn refresh(out: &mut [u8], flags: u8, ack: u32, ack_bits: u32, window: u32) {
        out[3] = flags;
        out[16..20].copy_from_slice(&ack.to_le_bytes());
        out[20..24].copy_from_slice(&ack_bits.to_le_bytes());
        out[24..28].copy_from_slice(&window.to_le_bytes());
    }
}

/// Bytes of a WRITE body's header.
pub(crate) const WRITE_HDR: usize = 40;
/// Bytes of a READ_REQ body.
pub(crate) const READ_REQ_LEN: usize = 32;
/// Bytes of a READ_RSP body's header.
pub(crate) const READ_RSP_HDR: usize = 16;
/// Bytes of an RDMA_DONE body.
pub(crate) const DONE_LEN: usize = 8;

/// A WRITE body's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteSeg {
    pub op: u32,
    /// The immediate data (WRITE_IMM; 0 in a WRITE).
    pub imm: u32,
    pub key: u64,
    pub addr: u64,
    pub total: u64,
    pub offset: u64,
}

impl WriteSeg {
    pub(crate) fn parse(body: &[u8]) -> Option<(WriteSeg, &[u8])> {
        if body.len() < WRITE_HDR {
            return None;
        }
        let s = WriteSeg {
            op: u32_at(body, 0),
            imm: u32_at(body, 4),
            key: u64_at(body, 8),
            addr: u64_at(body, 16),
            total: u64_at(body, 24),
            offset: u64_at(body, 32),
        };
        Some((s, &body[WRITE_HDR..]))
    }

    pub(crate) fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.op.to_le_bytes());
        out[4..8].copy_from_slice(&self.imm.to_le_bytes());
        out[8..16].copy_from_slice(&self.key.to_le_bytes());
        out[16..24].copy_from_slice(&self.addr.to_le_bytes());
        out[24..32].copy_from_slice(&self.total.to_le_bytes());
        out[32..40].copy_from_slice(&self.offset.to_le_bytes());
    }
}

/// A READ_REQ body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadReq {
    pub op: u32,
    pub key: u64,
    pub addr: u64,
    pub len: u64,
}

impl ReadReq {
    pub(crate) fn parse(body: &[u8]) -> Option<ReadReq> {
        (body.len() >= READ_REQ_LEN).then(|| ReadReq {
            op: u32_at(body, 0),
            key: u64_at(body, 8),
            addr: u64_at(body, 16),
            len: u64_at(body, 24),
        })
    }

    pub(crate) fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.op.to_le_bytes());
        out[4..8].fill(0);
        out[8..16].copy_from_slice(&self.key.to_le_bytes());
        out[16..24].copy_from_slice(&self.addr.to_le_bytes());
        out[24..32].copy_from_slice(&self.len.to_le_bytes());
    }
}

/// A READ_RSP body's header: (op, offset) and the bytes after it.
pub(crate) fn parse_read_rsp(body: &[u8]) -> Option<(u32, u64, &[u8])> {
    (body.len() >= READ_RSP_HDR).then(|| (u32_at(body, 0), u64_at(body, 8), &body[READ_RSP_HDR..]))
}

pub(crate) fn write_read_rsp(out: &mut [u8], op: u32, offset: u64) {
    out[0..4].copy_from_slice(&op.to_le_bytes());
    out[4..8].fill(0);
    out[8..16].copy_from_slice(&offset.to_le_bytes());
}

/// An RDMA_DONE body: (op, status code).
pub(crate) fn parse_done(body: &[u8]) -> Option<(u32, i32)> {
    (body.len() >= DONE_LEN).then(|| (u32_at(body, 0), u32_at(body, 4) as i32))
}

pub(crate) fn write_done(out: &mut [u8], op: u32, status: i32) {
    out[0..4].copy_from_slice(&op.to_le_bytes());
    out[4..8].copy_from_slice(&status.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_bad_ones_are_refused() {
        let h = Hdr {
            kind: Kind::Write,
            flags: HOLD,
            src_connid: 7,
            dst_connid: 9,
            seq: 11,
            ack: 13,
            ack_bits: 0x8001,
            window: 1 << 20,
        };
        let mut b = [0u8; HDR + 40];
        h.write(&mut b);
        let (back, body) = Hdr::parse(&b).unwrap();
        assert_eq!((back, body.len()), (h, 40));
        assert!(Hdr::parse(&b[..HDR - 1]).is_none(), "too short");
        let mut bad = b;
        bad[1] = 1;
        assert!(Hdr::parse(&bad).is_none(), "unknown version");
        bad = b;
        bad[2] = 99;
        assert!(Hdr::parse(&bad).is_none(), "unknown kind");
        bad = b;
        bad[0] = 0;
        assert!(Hdr::parse(&bad).is_none(), "wrong magic");
        let w = WriteSeg { op: 1, imm: 6, key: 2, addr: 3, total: 4, offset: 5 };
        w.write(&mut b[HDR..]);
        assert_eq!(WriteSeg::parse(&b[HDR..]).map(|(s, d)| (s, d.len())), Some((w, 0)));
        assert!(WriteSeg::parse(&b[HDR..HDR + 39]).is_none());
        assert!(ReadReq::parse(&b[..31]).is_none());
        assert!(parse_read_rsp(&b[..15]).is_none());
        assert!(parse_done(&b[..7]).is_none());
    }
}
