//! Fuzz targets for every parser of the wire layer (bolero).
//!
//! Under `cargo test` each target runs a bounded number of random inputs
//! (at most [`ITERATIONS`], at most [`TIME_MS`] ms; bolero's own default would
//! be "as many as fit in 1 s"); under `cargo bolero test` the same targets are
//! coverage-guided fuzzers with no bound (see `fuzz/README.md`).
//!
//! Every target checks that parsing never panics, and that whatever parses
//! passes [`check_round_trip`]: it re-emits into exactly `buffer_len()` bytes,
//! those bytes are the input's own bytes up to the normalisations the
//! protocol allows (version written as 4, pad bytes written as zero, trailing
//! bytes after a length-delimited packet dropped), and they parse again to an
//! equal value.
//!
//! Random bytes mostly stop at the first length or version check, so most
//! targets build a plausible base header in front of the fuzzed body, and
//! `fuzz_round_trip_of_mutated_valid_packets` starts from valid packets of
//! every type and flips bytes of them, which reaches the deep paths.

use std::time::Duration;

use bolero::check;
use rdm4::wire::{
    AtomRsp, Category, Cts, CtsData, DataRtm, Handshake, IdsHdr, LeU64, NonReqKind, Packet, PacketType, PeerError,
    RawAddrHdr, ReadRsp, Receipt, Req, ReqFamily, ReqFields, RmaIov, Subprotocol, UserRecvQp, WireError,
};

/// Upper bound on the inputs one target runs under `cargo test`.
const ITERATIONS: usize = 500_000;
/// Upper bound on the time one target runs under `cargo test`.
const TIME_MS: u64 = 1_000;

/// `check!()` bounded for `cargo test` (both bounds are ignored when fuzzing).
macro_rules! target {
    () => {
        check!().with_iterations(ITERATIONS).with_test_time(Duration::from_millis(TIME_MS))
    };
}

// ---------------------------------------------------------------------------
// The invariant every successful parse must satisfy
// ---------------------------------------------------------------------------

/// `input` with the normalisations `emit` is allowed to make: the first
/// `buffer_len()` bytes, type and version written by the emitter, and the pad
/// bytes of the CTSDATA connid block and the handshake optional blocks zeroed
/// (wire-facts #14, #15).
fn normalised(input: &[u8], p: &Packet) -> Vec<u8> {
    let n = p.buffer_len();
    let mut want = input[..n].to_vec();
    want[0] = p.ptype() as u8;
    want[1] = 4;
    match p {
        Packet::CtsData(c) if c.connid.is_some() => want[28..32].fill(0),
        Packet::Handshake(h) => {
            let mut pos = Handshake::FIXED_LEN + 8 * h.extra_info.len();
            if h.connid.is_some() {
                want[pos + 4..pos + 8].fill(0);
                pos += 8;
            }
            if h.host_id.is_some() {
                pos += 8;
            }
            if h.device_version.is_some() {
                want[pos + 4..pos + 8].fill(0);
                pos += 8;
            }
            if h.user_recv_qp.is_some() {
                pos += 8;
            }
            if h.p2p_supported.is_some() {
                want[pos + 1..pos + 8].fill(0);
            }
        }
        _ => {}
    }
    want
}

/// The round-trip invariant of a packet `p` parsed from `input`.
fn check_round_trip(input: &[u8], p: &Packet) {
    let n = p.buffer_len();
    assert!(n <= input.len(), "buffer_len {n} > input length {}: {p:?}", input.len());
    if let Packet::Req(_) = p {
        // A REQ's data is the rest of the packet: nothing is dropped.
        assert_eq!(n, input.len(), "{p:?}");
    }
    let mut out = vec![0u8; n];
    assert_eq!(p.emit(&mut out), Ok(n), "{p:?}");
    assert_eq!(out, normalised(input, p), "re-emitted bytes differ: {p:?}");
    assert_eq!(Packet::parse(&out).as_ref(), Ok(p), "re-parse differs");
    assert_eq!(p.emit(&mut out[..n - 1]), Err(WireError::BufferTooSmall { need: n, have: n - 1 }));
    // Accessors never panic and agree with the variants.
    let _ = (p.connid(), p.sender_connid());
}

