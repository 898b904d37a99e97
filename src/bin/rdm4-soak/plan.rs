//! What every process derives from the seed, so that a receiver or a
//! target knows what to expect without being told: the messages each
//! process sends each peer in a round (class, length, tag, how it is
//! sent), what it writes into each peer's memory, and the bytes of each.
//!
//! The bytes of a message or a write are a window of one random table,
//! at an offset drawn for each (sender, round, peer, sequence number): a
//! message that lands in the wrong buffer, or is cut, shifted or mixed
//! with another, compares unequal. Senders send straight from the table,
//! so a round allocates nothing.

pub const MIB: usize = 1 << 20;
/// The largest message.
pub const MSG_MAX: usize = 4 * MIB;
/// The largest inject (`rdm4_inject`).
pub const INJECT_MAX: usize = 64 << 10;
/// Receive buffer bytes that one sender's messages of a round may take at
/// one receiver (the receive arena holds this for every peer).
pub const PAIR_BUDGET: usize = 6 * MIB;
/// The buffer of each receive of any source; its messages are no longer.
pub const ANY_BUF: usize = 16 << 10;
/// Windows start at an offset below this.
const OFFSETS: usize = 64 << 10;

/// A region (registered, and one of `rdm4_mr_alloc`): rank 0's atomic
/// counter at 0, the area peers read at `READ_AT`, then one slot per
/// writer, written in halves.
pub const READ_AT: usize = 64;
pub const READ_LEN: usize = MIB;
pub const SLOT: usize = 512 << 10;
/// The longest read.
pub const READ_MAX: usize = 512 << 10;

pub fn region_len(procs: usize) -> usize {
    READ_AT + READ_LEN + procs * SLOT
}

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A hash of `values`.
pub fn mix(values: &[u64]) -> u64 {
    values.iter().fold(0x243F_6A88_85A3_08D3, |h, v| Rng(h ^ v).next())
}

/// A length up to `max`, weighted towards small: a few empty, most up to
/// 4 KiB, one in twenty from 1 to 4 MiB.
pub fn size(rng: &mut Rng, max: usize) -> usize {
    let cap = match rng.below(100) {
        0..=2 => 0,
        3..=42 => 64,
        43..=64 => 4096,
        65..=84 => 64 << 10,
        85..=94 => MIB,
        _ => MSG_MAX,
    };
    rng.below(cap.min(max) + 1)
}

/// The random bytes every window is cut from.
pub struct Table(Vec<u8>);

impl Table {
    pub fn new(seed: u64) -> Table {
        let mut rng = Rng(mix(&[seed, 0x7AB1E]));
        Table((0..(MSG_MAX + OFFSETS) / 8).flat_map(|_| rng.next().to_le_bytes()).collect())
    }

    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.0[off..off + len]
    }
}

/// Where a process's read area starts in the table.
pub fn read_area(seed: u64, owner: usize) -> usize {
    mix(&[seed, owner as u64, 3]) as usize % OFFSETS
}

/// How a receiver takes a message; the top byte of its tag.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Class {
    /// Tagged: a receive from its sender with its exact tag.
    Exact = 1,
    /// Tagged: a receive from its sender that ignores the sequence number
    /// and random bits, so it takes the sender's next one (send order).
    Ordered,
    /// Tagged: a receive of any source (`RDM4_ADDR_UNSPEC`) that ignores
    /// all but the class, into `ANY_BUF` bytes.
    Any,
    /// Tagged: found by `rdm4_probe` of any source with
    /// `RDM4_PROBE_CLAIM`, then `rdm4_recv_claimed` of its length.
    Claim,
    /// Tagged: dropped by `rdm4_probe` with `RDM4_PROBE_DISCARD`.
    Discard,
    /// Untagged: as the receiver's `Untagged` mode of the round says.
    Untagged,
    /// No message has it: the tag of the probes that must find nothing
    /// and the receives that are canceled.
    Never,
}

pub const CLASS_SHIFT: u32 = 56;
pub const SENDER_SHIFT: u32 = 40;
pub const SEQ_SHIFT: u32 = 16;
/// What a receive of any source ignores: all but the class.
pub const IGNORE_BUT_CLASS: u64 = (1 << CLASS_SHIFT) - 1;
/// What an ordered receive ignores: the sequence number and random bits.
pub const IGNORE_SEQ: u64 = (1 << SENDER_SHIFT) - 1;

pub fn class_tag(c: Class) -> u64 {
    (c as u64) << CLASS_SHIFT
}

/// How a receiver takes its untagged messages in a round (one way for
/// all: a receive of any source would take a directed one's message).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Untagged {
    /// A receive from the sender, of the exact length (send order).
    Directed,
    /// Receives of any source into `ANY_BUF` bytes.
    Any,
    /// `rdm4_probe` of any source with `RDM4_PROBE_CLAIM`.
    Claim,
}

pub fn untagged_mode(seed: u64, round: u64, receiver: usize) -> Untagged {
    match mix(&[seed, round, receiver as u64, 4]) % 3 {
        0 => Untagged::Directed,
        1 => Untagged::Any,
        _ => Untagged::Claim,
    }
}

