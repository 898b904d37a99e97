//! Names by address: a socket that belongs to no endpoint asks the udp
//! port `host:port` whose endpoint is bound there (WHO), and the endpoint's
//! device answers with its name (NAME; layout in `dgram.rs`). So that a
//! program which knows only where a server listens (`RDM4_UDP_ADDR`,
//! `RDM4_UDP_PORT`; libfabric's node and service) gets the name
//! `rdm4_av_insert` takes (`rdm4_resolve`). A name carries a connid no
//! host name gives, so it cannot be made from the address alone.
//!
//! The device answers whatever it is doing: its application's calls, or
//! its responder while the application is away. A WHO is answered at most
//! as large as it came (the asker pads it), so a forged source gains no
//! amplification; the asker takes only a NAME from the address it asked,
//! to its own connid, with its nonce.

use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use super::dgram::{Hdr, Kind, HDR};
use super::UdpDevice;
use crate::status::Status;
use crate::wire::RawAddr;

/// Bytes of a name, and the least a WHO carries after its header.
const NAME_LEN: usize = 32;
/// The first wait for an answer; doubled on each silence up to `WAIT_MAX`.
const WAIT_FIRST: Duration = Duration::from_millis(20);
const WAIT_MAX: Duration = Duration::from_millis(320);

impl UdpDevice {
    /// Answers a WHO from `from` with this endpoint's name.
    pub(super) fn answer_who(&mut self, h: &Hdr, body: &[u8], from: SocketAddr) {
        if body.len() < NAME_LEN {
            self.stats.malformed += 1;
            return;
        }
        let name = self.public.unwrap_or_else(|| super::raw_of(self.local, self.connid));
        let mut d = [0u8; HDR + NAME_LEN];
        let kind = Kind::Name;
        Hdr {
            kind,
            flags: 0,
            src_connid: self.connid,
            dst_connid: h.src_connid,
            seq: h.seq,
            ack: 0,
            ack_bits: 0,
            window: 0,
        }
        .write(&mut d);
        d[HDR..].copy_from_slice(&name.to_bytes());
        // Best effort: a lost answer is asked again.
        let _ = self.sock.send_to(&d, from);
    }
}

/// The name of the endpoint whose udp device is bound at `node`
/// (a host name or an IP address) and `port`, asked for up to `timeout`.
///
/// `NoAddr`: `node` names no address; `PeerUnreachable`: nothing listens
/// there (the host said so until `timeout`); `TimedOut`: no answer came
/// (no host there, or a port that is no rdm4 endpoint's); `Io`: no socket.
pub fn resolve(node: &str, port: u16, timeout: Duration) -> Result<RawAddr, Status> {
    let targets: Vec<SocketAddr> = (node, port).to_socket_addrs().map_err(|_| Status::NoAddr)?.collect();
    if targets.is_empty() {
        return Err(Status::NoAddr);
    }
    let deadline = Instant::now() + timeout;
    let mut last = Status::TimedOut;
    // Each address of the name in turn, a share of the time each, the
    // last one taking what remains.
    for (i, &to) in targets.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let share = if i + 1 == targets.len() { left } else { left / (targets.len() - i) as u32 };
        match ask(to, Instant::now() + share) {
            Ok(name) => return Ok(name),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Asks `to` until `deadline`.
fn ask(to: SocketAddr, deadline: Instant) -> Result<RawAddr, Status> {
    let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.map_err(|_| Status::Io)?;
    let sock = UdpSocket::bind(any).map_err(|_| Status::Io)?;
    // Connected: a closed port's ICMP error comes back as a refusal.
    sock.connect(to).map_err(|_| Status::NoAddr)?;
    let nonce = super::random_u64();
    let (me, seq) = ((nonce >> 32) as u32 | 1, nonce as u32);
    let mut who = [0u8; HDR + NAME_LEN];
    Hdr { kind: Kind::Who, flags: 0, src_connid: me, dst_connid: 0, seq, ack: 0, ack_bits: 0, window: 0 }
        .write(&mut who);
    let mut wait = WAIT_FIRST;
    let mut refused = false;
    let mut buf = [0u8; 2048];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(if refused { Status::PeerUnreachable } else { Status::TimedOut });
        }
        refused = false;
        if let Err(e) = sock.send(&who) {
            refused = e.kind() == ErrorKind::ConnectionRefused;
        }
        let until = (now + wait).min(deadline);
        wait = (wait * 2).min(WAIT_MAX);
        // Answers until this round's wait is over.
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            sock.set_read_timeout(Some(left)).map_err(|_| Status::Io)?;
            match sock.recv(&mut buf) {
                Ok(n) => {
                    if let Some(name) = answer(&buf[..n], me, seq) {
                        return Ok(name);
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    // Nothing bound there yet: a server may be starting.
                    refused = true;
                    std::thread::sleep(left.min(WAIT_FIRST));
                    break;
                }
                Err(_) => break, // this round's wait is over
            }
        }
    }
}

/// The name a datagram carries, if it is the answer to WHO `seq` from `me`.
fn answer(d: &[u8], me: u32, seq: u32) -> Option<RawAddr> {
    let (h, body) = Hdr::parse(d)?;
    if h.kind != Kind::Name || h.dst_connid != me || h.seq != seq || body.len() < NAME_LEN {
        return None;
    }
    RawAddr::from_bytes(&body[..NAME_LEN])
}
