//! Property tests of the wire layer's REQ packets: for every REQ type, a
//! value built with random field values emits to exactly the bytes a
//! test-local reference encoder writes, and parses back to the same value
//! (the other packet types and the negative cases: `wire_props_nonreq.rs`).
//!
//! The reference encoder works from its own table of REQ header layouts
//! ([`REQ_LAYOUTS`], transcribed from libfabric's header structs as listed in
//! `shared/facts/libfabric_layout.json`), not from `src/wire/req.rs`, so a
//! wrong offset or a field missing from the implementation's table shows up
//! as a byte mismatch. When the facts file is beside the checkout the table is
//! also checked against it.
//!
//! Randomness is a seeded splitmix64, so every run tests the same cases and a
//! failure names the case (type, options, iteration) that reproduces it.

use rdm4::wire::{req_flags, DataRtm, Packet, PacketType, RawAddrHdr, Req, ReqFields, RmaIov, WireError};

mod common_wire;

use common_wire::*;

// ---------------------------------------------------------------------------
// The reference table of REQ layouts (libfabric header structs)
// ---------------------------------------------------------------------------

/// A fixed field of a REQ header, named as in libfabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fld {
    MsgId,
    Tag,
    MsgLength,
    SegOffset,
    SendId,
    RecvId,
    CreditRequest,
    RecvLength,
    RuntLength,
    AtomicDatatype,
    AtomicOp,
    Padding,
    RmaIovCount,
    ReadIovCount,
}

impl Fld {
    fn name(self) -> &'static str {
        match self {
            Fld::MsgId => "msg_id",
            Fld::Tag => "tag",
            Fld::MsgLength => "msg_length",
            Fld::SegOffset => "seg_offset",
            Fld::SendId => "send_id",
            Fld::RecvId => "recv_id",
            Fld::CreditRequest => "credit_request",
            Fld::RecvLength => "recv_length",
            Fld::RuntLength => "runt_length",
            Fld::AtomicDatatype => "atomic_datatype",
            Fld::AtomicOp => "atomic_op",
            Fld::Padding => "padding",
            Fld::RmaIovCount => "rma_iov_count",
            Fld::ReadIovCount => "read_iov_count",
        }
    }

    fn width(self) -> usize {
        match self {
            Fld::Tag | Fld::MsgLength | Fld::SegOffset | Fld::RuntLength => 8,
            _ => 4,
        }
    }
}

/// One REQ type's header as libfabric's struct lays it out.
struct RefLayout {
    id: u8,
    name: &'static str,
    /// `sizeof` the struct: where `rma_iov[]` (or the optional headers) start.
    sizeof: usize,
    /// Every member after the base header, with its offset. For the RTA union
    /// at offset 20 the member this type uses (wire-facts #9).
    fields: &'static [(Fld, usize)],
}

impl RefLayout {
    fn has(&self, f: Fld) -> bool {
        self.fields.iter().any(|&(g, _)| g == f)
    }
}

macro_rules! layouts {
    ($( $id:literal $name:literal $size:literal [$( $f:ident @ $off:literal ),*] ;)*) => {
        const REQ_LAYOUTS: &[RefLayout] = &[
            $( RefLayout { id: $id, name: $name, sizeof: $size, fields: &[$( (Fld::$f, $off) ),*] }, )*
        ];
    };
}

