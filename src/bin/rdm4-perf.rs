//! rdm4-perf: the demo and benchmark tool.
//!
//! Until the engine and devices exist this prints the library version and
//! decodes a sample packet built by the wire layer, so the README's first
//! command shows the library working.

use rdm4::wire::{Packet, PacketType, RawAddr, Req};

fn main() {
    println!("rdm4 {} (EFA RDM protocol v{})", rdm4::VERSION, rdm4::wire::PROTOCOL_VERSION);
    let addr = RawAddr::new([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55], 7, 0xc0dec0de);
    let body = addr.to_req_hdr_body();
    let mut req = Req::new(PacketType::EagerTagRtm);
    req.fields.msg_id = 1;
    req.fields.tag = 0x1234;
    req.raw_addr = Some(rdm4::wire::RawAddrHdr::new(&body).expect("36-byte body"));
    req.cq_data = Some(0xcafe);
    req.data = b"hello, rdm4";
    let mut buf = [0u8; 256];
    let n = req.emit(&mut buf).expect("fits");
    let hex: String = buf[..n].iter().map(|b| format!("{b:02x}")).collect();
    println!("sample {} packet, {n} bytes: {hex}", req.ptype.name());
    match Packet::parse(&buf[..n]) {
        Ok(p) => println!("decoded: {p:#?}"),
        Err(e) => {
            eprintln!("decode failed: {e}");
            std::process::exit(1);
        }
    }
}
