//! Packet capture: `RDM4_PCAP=FILE` writes every EFA RDM packet an
//! endpoint sends and receives to a pcap file that Wireshark and `tshark`
//! decode with the dissector `tools/wireshark/rdm4.lua`.
//!
//! # Where packets are caught
//!
//! [`Capture<D>`] wraps any [`Device`] and records what crosses the device
//! contract: each packet the engine hands to `send_with`, `send` or
//! `send_gather` (header and gathered payload, as one packet), and each
//! packet the device hands to the engine's `recv` or `recv_express`
//! callback. So every device (shm, udp, sim) is captured the same way, and
//! the engine — which reads no clock and holds no file — knows nothing of
//! it. The C API chooses at `rdm4_ep_open`: with `RDM4_PCAP` unset the
//! endpoint runs the engine over the bare device, so capture costs nothing
//! then, not even a branch per packet: `capi::CEp` holds the captured
//! engines behind one more variant whose calls are out of line, so the
//! bare engines stay inlined into the C calls (docs/performance.md, "cost
//! of packet capture (`RDM4_PCAP`) when it is off").
//!
//! A received packet is recorded when the engine takes it: one it leaves
//! with the device (`Rx::Defer`, or declined by the express receive) is
//! taken back out of the buffer and recorded when it is handed over again
//! and taken. (Should the buffer have been written out in between, the
//! packet appears twice; the engine defers only at its unexpected limit.)
//!
//! The udp device's own header (sequence numbers, acknowledgements) and
//! its control datagrams (ACK, CLOSE, RDMA segments) are below the device
//! contract and not in these records (flag bit 0 is never set by rdm4
//! itself); capture them on the interface (`tcpdump -i lo udp`), where the
//! dissector decodes the udp device header and the EFA packet of each
//! datagram (`rdm4.lua` registers itself as a heuristic UDP dissector).
//!
//! # File format
//!
//! Classic pcap (magic `0xa1b2c3d4`, microsecond timestamps, snaplen
//! 262144), link type `LINKTYPE_USER0` (147). Each record is a 16-byte
//! pseudo-header, then the packet (cut to the snaplen; the record's
//! original length says how long it was):
//!
//! ```text
//! 0..4  "RDM4"            4 version 1        5 direction: 0 sent, 1 received
//! 6     device: 0 shm, 1 udp, 2 sim, 3 auto   7 flags: bit 0 the payload starts with the udp device header
//! 8..12 the peer's address handle, u32 LE (0xffffffff: unknown sender)
//! 12..16 reserved, zero
//! ```
//!
//! An endpoint over the auto device records each packet with the device
//! it took (shm or udp, by its peer's handle); byte 6 is 3 only for a
//! received packet whose sender is not in the address vector.
//!
//! # Files, errors, buffering
//!
//! `%p` in `FILE` becomes the process id, so each process of a job writes
//! its own file. Endpoints of one process that name the same file share it
//! (records interleave, each whole); a file a process created earlier and
//! closed is appended to, not truncated, when it names it again. A file
//! that cannot be created fails `rdm4_ep_open` with `RDM4_EIO` and a line
//! on stderr naming the variable, the file and the reason: whoever set the
//! variable wants the capture, and a job that ran without it would be
//! wasted. Records gather in a buffer of [`BUF_CAP`] bytes, written out when
//! full, when a record finds the last write a second old, and when the last
//! endpoint using the file closes. A write that fails is reported once
//! (`RDM4_LOG=warn`) and ends the capture to that file; the endpoint goes
//! on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::device::{Access, Ah, Caps, DevError, DevEvent, Device, Flow, InCall, Sent};
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RawAddr;

