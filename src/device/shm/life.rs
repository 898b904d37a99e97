//! An endpoint's life: opening (removing the segments of dead owners,
//! then sizing and creating its own and its wake-up FIFO) and closing
//! (the closed tail, close notices to its peers, the segment unlinked).

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::barrier::asymmetric_barriers;
use super::cma::cma_works;
use super::liveness::coarse_now;
use super::produce::claim_entry;
use super::segment::{
    self, cstr, entry_len, fifo_path, free_shm_bytes, host_gid, is_stale, off, random_u64, remove_stale_locked,
    seg_name, start_time, unlink_segment, Mapping, OpenLock, Shape,
};
use super::{alloc, claims, grow, lag, ringrma, ShmConfig, ShmDevice, HDR_LEN, LAYOUT_VERSION, MAGIC};
use crate::fxhash::FxHashMap;
use crate::status::Status;

/// Endpoint ids scanned for a free one when none is asked for.
const EPID_SCAN: u32 = 4096;

/// The most slots, `slots` halved as often as needed, whose segment fits
/// in `free` bytes; `None` when not even a ring of two full-size packets
/// (or of `slots`, if fewer) fits.
pub(super) fn fitting_slots(slots: u32, mtu: u32, free: u64) -> Option<u32> {
    let mut slots = slots.max(1);
    loop {
        let total = Shape::new(slots, mtu, 1 << 63).total() as u64;
        if total <= free {
            return Some(slots);
        }
        if slots <= 2 {
            return None;
        }
        slots /= 2;
    }
}

impl ShmDevice {
    /// Opens an endpoint with the settings of the environment
    /// (`Status::Inval` when one is not valid, see [`ShmConfig::from_env`]).
    pub fn open() -> Result<ShmDevice, Status> {
        ShmDevice::open_with(ShmConfig::from_env()?)
    }

    /// Opens an endpoint: removes the segments of the prefix whose owners
    /// are gone (killed, or ended without closing), then creates its own.
    pub fn open_with(cfg: ShmConfig) -> Result<ShmDevice, Status> {
        if !cfg.valid() {
            return Err(Status::Inval);
        }
        asymmetric_barriers(); // register now, not on the first send
        let ids: Vec<u32> = match cfg.epid {
            Some(id) => vec![id],
            None => (0..EPID_SCAN).collect(),
        };
        let _lock = OpenLock::take();
        remove_stale_locked(&cfg.prefix);
        for epid in ids {
            let name = seg_name(&cfg.prefix, epid);
            match Self::create(&cfg, &name, epid) {
                Ok(dev) => return Ok(dev),
                Err(Status::Busy) if is_stale(&name) => {
                    unlink_segment(&name);
                    if let Ok(dev) = Self::create(&cfg, &name, epid) {
                        return Ok(dev);
                    }
                }
                Err(Status::Busy) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Status::Busy)
    }

    /// Sizes the new segment for its whole ring and has the memory of
    /// its header, starting ring and registration table allocated now: a
    /// tmpfs that runs out (a container's small `/dev/shm`) fails here,
    /// cleanly, rather than with SIGBUS when the ring first reaches a page
    /// it cannot have. The starting ring is first sized to the free space
    /// of `/dev/shm` (halved until it fits, down to two full-size
    /// packets), so that nothing is allocated that cannot be had; then,
    /// should the allocation still fail (another process took the space
    /// meanwhile), halved again. The rest of the ring is allocated as it
    /// grows (`grow.rs`). `None` when not even the smallest ring fits.
    fn size_segment(fd: RawFd, cfg: &ShmConfig) -> Option<Shape> {
        let seal = random_u64() | 1 << 63;
        let whole = Shape::new(cfg.slots, cfg.mtu, seal);
        // SAFETY: sizing the descriptor we created (no memory allocated).
        if unsafe { libc::ftruncate(fd, whole.total() as libc::off_t) } != 0 {
            return None;
        }
        let mut slots = fitting_slots(cfg.start_slots.min(cfg.slots), cfg.mtu, free_shm_bytes())?;
        loop {
            let shape = whole.starting(slots);
            let (mr, mr_len) = (shape.mr_off() as libc::off_t, (shape.total() - shape.mr_off()) as libc::off_t);
            // SAFETY: allocating parts of the descriptor we created.
            let ok = unsafe {
                libc::posix_fallocate(fd, 0, (HDR_LEN + shape.ring) as libc::off_t) == 0
                    && libc::posix_fallocate(fd, mr, mr_len) == 0
            };
            if ok {
                return Some(shape);
            }
            let smaller = whole.starting(slots / 2);
            if smaller.ring == shape.ring {
                return None;
            }
            slots /= 2;
        }
    }

    fn create(cfg: &ShmConfig, name: &str, epid: u32) -> Result<ShmDevice, Status> {
        let c = cstr(&format!("/{name}"));
        // SAFETY: valid name; exclusive creation.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) };
        if fd < 0 {
            return Err(if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                Status::Busy
            } else {
                Status::Io
            });
        }
        let shape = Self::size_segment(fd, cfg);
        let map = match shape {
            Some(shape) => Mapping::map_sparse(fd, shape.total()).map(|m| {
                // Page tables for what was allocated: the rest as the ring grows.
                m.populate(0, HDR_LEN + shape.ring);
                m.populate(shape.mr_off(), shape.total() - shape.mr_off());
                (m, shape)
            }),
            None => Err(Status::NoMem),
        };
        let (map, shape) = match map {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: closing our descriptor.
                unsafe { libc::close(fd) };
                unlink_segment(name);
                return Err(e);
            }
        };
        // Kept to allocate the ring's growth (`grow.rs`); closed with it.
        let grow = grow::Growth::new(fd, shape.ring, shape.cap);
        let pid = std::process::id();
        let connid = random_u64() as u32;
        let set32 = |o, v| map.u32_at(o).store(v, Ordering::Relaxed);
        set32(off::VERSION, LAYOUT_VERSION);
        set32(off::RING_SHIFT, shape.cap.trailing_zeros());
        map.u64_at(off::TAIL).store(shape.shrink_bits(), Ordering::Relaxed);
        set32(off::MTU, cfg.mtu);
        set32(off::PID, pid);
        set32(off::EPID, epid);
        set32(off::CONNID, connid);
        map.u64_at(off::START).store(start_time(pid).unwrap_or(0), Ordering::Relaxed);
        map.u64_at(off::SEAL).store(shape.seal, Ordering::Relaxed);
        // The FIFO for wake-ups.
        let fpath = cstr(&fifo_path(name));
        // Opened for reading and writing: the owner then always holds a
        // writer, so the read end never reports POLLHUP when a peer that
        // woke it closes its own writer (a read-only end would poll ready
        // forever after the first such peer, spinning every poll/epoll
        // loop and `rdm4_wait`). Linux opens a FIFO O_RDWR without blocking.
        // SAFETY: valid path; a leftover FIFO of a dead owner is replaced.
        let fifo = unsafe {
            libc::unlink(fpath.as_ptr());
            libc::mkfifo(fpath.as_ptr(), 0o600);
            libc::open(fpath.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
        };
        if fifo < 0 {
            unlink_segment(name);
            return Err(Status::Io);
        }
        map.u64_at(off::MAGIC).store(MAGIC, Ordering::Release);
        Ok(ShmDevice {
            map,
            shape,
            name: name.to_string(),
            fifo,
            epid,
            connid,
            gid: host_gid(),
            head: 0,
            cma: cfg.cma && cma_works(),
            cfg: cfg.clone(),
            peers: Vec::new(),
            by_id: FxHashMap::default(),
            last_from: None,
            events: Vec::new(),
            mrs: FxHashMap::default(),
            mrs_closing: Vec::new(),
            allocs: FxHashMap::default(),
            shared_fds: FxHashMap::default(),
            peer_maps: alloc::PeerMaps::default(),
            ring: ringrma::RingRdma::default(),
            mapped_copies: 0,
            last_check: coarse_now(),
            fd_mode: false,
            keys: Vec::new(),
            polls: 0,
            streaming: false,
            trail: grow::trail(cfg, shape.ring),
            held: 0,
            more: false,
            lag: grow::lag(cfg, shape.ring),
            lag_state: lag::Lag::default(),
            vanished: false,
            control: false,
            parked: std::collections::VecDeque::new(),
            redeliver: false,
            dead_claims: claims::DeadClaims::default(),
            grow,
            crowd: super::crowd::Crowd::default(),
            far_epoch: 0,
            help: Default::default(),
            lost_peers: 0,
        })
    }