layouts! {
    64 "EAGER_MSGRTM" 8 [MsgId@4];
    65 "EAGER_TAGRTM" 16 [MsgId@4, Tag@8];
    66 "MEDIUM_MSGRTM" 24 [MsgId@4, MsgLength@8, SegOffset@16];
    67 "MEDIUM_TAGRTM" 32 [MsgId@4, MsgLength@8, SegOffset@16, Tag@24];
    68 "LONGCTS_MSGRTM" 24 [MsgId@4, MsgLength@8, SendId@16, CreditRequest@20];
    69 "LONGCTS_TAGRTM" 32 [MsgId@4, MsgLength@8, SendId@16, CreditRequest@20, Tag@24];
    70 "EAGER_RTW" 8 [RmaIovCount@4];
    71 "LONGCTS_RTW" 24 [RmaIovCount@4, MsgLength@8, SendId@16, CreditRequest@20];
    72 "SHORT_RTR" 24 [RmaIovCount@4, MsgLength@8, RecvId@16, RecvLength@20];
    73 "LONGCTS_RTR" 24 [RmaIovCount@4, MsgLength@8, RecvId@16, RecvLength@20];
    74 "WRITE_RTA" 24 [MsgId@4, RmaIovCount@8, AtomicDatatype@12, AtomicOp@16, Padding@20];
    75 "FETCH_RTA" 24 [MsgId@4, RmaIovCount@8, AtomicDatatype@12, AtomicOp@16, RecvId@20];
    76 "COMPARE_RTA" 24 [MsgId@4, RmaIovCount@8, AtomicDatatype@12, AtomicOp@16, RecvId@20];
    128 "LONGREAD_MSGRTM" 24 [MsgId@4, MsgLength@8, SendId@16, ReadIovCount@20];
    129 "LONGREAD_TAGRTM" 32 [MsgId@4, MsgLength@8, SendId@16, ReadIovCount@20, Tag@24];
    130 "LONGREAD_RTW" 24 [RmaIovCount@4, MsgLength@8, SendId@16, ReadIovCount@20];
    133 "DC_EAGER_MSGRTM" 16 [MsgId@4, SendId@8, Padding@12];
    134 "DC_EAGER_TAGRTM" 24 [MsgId@4, SendId@8, Padding@12, Tag@16];
    135 "DC_MEDIUM_MSGRTM" 32 [MsgId@4, SendId@8, Padding@12, MsgLength@16, SegOffset@24];
    136 "DC_MEDIUM_TAGRTM" 40 [MsgId@4, SendId@8, Padding@12, MsgLength@16, SegOffset@24, Tag@32];
    137 "DC_LONGCTS_MSGRTM" 24 [MsgId@4, MsgLength@8, SendId@16, CreditRequest@20];
    138 "DC_LONGCTS_TAGRTM" 32 [MsgId@4, MsgLength@8, SendId@16, CreditRequest@20, Tag@24];
    139 "DC_EAGER_RTW" 16 [RmaIovCount@4, SendId@8, Padding@12];
    140 "DC_LONGCTS_RTW" 24 [RmaIovCount@4, MsgLength@8, SendId@16, CreditRequest@20];
    141 "DC_WRITE_RTA" 24 [MsgId@4, RmaIovCount@8, AtomicDatatype@12, AtomicOp@16, SendId@20];
    142 "RUNTCTS_MSGRTM" 40 [MsgId@4, MsgLength@8, SendId@16, CreditRequest@20, SegOffset@24, RuntLength@32];
    143 "RUNTCTS_TAGRTM" 48 [MsgId@4, MsgLength@8, SendId@16, CreditRequest@20, SegOffset@24, RuntLength@32, Tag@40];
    144 "RUNTCTS_RTW" 40 [RmaIovCount@4, MsgLength@8, SendId@16, CreditRequest@20, SegOffset@24, RuntLength@32];
    145 "RUNTREAD_MSGRTM" 40 [MsgId@4, MsgLength@8, SendId@16, ReadIovCount@20, SegOffset@24, RuntLength@32];
    146 "RUNTREAD_TAGRTM" 48 [MsgId@4, MsgLength@8, SendId@16, ReadIovCount@20, SegOffset@24, RuntLength@32, Tag@40];
    147 "RUNTREAD_RTW" 40 [RmaIovCount@4, MsgLength@8, SendId@16, ReadIovCount@20, SegOffset@24, RuntLength@32];
}

fn ref_layout(ptype: PacketType) -> &'static RefLayout {
    REQ_LAYOUTS
        .iter()
        .find(|l| l.id == ptype as u8)
        .unwrap_or_else(|| panic!("test table has no layout for REQ type {}", ptype.name()))
}

