//! The udp device's socket fast path: datagrams leave in batches and
//! arrive in batches, a handful of system calls for many packets.
//!
//! - Sending: datagrams for one destination queue in a [`TxBatch`] and
//!   leave as one `sendmsg` with UDP generic segmentation offload
//!   (`UDP_SEGMENT`): the kernel walks its stack once for the whole batch
//!   and cuts it into datagrams as late as it can (on loopback and veth,
//!   not at all until the receiving socket). A batch holds datagrams of
//!   one size, of which the last may be shorter, at most [`GSO_SEGS`] of
//!   them and [`GSO_BYTES`] in all, as the kernel requires. A datagram of
//!   another destination or a larger size closes the batch first.
//!   Datagrams too large to share a batch go alone. The device sends a
//!   batch when the engine rings its doorbell (the end of every call that
//!   queued packets) and before it blocks, receives or closes, so a
//!   packet never waits for a later call.
//!   A kernel without UDP GSO (the call fails with `EIO`, `EINVAL` or
//!   `ENOPROTOOPT`) gets the batch as one `sendmmsg` of single datagrams,
//!   and the device stops asking for GSO.
//! - Receiving: `recvmmsg` takes up to [`RX_SLOTS`] datagrams per call,
//!   and with UDP generic receive offload (`UDP_GRO`) on the socket a
//!   slot may hold many datagrams of one sender, cut apart here by the
//!   segment size the kernel reports. Datagrams taken from the socket but
//!   not yet handed to the engine (it stopped the call) wait in the
//!   [`RxBatch`] for the next call.
//! - Errors the network reports: the socket asks for them (`IP_RECVERR`,
//!   `IPV6_RECVERR`), so that an ICMP "port unreachable" from a peer's
//!   host (its process ended and the kernel closed its socket) is seen at
//!   once. A send or receive that fails with such an error (the kernel
//!   reports the last one on the next call on the socket, whatever its
//!   destination) marks the batch ([`TxBatch::errors`],
//!   [`RxBatch::errors`]); a send is then tried once more, and the device
//!   reads the reports themselves, each naming the address that failed,
//!   with [`take_errors`].

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// `SOL_UDP`, `UDP_SEGMENT`, `UDP_GRO` (linux/udp.h; not in every libc crate target).
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64
/// on older kernels, 128 on newer).
pub(crate) const GSO_SEGS: usize = 64;
/// Most bytes in one GSO send: the whole must fit one IP datagram's
/// 16-bit length with IPv6 and UDP headers.
pub(crate) const GSO_BYTES: usize = 65_000;
/// Receive slots per `recvmmsg`.
pub(crate) const RX_SLOTS: usize = 8;
/// Bytes of one receive slot: the largest datagram or GRO batch.
const SLOT: usize = 65_536;

/// A socket address for the kernel.
struct RawSockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

fn raw_sockaddr(a: SocketAddr) -> RawSockAddr {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    RawSockAddr { storage, len: len as libc::socklen_t }
}

/// The socket address the kernel wrote (`None`: a family we do not speak).
fn socket_addr_of(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in for AF_INET.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read((s as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 for AF_INET6.
            let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read((s as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, port, u32::from_be(sin6.sin6_flowinfo), sin6.sin6_scope_id)))
        }
        _ => None,
    }
}

