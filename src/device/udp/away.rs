//! The udp device while its application is away (see the module docs of
//! `udp`): the responder's call, the bounds on the packets it keeps, and
//! those packets handed to the engine at the next call.

use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::dgram::Kind;
use super::{UdpDevice, RESPOND_MAX};
use crate::device::{Ah, Flow, Rx};
use crate::mem::UserBuf;

impl UdpDevice {
    /// Whether the responder keeps more bytes for the engine than a
    /// receive window: peers are then held back.
    pub(super) fn keeps_too_much(&self) -> bool {
        self.kept_bytes > self.rx_budget / 2
    }

    /// Whether the responder may keep no more: new data is left unreceived
    /// (its senders send it again later) beyond four receive windows.
    pub(super) fn keep_full(&self) -> bool {
        self.kept_bytes >= self.rx_budget.saturating_mul(2)
    }

    /// Hands the packets the responder kept to `f`, at most `max`, in
    /// their order; those it defers join the deferred ones. Returns how
    /// many it handed over.
    pub(super) fn recv_kept<R: Flow>(
        &mut self,
        max: usize,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let holding = self.keeps_too_much();
        let mut n = 0;
        while n < max {
            let Some((idx, pkt)) = self.kept.pop_front() else { break };
            self.kept_bytes -= pkt.len();
            n += 1;
            let verdict = f(self.peers[idx].inserted.then_some(idx as Ah), &pkt, None);
            if verdict.defer() {
                self.parked.push_back((idx, pkt));
            }
            if !verdict.go_on() {
                break;
            }
        }
        if holding && !self.keeps_too_much() && self.parked.is_empty() {
            // The hold is over: tell every peer at once.
            self.ack_all(Instant::now());
        }
        n
    }

    /// Sends an ACK to every peer not lost (news of the hold's end).
    pub(super) fn ack_all(&mut self, now: Instant) {
        for idx in 0..self.peers.len() {
            if !self.peers[idx].lost {
                self.send_bare(idx, Kind::Ack, now);
            }
        }
    }

    /// The responder's call ([`Device::respond`]; see the module docs):
    /// takes every datagram waiting, keeping packets for the engine,
    /// answers what needs answering, sends what is owed, and wakes the
    /// application's descriptor when it left it work.
    pub(super) fn respond_now(&mut self) -> (RawFd, i32) {
        let now = Instant::now();
        let (kept, events) = (self.kept.len(), self.events.len());
        self.away = true;
        // At most a batch a call, so that an application coming back
        // waits for one batch, not for a stream that keeps arriving.
        let mut keep = |_: Option<Ah>, _: &[u8], _: Option<UserBuf>| Rx::Defer;
        self.take_socket(RESPOND_MAX, now, &mut keep);
        // The timers after the socket, as in `recv` (the liveness rules
        // keep the engine's last answer: `renew_marks`).
        self.timers(now);
        self.away = false;
        // Nothing will carry the acknowledgements owed: they go now.
        for k in 0..self.acks.len() {
            let idx = self.acks[k];
            if !self.peers[idx].lost && self.peers[idx].ack_due {
                self.send_bare(idx, Kind::Ack, now);
            }
        }
        self.pump(now);
        self.tx_flush();
        if self.kept.len() > kept || self.events.len() > events {
            if let Some(a) = &mut self.app_fd {
                // The application's descriptor polls readable now.
                a.set(Duration::from_nanos(1));
                a.armed = Some(now);
            }
        }
        (self.sock.as_raw_fd(), self.timer_ms())
    }
}
