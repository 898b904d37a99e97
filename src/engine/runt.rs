//! The runting read message subprotocol (spec §4.5): a long-read message
//! whose first `runt_length` bytes travel in RUNTREAD_RTM packets (the
//! "runt"), so the receiver has them without waiting for its read, and
//! whose rest the receiver reads in one RDMA read, as in long-read.
//!
//! - Sender: a message that would go by long-read, to a peer that
//!   advertised RUNT, while the runt bytes in flight to that peer are
//!   below `Config::runt_size`: the runt is what is left of that budget
//!   (at most the message less one byte, in whole 64-byte lines; none
//!   left: plain long-read), as the reference implementation sizes it.
//!   Every RUNTREAD_RTM carries the whole buffer's `read_iov`, its
//!   segment's `seg_offset`, and `runt_length` = the whole runt
//!   (wire-facts #16). The send ends with the receiver's EOR; the runt
//!   leaves the peer's budget then (or when the send fails or is nacked).
//! - Receiver: the first RUNTREAD_RTM (in `msg_id` order) matches a
//!   receive or waits as an unexpected message holding the runt; later
//!   ones are placed by offset (as medium segments). Once the whole runt
//!   is in a matched receive, the rest is read (`Core::pump_longread`
//!   from `runt_length` on, at most the receive's length), then the EOR
//!   and the completion. A read that fails is nacked as for long-read
//!   (spec §4.7): the message comes again by long-CTS, all of it.

use super::op::{Msg, Op, RxVia, State, Via};
use super::peer::Peer;
use super::send::RtmArgs;
use super::Core;
use crate::wire::{self, PacketType, ReqFamily, RmaIov, Subprotocol};

impl Core {
    /// The runt of a long-read message of `len` bytes to `peer` (0: plain
    /// long-read), taken from the peer's budget.
    pub(crate) fn take_runt(&mut self, peer: u32, len: usize) -> u64 {
        let Some(p) = self.peers.get(peer) else { return 0 };
        if self.cfg.runt_size == 0 || !p.path.runt || !self.both(p, wire::extra::RUNT) {
            return 0;
        }
        let room = (self.cfg.runt_size as u64).saturating_sub(p.runt_inflight);
        let runt = room.min(len as u64 - 1) & !63;
        if let Some(p) = self.peers.get_mut(peer) {
            p.runt_inflight += runt;
        }
        runt
    }

    /// Gives the runt of send `key` back to its peer's budget (it ended,
    /// or goes on by another protocol).
    pub(crate) fn release_runt(&mut self, key: u32) {
        let Some(op) = self.ops.get_mut(key) else { return };
        let State::Send { out: super::op::Out { via: Via::LongRead { runt, .. }, .. }, .. } = &mut op.state else {
            return;
        };
        let (peer, runt) = (op.peer, std::mem::take(runt));
        self.give_back_runt(peer, runt);
    }

    /// Gives `runt` bytes back to `peer`'s runt budget.
    pub(crate) fn give_back_runt(&mut self, peer: u32, runt: u64) {
        if let Some(p) = self.peers.get_mut(peer).filter(|_| runt > 0) {
            p.runt_inflight = p.runt_inflight.saturating_sub(runt);
        }
    }

    /// The RUNTREAD_RTM type of a message.
    pub(crate) fn runtread_type(tagged: bool) -> Option<PacketType> {
        PacketType::req_type(ReqFamily::Rtm, Subprotocol::Runtread, tagged, false)
    }

    /// The next RTM of long-read send `key` (`ptype`, its buffer
    /// registered as `mr`): the buffer's `read_iov` and, for a runting read
    /// (`runt` > 0), the runt's next segment. Its byte count takes the whole
    /// rest of the message with the runt's last segment, or at once for a
    /// plain long-read RTM, which carries no data: the receiver reads the
    /// rest, and its EOR ends the send.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_rtm(
        &self,
        key: u32,
        op: &Op,
        msg: &Msg,
        ptype: PacketType,
        mr: u64,
        runt: u64,
        peer: &Peer,
        out: &mut [u8],
    ) -> Option<(usize, u64)> {
        let args = RtmArgs::of(key, ptype, op, msg, false, false);
        let iov = [RmaIov::new(op.buf.addr(), op.len, mr)];
        let mut r = self.rtm_req(&args, peer);
        r.read_iov = &iov;
        r.fields.runt_length = runt;
        let room = peer.path.mtu.saturating_sub(r.hdr_len() + r.opt_hdr_len() + RmaIov::LEN) as u64;
        let chunk = runt.saturating_sub(op.sent).min(room);
        let last = op.sent + chunk >= runt;
        let counted = if last { op.len - op.sent } else { chunk };
        op.buf.with_slice(|s| {
            let data = s.get(op.sent as usize..(op.sent + chunk) as usize)?;
            wire::Req { data, ..r }.emit(out).ok().map(|n| (n, counted))
        })
    }

    /// A received RUNTREAD_RTM's fields are usable: the `read_iov` covers
    /// the message, the runt lies within it, and the segment within the
    /// runt.
    pub(crate) fn runt_ok(r: &wire::Req<'_>) -> bool {
        let f = &r.fields;
        let total = r.read_iov.iter().try_fold(0u64, |acc, v| acc.checked_add(v.len()));
        total == Some(f.msg_length)
            && f.runt_length <= f.msg_length
            && f.seg_offset.checked_add(r.data.len() as u64).is_some_and(|end| end <= f.runt_length)
    }

    /// Receiver: runtread receive `key` got runt bytes; once the whole runt
    /// is in and the receive is matched, the reads start.
    pub(crate) fn runt_progress(&mut self, key: u32) {
        let Some(op) = self.ops.get(key) else { return };
        let (State::Recv { msg, via: RxVia::LongRead { runt } }
        | State::Unexpected { msg, via: RxVia::LongRead { runt }, .. }) = &op.state
        else {
            return;
        };
        if op.received >= *runt {
            let (peer, msg_id) = (op.peer, msg.msg_id);
            if self.medium_rx.get(&(peer, msg_id)) == Some(&key) {
                self.medium_rx.remove(&(peer, msg_id));
            }
            if matches!(op.state, State::Recv { .. }) && self.lr_iovs.contains_key(&key) {
                self.enqueue(key);
            }
        }
    }
}
