//! Property tests of the wire layer's non-REQ packets (HANDSHAKE, CTS,
//! CTSDATA, READRSP, ATOMRSP, RECEIPT, EOR, READ_NACK, PEER_ERROR): random
//! field values emit to exactly the bytes a test-local reference encoder
//! writes and parse back to the same value; then negative cases with
//! specific expectations. Randomness is a seeded splitmix64, as in
//! `wire_props.rs`.

use rdm4::wire::{
    self, handshake_flags as hf, req_flags, AtomRsp, Cts, CtsData, DataRtm, Handshake, IdsHdr, LeU64, Packet,
    PacketType, PeerError, RawAddrHdr, ReadRsp, Receipt, UserRecvQp, WireError, CONNID_HDR, CTS_READ_REQ,
};

mod common_wire;

use common_wire::*;

// ---------------------------------------------------------------------------
// Non-REQ round trips
// ---------------------------------------------------------------------------

const NONREQ_ITERATIONS: usize = 300;

/// (wire flags, multiuse slot) for a connid / padding choice.
fn multiuse(flags: u16, connid: Option<u32>, padding: u32) -> (u16, u32) {
    match connid {
        Some(c) => (flags | CONNID_HDR, c),
        None => (flags & !CONNID_HDR, padding),
    }
}

fn random_flags(rng: &mut Rng) -> u16 {
    if rng.bool() {
        0
    } else {
        rng.u16()
    }
}

#[test]
fn handshake_with_every_optional_field_subset_round_trips() {
    let mut rng = Rng::new(0x5EED_0000_0000_0009);
    for nextra in 0..=3usize {
        for mask in 0u32..32 {
            for i in 0..NONREQ_ITERATIONS / 10 {
                let words: Vec<LeU64> = (0..nextra).map(|_| LeU64::new(rng.edge_u64())).collect();
                let mut h = Handshake::new(&words);
                // Any flags: the optional-field bits are recomputed, the others kept.
                h.flags = random_flags(&mut rng);
                h.connid = (mask & 1 != 0).then(|| rng.edge_u32());
                h.host_id = (mask & 2 != 0).then(|| rng.edge_u64());
                h.device_version = (mask & 4 != 0).then(|| rng.edge_u32());
                h.user_recv_qp = (mask & 8 != 0).then(|| UserRecvQp { qpn: rng.edge_u32(), qkey: rng.edge_u32() });
                h.p2p_supported = (mask & 16 != 0).then(|| rng.u64() as u8);

                let mut flags = h.flags & !hf::OPT_MASK;
                for (present, bit) in [
                    (h.connid.is_some(), 0x8000),
                    (h.host_id.is_some(), 0x1),
                    (h.device_version.is_some(), 0x2),
                    (h.user_recv_qp.is_some(), 0x4),
                    (h.p2p_supported.is_some(), 0x8),
                ] {
                    if present {
                        flags |= bit;
                    }
                }
                let mut expected = base(9, flags);
                expected.extend_from_slice(&(nextra as u32 + 3).to_le_bytes());
                for w in &words {
                    expected.extend_from_slice(&w.get().to_le_bytes());
                }
                // 8-byte blocks in order, pad bytes zero (wire-facts #15).
                let blocks = [
                    h.connid.map(u64::from),
                    h.host_id,
                    h.device_version.map(u64::from),
                    h.user_recv_qp.map(|q| u64::from(q.qkey) << 32 | u64::from(q.qpn)),
                    h.p2p_supported.map(u64::from),
                ];
                for v in blocks.into_iter().flatten() {
                    expected.extend_from_slice(&v.to_le_bytes());
                }

                let want = Handshake { flags: h.flags & !hf::OPT_MASK, ..h };
                let ctx = || format!("HANDSHAKE nextra={nextra} mask={mask:#x} iteration {i}");
                assert_eq!(h.nextra_p3(), nextra as u32 + 3);
                check_nonreq(&Packet::Handshake(h), &Packet::Handshake(want), &expected, i % 10 == 0, &ctx);
            }
        }
    }
}

