//! The long-CTS data phase shared by long-CTS messages, emulated long-CTS
//! writes and emulated long-CTS reads (spec §3.2, §3.3): the receiver grants
//! windows with CTS (`recv_length` > 0 always), the sender answers with
//! CTSDATA; a long read's responder opens with a READRSP.

use super::op::{Data, Op, OpKind};
use super::Core;
use crate::wire::{self, Packet, Subprotocol, CTS_READ_REQ};

impl Core {
    /// Bytes a receiver grants in one window.
    fn window_bytes(&self, requested: u32) -> u64 {
        let credits = requested.clamp(1, self.cfg.max_credits.max(1));
        u64::from(credits) * self.ctsdata_cap() as u64
    }

    /// Sends a CTS for operation `key` when its current window is used up.
    pub(crate) fn grant(&mut self, key: u32) {
        let window = match self.ops.get(key) {
            Some(op) if op.received < op.len && op.received >= op.window_end => self.window_bytes(op.credits),
            _ => return,
        };
        let connid = self.my_connid();
        let Some(op) = self.ops.get_mut(key) else {
            return;
        };
        let window = window.min(op.len - op.received);
        op.window_end = op.received + window;
        let cts = wire::Cts {
            flags: if op.kind == OpKind::Read { CTS_READ_REQ } else { 0 },
            connid,
            padding: 0,
            send_id: op.remote_id,
            recv_id: key,
            recv_length: window,
        };
        let peer = op.peer;
        self.queue_ctrl(peer, &Packet::Cts(cts));
    }

    /// The first window of a long read, carried in the LONGCTS_RTR.
    pub(crate) fn first_read_window(&self, op: &Op) -> u64 {
        self.window_bytes(self.cfg.credit_request).min(op.len).min(u32::MAX.into())
    }

    /// A CTS: the sender may send `recv_length` more bytes.
    pub(crate) fn handle_cts(&mut self, peer: u32, c: &wire::Cts) {
        let ok = self.ops.get(c.send_id).is_some_and(|op| {
            op.peer == peer && op.started && matches!(op.kind, OpKind::Send | OpKind::Write | OpKind::ReadResponder)
        });
        if !ok || c.recv_length == 0 {
            self.stats.protocol_errors += 1;
            return;
        }
        let Some(op) = self.ops.get_mut(c.send_id) else {
            return;
        };
        op.remote_id = c.recv_id;
        op.window_end = (op.window_end.max(op.sent).saturating_add(c.recv_length)).min(op.len);
        self.enqueue(c.send_id);
    }

    /// Data for a receive, a long write's target, or a read's requester.
    pub(crate) fn take_data(&mut self, peer: u32, key: u32, off: u64, data: Data<'_>) {
        let ok = self.ops.get(key).is_some_and(|op| {
            op.peer == peer
                && matches!(op.kind, OpKind::Recv | OpKind::RemoteWrite | OpKind::Read)
                && off.checked_add(data.len() as u64).is_some_and(|end| end <= op.len)
        });
        if !ok {
            self.stats.protocol_errors += 1;
            return;
        }
        let Some(op) = self.ops.get_mut(key) else {
            return;
        };
        op.place_data(off, data);
        if op.received >= op.len {
            self.check_done(key);
        } else {
            self.grant(key);
        }
    }

    /// A CTSDATA segment.
    pub(crate) fn handle_ctsdata(&mut self, peer: u32, c: &wire::CtsData<'_>) {
        self.take_data(peer, c.recv_id, c.seg_offset, Data::Inline(c.data));
    }

    /// A READRSP: the first (or only) data of a read, at offset 0.
    pub(crate) fn handle_readrsp(&mut self, peer: u32, r: &wire::ReadRsp<'_>) {
        if let Some(op) = self.ops.get_mut(r.recv_id).filter(|o| o.peer == peer && o.kind == OpKind::Read) {
            op.remote_id = r.send_id;
            op.awaiting = false; // the target answered (a zero-length read has no other sign)
        }
        self.take_data(peer, r.recv_id, 0, Data::Inline(r.data));
    }

    /// True when operation `op` is in its CTSDATA phase: a long-CTS send or
    /// write past its REQ, a read responder past its READRSP.
    pub(crate) fn in_ctsdata_phase(op: &Op) -> bool {
        op.started
            && match op.kind {
                OpKind::Send => op
                    .ptype
                    .and_then(|t| t.req_info())
                    .is_some_and(|i| !matches!(i.proto, Subprotocol::Medium | Subprotocol::Runtread)),
                OpKind::Write | OpKind::ReadResponder => true,
                _ => false,
            }
    }

    /// The next CTSDATA segment of a sender in its CTSDATA phase, within its
    /// window: (offset, length).
    /// `cap` is [`Core::ctsdata_cap`].
    pub(crate) fn ctsdata_segment(op: &Op, cap: usize) -> Option<(u64, usize)> {
        if op.sent >= op.window_end {
            return None;
        }
        let chunk = (op.window_end - op.sent).min(cap as u64) as usize;
        Some((op.sent, chunk))
    }

    /// The headers of the CTSDATA carrying `op`'s bytes from `off` (the
    /// device gathers the bytes), with `connid` when the peer has our handshake.
    pub(crate) fn ctsdata_hdr(op: &Op, off: u64, connid: Option<u32>) -> wire::CtsData<'static> {
        wire::CtsData { flags: 0, recv_id: op.remote_id, seg_offset: off, connid, data: &[] }
    }
}
