//! Per-peer reliability of the udp device (after the RAMCloud RPC
//! protocol's acknowledgements and retransmission): sequence numbers,
//! duplicate suppression, cumulative acknowledgements with a bit vector of
//! later arrivals, an adaptive retransmission timeout, and a send window
//! that backs off on loss.
//!
//! A timeout that fires while the receiver is slow (descheduled on a busy
//! host) rather than on a loss is told apart by the receiver: a datagram
//! sent again on a timeout (`RETX`) that it already had and had not yet
//! acknowledged makes it set `DUP` on its next datagram back. The sender
//! then undoes the window's back-off and doubles the timeout's floor (from
//! [`RTO_MIN`] up to [`FLOOR_MAX`]; halved after each [`FLOOR_DECAY`]
//! without a report): docs/performance.md, "spurious retransmissions".
//! While the floor is raised, a flight that has been silent for two round
//! trips is probed: its newest datagram is sent once again, unflagged and
//! without backing off ([`Peer::probe_due`]). A lost tail is then
//! recovered in about two round trips instead of the raised timeout (the
//! acknowledgement of the probe shows any hole before it), while a slow
//! receiver costs one datagram, which it drops as a duplicate without a
//! `DUP` report.
//!
//! Congestion control is AIMD on a window counted in datagrams: it grows by
//! one datagram per window acknowledged, halves on a retransmission
//! timeout, and stays between [`CWND_MIN`] and [`WINDOW`] (the receiver's
//! duplicate-suppression window). Many senders to one receiver (incast)
//! each back off on their own losses, so goodput holds instead of every
//! sender retransmitting into a full socket buffer.
//!
//! Flow control is the receiver's: every datagram carries the window its
//! sender grants the receiver, in bytes (its socket buffer, halved for the
//! kernel's overhead per datagram, shared among the peers that sent to it
//! in the last [`ACTIVE_FOR`]). A sender keeps the bytes it has in flight
//! within the window its peer granted last, so that a fast sender does not
//! overrun a slow receiver's buffer. A datagram larger than the window
//! goes alone, when nothing else is in flight and at the pace the window
//! allows (window bytes per round trip: a sender of 64 KB datagrams
//! granted 16 KB sends one every four round trips, at most
//! [`RTO_MAX`] apart), so that many senders into a small buffer take turns
//! instead of overrunning it together, and a window of 0 (or a lost update)
//! stalls nobody for good.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The receiver keeps this many sequence numbers past the first missing
/// one; a sender never has more unacknowledged datagrams in flight.
pub(crate) const WINDOW: u32 = 64;
/// The smallest congestion window.
const CWND_MIN: f64 = 2.0;
/// The first congestion window.
const CWND_START: f64 = 16.0;
/// Retransmission timeout bounds.
const RTO_MIN: Duration = Duration::from_micros(500);
/// At most this between retries, so that a congested but live peer gets
/// many of them within the give-up time.
const RTO_MAX: Duration = Duration::from_millis(250);
const RTO_START: Duration = Duration::from_millis(5);
/// The highest the timeout's floor rises after spurious retransmissions
/// (a receiver descheduled for this long is waited for).
const FLOOR_MAX: Duration = Duration::from_millis(4);
/// The floor halves after this long without a spurious retransmission.
const FLOOR_DECAY: Duration = Duration::from_secs(1);
/// An acknowledgement waits this long for a datagram to ride on (a reply,
/// in a ping-pong) before it goes alone.
const ACK_DELAY: Duration = Duration::from_micros(50);
/// ... or until it covers this many datagrams.
const ACK_EVERY: u32 = 16;
/// A peer that sent data this recently shares the receive window.
pub(crate) const ACTIVE_FOR: Duration = Duration::from_millis(5);

/// A datagram sent and not yet acknowledged.
pub(crate) struct Unacked {
    pub seq: u32,
    /// The whole datagram, device header included.
    pub dgram: Vec<u8>,
    pub first_sent: Instant,
    pub last_sent: Instant,
    pub tries: u32,
    /// Reported back as `SendDone` when acknowledged (0: nothing to report).
    pub wr_id: u64,
    pub acked: bool,
}