#[test]
fn cts_round_trips() {
    let mut rng = Rng::new(0x5EED_0000_0000_0003);
    for connid in [false, true] {
        for read_req in [false, true] {
            for i in 0..NONREQ_ITERATIONS {
                let mut flags = if read_req { CTS_READ_REQ } else { 0 };
                if rng.below(4) == 0 {
                    flags |= rng.u16();
                }
                let c = Cts {
                    flags,
                    connid: connid.then(|| rng.edge_u32()),
                    padding: rng.edge_u32(),
                    send_id: rng.edge_u32(),
                    recv_id: rng.edge_u32(),
                    recv_length: rng.edge_u64(),
                };
                let e = hdr24(3, multiuse(c.flags, c.connid, c.padding), c.send_id, c.recv_id, c.recv_length);
                let want = Cts { flags: c.flags & !CONNID_HDR, padding: if connid { 0 } else { c.padding }, ..c };
                let ctx = || format!("CTS connid={connid} read_req={read_req} iteration {i}");
                check_nonreq(&Packet::Cts(c), &Packet::Cts(want), &e, i % 10 == 0, &ctx);
            }
        }
    }
}

#[test]
fn ctsdata_round_trips() {
    let mut rng = Rng::new(0x5EED_0000_0000_0004);
    for connid in [false, true] {
        for i in 0..NONREQ_ITERATIONS {
            let data = {
                let n = rng.data_len();
                rng.bytes(n)
            };
            let c = CtsData {
                flags: random_flags(&mut rng),
                recv_id: rng.edge_u32(),
                seg_offset: rng.range(0, u64::MAX - data.len() as u64),
                connid: connid.then(|| rng.edge_u32()),
                data: &data,
            };
            let mut e = base(4, multiuse(c.flags, c.connid, 0).0);
            e.resize(24, 0);
            put(&mut e, 4, 4, c.recv_id.into());
            put(&mut e, 8, 8, data.len() as u64);
            put(&mut e, 16, 8, c.seg_offset);
            if let Some(id) = c.connid {
                e.extend_from_slice(&u64::from(id).to_le_bytes());
            }
            e.extend_from_slice(&data);
            let want = CtsData { flags: c.flags & !CONNID_HDR, ..c };
            let ctx = || format!("CTSDATA connid={connid} iteration {i}");
            check_nonreq(&Packet::CtsData(c), &Packet::CtsData(want), &e, i % 10 == 0, &ctx);
        }
    }
}

/// The 24-byte header CTS, READRSP and ATOMRSP share: base header (type
/// `id`, the flags and multi-use word of `multiuse`), two words at 8 and 12,
/// a u64 at 16.
fn hdr24(id: u8, (wflags, mu): (u16, u32), at8: u32, at12: u32, at16: u64) -> Vec<u8> {
    let mut e = base(id, wflags);
    e.resize(24, 0);
    put(&mut e, 4, 4, mu.into());
    put(&mut e, 8, 4, at8.into());
    put(&mut e, 12, 4, at12.into());
    put(&mut e, 16, 8, at16);
    e
}

/// A READRSP's or ATOMRSP's reference bytes: `hdr24` with the data length
/// at 16, then the data.
fn rsp_bytes(id: u8, multiuse: (u16, u32), at8: u32, at12: u32, data: &[u8]) -> Vec<u8> {
    let mut e = hdr24(id, multiuse, at8, at12, data.len() as u64);
    e.extend_from_slice(data);
    e
}

