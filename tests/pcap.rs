//! `RDM4_PCAP` and the Wireshark dissector `tools/wireshark/rdm4.lua`:
//! runs every test of `rdm4-perf` over shm (with and without cross-memory
//! attach, and with long-read), over udp and over auto (two local processes:
//! records of shm) with capture on, checks that
//! each of the two processes wrote its own file (`%p`), parses every record
//! with the crate's wire parser, and checks that `tshark` with the
//! dissector decodes every packet with the same type and fields and no
//! expert info. Crafted files check the udp device header (in a record and
//! as a UDP datagram on the wire) and that malformed packets are flagged.

mod common_tool;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use rdm4::pcap::{LINKTYPE, PSEUDO_LEN, SNAPLEN};
use rdm4::wire::{Packet, PacketType};

const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/wireshark/rdm4.lua");

/// The fields compared, as the dissector names them (after `rdm4.`).
const COLUMNS: [&str; 18] = [
    "pcap.direction",
    "pcap.device",
    "pcap.peer",
    "type",
    "flags",
    "msg_id",
    "tag",
    "msg_length",
    "seg_offset",
    "send_id",
    "recv_id",
    "credit_request",
    "atomic_op",
    "connid",
    "cq_data",
    "rma_iov_count",
    "read_iov_count",
    "data_length",
];

