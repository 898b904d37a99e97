//! Datagrams out: reliable ones numbered and kept until acknowledged,
//! bare ones (ACK, CLOSE, PROBE), retransmissions, the flags and receive
//! window every header carries, and the fault injection every datagram
//! passes through (`RDM4_UDP_FAULTS`).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::dgram::{self, Hdr, Kind, HDR};
use super::peer::Unacked;
use super::UdpDevice;

#[cfg(doc)]
use super::io;

impl UdpDevice {
    fn rand_unit(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Puts a datagram on the wire, through the fault injection.
    fn transmit(&mut self, to: SocketAddr, dgram: &[u8], now: Instant) {
        let f = self.cfg.faults;
        if f.any() {
            if self.rand_unit() < f.drop {
                self.stats.injected_drops += 1;
                return;
            }
            if self.rand_unit() < f.reorder {
                let due = now + Duration::from_micros(f.delay_us.max(1));
                self.delayed.push_back((due, to, dgram.to_vec()));
                return;
            }
            if self.rand_unit() < f.dup {
                self.tx.push(self.sock.as_raw_fd(), to, dgram);
            }
        }
        self.tx.push(self.sock.as_raw_fd(), to, dgram);
    }

    /// Sends the datagrams queued ([`io::TxBatch`]).
    pub(super) fn tx_flush(&mut self) {
        if !self.tx.is_empty() {
            self.tx.flush(self.sock.as_raw_fd());
        }
    }

    /// Sends the datagrams the fault injection held back whose time came.
    pub(super) fn send_delayed(&mut self, now: Instant) {
        while self.delayed.front().is_some_and(|d| d.0 <= now) {
            if let Some((_, to, d)) = self.delayed.pop_front() {
                self.tx.push(self.sock.as_raw_fd(), to, &d);
            }
        }
    }

    fn flags(&self) -> u8 {
        if self.parked.is_empty() && !self.keeps_too_much() {
            0
        } else {
            dgram::HOLD
        }
    }

    /// A pooled datagram buffer of at least `len` bytes. Only bytes past
    /// its last use are zeroed (a recycled 64 KB buffer is not cleared
    /// again for an 8-byte packet).
    pub(super) fn take_buf(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_default();
        if b.len() < len {
            b.resize(len, 0);
        }
        b
    }

    /// Numbers, acknowledges-in and sends a reliable datagram of `len`
    /// bytes (header space included) to peer `idx`, keeping it for
    /// retransmission.
    pub(super) fn send_reliable(
        &mut self,
        idx: usize,
        kind: Kind,
        mut d: Vec<u8>,
        len: usize,
        wr_id: u64,
        now: Instant,
    ) {
        let (flags, connid, window) = (self.flags(), self.connid, self.window());
        let p = &mut self.peers[idx];
        let flags = flags | p.take_echo();
        let seq = p.next_seq;
        p.next_seq = seq.wrapping_add(1);
        p.in_flight += len;
        p.last_new = Some(now);
        let (ack, ack_bits) = p.ack_fields();
        p.acked_now();
        let h = Hdr { kind, flags, src_connid: connid, dst_connid: p.connid, seq, ack, ack_bits, window };
        h.write(&mut d);
        d.truncate(len);
        let to = p.addr;
        self.transmit(to, &d, now);
        let u = Unacked { seq, dgram: d, first_sent: now, last_sent: now, tries: 1, wr_id, acked: false };
        self.peers[idx].unacked.push_back(u);
        self.note_work(idx);
    }

    /// Sends an unreliable datagram (ACK, CLOSE) to peer `idx`.
    pub(super) fn send_bare(&mut self, idx: usize, kind: Kind, now: Instant) {
        let (flags, connid, window) = (self.flags(), self.connid, self.window());
        let p = &mut self.peers[idx];
        let flags = flags | p.take_echo();
        let (ack, ack_bits) = p.ack_fields();
        p.acked_now();
        let h = Hdr { kind, flags, src_connid: connid, dst_connid: p.connid, seq: 0, ack, ack_bits, window };
        let mut d = [0u8; HDR];
        h.write(&mut d);
        let to = p.addr;
        self.transmit(to, &d, now);
    }

    /// Sends datagram `seq` of peer `idx` again, with fresh acknowledgements;
    /// flagged `RETX` when its timeout fired (`timeout`; not for a hole
    /// the receiver showed, which reordering makes too).
    pub(super) fn retransmit(&mut self, idx: usize, seq: u32, now: Instant, timeout: bool) {
        let (flags, window) = (self.flags(), self.window());
        let p = &mut self.peers[idx];
        let retx = if timeout { dgram::RETX } else { 0 };
        let flags = flags | retx | p.take_echo();
        let (ack, ack_bits) = p.ack_fields();
        let to = p.addr;
        let Some(u) = p.unacked.iter_mut().find(|u| u.seq == seq && !u.acked) else { return };
        Hdr::refresh(&mut u.dgram, flags, ack, ack_bits, window);
        u.tries += 1;
        u.last_sent = now;
        let d = std::mem::take(&mut u.dgram);
        p.retransmits += 1;
        p.acked_now();
        self.transmit(to, &d, now);
        if let Some(u) = self.peers[idx].unacked.iter_mut().find(|u| u.seq == seq) {
            u.dgram = d;
        }
    }

    /// The receive window granted to each peer (bytes): half the socket
    /// buffer (the kernel charges each datagram its overhead too), shared
    /// among the peers that sent data lately.
    fn window(&self) -> u32 {
        (self.rx_budget / 2 / self.active.max(1)).min(u32::MAX as usize) as u32
    }

    /// Sends the acknowledgements that cannot wait for a datagram to ride on.
    pub(super) fn send_acks(&mut self, now: Instant) {
        if self.acks.is_empty() {
            return;
        }
        for k in 0..self.acks.len() {
            let idx = self.acks[k];
            if !self.peers[idx].lost && self.peers[idx].ack_now(now) {
                self.send_bare(idx, Kind::Ack, now);
            }
        }
        let peers = &mut self.peers;
        self.acks.retain(|&i| {
            let p = &mut peers[i];
            p.ack_listed = !p.lost && p.ack_due;
            p.ack_listed
        });
    }
}
