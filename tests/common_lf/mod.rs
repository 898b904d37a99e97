//! A libfabric-behaviour peer for interoperability tests (issue 42).
//!
//! `LfPeer` drives a raw sim device with rdm4's wire layer and reacts to
//! each packet as libfabric's EFA provider does in the release its
//! [`Profile`] names — the extra features it advertises, which packet
//! types it knows, the fallbacks it takes, the operand bytes it sends —
//! and not as rdm4 does. `docs/libfabric-interop.md` lists the libfabric
//! functions each reaction is taken from. `Pair` couples it with one rdm4
//! endpoint on virtual time; every loop is bounded by a step count.
#![allow(dead_code)]

use std::collections::HashMap;

use rdm4::device::sim::{SimConfig, SimDevice, SimNet};
use rdm4::device::{Access, Ah, DevEvent, Device};
use rdm4::engine::{Addr, Config, Cqe, Endpoint};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::wire::{
    self, extra, peer_error_ref, req_flags, IdsHdr, LeU64, Packet, PacketType, RawAddr, RawAddrHdr, Req, ReqFamily,
    RmaIov, Subprotocol,
};

/// libfabric's EFA provider at one release, as seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Profile {
    /// A protocol-v4 peer with no extra feature or request (as libfabric
    /// before 1.14 on a device without RDMA read): no connid anywhere, it
    /// reads a CTSDATA connid block as payload.
    Baseline,
    /// 1.14–1.16: RDMA read, delivery complete, connid header request.
    V1_14,
    /// 1.17–1.18: + runting read.
    V1_17,
    /// 1.19: + RDMA write (device with RDMA write).
    V1_19,
    /// 2.0–2.6: + READ_NACK (for messages since 1.20, for LONGREAD_RTW
    /// since 2.0); no PEER_ERROR.
    V2_0,
    /// Today's main: + PEER_ERROR; connid after the handshake whatever the
    /// peer requested.
    Today,
}

impl Profile {
    pub const ALL: [Profile; 6] =
        [Profile::Baseline, Profile::V1_14, Profile::V1_17, Profile::V1_19, Profile::V2_0, Profile::Today];

    /// `extra_info[0]` of its HANDSHAKE on an EFA device with RDMA read and
    /// write, without zero-copy receive or unsolicited write receive
    /// (`efa_rdm_ep_set_extra_info`, `rxr_ep_set_extra_info`).
    pub fn extra(self) -> u64 {
        use extra::*;
        let v1_14 = RDMA_READ | DELIVERY_COMPLETE | CONNID_HEADER;
        match self {
            Profile::Baseline => 0,
            Profile::V1_14 => v1_14,
            Profile::V1_17 => v1_14 | RUNT,
            Profile::V1_19 => v1_14 | RUNT | RDMA_WRITE,
            Profile::V2_0 => v1_14 | RUNT | RDMA_WRITE | READ_NACK,
            Profile::Today => v1_14 | RUNT | RDMA_WRITE | READ_NACK | PEER_ERROR,
        }
    }

    /// Whether its receive path has a handler for `t`; any other type is
    /// an EQ error (`efa_rdm_pke_proc_received`: "invalid control pkt type").
    pub fn knows(self, t: PacketType) -> bool {
        match t {
            PacketType::ReadNack => self >= Profile::V2_0,
            PacketType::PeerError => self == Profile::Today,
            PacketType::RuntreadMsgRtm | PacketType::RuntreadTagRtm => self >= Profile::V1_17,
            PacketType::RuntctsMsgRtm
            | PacketType::RuntctsTagRtm
            | PacketType::RuntctsRtw
            | PacketType::RuntreadRtw => false,
            _ => true,
        }
    }

    /// Whether it puts its connid in REQs / CTSDATA to a peer whose
    /// HANDSHAKE (with `their` bits) has arrived (`efa_rdm_peer_need_connid`).
    fn sends_connid(self, their: u64) -> bool {
        match self {
            Profile::Baseline => false,
            Profile::Today => true,
            _ => their & extra::CONNID_HEADER != 0,
        }
    }

    /// Whether it nacks a LONGREAD_RTW it cannot read (2.0 on).
    fn nacks_writes(self) -> bool {
        self >= Profile::V2_0
    }
}

/// How one of the peer's own operations ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the bytes read or fetched, if any.
    Ok(Vec<u8>),
    /// A PEER_ERROR named it (its `prov_errno`).
    PeerError(u32),
}

/// A message the peer's application received.
#[derive(Debug, Clone)]
pub struct Msg {
    pub ptype: PacketType,
    pub tag: Option<u64>,
    pub cq_data: Option<u64>,
    pub data: Vec<u8>,
}

