//! RDMA over the udp device (after RDMAP, RFC 5040): the requester's
//! writes and reads, the memory owner's checks and service. Segments are
//! reliable datagrams like any other, paced by the same windows.

use std::collections::VecDeque;
use std::time::Instant;

use super::dgram::{self, Kind, ReadReq, WriteSeg, HDR};
use super::UdpDevice;
use crate::device::{Access, Ah, DevError, DevEvent};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;

/// Writes being received from one peer at most (a peer naming more
/// operations at once is refused).
const WRITES_IN_MAX: usize = 4096;

/// An RDMA operation this endpoint started.
struct Op {
    wr_id: u64,
    peer: usize,
    write: bool,
    /// A write's immediate data (WRITE_IMM segments).
    imm: Option<u32>,
    buf: UserBuf,
    key: u64,
    addr: u64,
    /// Write: bytes sent so far. Read: whether the request went out.
    next: u64,
    /// Read: bytes received so far.
    got: u64,
}

/// A read this endpoint serves: the bytes of `buf` still to send.
struct Serve {
    peer: usize,
    op: u32,
    key: u64,
    buf: UserBuf,
    next: u64,
}

/// A write a peer is making into this endpoint's memory.
struct WriteIn {
    received: u64,
    failed: bool,
}

/// The RDMA state of a device.
#[derive(Default)]
pub(super) struct Rdma {
    /// Registrations: key -> (memory, access).
    pub(super) regs: FxHashMap<u64, (UserBuf, Access)>,
    ops: FxHashMap<u32, Op>,
    next_op: u32,
    /// Operations with datagrams still to send, in order.
    queue: VecDeque<u32>,
    serves: VecDeque<Serve>,
    writes_in: FxHashMap<(usize, u32), WriteIn>,
}

impl Rdma {
    pub(super) fn has_work(&self) -> bool {
        !self.ops.is_empty() || !self.serves.is_empty()
    }

    /// The peers that our RDMA operations wait for (one per operation).
    pub(super) fn requesters(&self) -> impl Iterator<Item = usize> + '_ {
        self.ops.values().map(|o| o.peer)
    }

    /// Fails every operation towards `peer` and drops what it asked of us.
    pub(super) fn peer_lost(&mut self, peer: usize, ah: Ah, events: &mut Vec<DevEvent>) {
        let mine: Vec<u32> = self.ops.iter().filter(|(_, o)| o.peer == peer).map(|(&k, _)| k).collect();
        for k in mine {
            if let Some(o) = self.ops.remove(&k) {
                events.push(DevEvent::SendDone { wr_id: o.wr_id, ah, status: Err(Status::PeerUnreachable) });
            }
        }
        self.queue.retain(|k| self.ops.contains_key(k));
        self.serves.retain(|s| s.peer != peer);
        self.writes_in.retain(|(p, _), _| *p != peer);
    }

    /// Stops the reads served from registration `key`; returns (peer, op) of each.
    pub(super) fn drop_serves_of(&mut self, key: u64) -> Vec<(usize, u32)> {
        let gone: Vec<(usize, u32)> = self.serves.iter().filter(|s| s.key == key).map(|s| (s.peer, s.op)).collect();
        self.serves.retain(|s| s.key != key);
        gone
    }

    /// The memory `[addr, addr + len)` of registration `key` when it grants `need`.
    fn check(&self, key: u64, addr: u64, len: u64, need: Access) -> Option<UserBuf> {
        let (buf, access) = self.regs.get(&key)?;
        if !access.contains(need) {
            return None;
        }
        let off = usize::try_from(addr.checked_sub(buf.addr())?).ok()?;
        buf.slice(off, usize::try_from(len).ok()?)
    }
}

impl UdpDevice {
    /// Starts an RDMA write (`write`: `Some(immediate data)`) or read
    /// (`None`) of `local` against the peer's `(addr, key)`.
    pub(super) fn rdma_start(
        &mut self,
        ah: Ah,
        local: UserBuf,
        addr: u64,
        key: u64,
        wr_id: u64,
        write: Option<Option<u32>>,
    ) -> Result<(), DevError> {
        if !self.cfg.rdma {
            return Err(DevError::Failed(Status::NotSup));
        }
        let peer = ah as usize;
        match self.peers.get(peer) {
            None => return Err(DevError::Failed(Status::NoAddr)),
            Some(p) if p.lost => return Err(DevError::Failed(Status::PeerUnreachable)),
            Some(_) => {}
        }
        if addr.checked_add(local.len() as u64).is_none() {
            return Err(DevError::Failed(Status::Inval));
        }
        let r = &mut self.rdma;
        r.next_op = r.next_op.wrapping_add(1).max(1);
        while r.ops.contains_key(&r.next_op) {
            r.next_op = r.next_op.wrapping_add(1).max(1);
        }
        let id = r.next_op;
        let op =
            Op { wr_id, peer, write: write.is_some(), imm: write.flatten(), buf: local, key, addr, next: 0, got: 0 };
        r.ops.insert(id, op);
        r.queue.push_back(id);
        self.pump(Instant::now());
        Ok(())
    }