/// The environment variable naming the capture file.
pub const ENV: &str = "RDM4_PCAP";
/// pcap link type of the records (`LINKTYPE_USER0`).
pub const LINKTYPE: u32 = 147;
/// Longest record kept (pseudo-header included); longer packets are cut.
pub const SNAPLEN: usize = 262_144;
/// Length of the rdm4 pseudo-header that starts each record.
pub const PSEUDO_LEN: usize = 16;
/// Bytes gathered before they are written out.
pub const BUF_CAP: usize = 1 << 20;
/// The pseudo-header's `peer` when the sender is unknown.
pub const UNKNOWN_PEER: u32 = u32::MAX;
/// Pseudo-header flag: the packet starts with the udp device header.
pub const FLAG_UDP_HDR: u8 = 1;

/// A record's pcap header (timestamp and two lengths).
const REC_HDR: usize = 16;
/// Longest a record stays unwritten.
const FLUSH_AFTER: Duration = Duration::from_secs(1);

/// Which way a packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Dir {
    /// Sent by this endpoint.
    Sent = 0,
    /// Received by this endpoint.
    Received = 1,
}

/// The device a record comes from (the pseudo-header's byte 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DeviceKind {
    /// Shared memory.
    Shm = 0,
    /// UDP.
    Udp = 1,
    /// The in-process test device.
    Sim = 2,
    /// The auto device: each record says shm or udp by its peer's handle
    /// (bit 31: udp); 3 only for a received packet whose sender is not in
    /// the address vector (either device may have brought it).
    Auto = 3,
}

impl DeviceKind {
    /// The device a record of `peer` names: for auto, the one its handle
    /// says.
    fn of(self, peer: Option<Ah>) -> DeviceKind {
        match (self, peer) {
            (DeviceKind::Auto, Some(ah)) if ah & crate::device::auto::UDP != 0 => DeviceKind::Udp,
            (DeviceKind::Auto, Some(_)) => DeviceKind::Shm,
            (k, _) => k,
        }
    }
}

/// The file header of a classic pcap file.
fn file_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // 8..16: time zone and accuracy, zero.
    h[16..20].copy_from_slice(&(SNAPLEN as u32).to_le_bytes());
    h[20..24].copy_from_slice(&LINKTYPE.to_le_bytes());
    h
}

/// Where a record lies in the buffer, to take it back out.
#[derive(Debug, Clone, Copy)]
struct Mark {
    start: usize,
    end: usize,
    /// [`Sink::writes`] when it was made: the record is still in the
    /// buffer while that has not changed.
    writes: u64,
}

/// One capture file and its buffer.
struct Sink {
    path: PathBuf,
    /// `None` once a write failed.
    file: Option<File>,
    buf: Vec<u8>,
    /// How many times the buffer was written out.
    writes: u64,
    last_write: Instant,
}