/// Parses `input` as a whole packet and checks the invariant when it parses.
fn parse_and_check(input: &[u8]) -> Option<Packet<'_>> {
    check_data_path_view(input);
    let p = Packet::parse(input).ok()?;
    check_round_trip(input, &p);
    Some(p)
}

/// The engine's fixed-offset view of eager and medium RTMs accepts exactly
/// the packets the general parser accepts for those types (less those with a
/// raw address header, which it leaves to the general path), with the same
/// values.
fn check_data_path_view(input: &[u8]) {
    let data_path = |t: PacketType| {
        matches!(
            t,
            PacketType::EagerMsgRtm | PacketType::EagerTagRtm | PacketType::MediumMsgRtm | PacketType::MediumTagRtm
        )
    };
    let eager = DataRtm::parse_eager(input);
    // The usual-layout shortcut never disagrees with the eager view.
    if let Some(u) = DataRtm::parse_eager_usual(input) {
        assert_eq!(Some(u), eager, "usual eager view disagrees");
    }
    match (DataRtm::parse(input), Packet::parse(input)) {
        (Some(d), Ok(Packet::Req(r))) => {
            assert_eq!(d.to_req(), r);
            let is_eager = matches!(r.ptype, PacketType::EagerMsgRtm | PacketType::EagerTagRtm);
            assert_eq!(eager, is_eager.then_some(d), "eager view disagrees");
        }
        (None, Ok(Packet::Req(r))) => assert!(!data_path(r.ptype) || r.raw_addr.is_some(), "view refused {r:?}"),
        (Some(d), other) => panic!("view accepted {d:?}, general parse gave {other:?}"),
        (None, _) => assert_eq!(eager, None, "eager view accepted what the view refused"),
    }
}

/// Base header of type `ptype`, version 4, `flags`, then `body`.
fn with_base(ptype: PacketType, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + body.len());
    b.push(ptype as u8);
    b.push(4);
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(body);
    b
}

fn pick<T: Copy>(all: &[T], i: u8) -> T {
    all[i as usize % all.len()]
}

fn req_types() -> Vec<PacketType> {
    PacketType::ALL.iter().copied().filter(|t| t.is_req()).collect()
}

/// Overwrites the u64 at `off` with a length of at most the bytes after
/// `data_at`, so that length-delimited packets often parse.
fn plausible_len(buf: &mut [u8], off: usize, data_at: usize, pick: Option<u16>) {
    if let (Some(v), true) = (pick, buf.len() >= off + 8) {
        let room = buf.len().saturating_sub(data_at) as u64;
        let len = u64::from(v) % (room + 2); // room + 1 is just past the end
        buf[off..off + 8].copy_from_slice(&len.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------
// Whole packets
// ---------------------------------------------------------------------------

#[test]
fn fuzz_packet_parse_arbitrary_bytes() {
    target!().for_each(|input: &[u8]| {
        parse_and_check(input);
    });
}

#[test]
fn fuzz_packet_parse_with_valid_base_header() {
    target!().with_type::<(u8, u16, Vec<u8>)>().for_each(|(t, flags, body)| {
        let buf = with_base(pick(PacketType::ALL, *t), *flags, body);
        parse_and_check(&buf);
    });
}

// ---------------------------------------------------------------------------
// One target per parser
// ---------------------------------------------------------------------------

#[test]
fn fuzz_req_parse_as() {
    let types = req_types();
    target!().with_type::<(u8, u16, Vec<u8>, bool)>().for_each(|(t, flags, body, keep_type_byte)| {
        let ptype = pick(&types, *t);
        let mut buf = with_base(ptype, *flags, body);
        if !*keep_type_byte && !body.is_empty() {
            // parse_as trusts the caller's type and ignores the type and version bytes.
            buf[0] = body[0];
            buf[1] = body[body.len() - 1];
        }
        if let Ok(r) = Req::parse_as(ptype, &buf) {
            assert_eq!(r.ptype, ptype);
            check_round_trip(&buf, &Packet::Req(r.clone()));
            if *keep_type_byte {
                assert_eq!(Packet::parse(&buf), Ok(Packet::Req(r)));
            }
        } else if *keep_type_byte {
            assert!(Packet::parse(&buf).is_err());
        }
    });
}

#[test]
fn fuzz_handshake_parse() {
    target!().with_type::<(u16, u8, Vec<u8>)>().for_each(|(flags, nextra_p3, body)| {
        // nextra_p3 in 0..8: below 3 is an error, above leaves room for the words.
        let mut buf = with_base(PacketType::Handshake, *flags, &u32::from(nextra_p3 % 8).to_le_bytes());
        buf.extend_from_slice(body);
        let parsed = Handshake::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::Handshake));
        if let Ok(h) = parsed {
            assert_eq!(h.nextra_p3(), u32::from(nextra_p3 % 8));
            check_round_trip(&buf, &Packet::Handshake(h));
        }
        // And the raw body, whatever its nextra_p3 says.
        if let Ok(h) = Handshake::parse(body) {
            check_round_trip(body, &Packet::Handshake(h));
        }
    });
}

#[test]
fn fuzz_cts_parse() {
    target!().with_type::<(u16, Vec<u8>)>().for_each(|(flags, body)| {
        let buf = with_base(PacketType::Cts, *flags, body);
        let parsed = Cts::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::Cts));
        if let Ok(c) = parsed {
            check_round_trip(&buf, &Packet::Cts(c));
        }
        if let Ok(c) = Cts::parse(body) {
            check_round_trip(body, &Packet::Cts(c));
        }
    });
}