#[test]
fn readrsp_and_atomrsp_round_trip() {
    let mut rng = Rng::new(0x5EED_0000_0000_0005);
    for connid in [false, true] {
        for i in 0..NONREQ_ITERATIONS {
            let data = {
                let n = rng.data_len();
                rng.bytes(n)
            };
            let r = ReadRsp {
                flags: random_flags(&mut rng),
                connid: connid.then(|| rng.edge_u32()),
                padding: rng.edge_u32(),
                recv_id: rng.edge_u32(),
                send_id: rng.edge_u32(),
                data: &data,
            };
            // libfabric order: recv_id @8, send_id @12 (wire-facts #1).
            let e = rsp_bytes(5, multiuse(r.flags, r.connid, r.padding), r.recv_id, r.send_id, &data);
            let want = ReadRsp { flags: r.flags & !CONNID_HDR, padding: if connid { 0 } else { r.padding }, ..r };
            let ctx = || format!("READRSP connid={connid} iteration {i}");
            check_nonreq(&Packet::ReadRsp(r), &Packet::ReadRsp(want), &e, i % 10 == 0, &ctx);

            let a = AtomRsp {
                flags: random_flags(&mut rng),
                connid: connid.then(|| rng.edge_u32()),
                padding: rng.edge_u32(),
                reserved: rng.edge_u32(),
                recv_id: rng.edge_u32(),
                data: &data,
            };
            let e = rsp_bytes(8, multiuse(a.flags, a.connid, a.padding), a.reserved, a.recv_id, &data);
            let want = AtomRsp { flags: a.flags & !CONNID_HDR, padding: if connid { 0 } else { a.padding }, ..a };
            let ctx = || format!("ATOMRSP connid={connid} iteration {i}");
            check_nonreq(&Packet::AtomRsp(a), &Packet::AtomRsp(want), &e, i % 10 == 0, &ctx);
        }
    }
}

#[test]
fn eor_read_nack_receipt_and_peer_error_round_trip() {
    let mut rng = Rng::new(0x5EED_0000_0000_0007);
    for connid in [false, true] {
        for i in 0..NONREQ_ITERATIONS {
            let prefixes = i % 10 == 0;
            // EOR and READ_NACK share one layout: send_id, recv_id, multiuse @12.
            for (id, name) in [(7u8, "EOR"), (11, "READ_NACK")] {
                let h = IdsHdr {
                    flags: random_flags(&mut rng),
                    send_id: rng.edge_u32(),
                    recv_id: rng.edge_u32(),
                    connid: connid.then(|| rng.edge_u32()),
                    padding: rng.edge_u32(),
                };
                let (wflags, mu) = multiuse(h.flags, h.connid, h.padding);
                let mut e = base(id, wflags);
                e.resize(16, 0);
                put(&mut e, 4, 4, h.send_id.into());
                put(&mut e, 8, 4, h.recv_id.into());
                put(&mut e, 12, 4, mu.into());
                let want = IdsHdr { flags: h.flags & !CONNID_HDR, padding: if connid { 0 } else { h.padding }, ..h };
                let (p, w) = if id == 7 {
                    (Packet::Eor(h), Packet::Eor(want))
                } else {
                    (Packet::ReadNack(h), Packet::ReadNack(want))
                };
                let ctx = || format!("{name} connid={connid} iteration {i}");
                check_nonreq(&p, &w, &e, prefixes, &ctx);
            }

            let r = Receipt {
                flags: random_flags(&mut rng),
                send_id: rng.edge_u32(),
                msg_id: rng.edge_u32(),
                connid: connid.then(|| rng.edge_u32()),
                padding: rng.edge_u32(),
            };
            let (wflags, mu) = multiuse(r.flags, r.connid, r.padding);
            let mut e = base(10, wflags);
            e.resize(16, 0);
            put(&mut e, 4, 4, r.send_id.into());
            put(&mut e, 8, 4, r.msg_id.into());
            put(&mut e, 12, 4, mu.into());
            let want = Receipt { flags: r.flags & !CONNID_HDR, padding: if connid { 0 } else { r.padding }, ..r };
            let ctx = || format!("RECEIPT connid={connid} iteration {i}");
            check_nonreq(&Packet::Receipt(r), &Packet::Receipt(want), &e, prefixes, &ctx);

            let pe = PeerError {
                flags: random_flags(&mut rng),
                op_id: rng.edge_u32(),
                ref_kind: rng.below(4) as u32,
                prov_errno: rng.edge_u32(),
                connid: connid.then(|| rng.edge_u32()),
                padding: rng.edge_u32(),
            };
            let (wflags, mu) = multiuse(pe.flags, pe.connid, pe.padding);
            let mut e = base(12, wflags);
            e.resize(20, 0);
            put(&mut e, 4, 4, pe.op_id.into());
            put(&mut e, 8, 4, pe.ref_kind.into());
            put(&mut e, 12, 4, pe.prov_errno.into());
            put(&mut e, 16, 4, mu.into());
            let want = PeerError { flags: pe.flags & !CONNID_HDR, padding: if connid { 0 } else { pe.padding }, ..pe };
            let ctx = || format!("PEER_ERROR connid={connid} iteration {i}");
            check_nonreq(&Packet::PeerError(pe), &Packet::PeerError(want), &e, prefixes, &ctx);
        }
    }
}