/// What one peer's state says after an acknowledgement.
#[derive(Default)]
pub(crate) struct Acked {
    /// `wr_id`s of datagrams now acknowledged (non-zero ones).
    pub done: Vec<u64>,
    /// Datagram buffers to reuse.
    pub bufs: Vec<Vec<u8>>,
}

/// One remote endpoint (address and connid).
pub(crate) struct Peer {
    pub addr: SocketAddr,
    pub connid: u32,
    /// The engine inserted it (it gets the handle in received packets).
    pub inserted: bool,
    pub lost: bool,
    /// It asked us to hold back new messages.
    pub held: bool,
    // Sending.
    pub next_seq: u32,
    pub unacked: VecDeque<Unacked>,
    pub cwnd: f64,
    /// Bytes of datagrams sent and not yet acknowledged.
    pub in_flight: usize,
    /// The receive window the peer granted last (bytes).
    pub peer_window: usize,
    /// When the last new datagram went out.
    pub last_new: Option<Instant>,
    srtt: Option<Duration>,
    rttvar: Duration,
    pub rto: Duration,
    /// The least `rto`: [`RTO_MIN`], doubled for each retransmission the
    /// peer reported it already had (`DUP`, up to [`FLOOR_MAX`]), halved
    /// after each [`FLOOR_DECAY`] without one; and when it last changed.
    rto_floor: Duration,
    floor_since: Option<Instant>,
    /// The congestion window before the last timeout halved it (restored
    /// when that timeout proves spurious).
    cwnd_before: f64,
    /// A datagram of the peer's sent again (`RETX`) arrived that we had:
    /// our next datagram to it says so (`DUP`).
    pub echo_dup: bool,
    /// Datagrams sent again.
    pub retransmits: u64,
    // Receiving.
    /// The first sequence number not yet received.
    pub rx_next: u32,
    /// Bit i: `rx_next + 1 + i` was received.
    pub rx_bits: u64,
    /// An acknowledgement is owed (something arrived since the last one sent).
    pub ack_due: bool,
    /// Since when it is owed, and for how many datagrams.
    pub ack_since: Option<Instant>,
    pub ack_owed: u32,
    /// When a datagram last came from it (or it was made).
    pub last_heard: Instant,
    /// When a reliable datagram last came from it (it shares our window).
    pub last_data: Option<Instant>,
    /// In the device's work list, and in its list of recent senders.
    pub queued: bool,
    /// In the device's liveness list (`UdpDevice::watch`).
    pub watched: bool,
    pub counted: bool,
    pub ack_listed: bool,
    // Liveness (`UdpDevice::liveness`).
    /// The engine awaits an answer from it until then ([`crate::device::Device::awaiting`]).
    pub awaited_until: Option<Instant>,
    /// The engine's answer that marked it last (`UdpDevice::asked`).
    pub awaited_in: u32,
    /// An RDMA operation of ours waits for it (set by each liveness pass).
    pub rdma_waits: bool,
    /// Since when something of ours waits for it without a pause.
    pub waiting_since: Option<Instant>,
    /// When we last probed it.
    pub last_probe: Option<Instant>,
}

/// Where a received sequence number falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// New: hand it over.
    New,
    /// Seen before: acknowledge again, deliver nothing.
    Duplicate,
    /// Beyond the window: no sender sends it; drop it.
    TooFar,
}

impl Peer {
    pub(crate) fn new(addr: SocketAddr, connid: u32) -> Peer {
        Peer {
            addr,
            connid,
            inserted: false,
            lost: false,
            held: false,
            next_seq: 0,
            unacked: VecDeque::new(),
            cwnd: CWND_START,
            in_flight: 0,
            peer_window: usize::MAX,
            last_new: None,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: RTO_START,
            rto_floor: RTO_MIN,
            floor_since: None,
            cwnd_before: CWND_START,
            echo_dup: false,
            retransmits: 0,
            rx_next: 0,
            rx_bits: 0,
            ack_due: false,
            ack_since: None,
            ack_owed: 0,
            last_heard: Instant::now(),
            last_data: None,
            queued: false,
            watched: false,
            counted: false,
            ack_listed: false,
            awaited_until: None,
            awaited_in: 0,
            rdma_waits: false,
            waiting_since: None,
            last_probe: None,
        }
    }