fn req_types() -> impl Iterator<Item = PacketType> {
    PacketType::ALL.iter().copied().filter(|t| t.req_info().is_some())
}

fn get_field(f: &ReqFields, fld: Fld) -> u64 {
    match fld {
        Fld::MsgId => f.msg_id.into(),
        Fld::Tag => f.tag,
        Fld::MsgLength => f.msg_length,
        Fld::SegOffset => f.seg_offset,
        Fld::SendId => f.send_id.into(),
        Fld::RecvId => f.recv_id.into(),
        Fld::CreditRequest => f.credit_request.into(),
        Fld::RecvLength => f.recv_length.into(),
        Fld::RuntLength => f.runt_length,
        Fld::AtomicDatatype => f.atomic_datatype.into(),
        Fld::AtomicOp => f.atomic_op.into(),
        Fld::Padding => f.padding.into(),
        Fld::RmaIovCount | Fld::ReadIovCount => unreachable!("counts are list lengths"),
    }
}

// ---------------------------------------------------------------------------
// The reference encoder
// ---------------------------------------------------------------------------

fn put_iovs(out: &mut Vec<u8>, iovs: &[RmaIov]) {
    for v in iovs {
        out.extend_from_slice(&v.addr().to_le_bytes());
        out.extend_from_slice(&v.len().to_le_bytes());
        out.extend_from_slice(&v.key().to_le_bytes());
    }
}

/// The flags a REQ must carry on the wire: the non-optional bits as given, the
/// optional-header bits from what is present (spec table 3.1).
fn ref_req_flags(r: &Req) -> u16 {
    let mut f = r.flags & !(0x1 | 0x2 | 0x8000);
    if r.raw_addr.is_some() {
        f |= 0x1;
    }
    if r.cq_data.is_some() {
        f |= 0x2;
    }
    if r.connid.is_some() {
        f |= 0x8000;
    }
    f
}

/// Offset of the application data of `r` under layout `l`.
fn ref_app_data_offset(l: &RefLayout, r: &Req) -> usize {
    l.sizeof
        + 24 * r.rma_iov.len()
        + r.raw_addr.map_or(0, |a| 4 + a.bytes().len())
        + r.cq_data.map_or(0, |_| 8)
        + r.connid.map_or(0, |_| 4)
        + 24 * r.read_iov.len()
}

/// The bytes of `r`: mandatory header (fixed fields, rma_iov[]), optional
/// headers in flag order (raw address, CQ data, connid), read_iov[], data.
fn ref_encode_req(l: &RefLayout, r: &Req) -> Vec<u8> {
    let mut out = vec![0u8; l.sizeof];
    out[0] = l.id;
    out[1] = 4;
    put(&mut out, 2, 2, ref_req_flags(r).into());
    for &(f, off) in l.fields {
        let v = match f {
            Fld::RmaIovCount => r.rma_iov.len() as u64,
            Fld::ReadIovCount => r.read_iov.len() as u64,
            _ => get_field(&r.fields, f),
        };
        put(&mut out, off, f.width(), v);
    }
    put_iovs(&mut out, r.rma_iov);
    if let Some(a) = r.raw_addr {
        out.extend_from_slice(&(a.bytes().len() as u32).to_le_bytes());
        out.extend_from_slice(a.bytes());
    }
    if let Some(c) = r.cq_data {
        out.extend_from_slice(&c.to_le_bytes());
    }
    if let Some(c) = r.connid {
        out.extend_from_slice(&c.to_le_bytes());
    }
    put_iovs(&mut out, r.read_iov);
    out.extend_from_slice(r.data);
    out
}

// ---------------------------------------------------------------------------
// Random REQ values
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum RawChoice {
    None,
    /// libfabric's size (wire-facts #12).
    Size36,
    /// The bare address.
    Size32,
    /// Any larger size a peer might send: the parser must honour `size`.
    Larger,
}

