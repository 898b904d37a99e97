//! The auto device's extensions: each forwards to the device that has it
//! (udp: the responder and the doorbell; shm: hints, mapped memory and
//! in-call operations, for shm peers), and sleeping waits on both.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{via, AutoDevice, Via};
use crate::device::shm::ShmDevice;
use crate::device::{Access, Ah, DevError, Device, Doorbell, InCall, Mapped, MoreFollows, Responder, Sleep};
use crate::mem::UserBuf;
use crate::status::Status;

/// The epoll sets that wait on both devices: one for the progress
/// thread's sleep, one for the application's descriptor.
#[derive(Debug, Default)]
pub(super) struct SleepSet {
    /// For `sleep_begin`, and the descriptors in it.
    sleep: Option<(OwnedFd, Vec<RawFd>)>,
    /// For `wait_fd`, and the descriptors in it.
    app: Option<(OwnedFd, Vec<RawFd>)>,
}

/// Adds `fds` (level-triggered, readable) to the epoll set in `set`,
/// made at the first call; its descriptor.
fn watch(set: &mut Option<(OwnedFd, Vec<RawFd>)>, fds: &[RawFd]) -> Option<RawFd> {
    if set.is_none() {
        // SAFETY: plain syscall; the result is checked before it is owned.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return None;
        }
        // SAFETY: a descriptor just created and owned by nobody else.
        *set = Some((unsafe { OwnedFd::from_raw_fd(ep) }, Vec::new()));
    }
    let (ep, known) = set.as_mut()?;
    for &fd in fds {
        if known.contains(&fd) {
            continue;
        }
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: both descriptors are open; `ev` lives through the call.
        if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } == 0 {
            known.push(fd);
        }
    }
    Some(ep.as_raw_fd())
}

/// Waits until `fd` is readable or `timeout_ms` pass (-1: for ever).
fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
}

impl Sleep for AutoDevice {
    fn wait_fd(&mut self) -> Option<RawFd> {
        let fds: Vec<RawFd> = [self.shm.as_mut().and_then(Sleep::wait_fd), self.udp.as_mut().and_then(Sleep::wait_fd)]
            .into_iter()
            .flatten()
            .collect();
        watch(&mut self.sleep.app, &fds)
    }

    fn wait(&mut self, timeout_ms: i32) -> bool {
        if !self.trywait() {
            return true;
        }
        self.wait_fd().is_some_and(|fd| readable(fd, timeout_ms))
    }

    fn trywait(&mut self) -> bool {
        let s = self.shm.as_mut().is_none_or(Sleep::trywait);
        let u = self.udp.as_mut().is_none_or(Sleep::trywait);
        s && u
    }

    fn sleep_begin(&mut self) -> Option<(RawFd, i32)> {
        let mut fds = Vec::new();
        let mut ms = -1i32;
        let mut min = |t: i32| {
            ms = if ms < 0 {
                t
            } else if t < 0 {
                ms
            } else {
                ms.min(t)
            }
        };
        if let Some(s) = self.shm.as_mut() {
            let (fd, t) = s.sleep_begin()?;
            fds.push(fd);
            min(t);
        }
        if let Some(u) = self.udp.as_mut() {
            match u.sleep_begin() {
                Some((fd, t)) => {
                    fds.push(fd);
                    min(t);
                }
                None => {
                    if let Some(s) = self.shm.as_mut() {
                        s.sleep_end();
                    }
                    return None;
                }
            }
        }
        watch(&mut self.sleep.sleep, &fds).map(|fd| (fd, ms))
    }

    fn sleep_end(&mut self) {
        if let Some(s) = self.shm.as_mut() {
            s.sleep_end();
        }
        if let Some(u) = self.udp.as_mut() {
            u.sleep_end();
            // What woke it may be udp's: the next receive looks.
            self.udp_pending = true;
        }
    }

    fn wake_sleeper(&self) {
        if let Some(s) = self.shm.as_ref() {
            s.wake_sleeper();
        }
        if let Some(u) = self.udp.as_ref() {
            u.wake_sleeper();
        }
    }
}

impl Responder for AutoDevice {
    fn respond(&mut self) -> (RawFd, i32) {
        match self.udp.as_mut() {
            Some(u) => u.respond(),
            None => (-1, -1),
        }
    }

    fn responder_fds(&self) -> Vec<RawFd> {
        self.udp.as_ref().map(Responder::responder_fds).unwrap_or_default()
    }

