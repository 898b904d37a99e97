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
//! - Liveness (`liveness.rs`): a peer is given up only when it is gone — its
//!   host's kernel reports its port closed (ICMP port unreachable, read
//!   from the socket's error queue: `io.rs`), it sent CLOSE, or something
//!   of ours awaits it (datagrams it has not acknowledged, RDMA, the
//!   engine's operations: [`Device::awaiting`]) and nothing at all came
//!   from it for `giveup`, though it was sent a PROBE every
//!   [`PROBE_EVERY`] of silence. A living peer always answers: its
//!   application's calls do, and while its application is away (it
//!   computes, sleeps, waits on another channel) its responder does.
//! - The responder ([`UdpDevice::respond`]): while the application leaves
//!   the device alone, a thread of the C API's (`capi::responder`, through
//!   `device::away::Shared`) calls it now and then, and on every datagram:
//!   it sends the acknowledgements owed at
//!   once, retransmits, answers probes, serves the RDMA peers ask of this
//!   endpoint's memory, completes our own RDMA's transfers, and keeps the
//!   packets for the engine (acknowledged: the peer's send is complete)
//!   until the application's next call hands them over. Beyond a receive
//!   window's worth of kept bytes, every datagram says HOLD. Which peers
//!   the engine's operations await the device asks during the
//!   application's calls ([`DevEvent::Awaiting`], every 100 ms); the
//!   responder renews the marks of the last answer, so a peer that dies
//!   while the application is away is probed and given up all the same.
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
//!
//! By file: `device.rs`, the device contract ([`Device`]); `send.rs` and
//! `recv.rs`, datagrams out and in; `timers.rs`, retransmission and the
//! other timed work; `away.rs`, the responder; `appfd.rs`, the
//! application's descriptor; `config.rs`, the settings ([`UdpConfig`]).

mod appfd;
mod away;
mod config;
mod device;
mod dgram;
mod io;
mod liveness;
mod peer;
mod rdma;
mod recv;
mod send;
mod timers;
mod who;

pub use config::{Faults, UdpConfig};
pub use who::resolve;

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::DevEvent;
use crate::device::Access;
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;
use appfd::AppFd;
use dgram::{Kind, HDR};
use peer::{Acked, Peer};

#[cfg(doc)]
use super::Device;

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
    /// Retransmissions the peer reported it already had (`DUP`): timeouts
    /// that fired while the peer was slow, not on a loss.
    pub spurious: u64,
    /// Datagrams sent again to probe a flight silent for two round trips
    /// while the timeout's floor was raised (`peer::Peer::probe_due`);
    /// also in `retransmits`.
    pub tail_probes: u64,
    /// Received datagrams that were duplicates.
    pub duplicates: u64,
    /// Datagrams whose header is bad: too short, another magic, version or
    /// kind, or no IP source address.
    pub malformed: u64,
    /// RDMA datagrams whose body is too short or reaches past its
    /// operation's buffer.
    pub rdma_malformed: u64,
    /// READ_RSP and RDMA_DONE datagrams for no operation of ours towards
    /// their sender (stale, repeated after the operation ended, or forged).
    pub rdma_unmatched: u64,
    /// Acknowledgements, closes and probes from senders the device keeps no
    /// state for (it answers nobody it does not talk to).
    pub unknown_control: u64,
    /// Datagrams from new senders past the 4096 (`STRANGERS_MAX`) the device
    /// keeps state for without the engine inserting them.
    pub strangers_over: u64,
    /// Datagrams from peers given up or closed (their later traffic is
    /// not taken).
    pub from_lost: u64,
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
/// How often the device asks the engine which peers its operations await
/// ([`DevEvent::Awaiting`]), during the application's calls.
const ASK_EVERY: Duration = Duration::from_millis(100);
/// How long the engine's [`Device::awaiting`] mark lasts: the engine
/// renews it at every ask while its operations wait; while the application
/// is away, the responder renews the marks of the last answer (the
/// operations cannot change meanwhile).
const AWAITED_FOR: Duration = Duration::from_millis(350);

