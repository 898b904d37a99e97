//! The 285 golden packets of the reference implementation
//! (`tests/data/golden_packets.json`, copied from `shared/facts/`):
//! every vector decodes to exactly its fields, and every vector marked
//! `reencode_exact` is rebuilt from its fields alone to exactly its bytes.

use std::collections::BTreeMap;

use rdm4::wire::{
    AtomRsp, Cts, CtsData, Handshake, IdsHdr, LeU64, Packet, PacketType, PeerError, RawAddrHdr, ReadRsp, Receipt, Req,
    RmaIov, UserRecvQp, CONNID_HDR,
};
use serde_json::{json, Value};

mod common;

use common::{golden_vectors as vectors, unhex};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn iovs_json(v: &[RmaIov]) -> Value {
    Value::Array(v.iter().map(|i| json!({"addr": i.addr(), "len": i.len(), "key": i.key()})).collect())
}

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map_or(Value::Null, Into::into)
}

/// The packet's fields under libfabric's member names, as the golden file has them.
fn decoded_fields(p: &Packet, total_len: usize) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("type", json!(p.ptype() as u8));
    put("version", json!(4));
    put("connid", opt(p.connid()));
    put("sender_connid", opt(p.sender_connid()));
    let multiuse = |connid: Option<u32>, padding: u32| json!(connid.unwrap_or(padding));
    let cflags = |flags: u16, connid: Option<u32>| json!(flags | if connid.is_some() { CONNID_HDR } else { 0 });
    let (hdr_len, opt_hdr_len, data_off, data): (usize, usize, usize, &[u8]) = match p {
        Packet::Req(r) => {
            let f = &r.fields;
            put("flags", json!(r.wire_flags()));
            for (k, v) in [
                ("msg_id", json!(f.msg_id)),
                ("tag", json!(f.tag)),
                ("msg_length", json!(f.msg_length)),
                ("seg_offset", json!(f.seg_offset)),
                ("send_id", json!(f.send_id)),
                ("recv_id", json!(f.recv_id)),
                ("credit_request", json!(f.credit_request)),
                ("recv_length", json!(f.recv_length)),
                ("runt_length", json!(f.runt_length)),
                ("atomic_datatype", json!(f.atomic_datatype)),
                ("atomic_op", json!(f.atomic_op)),
                ("padding", json!(f.padding)),
                ("rma_iov_count", json!(r.rma_iov.len())),
                ("rma_iov", iovs_json(r.rma_iov)),
                ("read_iov_count", json!(r.read_iov.len())),
                ("read_iov", iovs_json(r.read_iov)),
                ("cq_data", opt(r.cq_data)),
            ] {
                put(k, v);
            }
            put(
                "raw_addr",
                r.raw_addr.map_or(Value::Null, |h| {
                    let a = h.addr();
                    json!({"addr_len": h.size(), "gid": hex(&a.gid), "qpn": a.qpn(), "pad": a.pad(),
                           "connid": a.connid(), "reserved": a.reserved(), "bytes": hex(h.bytes())})
                }),
            );
            (r.hdr_len(), r.opt_hdr_len(), r.app_data_offset(), r.data)
        }
        Packet::Handshake(h) => {
            let mut wire = vec![0u8; h.buffer_len()];
            h.emit(&mut wire).unwrap();
            put("flags", json!(u16::from_le_bytes([wire[2], wire[3]])));
            put("nextra_p3", json!(h.nextra_p3()));
            put("extra_info", Value::Array(h.extra_info.iter().map(|w| json!(w.get())).collect()));
            put("host_id", opt(h.host_id));
            put("device_version", opt(h.device_version));
            put("qpn", opt(h.user_recv_qp.map(|q| q.qpn)));
            put("qkey", opt(h.user_recv_qp.map(|q| q.qkey)));
            put("p2p_supported", opt(h.p2p_supported));
            (h.hdr_len(), h.opt_len(), h.buffer_len(), &[][..])
        }
        Packet::Cts(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("multiuse", multiuse(c.connid, c.padding));
            put("send_id", json!(c.send_id));
            put("recv_id", json!(c.recv_id));
            put("recv_length", json!(c.recv_length));
            (Cts::LEN, 0, Cts::LEN, &[][..])
        }
        Packet::CtsData(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("recv_id", json!(c.recv_id));
            put("seg_length", json!(c.data.len()));
            put("seg_offset", json!(c.seg_offset));
            (CtsData::HDR_LEN, c.header_len() - CtsData::HDR_LEN, c.header_len(), c.data)
        }
        Packet::ReadRsp(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("multiuse", multiuse(c.connid, c.padding));
            put("recv_id", json!(c.recv_id));
            put("send_id", json!(c.send_id));
            put("seg_length", json!(c.data.len()));
            (ReadRsp::HDR_LEN, 0, ReadRsp::HDR_LEN, c.data)
        }
        Packet::Eor(c) | Packet::ReadNack(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("multiuse", multiuse(c.connid, c.padding));
            put("send_id", json!(c.send_id));
            put("recv_id", json!(c.recv_id));
            (IdsHdr::LEN, 0, IdsHdr::LEN, &[][..])
        }
        Packet::AtomRsp(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("multiuse", multiuse(c.connid, c.padding));
            put("reserved", json!(c.reserved));
            put("recv_id", json!(c.recv_id));
            put("seg_length", json!(c.data.len()));
            (AtomRsp::HDR_LEN, 0, AtomRsp::HDR_LEN, c.data)
        }
        Packet::Receipt(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("multiuse", multiuse(c.connid, c.padding));
            put("tx_id", json!(c.send_id));
            put("msg_id", json!(c.msg_id));
            (Receipt::LEN, 0, Receipt::LEN, &[][..])
        }
        Packet::PeerError(c) => {
            put("flags", cflags(c.flags, c.connid));
            put("multiuse", multiuse(c.connid, c.padding));
            put("op_id", json!(c.op_id));
            put("ref_kind", json!(c.ref_kind));
            put("prov_errno", json!(c.prov_errno));
            (PeerError::LEN, 0, PeerError::LEN, &[][..])
        }
    };
    assert!(data_off + data.len() <= total_len);
    put("hdr_len", json!(hdr_len));
    put("opt_hdr_len", json!(opt_hdr_len));
    put("app_data_offset", json!(data_off));
    put("app_data_len", json!(data.len()));
    put("app_data", json!(hex(data)));
    m
}