    /// Udp's: the responder holds udp alone, never shm or the engine.
    fn away(&self) -> Option<std::sync::Arc<dyn crate::device::away::AwayWork>> {
        self.udp.as_ref().and_then(Responder::away)
    }
}

impl MoreFollows for AutoDevice {
    fn backlog_min(&self) -> u64 {
        self.shm.as_ref().map_or(0, MoreFollows::backlog_min)
    }

    fn more_follows(&mut self, more: bool) {
        if let Some(s) = self.shm.as_mut() {
            s.more_follows(more);
        }
    }
}

impl Doorbell for AutoDevice {
    #[inline(always)]
    fn doorbell(&mut self) {
        if self.udp_rung {
            self.udp_rung = false;
            if let Some(u) = self.udp.as_mut() {
                u.doorbell();
            }
        }
    }
}

impl Mapped for AutoDevice {
    /// Memory peers of this host map; registered with udp under the same
    /// key, so that remote peers reach it too.
    fn alloc(&mut self, len: usize, access: Access) -> Result<(UserBuf, u64), Status> {
        let s = self.shm.as_mut().ok_or(Status::NotSup)?;
        let (buf, key) = s.alloc(len, access)?;
        if let Some(u) = self.udp.as_mut() {
            if let Err(e) = u.with_mut(|u| u.reg_as(buf, access, key)) {
                let _ = s.free(key);
                return Err(e);
            }
        }
        Ok((buf, key))
    }

    fn free(&mut self, key: u64) -> Result<(), Status> {
        if let Some(u) = self.udp.as_mut() {
            let _ = u.dereg(key);
        }
        self.shm.as_mut().ok_or(Status::Inval)?.free(key)
    }

    fn reg_shared(&mut self, buf: UserBuf, fd: RawFd, offset: u64, access: Access) -> Result<u64, Status> {
        let s = self.shm.as_mut().ok_or(Status::NotSup)?;
        let key = s.reg_shared(buf, fd, offset, access)?;
        if let Some(u) = self.udp.as_mut() {
            if let Err(e) = u.with_mut(|u| u.reg_as(buf, access, key)) {
                let _ = s.dereg(key);
                return Err(e);
            }
        }
        Ok(key)
    }

    fn atomic(&mut self, ah: Ah, remote_addr: u64, key: u64, a: &crate::device::RemoteAtomic) -> Result<(), DevError> {
        // A remote peer's memory: `NotSup`, the emulated protocol.
        let (s, ah) = self.shm_peer(ah)?;
        s.atomic(ah, remote_addr, key, a)
    }
}

impl AutoDevice {
    /// Shm and its handle of a peer it reaches; `NotSup` for a udp peer
    /// (whose memory the engine reaches by the emulated protocol).
    fn shm_peer(&mut self, ah: Ah) -> Result<(&mut ShmDevice, Ah), DevError> {
        match (via(ah), self.shm.as_mut()) {
            (Via::Shm(a), Some(s)) => Ok((s, a)),
            _ => Err(DevError::Failed(Status::NotSup)),
        }
    }
}

impl InCall for AutoDevice {
    fn any_peer(&self) -> bool {
        // Shm peers' memory is reached in the call; for udp peers the
        // in-call operations answer `NotSup` and the engine posts them.
        self.shm.as_ref().is_some_and(InCall::any_peer)
    }

    fn rdma_now(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, write: bool) -> Result<(), DevError> {
        let (s, ah) = self.shm_peer(ah)?;
        s.rdma_now(ah, local, remote_addr, key, write)
    }

    fn rdma_in_call(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<(), DevError> {
        let (s, ah) = self.shm_peer(ah)?;
        s.rdma_in_call(ah, local, remote_addr, key, write)
    }

    #[inline(always)]
    fn recv_express(&mut self, max: usize, f: impl FnMut(Ah, &[u8]) -> bool) -> (usize, bool) {
        match self.shm.as_mut() {
            // Shm handles are the engine's (no bit to add). Udp's packets
            // go by the general receive: "more may wait" while it is open.
            Some(s) => {
                let (n, more) = s.recv_express(max, f);
                if more || self.udp.is_none() {
                    return (n, more);
                }
                // Shm seen empty: the general receive, which polls udp,
                // runs while udp is busy, else once per idle period.
                (n, self.udp_due())
            }
            None => (0, true),
        }
    }
}