const RAW_CHOICES: [RawChoice; 4] = [RawChoice::None, RawChoice::Size36, RawChoice::Size32, RawChoice::Larger];

/// The owned parts of a random REQ; [`OwnedReq::req`] borrows them.
struct OwnedReq {
    ptype: PacketType,
    flags: u16,
    fields: ReqFields,
    rma_iov: Vec<RmaIov>,
    raw: Option<Vec<u8>>,
    cq_data: Option<u64>,
    connid: Option<u32>,
    read_iov: Vec<RmaIov>,
    data: Vec<u8>,
}

impl OwnedReq {
    fn req(&self) -> Req<'_> {
        Req {
            ptype: self.ptype,
            flags: self.flags,
            fields: self.fields,
            rma_iov: &self.rma_iov,
            raw_addr: self.raw.as_deref().map(|b| RawAddrHdr::new(b).expect("raw address of >= 32 bytes")),
            cq_data: self.cq_data,
            connid: self.connid,
            read_iov: &self.read_iov,
            data: &self.data,
        }
    }
}

/// REQ flag bits that are not optional-header bits.
const REQ_BODY_FLAGS: [u16; 5] =
    [req_flags::MSG, req_flags::TAGGED, req_flags::RMA, req_flags::ATOMIC, req_flags::READ_NACK];

fn random_req(rng: &mut Rng, ptype: PacketType, raw: RawChoice, cq: bool, connid: bool) -> OwnedReq {
    let l = ref_layout(ptype);
    let data = {
        let n = rng.data_len();
        rng.bytes(n)
    };
    let mut flags = 0u16;
    for bit in REQ_BODY_FLAGS {
        if rng.bool() {
            flags |= bit;
        }
    }
    // Stray optional-header bits: emit must recompute them from the options.
    if rng.below(4) == 0 {
        flags |= rng.u16() & req_flags::OPT_HDR_MASK;
    }
    let mut fields = ReqFields::default();
    let seg = l.has(Fld::SegOffset);
    for &(f, _) in l.fields {
        match f {
            Fld::MsgId => fields.msg_id = rng.edge_u32(),
            Fld::Tag => fields.tag = rng.edge_u64(),
            Fld::MsgLength if seg => fields.msg_length = rng.range(data.len() as u64, u64::MAX),
            Fld::MsgLength => fields.msg_length = rng.edge_u64(),
            Fld::SendId => fields.send_id = rng.edge_u32(),
            Fld::RecvId => fields.recv_id = rng.edge_u32(),
            Fld::CreditRequest => fields.credit_request = rng.edge_u32(),
            Fld::RecvLength => fields.recv_length = rng.edge_u32(),
            Fld::AtomicDatatype => fields.atomic_datatype = rng.edge_u32(),
            Fld::AtomicOp => fields.atomic_op = rng.edge_u32(),
            Fld::Padding => fields.padding = rng.edge_u32(),
            // Set below, once msg_length is known.
            Fld::SegOffset | Fld::RuntLength | Fld::RmaIovCount | Fld::ReadIovCount => {}
        }
    }
    if seg {
        // The segment must lie inside the message.
        fields.seg_offset = rng.range(0, fields.msg_length - data.len() as u64);
    }
    if l.has(Fld::RuntLength) {
        fields.runt_length = rng.range(0, fields.msg_length);
    }
    let rma_iov = if l.has(Fld::RmaIovCount) { rng.iovs(4) } else { Vec::new() };
    let read_iov = if l.has(Fld::ReadIovCount) { rng.iovs(4) } else { Vec::new() };
    let raw = match raw {
        RawChoice::None => None,
        RawChoice::Size36 => Some(rng.bytes(36)),
        RawChoice::Size32 => Some(rng.bytes(32)),
        RawChoice::Larger => {
            let n = if rng.bool() { 48 } else { 37 + rng.below(60) as usize };
            Some(rng.bytes(n))
        }
    };
    OwnedReq {
        ptype,
        flags,
        fields,
        rma_iov,
        raw,
        cq_data: cq.then(|| rng.edge_u64()),
        connid: connid.then(|| rng.edge_u32()),
        read_iov,
        data,
    }
}