/// Failures the peer injects into its own side.
#[derive(Debug, Clone, Copy, Default)]
pub struct Knobs {
    /// It cannot post reads (no p2p, MR limit): a release with READ_NACK
    /// nacks (`efa_rdm_pke_post_remote_read_or_nack`), an older one reads.
    pub cannot_read: bool,
    /// Its application's receives fail locally (`efa_rdm_rxe_handle_error`:
    /// a CQ error, nothing to the sender).
    pub fail_recvs: bool,
    /// Its HANDSHAKE is overtaken by its later packets (held until
    /// [`LfPeer::release_handshake`]), as on an unordered network.
    pub hold_handshake: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RxKind {
    Msg,
    Write,
    Read,
}

/// A receive under way at the peer (long-CTS message or write, its own read).
struct RxOp {
    kind: RxKind,
    ptype: PacketType,
    buf: OwnedBuf,
    targets: Vec<UserBuf>,
    len: u64,
    got: u64,
    window_end: u64,
    their_id: u32,
    msg_id: u32,
    dc: bool,
    tag: Option<u64>,
    cq_data: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxKind {
    Msg,
    Write,
    ReadResponder,
    Atomic,
}

/// One of the peer's own operations (or a read it serves by CTSDATA).
struct TxOp {
    kind: TxKind,
    ptype: PacketType,
    src: OwnedBuf,
    len: u64,
    sent: u64,
    window_end: u64,
    their_id: u32,
    msg_id: u32,
    dc: bool,
    tag: Option<u64>,
    rma: Vec<RmaIov>,
    lr_key: Option<u64>,
}

impl TxOp {
    /// An operation of `kind` sending `src` (`len` bytes) by `ptype`, nothing sent yet.
    fn new(kind: TxKind, ptype: PacketType, src: OwnedBuf, len: u64) -> TxOp {
        TxOp {
            kind,
            ptype,
            src,
            len,
            sent: 0,
            window_end: 0,
            their_id: 0,
            msg_id: 0,
            dc: false,
            tag: None,
            rma: Vec::new(),
            lr_key: None,
        }
    }
}

/// A medium or runting-read message being assembled, by `msg_id`:
/// (buffer, bytes in, sender's `send_id`, DC, CQ data, type).
type Segmented = (OwnedBuf, u64, u32, bool, Option<u64>, PacketType);

/// The libfabric-behaviour peer.
pub struct LfPeer {
    pub profile: Profile,
    pub dev: SimDevice,
    pub knobs: Knobs,
    raw: RawAddr,
    raw_body: [u8; 36],
    to: Ah,
    /// rdm4's `extra_info[0]`, once its HANDSHAKE arrived.
    pub their_extra: Option<u64>,
    hs_sent: bool,
    tx_msg_id: u32,
    rx_msg_id: u32,
    next_id: u32,
    /// Every packet received, whole.
    pub received: Vec<Vec<u8>>,
    /// Messages its application received.
    pub msgs: Vec<Msg>,
    /// Remote writes with CQ data: (len, data).
    pub remote_writes: Vec<(u64, u64)>,
    /// EQ / CQ errors libfabric would report on its side.
    pub errors: Vec<String>,
    /// Its own operations that ended, by id.
    pub done: HashMap<u32, Outcome>,
    rx: HashMap<u32, RxOp>,
    medium: HashMap<u32, Segmented>,
    tx: HashMap<u32, TxOp>,
    regions: Vec<(u64, OwnedBuf)>,
    wr: u64,
    held: Option<Vec<u8>>,
}

/// Bytes a CTS window grants (libfabric: credits × payload).
const WINDOW: u64 = 64 * 1024;
/// Runt bytes the peer sends ahead of a runting read.
pub const RUNT: usize = 16 * 1024;
/// prov_errno of EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS.
pub const BAD_ADDRESS: u32 = 14;

fn emit(p: &Packet<'_>) -> Vec<u8> {
    let mut out = vec![0u8; 16 * 1024];
    let n = p.emit(&mut out).expect("peer packet emits");
    out.truncate(n);
    out
}

fn concat(bufs: &[UserBuf], off: u64, len: u64) -> Vec<u8> {
    let mut all = Vec::new();
    for b in bufs {
        let mut v = vec![0u8; b.len()];
        b.read_at(0, &mut v);
        all.extend_from_slice(&v);
    }
    all[off as usize..(off + len) as usize].to_vec()
}

fn scatter(bufs: &[UserBuf], mut off: u64, mut data: &[u8]) {
    for b in bufs {
        let l = b.len() as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let n = (l - off).min(data.len() as u64) as usize;
        b.write_at(off as usize, &data[..n]);
        data = &data[n..];
        off = 0;
        if data.is_empty() {
            return;
        }
    }
}

impl LfPeer {
    pub fn new(profile: Profile, dev: SimDevice, rdm4: &RawAddr) -> LfPeer {
        let mut dev = dev;
        let to = dev.insert(rdm4).expect("insert rdm4");
        let raw = dev.local_addr();
        LfPeer {
            profile,
            dev,
            knobs: Knobs::default(),
            raw,
            raw_body: raw.to_req_hdr_body(),
            to,
            their_extra: None,
            hs_sent: false,
            tx_msg_id: 0,
            rx_msg_id: 0,
            next_id: 1000,
            received: Vec::new(),
            msgs: Vec::new(),
            remote_writes: Vec::new(),
            errors: Vec::new(),
            done: HashMap::new(),
            rx: HashMap::new(),
            medium: HashMap::new(),
            tx: HashMap::new(),
            regions: Vec::new(),
            wr: 1,
            held: None,
        }
    }

    pub fn addr(&self) -> RawAddr {
        self.raw
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn connid(&self) -> Option<u32> {
        (self.profile >= Profile::V1_14).then_some(self.raw.connid())
    }

    // ----- memory -------------------------------------------------------

    /// A region holding `data`, registered for remote read and write;
    /// returns its index.
    pub fn region(&mut self, data: &[u8]) -> usize {
        let mut b = OwnedBuf::from_slice(data);
        let key = self.dev.reg(b.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).expect("reg");
        self.regions.push((key, b));
        self.regions.len() - 1
    }

    /// `(addr + off, len, key)` of region `i`.
    pub fn iov(&mut self, i: usize, off: u64, len: u64) -> RmaIov {
        let (key, b) = &mut self.regions[i];
        RmaIov::new(b.buf().addr() + off, len, *key)
    }

    pub fn bytes(&self, i: usize) -> &[u8] {
        self.regions[i].1.bytes()
    }

    /// Removes region `i`'s registration (the memory stays).
    pub fn dereg(&mut self, i: usize) {
        let key = self.regions[i].0;
        let _ = self.dev.dereg(key);
        self.regions[i].0 = u64::MAX;
    }

    /// The peer's own memory that `iovs` name, checked as libfabric's
    /// `efa_rdm_rma_verified_copy_iov` does (every key, every range). Its
    /// long-read send buffers count: libfabric registers them in the
    /// domain's MR map like any other, so an emulated read of one is served.
    fn resolve(&mut self, iovs: &[RmaIov]) -> Option<Vec<UserBuf>> {
        let mut out = Vec::new();
        for v in iovs {
            let region = self.regions.iter_mut().find(|(k, _)| *k == v.key()).map(|(_, b)| b.buf());
            let sending = || self.tx.values_mut().find(|op| op.lr_key == Some(v.key())).map(|op| op.src.buf());
            let b = region.or_else(sending)?;
            let off = v.addr().checked_sub(b.addr())?;
            out.push(b.slice(off as usize, v.len() as usize)?);
        }
        Some(out)
    }

    // ----- sending ------------------------------------------------------

    fn send(&mut self, pkt: &[u8]) {
        self.dev.send(self.to, pkt, 0).expect("peer send");
    }

    fn send_pkt(&mut self, p: &Packet<'_>) {
        let b = emit(p);
        self.send(&b);
    }

    /// A REQ with the optional headers libfabric adds: the raw address
    /// until rdm4's HANDSHAKE arrived (or always when it asked for a
    /// constant header length), else the connid header where the release
    /// sends it.
    fn send_req(&mut self, r: Req<'_>) {
        let body = self.raw_body;
        let mut r: Req<'_> = Req { ..r };
        match self.their_extra {
            None => r.raw_addr = RawAddrHdr::new(&body).ok(),
            Some(x) if x & extra::CONSTANT_HEADER_LENGTH != 0 => r.raw_addr = RawAddrHdr::new(&body).ok(),
            Some(x) if self.profile.sends_connid(x) => r.connid = Some(self.raw.connid()),
            Some(_) => {}
        }
        let mut out = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut out).expect("peer REQ emits");
        out.truncate(n);
        self.send(&out);
    }

