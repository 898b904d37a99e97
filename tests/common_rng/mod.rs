//! Seeded randomness for the tests (engine model, wire properties), one
//! generator for all of them.
#![allow(dead_code)]

use rdm4::wire::RmaIov;

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

    /// Uniform in `0..n` (0 when `n` is 0); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
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
