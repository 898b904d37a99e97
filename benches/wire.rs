//! Wire-layer benchmarks: parse + validate and emit of the packets on the data
//! path of the main subprotocols.
//!
//! - `parse/*`: `Packet::parse` of a whole packet, then a read of a header
//!   field and the data length, so the validated result is used.
//! - `emit/*`: `emit` of the typed value into a preallocated buffer, data
//!   payload copy included.
//! - `emit_header/*`: the same values with empty data: the per-header cost.
//!
//! Run: `cargo bench --bench wire -- --warm-up-time 1 --measurement-time 2`.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use rdm4::wire::{self, req_flags, CtsData, Packet, PacketType, ReadRsp, Req, ReqFields};

const CONNID: u32 = 0xC1D2_E3F4;

fn eager_tagrtm(data: &[u8]) -> Req<'_> {
    Req {
        fields: ReqFields {
            msg_id: 0x1122_3344,
            tag: 0x0102_0304_0506_0708,
            ..ReqFields::default()
        },
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
    CtsData {
        flags: 0,
        recv_id: 0x99AA_BBCC,
        seg_offset: 0x12_3400,
        connid: Some(CONNID),
        data,
    }
}

fn readrsp(data: &[u8]) -> ReadRsp<'_> {
    // libfabric always sets CONNID_HDR on READRSP (multiuse slot, no extra bytes).
    ReadRsp {
        flags: 0,
        connid: Some(CONNID),
        padding: 0,
        recv_id: 0x99AA_BBCC,
        send_id: 0x5566_7788,
        data,
    }
}

fn bytes_of(p: &Packet) -> Vec<u8> {
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).expect("emit");
    buf
}

/// One field of the header and the data length: the "validate and use" part.
fn use_packet(p: &Packet) -> u64 {
    match p {
        Packet::Req(r) => r.fields.tag ^ r.data.len() as u64 ^ u64::from(r.connid.unwrap_or(0)),
        Packet::CtsData(c) => c.seg_offset ^ c.data.len() as u64 ^ u64::from(c.connid.unwrap_or(0)),
        Packet::ReadRsp(r) => u64::from(r.recv_id) ^ r.data.len() as u64,
        _ => 0,
    }
}

fn bench_wire(c: &mut Criterion) {
    static D64: [u8; 64] = [0x5A; 64];
    static D1K: [u8; 1024] = [0x5A; 1024];
    static D8K: [u8; 8192] = [0x5A; 8192];
    let (d64, d1k, d8k) = (&D64[..], &D1K[..], &D8K[..]);
    let cases: [(&str, Packet); 4] = [
        ("EAGER_TAGRTM+connid/64B", Packet::Req(eager_tagrtm(d64))),
        ("MEDIUM_TAGRTM+connid/1KiB", Packet::Req(medium_tagrtm(d1k))),
        ("CTSDATA+connid/8KiB", Packet::CtsData(ctsdata(d8k))),
        ("READRSP/8KiB", Packet::ReadRsp(readrsp(d8k))),
    ];
    assert_eq!(
        eager_tagrtm(d64).wire_flags(),
        req_flags::MSG | req_flags::TAGGED | req_flags::CONNID_HDR
    );

    let mut g = c.benchmark_group("parse");
    for (name, full) in &cases {
        let buf = bytes_of(full);
        assert_eq!(bytes_of(&Packet::parse(&buf).expect("parse")), buf);
        g.bench_function(*name, |b| {
            b.iter(|| match Packet::parse(black_box(&buf)) {
                Ok(p) => use_packet(&p),
                Err(_) => u64::MAX,
            })
        });
    }
    g.finish();

    // Emit through the typed values (what the engine calls), not `Packet::emit`.
    let mut out = vec![0u8; 16 * 1024];
    for (group, header_only) in [("emit", false), ("emit_header", true)] {
        let data = |d: &'static [u8]| if header_only { &[][..] } else { d };
        let name = |n: &'static str, size: &str| {
            if header_only {
                n.to_string()
            } else {
                format!("{n}/{size}")
            }
        };
        let mut g = c.benchmark_group(group);
        emit_case(
            &mut g,
            &name("EAGER_TAGRTM+connid", "64B"),
            &eager_tagrtm(data(d64)),
            |r, o| r.emit(o),
            &mut out,
        );
        emit_case(
            &mut g,
            &name("MEDIUM_TAGRTM+connid", "1KiB"),
            &medium_tagrtm(data(d1k)),
            |r, o| r.emit(o),
            &mut out,
        );
        emit_case(
            &mut g,
            &name("CTSDATA+connid", "8KiB"),
            &ctsdata(data(d8k)),
            |r, o| r.emit(o),
            &mut out,
        );
        emit_case(
            &mut g,
            &name("READRSP", "8KiB"),
            &readrsp(data(d8k)),
            |r, o| r.emit(o),
            &mut out,
        );
        g.finish();
    }
}

fn emit_case<T>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    value: &T,
    emit: impl Fn(&T, &mut [u8]) -> wire::Result<usize>,
    out: &mut [u8],
) {
    g.bench_function(name, |b| {
        b.iter(|| emit(black_box(value), black_box(&mut *out)).unwrap_or(0))
    });
}

criterion_group!(benches, bench_wire);
criterion_main!(benches);