    fn send_handshake(&mut self) {
        if self.hs_sent {
            return;
        }
        self.hs_sent = true;
        let words = [LeU64::new(self.profile.extra())];
        let mut h = wire::Handshake::new(&words);
        h.connid = self.connid();
        let b = emit(&Packet::Handshake(h));
        if self.knobs.hold_handshake {
            self.held = Some(b);
        } else {
            self.send(&b);
        }
    }

    /// Sends the HANDSHAKE held back by `Knobs::hold_handshake`.
    pub fn release_handshake(&mut self) {
        if let Some(b) = self.held.take() {
            self.send(&b);
        }
    }

    /// Removes the registration of send (or write) `id`'s buffer, as an
    /// application closing the MR under a long-read transfer: the peer's
    /// read of it fails.
    pub fn withdraw(&mut self, id: u32) {
        if let Some(k) = self.tx.get_mut(&id).and_then(|op| op.lr_key.take()) {
            let _ = self.dev.dereg(k);
        }
    }

    fn ids(&self, send_id: u32, recv_id: u32) -> IdsHdr {
        IdsHdr { flags: 0, send_id, recv_id, connid: self.connid(), padding: 0 }
    }

    fn send_peer_error(&mut self, op_id: u32) {
        let e = wire::PeerError {
            flags: 0,
            op_id,
            ref_kind: peer_error_ref::OPE_INDEX,
            prov_errno: BAD_ADDRESS,
            connid: self.connid(),
            padding: 0,
        };
        self.send_pkt(&Packet::PeerError(e));
    }

    fn send_receipt(&mut self, send_id: u32, msg_id: u32) {
        let r = wire::Receipt { flags: 0, send_id, msg_id, connid: self.connid(), padding: 0 };
        self.send_pkt(&Packet::Receipt(r));
    }

    /// Reads `iovs` of rdm4's memory into `local` (from offset `from` of
    /// the read span); false when the device reports an error.
    fn read_remote(&mut self, local: UserBuf, iovs: &[RmaIov], from: u64) -> bool {
        let mut at = 0u64;
        for v in iovs {
            let (start, end) = (at.max(from), at + v.len());
            if start < end {
                let dst = local.slice(start as usize, (end - start) as usize).expect("read span");
                self.wr += 1;
                if self.dev.rdma_read(self.to, dst, v.addr() + (start - at), v.key(), self.wr).is_err() {
                    return false;
                }
                let mut ev = Vec::new();
                self.dev.events(&mut ev);
                let ok = ev
                    .iter()
                    .any(|e| matches!(e, DevEvent::SendDone { wr_id, status: Ok(()), .. } if *wr_id == self.wr));
                if !ok {
                    return false;
                }
            }
            at = end;
        }
        true
    }

    // ----- the peer as initiator -----------------------------------------

    fn next_msg_id(&mut self) -> u32 {
        self.tx_msg_id += 1;
        self.tx_msg_id - 1
    }

    /// Sends message `data` by the protocol of RTM type `ptype` (DC types
    /// included); returns the operation's id.
    pub fn send_msg(&mut self, ptype: PacketType, data: &[u8], tag: Option<u64>) -> u32 {
        let dc = ptype.req_info().is_some_and(|i| i.dc);
        self.send_msg_dc(ptype, data, tag, dc)
    }

