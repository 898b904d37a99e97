//! Helpers shared by the wire property tests (`wire_props.rs`,
//! `wire_props_nonreq.rs`): seeded randomness, the reference encoder's
//! byte writer and the emit / parse checks.
#![allow(dead_code)]

use rdm4::wire::{req_flags, Packet, RmaIov, WireError};

// ---------------------------------------------------------------------------
// Deterministic randomness
// ---------------------------------------------------------------------------

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast and good enough here.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    pub fn u16(&mut self) -> u16 {
        (self.u64() >> 48) as u16
    }

    pub fn bool(&mut self) -> bool {
        self.u64() >> 63 == 1
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n
    }

    /// In `lo..=hi`, with the two ends drawn often.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
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
    pub fn edge_u64(&mut self) -> u64 {
        const EDGES: [u64; 8] = [0, 1, 0xFF, 1 << 32, 1 << 63, u64::MAX - 1, u64::MAX, u32::MAX as u64];
        match self.below(8) {
            0 => EDGES[self.below(8) as usize],
            1 => self.below(1 << 16),
            _ => self.u64(),
        }
    }

    pub fn edge_u32(&mut self) -> u32 {
        const EDGES: [u32; 6] = [0, 1, 0xFF, 1 << 31, u32::MAX - 1, u32::MAX];
        match self.below(8) {
            0 => EDGES[self.below(6) as usize],
            1 => self.below(1 << 8) as u32,
            _ => self.u32(),
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u64() as u8).collect()
    }

    /// A length for a data payload: mostly short, sometimes a few hundred bytes.
    pub fn data_len(&mut self) -> usize {
        match self.below(8) {
            0 => 0,
            1 => self.below(600) as usize,
            _ => self.below(64) as usize,
        }
    }

    /// `efa_rma_iov` entries whose addr + len does not wrap (the parser rejects wrapping).
    pub fn iovs(&mut self, max: u64) -> Vec<RmaIov> {
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
