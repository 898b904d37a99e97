//! The udp device: endpoints on any IP network (DESIGN §2.1).
//!
//! One UDP socket per endpoint. Raw address: `gid` = the IPv6 address
//! (IPv4 as `::ffff:a.b.c.d`), `qpn` = the UDP port, `connid` = random per
//! open. Each datagram is a 28-byte device header and, for data, one EFA
//! RDM packet (`dgram.rs` documents the bytes).
//!
//! What the engine gets is what an EFA NIC gives: packets delivered
//! reliably, exactly once, in any order, and RDMA read and write.
//! - Reliability (`peer.rs`): per-peer sequence numbers, duplicate
//!   suppression, cumulative acknowledgements with a bit vector of later
//!   arrivals, piggybacked on every datagram to the peer or sent at the
//!   end of a receive batch; retransmission on an adaptive timeout and on
//!   holes the acknowledgements show. Packets go to the engine as they
//!   arrive, in any order.
//! - Liveness (`liveness`): a peer is given up only when it is gone — its
//!   host's kernel reports its port closed (ICMP port unreachable, read
//!   from the socket's error queue: `io.rs`), it sent CLOSE, or something
//!   of ours awaits it (datagrams it has not acknowledged, RDMA, the
//!   engine's operations: [`Device::awaiting`]) and nothing at all came
//!   from it for `giveup`, though it was sent a PROBE every
//!   [`PROBE_EVERY`] of silence. A living peer always answers: its
//!   application's calls do, and while its application is away (it
//!   computes, sleeps, waits on another channel) its responder does.
//! - The responder ([`UdpDevice::respond`]): while the application makes
//!   no call, a thread of the C API's (`capi::responder`) calls it now and
//!   then, and on every datagram: it sends the acknowledgements owed at
//!   once, retransmits, answers probes, serves the RDMA peers ask of this
//!   endpoint's memory, completes our own RDMA's transfers, and keeps the
//!   packets for the engine (acknowledged: the peer's send is complete)
//!   until the application's next call hands them over. Beyond a receive
//!   window's worth of kept bytes, every datagram says HOLD.
//! - Flow and congestion: a send window of at most 64 datagrams per peer
//!   (the receiver's duplicate window) under an AIMD congestion window,
//!   and the bytes in flight within the receive window the peer grants
//!   (`peer.rs`); a full window is "try again" for the engine.
//! - Batches (`io.rs`): datagrams leave by UDP GSO (or `sendmmsg`) when
//!   the engine rings the doorbell, and arrive by `recvmmsg` and UDP GRO.
//! - RDMA (after RDMAP): writes travel as WRITE segments carrying key,
//!   address and offset, reads as a READ_REQ answered by READ_RSP segments;
//!   the memory owner's device checks key, bounds and access before it
//!   touches memory and answers a refusal (and a finished write) with
//!   RDMA_DONE. The owner serves them in its progress calls (or its
//!   progress thread), and its `dereg` drops the reads it was serving, so
//!   no peer reads or writes a region after its deregistration returns.
//! - Deferral (device contract item 7): deferred packets are copied aside,
//!   and every datagram says HOLD while any are kept: peers then send only
//!   control packets until a datagram without it arrives.
//! - A close sends CLOSE to every peer it knows (twice, best effort); a
//!   peer that receives it fails its operations towards the closed one.
//! - Faults (`RDM4_UDP_FAULTS`): seeded drops, duplicates and reordering
//!   with delay, applied to every datagram sent, for tests.
//!
//! Send completions come when the peer acknowledged the datagram (its
//! device has it), so an eager send completes after a round trip, and a
//! send to a peer that is given up completes with `RDM4_EPEER`.

mod appfd;
mod away;
mod config;
mod dgram;
mod io;
mod liveness;
mod peer;
mod rdma;

pub use config::{Faults, UdpConfig};

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::{Access, Ah, Caps, DevError, DevEvent, Device, Flow, Sent};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;
use appfd::{AppFd, APP_TICK};
use dgram::{Hdr, Kind, HDR};
use peer::{Acked, Arrival, Peer, Unacked};

/// The largest datagram the device sends.
const DGRAM_MAX: usize = 65_000 + HDR;
/// Peers the device keeps state for that the engine never inserted (an
/// unknown sender's datagrams beyond it are dropped).
const STRANGERS_MAX: usize = 4096;