#[test]
fn fuzz_ctsdata_parse() {
    target!().with_type::<(u16, Option<u16>, Vec<u8>)>().for_each(|(flags, seg_length, body)| {
        let mut buf = with_base(PacketType::CtsData, *flags, body);
        let data_at = if flags & rdm4::wire::CONNID_HDR != 0 { 32 } else { 24 };
        plausible_len(&mut buf, 8, data_at, *seg_length);
        let parsed = CtsData::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::CtsData));
        if let Ok(c) = parsed {
            check_round_trip(&buf, &Packet::CtsData(c));
            // The headers alone (a gathered CTSDATA) give the same fields.
            let hdrs = CtsData::parse_headers_only(&buf[..c.header_len()]);
            assert_eq!(hdrs, Ok((CtsData { data: &[], ..c }, c.data.len() as u64)));
        }
        // Headers-only parsing never panics, and what it accepts is exactly
        // the headers, which it rebuilds.
        if let Ok((h, len)) = CtsData::parse_headers_only(&buf) {
            assert_eq!(buf.len(), h.header_len());
            let mut out = vec![0u8; buf.len()];
            assert_eq!(h.emit_headers_only(&mut out, len), Ok(buf.len()));
            assert_eq!(CtsData::parse_headers_only(&out), Ok((h, len)));
        }
    });
}

#[test]
fn fuzz_readrsp_parse() {
    target!().with_type::<(u16, Option<u16>, Vec<u8>)>().for_each(|(flags, seg_length, body)| {
        let mut buf = with_base(PacketType::ReadRsp, *flags, body);
        plausible_len(&mut buf, 16, 24, *seg_length);
        let parsed = ReadRsp::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::ReadRsp));
        if let Ok(r) = parsed {
            check_round_trip(&buf, &Packet::ReadRsp(r));
        }
    });
}

#[test]
fn fuzz_atomrsp_parse() {
    target!().with_type::<(u16, Option<u16>, Vec<u8>)>().for_each(|(flags, seg_length, body)| {
        let mut buf = with_base(PacketType::AtomRsp, *flags, body);
        plausible_len(&mut buf, 16, 24, *seg_length);
        let parsed = AtomRsp::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::AtomRsp));
        if let Ok(a) = parsed {
            check_round_trip(&buf, &Packet::AtomRsp(a));
        }
    });
}

