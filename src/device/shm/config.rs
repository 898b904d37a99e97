//! The shm device's settings: defaults and their environment variables.

use std::time::Duration;

/// Settings of a shm endpoint.
#[derive(Debug, Clone)]
pub struct ShmConfig {
    /// Segment name prefix (lets tests use their own name space).
    pub prefix: String,
    /// Open exactly this endpoint id (else the first free one).
    pub epid: Option<u32>,
    /// Ring size in full-size packets (a power of two, at least 2): the
    /// ring holds `slots` × `mtu` bytes, rounded up to a power of two. Its
    /// memory is allocated at open; where `/dev/shm` has less room, the ring
    /// is halved until it fits.
    ///
    /// Default 128 (8 MiB with the default MTU). Measured on a 2-core VM
    /// (paired runs): 32 slots (2 MiB, a ring that stays in cache) give
    /// 4 KiB-1 MiB tag_lat 18-22% shorter and the same 8 B latency and
    /// rate, and in a calm machine state the same 1 MiB tag_bw; but in a
    /// state that comes and goes on that VM (another placement of its
    /// vCPUs, by the look of it) 1 MiB tag_bw with 2 or 4 MiB rings fell to
    /// ~11-15 GB/s while the 8 MiB ring kept ~26. The likely difference: in
    /// an 8 MiB ring a streaming sender writes lines no cache holds any
    /// more; in a small one, lines the receiver read a lap before, taken
    /// back from its caches. Applications after the latency can set 32.
    /// The 8 MiB ring has its slow runs too (~11 GB/s, some minutes most of
    /// them): a reader copying right behind the writer takes lines still in
    /// the writer's L2. A two-process C ring of 64 KiB packets streamed
    /// 11-12 GB/s that way, 28-31 with the reader 512 KiB behind; an owner
    /// that waits for that lag costs single-message latency (1 MiB
    /// tag_lat +10-15%), so it does not.
    pub slots: u32,
    /// Largest packet (a multiple of 64).
    pub mtu: u32,
    /// Use cross-memory attach for RDMA when the OS allows it.
    pub cma: bool,
    /// Two-sided messages of at least this many bytes move by long-read (one
    /// copy by cross-memory attach, the sender passive) instead of long-CTS
    /// through the ring (`usize::MAX`, the default: never). Measured on a
    /// 2-core VM, the ring's pipelined copies — the sender copying in while
    /// the receiver copies out — beat one `process_vm_readv` at every size
    /// from 64 KiB to 16 MiB (1 MiB: ~10.5 vs ~8.6 GB/s; 16 MiB: ~7 vs
    /// ~3.5 GB/s); long-read still pays off when the sender cannot progress
    /// while the message moves.
    pub longread_min: usize,
    /// How often peers' liveness is checked.
    pub peer_check: Duration,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            prefix: "rdm4".into(),
            epid: None,
            slots: 128,
            mtu: 64 * 1024,
            cma: true,
            longread_min: usize::MAX,
            peer_check: Duration::from_millis(100),
        }
    }
}

impl ShmConfig {
    /// The defaults, overridden by the `RDM4_SHM_*` environment variables.
    pub fn from_env() -> ShmConfig {
        let mut c = ShmConfig::default();
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(p) = var("RDM4_SHM_PREFIX") {
            c.prefix = p;
        }
        c.epid = var("RDM4_SHM_EPID").and_then(|v| v.parse().ok());
        if let Some(n) = var("RDM4_SHM_SLOTS").and_then(|v| v.parse().ok()) {
            c.slots = n;
        }
        if let Some(n) = var("RDM4_SHM_MTU").and_then(|v| v.parse().ok()) {
            c.mtu = n;
        }
        if var("RDM4_SHM_CMA").as_deref() == Some("0") {
            c.cma = false;
        }
        if let Some(n) = var("RDM4_SHM_LONGREAD_MIN").and_then(|v| v.parse().ok()) {
            c.longread_min = n;
        }
        if let Some(ms) = var("RDM4_SHM_PEER_CHECK_MS").and_then(|v| v.parse().ok()) {
            c.peer_check = Duration::from_millis(ms);
        }
        c
    }
}
