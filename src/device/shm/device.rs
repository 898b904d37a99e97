//! The shm device's side of the device contract ([`Device`]).

use super::*;
use crate::device::{InCall, Lacks, Mapped, MoreFollows, Sleep};

impl Device for ShmDevice {
    type Sleep = Self;
    type Responder = Lacks;
    type MoreFollows = Self;
    type Doorbell = Lacks;
    type Mapped = Self;
    type InCall = Self;

    fn caps(&self) -> Caps {
        let caps = Caps {
            mtu: self.shape.mtu,
            max_rdma_size: if self.cma { 1 << 30 } else { 0 },
            rdma_read: self.cma,
            rdma_write: self.cma,
            rdma_write_imm: self.cma,
            sync_send: true,
            gather_in_place: false, // the ring is written: the payload is copied anyway
            longread_min: self.cfg.longread_min,
            runt: true,
        };
        self.crowd.apply(&self.cfg, caps)
    }

    /// [`Self::caps`], with long-read from `far_longread_min` and no runt
    /// towards a peer found far (`far.rs`).
    fn peer_caps(&self, ah: Ah) -> Caps {
        let mut caps = self.caps();
        let far = self.cfg.far_ns == Some(0)
            || self.peers.get(ah as usize).and_then(Option::as_ref).is_some_and(|p| p.placement.far());
        if far && caps.rdma_read && self.cfg.far_longread_min < caps.longread_min {
            caps.longread_min = self.cfg.far_longread_min;
            caps.runt = false;
        }
        caps
    }

    fn caps_epoch(&self) -> u32 {
        self.crowd.epoch().wrapping_add(self.far_epoch)
    }

    fn local_addr(&self) -> RawAddr {
        self.raw_of(self.epid, self.connid)
    }

    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status> {
        if addr.gid != self.gid {
            return Err(Status::NoAddr); // another host: not reachable by shared memory
        }
        let key = (u32::from(addr.qpn()), addr.connid());
        if let Some(&ah) = self.by_id.get(&key) {
            return Ok(ah);
        }
        let name = seg_name(&self.cfg.prefix, key.0);
        let (map, shape) = open_existing(&name)?;
        if map.u32_at(off::CONNID).load(Ordering::Relaxed) != key.1 {
            return Err(Status::NoAddr); // that endpoint id belongs to another process now
        }
        if shape.mtu < self.shape.mtu {
            return Err(Status::NotSup);
        }
        let pid = map.u32_at(off::PID).load(Ordering::Relaxed);
        let start = map.u64_at(off::START).load(Ordering::Relaxed);
        let ah = self.peers.len() as Ah;
        self.peers.push(Some(Peer {
            map,
            shape,
            epid: key.0,
            connid: key.1,
            pid,
            start,
            lost: false,
            fifo: None,
            head_seen: 0,
            full_skip: 0,
            full_wait: 0,
            placement: far::Placement::default(),
            ring_off_until: 0,
            ring_head: (0, 0),
            ring_pending: 0,
            name,
        }));
        self.by_id.insert(key, ah);
        self.last_from = None;
        self.crowd.peers(self.others());
        Ok(ah)
    }

    fn remove(&mut self, ah: Ah) {
        if let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::take) {
            if p.lost {
                self.lost_peers = self.lost_peers.saturating_sub(1);
            }
            self.by_id.remove(&(p.epid, p.connid));
            self.last_from = None;
            self.crowd.peers(self.others());
            self.peer_maps.forget_peer(ah);
            self.ring_rdma_forget(ah);
            if let Some(fd) = p.fifo {
                // SAFETY: closing a descriptor we own.
                unsafe { libc::close(fd) };
            }
        }
    }

    #[inline]
    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        self.send_with_inline(ah, wr_id, max_len, build)
    }

    #[inline]
    fn recv<R: Flow>(&mut self, max: usize, mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        if !self.help.pending.is_empty() {
            self.help_pending();
        }
        let mut n = 0;
        if self.redeliver {
            n = self.recv_parked(max, &mut f);
            if n == max {
                return n;
            }
        }
        // The common empty poll stays small: two loads (the lag's flag, the
        // ring's head entry), no register spills.
        if max == 0 || self.holding() {
            return n;
        }
        if !self.ready() {
            if self.fd_mode {
                self.drain_fifo_kept();
            }
            return n;
        }
        n + self.recv_batch(max - n, f)
    }

    fn control_next(&mut self) {
        self.control = true;
    }

    fn redeliver(&mut self) {
        self.redeliver = !self.parked.is_empty();
    }

    #[inline(always)]
    fn events(&mut self, out: &mut Vec<DevEvent>) {
        self.check_peers();
        if self.ring.busy() {
            self.ring_rdma_progress();
        }
        if !self.events.is_empty() {
            out.append(&mut self.events);
        }
    }

    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        self.table_reg(buf, access)
    }

    fn dereg(&mut self, key: u64) -> Result<(), Status> {
        self.table_dereg(key)?;
        self.unshare(key);
        Ok(())
    }

    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.rdma(ah, local, remote_addr, key, wr_id, false)
    }

    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.rdma(ah, local, remote_addr, key, wr_id, true)
    }

    fn rdma_write_imm(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        imm: u32,
        wr_id: u64,
    ) -> Result<(), DevError> {
        self.write_imm(ah, local, (remote_addr, key), imm, wr_id)
    }
    /// The payload is copied into the ring past the caches when the
    /// receiver is far (`far.rs`).
    fn send_gather(
        &mut self,
        ah: Ah,
        wr_id: u64,
        hdr_max: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
        payload: UserBuf,
    ) -> Result<Sent, DevError> {
        let nt = self.gather_nt(ah, payload.len());
        crate::device::copy_gather(self, ah, wr_id, hdr_max, &mut build, payload, nt)
    }

    crate::has_extensions!(as_sleep, as_sleeper, as_more_follows, as_mapped, as_in_call, as_in_call_ref);
}

