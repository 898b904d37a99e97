//! The shm device's settings: defaults and their environment variables.

use std::time::Duration;

use crate::env;
use crate::status::Status;

/// Settings of a shm endpoint.
#[derive(Debug, Clone)]
pub struct ShmConfig {
    /// Segment name prefix (lets tests use their own name space).
    pub prefix: String,
    /// Open exactly this endpoint id (else the first free one).
    pub epid: Option<u32>,
    /// Ring size in full-size packets (a power of two, at least 2): the
    /// ring holds up to `slots` × `mtu` bytes, rounded up to a power of
    /// two. It starts with `start_slots` and grows to this size once used
    /// (doubled when a producer finds it full, whole once its owner reads
    /// more than 100 MB/s: `grow.rs`); its memory is allocated as it
    /// grows, and a ring that cannot have more (a full `/dev/shm`) stays
    /// as it is.
    ///
    /// Default 128 (8 MiB with the default MTU). 32 slots (2 MiB, a ring
    /// that stays in cache) make 4 KiB-1 MiB messages one at a time
    /// quicker, but in some machine states slow 1 MiB streams, whose
    /// sender then writes lines the receiver read a lap before instead of
    /// lines no cache holds; applications after the latency can set 32
    /// (see docs/performance.md, "Ring size").
    pub slots: u32,
    /// The ring's size at open, in full-size packets (a power of two, at
    /// least 2, at most `slots`, and at least `slots` / 128): the memory an
    /// endpoint takes in `/dev/shm` at open, all but the 64 KiB registration
    /// table. Default 16 (1 MiB with the default MTU), so that 128
    /// endpoints on a node take about 140 MiB at open rather than 1 GiB; a
    /// ring that streams grows to `slots` within its first laps (see
    /// docs/performance.md, "Ring growth"). Where `/dev/shm` has less room,
    /// it is halved until it fits.
    pub start_slots: u32,
    /// Largest packet (a multiple of 64).
    pub mtu: u32,
    /// Use cross-memory attach for RDMA when the OS allows it.
    pub cma: bool,
    /// Two-sided messages of at least this many bytes move by long-read (one
    /// copy by cross-memory attach, the sender passive) instead of long-CTS
    /// through the ring (`usize::MAX`, the default: never, but crowded and
    /// towards far peers). Between close CPUs the ring's pipelined copies —
    /// the sender copying in while the receiver copies out — are the
    /// quicker at every size; long-read pays off when the sender cannot
    /// progress while the message moves (see docs/performance.md,
    /// "Long-read"), and towards a far peer (`far_longread_min`).
    pub longread_min: usize,
    /// In crowded mode (more endpoints, this one and its shm peers, than
    /// CPUs: `crowd.rs`), two-sided messages of at least this many bytes
    /// move by long-read without a runt, when that is smaller than
    /// `longread_min`. Default [`CROWDED_LONGREAD_MIN`]; `usize::MAX`
    /// (what setting `RDM4_SHM_LONGREAD_MIN` gives): never.
    pub crowded_longread_min: usize,
    /// To a peer found far (`far.rs`), two-sided messages of at least this
    /// many bytes move by long-read without a runt, when that is smaller
    /// than `longread_min`: far apart, one cross-memory-attach copy moves
    /// each line across once, where the ring's two copies move it twice
    /// (plain stores) or through memory (non-temporal ones), and from
    /// 64 KiB the sender, polling, copies half of it (`help_min`). Default
    /// [`FAR_LONGREAD_MIN`]; `usize::MAX` (what setting
    /// `RDM4_SHM_LONGREAD_MIN` gives): never (docs/performance.md, "Far
    /// peers: long-read").
    pub far_longread_min: usize,
    /// How far (bytes) the owner stays behind a producer that is still
    /// writing, for packets whose producer said more of a stream follows
    /// them; `None` (the default): three times the L2 cache of CPU 0 (1.5
    /// MiB where unknown), at most a quarter of the ring; `Some(0)`: never.
    /// A reader right behind a streaming writer copies lines that are still
    /// in the writer's caches, which is slow in spells that come and go for
    /// seconds. Producers mark only packets
    /// with four trails or more of a stream behind them
    /// ([`crate::device::Caps::backlog_min`]), so a lone message (up to 6
    /// MiB with the default), which the owner should copy as it arrives, is
    /// not held back (see `trail.rs` and docs/performance.md, "Trail").
    pub trail: Option<usize>,
    /// Bulk packets (payloads of 32 KiB or more: long messages' CTSDATA,
    /// and a long-CTS RTM's first segment) to a peer whose cache lines take
    /// longer than this many nanoseconds to fetch are written with
    /// non-temporal stores; `None`: never; `Some(0)`: always, every peer
    /// counting as far (`far_longread_min` too). The producer
    /// times a load of the peer's ring head once per 16 such packets; the
    /// peer is far while 3 of the last 32 times are over the limit. Far
    /// apart, plain stores make every line cross twice; close,
    /// non-temporal stores make the owner read from memory what it would
    /// find in the shared cache, so there a stream that does not pause
    /// tries the other way now and then
    /// and keeps whichever laps the ring quicker (`far.rs`;
    /// docs/performance.md, "Non-temporal stores"). `None` and `Some(0)`
    /// fix the way, trials and all. The "more follows" mark comes with the
    /// trail's hint ([`crate::device::Caps::backlog_min`]): with `trail` 0
    /// every lap counts as paused and no trial is made.
    pub far_ns: Option<u32>,
    /// How far (bytes) the owner stays behind a fast one-way stream of
    /// small packets that the express receive takes (`lag.rs`): 16 KiB by
    /// default, at most an eighth of the ring; 0: not at all. Only in such
    /// a stream (256 packets in a row, none answered, at least 4 M/s) does
    /// a packet wait for it: until `lag` more bytes follow it, 10 us at
    /// most, or one hold (1.5 us) when the stream pauses or stops. It keeps
    /// 8 B streams at their fast rate, and 16 KiB is the least lag that
    /// does (see docs/performance.md, "Lag").
    pub lag: usize,
    /// How often peers' liveness is checked; also how often the ring's
    /// head is checked for an entry claimed by a producer that died before
    /// publishing it, which is skipped at the second check that finds the
    /// head still before it (`claims.rs`).
    pub peer_check: Duration,
    /// Reads and writes of ordinary registered memory that fit one packet
    /// go as requests into the target's ring, served by its device while
    /// it polls, instead of a cross-memory-attach system call
    /// (`ringrma.rs`). Only towards a target that polled in the last 50 us
    /// and does not sleep; a request it leaves untaken for a quarter of a
    /// millisecond is taken back and done by the system call after all.
    /// Default on: with the target polling, puts and gets of 8 B to 64 KiB
    /// go at several times the rate of the system call and in a fraction
    /// of its latency (docs/performance.md, "one-sided operations on one
    /// host (issue 31, second part)"). Off: every such operation is the
    /// system call, done in the call.
    pub ring_rma: bool,
    /// Cross-memory-attach reads of at least this many bytes ask the
    /// memory's owner, when it is not asleep and the endpoint is not
    /// crowded, to copy chunks of the read too while it polls
    /// (`help.rs`): two CPUs copy at once. Default [`HELP_MIN`];
    /// `usize::MAX` (`RDM4_SHM_HELP_MIN=off`): never.
    pub help_min: usize,
}