/// The call a message is sent with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum How {
    /// `rdm4_send` / `rdm4_tsend`.
    Plain,
    /// `rdm4_senddata`; tagged: `rdm4_sendmsg` with remote CQ data.
    Data,
    /// `rdm4_inject` / `rdm4_tinject`.
    Inject,
    /// `rdm4_sendmsg`, with `RDM4_MSG_MORE` or not, in two buffers or one.
    Msg { more: bool, split: bool },
    /// `rdm4_sendmsg` with `RDM4_MSG_DELIVERY_COMPLETE`.
    Dc { split: bool },
}

#[derive(Clone, Copy, Debug)]
pub struct Msg {
    pub class: Class,
    pub len: usize,
    /// Class, sender, sequence number and random bits; untagged messages
    /// have one too (unsent), which their remote CQ data is derived from.
    pub tag: u64,
    /// Where its bytes start in the table.
    pub off: usize,
    pub how: How,
    /// Remote CQ data it carries.
    pub data: Option<u64>,
}

/// Whether a receive of any source takes a message of `class` at a
/// receiver whose untagged mode is `mode`.
pub fn by_any(class: Class, mode: Untagged) -> bool {
    class == Class::Any || (class == Class::Untagged && mode == Untagged::Any)
}

/// Receive buffer bytes a message takes.
pub fn need(class: Class, len: usize, mode: Untagged) -> usize {
    match class {
        Class::Discard => 0,
        _ if by_any(class, mode) => ANY_BUF,
        _ => len,
    }
}

/// The messages `s` sends `r` in `round`, in send order (the sequence
/// number is the index); `mode` is `r`'s untagged mode of the round.
pub fn msgs(seed: u64, round: u64, s: usize, r: usize, mode: Untagged) -> Vec<Msg> {
    let mut rng = Rng(mix(&[seed, round, s as u64, r as u64, 1]));
    let mut left = PAIR_BUDGET;
    let mut out = Vec::new();
    for seq in 0..1 + rng.below(10) as u64 {
        let class = match rng.below(100) {
            0..=24 => Class::Exact,
            25..=44 => Class::Ordered,
            45..=54 => Class::Any,
            55..=64 => Class::Claim,
            65..=69 => Class::Discard,
            _ => Class::Untagged,
        };
        let len = size(&mut rng, if by_any(class, mode) { ANY_BUF } else { MSG_MAX });
        if need(class, len, mode) > left {
            break;
        }
        left -= need(class, len, mode);
        let split = rng.chance(50);
        let how = match rng.below(100) {
            0..=14 if len <= INJECT_MAX => How::Inject,
            0..=39 => How::Plain,
            40..=49 => How::Data,
            50..=74 => How::Msg { more: rng.chance(50), split },
            _ => How::Dc { split },
        };
        let tag = class_tag(class) | (s as u64) << SENDER_SHIFT | seq << SEQ_SHIFT | rng.below(1 << 16) as u64;
        let data = match how {
            How::Data => true,
            How::Msg { .. } | How::Dc { .. } => rng.chance(30),
            How::Plain | How::Inject => false,
        };
        let data = data.then(|| mix(&[tag, len as u64]));
        out.push(Msg { class, len, tag, off: rng.below(OFFSETS), how, data });
    }
    out
}

/// A write of `s` into a peer's region.
#[derive(Clone, Copy, Debug)]
pub struct PlannedWrite {
    /// Into the memory of `rdm4_mr_alloc` (else the registered region).
    pub alloc: bool,
    /// Offset in the region: in `s`'s slot, one half per write.
    pub at: usize,
    pub len: usize,
    /// Where its bytes start in the table.
    pub off: usize,
    /// `rdm4_writedata` with this (32 or 64 bits): the target gets a
    /// completion with it.
    pub data: Option<u64>,
    /// Try `rdm4_write_now` first (not with data).
    pub now: bool,
}

/// What `s` writes into `t`'s memory in `round`.
pub fn writes(seed: u64, round: u64, s: usize, t: usize) -> Vec<PlannedWrite> {
    let mut rng = Rng(mix(&[seed, round, s as u64, t as u64, 2]));
    let mut out = Vec::new();
    for (i, alloc) in [false, false, true, true].into_iter().enumerate() {
        if rng.chance(40) {
            continue;
        }
        let half = SLOT / 2;
        let len = size(&mut rng, half);
        let at = READ_AT + READ_LEN + s * SLOT + (i % 2) * half + rng.below(half - len + 1);
        let data = (!alloc && rng.chance(40)).then(|| {
            let d = mix(&[seed, round, s as u64, t as u64, i as u64]);
            if rng.chance(50) {
                d & 0xFFFF_FFFF
            } else {
                d
            }
        });
        out.push(PlannedWrite { alloc, at, len, off: rng.below(OFFSETS), data, now: data.is_none() && rng.chance(25) });
    }
    out
}
