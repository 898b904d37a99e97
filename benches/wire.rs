//! Wire-layer benchmarks: parse + validate and emit of the packets on the data
//! path of the main subprotocols.
//!
//! - `parse/*`: `Packet::parse` of a whole packet, then a read of a header
//!   field and the data length, so the validated result is used.
//! - `emit/*`: `emit` of the typed value into a preallocated buffer, data
//!   payload copy included.
//! - `parse_view/*`: the general checked view (`ReqView`) of any REQ.
//! - `rx_path/*`: what the engine runs on a received packet: the
//!   fixed-offset `DataRtm` view for eager and medium RTMs, the general
//!   parsers for the rest.
//! - `emit_header/*`: the same values with empty data: the per-header cost;
//!   `*/datapath` is the engine's fixed-offset writer for eager and medium.
//!
//! Each measured operation sits in an `#[inline(never)]` function, as it
//! would behind the engine's call, so that callgrind can count its
//! instructions per call. Wall-clock numbers on a shared 2-core machine are
//! noisy; instruction counts are not:
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/deps/wire-<hash> --bench --profile-time 1 '^parse/EAGER'
//! callgrind_annotate --inclusive=yes --tree=calling cg.out | grep 'wire::parse_and_use ('
//! ```
//!
//! (inclusive instructions / calls = instructions per parse).
//!
//! Run: `cargo bench --bench wire -- --warm-up-time 1 --measurement-time 2`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rdm4::wire::{
    parse_base, req_flags, Category, CtsData, DataRtm, NonReqKind, Packet, PacketType, ReadRsp, Req, ReqFields, ReqView,
};

const CONNID: u32 = 0xC1D2_E3F4;

fn eager_tagrtm(data: &[u8]) -> Req<'_> {
    Req {
        fields: ReqFields { msg_id: 0x1122_3344, tag: 0x0102_0304_0506_0708, ..ReqFields::default() },
        connid: Some(CONNID),
        data,
        ..Req::new(PacketType::EagerTagRtm)
    }
}

fn medium_tagrtm(data: &[u8]) -> Req<'_> {
    Req {
        fields: ReqFields {
            msg_id: 0x1122_3344,
            tag: 0x0102_0304_0506_0708,
            msg_length: 1 << 20,
            seg_offset: 0x1_2400,
            ..ReqFields::default()
        },
        // libfabric sends the connid header on every REQ after the handshake.
        connid: Some(CONNID),
        data,
        ..Req::new(PacketType::MediumTagRtm)
    }
}

fn ctsdata(data: &[u8]) -> CtsData<'_> {
    CtsData { flags: 0, recv_id: 0x99AA_BBCC, seg_offset: 0x12_3400, connid: Some(CONNID), data }
}

fn readrsp(data: &[u8]) -> ReadRsp<'_> {
    // libfabric always sets CONNID_HDR on READRSP (multiuse slot, no extra bytes).
    ReadRsp { flags: 0, connid: Some(CONNID), padding: 0, recv_id: 0x99AA_BBCC, send_id: 0x5566_7788, data }
}

fn bytes_of(p: &Packet) -> Vec<u8> {
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).expect("emit");
    buf
}

/// Parse, then use one header field and the data length.
#[inline(never)]
fn parse_and_use(buf: &[u8]) -> u64 {
    match Packet::parse(buf) {
        Ok(Packet::Req(r)) => r.fields.tag ^ r.data.len() as u64 ^ u64::from(r.connid.unwrap_or(0)),
        Ok(Packet::CtsData(c)) => c.seg_offset ^ c.data.len() as u64 ^ u64::from(c.connid.unwrap_or(0)),
        Ok(Packet::ReadRsp(r)) => u64::from(r.recv_id) ^ r.data.len() as u64,
        Ok(_) => 0,
        Err(_) => u64::MAX,
    }
}

/// The receive path's parse: base header, then the REQ view or the
/// non-REQ parser, reading what a handler reads first.
#[inline(never)]
fn view_and_use(buf: &[u8]) -> u64 {
    let Ok((t, _)) = parse_base(buf) else { return u64::MAX };
    match t.category() {
        Category::Req(_) => ReqView::parse(t, buf)
            .map_or(u64::MAX, |v| v.tag() ^ v.data().len() as u64 ^ u64::from(v.connid().unwrap_or(0))),
        Category::NonReq(NonReqKind::CtsData) => {
            CtsData::parse(buf).map_or(u64::MAX, |c| c.seg_offset ^ c.data.len() as u64)
        }
        Category::NonReq(NonReqKind::ReadRsp) => {
            ReadRsp::parse(buf).map_or(u64::MAX, |r| u64::from(r.recv_id) ^ r.data.len() as u64)
        }
        Category::NonReq(_) => 0,
    }
}

/// The engine's receive path: the fixed-offset view for eager and medium
/// RTMs, the general parsers for the rest.
#[inline(never)]
fn rx_path_and_use(buf: &[u8]) -> u64 {
    if let Some(d) = DataRtm::parse(buf) {
        return d.tag ^ d.data.len() as u64 ^ u64::from(d.connid.unwrap_or(0));
    }
    view_and_use(buf)
}