    /// [`Self::send_msg`] with delivery complete requested: for long-read
    /// and runting-read types (which have no DC variant) it decides the
    /// long-CTS type of a READ_NACK fallback.
    pub fn send_msg_dc(&mut self, ptype: PacketType, data: &[u8], tag: Option<u64>, dc: bool) -> u32 {
        let info = ptype.req_info().expect("an RTM type");
        let id = self.id();
        let msg_id = self.next_msg_id();
        let mut op =
            TxOp { msg_id, dc, tag, ..TxOp::new(TxKind::Msg, ptype, OwnedBuf::from_slice(data), data.len() as u64) };
        let mut r = Req::new(ptype);
        r.fields.msg_id = msg_id;
        r.fields.tag = tag.unwrap_or(0);
        r.fields.msg_length = data.len() as u64;
        r.fields.send_id = id;
        r.fields.credit_request = 64;
        let max = 8192 - 200;
        match info.proto {
            Subprotocol::Eager => {
                r.data = data;
                self.send_req(r);
                op.sent = op.len;
            }
            Subprotocol::Medium => {
                for (i, seg) in data.chunks(max).enumerate() {
                    let mut s = Req { data: seg, ..r };
                    s.fields.seg_offset = (i * max) as u64;
                    self.send_req(s);
                }
                op.sent = op.len;
            }
            Subprotocol::Longcts => {
                let n = data.len().min(max);
                r.data = &data[..n];
                self.send_req(r);
                op.sent = n as u64;
            }
            Subprotocol::Longread | Subprotocol::Runtread => {
                let key = self.dev.reg(op.src.buf(), Access::REMOTE_READ).expect("reg send buffer");
                op.lr_key = Some(key);
                let iov = [RmaIov::new(op.src.buf().addr(), op.len, key)];
                r.read_iov = &iov;
                if info.proto == Subprotocol::Longread {
                    self.send_req(r);
                } else {
                    r.fields.runt_length = RUNT as u64;
                    for (i, seg) in data[..RUNT].chunks(max).enumerate() {
                        let mut s = Req { data: seg, ..r };
                        s.fields.seg_offset = (i * max) as u64;
                        self.send_req(s);
                    }
                }
                op.sent = op.len;
            }
            _ => panic!("not an RTM protocol: {ptype:?}"),
        }
        let ends_now = !info.dc && matches!(info.proto, Subprotocol::Eager | Subprotocol::Medium);
        if ends_now {
            self.done.insert(id, Outcome::Ok(Vec::new()));
        } else {
            self.tx.insert(id, op);
        }
        id
    }

    /// Writes `data` to `rma` (one or several entries) by the RTW type
    /// `ptype`; returns the operation's id.
    pub fn write(&mut self, ptype: PacketType, data: &[u8], rma: &[RmaIov], cq_data: Option<u64>) -> u32 {
        let info = ptype.req_info().expect("an RTW type");
        let id = self.id();
        let mut op = TxOp {
            dc: info.dc,
            rma: rma.to_vec(),
            ..TxOp::new(TxKind::Write, ptype, OwnedBuf::from_slice(data), data.len() as u64)
        };
        self.start_write(id, &mut op, ptype, cq_data);
        let ends_now = !info.dc && info.proto == Subprotocol::Eager;
        if ends_now {
            self.done.insert(id, Outcome::Ok(Vec::new()));
        } else {
            self.tx.insert(id, op);
        }
        id
    }

    fn start_write(&mut self, id: u32, op: &mut TxOp, ptype: PacketType, cq_data: Option<u64>) {
        let rma = op.rma.clone();
        let data = op.src.bytes().to_vec();
        let mut r = Req::new(ptype);
        r.rma_iov = &rma;
        r.cq_data = cq_data;
        r.fields.msg_length = op.len;
        r.fields.send_id = id;
        r.fields.credit_request = 64;
        op.ptype = ptype;
        match ptype.req_info().map(|i| i.proto) {
            Some(Subprotocol::Eager) => {
                r.data = &data;
                op.sent = op.len;
            }
            Some(Subprotocol::Longcts) => {
                let n = data.len().min(8192 - 300);
                r.data = &data[..n];
                op.sent = n as u64;
            }
            Some(Subprotocol::Longread) => {
                let key = self.dev.reg(op.src.buf(), Access::REMOTE_READ).expect("reg write source");
                op.lr_key = Some(key);
                let read = [RmaIov::new(op.src.buf().addr(), op.len, key)];
                r.read_iov = &read;
                op.sent = op.len;
                return self.send_req(r);
            }
            _ => panic!("not a write protocol: {ptype:?}"),
        }
        self.send_req(r);
    }

    /// Reads `len` bytes of rdm4's memory at `rma` by SHORT_RTR or
    /// LONGCTS_RTR (`ptype`); returns the operation's id.
    pub fn read(&mut self, ptype: PacketType, rma: &[RmaIov], len: u64) -> u32 {
        let id = self.id();
        let window = if ptype == PacketType::ShortRtr { len } else { WINDOW.min(len) };
        let mut r = Req::new(ptype);
        r.rma_iov = rma;
        r.fields.msg_length = len;
        r.fields.recv_id = id;
        r.fields.recv_length = window as u32;
        self.send_req(r);
        let op = RxOp {
            kind: RxKind::Read,
            ptype,
            buf: OwnedBuf::zeroed(len as usize),
            targets: Vec::new(),
            len,
            got: 0,
            window_end: window,
            their_id: 0,
            msg_id: 0,
            dc: false,
            tag: None,
            cq_data: None,
        };
        self.rx.insert(id, op);
        id
    }

    /// An atomic by RTA type `ptype` on `rma`: `operand` (count × size
    /// bytes, as libfabric sends them for every op, FI_ATOMIC_READ too),
    /// `compare` for COMPARE_RTA; returns the operation's id.
    pub fn atomic(
        &mut self,
        ptype: PacketType,
        dt: u32,
        op: u32,
        rma: &[RmaIov],
        operand: &[u8],
        compare: &[u8],
    ) -> u32 {
        let id = self.id();
        let msg_id = self.next_msg_id();
        let mut data = operand.to_vec();
        data.extend_from_slice(compare);
        let mut r = Req::new(ptype);
        r.rma_iov = rma;
        r.fields.msg_id = msg_id;
        r.fields.atomic_datatype = dt;
        r.fields.atomic_op = op;
        r.fields.recv_id = id;
        r.fields.send_id = id;
        r.data = &data;
        self.send_req(r);
        if ptype == PacketType::WriteRta {
            self.done.insert(id, Outcome::Ok(Vec::new()));
        } else {
            let t = TxOp {
                msg_id,
                dc: ptype == PacketType::DcWriteRta,
                rma: rma.to_vec(),
                ..TxOp::new(TxKind::Atomic, ptype, OwnedBuf::zeroed(0), 0)
            };
            self.tx.insert(id, t);
        }
        id
    }

