//! The descriptor the application sleeps on (`rdm4_ep_fd`): an epoll set
//! of the device's socket and a timer.

use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// How far ahead the application's timer fires while the device is busy.
pub(super) const APP_TICK: Duration = Duration::from_millis(1);

/// The descriptor the application sleeps on ([`Device::wait_fd`]): an
/// epoll set of the socket and a timer, so that it also becomes readable
/// when a retransmission or an acknowledgement is due and nothing arrives
/// (a sleeper woken only by packets would wait forever for a lost one).
pub(super) struct AppFd {
    pub(super) epoll: std::os::fd::OwnedFd,
    pub(super) timer: std::os::fd::OwnedFd,
    /// When the timer fires (`None`: disarmed).
    pub(super) armed: Option<Instant>,
}

impl AppFd {
    /// The epoll set of the timer alone: the socket joins it when the
    /// application asks for the descriptor ([`AppFd::watch`]), since a
    /// socket in an epoll set costs every arriving datagram a wake-up call.
    pub(super) fn new() -> Option<AppFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain system calls; each descriptor is owned at once.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if ep < 0 {
                return None;
            }
            let epoll = std::os::fd::OwnedFd::from_raw_fd(ep);
            let t = libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC);
            if t < 0 {
                return None;
            }
            let timer = std::os::fd::OwnedFd::from_raw_fd(t);
            let a = AppFd { epoll, timer, armed: None };
            a.add(t).then_some(a)
        }
    }

    /// Adds `fd` to the epoll set; false when the kernel refuses.
    pub(super) fn add(&self, fd: RawFd) -> bool {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: our epoll descriptor, a valid event.
        unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) == 0 }
    }

    /// Arms the timer `after` from now (zero: disarms it, and clears a
    /// fired one).
    pub(super) fn set(&self, after: Duration) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: after.as_secs() as libc::time_t, tv_nsec: after.subsec_nanos() as _ },
        };
        // SAFETY: our timer descriptor and a valid itimerspec.
        unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }
}