/// Counters of what the device dropped, refused or repeated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams sent again (timeouts and holes).
    pub retransmits: u64,
    /// Received datagrams that were duplicates.
    pub duplicates: u64,
    /// Datagrams too short, of another version or kind, or malformed.
    pub malformed: u64,
    /// Datagrams for another incarnation of this port (wrong connid).
    pub stale: u64,
    /// Datagrams beyond the receive window.
    pub too_far: u64,
    /// RDMA requests refused (key, bounds, access).
    pub rdma_refused: u64,
    /// Datagrams the fault injection dropped.
    pub injected_drops: u64,
    /// Datagrams put on the wire (retransmissions and acknowledgements
    /// included), and the system calls that sent them.
    pub datagrams_sent: u64,
    pub send_calls: u64,
    /// System calls that took datagrams from the socket (`recvmmsg`,
    /// empty ones included).
    pub recv_calls: u64,
    /// Retransmission timeouts: times a peer's timer expired with
    /// datagrams unacknowledged (each resends them).
    pub timeouts: u64,
    /// Peers given up after `giveup` of silence.
    pub peers_given_up: u64,
    /// Peers given up because their host reported their port closed (the
    /// process ended).
    pub peers_refused: u64,
    /// Probes sent to peers awaited and silent.
    pub probes: u64,
    /// Packets the responder kept for the engine while the application
    /// was away.
    pub kept: u64,
}

/// A silent peer that something of ours awaits is probed this often (at
/// most: a quarter of the give-up time when that is shorter).
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Packets the responder takes per call at most.
const RESPOND_MAX: usize = 256;
/// How often the liveness rules run.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);
/// How long the engine's [`Device::awaiting`] mark lasts: it renews it
/// every `capi::responder::SCAN_EVERY` (100 ms) while its operations wait.
const AWAITED_FOR: Duration = Duration::from_millis(350);

/// One endpoint's udp device.
pub struct UdpDevice {
    sock: UdpSocket,
    local: SocketAddr,
    connid: u32,
    cfg: UdpConfig,
    /// Largest EFA RDM packet.
    mtu: usize,
    peers: Vec<Peer>,
    by_addr: FxHashMap<(SocketAddr, u32), usize>,
    strangers: usize,
    events: Vec<DevEvent>,
    pool: Vec<Vec<u8>>,
    /// Datagrams queued to leave in one system call, and datagrams taken
    /// in one (`io.rs`).
    tx: io::TxBatch,
    rxb: io::RxBatch,
    /// The application's descriptor ([`Device::wait_fd`]), once asked for,
    /// and the one made at open for it (so that the responder, whose
    /// descriptor table is its own, has it: [`Device::responder_fds`]).
    app_fd: Option<AppFd>,
    spare_fd: Option<AppFd>,
    /// The engine's hint for the next packet ([`Device::control_next`]).
    control: bool,
    /// Deferred packets (from peer index), and whether to hand them over again.
    parked: VecDeque<(usize, Vec<u8>)>,
    redeliver: bool,
    /// Datagrams held back by fault injection: (due, destination, bytes).
    delayed: VecDeque<(Instant, SocketAddr, Vec<u8>)>,
    rng: u64,
    rdma: rdma::Rdma,
    stats: UdpStats,
    /// `recv` ran the timers and RDMA work; the `events` that follows skips them.
    timers_done: bool,
    /// The last datagram's sender (address, connid) and its peer index.
    last_from: Option<(SocketAddr, u32, usize)>,
    /// The socket's receive buffer (what the kernel granted), and how
    /// many peers sent data lately ([`UdpDevice::window`]).
    rx_budget: usize,
    active: usize,
    /// What an acknowledgement released and the holes it showed (reused).
    scratch: (Acked, Vec<u32>),
    /// Packets the responder took for the engine (from peer index), and
    /// their bytes; `away`: the responder is the caller.
    kept: VecDeque<(usize, Vec<u8>)>,
    kept_bytes: usize,
    away: bool,
    /// When the liveness rules run next.
    next_liveness: Instant,
    /// Errors the network reported, as read from the error queue (reused).
    net_errors: Vec<(SocketAddr, i32)>,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        return t ^ u64::from(std::process::id()) << 32;
    }
    u64::from_le_bytes(b)
}

/// The `gid` of an IP address: IPv6 as it is, IPv4 mapped into IPv6.
fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The socket address of a raw address.
fn socket_of(raw: &RawAddr) -> SocketAddr {
    let v6 = Ipv6Addr::from(raw.gid);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    SocketAddr::new(ip, raw.qpn())
}

impl UdpDevice {
    /// Opens an endpoint with the settings of the environment.
    pub fn open() -> Result<UdpDevice, Status> {
        UdpDevice::open_with(UdpConfig::from_env()?)
    }