impl ShmDevice {
    /// [`Device::send_with`], always inlined: the auto device calls it
    /// behind its dispatch, where the optimiser would keep a call.
    #[inline(always)]
    pub(crate) fn send_with_inline(
        &mut self,
        ah: Ah,
        _wr_id: u64,
        max_len: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        if max_len >= far::PROBE_MIN {
            self.probe_medium(ah, max_len);
        }
        let (me, connid) = (self.epid, self.connid);
        // The peer's MTU is at least ours (checked at insert).
        let cap = max_len.min(self.shape.mtu);
        let need = entry_len(cap);
        let streaming = std::mem::replace(&mut self.streaming, true);
        let more = std::mem::take(&mut self.more);
        let control = self.control;
        self.control = false;
        let p = peer_of(&mut self.peers, ah)?;
        let ids = (me, connid);
        let note = self.map.hdr_u64::<{ off::NOTE }>();
        let pos = match claim_entry(p, need, control, ids, note) {
            Ok(pos) => pos,
            Err(e) => return Err(self.claim_failed(ah, e)),
        };
        // SAFETY: in bounds (see `claim`).
        let entry = unsafe { p.map.ptr_at(HDR_LEN + p.shape.at(pos)) };
        // SAFETY: the claimed entry's packet bytes (`SLOT_HDR + cap <=
        // need`), in bounds as above and ours until published.
        let slot = unsafe { std::slice::from_raw_parts_mut(entry.add(SLOT_HDR), cap) };
        let len = build(slot).min(cap);
        publish(&p.shape, entry, pos, ids, len, need as u32 | if more { segment::MORE } else { 0 });
        unnote(note);
        // In a stream of sends the next entry most likely starts where this
        // one ends: ask for its first line in exclusive state now, so that
        // the next send does not wait for it. Not after a receive: in a
        // ping-pong the owner reads that line right after this entry, to
        // see whether more came, and taking it away then puts a cross-core
        // transfer into every round trip (docs/performance.md, "Other
        // prefetches").
        if streaming {
            prefetch_pos::<true>(&p.map, &p.shape, pos + need as u64);
        }
        producer_fence();
        if p.map.hdr_u32::<{ off::SLEEPING }>().load(Ordering::SeqCst) != 0 {
            Self::wake(p);
        }
        Ok(Sent::Done)
    }
}

impl ShmDevice {
    /// Whether a gathered payload of `len` bytes for `ah` goes into the
    /// ring with non-temporal stores (the receiver is far, `far.rs`).
    pub(super) fn gather_nt(&mut self, ah: Ah, len: usize) -> bool {
        let (limit, more) = (self.cfg.far_ns, self.more);
        let Ok(p) = self.peer(ah) else { return false };
        let ring = far::Ring { head: p.map.u64_at(off::HEAD), tail: p.map.u64_at(off::TAIL), len: p.shape.ring };
        let was = p.placement.far();
        let nt = p.placement.nt(limit, len, ring, &mut p.head_seen, more);
        if p.placement.far() != was {
            // The peer's long-read size changes (`peer_caps`).
            self.far_epoch = self.far_epoch.wrapping_add(1);
        }
        nt
    }
}

impl ShmDevice {
    /// A packet of `len` bytes built into `ah`'s ring: medium packets time
    /// the peer's distance too (`far.rs`), built through the caches
    /// whatever it says.
    #[cold]
    #[inline(never)]
    fn probe_medium(&mut self, ah: Ah, len: usize) {
        self.gather_nt(ah, len.min(far::NT_MIN - 1));
    }
}

impl Sleep for ShmDevice {
    fn wait_fd(&mut self) -> Option<RawFd> {
        // From now on producers always signal the FIFO, and receiving drains it.
        self.fd_mode = true;
        self.map.u32_at(off::SLEEPING).store(1, Ordering::SeqCst);
        sleeper_fence();
        // Wake-ups written while it was not handed out may be stale.
        self.drain_fifo_kept();
        Some(self.fifo)
    }