/// The default [`ShmConfig::help_min`]: 64 KiB, from where a helped read
/// (two chunks of 32 KiB) beat the ring to a far peer (5.8 µs against 6.5
/// for 64 KiB; 32 KiB lost, 5.9 against 4.3: docs/performance.md,
/// "Two-handed reads").
pub const HELP_MIN: usize = 64 * 1024;

/// The default [`ShmConfig::crowded_longread_min`].
pub const CROWDED_LONGREAD_MIN: usize = 16 * 1024;

/// The default [`ShmConfig::far_longread_min`].
pub const FAR_LONGREAD_MIN: usize = 64 * 1024;

/// The default [`ShmConfig::far_ns`].
pub const FAR_NS: u32 = 90;

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            prefix: "rdm4".into(),
            epid: None,
            slots: 128,
            start_slots: 16,
            mtu: 64 * 1024,
            cma: true,
            longread_min: usize::MAX,
            crowded_longread_min: CROWDED_LONGREAD_MIN,
            far_longread_min: FAR_LONGREAD_MIN,
            trail: None,
            far_ns: Some(FAR_NS),
            lag: 16 * 1024,
            peer_check: Duration::from_millis(100),
            ring_rma: true,
            help_min: HELP_MIN,
        }
    }
}

impl ShmConfig {
    /// The trail in bytes (`trail`, or its default from the L2 size).
    pub(super) fn trail_bytes(&self) -> usize {
        self.trail.unwrap_or_else(|| l2_size().unwrap_or(512 << 10) * 3)
    }