// ---------------------------------------------------------------------------
// The reference table itself
// ---------------------------------------------------------------------------

#[test]
fn reference_table_covers_every_req_type_and_every_header_byte() {
    for ptype in req_types() {
        let l = ref_layout(ptype);
        assert_eq!(l.name, ptype.name());
    }
    assert_eq!(REQ_LAYOUTS.len(), req_types().count(), "table has types that are not in PacketType::ALL");
    for l in REQ_LAYOUTS {
        // Members tile [4, sizeof) exactly: no gap, no overlap.
        let mut fields = l.fields.to_vec();
        fields.sort_by_key(|&(_, off)| off);
        let mut at = 4;
        for (f, off) in fields {
            assert_eq!(off, at, "{}: {} at {off}, expected {at}", l.name, f.name());
            at += f.width();
        }
        assert_eq!(at, l.sizeof, "{}", l.name);
    }
}

/// Checks the test table against libfabric's compiled layout, when the facts
/// file is beside the checkout (it is in the project's tree and in CI).
#[test]
fn reference_table_matches_libfabric_layout_json() {
    let path = std::env::var("RDM4_FACTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/facts"))
        .join("libfabric_layout.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("note: {} not found; layout cross-check skipped", path.display());
        return;
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("libfabric_layout.json parses");
    let types = json["packet_types"].as_array().expect("packet_types");
    let structs = json["structs"].as_array().expect("structs");
    for l in REQ_LAYOUTS {
        let t = types.iter().find(|t| t["id"] == l.id).unwrap_or_else(|| panic!("id {} not in json", l.id));
        assert_eq!(t["name"], l.name);
        assert_eq!(t["header_sizeof"], l.sizeof, "{}", l.name);
        let s = structs.iter().find(|s| s["struct"] == t["header_struct"]).expect("struct in json");
        let members: Vec<(&str, u64, u64)> = s["fields"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["offset"].as_u64().unwrap() >= 4 && f["kind"] != "flexible_array")
            .map(|f| (f["name"].as_str().unwrap(), f["offset"].as_u64().unwrap(), f["size"].as_u64().unwrap()))
            .collect();
        for &(f, off) in l.fields {
            assert!(
                members.contains(&(f.name(), off as u64, f.width() as u64)),
                "{}: {} @ {off} (width {}) is not a member of {} in the json: {members:?}",
                l.name,
                f.name(),
                f.width(),
                t["header_struct"]
            );
        }
        // Every member offset is covered (unions: one member per offset).
        for (name, off, _) in &members {
            assert!(l.fields.iter().any(|&(_, o)| o as u64 == *off), "{}: member {name} @ {off} missing", l.name);
        }
        let has_rma = s["fields"].as_array().unwrap().iter().any(|f| f["name"] == "rma_iov");
        assert_eq!(has_rma, l.has(Fld::RmaIovCount), "{}: rma_iov[]", l.name);
    }
}

// ---------------------------------------------------------------------------
// REQ round trips
// ---------------------------------------------------------------------------

const REQ_ITERATIONS: usize = 200;

