//! Datagrams in: taken from the socket in batches (`io.rs`), each one
//! checked and its acknowledgements applied, then its packet handed to
//! the engine, its RDMA segment served or its control answered; and the
//! packets the engine deferred, handed over again.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Instant;

use super::dgram::{self, Hdr, Kind, HDR};
use super::peer::{Arrival, Peer};
use super::{UdpDevice, STRANGERS_MAX};
use crate::device::{Ah, DevEvent, Flow};
use crate::mem::UserBuf;
use crate::status::Status;

#[cfg(doc)]
use crate::device::Device;

impl UdpDevice {
    /// The index of the peer at (`addr`, `connid`), made for an unknown
    /// sender when there is room.
    fn peer_index(&mut self, addr: SocketAddr, connid: u32) -> Option<usize> {
        if let Some(&i) = self.by_addr.get(&(addr, connid)) {
            return Some(i);
        }
        if self.strangers >= STRANGERS_MAX {
            return None;
        }
        self.strangers += 1;
        Some(self.new_peer(addr, connid))
    }

    /// Adds the peer at (`addr`, `connid`) and indexes it; its index.
    pub(super) fn new_peer(&mut self, addr: SocketAddr, connid: u32) -> usize {
        self.peers.push(Peer::new(addr, connid));
        let i = self.peers.len() - 1;
        self.by_addr.insert((addr, connid), i);
        self.by_sock.entry(addr).or_default().push(i);
        i
    }

    /// Hands the parked packets to `f` again, in their order.
    pub(super) fn recv_parked<R: Flow>(
        &mut self,
        max: usize,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let peers = &self.peers;
        let from = |(idx, _): &(usize, Vec<u8>)| peers[*idx].inserted.then_some(*idx as Ah);
        let (n, rest) = crate::device::redeliver_parked(&mut self.parked, max, from, |(_, pkt)| pkt, f);
        self.redeliver = rest;
        if self.parked.is_empty() && !self.keeps_too_much() {
            // The hold is over: tell every peer at once.
            self.ack_all(Instant::now());
        }
        n
    }

    /// Hands up to `max` datagrams from the socket (and those taken from it
    /// before and not yet handed over) to `f`, as [`Device::recv`] does;
    /// returns how many packets `f` got.
    pub(super) fn take_socket<R: Flow>(
        &mut self,
        max: usize,
        now: Instant,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let fd = self.sock.as_raw_fd();
        let mut rxb = std::mem::take(&mut self.rxb);
        let mut n = 0;
        // A fill that found fewer datagrams than slots emptied the socket:
        // the call does not ask again (an empty system call per message).
        let (mut drained, mut net_error) = (false, false);
        while n < max {
            let Some((from, d)) = rxb.next() else {
                if !drained && rxb.fill(fd) {
                    drained = !rxb.full();
                    continue;
                }
                if !net_error && std::mem::take(&mut rxb.errors) {
                    // The fill reported a network error, not an empty socket.
                    net_error = true;
                    drained = false;
                    continue;
                }
                break; // nothing more
            };
            let Some(from) = from else {
                self.stats.malformed += 1;
                continue;
            };
            if let Some(v) = self.handle(d, from, now, f) {
                n += 1;
                if !v.go_on() {
                    break;
                }
            }
        }
        rxb.errors |= net_error;
        self.rxb = rxb;
        self.take_net_errors();
        n
    }