#[inline(never)]
fn emit_data_rtm(d: &DataRtm, out: &mut [u8]) -> usize {
    d.emit(out).unwrap_or(0)
}

#[inline(never)]
fn emit_req(r: &Req, out: &mut [u8]) -> usize {
    r.emit(out).unwrap_or(0)
}

#[inline(never)]
fn emit_ctsdata(c: &CtsData, out: &mut [u8]) -> usize {
    c.emit(out).unwrap_or(0)
}

#[inline(never)]
fn emit_readrsp(r: &ReadRsp, out: &mut [u8]) -> usize {
    r.emit(out).unwrap_or(0)
}

fn bench_wire(c: &mut Criterion) {
    static D64: [u8; 64] = [0x5A; 64];
    static D1K: [u8; 1024] = [0x5A; 1024];
    static D8K: [u8; 8192] = [0x5A; 8192];
    let cases: [(&str, Packet); 4] = [
        ("EAGER_TAGRTM+connid/64B", Packet::Req(eager_tagrtm(&D64))),
        ("MEDIUM_TAGRTM+connid/1KiB", Packet::Req(medium_tagrtm(&D1K))),
        ("CTSDATA+connid/8KiB", Packet::CtsData(ctsdata(&D8K))),
        ("READRSP/8KiB", Packet::ReadRsp(readrsp(&D8K))),
    ];
    assert_eq!(eager_tagrtm(&D64).wire_flags(), req_flags::MSG | req_flags::TAGGED | req_flags::CONNID_HDR);

    let mut g = c.benchmark_group("parse");
    for (name, p) in &cases {
        let buf = bytes_of(p);
        assert_eq!(bytes_of(&Packet::parse(&buf).expect("parse")), buf);
        assert_ne!(parse_and_use(&buf), u64::MAX);
        g.bench_function(*name, |b| b.iter(|| parse_and_use(black_box(&buf))));
    }
    g.finish();

    let mut g = c.benchmark_group("parse_view");
    for (name, p) in &cases {
        let buf = bytes_of(p);
        assert_ne!(view_and_use(&buf), u64::MAX);
        g.bench_function(*name, |b| b.iter(|| view_and_use(black_box(&buf))));
    }
    g.finish();

    let mut g = c.benchmark_group("rx_path");
    for (name, p) in &cases {
        let buf = bytes_of(p);
        assert_eq!(rx_path_and_use(&buf), view_and_use(&buf));
        g.bench_function(*name, |b| b.iter(|| rx_path_and_use(black_box(&buf))));
    }
    g.finish();

    // Emit through the typed values (what the engine calls), not `Packet::emit`.
    let mut out = vec![0u8; 16 * 1024];
    for (group, header_only) in [("emit", false), ("emit_header", true)] {
        let data = |d: &'static [u8]| if header_only { &[][..] } else { d };
        let name = |n: &str, size: &str| if header_only { n.to_string() } else { format!("{n}/{size}") };
        let mut g = c.benchmark_group(group);
        let r = eager_tagrtm(data(&D64));
        g.bench_function(name("EAGER_TAGRTM+connid", "64B"), |b| {
            b.iter(|| emit_req(black_box(&r), black_box(&mut out)))
        });
        let r = medium_tagrtm(data(&D1K));
        g.bench_function(name("MEDIUM_TAGRTM+connid", "1KiB"), |b| {
            b.iter(|| emit_req(black_box(&r), black_box(&mut out)))
        });
        if header_only {
            // The engine's writer for eager and medium RTMs.
            for (n, r) in [
                ("EAGER_TAGRTM+connid/datapath", eager_tagrtm(&[])),
                ("MEDIUM_TAGRTM+connid/datapath", medium_tagrtm(&[])),
            ] {
                let f = &r.fields;
                let d = DataRtm {
                    ptype: r.ptype,
                    flags: r.flags,
                    msg_id: f.msg_id,
                    tag: f.tag,
                    msg_length: f.msg_length,
                    seg_offset: f.seg_offset,
                    cq_data: r.cq_data,
                    connid: r.connid,
                    data: r.data,
                };
                let mut want = vec![0u8; r.buffer_len()];
                r.emit(&mut want).expect("emit");
                assert_eq!(emit_data_rtm(&d, &mut out), want.len());
                assert_eq!(&out[..want.len()], &want[..]);
                g.bench_function(n, |b| b.iter(|| emit_data_rtm(black_box(&d), black_box(&mut out))));
            }
        }
        let cd = ctsdata(data(&D8K));
        g.bench_function(name("CTSDATA+connid", "8KiB"), |b| {
            b.iter(|| emit_ctsdata(black_box(&cd), black_box(&mut out)))
        });
        let rr = readrsp(data(&D8K));
        g.bench_function(name("READRSP", "8KiB"), |b| b.iter(|| emit_readrsp(black_box(&rr), black_box(&mut out))));
        g.finish();
    }
}

criterion_group!(benches, bench_wire);
criterion_main!(benches);