/// One endpoint's udp device.
pub struct UdpDevice {
    sock: UdpSocket,
    local: SocketAddr,
    connid: u32,
    /// The name a WHO is answered with, when it is not this device's own
    /// address (the auto device's, with its shm locator).
    public: Option<RawAddr>,
    cfg: UdpConfig,
    /// Largest EFA RDM packet.
    mtu: usize,
    peers: Vec<Peer>,
    by_addr: FxHashMap<(SocketAddr, u32), usize>,
    /// The peers at each socket address (one per connid seen there): a
    /// port-unreachable error names the address alone.
    by_sock: FxHashMap<SocketAddr, Vec<usize>>,
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
    /// The peers the timers look at: those with datagrams awaiting their
    /// acknowledgement or an acknowledgement owed (each once, `Peer::queued`;
    /// one with neither leaves at the timers' next pass), and those that
    /// sent data in the last `ACTIVE_FOR` (`Peer::counted`). So that a poll
    /// costs what its busy peers cost, not what all of them do.
    work: Vec<usize>,
    recent: Vec<usize>,
    /// The peers the liveness rules look at: each that something began to
    /// await (a datagram unacknowledged, an RDMA operation, the engine's
    /// `awaiting`), until nothing does (`Peer::watched`); and the RDMA
    /// requesters marked at the last pass. So that the rules cost what
    /// the awaited peers cost, not what all of them do.
    watch: Vec<usize>,
    rdma_marked: Vec<usize>,
    /// The peers owed an acknowledgement (each once, `Peer::ack_listed`).
    acks: Vec<usize>,
    /// When the retransmission timeouts and the count of recent senders
    /// are looked at next (`timers::SCAN_EVERY`).
    next_scan: Instant,
    /// What an acknowledgement released and the holes it showed (reused).
    scratch: (Acked, Vec<u32>),
    /// Packets the responder took for the engine (from peer index), and
    /// their bytes; `away`: the responder is the caller.
    kept: VecDeque<(usize, Vec<u8>)>,
    kept_bytes: usize,
    away: bool,
    /// When the liveness rules run next.
    next_liveness: Instant,
    /// When the engine is asked next which peers it awaits, and how many
    /// times it was asked (`Peer::awaited_in` names the answer).
    next_ask: Instant,
    asked: u32,
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

/// The raw address of the endpoint at `addr` of `connid`.
fn raw_of(addr: SocketAddr, connid: u32) -> RawAddr {
    RawAddr::new(gid_of(addr.ip()), addr.port(), connid)
}

/// The socket address of a raw address.
fn socket_of(raw: &RawAddr) -> SocketAddr {
    let v6 = Ipv6Addr::from(raw.gid);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    SocketAddr::new(ip, raw.qpn())
}

impl UdpDevice {
    /// Registers `buf` under `key`, a key another device chose for the
    /// same memory (the auto device: one key on both). `Busy` when the key
    /// is taken here already.
    pub fn reg_as(&mut self, buf: UserBuf, access: Access, key: u64) -> Result<(), Status> {
        if key == 0 || self.rdma.regs.contains_key(&key) {
            return Err(Status::Busy);
        }
        self.rdma.regs.insert(key, (buf, access));
        Ok(())
    }

    /// Takes `connid` as its own, before any traffic: the auto device
    /// gives its devices one connid, as packets carry one whichever device
    /// they take.
    pub fn take_connid(&mut self, connid: u32) {
        self.connid = connid;
    }

    /// Answers a WHO with `name` (the endpoint's, of which this device is
    /// a part) rather than its own address.
    pub fn set_public_name(&mut self, name: RawAddr) {
        self.public = Some(name);
    }

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
            public: None,
            mtu,
            cfg,
            peers: Vec::new(),
            by_addr: FxHashMap::default(),
            by_sock: FxHashMap::default(),
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
            work: Vec::new(),
            watch: Vec::new(),
            rdma_marked: Vec::new(),
            recent: Vec::new(),
            acks: Vec::new(),
            next_scan: Instant::now(),
            scratch: (Acked::default(), Vec::new()),
            kept: VecDeque::new(),
            kept_bytes: 0,
            away: false,
            next_liveness: Instant::now(),
            next_ask: Instant::now(),
            asked: 0,
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

#[cfg(test)]
mod tests;