    /// One received datagram of `len` bytes in `self.rx` from `from`:
    /// acknowledgements, then its kind. Returns the engine's verdict for a
    /// DATA packet handed over (`None`: nothing was).
    fn handle<R: Flow>(
        &mut self,
        rx: &[u8],
        from: SocketAddr,
        now: Instant,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> Option<R> {
        if rx.len() < HDR && from == self.local {
            return None; // a wake-up this endpoint sent itself (`wake_sleeper`)
        }
        let Some((h, body)) = Hdr::parse(rx) else {
            self.stats.malformed += 1;
            return None;
        };
        if h.kind == Kind::Who && h.dst_connid == 0 {
            self.answer_who(&h, body, from);
            return None;
        }
        if h.dst_connid != self.connid {
            self.stats.stale += 1;
            return None;
        }
        // The last sender first: a stream or a ping-pong comes from one peer.
        let idx = match self.last_from {
            Some((a, c, i)) if a == from && c == h.src_connid => i,
            _ => {
                let known = self.by_addr.contains_key(&(from, h.src_connid));
                if !known && !h.kind.reliable() {
                    self.stats.unknown_control += 1; // an ACK, CLOSE or PROBE from nobody we talk to
                    return None;
                }
                let Some(i) = self.peer_index(from, h.src_connid) else {
                    self.stats.strangers_over += 1;
                    return None;
                };
                self.last_from = Some((from, h.src_connid, i));
                i
            }
        };
        if self.peers[idx].lost {
            self.stats.from_lost += 1;
            return None;
        }
        let p = &mut self.peers[idx];
        p.last_heard = now;
        p.held = h.flags & dgram::HOLD != 0;
        p.peer_window = h.window as usize;
        if h.kind.reliable() {
            p.last_data = Some(now);
            // It is owed an acknowledgement now, and shares the window.
            if !std::mem::replace(&mut self.peers[idx].ack_listed, true) {
                self.acks.push(idx);
            }
            if !std::mem::replace(&mut self.peers[idx].counted, true) {
                self.recent.push(idx);
            }
        }
        // Scratch lists kept between datagrams: no allocation per acknowledgement.
        let (mut acked, mut holes) = std::mem::take(&mut self.scratch);
        self.peers[idx].take_ack(h.ack, h.ack_bits, now, &mut acked, &mut holes);
        if h.flags & dgram::DUP != 0 {
            self.stats.spurious += 1;
            self.peers[idx].spurious(now);
        }
        for &wr_id in &acked.done {
            self.events.push(DevEvent::SendDone { wr_id, ah: idx as Ah, status: Ok(()) });
        }
        self.pool.append(&mut acked.bufs);
        for &seq in &holes {
            self.retransmit(idx, seq, now, false);
        }
        acked.done.clear();
        holes.clear();
        self.scratch = (acked, holes);
        match h.kind {
            Kind::Ack => return None,
            Kind::Close => {
                self.lose(idx);
                return None;
            }
            Kind::Probe => {
                self.send_bare(idx, Kind::Ack, now);
                return None;
            }
            // The responder keeps no more: left unreceived, sent again later.
            Kind::Data if self.away && self.keep_full() => return None,
            _ => {}
        }
        // Whether an acknowledgement is owed from before this datagram.
        let owed = self.peers[idx].ack_due;
        match self.peers[idx].arrive(h.seq) {
            Arrival::New => {}
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
                // Sent again on a timeout, already here and not yet
                // acknowledged: the sender's timeout fired before our
                // acknowledgement could reach it (we were slow, not the
                // network lossy: a lost acknowledgement leaves nothing
                // owed). Our next datagram tells it (`DUP`).
                self.peers[idx].echo_dup |= owed && h.flags & dgram::RETX != 0;
                return None;
            }
            Arrival::TooFar => {
                self.stats.too_far += 1;
                return None;
            }
        }
        match h.kind {
            Kind::Data => {
                let ah = self.peers[idx].inserted.then_some(idx as Ah);
                let verdict = f(ah, body, None);
                if verdict.defer() {
                    if self.away {
                        self.kept_bytes += body.len();
                        self.stats.kept += 1;
                        self.kept.push_back((idx, body.to_vec()));
                    } else {
                        self.parked.push_back((idx, body.to_vec()));
                    }
                }
                Some(verdict)
            }
            // An endpoint that does not offer RDMA refuses it, with an answer.
            Kind::Write | Kind::WriteImm | Kind::ReadReq if !self.cfg.rdma => {
                self.stats.rdma_refused += 1;
                if let Some(op) = body.first_chunk::<4>().map(|b| u32::from_le_bytes(*b)) {
                    self.send_done(idx, op, Status::NotSup.code(), now);
                }
                None
            }
            Kind::Write | Kind::WriteImm => {
                self.rdma_write_in(idx, body, h.kind == Kind::WriteImm, now);
                None
            }
            Kind::ReadReq => {
                self.rdma_read_req(idx, body, now);
                None
            }
            Kind::ReadRsp => {
                self.rdma_read_rsp(idx, body);
                None
            }
            Kind::RdmaDone => {
                self.rdma_done(idx, body);
                None
            }
            Kind::Ack | Kind::Close | Kind::Probe | Kind::Who | Kind::Name => None,
        }
    }
}