// ---------------------------------------------------------------------------
// Negative cases with specific expectations
// ---------------------------------------------------------------------------

#[test]
fn version_below_4_is_bad_version_and_newer_versions_parse() {
    for v in 0..4u8 {
        let mut b = eager_msgrtm();
        b[1] = v;
        assert_eq!(Packet::parse(&b), Err(WireError::BadVersion(v)));
    }
    // Reported before the type is looked at.
    assert_eq!(Packet::parse(&[200, 3, 0, 0]), Err(WireError::BadVersion(3)));
    // Newer versions are accepted as v4 (wire-facts #24).
    let mut b = eager_msgrtm();
    b[1] = 5;
    assert!(matches!(Packet::parse(&b), Ok(Packet::Req(_))));
}

#[test]
fn retired_internal_reserved_and_undefined_types_are_unknown() {
    for t in [0u8, 1, 2, 6, 13, 63, 77, 127, 131, 132, 148, 200, 255] {
        let mut b = vec![0u8; 128];
        b[0] = t;
        b[1] = 4;
        assert_eq!(Packet::parse(&b), Err(WireError::UnknownType(t)), "type {t}");
    }
}

#[test]
fn rma_iov_count_too_large_is_count_too_large() {
    // EAGER_RTW announcing one iov more than the packet holds.
    for (count, room) in [(1u32, 23usize), (2, 24), (u32::MAX, 48)] {
        let mut b = base(70, 0);
        b.extend_from_slice(&count.to_le_bytes());
        b.resize(8 + room, 0);
        assert_eq!(
            Packet::parse(&b),
            Err(WireError::CountTooLarge { what: "rma_iov", count: count.into(), room }),
            "count {count}"
        );
    }
    // read_iov too: LONGREAD_MSGRTM with read_iov_count 1 and no room.
    let mut b = base(128, req_flags::MSG);
    b.resize(24, 0);
    put(&mut b, 20, 4, 1);
    b.resize(24 + 23, 0);
    assert!(matches!(Packet::parse(&b), Err(WireError::CountTooLarge { what: "read_iov", count: 1, .. })));
}

#[test]
fn raw_address_size_below_32_is_opt_header_size() {
    for size in [0u32, 1, 16, 31] {
        let mut b = base(64, req_flags::MSG | req_flags::RAW_ADDR_HDR);
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&size.to_le_bytes());
        b.resize(b.len() + 64, 0);
        assert_eq!(Packet::parse(&b), Err(WireError::OptHeaderSize { what: "raw address", size }));
    }
    // A size beyond the packet is truncation, not a panic.
    let mut b = base(64, req_flags::MSG | req_flags::RAW_ADDR_HDR);
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.resize(b.len() + 64, 0);
    assert!(matches!(Packet::parse(&b), Err(WireError::Truncated { .. })));
    // And a body shorter than 32 bytes cannot even be built.
    assert!(matches!(RawAddrHdr::new(&[0u8; 31]), Err(WireError::OptHeaderSize { size: 31, .. })));
}

#[test]
fn handshake_nextra_p3_below_3_is_bad_field() {
    for n in 0..3u32 {
        let mut b = base(9, 0);
        b.extend_from_slice(&n.to_le_bytes());
        b.resize(64, 0);
        assert_eq!(Packet::parse(&b), Err(WireError::BadField { what: "nextra_p3", value: n.into() }));
    }
    // extra_info count beyond the packet.
    let mut b = base(9, 0);
    b.extend_from_slice(&(3u32 + 5).to_le_bytes());
    b.resize(8 + 4 * 8, 0);
    assert!(matches!(Packet::parse(&b), Err(WireError::CountTooLarge { what: "extra_info", count: 5, .. })));
    let mut b = base(9, 0);
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(Packet::parse(&b), Err(WireError::CountTooLarge { .. })));
}