/// Sets an int socket option to 1; false when the kernel refuses.
fn set_on(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: an int option on our socket.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Asks the kernel to hand over coalesced datagrams (`UDP_GRO`); false
/// when it cannot.
pub(crate) fn enable_gro(fd: RawFd) -> bool {
    set_on(fd, SOL_UDP, UDP_GRO)
}

/// Asks the kernel to report the errors the network sends back for our
/// datagrams (ICMP unreachable) in the socket's error queue; false when
/// it cannot.
pub(crate) fn enable_errors(fd: RawFd, v6: bool) -> bool {
    if v6 {
        set_on(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        set_on(fd, libc::IPPROTO_IP, libc::IP_RECVERR)
    }
}

/// Whether a failed socket call reports an error the network sent back
/// for an earlier datagram (rather than a full buffer or a bad call).
fn network_error(e: i32) -> bool {
    matches!(e, libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN)
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Reads the socket's error queue (see the module docs) into `out`: for
/// each report, the destination the failed datagram was sent to and the
/// error (`ECONNREFUSED`: no socket at that port any more). At most 256
/// reports a call; returns how many.
pub(crate) fn take_errors(fd: RawFd, out: &mut Vec<(SocketAddr, i32)>) -> usize {
    let mut n = 0;
    while n < 256 {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        // SAFETY: plain old data; all-zero is valid.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut cbuf = [0u64; 32];
        // SAFETY: plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: every pointer in `msg` is valid for the call.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            break; // EAGAIN: the queue is empty
        }
        n += 1;
        let errno = extended_errno(&msg);
        if let (Some(to), Some(e)) = (socket_addr_of(&name), errno) {
            out.push((to, e));
        }
    }
    n
}

/// The error of an error-queue message (`sock_extended_err.ee_errno`).
fn extended_errno(msg: &libc::msghdr) -> Option<i32> {
    // SAFETY: walks the control data the kernel wrote within msg_controllen;
    // a RECVERR message's data begins with a sock_extended_err.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if (level == libc::IPPROTO_IP && ty == libc::IP_RECVERR)
                || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_RECVERR)
            {
                let ee = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::sock_extended_err>());
                return i32::try_from(ee.ee_errno).ok();
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// Datagrams queued for one destination (see the module docs).
pub(crate) struct TxBatch {
    to: Option<SocketAddr>,
    /// The segment size: the first datagram's length.
    seg: usize,
    /// The datagrams, back to back.
    buf: Vec<u8>,
    n: usize,
    /// The last datagram was shorter than `seg`: nothing may follow it.
    closed: bool,
    /// UDP GSO works on this socket (until a send says otherwise).
    pub gso: bool,
    /// A send failed with an error the network reported (see the module
    /// docs): the error queue has reports to read.
    pub errors: bool,
    /// System calls made and datagrams sent, for the statistics.
    pub calls: u64,
    pub sent: u64,
}

impl TxBatch {
    pub(crate) fn new() -> TxBatch {
        TxBatch {
            to: None,
            seg: 0,
            buf: Vec::with_capacity(GSO_BYTES),
            n: 0,
            closed: false,
            gso: true,
            errors: false,
            calls: 0,
            sent: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Queues `dgram` for `to`, sending what is queued first when it
    /// cannot join it.
    pub(crate) fn push(&mut self, fd: RawFd, to: SocketAddr, dgram: &[u8]) {
        let len = dgram.len();
        if len * 2 > GSO_BYTES {
            self.flush(fd);
            self.send_one(fd, to, dgram);
            return;
        }
        if self.n > 0
            && (self.to != Some(to)
                || self.closed
                || len > self.seg
                || self.n >= GSO_SEGS
                || self.buf.len() + len > GSO_BYTES)
        {
            self.flush(fd);
        }
        if self.n == 0 {
            self.to = Some(to);
            self.seg = len;
        }
        self.closed = len < self.seg;
        self.buf.extend_from_slice(dgram);
        self.n += 1;
    }

    /// Sends what is queued. A full socket buffer loses the batch as the
    /// network would lose it: the retransmission timer covers it.
    pub(crate) fn flush(&mut self, fd: RawFd) {
        let Some(to) = self.to.take() else { return };
        let n = std::mem::take(&mut self.n);
        if n == 1 {
            let buf = std::mem::take(&mut self.buf);
            self.send_one(fd, to, &buf);
            self.buf = buf;
        } else if !self.gso || !self.send_gso(fd, to) {
            self.send_each(fd, to);
        }
        self.buf.clear();
        self.closed = false;
    }

    fn send_one(&mut self, fd: RawFd, to: SocketAddr, dgram: &[u8]) {
        let a = raw_sockaddr(to);
        self.sent += 1;
        // Twice at most: a network error of an earlier datagram fails the
        // first try (and is cleared by it).
        for _ in 0..2 {
            self.calls += 1;
            // SAFETY: the buffer and address are valid for the call.
            let r = unsafe {
                libc::sendto(
                    fd,
                    dgram.as_ptr().cast(),
                    dgram.len(),
                    libc::MSG_DONTWAIT,
                    (&a.storage as *const libc::sockaddr_storage).cast(),
                    a.len,
                )
            };
            if r >= 0 || !self.note_error() {
                return;
            }
        }
    }

    /// After a failed send: true when it failed for an error the network
    /// reported (then `errors` is set and the send may be tried again).
    fn note_error(&mut self) -> bool {
        let e = network_error(last_errno());
        self.errors |= e;
        e
    }

    /// One `sendmsg` with `UDP_SEGMENT`; false when the kernel refused GSO
    /// itself (then `gso` is off from now on).
    fn send_gso(&mut self, fd: RawFd, to: SocketAddr) -> bool {
        let mut a = raw_sockaddr(to);
        let mut iov = libc::iovec { iov_base: self.buf.as_mut_ptr().cast(), iov_len: self.buf.len() };
        // Room for one cmsg of a u16, aligned as the kernel wants.
        let mut cbuf = [0u64; 4];
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut a.storage as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = a.len;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
        // SAFETY: the control buffer holds CMSG_SPACE(2) bytes (32 >= 24),
        // so CMSG_FIRSTHDR is non-null and its data has room for a u16.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), self.seg as u16);
        }
        for _ in 0..2 {
            self.calls += 1;
            // SAFETY: every pointer in `msg` is valid for the call.
            let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
            if r >= 0 {
                self.sent += self.buf.len().div_ceil(self.seg) as u64;
                return true;
            }
            let e = last_errno();
            if matches!(e, libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP) {
                self.gso = false;
                return false;
            }
            if !network_error(e) {
                break;
            }
            self.errors = true; // and once more
        }
        true // EAGAIN and the like: lost like the network loses it
    }

    /// The batch as one `sendmmsg` of its datagrams.
    fn send_each(&mut self, fd: RawFd, to: SocketAddr) {
        let mut a = raw_sockaddr(to);
        let seg = self.seg;
        let mut iovs: Vec<libc::iovec> = self
            .buf
            .chunks_mut(seg)
            .map(|c| libc::iovec { iov_base: c.as_mut_ptr().cast(), iov_len: c.len() })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .map(|iov| {
                // SAFETY: mmsghdr is plain old data; all-zero is valid.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = (&mut a.storage as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_namelen = a.len;
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let (mut done, mut retried) = (0, false);
        while done < msgs.len() {
            self.calls += 1;
            let rest = &mut msgs[done..];
            // SAFETY: every message points into `iovs`, `self.buf` and `a`, alive for the call.
            let r = unsafe { libc::sendmmsg(fd, rest.as_mut_ptr(), rest.len() as libc::c_uint, libc::MSG_DONTWAIT) };
            if r <= 0 {
                if !retried && self.note_error() {
                    retried = true;
                    continue;
                }
                break; // a full socket buffer: the rest is lost like the network loses it
            }
            done += r as usize;
            self.sent += r as u64;
        }
    }
}

/// What the kernel wrote into one receive slot.
#[derive(Clone, Copy, Default)]
struct Slot {
    len: usize,
    from: Option<SocketAddr>,
    /// The GRO segment size (0: one datagram).
    seg: usize,
}

/// Datagrams taken from the socket and not yet handed over.
#[derive(Default)]
pub(crate) struct RxBatch {
    bufs: Vec<u8>,
    slots: Vec<Slot>,
    /// The senders' addresses and the control data of each slot, as the
    /// kernel writes them.
    names: Vec<libc::sockaddr_storage>,
    cbufs: Vec<[u64; 4]>,
    count: usize,
    /// The next slot, and the offset of its next datagram.
    next: usize,
    off: usize,
    /// `recvmmsg` calls made, for the statistics.
    pub calls: u64,
    /// A receive failed with an error the network reported: the error
    /// queue has reports to read.
    pub errors: bool,
}

impl RxBatch {
    pub(crate) fn new() -> RxBatch {
        RxBatch {
            bufs: vec![0u8; RX_SLOTS * SLOT],
            slots: vec![Slot::default(); RX_SLOTS],
            // SAFETY: plain old data; all-zero is valid.
            names: vec![unsafe { std::mem::zeroed() }; RX_SLOTS],
            cbufs: vec![[0; 4]; RX_SLOTS],
            count: 0,
            next: 0,
            off: 0,
            calls: 0,
            errors: false,
        }
    }

    /// Whether the last fill took as many datagrams as there are slots
    /// (more may wait in the socket).
    pub(crate) fn full(&self) -> bool {
        self.count == RX_SLOTS
    }

    /// Whether datagrams wait here.
    pub(crate) fn has_pending(&self) -> bool {
        self.next < self.count
    }

    /// Takes what the socket holds, up to [`RX_SLOTS`] datagrams or GRO
    /// batches; false when nothing came. Only called once what was taken
    /// before has been handed over.
    pub(crate) fn fill(&mut self, fd: RawFd) -> bool {
        debug_assert!(!self.has_pending());
        let want = RX_SLOTS;
        let mut iovs = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; RX_SLOTS];
        // SAFETY: plain old data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; RX_SLOTS] = unsafe { std::mem::zeroed() };
        for i in 0..want {
            iovs[i] = libc::iovec { iov_base: self.bufs[i * SLOT..].as_mut_ptr().cast(), iov_len: SLOT };
            let m = &mut msgs[i].msg_hdr;
            m.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            m.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_iov = &mut iovs[i];
            m.msg_iovlen = 1;
            m.msg_control = self.cbufs[i].as_mut_ptr().cast();
            m.msg_controllen = std::mem::size_of::<[u64; 4]>() as _;
        }
        self.calls += 1;
        // SAFETY: the first `want` messages point into `self.names`,
        // `iovs`, `self.cbufs` and `self.bufs`, alive for the call.
        let r = unsafe {
            libc::recvmmsg(fd, msgs.as_mut_ptr(), want as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r <= 0 {
            self.count = 0;
            self.next = 0;
            self.errors |= r < 0 && network_error(last_errno());
            return false;
        }
        let r = r as usize;
        for (i, slot) in self.slots.iter_mut().enumerate().take(r) {
            let (len, from, seg) =
                (msgs[i].msg_len as usize, socket_addr_of(&self.names[i]), gro_size(&msgs[i].msg_hdr));
            *slot = Slot { len, from, seg };
        }
        self.count = r;
        self.next = 0;
        self.off = 0;
        true
    }

    /// The next datagram taken: its sender and bytes (sender `None`: an
    /// address family we do not speak; drop it).
    pub(crate) fn next(&mut self) -> Option<(Option<SocketAddr>, &[u8])> {
        if !self.has_pending() {
            return None;
        }
        let i = self.next;
        let Slot { len, from, seg } = self.slots[i];
        let seg = if seg == 0 { len } else { seg };
        let at = self.off;
        let end = (at + seg).min(len);
        if end >= len {
            self.next += 1;
            self.off = 0;
        } else {
            self.off = end;
        }
        Some((from, &self.bufs[i * SLOT + at..i * SLOT + end]))
    }
}

/// The segment size of a GRO batch in `msg`'s control data (0: none).
fn gro_size(msg: &libc::msghdr) -> usize {
    // SAFETY: walks the control data the kernel wrote within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// Takes every datagram that arrives within 2 s, until `want` came.
    fn take_all(rx: &mut RxBatch, fd: RawFd, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.len() < want && t.elapsed() < std::time::Duration::from_secs(2) {
            if !rx.fill(fd) {
                continue;
            }
            while let Some((from, d)) = rx.next() {
                assert!(from.is_some());
                got.push(d.to_vec());
            }
        }
        got
    }

    #[test]
    fn a_batch_of_datagrams_arrives_as_the_same_datagrams_with_gro_and_without() {
        for gro in [false, true] {
            let (a, b) = pair();
            if gro {
                assert!(enable_gro(b.as_raw_fd()));
            }
            let to = b.local_addr().unwrap();
            let mut tx = TxBatch::new();
            // 100 of 60 bytes (two batches), one short one that closes
            // the batch, then larger ones (a new batch), one alone.
            let mut sent: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 60]).collect();
            sent.push(vec![200; 7]);
            sent.extend((0..5u8).map(|i| vec![i + 100; 1400]));
            sent.push(vec![9; 40_000]);
            for d in &sent {
                tx.push(a.as_raw_fd(), to, d);
            }
            tx.flush(a.as_raw_fd());
            assert!(tx.is_empty());
            assert_eq!(tx.sent, sent.len() as u64);
            assert!(tx.calls < 10, "{} calls for {} datagrams", tx.calls, sent.len());
            let mut rx = RxBatch::new();
            let mut got = take_all(&mut rx, b.as_raw_fd(), sent.len());
            got.sort();
            sent.sort();
            assert_eq!(got, sent, "gro {gro}");
        }
    }

    #[test]
    fn without_gso_a_batch_goes_as_one_sendmmsg_of_single_datagrams() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let mut tx = TxBatch::new();
        tx.gso = false;
        let mut sent: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100]).collect();
        for d in &sent {
            tx.push(a.as_raw_fd(), to, d);
        }
        tx.flush(a.as_raw_fd());
        // One sendmmsg.
        assert_eq!((tx.calls, tx.sent), (1, 20));
        let mut rx = RxBatch::new();
        let mut got = take_all(&mut rx, b.as_raw_fd(), sent.len());
        got.sort();
        sent.sort();
        assert_eq!(got, sent);
    }
}