    /// Whether something of ours waits for the peer at `now`: datagrams it
    /// has not acknowledged, an RDMA operation, or the engine's operations.
    pub(crate) fn awaited(&self, now: Instant) -> bool {
        !self.unacked.is_empty() || self.rdma_waits || self.awaited_until.is_some_and(|t| t > now)
    }

    /// How long the peer has been silent while awaited at `now` (`None`:
    /// nothing awaits it); starts the count when something began to wait.
    pub(crate) fn silent_for(&mut self, now: Instant) -> Option<Duration> {
        if !self.awaited(now) {
            self.waiting_since = None;
            return None;
        }
        let since = *self.waiting_since.get_or_insert(now);
        Some(now.saturating_duration_since(self.last_heard.max(since)))
    }

    /// Whether a new datagram of up to `len` bytes may go out at `now`:
    /// the congestion window has room, and the peer's receive window too,
    /// or (a datagram larger than it) nothing is in flight and its turn has
    /// come (see the module docs).
    pub(crate) fn window_open(&self, len: usize, now: Instant) -> bool {
        if (self.unacked.len() as f64) >= self.cwnd.min(f64::from(WINDOW)) {
            return false;
        }
        if self.in_flight + len <= self.peer_window {
            return true;
        }
        if self.in_flight > 0 {
            return false;
        }
        let Some(last) = self.last_new else { return true };
        let rtt = self.srtt.unwrap_or(RTO_MIN);
        // A closed window: a probe per RTO_MAX.
        let turns = if self.peer_window == 0 { f64::MAX } else { len as f64 / self.peer_window as f64 };
        let gap = rtt.mul_f64(turns.min(1e6)).min(RTO_MAX);
        now.saturating_duration_since(last) >= gap
    }

    /// Records the arrival of reliable datagram `seq`.
    pub(crate) fn arrive(&mut self, seq: u32) -> Arrival {
        self.ack_due = true;
        self.ack_owed += 1;
        let d = seq.wrapping_sub(self.rx_next);
        if d >= 1 << 31 {
            return Arrival::Duplicate;
        }
        if d == 0 {
            self.rx_next = self.rx_next.wrapping_add(1);
            loop {
                let have = self.rx_bits & 1 != 0;
                self.rx_bits >>= 1;
                if !have {
                    break;
                }
                self.rx_next = self.rx_next.wrapping_add(1);
            }
            return Arrival::New;
        }
        if d > 64 {
            return Arrival::TooFar;
        }
        let bit = 1u64 << (d - 1);
        if self.rx_bits & bit != 0 {
            return Arrival::Duplicate;
        }
        self.rx_bits |= bit;
        Arrival::New
    }

    /// The acknowledgement fields to send: (first missing, later arrivals).
    pub(crate) fn ack_fields(&self) -> (u32, u32) {
        (self.rx_next, self.rx_bits as u32)
    }

    /// An acknowledgement went out (alone or on a datagram).
    pub(crate) fn acked_now(&mut self) {
        self.ack_due = false;
        self.ack_since = None;
        self.ack_owed = 0;
    }

    /// Whether the acknowledgement owed must go out alone now: it has
    /// waited [`ACK_DELAY`] for a datagram to ride on, or covers
    /// [`ACK_EVERY`] datagrams (a stream's sender needs them to move its
    /// window).
    pub(crate) fn ack_now(&mut self, now: Instant) -> bool {
        if !self.ack_due {
            return false;
        }
        let since = *self.ack_since.get_or_insert(now);
        self.ack_owed >= ACK_EVERY || now.saturating_duration_since(since) >= ACK_DELAY
    }