#[test]
fn ctsdata_seg_length_beyond_packet_is_truncated() {
    for connid in [false, true] {
        let flags = if connid { CONNID_HDR } else { 0 };
        let hdr = if connid { 32 } else { 24 };
        for (seg_length, have) in [(1u64, 0usize), (100, 99), (u64::MAX - 1, 8)] {
            let mut b = base(4, flags);
            b.resize(24, 0);
            put(&mut b, 8, 8, seg_length);
            b.resize(hdr + have, 0);
            assert!(
                matches!(Packet::parse(&b), Err(WireError::Truncated { .. })),
                "seg_length {seg_length}, {have} bytes of data, connid {connid}: {:?}",
                Packet::parse(&b)
            );
        }
        // The connid block itself missing.
        if connid {
            let mut b = base(4, flags);
            b.resize(28, 0);
            assert!(matches!(Packet::parse(&b), Err(WireError::Truncated { .. })));
        }
    }
    // Trailing bytes after seg_length are ignored.
    let mut b = base(4, 0);
    b.resize(24, 0);
    put(&mut b, 8, 8, 2);
    b.extend_from_slice(&[1, 2, 3, 4]);
    assert!(matches!(Packet::parse(&b), Ok(Packet::CtsData(c)) if c.data == [1, 2]));
    // seg_offset + seg_length wrapping.
    let mut b = base(4, 0);
    b.resize(24, 0);
    put(&mut b, 8, 8, 1);
    put(&mut b, 16, 8, u64::MAX);
    b.push(0);
    assert!(matches!(Packet::parse(&b), Err(WireError::LengthOverflow { .. })));
}

#[test]
fn readrsp_and_atomrsp_seg_length_beyond_packet_is_truncated() {
    for id in [5u8, 8] {
        let mut b = base(id, CONNID_HDR);
        b.resize(24, 0);
        put(&mut b, 16, 8, 10);
        b.resize(24 + 9, 0);
        assert!(matches!(Packet::parse(&b), Err(WireError::Truncated { .. })), "type {id}");
    }
}

#[test]
fn medium_segment_beyond_msg_length_is_length_overflow() {
    // MEDIUM_MSGRTM: msg_length 10, seg_offset 8, 3 bytes of data.
    let mut b = base(66, req_flags::MSG);
    b.resize(24, 0);
    put(&mut b, 8, 8, 10);
    put(&mut b, 16, 8, 8);
    b.extend_from_slice(&[1, 2, 3]);
    assert!(matches!(Packet::parse(&b), Err(WireError::LengthOverflow { .. })));
    // Exactly up to msg_length is fine.
    b.pop();
    assert!(matches!(Packet::parse(&b), Ok(Packet::Req(r)) if r.data == [1, 2]));
    // seg_offset + data wrapping around 2^64.
    let mut b = base(67, req_flags::MSG | req_flags::TAGGED);
    b.resize(32, 0);
    put(&mut b, 8, 8, u64::MAX);
    put(&mut b, 16, 8, u64::MAX);
    b.push(0);
    assert!(matches!(Packet::parse(&b), Err(WireError::LengthOverflow { .. })));
    // RUNTREAD: runt_length beyond msg_length.
    let mut b = base(145, req_flags::MSG);
    b.resize(40, 0);
    put(&mut b, 8, 8, 100);
    put(&mut b, 32, 8, 101);
    assert!(matches!(Packet::parse(&b), Err(WireError::LengthOverflow { .. })));
}

