//! Peers' liveness and progress: the periodic peer check, and the stamp
//! by which an endpoint shows its peers that it polls (`ringrma.rs` sends
//! requests only to an owner that does).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::segment::{alive, off};
use super::{Peer, ShmDevice};
use crate::device::{Ah, DevEvent};

#[cfg(doc)]
use super::ShmConfig;

/// `CLOCK_MONOTONIC` in microseconds: the same clock in every process.
pub(super) fn mono_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// A peer whose progress stamp is at most this old (µs) and that does not
/// sleep is taken to be polling (`ShmDevice::progressing`). The stamp is
/// written every 64th poll or packet, so a polling loop refreshes it every
/// few microseconds, a busy one (64 packets) within tens. Short, because
/// an operation sent through the ring of a target that has just stopped
/// calling the library waits for its next call.
const PROGRESS_RECENT_US: u64 = 50;

/// `CLOCK_MONOTONIC_COARSE`: milliseconds-grained, and cheap enough to read
/// on every poll.
pub(super) fn coarse_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl ShmDevice {
    /// The periodic peer check. Every 64th call looks at the coarse clock
    /// (a plain read of the kernel's tick; the precise clock would cost a
    /// timer read on every poll) and checks the peers when `peer_check`
    /// has passed. Returns whether this was such a call (it may have
    /// queued events: a peer found gone).
    #[inline(always)]
    pub(super) fn check_peers(&mut self) -> bool {
        self.polls = self.polls.wrapping_add(1);
        let due = self.polls % 64 == 0;
        if due {
            self.check_peers_now();
        }
        due
    }

    #[inline(never)]
    fn check_peers_now(&mut self) {
        self.stamp_progress();
        let now = coarse_now();
        if now.saturating_sub(self.last_check) < self.cfg.peer_check {
            return;
        }
        self.last_check = now;
        self.check_head();
        for (ah, slot) in self.peers.iter_mut().enumerate() {
            let Some(p) = slot.as_mut().filter(|p| !p.lost) else { continue };
            let closing = p.map.u32_at(off::CLOSING).load(Ordering::Acquire) != 0;
            if closing || !alive(p.pid, p.start) {
                p.lost = true;
                self.events.push(DevEvent::PeerLost { ah: ah as Ah });
            }
        }
        // Lost peers run nowhere: they do not crowd the CPUs (a peer that
        // reopened its endpoint is inserted again, its old address stays).
        self.lost_peers = self.peers.iter().flatten().filter(|p| p.lost).count();
        self.crowd.peers(self.others());
    }

    /// Publishes that this endpoint is polling now ([`off::PROGRESS`]):
    /// called every 64th poll or packet (`check_peers`), a clock read each.
    pub(super) fn stamp_progress(&self) {
        self.map.u64_at(off::PROGRESS).store(mono_us(), Ordering::Relaxed);
    }

    /// Whether peer `ah` polled in the last [`PROGRESS_RECENT_US`] µs,
    /// whatever its sleeping flag says: an endpoint that hands its
    /// descriptor to the application keeps the flag set while it polls,
    /// and one that fell asleep since its last stamp is woken by the
    /// request's ring entry (as by any). Never with
    /// [`ShmConfig::ring_rma`] off.
    pub(super) fn progressing(&mut self, ah: Ah) -> bool {
        if !self.cfg.ring_rma {
            return false;
        }
        self.peer(ah).is_ok_and(|p| polled_recently(p))
    }
}

/// Whether peer `p` sleeps in a wait: its sleeping flag is set and it
/// stamped no poll in the last [`PROGRESS_RECENT_US`] µs. An endpoint that
/// hands its descriptor to the application (`rdm4_ep_fd`) keeps the flag
/// set while it polls (`sleep.rs`): its stamps tell that it is awake.
pub(super) fn asleep(p: &Peer) -> bool {
    p.map.hdr_u32::<{ off::SLEEPING }>().load(Ordering::Relaxed) != 0 && !polled_recently(p)
}

/// Whether peer `p` stamped its progress in the last
/// [`PROGRESS_RECENT_US`] µs.
pub(super) fn polled_recently(p: &Peer) -> bool {
    let stamp = p.map.u64_at(off::PROGRESS).load(Ordering::Relaxed);
    stamp != 0 && mono_us().saturating_sub(stamp) <= PROGRESS_RECENT_US
}
