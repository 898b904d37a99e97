//! The long-CTS data phase shared by long-CTS messages, emulated long-CTS
//! writes and emulated long-CTS reads (spec §3.2, §3.3): the receiver grants
//! windows with CTS (`recv_length` > 0 always), the sender answers with
//! CTSDATA; a long read's responder opens with a READRSP.

use super::op::{Data, Op, State, Via};
use super::Core;
use crate::wire::{self, Packet, CTS_READ_REQ};

/// Bytes a receiver grants in one window: the credits asked for (at
/// least 1, at most `max`) in CTSDATA of `cap` bytes.
fn window_bytes(requested: u32, max: u32, cap: usize) -> u64 {
    u64::from(requested.clamp(1, max.max(1))) * cap as u64
}

impl Core {
    /// Sends a CTS for operation `key` when its current window is used up.
    pub(crate) fn grant(&mut self, key: u32) {
        let max = self.cfg.max_credits;
        let cap = self.ops.get(key).map_or(0, |op| self.ctsdata_cap(op.peer));
        let window = match self.ops.get_mut(key) {
            Some(op) if op.received < op.len => {
                let (received, len) = (op.received, op.len);
                match op.grant_mut() {
                    Some(g) if received >= g.end => {
                        let w = window_bytes(g.credits, max, cap).min(len - received);
                        g.end = received + w;
                        w
                    }
                    _ => return,
                }
            }
            _ => return,
        };
        let connid = self.my_connid();
        let Some(op) = self.ops.get(key) else {
            return;
        };
        let cts = wire::Cts {
            flags: if matches!(op.state, State::Read { .. }) { CTS_READ_REQ } else { 0 },
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
    pub(crate) fn first_read_window(&self, peer: u32, len: u64) -> u64 {
        window_bytes(self.cfg.credit_request, self.cfg.max_credits, self.ctsdata_cap(peer))
            .min(len)
            .min(u32::MAX.into())
    }

    /// A CTS: the sender may send `recv_length` more bytes.
    pub(crate) fn handle_cts(&mut self, peer: u32, c: &wire::Cts) {
        let sender = self.ops.get_mut(c.send_id).filter(|op| op.peer == peer && c.recv_length > 0);
        let Some(op) = sender else {
            self.stats.protocol_errors += 1;
            return;
        };
        let (sent, len) = (op.sent, op.len);
        match &mut op.state {
            State::Send { out, .. } | State::Write { out, .. } | State::ServeRead { out, .. } if out.started => {
                let Via::LongCts { window_end, .. } = &mut out.via else {
                    self.stats.protocol_errors += 1;
                    return;
                };
                *window_end = ((*window_end).max(sent).saturating_add(c.recv_length)).min(len);
            }
            _ => {
                self.stats.protocol_errors += 1;
                return;
            }
        }
        op.remote_id = c.recv_id;
        self.enqueue(c.send_id);
    }

    /// Data for a receive, a long write's target, or a read's requester.
    pub(crate) fn take_data(&mut self, peer: u32, key: u32, off: u64, data: Data<'_>) {
        let ok = self.ops.get(key).is_some_and(|op| {
            op.peer == peer
                && matches!(op.state, State::Recv { .. } | State::ServeWrite { .. } | State::Read { .. })
                && off.checked_add(data.len() as u64).is_some_and(|end| end <= op.len)
        });
        if !ok {
            self.stats.protocol_errors += 1;
            return;
        }
        let Some(op) = self.ops.get_mut(key) else {
            return;
        };
        if !op.place_data(off, data) {
            self.stats.protocol_errors += 1;
            return;
        }
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
        if let Some(op) = self.ops.get_mut(r.recv_id).filter(|o| o.peer == peer) {
            if let State::Read { out, .. } = &mut op.state {
                out.awaits = None; // the target answered (a zero-length read has no other sign)
                op.remote_id = r.send_id;
            }
        }
        self.take_data(peer, r.recv_id, 0, Data::Inline(r.data));
    }

    /// The next CTSDATA segment of a sender in its CTSDATA phase, within its
    /// window: (offset, length).
    /// `cap` is [`Core::ctsdata_cap`].
    pub(crate) fn ctsdata_segment(op: &Op, cap: usize) -> Option<(u64, usize)> {
        let window_end = match op.out()?.via {
            Via::LongCts { window_end, .. } => window_end,
            _ => return None,
        };
        if op.sent >= window_end {
            return None;
        }
        let chunk = (window_end - op.sent).min(cap as u64) as usize;
        Some((op.sent, chunk))
    }

    /// The headers of the CTSDATA carrying `op`'s bytes from `off` (the
    /// device gathers the bytes), with `connid` when the peer has our handshake.
    pub(crate) fn ctsdata_hdr(op: &Op, off: u64, connid: Option<u32>) -> wire::CtsData<'static> {
        wire::CtsData { flags: 0, recv_id: op.remote_id, seg_offset: off, connid, data: &[] }
    }
}