    /// Ends the endpoint as peers see a process that dies without closing:
    /// marked closing for their next peer check, but with no close notice
    /// and no closed tail (for tests of that check).
    #[doc(hidden)]
    pub fn vanish(mut self) {
        self.map.u32_at(off::CLOSING).store(1, Ordering::Release);
        self.vanished = true;
    }

    /// This endpoint's id (its `qpn`).
    pub fn epid(&self) -> u32 {
        self.epid
    }

    /// The segment's name under `/dev/shm`.
    pub fn segment_name(&self) -> &str {
        &self.name
    }
}

impl Drop for ShmDevice {
    fn drop(&mut self) {
        if self.vanished {
            unlink_segment(&self.name);
            // SAFETY: closing descriptors we own.
            unsafe { libc::close(self.fifo) };
            return;
        }
        let (asked, helped, given) = self.help_stats();
        if asked + given > 0 {
            crate::log::log!(
                crate::log::INFO,
                "shm: two-handed reads: {asked} asked, {helped} chunks copied by owners, {given} copied for readers"
            );
        }
        // No peer reads or writes the application's registered memory once
        // this returns (their accesses under way end first).
        self.withdraw_all();
        // From here on no producer claims an entry: sends to this endpoint
        // fail at once (`claim`).
        self.map.hdr_u64::<{ off::TAIL }>().fetch_or(segment::CLOSED, Ordering::AcqRel);
        self.release_all();
        self.map.u32_at(off::CLOSING).store(1, Ordering::Release);
        // Tell the peers it knows, after its last packet to each: they
        // fail their operations towards it at their next poll. A peer
        // whose ring is full learns it at its next send or peer check.
        let ids = (self.epid, self.connid);
        let need = entry_len(0);
        let note = self.map.hdr_u64::<{ off::NOTE }>();
        for p in self.peers.iter_mut().flatten().filter(|p| !p.lost) {
            p.full_skip = 0;
            if let Ok(pos) = claim_entry(p, need, true, ids, note) {
                Self::publish_notice(p, pos, ids, need, segment::CLOSE_NOTICE, note);
            }
        }
        unlink_segment(&self.name);
        // SAFETY: closing descriptors we own.
        unsafe {
            libc::close(self.fifo);
            for p in self.peers.iter().flatten() {
                if let Some(fd) = p.fifo {
                    libc::close(fd);
                }
            }
        }
    }
}