    fn wait(&mut self, timeout_ms: i32) -> bool {
        ShmDevice::wait(self, timeout_ms)
    }

    fn trywait(&mut self) -> bool {
        !self.ready() && (!self.redeliver || self.parked.is_empty())
    }

    fn sleep_begin(&mut self) -> Option<(RawFd, i32)> {
        let ms = self.cfg.peer_check.as_millis().clamp(1, i32::MAX as u128) as i32;
        self.arm().then_some((self.fifo, ms))
    }

    fn sleep_end(&mut self) {
        if self.fd_mode {
            // The application's descriptor must stay readable for a packet
            // that still waits.
            self.drain_fifo_kept();
        } else {
            self.map.u32_at(off::SLEEPING).store(0, Ordering::SeqCst);
            self.drain_fifo();
        }
    }

    fn wake_sleeper(&self) {
        self.wake_own();
    }
}

impl MoreFollows for ShmDevice {
    fn backlog_min(&self) -> u64 {
        // Four trails of stream: a shorter one ends before the trail pays.
        4 * self.trail
    }

    fn more_follows(&mut self, more: bool) {
        self.more = more;
    }
}

impl Mapped for ShmDevice {
    fn alloc(&mut self, len: usize, access: Access) -> Result<(UserBuf, u64), Status> {
        self.alloc_shared(len, access)
    }

    fn free(&mut self, key: u64) -> Result<(), Status> {
        self.free_shared(key)
    }

    fn reg_shared(&mut self, buf: UserBuf, fd: RawFd, offset: u64, access: Access) -> Result<u64, Status> {
        self.reg_shared(buf, fd, offset, access)
    }

    fn atomic(&mut self, ah: Ah, remote_addr: u64, key: u64, a: &crate::device::RemoteAtomic) -> Result<(), DevError> {
        self.atomic_mapped(ah, remote_addr, key, a)
    }
}

impl InCall for ShmDevice {
    fn any_peer(&self) -> bool {
        self.cma
    }

    fn rdma_now(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, write: bool) -> Result<(), DevError> {
        self.rdma_direct(ah, local, (remote_addr, key), write, false)
    }

    fn rdma_in_call(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<(), DevError> {
        self.rdma_direct(ah, local, (remote_addr, key), write, true)
    }

    /// The steps of `recv_batch` for the usual packets only: whole,
    /// from the last sender. It stops before any other packet (left for
    /// `recv`). Every 64th packet it runs the periodic peer check, as
    /// [`Device::events`] does, and stops if that found a peer gone (the
    /// event is then handled by the general path): a receiver kept busy by
    /// this path alone still notices closed peers.
    #[inline(always)]
    fn recv_express(&mut self, max: usize, mut f: impl FnMut(Ah, &[u8]) -> bool) -> (usize, bool) {
        let Some((last, Some(ah))) = self.last_from else { return (0, true) };
        if !self.events.is_empty() || !self.help.pending.is_empty() {
            return (0, true);
        }
        let answering = self.streaming;
        // Behind a fast one-way stream, only what lies `lag` behind its
        // tail, or nothing for a while (`lag.rs`).
        let Some(lag_max) = self.lag_limit(answering) else { return (0, false) };
        let cap = max.min(lag_max);
        let mut n = 0;
        let more = loop {
            let at = self.shape.at(self.head);
            let e = HDR_LEN + at;
            // SAFETY: as in `recv_batch`.
            let h = unsafe { self.map.entry_at(e) };
            if h.seal.load(Ordering::Acquire) != self.shape.sealed(self.head) {
                break false;
            }
            // A poll stopped by the lag says that no more waits: the
            // general path would take the rest.
            if n == cap {
                break cap == max;
            }
            let (len, span, more) = h.sizes();
            let whole = !more && self.shape.span_fits(at, span) && self.shape.holds(len, span);
            if !whole || segment::halves(h.ids.load(Ordering::Relaxed)) != last {
                break true;
            }
            // As in `recv_batch`: the next entry's line after a poll's first packet only.
            if n == 0 {
                prefetch_pos::<false>(&self.map, &self.shape, self.head + span as u64);
            }
            // SAFETY: `SLOT_HDR + len <= span <= ring - at`, as in `recv_batch`.
            if !f(ah, unsafe { self.map.bytes(e + SLOT_HDR, len) }) {
                break true;
            }
            let lines = reply_lines(answering, n == 0, span);
            if lines > 0 {
                self.prefetch_reply(Some(ah), lines);
            }
            self.head += span as u64;
            n += 1;
            // Each packet counts as a poll for the periodic peer check.
            if self.check_peers() && !self.events.is_empty() {
                break true;
            }
        };
        if n > 0 {
            if !answering {
                self.count_run(n);
            }
            self.taken();
        } else if !more && self.fd_mode {
            self.drain_fifo_kept();
        }
        (n, more)
    }
}