#[test]
fn fuzz_eor_and_read_nack_parse() {
    target!().with_type::<(bool, u16, Vec<u8>)>().for_each(|(eor, flags, body)| {
        let ptype = if *eor { PacketType::Eor } else { PacketType::ReadNack };
        let buf = with_base(ptype, *flags, body);
        let parsed = IdsHdr::parse_as(ptype, &buf);
        let wrap = |h| {
            if *eor {
                Packet::Eor(h)
            } else {
                Packet::ReadNack(h)
            }
        };
        assert_eq!(Packet::parse(&buf), parsed.map(wrap));
        if let Ok(h) = parsed {
            check_round_trip(&buf, &wrap(h));
        }
    });
}

#[test]
fn fuzz_receipt_parse() {
    target!().with_type::<(u16, Vec<u8>)>().for_each(|(flags, body)| {
        let buf = with_base(PacketType::Receipt, *flags, body);
        let parsed = Receipt::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::Receipt));
        if let Ok(r) = parsed {
            check_round_trip(&buf, &Packet::Receipt(r));
        }
    });
}

#[test]
fn fuzz_peer_error_parse() {
    target!().with_type::<(u16, Vec<u8>)>().for_each(|(flags, body)| {
        let buf = with_base(PacketType::PeerError, *flags, body);
        let parsed = PeerError::parse(&buf);
        assert_eq!(Packet::parse(&buf), parsed.map(Packet::PeerError));
        if let Ok(p) = parsed {
            check_round_trip(&buf, &Packet::PeerError(p));
        }
    });
}

// ---------------------------------------------------------------------------
// Round trip from valid packets of every type, then mutated
// ---------------------------------------------------------------------------

/// The fuzzed description of a packet: type index, flags, eight words the
/// field values come from, option bits, iov count, data.
type Shape = (u8, u16, [u64; 8], u8, u8, Vec<u8>);

fn iovs(n: usize, v: &[u64; 8], salt: usize) -> Vec<RmaIov> {
    (0..n)
        .map(|i| {
            let addr = v[(i + salt) % 8];
            let room = u64::MAX - addr;
            let len = v[(i + salt + 1) % 8].checked_rem(room.wrapping_add(1)).unwrap_or(v[(i + salt + 1) % 8]);
            RmaIov::new(addr, len, v[(i + salt + 2) % 8])
        })
        .collect()
}