fn check_req(o: &OwnedReq, check_prefixes: bool, ctx: &dyn Fn() -> String) {
    let r = o.req();
    let l = ref_layout(r.ptype);
    let expected = ref_encode_req(l, &r);
    let off = ref_app_data_offset(l, &r);
    assert_eq!(r.app_data_offset(), off, "app_data_offset, {}", ctx());
    assert_eq!(r.hdr_len(), l.sizeof + 24 * r.rma_iov.len(), "hdr_len, {}", ctx());
    assert_eq!(r.wire_flags(), ref_req_flags(&r), "wire_flags, {}", ctx());

    let p = Packet::Req(r.clone());
    let bytes = emit_checked(&p, &expected, ctx);
    let want = Req { flags: ref_req_flags(&r), ..r.clone() };
    let parsed = Packet::parse(&bytes).unwrap_or_else(|e| panic!("parse failed: {e}, {}", ctx()));
    assert_eq!(parsed, Packet::Req(want.clone()), "{}", ctx());
    assert_eq!(Req::parse_as(r.ptype, &bytes).as_ref(), Ok(&want), "parse_as, {}", ctx());
    // The connid identifying the sender: the raw address's wins (wire-facts #13).
    let sender = match o.raw.as_deref() {
        Some(b) => Some(u32::from_le_bytes([b[20], b[21], b[22], b[23]])),
        None => o.connid,
    };
    assert_eq!(parsed.sender_connid(), sender, "sender_connid, {}", ctx());
    check_data_path_view(&want, &bytes, ctx);

    if check_prefixes {
        // A REQ's data is "the rest of the packet": a prefix that still holds
        // every header is a valid packet with less data; a shorter one is not.
        for n in 0..bytes.len() {
            match Packet::parse(&bytes[..n]) {
                Ok(Packet::Req(q)) if n >= off => {
                    assert_eq!(q, Req { data: &want.data[..n - off], ..want.clone() }, "prefix {n}, {}", ctx())
                }
                Err(_) if n < off => {}
                other => panic!("prefix of {n} bytes (data at {off}) gave {other:?}, {}", ctx()),
            }
        }
    }
}

/// The fixed-offset eager/medium view and writer agree with the general
/// parser and emitter; every other REQ is left to the general path.
fn check_data_path_view(want: &Req, bytes: &[u8], ctx: &dyn Fn() -> String) {
    let data_path = matches!(
        want.ptype,
        PacketType::EagerMsgRtm | PacketType::EagerTagRtm | PacketType::MediumMsgRtm | PacketType::MediumTagRtm
    ) && want.raw_addr.is_none();
    match DataRtm::parse(bytes) {
        Some(d) => {
            assert!(data_path, "view accepted a {}, {}", want.ptype.name(), ctx());
            assert_eq!(d.to_req(), *want, "view, {}", ctx());
            let mut out = vec![0u8; d.buffer_len()];
            assert_eq!(d.emit(&mut out), Ok(bytes.len()), "view emit, {}", ctx());
            assert_eq!(out, bytes, "view emit bytes, {}", ctx());
            assert!(d.emit(&mut out[..bytes.len() - 1]).is_err(), "view emit into too small a buffer, {}", ctx());
            let eager = matches!(want.ptype, PacketType::EagerMsgRtm | PacketType::EagerTagRtm);
            assert_eq!(DataRtm::parse_eager(bytes), eager.then_some(d), "eager view, {}", ctx());
            // The shortcut for the usual layout takes exactly the version-4
            // eager RTMs with the default flags and a connid header alone.
            let usual = eager && bytes[1] == 4 && d.flags == want.ptype.default_req_flags() | req_flags::CONNID_HDR;
            assert_eq!(DataRtm::parse_eager_usual(bytes), usual.then_some(d), "usual eager view, {}", ctx());
            // The sender's eager writer puts the default flags: it agrees
            // with the general emitter whenever the packet has them.
            if eager && d.flags & !(req_flags::CQ_DATA_HDR | req_flags::CONNID_HDR) == want.ptype.default_req_flags() {
                let tagged = want.ptype == PacketType::EagerTagRtm;
                let mut out = vec![0xEEu8; bytes.len() + 3];
                let n = DataRtm::emit_eager(&mut out, tagged, d.msg_id, d.tag, d.cq_data, d.connid, d.data);
                assert_eq!(&out[..n], bytes, "eager writer, {}", ctx());
                assert_eq!(out[n..], [0xEE; 3], "eager writer wrote past the packet, {}", ctx());
                let short = &mut out[..bytes.len() - 1];
                assert_eq!(DataRtm::emit_eager(short, tagged, d.msg_id, d.tag, d.cq_data, d.connid, d.data), 0);
            }
        }
        None => {
            assert!(!data_path, "view refused, {}", ctx());
            assert_eq!(DataRtm::parse_eager(bytes), None, "eager view accepted, {}", ctx());
            assert_eq!(DataRtm::parse_eager_usual(bytes), None, "usual eager view accepted, {}", ctx());
        }
    }
}