fn u(f: &Value, k: &str) -> u64 {
    f[k].as_u64().unwrap_or_else(|| panic!("field {k} missing or not an integer: {}", f[k]))
}

fn ou64(f: &Value, k: &str) -> Option<u64> {
    f.get(k).and_then(Value::as_u64)
}

fn ou32(f: &Value, k: &str) -> Option<u32> {
    ou64(f, k).map(|v| v as u32)
}

fn iovs_from(f: &Value, k: &str) -> Vec<RmaIov> {
    f.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|i| RmaIov::new(u(i, "addr"), u(i, "len"), u(i, "key"))).collect())
        .unwrap_or_default()
}

/// Builds a packet from the golden fields alone (never from the bytes).
fn build_from_fields(f: &Value) -> Vec<u8> {
    let ptype = PacketType::from_u8(u(f, "type") as u8).expect("wire type");
    let flags = u(f, "flags") as u16;
    let data = unhex(f["app_data"].as_str().unwrap_or(""));
    let connid = ou32(f, "connid");
    let padding = if connid.is_some() { 0 } else { ou32(f, "multiuse").unwrap_or(0) };
    let nf = flags & !CONNID_HDR;
    let rma = iovs_from(f, "rma_iov");
    let read = iovs_from(f, "read_iov");
    let raw = f.get("raw_addr").and_then(|r| r.get("bytes")).and_then(Value::as_str).map(unhex);
    let extra: Vec<LeU64> = f
        .get("extra_info")
        .and_then(Value::as_array)
        .map_or(vec![], |a| a.iter().map(|w| LeU64::new(w.as_u64().unwrap())).collect());
    let p = match ptype.category() {
        rdm4::wire::Category::Req(_) => {
            let mut r = Req::new(ptype);
            r.flags = flags;
            let fl = &mut r.fields;
            fl.msg_id = ou32(f, "msg_id").unwrap_or(0);
            fl.tag = ou64(f, "tag").unwrap_or(0);
            fl.msg_length = ou64(f, "msg_length").unwrap_or(0);
            fl.seg_offset = ou64(f, "seg_offset").unwrap_or(0);
            fl.send_id = ou32(f, "send_id").unwrap_or(0);
            fl.recv_id = ou32(f, "recv_id").unwrap_or(0);
            fl.credit_request = ou32(f, "credit_request").unwrap_or(0);
            fl.recv_length = ou32(f, "recv_length").unwrap_or(0);
            fl.runt_length = ou64(f, "runt_length").unwrap_or(0);
            fl.atomic_datatype = ou32(f, "atomic_datatype").unwrap_or(0);
            fl.atomic_op = ou32(f, "atomic_op").unwrap_or(0);
            fl.padding = ou32(f, "padding").unwrap_or(0);
            r.rma_iov = &rma;
            r.read_iov = &read;
            r.raw_addr = raw.as_deref().map(|b| RawAddrHdr::new(b).unwrap());
            r.cq_data = ou64(f, "cq_data");
            r.connid = connid;
            r.data = &data;
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out).unwrap();
            return out;
        }
        rdm4::wire::Category::NonReq(_) => match ptype {
            PacketType::Handshake => {
                let mut h = Handshake::new(&extra);
                h.flags = flags & !rdm4::wire::handshake_flags::OPT_MASK;
                h.connid = connid;
                h.host_id = ou64(f, "host_id");
                h.device_version = ou32(f, "device_version");
                h.user_recv_qp = ou32(f, "qpn").map(|qpn| UserRecvQp { qpn, qkey: u(f, "qkey") as u32 });
                h.p2p_supported = ou64(f, "p2p_supported").map(|p| p as u8);
                let mut out = vec![0u8; h.buffer_len()];
                h.emit(&mut out).unwrap();
                return out;
            }
            PacketType::Cts => Packet::Cts(Cts {
                flags: nf,
                connid,
                padding,
                send_id: u(f, "send_id") as u32,
                recv_id: u(f, "recv_id") as u32,
                recv_length: u(f, "recv_length"),
            }),
            PacketType::CtsData => Packet::CtsData(CtsData {
                flags: nf,
                recv_id: u(f, "recv_id") as u32,
                seg_offset: u(f, "seg_offset"),
                connid,
                data: &data,
            }),
            PacketType::ReadRsp => Packet::ReadRsp(ReadRsp {
                flags: nf,
                connid,
                padding,
                recv_id: u(f, "recv_id") as u32,
                send_id: u(f, "send_id") as u32,
                data: &data,
            }),
            PacketType::Eor | PacketType::ReadNack => {
                let h = IdsHdr {
                    flags: nf,
                    send_id: u(f, "send_id") as u32,
                    recv_id: u(f, "recv_id") as u32,
                    connid,
                    padding,
                };
                if ptype == PacketType::Eor {
                    Packet::Eor(h)
                } else {
                    Packet::ReadNack(h)
                }
            }
            PacketType::AtomRsp => Packet::AtomRsp(AtomRsp {
                flags: nf,
                connid,
                padding,
                reserved: u(f, "reserved") as u32,
                recv_id: u(f, "recv_id") as u32,
                data: &data,
            }),
            PacketType::Receipt => Packet::Receipt(Receipt {
                flags: nf,
                send_id: u(f, "tx_id") as u32,
                msg_id: u(f, "msg_id") as u32,
                connid,
                padding,
            }),
            PacketType::PeerError => Packet::PeerError(PeerError {
                flags: nf,
                op_id: u(f, "op_id") as u32,
                ref_kind: u(f, "ref_kind") as u32,
                prov_errno: u(f, "prov_errno") as u32,
                connid,
                padding,
            }),
            other => panic!("{other:?} is a REQ type"),
        },
    };
    let mut out = vec![0u8; p.buffer_len()];
    assert_eq!(p.emit(&mut out).unwrap(), out.len());
    out
}