    /// Opens an endpoint: binds its socket and sizes its packets.
    pub fn open_with(cfg: UdpConfig) -> Result<UdpDevice, Status> {
        let ip = cfg.addr.unwrap_or_else(config::primary_addr);
        if ip.is_unspecified() {
            return Err(Status::Inval); // a wildcard is not an address a peer can reach
        }
        let sock = UdpSocket::bind(SocketAddr::new(ip, cfg.port)).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => Status::Busy,
            ErrorKind::AddrNotAvailable => Status::NoAddr,
            _ => Status::Io,
        })?;
        sock.set_nonblocking(true).map_err(|_| Status::Io)?;
        // Coalesced arrivals where the kernel offers them; without, one
        // datagram per receive slot.
        io::enable_gro(sock.as_raw_fd());
        // Closed ports of peers reported at once (without, a dead peer is
        // noticed after `giveup` of silence).
        io::enable_errors(sock.as_raw_fd(), ip.is_ipv6());
        let local = sock.local_addr().map_err(|_| Status::Io)?;
        let want = cfg.sock_buf.unwrap_or(8 << 20) as libc::c_int;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE, libc::SO_RCVBUF, libc::SO_SNDBUF] {
            // SAFETY: setting an int socket option on our socket; failures
            // (no privilege for the FORCE options) leave the kernel's size.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&want as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
        }
        // What the kernel granted (the FORCE options need privilege).
        let rx_budget = config::sock_opt(sock.as_raw_fd(), libc::SO_RCVBUF).unwrap_or(212_992);
        // IP (20 or 40 bytes) and UDP (8) headers, then ours.
        let ip_hdr = if ip.is_ipv4() { 20 } else { 40 };
        let path = config::interface_mtu(ip).unwrap_or(1500);
        let fit = path.saturating_sub(ip_hdr + 8).min(DGRAM_MAX) - HDR;
        let mtu = cfg.mtu.unwrap_or(fit).min(fit) & !63;
        if mtu < 256 {
            return Err(Status::Inval);
        }
        let seed = cfg.faults.seed;
        Ok(UdpDevice {
            sock,
            local,
            connid: random_u64() as u32 | 1,
            mtu,
            cfg,
            peers: Vec::new(),
            by_addr: FxHashMap::default(),
            strangers: 0,
            events: Vec::new(),
            pool: Vec::new(),
            tx: io::TxBatch::new(),
            rxb: io::RxBatch::new(),
            app_fd: None,
            spare_fd: AppFd::new(),
            control: false,
            parked: VecDeque::new(),
            redeliver: false,
            delayed: VecDeque::new(),
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            rdma: rdma::Rdma::default(),
            stats: UdpStats::default(),
            timers_done: false,
            last_from: None,
            rx_budget,
            active: 0,
            scratch: (Acked::default(), Vec::new()),
            kept: VecDeque::new(),
            kept_bytes: 0,
            away: false,
            next_liveness: Instant::now(),
            net_errors: Vec::new(),
        })
    }

    /// The socket address peers reach this endpoint at.
    pub fn socket_addr(&self) -> SocketAddr {
        self.local
    }

    /// Counters of what the device dropped, refused or repeated.
    pub fn stats(&self) -> UdpStats {
        let mut s = self.stats;
        s.retransmits = self.peers.iter().map(|p| p.retransmits).sum();
        (s.datagrams_sent, s.send_calls, s.recv_calls) = (self.tx.sent, self.tx.calls, self.rxb.calls);
        s
    }

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
    fn tx_flush(&mut self) {
        if !self.tx.is_empty() {
            self.tx.flush(self.sock.as_raw_fd());
        }
    }

    /// Sends the datagrams the fault injection held back whose time came.
    fn send_delayed(&mut self, now: Instant) {
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

    /// Whether the responder keeps more bytes for the engine than a
    /// receive window: peers are then held back.
    fn keeps_too_much(&self) -> bool {
        self.kept_bytes > self.rx_budget / 2
    }

    /// Whether the responder may keep no more: new data is left unreceived
    /// (its senders send it again later) beyond four receive windows.
    fn keep_full(&self) -> bool {
        self.kept_bytes >= self.rx_budget.saturating_mul(2)
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
    fn send_reliable(&mut self, idx: usize, kind: Kind, mut d: Vec<u8>, len: usize, wr_id: u64, now: Instant) {
        let (flags, connid, window) = (self.flags(), self.connid, self.window());
        let p = &mut self.peers[idx];
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
    }

    /// Sends an unreliable datagram (ACK, CLOSE) to peer `idx`.
    fn send_bare(&mut self, idx: usize, kind: Kind, now: Instant) {
        let (flags, connid, window) = (self.flags(), self.connid, self.window());
        let p = &mut self.peers[idx];
        let (ack, ack_bits) = p.ack_fields();
        p.acked_now();
        let h = Hdr { kind, flags, src_connid: connid, dst_connid: p.connid, seq: 0, ack, ack_bits, window };
        let mut d = [0u8; HDR];
        h.write(&mut d);
        let to = p.addr;
        self.transmit(to, &d, now);
    }

    /// Sends datagram `seq` of peer `idx` again, with fresh acknowledgements.
    fn retransmit(&mut self, idx: usize, seq: u32, now: Instant) {
        let (flags, window) = (self.flags(), self.window());
        let p = &mut self.peers[idx];
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

    /// Retransmission timeouts, give-ups and held-back datagrams.
    fn timers(&mut self, now: Instant) {
        self.active = self.peers.iter().filter(|p| p.last_data.is_some_and(|t| now - t < peer::ACTIVE_FOR)).count();
        if !self.delayed.is_empty() {
            self.send_delayed(now);
        }
        self.send_acks(now);
        if now >= self.next_liveness {
            self.liveness(now);
        }
        for idx in 0..self.peers.len() {
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
                    self.retransmit(idx, seq, now);
                }
            }
        }
    }

    /// Gives peer `idx` up: every operation towards it fails.
    fn lose(&mut self, idx: usize) {
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
        self.peers.push(Peer::new(addr, connid));
        let i = self.peers.len() - 1;
        self.by_addr.insert((addr, connid), i);
        Some(i)
    }

    /// Sends the acknowledgements that cannot wait for a datagram to ride on.
    fn send_acks(&mut self, now: Instant) {
        for idx in 0..self.peers.len() {
            if !self.peers[idx].lost && self.peers[idx].ack_now(now) {
                self.send_bare(idx, Kind::Ack, now);
            }
        }
    }

    /// Hands the parked packets to `f` again, in their order.
    fn recv_parked<R: Flow>(
        &mut self,
        max: usize,
        f: &mut impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R,
    ) -> usize {
        let peers = &self.peers;
        let from = |(idx, _): &(usize, Vec<u8>)| peers[*idx].inserted.then_some(*idx as Ah);
        let (n, rest) = super::redeliver_parked(&mut self.parked, max, from, |(_, pkt)| pkt, f);
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
    fn take_socket<R: Flow>(
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
                    return None; // an ACK or CLOSE from nobody we talk to
                }
                let Some(i) = self.peer_index(from, h.src_connid) else {
                    self.stats.malformed += 1;
                    return None;
                };
                self.last_from = Some((from, h.src_connid, i));
                i
            }
        };
        if self.peers[idx].lost {
            return None;
        }
        let p = &mut self.peers[idx];
        p.last_heard = now;
        p.held = h.flags & dgram::HOLD != 0;
        p.peer_window = h.window as usize;
        if h.kind.reliable() {
            p.last_data = Some(now);
        }
        // Scratch lists kept between datagrams: no allocation per acknowledgement.
        let (mut acked, mut holes) = std::mem::take(&mut self.scratch);
        self.peers[idx].take_ack(h.ack, h.ack_bits, now, &mut acked, &mut holes);
        for &wr_id in &acked.done {
            self.events.push(DevEvent::SendDone { wr_id, ah: idx as Ah, status: Ok(()) });
        }
        self.pool.append(&mut acked.bufs);
        for &seq in &holes {
            self.retransmit(idx, seq, now);
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
        match self.peers[idx].arrive(h.seq) {
            Arrival::New => {}
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
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
            Kind::Ack | Kind::Close | Kind::Probe => None,
        }
    }

    /// Blocks until a datagram arrives or `timeout_ms` (capped by the next
    /// retransmission) passed.
    fn block(&mut self, timeout_ms: i32) -> bool {
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
            || self.peers.iter().any(|p| !p.lost && (!p.unacked.is_empty() || p.ack_due))
            || self.rdma.has_work()
    }

    /// Milliseconds until the device's next timer (retransmission, held-back
    /// datagram), at most 100.
    fn timer_ms(&self) -> i32 {
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
    fn arm_app_timer(&mut self, now: Instant) {
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

impl Drop for UdpDevice {
    fn drop(&mut self) {
        // Tell every peer (twice: CLOSE is not retransmitted).
        let now = Instant::now();
        for _ in 0..2 {
            for idx in 0..self.peers.len() {
                if !self.peers[idx].lost {
                    self.send_bare(idx, Kind::Close, now);
                }
            }
        }
        self.send_delayed(now + Duration::from_secs(3600));
        self.tx_flush();
    }
}

mod device;
#[cfg(test)]
mod tests;