    /// Sends libfabric's handshake trigger: a zero-length EAGER_RTW with
    /// the raw address (rdm4 answers with its HANDSHAKE).
    pub fn trigger_handshake(&mut self) {
        let r = Req::new(PacketType::EagerRtw);
        self.send_req(r);
    }

    /// Sends `pkt` as is (forged or of a type the release sends rarely).
    pub fn send_raw(&mut self, pkt: &[u8]) {
        self.send(pkt);
    }

    // ----- receiving ------------------------------------------------------

    /// Takes what arrived and reacts to each packet.
    pub fn progress(&mut self) {
        let mut pkts = Vec::new();
        self.dev.recv(256, |_, bytes: &[u8], gathered: Option<UserBuf>| {
            let mut v = bytes.to_vec();
            if let Some(g) = gathered {
                let mut t = vec![0u8; g.len()];
                g.read_at(0, &mut t);
                v.extend_from_slice(&t);
            }
            pkts.push(v);
        });
        let mut ev = Vec::new();
        self.dev.events(&mut ev);
        for p in pkts {
            self.handle(&p);
        }
    }

    fn handle(&mut self, bytes: &[u8]) {
        self.received.push(bytes.to_vec());
        let Some(t) = bytes.first().and_then(|&b| PacketType::from_u8(b)) else {
            self.errors.push(format!("unknown packet type {}", bytes[0]));
            return;
        };
        if !self.profile.knows(t) {
            // efa_rdm_pke_proc_received / rxr_pkt_handle_recv_completion.
            self.errors.push(format!("EQ error: invalid packet type {} ({})", t as u8, t.name()));
            return;
        }
        if t == PacketType::CtsData && self.profile == Profile::Baseline {
            return self.handle_ctsdata_baseline(bytes);
        }
        let pkt = match Packet::parse(bytes) {
            Ok(p) => p,
            Err(e) => {
                self.errors.push(format!("malformed {}: {e:?}", t.name()));
                return;
            }
        };
        if !matches!(pkt, Packet::Handshake(_)) {
            self.send_handshake();
        }
        match pkt {
            Packet::Handshake(h) => {
                self.their_extra = Some(h.extra_info.first().map_or(0, |w| w.get()));
                self.send_handshake();
            }
            Packet::Req(r) => self.handle_req(&r),
            Packet::Cts(c) => self.handle_cts(c.send_id, c.recv_id, c.recv_length),
            Packet::CtsData(c) => self.take_data(c.recv_id, c.seg_offset, c.data),
            Packet::ReadRsp(r) => {
                if let Some(op) = self.rx.get_mut(&r.recv_id) {
                    op.their_id = r.send_id;
                }
                self.take_data(r.recv_id, 0, r.data)
            }
            Packet::Eor(e) => self.finish_tx(e.send_id, Outcome::Ok(Vec::new())),
            Packet::Receipt(r) => self.finish_tx(r.send_id, Outcome::Ok(Vec::new())),
            Packet::AtomRsp(a) => self.finish_tx(a.recv_id, Outcome::Ok(a.data.to_vec())),
            Packet::ReadNack(n) => self.handle_read_nack(n.send_id),
            Packet::PeerError(e) => self.handle_peer_error(&e),
        }
    }

    /// A release that does not know the CTSDATA connid block takes its 8
    /// bytes as the segment's first bytes.
    fn handle_ctsdata_baseline(&mut self, bytes: &[u8]) {
        let recv_id = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        let seg_length = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let seg_offset = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        let data = bytes[24..].get(..seg_length as usize).unwrap_or(&bytes[24..]).to_vec();
        self.take_data(recv_id, seg_offset, &data);
    }

    fn finish_tx(&mut self, id: u32, out: Outcome) {
        match self.tx.remove(&id) {
            Some(op) => {
                if let Some(k) = op.lr_key {
                    let _ = self.dev.dereg(k);
                }
                self.done.insert(id, out);
            }
            None => self.errors.push(format!("answer for unknown operation {id}")),
        }
    }

    fn handle_peer_error(&mut self, e: &wire::PeerError) {
        let id = if e.ref_kind == peer_error_ref::OPE_INDEX {
            Some(e.op_id)
        } else {
            self.tx.iter().find(|(_, o)| o.msg_id == e.op_id).map(|(k, _)| *k)
        };
        match id {
            Some(id) if self.tx.contains_key(&id) => self.finish_tx(id, Outcome::PeerError(e.prov_errno)),
            Some(id) if self.rx.remove(&id).is_some() => {
                self.done.insert(id, Outcome::PeerError(e.prov_errno));
            }
            _ => self.errors.push(format!("PEER_ERROR for unknown operation {}", e.op_id)),
        }
    }

    /// READ_NACK: fall back to long-CTS (`efa_rdm_pke_handle_read_nack_recv`):
    /// a message by (DC_)LONGCTS RTM with REQ flag READ_NACK and no data,
    /// same `msg_id`; a write (2.0 on) by a new (DC_)LONGCTS_RTW.
    fn handle_read_nack(&mut self, id: u32) {
        let Some(mut op) = self.tx.remove(&id) else {
            self.errors.push(format!("READ_NACK for unknown operation {id}"));
            return;
        };
        if let Some(k) = op.lr_key.take() {
            let _ = self.dev.dereg(k);
        }
        match op.kind {
            TxKind::Msg => {
                let tagged = op.tag.is_some();
                let t = PacketType::req_type(ReqFamily::Rtm, Subprotocol::Longcts, tagged, op.dc).expect("longcts");
                let mut r = Req::new(t);
                r.flags |= req_flags::READ_NACK;
                r.fields.msg_id = op.msg_id;
                r.fields.tag = op.tag.unwrap_or(0);
                r.fields.msg_length = op.len;
                r.fields.send_id = id;
                r.fields.credit_request = 64;
                let runt = matches!(op.ptype, PacketType::RuntreadMsgRtm | PacketType::RuntreadTagRtm);
                op.sent = if runt { RUNT as u64 } else { 0 };
                op.ptype = t;
                self.send_req(r);
            }
            TxKind::Write if self.profile.nacks_writes() => {
                let t = if op.dc { PacketType::DcLongctsRtw } else { PacketType::LongctsRtw };
                self.start_write(id, &mut op, t, None);
            }
            _ => {
                self.errors.push(format!("READ_NACK for a {:?} it cannot fall back from", op.kind));
                return;
            }
        }
        self.tx.insert(id, op);
    }

