//! The udp device's liveness rules (see the module docs of `udp`): peers
//! that something of ours awaits are probed while silent and given up
//! after `giveup` of silence; peers whose host reports their port closed
//! are given up at once. A peer given up (`lose`) fails every operation
//! towards it.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::dgram::Kind;
use super::{io, UdpDevice, ASK_EVERY, AWAITED_FOR, LIVENESS_EVERY, PROBE_EVERY};
use crate::device::{Ah, DevEvent};
use crate::status::Status;

impl UdpDevice {
    /// The liveness rules (see the module docs): peers awaited and silent
    /// are probed, and given up after `giveup` of silence.
    pub(super) fn liveness(&mut self, now: Instant) {
        self.next_liveness = now + LIVENESS_EVERY;
        if self.away {
            self.renew_marks(now);
        } else if now >= self.next_ask {
            self.next_ask = now + ASK_EVERY;
            self.asked = self.asked.wrapping_add(1);
            self.events.push(DevEvent::Awaiting);
        }
        let mut marked = std::mem::take(&mut self.rdma_marked);
        for &idx in &marked {
            self.peers[idx].rdma_waits = false;
        }
        marked.clear();
        marked.extend(self.rdma.requesters());
        for &idx in &marked {
            self.peers[idx].rdma_waits = true;
            self.note_watch(idx);
        }
        self.rdma_marked = marked;
        let giveup = self.cfg.giveup;
        let probe_every = PROBE_EVERY.min(giveup / 4);
        let mut k = 0;
        while let Some(&idx) = self.watch.get(k) {
            let p = &mut self.peers[idx];
            // A peer nothing awaits leaves the list (its silence is counted
            // afresh when something awaits it again).
            let silent = if p.lost { None } else { p.silent_for(now) };
            let Some(silent) = silent else {
                p.watched = false;
                self.watch.swap_remove(k);
                continue;
            };
            k += 1;
            if silent > giveup {
                self.stats.peers_given_up += 1;
                crate::log::log!(crate::log::INFO, "udp: peer {} silent for {silent:?}: given up", p.addr);
                self.lose(idx);
            } else if silent >= probe_every
                && p.last_probe.is_none_or(|t| now.saturating_duration_since(t) >= probe_every)
            {
                p.last_probe = Some(now);
                self.stats.probes += 1;
                self.send_bare(idx, Kind::Probe, now);
            }
        }
    }

    /// While the application is away (the responder's call): the peers
    /// the engine's last answer marked stay awaited, since its operations
    /// cannot change before its next call, which asks again.
    fn renew_marks(&mut self, now: Instant) {
        for &idx in &self.watch {
            let p = &mut self.peers[idx];
            if p.awaited_in == self.asked && p.awaited_until.is_some() {
                p.awaited_until = Some(now + AWAITED_FOR);
            }
        }
    }

    /// Reads the errors the network reported (`io.rs`) when a socket call
    /// saw one: the peers whose port their host reports closed are lost.
    pub(super) fn take_net_errors(&mut self) {
        if !(self.tx.errors || self.rxb.errors) {
            return;
        }
        self.tx.errors = false;
        self.rxb.errors = false;
        let mut errs = std::mem::take(&mut self.net_errors);
        io::take_errors(self.sock.as_raw_fd(), &mut errs);
        for (to, e) in errs.drain(..) {
            if e != libc::ECONNREFUSED {
                continue; // a host or network unreachable may pass: silence decides
            }
            let at = self.by_sock.get(&to).cloned().unwrap_or_default();
            for idx in at {
                if !self.peers[idx].lost {
                    self.stats.peers_refused += 1;
                    crate::log::log!(crate::log::INFO, "udp: peer {to}: port unreachable, given up");
                    self.lose(idx);
                }
            }
        }
        self.net_errors = errs;
    }
    /// Gives peer `idx` up: every operation towards it fails.
    pub(super) fn lose(&mut self, idx: usize) {
        let p = &mut self.peers[idx];
        if p.lost {
            return;
        }
        p.lost = true;
        p.in_flight = 0;
        let ah = idx as Ah;
        for u in p.unacked.drain(..) {
            if u.wr_id != 0 && !u.acked {
                self.events.push(DevEvent::SendDone { wr_id: u.wr_id, ah, status: Err(Status::PeerUnreachable) });
            }
        }
        self.rdma.peer_lost(idx, ah, &mut self.events);
        if p.inserted {
            self.events.push(DevEvent::PeerLost { ah });
        }
    }
}
