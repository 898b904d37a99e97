//! The device's timed work: retransmission timeouts, datagrams the fault
//! injection held back, the liveness rules' turn; and how long a sleeper
//! may block, on the socket or on the application's descriptor, whose
//! timer stays armed while such work is due.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::appfd::APP_TICK;
use super::{peer, UdpDevice};

#[cfg(doc)]
use super::appfd::AppFd;

/// How often the retransmission timeouts (5 ms and up) and the count of
/// recent senders are looked at: not on every poll, whose cost would then
/// grow with the peers awaited (docs/performance.md, "10,000 real udp
/// peers").
pub(super) const SCAN_EVERY: Duration = Duration::from_micros(200);

impl UdpDevice {
    /// Retransmission timeouts, give-ups and held-back datagrams.
    pub(super) fn timers(&mut self, now: Instant) {
        if !self.delayed.is_empty() {
            self.send_delayed(now);
        }
        self.send_acks(now);
        if now >= self.next_liveness {
            self.liveness(now);
        }
        if now < self.next_scan {
            return;
        }
        self.next_scan = now + SCAN_EVERY;
        let peers = &mut self.peers;
        self.recent.retain(|&i| {
            let p = &mut peers[i];
            p.counted = p.last_data.is_some_and(|t| now - t < peer::ACTIVE_FOR);
            p.counted
        });
        self.active = self.recent.len();
        // Peers with nothing left to be acknowledged (or lost) leave the
        // work list.
        self.work.retain(|&i| {
            let p = &mut peers[i];
            p.queued = !p.lost && !p.unacked.is_empty();
            p.queued
        });
        for k in 0..self.work.len() {
            let Some(&idx) = self.work.get(k) else { break };
            let p = &self.peers[idx];
            if p.lost || p.unacked.is_empty() {
                continue;
            }
            let rto = p.rto;
            let due: Vec<u32> = p
                .unacked
                .iter()
                .filter(|u| !u.acked && now.saturating_duration_since(u.last_sent) >= rto)
                .map(|u| u.seq)
                .collect();
            if !due.is_empty() {
                self.stats.timeouts += 1;
                self.peers[idx].timed_out();
                for seq in due {
                    self.retransmit(idx, seq, now, true);
                }
            } else if let Some(seq) = self.peers[idx].probe_due(now) {
                self.stats.tail_probes += 1;
                self.retransmit(idx, seq, now, false);
            }
        }
    }

    /// Blocks until a datagram arrives or `timeout_ms` (capped by the next
    /// retransmission) passed.
    pub(super) fn block(&mut self, timeout_ms: i32) -> bool {
        self.tx_flush();
        if self.rxb.has_pending() {
            return true;
        }
        let mut pfd = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = self.timer_ms().min(if timeout_ms < 0 { i32::MAX } else { timeout_ms });
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
    }

    /// Whether the device has timed work: datagrams awaiting their
    /// acknowledgement, acknowledgements owed, held-back datagrams, RDMA.
    fn busy(&self) -> bool {
        !self.delayed.is_empty()
            || !self.kept.is_empty()
            || self.work.iter().any(|&i| !self.peers[i].lost && !self.peers[i].unacked.is_empty())
            || self.acks.iter().any(|&i| !self.peers[i].lost && self.peers[i].ack_due)
            || self.rdma.has_work()
    }

    /// Milliseconds until the device's next timer (retransmission, held-back
    /// datagram), at most 100.
    pub(super) fn timer_ms(&self) -> i32 {
        if self.busy() {
            1
        } else {
            100
        }
    }

    /// Keeps the application's timer ([`AppFd`]) armed [`APP_TICK`] ahead
    /// while the device is busy, and disarmed while it is not. A timer that
    /// fired is armed again here, which also clears it: the progress call
    /// that follows a wake-up did the work it woke for.
    pub(super) fn arm_app_timer(&mut self, now: Instant) {
        let Some(a) = &self.app_fd else { return };
        let busy = self.busy();
        let armed = a.armed;
        match (busy, armed) {
            (true, Some(t)) if t > now => {}
            (true, _) => {
                a.set(APP_TICK);
                if let Some(a) = &mut self.app_fd {
                    a.armed = Some(now + APP_TICK);
                }
            }
            (false, Some(_)) => {
                a.set(Duration::ZERO);
                if let Some(a) = &mut self.app_fd {
                    a.armed = None;
                }
            }
            (false, None) => {}
        }
    }
}

impl UdpDevice {
    /// Puts peer `idx` in the work list (once): it has a datagram awaiting
    /// its acknowledgement.
    #[inline]
    pub(super) fn note_work(&mut self, idx: usize) {
        if !std::mem::replace(&mut self.peers[idx].queued, true) {
            self.work.push(idx);
        }
        self.note_watch(idx);
    }

    /// Puts peer `idx` in the liveness list (once): something began to
    /// await it.
    #[inline]
    pub(super) fn note_watch(&mut self, idx: usize) {
        if !std::mem::replace(&mut self.peers[idx].watched, true) {
            self.watch.push(idx);
        }
    }
}