impl Sink {
    /// Appends a record of `parts` (one packet) and returns where it lies.
    fn record(&mut self, dir: Dir, device: DeviceKind, peer: Option<Ah>, parts: [&[u8]; 2]) -> Option<Mark> {
        self.file.as_ref()?;
        let now = Instant::now();
        let orig = PSEUDO_LEN + parts[0].len() + parts[1].len();
        let incl = orig.min(SNAPLEN);
        if self.buf.len() + REC_HDR + incl > BUF_CAP || now.duration_since(self.last_write) >= FLUSH_AFTER {
            self.write_out();
        }
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let start = self.buf.len();
        let b = &mut self.buf;
        b.extend_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        b.extend_from_slice(&ts.subsec_micros().to_le_bytes());
        b.extend_from_slice(&(incl as u32).to_le_bytes());
        b.extend_from_slice(&(orig.min(u32::MAX as usize) as u32).to_le_bytes());
        b.extend_from_slice(b"RDM4");
        b.extend_from_slice(&[1, dir as u8, device.of(peer) as u8, 0]);
        b.extend_from_slice(&peer.unwrap_or(UNKNOWN_PEER).to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        let mut room = incl - PSEUDO_LEN;
        for p in parts {
            let n = p.len().min(room);
            b.extend_from_slice(&p[..n]);
            room -= n;
        }
        Some(Mark { start, end: self.buf.len(), writes: self.writes })
    }

    /// Takes the record at `m` back out, if it is still in the buffer.
    fn unrecord(&mut self, m: Mark) {
        if m.writes == self.writes && m.end <= self.buf.len() {
            self.buf.drain(m.start..m.end);
        }
    }

    /// Writes the buffer to the file.
    fn write_out(&mut self) {
        self.last_write = Instant::now();
        if self.buf.is_empty() {
            return;
        }
        self.writes += 1;
        if let Some(f) = &mut self.file {
            if let Err(e) = f.write_all(&self.buf) {
                crate::log::log!(
                    crate::log::WARN,
                    "{ENV}: writing {} failed ({e}): capture ended",
                    self.path.display()
                );
                self.file = None;
            }
        }
        self.buf.clear();
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.write_out();
    }
}

/// A capture file, shared by the endpoints of a process that name it.
#[derive(Clone)]
pub struct PcapFile(Arc<Mutex<Sink>>);

/// The files open in this process, and every file it created (to append
/// to, not truncate, when named again).
static FILES: Mutex<Vec<(PathBuf, Weak<Mutex<Sink>>)>> = Mutex::new(Vec::new());

impl PcapFile {
    /// Opens (or joins) the capture file `template`, `%p` replaced by the
    /// process id. Errors are the OS's.
    pub fn open(template: &str) -> std::io::Result<PcapFile> {
        let path = PathBuf::from(template.replace("%p", &std::process::id().to_string()));
        let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
        let known = files.iter().position(|(p, _)| *p == path);
        if let Some(sink) = known.and_then(|i| files[i].1.upgrade()) {
            return Ok(PcapFile(sink));
        }
        let file = if known.is_some() {
            OpenOptions::new().append(true).open(&path)?
        } else {
            let mut f = File::create(&path)?;
            f.write_all(&file_header())?;
            f
        };
        let sink = Sink {
            path: path.clone(),
            file: Some(file),
            buf: Vec::with_capacity(BUF_CAP),
            writes: 0,
            last_write: Instant::now(),
        };
        let shared = Arc::new(Mutex::new(sink));
        match known {
            Some(i) => files[i].1 = Arc::downgrade(&shared),
            None => files.push((path, Arc::downgrade(&shared))),
        }
        Ok(PcapFile(shared))
    }

    /// The file `RDM4_PCAP` names, `None` when unset; one that cannot be
    /// created is `Status::Io` after a line on stderr.
    pub(crate) fn from_env() -> Result<Option<PcapFile>, Status> {
        let Some(template) = crate::env::var("RDM4_PCAP") else { return Ok(None) };
        PcapFile::open(&template).map(Some).map_err(|e| {
            eprintln!(
                "rdm4: {ENV}={template:?}: cannot create the capture file: {e}; the endpoint is not opened (RDM4_EIO)"
            );
            Status::Io
        })
    }

    fn lock(&self) -> MutexGuard<'_, Sink> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes out what is buffered.
    pub fn flush(&self) {
        self.lock().write_out();
    }
}

/// A device whose packets are recorded (see the module docs).
pub struct Capture<D> {
    inner: D,
    file: PcapFile,
    kind: DeviceKind,
}

impl<D: Device> Capture<D> {
    /// Records the packets of `inner` (a device of `kind`) to `file`.
    pub fn new(inner: D, file: PcapFile, kind: DeviceKind) -> Capture<D> {
        Capture { inner, file, kind }
    }

    /// The device captured.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The device captured, mutable.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }
}

/// Records one packet of `kind` to `file`.
fn record(file: &PcapFile, kind: DeviceKind, dir: Dir, peer: Option<Ah>, parts: [&[u8]; 2]) -> Option<Mark> {
    file.lock().record(dir, kind, peer, parts)
}

/// Records a received packet, hands it to `f`, and takes the record back
/// when `f` leaves the packet with the device (`kept` says so of its
/// verdict).
fn received<R>(
    file: &PcapFile,
    kind: DeviceKind,
    peer: Option<Ah>,
    parts: [&[u8]; 2],
    f: impl FnOnce() -> R,
    kept: impl FnOnce(&R) -> bool,
) -> R {
    let mark = record(file, kind, Dir::Received, peer, parts);
    let verdict = f();
    if let Some(m) = mark.filter(|_| kept(&verdict)) {
        file.lock().unrecord(m);
    }
    verdict
}

impl<D> Drop for Capture<D> {
    fn drop(&mut self) {
        self.file.flush();
    }
}

impl<D: Device> Device for Capture<D> {
    // Extensions pass through, but for the express receive, whose packets
    // are recorded as `recv`'s are.
    type Sleep = D::Sleep;
    type Responder = D::Responder;
    type MoreFollows = D::MoreFollows;
    type Doorbell = D::Doorbell;
    type Mapped = D::Mapped;
    type InCall = Self;