#[test]
fn all_285_golden_vectors_decode_to_exactly_their_fields() {
    let vs = vectors();
    assert_eq!(vs.len(), 285);
    for v in &vs {
        let name = v["name"].as_str().unwrap();
        let bytes = unhex(v["hex"].as_str().unwrap());
        assert_eq!(bytes.len() as u64, v["length"].as_u64().unwrap(), "{name}");
        let p = Packet::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ours = decoded_fields(&p, bytes.len());
        let fields = v["fields"].as_object().unwrap();
        for (k, want) in fields {
            if k == "type_name" {
                assert_eq!(want.as_str().unwrap(), p.ptype().name(), "{name}");
                continue;
            }
            let got = ours.get(k).unwrap_or_else(|| panic!("{name}: no decoded field {k}"));
            assert_eq!(got, want, "{name}: field {k}");
        }
    }
}

#[test]
fn reencode_exact_vectors_are_rebuilt_from_fields_to_exactly_their_bytes() {
    let mut exact = 0;
    for v in vectors() {
        let name = v["name"].as_str().unwrap();
        let want = v["hex"].as_str().unwrap();
        let built = build_from_fields(&v["fields"]);
        if v["reencode_exact"].as_bool().unwrap() {
            assert_eq!(hex(&built), want, "{name}");
            exact += 1;
        } else {
            // Pad bytes held junk: the rebuilt packet has them zeroed but must
            // parse to the same values as the original.
            let orig = unhex(want);
            assert_eq!(built.len(), orig.len(), "{name}");
            assert_eq!(Packet::parse(&built).unwrap(), Packet::parse(&orig).unwrap(), "{name}");
        }
    }
    assert!(exact >= 280, "only {exact} exact vectors");
}