    /// CTS: the next window of a long-CTS send / write or of a read served.
    fn handle_cts(&mut self, send_id: u32, recv_id: u32, window: u64) {
        let connid = self.their_extra.filter(|&x| self.profile.sends_connid(x)).map(|_| self.raw.connid());
        let Some(op) = self.tx.get_mut(&send_id) else {
            self.errors.push(format!("CTS for unknown operation {send_id}"));
            return;
        };
        op.their_id = recv_id;
        op.window_end = (op.sent + window).min(op.len);
        let mut pkts = Vec::new();
        let room = 8192 - 32;
        while op.sent < op.window_end {
            let n = (op.window_end - op.sent).min(room as u64);
            let data = op.src.bytes()[op.sent as usize..(op.sent + n) as usize].to_vec();
            let c = wire::CtsData { flags: 0, recv_id, seg_offset: op.sent, connid, data: &data };
            pkts.push(emit(&Packet::CtsData(c)));
            op.sent += n;
        }
        let finished = op.sent >= op.len && !op.dc && op.kind != TxKind::ReadResponder;
        let served = op.sent >= op.len && op.kind == TxKind::ReadResponder;
        for p in pkts {
            self.send(&p);
        }
        if finished {
            self.finish_tx(send_id, Outcome::Ok(Vec::new()));
        } else if served {
            self.tx.remove(&send_id);
        }
    }

    /// Data for a receive under way (CTSDATA, READRSP).
    fn take_data(&mut self, recv_id: u32, off: u64, data: &[u8]) {
        let Some(op) = self.rx.get_mut(&recv_id) else {
            self.errors.push(format!("data for unknown receive {recv_id}"));
            return;
        };
        if off + data.len() as u64 > op.len {
            self.errors.push(format!("data past the end of receive {recv_id}"));
            return;
        }
        if op.kind == RxKind::Write {
            scatter(&op.targets, off, data);
        } else {
            op.buf.bytes_mut()[off as usize..off as usize + data.len()].copy_from_slice(data);
        }
        op.got += data.len() as u64;
        if op.got >= op.len {
            let op = self.rx.remove(&recv_id).expect("rx");
            return self.rx_done(recv_id, op);
        }
        if op.got >= op.window_end {
            let w = WINDOW.min(op.len - op.got);
            op.window_end = op.got + w;
            let flags = if op.kind == RxKind::Read { wire::CTS_READ_REQ } else { 0 };
            let (their, connid) = (op.their_id, self.connid());
            let c = wire::Cts { flags, connid, padding: 0, send_id: their, recv_id, recv_length: w };
            self.send_pkt(&Packet::Cts(c));
        }
    }