    fn caps(&self) -> Caps {
        self.inner.caps()
    }

    fn local_addr(&self) -> RawAddr {
        self.inner.local_addr()
    }

    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status> {
        self.inner.insert(addr)
    }

    // A capture must not change what the endpoint does: each peer keeps its
    // device's packet size and raw address (the auto device's differ per
    // peer).
    fn peer_caps(&self, ah: Ah) -> Caps {
        self.inner.peer_caps(ah)
    }

    fn local_addr_for(&self, ah: Ah) -> RawAddr {
        self.inner.local_addr_for(ah)
    }

    fn caps_epoch(&self) -> u32 {
        self.inner.caps_epoch()
    }

    fn remove(&mut self, ah: Ah) {
        self.inner.remove(ah)
    }

    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        let (file, kind) = (&self.file, self.kind);
        self.inner.send_with(ah, wr_id, max_len, |buf: &mut [u8]| {
            let n = build(buf);
            if let Some(pkt) = buf.get(..n).filter(|p| !p.is_empty()) {
                record(file, kind, Dir::Sent, Some(ah), [pkt, &[]]);
            }
            n
        })
    }

    fn send_gather(
        &mut self,
        ah: Ah,
        wr_id: u64,
        hdr_max: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
        payload: UserBuf,
    ) -> Result<Sent, DevError> {
        let (file, kind) = (&self.file, self.kind);
        let wrapped = |buf: &mut [u8]| {
            let n = build(buf);
            if let Some(hdr) = buf.get(..n).filter(|p| !p.is_empty()) {
                payload.with_slice(|data| record(file, kind, Dir::Sent, Some(ah), [hdr, data]));
            }
            n
        };
        self.inner.send_gather(ah, wr_id, hdr_max, wrapped, payload)
    }

    fn control_next(&mut self) {
        self.inner.control_next()
    }

    fn recv<R: Flow>(&mut self, max: usize, mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        let (file, kind) = (&self.file, self.kind);
        self.inner.recv(max, |ah, bytes: &[u8], gathered: Option<UserBuf>| {
            let data = gathered.unwrap_or_else(UserBuf::empty);
            data.with_slice(|d| received(file, kind, ah, [bytes, d], || f(ah, bytes, gathered), R::defer))
        })
    }

    fn redeliver(&mut self) {
        self.inner.redeliver()
    }

    fn events(&mut self, out: &mut Vec<DevEvent>) {
        self.inner.events(out)
    }

    fn awaiting(&mut self, ah: Ah) {
        self.inner.awaiting(ah)
    }

    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        self.inner.reg(buf, access)
    }

    fn dereg(&mut self, key: u64) -> Result<(), Status> {
        self.inner.dereg(key)
    }

    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.inner.rdma_read(ah, local, remote_addr, key, wr_id)
    }

    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.inner.rdma_write(ah, local, remote_addr, key, wr_id)
    }

    fn rdma_write_imm(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        imm: u32,
        wr_id: u64,
    ) -> Result<(), DevError> {
        self.inner.rdma_write_imm(ah, local, remote_addr, key, imm, wr_id)
    }

    fn as_sleep(&mut self) -> Option<&mut D::Sleep> {
        self.inner.as_sleep()
    }

    fn as_sleeper(&self) -> Option<&D::Sleep> {
        self.inner.as_sleeper()
    }

    fn as_responder(&mut self) -> Option<&mut D::Responder> {
        self.inner.as_responder()
    }

    fn as_more_follows(&mut self) -> Option<&mut D::MoreFollows> {
        self.inner.as_more_follows()
    }

    fn as_doorbell(&mut self) -> Option<&mut D::Doorbell> {
        self.inner.as_doorbell()
    }

    fn as_mapped(&mut self) -> Option<&mut D::Mapped> {
        self.inner.as_mapped()
    }

    fn as_in_call(&mut self) -> Option<&mut Self> {
        self.inner.as_in_call()?;
        Some(self)
    }

    fn as_in_call_ref(&self) -> Option<&Self> {
        self.inner.as_in_call_ref()?;
        Some(self)
    }
}

