//! What the endpoint sent and received: packets by type, and the protocol
//! each message and one-sided operation took (how many, how many bytes).
//! Read by the C API's counters (`rdm4_counters`) and by tests, which
//! assert through them that the intended protocol ran.
//!
//! Packets count by their type byte where they are built or handed over;
//! protocols count where the engine decides them (for operations that
//! wait for the peer's HANDSHAKE, when it arrives). A fallback counts
//! again under its own protocol (a nacked long-read also as long-CTS).

/// The protocols counted ([`Traffic::msgs`], [`Traffic::bytes`]), in the
/// order of their counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// Messages: eager (one packet).
    Eager,
    /// Messages: medium (segments in RTMs).
    Medium,
    /// Messages: long-CTS.
    Longcts,
    /// Messages: long-read.
    Longread,
    /// Messages: runting read.
    Runtread,
    /// Writes by the device's RDMA (with immediate data when they carry CQ data).
    WriteDirect,
    /// Writes emulated: eager, long-CTS, long-read.
    WriteEager,
    WriteLongcts,
    WriteLongread,
    /// Reads by the device's RDMA.
    ReadDirect,
    /// Reads emulated: short, long-CTS.
    ReadShort,
    ReadLongcts,
    /// Atomics emulated (served by the target's progress).
    Atomic,
    /// Atomics done by this process's CPU on memory a peer of this host
    /// allocated to be mapped.
    AtomicDirect,
}

impl Proto {
    /// Every protocol, in counter order.
    pub const ALL: [Proto; 14] = [
        Proto::Eager,
        Proto::Medium,
        Proto::Longcts,
        Proto::Longread,
        Proto::Runtread,
        Proto::WriteDirect,
        Proto::WriteEager,
        Proto::WriteLongcts,
        Proto::WriteLongread,
        Proto::ReadDirect,
        Proto::ReadShort,
        Proto::ReadLongcts,
        Proto::Atomic,
        Proto::AtomicDirect,
    ];

    /// Its name in counters.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Eager => "msg_eager",
            Proto::Medium => "msg_medium",
            Proto::Longcts => "msg_longcts",
            Proto::Longread => "msg_longread",
            Proto::Runtread => "msg_runtread",
            Proto::WriteDirect => "write_direct",
            Proto::WriteEager => "write_eager",
            Proto::WriteLongcts => "write_longcts",
            Proto::WriteLongread => "write_longread",
            Proto::ReadDirect => "read_direct",
            Proto::ReadShort => "read_short",
            Proto::ReadLongcts => "read_longcts",
            Proto::Atomic => "atomic",
            Proto::AtomicDirect => "atomic_direct",
        }
    }
}

/// The counters (see the module docs).
#[derive(Debug, Clone)]
pub struct Traffic {
    /// Packets sent, by type byte.
    pub tx: [u64; 256],
    /// Packets received (taken by the engine, also those it then dropped
    /// as malformed: type byte as it came), by type byte.
    pub rx: [u64; 256],
    /// Operations by protocol ([`Proto`] as index; eager: see [`Self::ops`]).
    pub msgs: [u64; Proto::ALL.len()],
    /// Their bytes by protocol.
    pub bytes: [u64; Proto::ALL.len()],
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic { tx: [0; 256], rx: [0; 256], msgs: [0; Proto::ALL.len()], bytes: [0; Proto::ALL.len()] }
    }
}

impl Traffic {
    /// Counts an eager message taken by the fast path.
    #[inline(always)]
    pub(crate) fn rx_eager(&mut self, tagged: bool) {
        self.rx[crate::wire::PacketType::EagerMsgRtm as usize + usize::from(tagged)] += 1;
    }

    /// Counts an eager message sent by the fast path, of `len` bytes.
    #[inline(always)]
    pub(crate) fn tx_eager(&mut self, tagged: bool, len: usize) {
        self.tx[crate::wire::PacketType::EagerMsgRtm as usize + usize::from(tagged)] += 1;
        self.bytes[Proto::Eager as usize] += len as u64;
    }

    /// Packets received, of every type.
    pub fn rx_total(&self) -> u64 {
        self.rx.iter().sum()
    }

    /// Packets sent, of every type.
    pub fn tx_total(&self) -> u64 {
        self.tx.iter().sum()
    }

    /// Counts one operation of `len` bytes by protocol `p`.
    #[inline(always)]
    pub(crate) fn op(&mut self, p: Proto, len: u64) {
        self.msgs[p as usize] += 1;
        self.bytes[p as usize] += len;
    }

    /// Packets sent of type `t`.
    pub fn sent(&self, t: crate::wire::PacketType) -> u64 {
        self.tx[t as usize]
    }

    /// Packets received of type `t`.
    pub fn received(&self, t: crate::wire::PacketType) -> u64 {
        self.rx[t as usize]
    }

    /// Operations that took protocol `p`. Eager messages count as the
    /// eager RTMs sent (one each; the fast path counts no more).
    pub fn ops(&self, p: Proto) -> u64 {
        use crate::wire::PacketType as T;
        match p {
            Proto::Eager => [T::EagerMsgRtm, T::EagerTagRtm, T::DcEagerMsgRtm, T::DcEagerTagRtm]
                .iter()
                .map(|&t| self.tx[t as usize])
                .sum(),
            _ => self.msgs[p as usize],
        }
    }
}