#[test]
fn every_vector_survives_parse_emit_parse() {
    for v in vectors() {
        let name = v["name"].as_str().unwrap();
        let bytes = unhex(v["hex"].as_str().unwrap());
        let p = Packet::parse(&bytes).unwrap();
        let mut out = vec![0u8; p.buffer_len()];
        p.emit(&mut out).unwrap();
        assert_eq!(Packet::parse(&out).unwrap(), p, "{name}");
    }
}

#[test]
fn the_data_path_view_agrees_with_the_full_parse_and_emit_on_every_vector() {
    use rdm4::wire::DataRtm;
    let data_path = |t: PacketType| {
        matches!(
            t,
            PacketType::EagerMsgRtm | PacketType::EagerTagRtm | PacketType::MediumMsgRtm | PacketType::MediumTagRtm
        )
    };
    let (mut eager, mut medium) = (0, 0);
    for v in vectors() {
        let bytes = unhex(v["hex"].as_str().unwrap());
        let full = Packet::parse(&bytes).unwrap();
        match (DataRtm::parse(&bytes), &full) {
            (Some(d), Packet::Req(r)) => {
                assert!(r.raw_addr.is_none());
                assert_eq!(d.to_req(), *r, "{}", v["name"]);
                let is_medium = matches!(r.ptype, PacketType::MediumMsgRtm | PacketType::MediumTagRtm);
                assert_eq!((d.tagged(), d.medium()), (r.ptype.req_info().unwrap().tagged, is_medium));
                if d.medium() {
                    medium += 1
                } else {
                    eager += 1
                }
                // The fixed-offset writer builds the same bytes as the general one.
                let mut out = vec![0u8; d.buffer_len()];
                assert_eq!(d.emit(&mut out), Ok(bytes.len()));
                let mut general = vec![0u8; r.buffer_len()];
                r.emit(&mut general).unwrap();
                assert_eq!(out, general, "{}", v["name"]);
            }
            (Some(_), other) => panic!("data-path view accepted {other:?}"),
            (None, Packet::Req(r)) if data_path(r.ptype) => assert!(r.raw_addr.is_some(), "{}", v["name"]),
            (None, _) => {}
        }
    }
    assert!(eager >= 8 && medium >= 2, "{eager} eager, {medium} medium");
}