    /// Takes the peer's acknowledgement (`ack`, `bits`) of our datagrams.
    /// A datagram whose acknowledgement shows a hole behind later arrivals
    /// is sent again at once when it was last sent over an RTT ago (the
    /// caller sends what `holes` returns).
    pub(crate) fn take_ack(&mut self, ack: u32, bits: u32, now: Instant, out: &mut Acked, holes: &mut Vec<u32>) {
        // Nothing beyond what we sent counts (a forged or stale ack).
        let sent = self.next_seq;
        if self.unacked.is_empty() || sent.wrapping_sub(ack) >= 1 << 31 {
            return;
        }
        let mut newly = 0u32;
        let mut sample = None;
        for u in self.unacked.iter_mut().filter(|u| !u.acked) {
            let below = ack.wrapping_sub(u.seq).wrapping_sub(1) < 1 << 31;
            let d = u.seq.wrapping_sub(ack).wrapping_sub(1);
            let in_bits = d < 32 && bits & (1 << d) != 0;
            if below || in_bits {
                u.acked = true;
                newly += 1;
                self.in_flight = self.in_flight.saturating_sub(u.dgram.len());
                // Karn: only datagrams sent once time the round trip.
                if u.tries == 1 {
                    sample = Some(now.saturating_duration_since(u.first_sent));
                }
            }
        }
        if let Some(r) = sample {
            self.decay_floor(now);
            self.rtt_sample(r);
        }
        if newly > 0 {
            self.cwnd = (self.cwnd + f64::from(newly) / self.cwnd).min(f64::from(WINDOW));
        }
        // A hole at `ack` with later datagrams received: send it again.
        if bits != 0 {
            let rtt = self.srtt.unwrap_or(RTO_START);
            if let Some(u) = self.unacked.iter().find(|u| u.seq == ack && !u.acked) {
                if now.saturating_duration_since(u.last_sent) >= rtt {
                    holes.push(u.seq);
                }
            }
        }
        while self.unacked.front().is_some_and(|u| u.acked) {
            if let Some(u) = self.unacked.pop_front() {
                if u.wr_id != 0 {
                    out.done.push(u.wr_id);
                }
                out.bufs.push(u.dgram);
            }
        }
    }

    fn rtt_sample(&mut self, r: Duration) {
        // RFC 6298.
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        self.rto = (s + (self.rttvar * 4).max(Duration::from_micros(100))).clamp(self.rto_floor, RTO_MAX);
    }

    /// The datagram to probe the peer with now, if any: while the
    /// timeout's floor is raised above [`RTO_MIN`], the newest datagram not
    /// yet acknowledged, when it has been sent only once and both it and
    /// the oldest unacknowledged one were last sent two round trips ago
    /// (at least [`RTO_MIN`]). The caller resends it unflagged and without
    /// backing off; having been sent twice, it is not probed again.
    pub(crate) fn probe_due(&self, now: Instant) -> Option<u32> {
        if self.rto_floor <= RTO_MIN {
            return None;
        }
        let quiet = self.srtt.map_or(RTO_MIN, |s| (s * 2).max(RTO_MIN));
        let mut waiting = self.unacked.iter().filter(|u| !u.acked);
        let first = waiting.next()?;
        let newest = waiting.next_back().unwrap_or(first);
        let silent = |u: &Unacked| now.saturating_duration_since(u.last_sent) >= quiet;
        (newest.tries == 1 && silent(first) && silent(newest)).then_some(newest.seq)
    }

    /// A retransmission timeout fired: back off (window halved, timeout doubled).
    pub(crate) fn timed_out(&mut self) {
        self.cwnd_before = self.cwnd;
        self.cwnd = (self.cwnd / 2.0).max(CWND_MIN);
        self.rto = (self.rto * 2).min(RTO_MAX);
    }

    /// The peer reported a retransmission of ours it already had (`DUP`):
    /// the timeout fired while the peer was slow (descheduled, busy), not
    /// on a loss. The window's back-off is undone and the timeout's floor
    /// doubled, so that the next spell of the same length is waited out.
    pub(crate) fn spurious(&mut self, now: Instant) {
        self.cwnd = self.cwnd.max(self.cwnd_before);
        self.rto_floor = (self.rto_floor * 2).min(FLOOR_MAX);
        self.floor_since = Some(now);
        self.rto = self.rto.max(self.rto_floor);
    }

