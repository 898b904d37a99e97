//! Helpers shared by the wire property tests (`wire_props.rs`,
//! `wire_props_nonreq.rs`): seeded randomness, the reference encoder's
//! byte writer and the emit / parse checks.
#![allow(dead_code)]

use rdm4::wire::{req_flags, Packet, WireError};

// Deterministic randomness (shared with the engine tests).
#[path = "../common_rng/mod.rs"]
mod rng;
#[allow(unused_imports)]
pub use rng::Rng;

/// Writes the low `width` bytes of `v` at `off`, little-endian.
pub fn put(out: &mut [u8], off: usize, width: usize, v: u64) {
    out[off..off + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

// ---------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------

pub const CANARY: u8 = 0xA5;

/// Emits `p`, checks the length and bytes against `expected`, that nothing past
/// the packet is written, and that a buffer one byte short is refused with
/// nothing written. Returns the emitted bytes.
pub fn emit_checked(p: &Packet, expected: &[u8], ctx: &dyn Fn() -> String) -> Vec<u8> {
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
pub fn check_prefixes_fail(bytes: &[u8], ctx: &dyn Fn() -> String) {
    for n in 0..bytes.len() {
        if let Ok(p) = Packet::parse(&bytes[..n]) {
            panic!("prefix of {n}/{} bytes parsed as {p:?}, {}", bytes.len(), ctx());
        }
    }
}

/// Emit, compare, parse back; `want` is `p` as a parse must return it.
pub fn check_nonreq(p: &Packet, want: &Packet, expected: &[u8], prefixes: bool, ctx: &dyn Fn() -> String) {
    let bytes = emit_checked(p, expected, ctx);
    let parsed = Packet::parse(&bytes).unwrap_or_else(|e| panic!("parse failed: {e}, {}", ctx()));
    assert_eq!(&parsed, want, "{}", ctx());
    // Parsing the reference bytes (not only our own output) gives the same.
    assert_eq!(Packet::parse(expected).as_ref(), Ok(want), "{}", ctx());
    if prefixes {
        check_prefixes_fail(&bytes, ctx);
    }
}

/// The 4-byte base header of packet type `id` (version 4) with `flags`.
pub fn base(id: u8, flags: u16) -> Vec<u8> {
    let mut b = vec![id, 4, 0, 0];
    put(&mut b, 2, 2, flags.into());
    b
}

/// A valid EAGER_MSGRTM, to be spoiled by negative tests.
pub fn eager_msgrtm() -> Vec<u8> {
    let mut b = base(64, req_flags::MSG);
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(b"payload");
    b
}
