//! The udp device's settings: defaults and their environment variables.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::time::Duration;

use crate::env;
use crate::status::Status;

/// Fault injection: a seeded, reproducible share of datagrams dropped,
/// duplicated, reordered and delayed, applied to every datagram sent.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Share of datagrams dropped (0 to 1).
    pub drop: f64,
    /// Share of datagrams sent twice.
    pub dup: f64,
    /// Share of datagrams held back and sent after the next ones.
    pub reorder: f64,
    /// Datagrams held back (reordered ones) wait this long at least.
    pub delay_us: u64,
    /// Seed of the choices.
    pub seed: u64,
}

impl Faults {
    /// Whether any fault is asked for.
    pub fn any(&self) -> bool {
        self.drop > 0.0 || self.dup > 0.0 || self.reorder > 0.0
    }

    /// Parses `drop=0.1,dup=0.05,reorder=0.1,delay_us=50,seed=7` (any
    /// subset, any order).
    pub fn parse(text: &str) -> Option<Faults> {
        let mut f = Faults { seed: 1, ..Faults::default() };
        for item in text.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=')?;
            let share = || v.parse::<f64>().ok().filter(|x| (0.0..=1.0).contains(x));
            match k {
                "drop" => f.drop = share()?,
                "dup" => f.dup = share()?,
                "reorder" => f.reorder = share()?,
                "delay_us" => f.delay_us = v.parse().ok().filter(|&d| d <= 1_000_000)?,
                "seed" => f.seed = v.parse().ok()?,
                _ => return None,
            }
        }
        Some(f)
    }
}

/// Settings of a udp endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpConfig {
    /// The address to bind and publish; `None`: the host's primary address
    /// (that of the interface of the default route), else loopback.
    pub addr: Option<IpAddr>,
    /// The UDP port (0: any free one).
    pub port: u16,
    /// Largest EFA RDM packet (`None`: what the interface's MTU allows, less
    /// the IP, UDP and device headers; at most 65,000 on loopback).
    pub mtu: Option<usize>,
    /// A peer that has not acknowledged a datagram for this long is given
    /// up: every operation towards it completes with `RDM4_EPEER`.
    pub giveup: Duration,
    /// Socket buffer sizes asked of the kernel (`None`: its default).
    pub sock_buf: Option<usize>,
    /// Injected faults.
    pub faults: Faults,
    /// Offer RDMA read and write (false: the engine emulates RMA with its
    /// own packets, as towards a NIC without RDMA).
    pub rdma: bool,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            addr: None,
            port: 0,
            mtu: None,
            giveup: Duration::from_secs(5),
            sock_buf: None,
            faults: Faults::default(),
            rdma: true,
        }
    }
}

impl UdpConfig {
    /// The defaults, overridden by the `RDM4_UDP_*` environment variables
    /// (strictly parsed, see `crate::env`).
    pub fn from_env() -> Result<UdpConfig, Status> {
        let mut c = UdpConfig::default();
        if let Some(v) = env::var("RDM4_UDP_ADDR") {
            let ip = v.parse::<IpAddr>().ok().or_else(|| interface_addr(&v));
            match ip {
                Some(ip) if !ip.is_unspecified() && !ip.is_multicast() => c.addr = Some(ip),
                _ => {
                    return Err(env::reject(
                        "RDM4_UDP_ADDR",
                        &v,
                        "an IPv4 or IPv6 address of this host, or an interface name",
                    ))
                }
            }
        }
        if let Some(p) = env::number("RDM4_UDP_PORT", 0..=u16::MAX)? {
            c.port = p;
        }
        c.mtu = env::number("RDM4_UDP_MTU", 256..=65_000usize)?;
        if let Some(ms) = env::number("RDM4_UDP_GIVEUP_MS", 10..=3_600_000u64)? {
            c.giveup = Duration::from_millis(ms);
        }
        c.sock_buf = env::number("RDM4_UDP_SOCKBUF", 4096..=(1usize << 30))?;
        if let Some(i) = env::word("RDM4_UDP_RDMA", &["0", "1"])? {
            c.rdma = i == 1;
        }
        if let Some(v) = env::var("RDM4_UDP_FAULTS") {
            c.faults = Faults::parse(&v).ok_or_else(|| {
                env::reject("RDM4_UDP_FAULTS", &v, "drop=P,dup=P,reorder=P,delay_us=N,seed=N (P from 0 to 1)")
            })?;
        }
        Ok(c)
    }
}

/// Every (interface name, address) pair of the host, IPv4 and IPv6.
fn interfaces() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut p = list;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: `ifa_addr` points to a sockaddr of the family it states.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sa = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    Some(IpAddr::from(u32::from_be(sa.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => Some(IpAddr::from((*ifa.ifa_addr.cast::<libc::sockaddr_in6>()).sin6_addr.s6_addr)),
                _ => None,
            }
        };
        if let Some(ip) = ip {
            // SAFETY: a NUL-terminated name from getifaddrs.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
            out.push((name, ip));
        }
    }
    // SAFETY: freeing the list getifaddrs made.
    unsafe { libc::freeifaddrs(list) };
    out
}

/// The first address of interface `name` (IPv4 first), if there is one.
fn interface_addr(name: &str) -> Option<IpAddr> {
    let mine: Vec<IpAddr> = interfaces().into_iter().filter(|(n, _)| n == name).map(|(_, ip)| ip).collect();
    mine.iter().find(|ip| ip.is_ipv4()).or(mine.first()).copied()
}

/// The host's primary address: the source the kernel picks towards a
/// documentation address (no datagram is sent); on a host with no default
/// route (compute nodes of isolated clusters often have none) the first
/// IPv4 address of an interface other than loopback; else loopback.
pub(crate) fn primary_addr() -> IpAddr {
    let probe = || -> Option<IpAddr> {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
        s.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).ok()?;
        Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_unspecified())
    };
    let first_interface = || {
        interfaces().into_iter().map(|(_, ip)| ip).find(|ip| ip.is_ipv4() && !ip.is_loopback() && !ip.is_unspecified())
    };
    probe().or_else(first_interface).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The MTU of the interface that holds `ip` (from sysfs), if known.
pub(crate) fn interface_mtu(ip: IpAddr) -> Option<usize> {
    if ip.is_loopback() {
        return Some(65536);
    }
    let (name, _) = interfaces().into_iter().find(|(_, a)| *a == ip)?;
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?;
    text.trim().parse().ok()
}

/// An int option of the socket `fd` at `SOL_SOCKET` (`None`: the kernel
/// refused).
pub(crate) fn sock_opt(fd: std::os::fd::RawFd, opt: libc::c_int) -> Option<usize> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int option read into `v`, of `len` bytes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&mut v as *mut libc::c_int).cast(), &mut len) };
    (r == 0).then_some(v).and_then(|v| usize::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_strictly() {
        let f = Faults::parse("drop=0.1,dup=0.05,reorder=0.1,delay_us=50,seed=7").unwrap();
        assert_eq!(f, Faults { drop: 0.1, dup: 0.05, reorder: 0.1, delay_us: 50, seed: 7 });
        assert!(f.any());
        assert_eq!(Faults::parse("").map(|f| f.any()), Some(false));
        for bad in ["drop=2", "drop=x", "loss=0.1", "drop", "delay_us=-1", "seed=a"] {
            assert!(Faults::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn loopback_has_a_large_mtu_and_lo_names_loopback() {
        assert_eq!(interface_mtu(IpAddr::V4(Ipv4Addr::LOCALHOST)), Some(65536));
        assert_eq!(interface_addr("lo"), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(interface_addr("no-such-if0"), None);
    }
}