/// Builds and emits a valid packet of the shape's type; every value comes from
/// the shape, adjusted only where the protocol constrains it.
fn build_valid(shape: &Shape) -> Vec<u8> {
    let (t, flags, v, opts, niov, data) = shape;
    let (flags, v, opts, data) = (*flags, v, *opts, data.as_slice());
    let ptype = pick(PacketType::ALL, *t);
    let connid = (opts & 4 != 0).then_some(v[7] as u32);
    let n = usize::from(niov % 5);
    let emit = |p: &Packet| {
        let mut buf = vec![0u8; p.buffer_len()];
        assert_eq!(p.emit(&mut buf), Ok(buf.len()), "{p:?}");
        buf
    };
    match ptype.category() {
        Category::Req(info) => {
            let rma = if matches!(info.family, ReqFamily::Rtw | ReqFamily::Rtr | ReqFamily::Rta) {
                iovs(n, v, 0)
            } else {
                Vec::new()
            };
            let read = if matches!(info.proto, Subprotocol::Longread | Subprotocol::Runtread) {
                iovs(n, v, 3)
            } else {
                Vec::new()
            };
            let seg_offset = (v[2] >> (v[6] % 64)).min(u64::MAX - data.len() as u64);
            let msg_length = v[1].max(seg_offset + data.len() as u64);
            let fields = ReqFields {
                msg_id: v[0] as u32,
                tag: v[4],
                msg_length,
                seg_offset,
                send_id: (v[0] >> 32) as u32,
                recv_id: v[5] as u32,
                credit_request: (v[5] >> 32) as u32,
                recv_length: v[6] as u32,
                runt_length: v[3].checked_rem(msg_length.wrapping_add(1)).unwrap_or(v[3]),
                atomic_datatype: (v[6] >> 32) as u32,
                atomic_op: (v[7] >> 32) as u32,
                padding: v[3] as u32,
            };
            let raw_len = [32usize, 36, 48, 33 + (v[0] % 64) as usize][usize::from(opts >> 3) % 4];
            let raw: Vec<u8> = (0..raw_len).map(|i| (v[i % 8] >> (8 * (i / 8 % 8))) as u8).collect();
            let r = Req {
                ptype,
                flags,
                fields,
                rma_iov: &rma,
                raw_addr: (opts & 1 != 0).then(|| RawAddrHdr::new(&raw).unwrap()),
                cq_data: (opts & 2 != 0).then_some(v[4] ^ v[5]),
                connid,
                read_iov: &read,
                data,
            };
            emit(&Packet::Req(r))
        }
        Category::NonReq(kind) => {
            let (a, b, c) = (v[0] as u32, v[1] as u32, v[2]);
            let pad = v[3] as u32;
            match kind {
                NonReqKind::Handshake => {
                    let words: Vec<LeU64> = v[..n.min(4)].iter().map(|&w| LeU64::new(w)).collect();
                    let h = Handshake {
                        flags,
                        extra_info: &words,
                        connid,
                        host_id: (opts & 8 != 0).then_some(v[4]),
                        device_version: (opts & 16 != 0).then_some(v[5] as u32),
                        user_recv_qp: (opts & 32 != 0).then_some(UserRecvQp { qpn: a, qkey: b }),
                        p2p_supported: (opts & 64 != 0).then_some(v[6] as u8),
                    };
                    emit(&Packet::Handshake(h))
                }
                NonReqKind::Cts => {
                    emit(&Packet::Cts(Cts { flags, connid, padding: pad, send_id: a, recv_id: b, recv_length: c }))
                }
                NonReqKind::CtsData => emit(&Packet::CtsData(CtsData {
                    flags,
                    recv_id: a,
                    seg_offset: c.min(u64::MAX - data.len() as u64),
                    connid,
                    data,
                })),
                NonReqKind::ReadRsp => {
                    emit(&Packet::ReadRsp(ReadRsp { flags, connid, padding: pad, recv_id: a, send_id: b, data }))
                }
                NonReqKind::AtomRsp => emit(&Packet::AtomRsp(AtomRsp {
                    flags,
                    connid,
                    padding: pad,
                    reserved: (c >> 32) as u32,
                    recv_id: a,
                    data,
                })),
                NonReqKind::Eor | NonReqKind::ReadNack => {
                    let h = IdsHdr { flags, send_id: a, recv_id: b, connid, padding: pad };
                    emit(&if kind == NonReqKind::Eor { Packet::Eor(h) } else { Packet::ReadNack(h) })
                }
                NonReqKind::Receipt => {
                    emit(&Packet::Receipt(Receipt { flags, send_id: a, msg_id: b, connid, padding: pad }))
                }
                NonReqKind::PeerError => emit(&Packet::PeerError(PeerError {
                    flags,
                    op_id: a,
                    ref_kind: (c % 4) as u32,
                    prov_errno: b,
                    connid,
                    padding: pad,
                })),
            }
        }
    }
}

#[test]
fn fuzz_round_trip_of_mutated_valid_packets() {
    target!().with_type::<(Shape, Vec<(u16, u8)>, Option<u16>)>().for_each(|(shape, flips, cut)| {
        let mut buf = build_valid(shape);
        // Unmutated, a built packet parses and re-emits to exactly its bytes.
        let p = Packet::parse(&buf).unwrap_or_else(|e| panic!("built packet does not parse: {e}: {buf:02x?}"));
        assert_eq!(p.ptype(), pick(PacketType::ALL, shape.0));
        assert_eq!(normalised(&buf, &p), buf);
        check_round_trip(&buf, &p);
        // Mutated: flip bytes, maybe cut; whatever still parses keeps the invariant.
        if !flips.is_empty() || cut.is_some() {
            let len = buf.len();
            for &(pos, x) in flips {
                buf[usize::from(pos) % len] ^= x;
            }
            if let Some(c) = cut {
                buf.truncate(usize::from(*c) % (len + 1));
            }
            parse_and_check(&buf);
        }
    });
}