#[test]
fn iovs_whose_range_wraps_parse_for_the_memory_owner_to_refuse() {
    // EAGER_RTW, one rma_iov: addr + len = 2^64. The wire layer takes it;
    // the target's registration check refuses it with an answer.
    let mut b = base(70, 0);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    match Packet::parse(&b) {
        Ok(Packet::Req(r)) => assert_eq!((r.rma_iov[0].addr(), r.rma_iov[0].len()), (u64::MAX, 1)),
        other => panic!("{other:?}"),
    }
    // LONGREAD_MSGRTM, one read_iov that wraps.
    let mut b = base(128, req_flags::MSG);
    b.resize(24, 0);
    put(&mut b, 20, 4, 1);
    b.extend_from_slice(&(1u64 << 63).to_le_bytes());
    b.extend_from_slice(&(1u64 << 63).to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    assert!(matches!(Packet::parse(&b), Ok(Packet::Req(r)) if r.read_iov.len() == 1));
}

#[test]
fn parse_base_reports_type_and_flags() {
    let b = eager_msgrtm();
    assert_eq!(wire::parse_base(&b), Ok((PacketType::EagerMsgRtm, req_flags::MSG)));
}

#[test]
fn emit_refuses_what_parse_would_reject() {
    use rdm4::wire::{CtsData, PacketType, Req, RmaIov, WireError};
    let mut buf = [0u8; 256];
    let over = |r: Result<usize, WireError>| matches!(r, Err(WireError::LengthOverflow { .. }));
    let medium = Req { data: &[1], ..Req::new(PacketType::MediumMsgRtm) };
    assert!(over(medium.emit(&mut buf)), "segment beyond msg_length");
    let mut runt = Req::new(PacketType::RuntreadMsgRtm);
    runt.fields.runt_length = 1;
    assert!(over(runt.emit(&mut buf)), "runt_length beyond msg_length");
    // A range that wraps is built as it is parsed (the memory owner refuses it).
    let wrap = [RmaIov::new(u64::MAX, 1, 0)];
    let rtw = Req { rma_iov: &wrap, ..Req::new(PacketType::EagerRtw) };
    assert!(rtw.emit(&mut buf).is_ok(), "iov wraps");
    let cd = CtsData { flags: 0, recv_id: 0, seg_offset: u64::MAX, connid: None, data: &[1] };
    assert!(over(cd.emit(&mut buf)), "CTSDATA offset overflows");
}

/// The eager writer and reader agree with the general view's emitter for
/// both eager types, every optional header and payload sizes around the
/// small-copy thresholds.
#[test]
fn eager_writer_and_reader_match_the_general_view() {
    let payload: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
    for tagged in [false, true] {
        let ptype = if tagged { PacketType::EagerTagRtm } else { PacketType::EagerMsgRtm };
        for cq_data in [None, Some(0x0102_0304_0506_0708)] {
            for connid in [None, Some(0xA1B2_C3D4)] {
                for n in [0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 40] {
                    let d = DataRtm {
                        ptype,
                        flags: ptype.default_req_flags(),
                        msg_id: 0x1122_3344,
                        tag: if tagged { 0x5566_7788_99AA_BBCC } else { 0 },
                        msg_length: n as u64,
                        seg_offset: 0,
                        cq_data,
                        connid,
                        data: &payload[..n],
                    };
                    let mut want = vec![0u8; d.buffer_len()];
                    let len = d.emit(&mut want).unwrap();
                    let mut got = vec![0u8; len + 8];
                    let m = DataRtm::emit_eager(&mut got, tagged, d.msg_id, d.tag, cq_data, connid, d.data);
                    assert_eq!(&got[..m], &want[..len], "tagged={tagged} cq={cq_data:?} connid={connid:?} n={n}");
                    assert_eq!(got[m..], [0u8; 8]);
                    assert_eq!(DataRtm::eager_hdr_len(tagged, cq_data.is_some(), connid.is_some()) + n, len);
                    let back = DataRtm::parse_eager(&want).unwrap();
                    assert_eq!(back, DataRtm { flags: back.flags, ..d });
                    assert_eq!(DataRtm::emit_eager(&mut got[..len - 1], tagged, 1, 2, cq_data, connid, d.data), 0);
                }
            }
        }
    }
}