    /// Sends what the window allows of the queued RDMA work: segments of
    /// writes, read requests, segments of reads being served.
    pub(super) fn pump(&mut self, now: Instant) {
        let seg_w = self.mtu - dgram::WRITE_HDR;
        let mut i = 0;
        while i < self.rdma.queue.len() {
            let id = self.rdma.queue[i];
            let Some(o) = self.rdma.ops.get(&id) else {
                self.rdma.queue.remove(i);
                continue;
            };
            let (peer, write, imm, total) = (o.peer, o.write, o.imm, o.buf.len() as u64);
            let mut finished = false;
            while self.peers[peer].window_open(HDR + self.mtu, now) && !self.peers[peer].lost {
                let mut d = self.take_buf(super::DGRAM_MAX);
                let Some(o) = self.rdma.ops.get_mut(&id) else { break };
                if write {
                    let n = (total - o.next).min(seg_w as u64) as usize;
                    let s = WriteSeg { op: id, imm: imm.unwrap_or(0), key: o.key, addr: o.addr, total, offset: o.next };
                    s.write(&mut d[HDR..]);
                    let at = HDR + dgram::WRITE_HDR;
                    o.buf.read_at(o.next as usize, &mut d[at..at + n]);
                    o.next += n as u64;
                    finished = o.next >= total;
                    let kind = if imm.is_some() { Kind::WriteImm } else { Kind::Write };
                    self.send_reliable(peer, kind, d, at + n, 0, now);
                } else {
                    let r = ReadReq { op: id, key: o.key, addr: o.addr, len: total };
                    r.write(&mut d[HDR..]);
                    o.next = 1;
                    finished = true;
                    self.send_reliable(peer, Kind::ReadReq, d, HDR + dgram::READ_REQ_LEN, 0, now);
                }
                if finished {
                    break;
                }
            }
            if finished {
                self.rdma.queue.remove(i);
            } else {
                i += 1;
            }
        }
        let seg_r = (self.mtu - dgram::READ_RSP_HDR) as u64;
        let mut i = 0;
        while i < self.rdma.serves.len() {
            let peer = self.rdma.serves[i].peer;
            let mut done = false;
            while self.peers[peer].window_open(HDR + self.mtu, now) && !self.peers[peer].lost {
                let mut d = self.take_buf(super::DGRAM_MAX);
                let s = &mut self.rdma.serves[i];
                let n = (s.buf.len() as u64 - s.next).min(seg_r) as usize;
                dgram::write_read_rsp(&mut d[HDR..], s.op, s.next);
                let at = HDR + dgram::READ_RSP_HDR;
                s.buf.read_at(s.next as usize, &mut d[at..at + n]);
                s.next += n as u64;
                done = s.next >= s.buf.len() as u64;
                self.send_reliable(peer, Kind::ReadRsp, d, at + n, 0, now);
                if done {
                    break;
                }
            }
            if done {
                self.rdma.serves.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Answers operation `op` of peer `peer` with RDMA_DONE and `status`.
    pub(super) fn send_done(&mut self, peer: usize, op: u32, status: i32, now: Instant) {
        let mut d = self.take_buf(HDR + dgram::DONE_LEN);
        dgram::write_done(&mut d[HDR..], op, status);
        self.send_reliable(peer, Kind::RdmaDone, d, HDR + dgram::DONE_LEN, 0, now);
    }

    /// A WRITE (`with_imm`: WRITE_IMM) segment from peer `peer`: checked,
    /// applied, counted; the last byte (or the first refusal) is answered
    /// with RDMA_DONE, and a write with immediate data that finished is
    /// reported ([`DevEvent::WriteImm`]).
    pub(super) fn rdma_write_in(&mut self, peer: usize, body: &[u8], with_imm: bool, now: Instant) {
        let Some((s, data)) = WriteSeg::parse(body) else {
            self.stats.rdma_malformed += 1;
            return;
        };
        let key = (peer, s.op);
        if !self.rdma.writes_in.contains_key(&key) {
            if self.rdma.writes_in.keys().filter(|(p, _)| *p == peer).count() >= WRITES_IN_MAX {
                self.stats.rdma_refused += 1;
                return;
            }
            self.rdma.writes_in.insert(key, WriteIn { received: 0, failed: false });
        }
        let len = data.len() as u64;
        let fits = s.offset.checked_add(len).is_some_and(|end| end <= s.total);
        let target = s.addr.checked_add(s.offset).filter(|_| fits);
        let dst = target.and_then(|a| self.rdma.check(s.key, a, len, Access::REMOTE_WRITE));
        let mut refuse = false;
        if let Some(w) = self.rdma.writes_in.get_mut(&key) {
            match dst {
                Some(dst) if !w.failed => {
                    dst.write_at(0, data);
                }
                Some(_) => {}
                None => {
                    refuse = !w.failed;
                    w.failed = true;
                }
            }
            w.received = w.received.saturating_add(len);
        }
        if refuse {
            self.stats.rdma_refused += 1;
            self.send_done(peer, s.op, Status::RemoteAccess.code(), now);
        }
        let finished = self.rdma.writes_in.get(&key).is_some_and(|w| w.received >= s.total);
        if finished {
            if let Some(w) = self.rdma.writes_in.remove(&key) {
                if !w.failed {
                    if with_imm {
                        let p = &self.peers[peer];
                        let ah = p.inserted.then_some(peer as Ah);
                        let raw = super::raw_of(p.addr, p.connid);
                        self.events.push(DevEvent::WriteImm { ah, raw, imm: s.imm, len: s.total });
                    }
                    self.send_done(peer, s.op, 0, now);
                }
            }
        }
    }

    /// A READ_REQ from peer `peer`: checked, then served in segments.
    pub(super) fn rdma_read_req(&mut self, peer: usize, body: &[u8], now: Instant) {
        let Some(r) = ReadReq::parse(body) else {
            self.stats.rdma_malformed += 1;
            return;
        };
        match self.rdma.check(r.key, r.addr, r.len, Access::REMOTE_READ) {
            None => {
                self.stats.rdma_refused += 1;
                self.send_done(peer, r.op, Status::RemoteAccess.code(), now);
            }
            Some(buf) if buf.is_empty() => self.send_done(peer, r.op, 0, now),
            Some(buf) => {
                self.rdma.serves.push_back(Serve { peer, op: r.op, key: r.key, buf, next: 0 });
                self.pump(now);
            }
        }
    }

    /// A READ_RSP segment for one of our reads.
    pub(super) fn rdma_read_rsp(&mut self, peer: usize, body: &[u8]) {
        let Some((op, offset, data)) = dgram::parse_read_rsp(body) else {
            self.stats.rdma_malformed += 1;
            return;
        };
        let Some(o) = self.rdma.ops.get_mut(&op).filter(|o| o.peer == peer && !o.write) else {
            self.stats.rdma_unmatched += 1;
            return;
        };
        let end = offset.checked_add(data.len() as u64);
        if end.is_none_or(|e| e > o.buf.len() as u64) {
            self.stats.rdma_malformed += 1;
            return;
        }
        o.buf.write_at(offset as usize, data);
        o.got += data.len() as u64;
        if o.got >= o.buf.len() as u64 {
            let wr_id = o.wr_id;
            self.rdma.ops.remove(&op);
            self.events.push(DevEvent::SendDone { wr_id, ah: peer as Ah, status: Ok(()) });
        }
    }

    /// An RDMA_DONE: a write finished, or an operation refused.
    pub(super) fn rdma_done(&mut self, peer: usize, body: &[u8]) {
        let Some((op, code)) = dgram::parse_done(body) else {
            self.stats.rdma_malformed += 1;
            return;
        };
        let ours = self.rdma.ops.get(&op).is_some_and(|o| o.peer == peer && (o.write || code != 0 || o.buf.is_empty()));
        if !ours {
            self.stats.rdma_unmatched += 1;
            return;
        }
        if let Some(o) = self.rdma.ops.remove(&op) {
            let status = match code {
                0 => Ok(()),
                c => Err(Status::from_code(c).filter(|s| *s != Status::Success).unwrap_or(Status::Remote)),
            };
            self.rdma.queue.retain(|&k| k != op);
            self.events.push(DevEvent::SendDone { wr_id: o.wr_id, ah: peer as Ah, status });
        }
    }
}