/// The inner device's operations done in the call, its express receives
/// recorded.
impl<D: Device> InCall for Capture<D> {
    fn any_peer(&self) -> bool {
        self.inner.as_in_call_ref().is_some_and(|c| c.any_peer())
    }

    fn rdma_now(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, write: bool) -> Result<(), DevError> {
        let Some(c) = self.inner.as_in_call() else { return Err(DevError::Failed(Status::NotSup)) };
        c.rdma_now(ah, local, remote_addr, key, write)
    }

    fn rdma_in_call(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<(), DevError> {
        let Some(c) = self.inner.as_in_call() else { return Err(DevError::Failed(Status::NotSup)) };
        c.rdma_in_call(ah, local, remote_addr, key, write)
    }

    fn recv_express(&mut self, max: usize, mut f: impl FnMut(Ah, &[u8]) -> bool) -> (usize, bool) {
        let (file, kind) = (&self.file, self.kind);
        let Some(c) = self.inner.as_in_call() else { return (0, true) };
        c.recv_express(max, |ah, bytes: &[u8]| {
            received(file, kind, Some(ah), [bytes, &[]], || f(ah, bytes), |took| !*took)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{SimConfig, SimNet};
    use crate::device::Rx;
    use crate::mem::OwnedBuf;

    /// The records of a capture file: (direction, peer, packet).
    fn records(path: &std::path::Path) -> Vec<(u8, u32, Vec<u8>)> {
        let b = std::fs::read(path).unwrap();
        assert_eq!(b[..24], file_header());
        let (mut pos, mut out) = (24, Vec::new());
        while pos < b.len() {
            let incl = u32::from_le_bytes(b[pos + 8..pos + 12].try_into().unwrap()) as usize;
            let r = &b[pos + REC_HDR..pos + REC_HDR + incl];
            assert_eq!(r[..8], [b'R', b'D', b'M', b'4', 1, r[5], DeviceKind::Sim as u8, 0]);
            out.push((r[5], u32::from_le_bytes(r[8..12].try_into().unwrap()), r[PSEUDO_LEN..].to_vec()));
            pos += REC_HDR + incl;
        }
        out
    }

    #[test]
    fn each_packet_is_recorded_once_whole_and_a_deferred_one_when_it_is_taken() {
        let path = std::env::temp_dir().join(format!("rdm4-pcap-unit-{}.pcap", std::process::id()));
        let file = PcapFile::open(path.to_str().unwrap()).unwrap();
        let net = SimNet::new(SimConfig::default());
        let mut a = Capture::new(net.device(), file.clone(), DeviceKind::Sim);
        let mut b = Capture::new(net.device(), file, DeviceKind::Sim);
        let ah = a.insert(&b.local_addr()).unwrap();
        let back = b.insert(&a.local_addr()).unwrap();
        let (p1, p2, hdr) = (vec![1u8; 40], vec![2u8; 50], vec![3u8; 24]);
        let mut payload = OwnedBuf::from_slice(&[4u8; 300]);
        a.send_with(ah, 0, 64, |buf: &mut [u8]| {
            buf[..40].copy_from_slice(&p1);
            40
        })
        .unwrap();
        a.send(ah, &p2, 0).unwrap();
        let gathered = [&hdr[..], &[4u8; 300]].concat();
        a.send_gather(
            ah,
            9,
            24,
            |buf: &mut [u8]| {
                buf[..24].copy_from_slice(&hdr);
                24
            },
            payload.buf(),
        )
        .unwrap();
        // Nothing to send is no packet.
        a.send_with(ah, 0, 64, |_: &mut [u8]| 0).unwrap();
        while net.advance_to_next() {
            // The first packet is left with the device, then taken.
            let mut first = true;
            b.recv(16, |_, _, _| if std::mem::take(&mut first) { Rx::Defer } else { Rx::Next });
            b.redeliver();
            b.recv(16, |_, _, _| Rx::Next);
        }
        drop((a, b));
        let got = records(&path);
        std::fs::remove_file(&path).unwrap();
        let sent: Vec<_> = got.iter().filter(|r| r.0 == Dir::Sent as u8).cloned().collect();
        assert_eq!(sent, [(0, ah, p1.clone()), (0, ah, p2.clone()), (0, ah, gathered.clone())]);
        let mut received: Vec<_> = got.iter().filter(|r| r.0 == Dir::Received as u8).cloned().collect();
        assert_eq!(received.len(), 3, "each packet received is recorded once");
        received.sort();
        let mut want = vec![(1, back, p1), (1, back, p2), (1, back, gathered)];
        want.sort();
        assert_eq!(received, want);
    }

    #[test]
    fn a_file_named_again_is_shared_then_appended_to() {
        let path = std::env::temp_dir().join(format!("rdm4-pcap-again-{}-%p.pcap", std::process::id()));
        let real = std::path::PathBuf::from(path.to_str().unwrap().replace("%p", &std::process::id().to_string()));
        let one = PcapFile::open(path.to_str().unwrap()).unwrap();
        let two = PcapFile::open(path.to_str().unwrap()).unwrap();
        assert!(Arc::ptr_eq(&one.0, &two.0));
        one.lock().record(Dir::Sent, DeviceKind::Sim, Some(1), [&[9; 8], &[]]);
        drop((one, two));
        let three = PcapFile::open(path.to_str().unwrap()).unwrap();
        three.lock().record(Dir::Received, DeviceKind::Sim, None, [&[8; 4], &[]]);
        drop(three);
        let got = records(&real);
        std::fs::remove_file(&real).unwrap();
        assert_eq!(got, [(0, 1, vec![9; 8]), (1, UNKNOWN_PEER, vec![8; 4])]);
    }

    /// The methods of `impl_head`'s block (up to the next line that is
    /// only `}`) in `src`, by name.
    fn methods_of(src: &str, impl_head: &str) -> Vec<String> {
        let start = src.find(impl_head).expect(impl_head);
        let block = &src[start..];
        let end = block.find("\n}\n").unwrap_or(block.len());
        block[..end]
            .lines()
            .filter_map(|l| l.strip_prefix("    fn "))
            .map(|l| l.split(['(', '<']).next().unwrap_or("").to_string())
            .collect()
    }

    /// A wrapping device that forgets a method with a default silently
    /// changes what the endpoint does (a capture once did: auto's shm peers
    /// got udp-sized packets while captured). Every method of `Device`
    /// must be forwarded, but for those a default builds on the forwarded
    /// ones.
    #[test]
    fn the_capture_forwards_every_method_of_the_device_contract() {
        const BUILT_ON_OTHERS: &[&str] = &["send"]; // `send_with`
        let contract = methods_of(include_str!("device/mod.rs"), "pub trait Device");
        let forwarded = methods_of(include_str!("pcap.rs"), "impl<D: Device> Device for Capture<D>");
        assert!(contract.len() > 20, "the contract's methods were not found: {contract:?}");
        let missing: Vec<_> =
            contract.iter().filter(|m| !forwarded.contains(m) && !BUILT_ON_OTHERS.contains(&m.as_str())).collect();
        assert!(missing.is_empty(), "Capture does not forward {missing:?}");
    }
}
