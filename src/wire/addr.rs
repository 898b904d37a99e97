//! The raw address (spec table 1.5) and `efa_rma_iov` (spec §3.3).

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The 32-byte raw address of an endpoint (spec table 1.5, libfabric `efa_ep_addr`).
///
/// `gid` is an IPv6-format device/host identity, `qpn` the queue pair number,
/// `connid` (libfabric: `qkey`) a random number chosen when the endpoint opens.
/// The last 8 bytes are reserved (a pointer member in libfabric) and ignored.
#[derive(Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RawAddr {
    /// IPv6-format identity of the device (or host).
    pub gid: [u8; 16],
    qpn: U16,
    pad: U16,
    connid: U32,
    reserved: U64,
}

impl RawAddr {
    /// Size of the address on the wire.
    pub const LEN: usize = 32;

    /// An address with zero pad and reserved bytes.
    pub fn new(gid: [u8; 16], qpn: u16, connid: u32) -> RawAddr {
        RawAddr { gid, qpn: U16::new(qpn), pad: U16::ZERO, connid: U32::new(connid), reserved: U64::ZERO }
    }

    /// Reads the first 32 bytes of `bytes`; `None` when fewer are given.
    pub fn from_bytes(bytes: &[u8]) -> Option<RawAddr> {
        RawAddr::read_from_prefix(bytes).ok().map(|(a, _)| a)
    }

    /// The queue pair number (endpoint number on rdm4's devices).
    pub fn qpn(&self) -> u16 {
        self.qpn.get()
    }

    /// The pad field (zero when built by rdm4; not interpreted).
    pub fn pad(&self) -> u16 {
        self.pad.get()
    }

    /// The connection ID (libfabric's `qkey`).
    pub fn connid(&self) -> u32 {
        self.connid.get()
    }

    /// The reserved trailing 8 bytes as an integer (not interpreted).
    pub fn reserved(&self) -> u64 {
        self.reserved.get()
    }

    /// The address with `reserved` in its trailing 8 bytes (the auto
    /// device's names carry a shm locator there; never on the wire).
    pub fn with_reserved(self, reserved: u64) -> RawAddr {
        RawAddr { reserved: U64::new(reserved), ..self }
    }

    /// The 32 bytes of the address.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// The 36-byte body libfabric puts in the REQ raw-address header: the
    /// address and 4 zero pad bytes that round the header to 40 bytes (wire-facts #12).
    pub fn to_req_hdr_body(&self) -> [u8; 36] {
        let mut out = [0u8; 36];
        out[..32].copy_from_slice(self.as_bytes());
        out
    }
}

impl std::fmt::Debug for RawAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawAddr(gid=")?;
        for (i, pair) in self.gid.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        write!(f, ", qpn={}, connid={:#x})", self.qpn(), self.connid())
    }
}

/// One `efa_rma_iov`: a remote buffer (`addr`, `len`) and the key of its registration.
#[derive(Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RmaIov {
    addr: U64,
    len: U64,
    key: U64,
}

impl RmaIov {
    /// Size of one entry on the wire.
    pub const LEN: usize = 24;

    /// An entry from its three values.
    pub fn new(addr: u64, len: u64, key: u64) -> RmaIov {
        RmaIov { addr: U64::new(addr), len: U64::new(len), key: U64::new(key) }
    }

    /// Remote address.
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len.get()
    }

    /// True when the entry covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Registration key.
    pub fn key(&self) -> u64 {
        self.key.get()
    }
}

impl std::fmt::Debug for RmaIov {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RmaIov {{ addr: {:#x}, len: {}, key: {:#x} }}", self.addr(), self.len(), self.key())
    }
}
