//! Property tests of the wire layer: for every packet type, a value built with
//! random field values emits to exactly the bytes a test-local reference
//! encoder writes, and parses back to the same value.
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

use rdm4::wire::{
    self, handshake_flags as hf, req_flags, AtomRsp, Cts, CtsData, DataRtm, Handshake, IdsHdr, LeU64, Packet,
    PacketType, PeerError, RawAddrHdr, ReadRsp, Receipt, Req, ReqFields, RmaIov, UserRecvQp, WireError, CONNID_HDR,
    CTS_READ_REQ,
};

// ---------------------------------------------------------------------------
// Deterministic randomness
// ---------------------------------------------------------------------------

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast and good enough here.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    fn u16(&mut self) -> u16 {
        (self.u64() >> 48) as u16
    }

    fn bool(&mut self) -> bool {
        self.u64() >> 63 == 1
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is irrelevant here.
    fn below(&mut self, n: u64) -> u64 {
        self.u64() % n
    }

    /// In `lo..=hi`, with the two ends drawn often.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi);
        match self.below(8) {
            0 => lo,
            1 => hi,
            2 => lo + self.below((hi - lo).min(255) + 1),
            _ if hi - lo == u64::MAX => self.u64(),
            _ => lo + self.below(hi - lo + 1),
        }
    }

    /// Any u64, with boundary values and small values drawn often.
    fn edge_u64(&mut self) -> u64 {
        const EDGES: [u64; 8] = [0, 1, 0xFF, 1 << 32, 1 << 63, u64::MAX - 1, u64::MAX, u32::MAX as u64];
        match self.below(8) {
            0 => EDGES[self.below(8) as usize],
            1 => self.below(1 << 16),
            _ => self.u64(),
        }
    }

    fn edge_u32(&mut self) -> u32 {
        const EDGES: [u32; 6] = [0, 1, 0xFF, 1 << 31, u32::MAX - 1, u32::MAX];
        match self.below(8) {
            0 => EDGES[self.below(6) as usize],
            1 => self.below(1 << 8) as u32,
            _ => self.u32(),
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u64() as u8).collect()
    }

    /// A length for a data payload: mostly short, sometimes a few hundred bytes.
    fn data_len(&mut self) -> usize {
        match self.below(8) {
            0 => 0,
            1 => self.below(600) as usize,
            _ => self.below(64) as usize,
        }
    }

    /// `efa_rma_iov` entries whose addr + len does not wrap (the parser rejects wrapping).
    fn iovs(&mut self, max: u64) -> Vec<RmaIov> {
        let n = self.below(max + 1);
        (0..n)
            .map(|_| {
                let addr = self.edge_u64();
                let len = self.range(0, u64::MAX - addr);
                RmaIov::new(addr, len, self.u64())
            })
            .collect()
    }
}

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