#[test]
fn every_req_type_with_every_optional_header_combination_round_trips() {
    let mut rng = Rng::new(0x5EED_0000_0000_0001);
    let mut cases = 0usize;
    for ptype in req_types() {
        for raw in RAW_CHOICES {
            for cq in [false, true] {
                for connid in [false, true] {
                    for i in 0..REQ_ITERATIONS {
                        let o = random_req(&mut rng, ptype, raw, cq, connid);
                        let ctx = || format!("{} raw={raw:?} cq={cq} connid={connid} iteration {i}", ptype.name());
                        check_req(&o, i % 25 == 0, &ctx);
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, req_types().count() * RAW_CHOICES.len() * 4 * REQ_ITERATIONS);
}

#[test]
fn req_fields_a_type_does_not_carry_are_not_written() {
    // Every field set: emit writes only the type's own, so parse returns zero
    // for the rest, exactly as the reference table says.
    let all = ReqFields {
        msg_id: 0x1111_1111,
        tag: 0x2222_2222_2222_2222,
        msg_length: u64::MAX,
        seg_offset: 0,
        send_id: 0x3333_3333,
        recv_id: 0x4444_4444,
        credit_request: 0x5555_5555,
        recv_length: 0x6666_6666,
        runt_length: 0x7777_7777,
        atomic_datatype: 0x8888_8888,
        atomic_op: 0x9999_9999,
        padding: 0xAAAA_AAAA,
    };
    for ptype in req_types() {
        let l = ref_layout(ptype);
        let r = Req { fields: all, ..Req::new(ptype) };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        let Ok(Packet::Req(q)) = Packet::parse(&buf) else { panic!("{}", ptype.name()) };
        for f in [
            Fld::MsgId,
            Fld::Tag,
            Fld::MsgLength,
            Fld::SegOffset,
            Fld::SendId,
            Fld::RecvId,
            Fld::CreditRequest,
            Fld::RecvLength,
            Fld::RuntLength,
            Fld::AtomicDatatype,
            Fld::AtomicOp,
            Fld::Padding,
        ] {
            let want = if l.has(f) { get_field(&all, f) } else { 0 };
            assert_eq!(get_field(&q.fields, f), want, "{} {}", ptype.name(), f.name());
        }
    }
}

#[test]
fn req_emit_refuses_an_iov_list_on_a_type_without_one() {
    let iov = [RmaIov::new(1, 2, 3)];
    for ptype in req_types() {
        let l = ref_layout(ptype);
        let mut r = Req::new(ptype);
        if !l.has(Fld::RmaIovCount) {
            r.rma_iov = &iov;
        } else if !l.has(Fld::ReadIovCount) {
            r.read_iov = &iov;
        } else {
            continue;
        }
        let mut buf = vec![CANARY; 256];
        assert!(matches!(r.emit(&mut buf), Err(WireError::BadField { .. })), "{}", ptype.name());
        assert!(buf.iter().all(|&b| b == CANARY), "{}", ptype.name());
    }
}

#[test]
fn short_buffers_are_truncated() {
    for n in 0..4 {
        assert!(matches!(Packet::parse(&eager_msgrtm()[..n]), Err(WireError::Truncated { .. })), "{n} bytes");
    }
    // Header of every type cut one byte short of its fixed part.
    for ptype in req_types() {
        let l = ref_layout(ptype);
        let mut b = base(l.id, 0);
        b.resize(l.sizeof - 1, 0);
        assert!(matches!(Packet::parse(&b), Err(WireError::Truncated { .. })), "{}", l.name);
    }
}
