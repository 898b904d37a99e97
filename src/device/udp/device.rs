//! The udp device's side of the device contract ([`Device`]) and its
//! extensions: sleeping on a descriptor, the responder, the doorbell.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use super::appfd::AppFd;
use super::dgram::{Kind, HDR};
use super::{random_u64, raw_of, socket_of, UdpDevice, AWAITED_FOR};
use crate::device::{Access, Ah, Caps, DevError, DevEvent, Device, Flow, Sent};
use crate::device::{Doorbell, Lacks, Responder, Sleep};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

impl Device for UdpDevice {
    type Sleep = Self;
    type Responder = Self;
    type MoreFollows = Lacks;
    type Doorbell = Self;
    type Mapped = Lacks;
    type InCall = Lacks;

    fn caps(&self) -> Caps {
        Caps {
            mtu: self.mtu,
            max_rdma_size: if self.cfg.rdma { 1 << 30 } else { 0 },
            rdma_read: self.cfg.rdma,
            rdma_write: self.cfg.rdma,
            rdma_write_imm: self.cfg.rdma,
            sync_send: false,
            gather_in_place: false,
            longread_min: usize::MAX,
            runt: true,
        }
    }

    fn local_addr(&self) -> RawAddr {
        raw_of(self.local, self.connid)
    }

    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status> {
        let to = socket_of(addr);
        if to.is_ipv4() != self.local.is_ipv4() || to.port() == 0 || to.ip().is_unspecified() {
            return Err(Status::NoAddr);
        }
        let idx = match self.by_addr.get(&(to, addr.connid())) {
            Some(&i) => {
                if !self.peers[i].inserted {
                    self.strangers = self.strangers.saturating_sub(1);
                }
                i
            }
            None => self.new_peer(to, addr.connid()),
        };
        self.peers[idx].inserted = true;
        Ok(idx as Ah)
    }

    fn remove(&mut self, ah: Ah) {
        if let Some(p) = self.peers.get_mut(ah as usize) {
            p.inserted = false;
        }
    }

    fn control_next(&mut self) {
        self.control = true;
    }

    fn awaiting(&mut self, ah: Ah) {
        if let Some(p) = self.peers.get_mut(ah as usize) {
            p.awaited_until = Some(Instant::now() + AWAITED_FOR);
            p.awaited_in = self.asked;
            self.note_watch(ah as usize);
        }
    }

    fn redeliver(&mut self) {
        self.redeliver = !self.parked.is_empty();
    }

    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        let control = std::mem::take(&mut self.control);
        let idx = ah as usize;
        let p = self.peers.get(idx).ok_or(DevError::Failed(Status::NoAddr))?;
        if p.lost {
            return Err(DevError::Failed(Status::PeerUnreachable));
        }
        let cap = max_len.min(self.mtu);
        let now = Instant::now();
        if (!control && p.held) || !p.window_open(HDR + cap, now) {
            return Err(DevError::Again);
        }
        let mut d = self.take_buf(HDR + cap);
        let len = build(&mut d[HDR..HDR + cap]).min(cap);
        if len == 0 {
            self.pool.push(d);
            return Ok(Sent::Done);
        }
        self.send_reliable(idx, Kind::Data, d, HDR + len, wr_id, now);
        Ok(if wr_id == 0 { Sent::Done } else { Sent::Pending })
    }

    fn recv<R: Flow>(&mut self, max: usize, mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        let now = Instant::now();
        self.tx_flush(); // a caller that did not ring the doorbell
        let mut n = 0;
        if self.redeliver {
            n = self.recv_parked(max, &mut f);
        }
        if !self.kept.is_empty() {
            n += self.recv_kept(max - n, &mut f);
        }
        n += self.take_socket(max - n, now, &mut f);
        // The timers after the socket: what arrived while this process did
        // not run (descheduled, asleep) counts before a timeout fires,
        // which would otherwise resend what the peer acknowledged, or give
        // up a peer whose datagrams wait here. (They send the
        // acknowledgements due, too.)
        self.timers(now);
        if self.rxb.has_pending() && self.app_fd.is_some() {
            // What waits here keeps the application's fd readable.
            self.wake_sleeper();
        }
        self.pump(now);
        self.timers_done = true;
        self.arm_app_timer(now);
        n
    }

    fn events(&mut self, out: &mut Vec<DevEvent>) {
        // A progress call's `recv` has just done the timers and the RDMA
        // work; a call of `events` alone does them here.
        if !std::mem::take(&mut self.timers_done) {
            let now = Instant::now();
            self.timers(now);
            self.pump(now);
            self.arm_app_timer(now);
        }
        if !self.events.is_empty() {
            out.append(&mut self.events);
        }
        self.tx_flush();
    }

    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        let mut key = random_u64();
        while key == 0 || self.rdma.regs.contains_key(&key) {
            key = random_u64();
        }
        self.rdma.regs.insert(key, (buf, access));
        Ok(key)
    }

    fn dereg(&mut self, key: u64) -> Result<(), Status> {
        self.rdma.regs.remove(&key).ok_or(Status::Inval)?;
        // Reads being served from it stop now: nothing of it is read after this.
        let now = Instant::now();
        for (idx, op) in self.rdma.drop_serves_of(key) {
            self.send_done(idx, op, Status::RemoteAccess.code(), now);
        }
        Ok(())
    }

    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.rdma_start(ah, local, remote_addr, key, wr_id, None)
    }

    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.rdma_start(ah, local, remote_addr, key, wr_id, Some(None))
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
        self.rdma_start(ah, local, remote_addr, key, wr_id, Some(Some(imm)))
    }

    crate::has_extensions!(as_sleep, as_sleeper, as_responder, as_doorbell);
}

impl Sleep for UdpDevice {
    fn wait_fd(&mut self) -> Option<RawFd> {
        if self.app_fd.is_none() {
            let sock = self.sock.as_raw_fd();
            self.app_fd = self.spare_fd.take().or_else(AppFd::new).filter(|a| a.add(sock));
            self.arm_app_timer(Instant::now());
        }
        self.app_fd.as_ref().map(|a| a.epoll.as_raw_fd())
    }

    fn wait(&mut self, timeout_ms: i32) -> bool {
        self.block(timeout_ms)
    }

    fn trywait(&mut self) -> bool {
        self.tx_flush();
        if self.app_fd.is_some() {
            self.arm_app_timer(Instant::now());
        }
        !self.rxb.has_pending() && !self.redeliver && self.kept.is_empty()
    }

    fn sleep_begin(&mut self) -> Option<(RawFd, i32)> {
        self.tx_flush();
        let ms = if self.rxb.has_pending() || !self.kept.is_empty() { 0 } else { self.timer_ms() };
        Some((self.sock.as_raw_fd(), ms))
    }

    fn wake_sleeper(&self) {
        // A datagram to ourselves (not a valid header: dropped as malformed).
        let _ = self.sock.send_to(&[0u8], self.local);
    }
}

impl Responder for UdpDevice {
    fn respond(&mut self) -> (RawFd, i32) {
        self.respond_now()
    }

    fn responder_fds(&self) -> Vec<RawFd> {
        let mut fds = vec![self.sock.as_raw_fd()];
        for a in self.app_fd.iter().chain(&self.spare_fd) {
            fds.extend([a.epoll.as_raw_fd(), a.timer.as_raw_fd()]);
        }
        fds
    }
}

impl Doorbell for UdpDevice {
    fn doorbell(&mut self) {
        self.tx_flush();
        if self.app_fd.is_some() {
            // What was just sent is awaited: the sleeper's timer runs.
            self.arm_app_timer(Instant::now());
        }
    }
}