    /// The defaults, overridden by the `RDM4_SHM_*` environment variables.
    /// Every variable that is set must hold a valid value within its
    /// bounds, or this fails with `Status::Inval` after a line on stderr
    /// that names it (see `crate::env`): a typo never silently leaves a
    /// default in place.
    pub fn from_env() -> Result<ShmConfig, Status> {
        let mut c = ShmConfig::default();
        if let Some(p) = env::var("RDM4_SHM_PREFIX") {
            if !prefix_ok(&p) {
                return Err(env::reject("RDM4_SHM_PREFIX", &p, "1 to 64 of A-Z a-z 0-9 . _ -"));
            }
            c.prefix = p;
        }
        c.epid = env::number("RDM4_SHM_EPID", 0..=u32::from(u16::MAX))?;
        if let Some(n) = env::number("RDM4_SHM_SLOTS", 2..=MAX_SLOTS)? {
            if !n.is_power_of_two() {
                return Err(env::reject("RDM4_SHM_SLOTS", &n.to_string(), "a power of two from 2 to 65536"));
            }
            c.slots = n;
        }
        if let Some(n) = env::number("RDM4_SHM_START_SLOTS", 2..=MAX_SLOTS)? {
            if !n.is_power_of_two() {
                return Err(env::reject("RDM4_SHM_START_SLOTS", &n.to_string(), "a power of two from 2 to 65536"));
            }
            c.start_slots = n;
        }
        if let Some(n) = env::number("RDM4_SHM_MTU", 256..=MAX_MTU)? {
            if n % 64 != 0 {
                return Err(env::reject("RDM4_SHM_MTU", &n.to_string(), "a multiple of 64 from 256 to 16777216"));
            }
            c.mtu = n;
        }
        if c.ring_bytes() > MAX_RING {
            let v = format!("{} (RDM4_SHM_MTU={})", c.slots, c.mtu);
            return Err(env::reject("RDM4_SHM_SLOTS", &v, "slots x MTU of at most 1 GiB"));
        }
        if let Some(i) = env::word("RDM4_SHM_CMA", &["0", "1"])? {
            c.cma = i == 1;
        }
        if let Some(v) = env::number_or_word("RDM4_SHM_LONGREAD_MIN", 0..=usize::MAX, &["off"])? {
            c.longread_min = v.unwrap_or(usize::MAX);
            c.crowded_longread_min = usize::MAX; // the application's choice, crowded, far or not
            c.far_longread_min = usize::MAX;
        }
        if let Some(n) = env::number("RDM4_SHM_TRAIL", 0..=MAX_RING)? {
            c.trail = Some(n);
        }
        if let Some(v) = env::number_or_word("RDM4_SHM_FAR_NS", 0..=1_000_000, &["off"])? {
            c.far_ns = v.ok();
        }
        if let Some(n) = env::number("RDM4_SHM_LAG", 0..=MAX_RING)? {
            c.lag = n;
        }
        if let Some(ms) = env::number("RDM4_SHM_PEER_CHECK_MS", 1..=60_000)? {
            c.peer_check = Duration::from_millis(ms);
        }
        if let Some(i) = env::word("RDM4_SHM_RING_RMA", &["0", "1"])? {
            c.ring_rma = i == 1;
        }
        if let Some(v) = env::number_or_word("RDM4_SHM_HELP_MIN", 1..=usize::MAX, &["off"])? {
            c.help_min = v.unwrap_or(usize::MAX);
        }
        Ok(c)
    }

    /// The bytes of ring asked for (before rounding up to a power of two).
    pub(super) fn ring_bytes(&self) -> usize {
        self.slots as usize * self.mtu as usize
    }

    /// Whether the settings are within their bounds (`open_with` checks).
    pub(super) fn valid(&self) -> bool {
        self.slots.is_power_of_two()
            && (2..=MAX_SLOTS).contains(&self.slots)
            && self.start_slots.is_power_of_two()
            && (2..=MAX_SLOTS).contains(&self.start_slots)
            && self.mtu % 64 == 0
            && (256..=MAX_MTU).contains(&self.mtu)
            && self.ring_bytes() <= MAX_RING
            && prefix_ok(&self.prefix)
            && self.epid.is_none_or(|id| id <= u32::from(u16::MAX))
    }
}

/// Most slots of a ring.
pub const MAX_SLOTS: u32 = 1 << 16;
/// Largest MTU.
pub const MAX_MTU: u32 = 1 << 24;
/// Most bytes of a ring (slots x MTU).
pub const MAX_RING: usize = 1 << 30;

/// A segment name prefix: 1 to 64 characters of A-Z a-z 0-9 . _ -.
fn prefix_ok(p: &str) -> bool {
    (1..=64).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// CPU 0's L2 cache size, from sysfs (e.g. "1024K").
fn l2_size() -> Option<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size").ok()?;
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: usize = num.parse().ok()?;
    match unit {
        "" => Some(n),
        "K" => Some(n << 10),
        "M" => Some(n << 20),
        _ => None,
    }
}