/// One record of a capture file.
struct Record {
    dir: u8,
    device: u8,
    flags: u8,
    peer: u32,
    pkt: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The records of a classic pcap file of rdm4 records, every header checked.
fn read_pcap(path: &Path) -> Vec<Record> {
    let b = std::fs::read(path).unwrap();
    let at = |what: &str| format!("{}: {what}", path.display());
    assert!(b.len() >= 24, "{}", at("no file header"));
    assert_eq!(u32_at(&b, 0), 0xa1b2_c3d4, "{}", at("magic"));
    assert_eq!((b[4], b[5], b[6], b[7]), (2, 0, 4, 0), "{}", at("version 2.4"));
    assert_eq!(u32_at(&b, 16) as usize, SNAPLEN, "{}", at("snaplen"));
    assert_eq!(u32_at(&b, 20), LINKTYPE, "{}", at("link type"));
    let (mut pos, mut out) = (24, Vec::new());
    while pos < b.len() {
        assert!(pos + 16 <= b.len(), "{}", at("a record header cut short"));
        let (usec, incl, orig) = (u32_at(&b, pos + 4), u32_at(&b, pos + 8) as usize, u32_at(&b, pos + 12) as usize);
        assert!(usec < 1_000_000, "{}", at("microseconds"));
        assert_eq!(incl, orig, "{}", at("a record cut to the snaplen (the runs send none that long)"));
        let r = &b[pos + 16..pos + 16 + incl];
        assert_eq!(&r[..5], b"RDM4\x01", "{}", at("pseudo-header magic and version"));
        assert!(r[5] <= 1 && r[6] <= 3 && r[12..16] == [0; 4], "{}", at("pseudo-header fields"));
        out.push(Record { dir: r[5], device: r[6], flags: r[7], peer: u32_at(r, 8), pkt: r[PSEUDO_LEN..].to_vec() });
        pos += 16 + incl;
    }
    out
}

type Fields = BTreeMap<&'static str, String>;

/// Expects `v` in decimal in column `k`.
fn dec(m: &mut Fields, k: &'static str, v: u64) {
    m.insert(k, v.to_string());
}

/// Expects the u64 `v` in hexadecimal in column `k`.
fn hex(m: &mut Fields, k: &'static str, v: u64) {
    m.insert(k, format!("{v:#018x}"));
}

/// What the dissector must show for `r`, from the crate's own parser:
/// each column the packet has, formatted as `tshark -T fields` prints it.
fn expected(r: &Record, udp_hdr: usize) -> Fields {
    let pkt = &r.pkt[udp_hdr..];
    let p = Packet::parse(pkt).unwrap_or_else(|e| panic!("the capture holds a packet the wire layer refuses: {e:?}"));
    let mut m = BTreeMap::new();
    dec(&mut m, "pcap.direction", r.dir.into());
    dec(&mut m, "pcap.device", r.device.into());
    dec(&mut m, "pcap.peer", r.peer.into());
    dec(&mut m, "type", p.ptype() as u64);
    match &p {
        Packet::Req(q) => {
            for name in q.ptype.req_info().unwrap().field_names() {
                let f = &q.fields;
                let v = match name {
                    "msg_id" => f.msg_id.into(),
                    "msg_length" => f.msg_length,
                    "seg_offset" => f.seg_offset,
                    "send_id" => f.send_id.into(),
                    "recv_id" => f.recv_id.into(),
                    "credit_request" => f.credit_request.into(),
                    "atomic_op" => f.atomic_op.into(),
                    "rma_iov_count" => q.rma_iov.len() as u64,
                    "read_iov_count" => q.read_iov.len() as u64,
                    "tag" => {
                        hex(&mut m, "tag", f.tag);
                        continue;
                    }
                    _ => continue, // not compared
                };
                dec(&mut m, name, v);
            }
            dec(&mut m, "data_length", q.data.len() as u64);
            if let Some(c) = q.cq_data {
                hex(&mut m, "cq_data", c);
            }
        }
        Packet::Cts(c) => {
            dec(&mut m, "send_id", c.send_id.into());
            dec(&mut m, "recv_id", c.recv_id.into());
        }
        Packet::CtsData(c) => {
            dec(&mut m, "recv_id", c.recv_id.into());
            dec(&mut m, "seg_offset", c.seg_offset);
            dec(&mut m, "data_length", c.data.len() as u64);
        }
        Packet::ReadRsp(c) => {
            dec(&mut m, "recv_id", c.recv_id.into());
            dec(&mut m, "send_id", c.send_id.into());
            dec(&mut m, "data_length", c.data.len() as u64);
        }
        Packet::Eor(c) | Packet::ReadNack(c) => {
            dec(&mut m, "send_id", c.send_id.into());
            dec(&mut m, "recv_id", c.recv_id.into());
        }
        Packet::AtomRsp(c) => {
            dec(&mut m, "recv_id", c.recv_id.into());
            dec(&mut m, "data_length", c.data.len() as u64);
        }
        Packet::Receipt(c) => {
            dec(&mut m, "send_id", c.send_id.into());
            dec(&mut m, "msg_id", c.msg_id.into());
        }
        Packet::Handshake(_) | Packet::PeerError(_) => {}
    }
    m.insert("flags", format!("{:#06x}", u16::from_le_bytes([pkt[2], pkt[3]])));
    if let Some(c) = p.connid() {
        m.insert("connid", format!("{c:#010x}"));
    }
    m
}

/// `tshark` with the dissector on `file`: per packet, the expert
/// messages, whether it is malformed, then `fields` (after `rdm4.`).
fn tshark(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    assert!(
        common_tool::installed("tshark"),
        "`tshark` is not installed (or `tshark --version` fails): tests/pcap.rs checks the Wireshark dissector \
         with it. Install it (Debian/Ubuntu: apt-get install tshark; .ci/run does)"
    );
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-X", &format!("lua_script:{LUA}"), "-r"]).arg(file);
    cmd.args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-e", "_ws.expert.message"]);
    cmd.args(["-e", "_ws.malformed"]);
    for f in fields {
        cmd.args(["-e", &format!("rdm4.{f}")]);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let complaints: Vec<&str> = err.lines().filter(|l| !l.starts_with("Running as user")).collect();
    assert!(out.status.success() && complaints.is_empty(), "tshark on {}: {err}", file.display());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.split('\t').map(String::from).collect()).collect()
}

/// Checks that tshark decodes every record of `file` as the wire parser
/// does; returns the packet types seen.
fn check_file(file: &Path, device: u8) -> BTreeSet<u8> {
    let records = read_pcap(file);
    assert!(records.len() > 100, "{}: only {} records", file.display(), records.len());
    let rows = tshark(file, &COLUMNS);
    assert_eq!(rows.len(), records.len(), "{}: tshark saw another number of packets", file.display());
    let mut types = BTreeSet::new();
    for (i, (r, row)) in records.iter().zip(&rows).enumerate() {
        assert_eq!((r.device, r.flags), (device, 0), "record {i}: device and flags");
        let want = expected(r, 0);
        types.insert(r.pkt[0]);
        let ctx = || format!("{} packet {}: {}", file.display(), i + 1, PacketType::from_u8(r.pkt[0]).unwrap().name());
        assert_eq!(row[..2], ["", ""], "{}: expert info or malformed", ctx());
        for (col, got) in COLUMNS.iter().zip(&row[2..]) {
            let want = want.get(col).map(String::as_str).unwrap_or("");
            assert_eq!(got, want, "{}: rdm4.{col}", ctx());
        }
    }
    types
}

/// The tests `rdm4-perf --help` lists.
fn perf_tests() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_rdm4-perf")).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let line = help.lines().find_map(|l| l.strip_prefix("tests:")).expect("no tests: line in --help");
    line.split_whitespace().map(String::from).collect()
}

/// Environment variables of a run.
type Env = &'static [(&'static str, &'static str)];