    /// A receive that has every byte: delivered, and RECEIPT for DC.
    fn rx_done(&mut self, id: u32, op: RxOp) {
        match op.kind {
            RxKind::Read => {
                self.done.insert(id, Outcome::Ok(op.buf.bytes().to_vec()));
            }
            RxKind::Write => {
                if let Some(d) = op.cq_data {
                    self.remote_writes.push((op.len, d));
                }
                if op.dc {
                    self.send_receipt(op.their_id, 0);
                }
            }
            RxKind::Msg => {
                self.deliver(op.ptype, op.tag, op.cq_data, op.buf.bytes().to_vec(), op.dc, op.their_id, op.msg_id)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        ptype: PacketType,
        tag: Option<u64>,
        cq_data: Option<u64>,
        data: Vec<u8>,
        dc: bool,
        send_id: u32,
        msg_id: u32,
    ) {
        if self.knobs.fail_recvs {
            self.errors.push(format!("CQ error: receive of message {msg_id} failed"));
            return;
        }
        self.msgs.push(Msg { ptype, tag, cq_data, data });
        if dc {
            self.send_receipt(send_id, msg_id);
        }
    }

    fn handle_req(&mut self, r: &Req<'_>) {
        let info = r.ptype.req_info().expect("REQ");
        match info.family {
            ReqFamily::Rtm => self.handle_rtm(r, info),
            ReqFamily::Rtw => self.handle_rtw(r, info),
            ReqFamily::Rtr => self.handle_rtr(r),
            ReqFamily::Rta => self.handle_rta(r, info),
        }
    }

    fn handle_rtm(&mut self, r: &Req<'_>, info: wire::ReqInfo) {
        let f = &r.fields;
        let tag = info.tagged.then_some(f.tag);
        if r.flags & req_flags::READ_NACK != 0 {
            return self.handle_nacked_rtm(r, info);
        }
        match info.proto {
            Subprotocol::Eager => {
                self.rx_msg_id += 1;
                self.deliver(r.ptype, tag, r.cq_data, r.data.to_vec(), info.dc, f.send_id, f.msg_id)
            }
            Subprotocol::Medium | Subprotocol::Runtread => {
                let total = if info.proto == Subprotocol::Medium { f.msg_length } else { f.runt_length };
                let e = self.medium.entry(f.msg_id).or_insert_with(|| {
                    (OwnedBuf::zeroed(f.msg_length as usize), 0, f.send_id, info.dc, r.cq_data, r.ptype)
                });
                e.0.bytes_mut()[f.seg_offset as usize..f.seg_offset as usize + r.data.len()].copy_from_slice(r.data);
                e.1 += r.data.len() as u64;
                if e.1 < total {
                    return;
                }
                let (buf, _, send_id, dc, cq, pt) = self.medium.remove(&f.msg_id).expect("medium");
                self.rx_msg_id += 1;
                if info.proto == Subprotocol::Medium {
                    return self.deliver(pt, tag, cq, buf.bytes().to_vec(), dc, send_id, f.msg_id);
                }
                self.read_message(r, info, tag, buf, total);
            }
            Subprotocol::Longcts => {
                self.rx_msg_id += 1;
                let id = self.id();
                let mut buf = OwnedBuf::zeroed(f.msg_length as usize);
                buf.bytes_mut()[..r.data.len()].copy_from_slice(r.data);
                let op = RxOp {
                    kind: RxKind::Msg,
                    ptype: r.ptype,
                    buf,
                    targets: Vec::new(),
                    len: f.msg_length,
                    got: r.data.len() as u64,
                    window_end: r.data.len() as u64,
                    their_id: f.send_id,
                    msg_id: f.msg_id,
                    dc: info.dc,
                    tag,
                    cq_data: r.cq_data,
                };
                self.rx.insert(id, op);
                self.take_data(id, 0, &[]);
            }
            Subprotocol::Longread => {
                self.rx_msg_id += 1;
                let buf = OwnedBuf::zeroed(f.msg_length as usize);
                self.read_message(r, info, tag, buf, 0);
            }
            _ => self.errors.push(format!("unhandled RTM {}", r.ptype.name())),
        }
    }

    /// The read of a long-read / runting-read message from `from` on: EOR,
    /// or READ_NACK when it cannot read (2.0 on: 1.20), or on a failed
    /// read PEER_ERROR where libfabric sends it, else nothing.
    fn read_message(&mut self, r: &Req<'_>, info: wire::ReqInfo, tag: Option<u64>, mut buf: OwnedBuf, from: u64) {
        let f = &r.fields;
        let id = self.id();
        if self.knobs.cannot_read && self.profile >= Profile::V2_0 {
            let op = RxOp {
                kind: RxKind::Msg,
                ptype: r.ptype,
                buf,
                targets: Vec::new(),
                len: f.msg_length,
                got: from,
                window_end: from,
                their_id: f.send_id,
                msg_id: f.msg_id,
                dc: false,
                tag,
                cq_data: r.cq_data,
            };
            self.rx.insert(id, op);
            let nack = self.ids(f.send_id, id);
            return self.send_pkt(&Packet::ReadNack(nack));
        }
        if !self.read_remote(buf.buf(), r.read_iov, from) {
            return self.read_failed(f.send_id, "message");
        }
        let eor = self.ids(f.send_id, id);
        self.send_pkt(&Packet::Eor(eor));
        let _ = info;
        self.deliver(r.ptype, tag, r.cq_data, buf.bytes().to_vec(), false, f.send_id, f.msg_id);
    }

    /// A read that failed: today's main sends PEER_ERROR to a peer that
    /// advertised it (`efa_rdm_rxe_emit_peer_error`); every release before
    /// reports a local error and sends nothing.
    fn read_failed(&mut self, send_id: u32, what: &str) {
        self.errors.push(format!("CQ error: read of a {what} failed"));
        let peer_error = self.their_extra.is_some_and(|x| x & extra::PEER_ERROR != 0);
        if self.profile == Profile::Today && peer_error {
            self.send_peer_error(send_id);
        }
    }

    /// The LONGCTS RTM (READ_NACK flag, no data) that answers our nack.
    fn handle_nacked_rtm(&mut self, r: &Req<'_>, info: wire::ReqInfo) {
        let f = &r.fields;
        let Some((&id, _)) = self.rx.iter().find(|(_, o)| o.kind == RxKind::Msg && o.msg_id == f.msg_id) else {
            self.errors.push(format!("nacked RTM for unknown message {}", f.msg_id));
            return;
        };
        let op = self.rx.get_mut(&id).expect("rx");
        op.their_id = f.send_id;
        op.dc = info.dc;
        op.ptype = r.ptype;
        let got = op.got;
        self.take_data(id, got, &[]);
    }

    fn handle_rtw(&mut self, r: &Req<'_>, info: wire::ReqInfo) {
        let f = &r.fields;
        if r.rma_iov.is_empty() && r.data.is_empty() && f.msg_length == 0 {
            return; // a handshake trigger
        }
        let len = if info.proto == Subprotocol::Eager { r.data.len() as u64 } else { f.msg_length };
        let Some(targets) = self.resolve(r.rma_iov) else {
            self.errors.push(format!("{} to memory it does not have", r.ptype.name()));
            return;
        };
        if targets.iter().map(|t| t.len() as u64).sum::<u64>() != len {
            self.errors.push(format!("{} whose rma_iov does not add up", r.ptype.name()));
            return;
        }
        match info.proto {
            Subprotocol::Eager => {
                scatter(&targets, 0, r.data);
                if let Some(d) = r.cq_data {
                    self.remote_writes.push((len, d));
                }
                if info.dc {
                    self.send_receipt(f.send_id, 0);
                }
            }
            Subprotocol::Longcts | Subprotocol::Longread => {
                let id = self.id();
                let op = RxOp {
                    kind: RxKind::Write,
                    ptype: r.ptype,
                    buf: OwnedBuf::zeroed(0),
                    targets,
                    len,
                    got: 0,
                    window_end: 0,
                    their_id: f.send_id,
                    msg_id: 0,
                    dc: info.dc,
                    tag: None,
                    cq_data: r.cq_data,
                };
                if info.proto == Subprotocol::Longcts {
                    self.rx.insert(id, op);
                    return self.take_data(id, 0, r.data);
                }
                if self.knobs.cannot_read && self.profile.nacks_writes() {
                    let nack = self.ids(f.send_id, id);
                    return self.send_pkt(&Packet::ReadNack(nack));
                }
                let mut tmp = OwnedBuf::zeroed(len as usize);
                if !self.read_remote(tmp.buf(), r.read_iov, 0) {
                    return self.read_failed(f.send_id, "LONGREAD_RTW");
                }
                scatter(&op.targets, 0, tmp.bytes());
                let eor = self.ids(f.send_id, id);
                self.send_pkt(&Packet::Eor(eor));
                if let Some(d) = r.cq_data {
                    self.remote_writes.push((len, d));
                }
            }
            _ => self.errors.push(format!("unhandled RTW {}", r.ptype.name())),
        }
    }

    fn handle_rtr(&mut self, r: &Req<'_>) {
        let f = &r.fields;
        let Some(src) = self.resolve(r.rma_iov) else {
            self.errors.push("RTR of memory it does not have".into());
            return;
        };
        let data = concat(&src, 0, f.msg_length);
        let id = self.id();
        let first = if r.ptype == PacketType::ShortRtr { data.len() } else { (f.recv_length as usize).min(8192 - 24) };
        let rsp = wire::ReadRsp {
            flags: 0,
            connid: self.connid(),
            padding: 0,
            recv_id: f.recv_id,
            send_id: id,
            data: &data[..first],
        };
        self.send_pkt(&Packet::ReadRsp(rsp));
        if r.ptype == PacketType::LongctsRtr && first < data.len() {
            let op = TxOp {
                sent: first as u64,
                their_id: f.recv_id,
                ..TxOp::new(TxKind::ReadResponder, r.ptype, OwnedBuf::from_slice(&data), f.msg_length)
            };
            self.tx.insert(id, op);
            let rest = u64::from(f.recv_length).saturating_sub(first as u64);
            if rest > 0 {
                self.handle_cts(id, f.recv_id, rest);
            }
        }
    }

    /// RTA: applied per rma_iov entry, the operands read at the payload
    /// offset whatever the packet's length (`efa_rdm_pke_proc_fetch_rta`).
    fn handle_rta(&mut self, r: &Req<'_>, info: wire::ReqInfo) {
        let f = &r.fields;
        self.rx_msg_id += 1;
        let Some(targets) = self.resolve(r.rma_iov) else {
            self.errors.push(format!("{} on memory it does not have", r.ptype.name()));
            return;
        };
        let total: usize = targets.iter().map(|t| t.len()).sum();
        let mut data = r.data.to_vec();
        data.resize(total * 2, 0);
        let (operand, compare) = data.split_at(total);
        let mut old = vec![0u8; total];
        let mut at = 0;
        for t in &targets {
            let n = t.len();
            let cmp = if info.proto == Subprotocol::CompareAtomic { &compare[at..at + n] } else { &[][..] };
            let mut o = vec![0u8; n];
            if t.atomic_apply(f.atomic_datatype, f.atomic_op, &operand[at..at + n], cmp, &mut o).is_err() {
                self.errors.push(format!("{} op {} refused", r.ptype.name(), f.atomic_op));
                return;
            }
            old[at..at + n].copy_from_slice(&o);
            at += n;
        }
        match r.ptype {
            PacketType::WriteRta => {}
            PacketType::DcWriteRta => self.send_receipt(f.send_id, f.msg_id),
            _ => {
                let a = wire::AtomRsp {
                    flags: 0,
                    connid: self.connid(),
                    padding: 0,
                    reserved: 0,
                    recv_id: f.recv_id,
                    data: &old,
                };
                self.send_pkt(&Packet::AtomRsp(a));
            }
        }
    }
}

/// One rdm4 endpoint and one libfabric-behaviour peer on a sim network.
pub struct Pair {
    pub net: SimNet,
    pub ep: Endpoint<SimDevice>,
    pub peer: LfPeer,
    /// rdm4's address of the peer.
    pub to_peer: Addr,
    pub cq: Vec<Cqe>,
    /// Virtual nanoseconds per step.
    pub tick: u64,
}

impl Pair {
    /// A pair on a network with RDMA read and write (an EFA device that has them).
    pub fn new(profile: Profile, cfg: Config) -> Pair {
        Pair::with_sim(profile, SimConfig { rdma: true, copy_gathered: true, ..SimConfig::default() }, cfg)
    }

    pub fn with_sim(profile: Profile, sim: SimConfig, cfg: Config) -> Pair {
        let net = SimNet::new(sim);
        let mut ep = Endpoint::new(net.device(), cfg);
        let peer = LfPeer::new(profile, net.device(), &ep.addr());
        let to_peer = ep.av_insert(&peer.addr()).expect("av_insert");
        Pair { net, ep, peer, to_peer, cq: Vec::new(), tick: 100 }
    }

    /// A pair whose HANDSHAKEs have been exchanged (the peer asked first,
    /// as libfabric does before a protocol that needs the peer's features).
    pub fn connected(profile: Profile, cfg: Config) -> Pair {
        let mut p = Pair::new(profile, cfg);
        p.connect();
        p
    }

    pub fn connect(&mut self) {
        self.peer.trigger_handshake();
        let ok = self.run_until(1000, |p| p.peer.their_extra.is_some() && p.peer.hs_sent);
        assert!(ok, "{:?}: handshake", self.peer.profile);
        self.settle(100);
        self.peer.received.clear();
    }

    pub fn step(&mut self) {
        let now = self.net.now();
        self.ep.progress(now);
        self.ep.poll_cq(&mut self.cq, usize::MAX);
        self.peer.progress();
        self.net.advance(self.tick);
    }

    /// Steps until `done` holds, at most `max` steps; whether it held.
    pub fn run_until(&mut self, max: usize, mut done: impl FnMut(&Pair) -> bool) -> bool {
        for _ in 0..max {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }

    pub fn settle(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step();
        }
    }

    /// Names of the packet types the peer received, in order, deduplicated.
    pub fn types_to_peer(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for p in &self.peer.received {
            let n = PacketType::from_u8(p[0]).map_or("?", |t| t.name());
            if !v.contains(&n) {
                v.push(n);
            }
        }
        v
    }

    /// The packets of type `t` the peer received.
    pub fn to_peer_of(&self, t: PacketType) -> Vec<Vec<u8>> {
        self.peer.received.iter().filter(|p| p[0] == t as u8).cloned().collect()
    }
}
