//! Completion queue entries.

use bitflags::bitflags;

use crate::status::Status;

bitflags! {
    /// What a completion is for (values are part of the C ABI).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CqFlags: u64 {
        /// A send finished.
        const SEND = 1 << 0;
        /// A receive finished.
        const RECV = 1 << 1;
        /// Two-sided message.
        const MSG = 1 << 2;
        /// Tagged message.
        const TAGGED = 1 << 3;
        /// One-sided operation.
        const RMA = 1 << 4;
        /// RMA read.
        const READ = 1 << 5;
        /// RMA write.
        const WRITE = 1 << 6;
        /// Atomic.
        const ATOMIC = 1 << 7;
        /// `data` holds remote CQ data.
        const REMOTE_CQ_DATA = 1 << 8;
        /// A peer wrote into local memory (target side of a write with CQ data).
        const REMOTE_WRITE = 1 << 9;
    }
}

/// One completion (the C API's `rdm4_cqe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// The application's context of the operation (0 for target-side entries).
    pub context: u64,
    /// Kind of operation.
    pub flags: CqFlags,
    /// Bytes transferred (received into the buffer, for receives).
    pub len: u64,
    /// Start of the buffer the data went to (receives), else 0.
    pub buf: u64,
    /// Remote CQ data, when `REMOTE_CQ_DATA` is set.
    pub data: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Source address handle of a receive (`u32::MAX` when not known).
    pub src: u32,
    /// `Success` or why the operation failed.
    pub status: Status,
    /// For truncation: the full message length (`len` is what fitted).
    pub olen: u64,
    /// For an error the peer reported (PEER_ERROR): its error number
    /// (`prov_errno`); else 0.
    pub detail: u32,
}

impl Cqe {
    /// An entry with no buffer, data, tag, source, overflow or detail.
    pub(crate) fn new(context: u64, flags: CqFlags, len: u64, status: Status) -> Cqe {
        Cqe { context, flags, len, buf: 0, data: 0, tag: 0, src: ADDR_UNSPEC, status, olen: 0, detail: 0 }
    }
}

/// A place that takes completions as they are made, ahead of the queue: the
/// C API's `rdm4_poll` offers the application's own array, so that the
/// common receive's entry is written once, in the C layout, instead of
/// queued, taken and converted (see [`super::Endpoint::progress_into`]).
pub trait CqSink {
    /// Takes `e` (true) or declines it (false: it is queued as usual).
    fn offer(&mut self, e: &Cqe) -> bool;
}

/// No sink: every completion is queued.
impl CqSink for () {
    #[inline(always)]
    fn offer(&mut self, _: &Cqe) -> bool {
        false
    }
}

/// `Cqe::src` of an entry with no known source.
pub const ADDR_UNSPEC: u32 = u32::MAX;