/// Runs every rdm4-perf test with capture into a fresh directory; checks
/// that both processes wrote their own file and returns the two files.
fn capture_run(name: &str, env: Env, device: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pcap-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdm4-perf"));
    cmd.args(["--device", device, "--sizes", "8,20000,100000", "--iters", "4", "--window", "4"]);
    cmd.args(["--no-pin", "--settle-ms", "0", "--json"]);
    cmd.env("RDM4_PCAP", dir.join("run.%p.pcap"))
        .env("RDM4_SHM_PREFIX", format!("rdm4pcap{}{name}", std::process::id()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{name}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for t in perf_tests() {
        assert!(stdout.contains(&format!("\"test\":\"{t}\"")), "{name}: test {t} did not run\n{stdout}");
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 2, "{name}: one file per process: {files:?}");
    assert!(files.contains(&dir.join(format!("run.{pid}.pcap"))), "{name}: no file of process {pid}: {files:?}");
    files
}

#[test]
fn every_packet_of_every_perf_test_decodes_with_its_type_and_fields() {
    assert!(perf_tests().len() >= 9, "{:?}", perf_tests());
    // Auto between two processes of this host: every record says shm.
    let runs: [(&str, Env, &str, u8); 5] = [
        ("shm", &[("RDM4_SHM_CMA", "1")], "shm", 0),
        ("shm-emulated", &[("RDM4_SHM_CMA", "0")], "shm", 0),
        ("shm-longread", &[("RDM4_SHM_LONGREAD_MIN", "65536")], "shm", 0),
        ("udp", &[("RDM4_UDP_ADDR", "127.0.0.1")], "udp", 1),
        ("auto", &[("RDM4_UDP_ADDR", "127.0.0.1")], "auto", 0),
    ];
    let mut seen = BTreeSet::new();
    let mut largest = std::collections::BTreeMap::new();
    for (name, env, device, code) in runs {
        let files = capture_run(name, env, device);
        for f in &files {
            seen.extend(check_file(f, code));
            let most = read_pcap(f).iter().map(|r| r.pkt.len()).max().unwrap_or(0);
            let e = largest.entry(name).or_insert(0);
            *e = most.max(*e);
        }
        std::fs::remove_dir_all(files[0].parent().unwrap()).unwrap();
    }
    // Capturing changes nothing the endpoint does: over auto, a peer of
    // this host keeps shm's packet size (not the smaller udp MTU, which
    // auto reports for the endpoint as a whole).
    assert_eq!(largest["auto"], largest["shm"], "largest packet over auto and over shm: {largest:?}");
    assert!(largest["udp"] < largest["auto"], "{largest:?}");
    // The runs exercise every family of packets: a change of protocol
    // selection that leaves one out shows here.
    let want = [
        "HANDSHAKE",
        "CTS",
        "CTSDATA",
        "READRSP",
        "EOR",
        "ATOMRSP",
        "RECEIPT",
        "EAGER_MSGRTM",
        "EAGER_TAGRTM",
        "MEDIUM_TAGRTM",
        "LONGCTS_TAGRTM",
        "LONGREAD_TAGRTM",
        "SHORT_RTR",
        "LONGCTS_RTR",
        "FETCH_RTA",
    ];
    let names: BTreeSet<&str> = seen.iter().map(|t| PacketType::from_u8(*t).unwrap().name()).collect();
    for w in want {
        assert!(names.contains(w), "no {w} in the captures: {names:?}");
    }
}

/// Writes a pcap file of link type `linktype` with `records`.
fn write_pcap(path: &Path, linktype: u32, records: &[Vec<u8>]) {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, SNAPLEN as u32, linktype] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (i, r) in records.iter().enumerate() {
        for v in [1_700_000_000 + i as u32, 0, r.len() as u32, r.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(r);
    }
    std::fs::write(path, b).unwrap();
}

/// A udp device datagram (README: the 28-byte header) of `kind` carrying `body`.
fn datagram(kind: u8, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut d = vec![0xD4, 2, kind, 0];
    for v in [0xC1D2_E3F4u32, 0x0A0B_0C0D, seq, seq.wrapping_sub(3), 0b101, 1 << 20] {
        d.extend_from_slice(&v.to_le_bytes());
    }
    d.extend_from_slice(body);
    d
}

/// An IPv4 packet (LINKTYPE_RAW) of 127.0.0.1:47001 to :47002 carrying `payload` by UDP.
fn ipv4_udp(payload: &[u8]) -> Vec<u8> {
    let total = (20 + 8 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
    let sum = p.chunks(2).fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    for v in [47001u16, 47002, 8 + payload.len() as u16, 0] {
        p.extend_from_slice(&v.to_be_bytes());
    }
    p.extend_from_slice(payload);
    p
}

#[test]
fn udp_device_datagrams_decode_in_records_and_on_the_wire() {
    let files = capture_run("udp-hdr", &[("RDM4_UDP_ADDR", "127.0.0.1")], "udp");
    // One packet of each type the run sent, as the udp device carries it.
    let mut first = BTreeMap::new();
    for r in read_pcap(&files[0]) {
        first.entry(r.pkt[0]).or_insert(r);
    }
    let mut records = Vec::new();
    let mut on_wire = Vec::new();
    let mut want = Vec::new();
    for (seq, r) in first.values().enumerate() {
        let d = datagram(1, seq as u32 + 7, &r.pkt);
        let mut rec = vec![b'R', b'D', b'M', b'4', 1, r.dir, 1, 1];
        rec.extend_from_slice(&r.peer.to_le_bytes());
        rec.extend_from_slice(&[0; 4]);
        rec.extend_from_slice(&d);
        let rec_parsed = Record { dir: r.dir, device: 1, flags: 1, peer: r.peer, pkt: d.clone() };
        want.push(expected(&rec_parsed, 28));
        records.push(rec);
        on_wire.push(ipv4_udp(&d));
    }
    // A device message without an EFA packet.
    on_wire.push(ipv4_udp(&datagram(2, 0, &[])));
    let dir = files[0].parent().unwrap();
    let (rec_file, wire_file) = (dir.join("records.pcap"), dir.join("wire.pcap"));
    write_pcap(&rec_file, LINKTYPE, &records);
    write_pcap(&wire_file, 101, &on_wire);
    let udp_cols = ["udp.kind", "udp.seq", "udp.ack", "udp.src_connid", "udp.dst_connid", "udp.window"];
    // On the wire there is no pseudo-header (its three columns) but one
    // datagram more: the ACK.
    for (file, pseudo, acks) in [(&rec_file, true, 0), (&wire_file, false, 1)] {
        let rdm4_cols = if pseudo { &COLUMNS[..] } else { &COLUMNS[3..] };
        let cols: Vec<&str> = udp_cols.iter().chain(rdm4_cols).copied().collect();
        let rows = tshark(file, &cols);
        assert_eq!(rows.len(), want.len() + acks, "{}", file.display());
        for (i, row) in rows.iter().enumerate() {
            let at = || format!("{} packet {}", file.display(), i + 1);
            assert_eq!(row[..2], ["", ""], "{}: expert info or malformed", at());
            let (kind, seq) = if i < want.len() { (1, i as u32 + 7) } else { (2, 0) };
            let hdr = [kind.to_string(), seq.to_string(), seq.wrapping_sub(3).to_string()];
            let hdr = [&hdr[..], &["0xc1d2e3f4".into(), "0x0a0b0c0d".into(), (1 << 20).to_string()]].concat();
            assert_eq!(row[2..8], hdr, "{}: udp device header", at());
            for (col, got) in rdm4_cols.iter().zip(&row[8..]) {
                let want = want.get(i).and_then(|w| w.get(col)).map(String::as_str).unwrap_or("");
                assert_eq!(got, want, "{}: rdm4.{col}", at());
            }
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn malformed_packets_are_flagged() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pcap-{}-malformed", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rec = |pkt: &[u8]| {
        let mut r = b"RDM4\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
        r.extend_from_slice(pkt);
        r
    };
    let mut cts = vec![3, 4, 0, 0];
    cts.extend_from_slice(&[0; 20]);
    let bad = [
        (&cts[..20], "CTS cut short"),
        (&[65, 4, 0x08, 0, 1, 0, 0, 0][..], "EAGER_TAGRTM without its tag"),
        (&[64, 4, 0x01, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..], "raw address of 8 bytes"),
        (&[64, 3, 0, 0, 0, 0, 0, 0][..], "version 3"),
        (&[200, 4, 0, 0][..], "unknown type"),
        (&[4, 4, 0, 0, 1, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2][..], "CTSDATA past its end"),
    ];
    let file = dir.join("bad.pcap");
    write_pcap(&file, LINKTYPE, &bad.iter().map(|(p, _)| rec(p)).collect::<Vec<_>>());
    let rows = tshark(&file, &["type"]);
    assert_eq!(rows.len(), bad.len());
    for ((_, what), row) in bad.iter().zip(&rows) {
        assert!(!row[0].is_empty(), "{what}: not flagged: {row:?}");
    }
    // And a good one is not: the same CTS whole.
    write_pcap(&file, LINKTYPE, &[rec(&cts)]);
    assert_eq!(tshark(&file, &["type"]), [["", "", "3"]]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_capture_file_that_cannot_be_created_fails_the_open_with_eio() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdm4-perf"))
        .args(["--sizes", "8", "--iters", "2", "--test", "tag_lat", "--settle-ms", "0", "--no-pin"])
        .env("RDM4_PCAP", "/nonexistent-dir/run.%p.pcap")
        .env("RDM4_SHM_PREFIX", format!("rdm4pcap{}eio", std::process::id()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RDM4_PCAP=") && err.contains("/nonexistent-dir/run.%p.pcap"), "{err}");
    assert!(err.contains("device input/output error"), "rdm4_ep_open fails with RDM4_EIO: {err}");
}