    /// Halves a raised floor after [`FLOOR_DECAY`] without a spurious
    /// retransmission (the peer's slow spell may be over).
    fn decay_floor(&mut self, now: Instant) {
        if let Some(t) = self.floor_since.filter(|&t| now.saturating_duration_since(t) >= FLOOR_DECAY) {
            self.rto_floor = (self.rto_floor / 2).max(RTO_MIN);
            self.floor_since = (self.rto_floor > RTO_MIN).then_some(t + FLOOR_DECAY);
        }
    }

    /// The flags a datagram to the peer carries besides the device's:
    /// `DUP` once after a duplicate retransmission arrived.
    pub(crate) fn take_echo(&mut self) -> u8 {
        if std::mem::take(&mut self.echo_dup) {
            super::dgram::DUP
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Peer {
        Peer::new("127.0.0.1:1".parse().unwrap(), 1)
    }

    #[test]
    fn arrivals_in_any_order_are_each_new_once_and_the_window_slides() {
        let mut p = peer();
        let (new, dup, far) = (Arrival::New, Arrival::Duplicate, Arrival::TooFar);
        let seen: Vec<Arrival> = [2u32, 0, 5, 1, 2, 3, 4, 0, 71, 5].iter().map(|&s| p.arrive(s)).collect();
        assert_eq!(seen, vec![new, new, new, new, dup, new, new, dup, far, dup]);
        assert_eq!(p.ack_fields(), (6, 0));
        // Wrap-around of the sequence space.
        let mut p = peer();
        p.rx_next = u32::MAX - 1;
        assert_eq!(p.arrive(0), Arrival::New);
        assert_eq!(p.ack_fields(), (u32::MAX - 1, 0b10));
        assert_eq!(p.arrive(u32::MAX - 1), Arrival::New);
        assert_eq!(p.arrive(u32::MAX), Arrival::New);
        assert_eq!(p.ack_fields(), (1, 0));
        assert_eq!(p.arrive(u32::MAX), Arrival::Duplicate);
    }

    #[test]
    fn a_spurious_timeout_undoes_the_back_off_and_raises_the_floor_until_it_decays() {
        let mut p = peer();
        let t0 = Instant::now();
        p.rtt_sample(Duration::from_micros(40));
        assert_eq!(p.rto, RTO_MIN, "a fast peer: the least timeout");
        p.cwnd = 20.0;
        p.timed_out();
        assert_eq!(p.cwnd, 10.0);
        p.spurious(t0);
        assert_eq!((p.cwnd, p.rto_floor), (20.0, RTO_MIN * 2), "window restored, floor doubled");
        assert!(p.rto >= RTO_MIN * 2);
        // Samples do not take the timeout under the floor; repeated reports
        // raise it up to FLOOR_MAX.
        p.rtt_sample(Duration::from_micros(40));
        assert_eq!(p.rto, RTO_MIN * 2);
        for _ in 0..20 {
            p.spurious(t0);
        }
        assert_eq!(p.rto_floor, FLOOR_MAX);
        // A second without a report halves it; down to RTO_MIN in the end.
        p.decay_floor(t0 + FLOOR_DECAY / 2);
        assert_eq!(p.rto_floor, FLOOR_MAX, "not yet");
        p.decay_floor(t0 + FLOOR_DECAY);
        assert_eq!(p.rto_floor, FLOOR_MAX / 2);
        p.rtt_sample(Duration::from_micros(40));
        assert_eq!(p.rto, FLOOR_MAX / 2);
        for k in 2..20 {
            p.decay_floor(t0 + FLOOR_DECAY * k);
        }
        assert_eq!(p.rto_floor, RTO_MIN);
        assert_eq!(p.floor_since, None);
        // The echo goes once.
        p.echo_dup = true;
        assert_eq!((p.take_echo(), p.take_echo()), (super::super::dgram::DUP, 0));
    }

    #[test]
    fn a_silent_flight_is_probed_with_its_newest_datagram_once_while_the_floor_is_raised() {
        let mut p = peer();
        let t0 = Instant::now();
        p.rtt_sample(Duration::from_micros(400));
        let sent = |seq: u32, at: Instant, tries: u32, acked: bool| Unacked {
            seq,
            dgram: Vec::new(),
            first_sent: at,
            last_sent: at,
            tries,
            wr_id: 0,
            acked,
        };
        p.unacked.extend([sent(1, t0, 1, true), sent(2, t0, 1, false), sent(3, t0, 1, false)]);
        // Two round trips.
        let quiet = Duration::from_micros(800);
        // The floor at its least: the timeout alone answers for losses.
        assert_eq!(p.probe_due(t0 + quiet * 4), None);
        p.spurious(t0);
        assert!(p.rto_floor > RTO_MIN);
        assert_eq!(p.probe_due(t0 + quiet / 2), None, "not silent for two round trips yet");
        assert_eq!(p.probe_due(t0 + quiet), Some(3), "the newest unacknowledged datagram");
        // Sent since (a retransmission, or the probe itself): not again.
        p.unacked[2].tries = 2;
        assert_eq!(p.probe_due(t0 + quiet * 4), None);
        // A newer datagram, sent once: the flight is probed once more when
        // it too has been silent for two round trips.
        p.unacked.push_back(sent(4, t0 + quiet, 1, false));
        assert_eq!(p.probe_due(t0 + quiet + quiet / 2), None);
        assert_eq!(p.probe_due(t0 + quiet * 2), Some(4));
        // Everything acknowledged: nothing to probe.
        p.unacked.iter_mut().for_each(|u| u.acked = true);
        assert_eq!(p.probe_due(t0 + quiet * 8), None);
    }

    #[test]
    fn the_receive_window_bounds_bytes_in_flight_and_paces_datagrams_larger_than_it() {
        let mut p = peer();
        let t0 = Instant::now();
        p.peer_window = 10_000;
        assert!(p.window_open(4000, t0), "nothing in flight");
        p.in_flight = 6000;
        assert!(p.window_open(4000, t0), "6000 + 4000 fit 10000");
        assert!(!p.window_open(4001, t0), "one byte over");
        // Larger than the window: alone, one round trip per window's worth.
        p.in_flight = 0;
        p.srtt = Some(Duration::from_micros(100));
        p.last_new = Some(t0);
        assert!(!p.window_open(40_000, t0 + Duration::from_micros(350)), "4 round trips not yet passed");
        assert!(p.window_open(40_000, t0 + Duration::from_micros(400)));
        // A window of 0 (or a lost update) stalls a sender for at most RTO_MAX.
        p.peer_window = 0;
        assert!(!p.window_open(100, t0 + RTO_MAX - Duration::from_micros(1)));
        assert!(p.window_open(100, t0 + RTO_MAX));
        // The congestion window still counts datagrams.
        p.peer_window = usize::MAX;
        p.cwnd = 2.0;
        for s in 0..2 {
            let u =
                Unacked { seq: s, dgram: vec![0; 10], first_sent: t0, last_sent: t0, tries: 1, wr_id: 0, acked: false };
            p.unacked.push_back(u);
        }
        assert!(!p.window_open(10, t0));
    }

    #[test]
    fn acknowledgements_release_datagrams_in_order_and_forged_ones_release_nothing() {
        let mut p = peer();
        let now = Instant::now();
        for s in 0..5u32 {
            p.unacked.push_back(Unacked {
                seq: s,
                dgram: vec![s as u8],
                first_sent: now,
                last_sent: now,
                tries: 1,
                wr_id: u64::from(s) + 10,
                acked: false,
            });
        }
        p.next_seq = 5;
        let (mut out, mut holes) = (Acked::default(), Vec::new());
        // Forged: acknowledges what was never sent.
        p.take_ack(900, 0, now, &mut out, &mut holes);
        assert!(out.done.is_empty() && p.unacked.len() == 5);
        // 0 and 1 cumulatively, 3 by the bit vector: 2 is a hole.
        p.take_ack(2, 0b10, now + Duration::from_millis(10), &mut out, &mut holes);
        assert_eq!(out.done, vec![10, 11]);
        assert_eq!(holes, vec![2]);
        assert_eq!(p.unacked.len(), 3);
        p.take_ack(5, 0, now, &mut out, &mut holes);
        assert_eq!(out.done, vec![10, 11, 12, 13, 14]);
        assert!(p.unacked.is_empty());
    }
}
