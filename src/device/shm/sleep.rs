//! Sleeping on the wake-up FIFO beside the segment. An owner that waits
//! ([`ShmDevice::wait`], or [`ShmDevice::arm`] before polling the FIFO's
//! read end, the pollable descriptor) sets the header's sleeping flag; a
//! producer that sees the flag writes one byte into the FIFO.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::barrier::sleeper_fence;
use super::segment::{cstr, fifo_path, off};
use super::{Peer, ShmDevice};

impl ShmDevice {
    /// Blocks until a packet may be waiting or `timeout_ms` passed (negative:
    /// forever). Returns true when woken (or data was already there).
    pub fn wait(&mut self, timeout_ms: i32) -> bool {
        let sleeping = self.map.u32_at(off::SLEEPING);
        sleeping.store(1, Ordering::SeqCst);
        sleeper_fence();
        if self.ready() {
            if !self.fd_mode {
                sleeping.store(0, Ordering::SeqCst);
            }
            return true;
        }
        let mut pfd = libc::pollfd { fd: self.fifo, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        self.drain_fifo();
        if !self.fd_mode {
            self.map.u32_at(off::SLEEPING).store(0, Ordering::SeqCst);
        }
        n > 0 || self.ready()
    }

    pub(super) fn drain_fifo(&self) {
        let mut sink = [0u8; 64];
        // SAFETY: reading into a local buffer from our non-blocking FIFO.
        while unsafe { libc::read(self.fifo, sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
    }

    /// In fd mode (the descriptor handed out is level-triggered): empties
    /// the FIFO, then leaves one wake-up in it if a packet waits. A wake-up
    /// whose packet a poll already took is so not left behind (the fd would
    /// poll readable with nothing to do, for ever), and one drained while
    /// its packet still waits is put back. A packet published after the
    /// check writes its own wake-up after it.
    pub(super) fn drain_fifo_kept(&self) {
        self.drain_fifo();
        if self.ready() || (self.redeliver && !self.parked.is_empty()) {
            self.wake_own();
        }
    }

    /// Writes one wake-up into this endpoint's own FIFO.
    pub(super) fn wake_own(&self) {
        // SAFETY: writing one byte from a local to our own FIFO (opened
        // read-write); a full FIFO (EAGAIN) already wakes.
        unsafe { libc::write(self.fifo, [1u8].as_ptr().cast(), 1) };
    }

    /// A descriptor that polls readable when [`ShmDevice::wait`] would wake.
    /// Set the sleeping flag with [`ShmDevice::arm`] before polling it.
    pub fn fd(&self) -> RawFd {
        self.fifo
    }

    /// Asks producers to signal the FIFO; returns false if a packet is already
    /// waiting (then do not block).
    pub fn arm(&mut self) -> bool {
        self.map.u32_at(off::SLEEPING).store(1, Ordering::SeqCst);
        sleeper_fence();
        !self.ready()
    }

    /// Signals a peer whose sleeping flag the caller saw set.
    #[cold]
    pub(super) fn wake(peer: &mut Peer) {
        if peer.fifo.is_none() {
            let p = cstr(&fifo_path(&peer.name));
            // Opened read-write (Linux keeps such a FIFO open whatever the
            // other side does): a wake-up written after its owner died
            // then neither fails with EPIPE nor raises SIGPIPE, which would
            // end the application's process; it stays in the pipe (at most
            // its 64 KiB, then EAGAIN) until the peer is dropped.
            // SAFETY: valid path.
            let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
            if fd >= 0 {
                peer.fifo = Some(fd);
            }
        }
        if let Some(fd) = peer.fifo {
            // SAFETY: writing one byte from a local; a full FIFO (EAGAIN) already wakes.
            unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
        }
    }
}