fn put(out: &mut [u8], off: usize, width: usize, v: u64) {
    out[off..off + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

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
// Shared checks
// ---------------------------------------------------------------------------

const CANARY: u8 = 0xA5;

/// Emits `p`, checks the length and bytes against `expected`, that nothing past
/// the packet is written, and that a buffer one byte short is refused with
/// nothing written. Returns the emitted bytes.
fn emit_checked(p: &Packet, expected: &[u8], ctx: &dyn Fn() -> String) -> Vec<u8> {
    let len = p.buffer_len();
    assert_eq!(len, expected.len(), "buffer_len, {}", ctx());
    let mut buf = vec![CANARY; len + 16];
    let n = p.emit(&mut buf).unwrap_or_else(|e| panic!("emit failed: {e}, {}", ctx()));
    assert_eq!(n, len, "emit length, {}", ctx());
    assert!(buf[..len] == *expected, "emitted bytes differ from the reference encoding, {}", ctx());
    assert!(buf[len..].iter().all(|&b| b == CANARY), "emit wrote past the packet, {}", ctx());

    let mut short = vec![CANARY; len + 16];
    assert_eq!(
        p.emit(&mut short[..len - 1]),
        Err(WireError::BufferTooSmall { need: len, have: len - 1 }),
        "emit into a buffer one byte short, {}",
        ctx()
    );
    assert!(short.iter().all(|&b| b == CANARY), "a refused emit wrote bytes, {}", ctx());
    buf.truncate(len);
    buf
}

/// Every strict prefix of a non-REQ packet is an error (their length is fixed
/// by the header: seg_length, nextra_p3 and the flags say it all).
fn check_prefixes_fail(bytes: &[u8], ctx: &dyn Fn() -> String) {
    for n in 0..bytes.len() {
        if let Ok(p) = Packet::parse(&bytes[..n]) {
            panic!("prefix of {n}/{} bytes parsed as {p:?}, {}", bytes.len(), ctx());
        }
    }
}

/// Emit, compare, parse back; `want` is `p` as a parse must return it.
fn check_nonreq(p: &Packet, want: &Packet, expected: &[u8], prefixes: bool, ctx: &dyn Fn() -> String) {
    let bytes = emit_checked(p, expected, ctx);
    let parsed = Packet::parse(&bytes).unwrap_or_else(|e| panic!("parse failed: {e}, {}", ctx()));
    assert_eq!(&parsed, want, "{}", ctx());
    // Parsing the reference bytes (not only our own output) gives the same.
    assert_eq!(Packet::parse(expected).as_ref(), Ok(want), "{}", ctx());
    if prefixes {
        check_prefixes_fail(&bytes, ctx);
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

// ---------------------------------------------------------------------------
// Non-REQ round trips
// ---------------------------------------------------------------------------

const NONREQ_ITERATIONS: usize = 300;

fn base(id: u8, flags: u16) -> Vec<u8> {
    let mut b = vec![id, 4, 0, 0];
    put(&mut b, 2, 2, flags.into());
    b
}

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
                let (wflags, mu) = multiuse(c.flags, c.connid, c.padding);
                let mut e = base(3, wflags);
                e.resize(24, 0);
                put(&mut e, 4, 4, mu.into());
                put(&mut e, 8, 4, c.send_id.into());
                put(&mut e, 12, 4, c.recv_id.into());
                put(&mut e, 16, 8, c.recv_length);
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
            let (wflags, mu) = multiuse(r.flags, r.connid, r.padding);
            let mut e = base(5, wflags);
            e.resize(24, 0);
            put(&mut e, 4, 4, mu.into());
            // libfabric order: recv_id @8, send_id @12 (wire-facts #1).
            put(&mut e, 8, 4, r.recv_id.into());
            put(&mut e, 12, 4, r.send_id.into());
            put(&mut e, 16, 8, data.len() as u64);
            e.extend_from_slice(&data);
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
            let (wflags, mu) = multiuse(a.flags, a.connid, a.padding);
            let mut e = base(8, wflags);
            e.resize(24, 0);
            put(&mut e, 4, 4, mu.into());
            put(&mut e, 8, 4, a.reserved.into());
            put(&mut e, 12, 4, a.recv_id.into());
            put(&mut e, 16, 8, data.len() as u64);
            e.extend_from_slice(&data);
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

/// A valid EAGER_MSGRTM, to be spoiled by the tests below.
fn eager_msgrtm() -> Vec<u8> {
    let mut b = base(64, req_flags::MSG);
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(b"payload");
    b
}

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
fn iov_addr_plus_len_wrapping_is_length_overflow() {
    // EAGER_RTW, one rma_iov: addr + len = 2^64.
    let mut b = base(70, 0);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    assert!(matches!(Packet::parse(&b), Err(WireError::LengthOverflow { .. })));
    // addr + len = 2^64 - 1 is the last byte: fine.
    put(&mut b, 16, 8, 0);
    assert!(Packet::parse(&b).is_ok());
    // LONGREAD_MSGRTM, one read_iov that wraps.
    let mut b = base(128, req_flags::MSG);
    b.resize(24, 0);
    put(&mut b, 20, 4, 1);
    b.extend_from_slice(&(1u64 << 63).to_le_bytes());
    b.extend_from_slice(&(1u64 << 63).to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    assert!(matches!(Packet::parse(&b), Err(WireError::LengthOverflow { .. })));
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
    let wrap = [RmaIov::new(u64::MAX, 1, 0)];
    let rtw = Req { rma_iov: &wrap, ..Req::new(PacketType::EagerRtw) };
    assert!(over(rtw.emit(&mut buf)), "iov wraps");
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
