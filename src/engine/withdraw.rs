//! Withdrawing operations and the `msg_id` they hold: canceling
//! operations that have not started, and PEER_ERROR by message
//! (`ref_kind` MSG_ID and MSG_ID_SKIP).
//!
//! Every RTM and RTA takes the peer's next `msg_id`, and the receiver
//! processes them in that order: a number taken but never sent would
//! hold back every later message of the sender for good, while their
//! sends complete. So:
//! - An operation that waits for the peer's HANDSHAKE (delivery complete,
//!   a write atomic, or any message behind one of those) takes its
//!   `msg_id` only when it leaves the wait (`Core::assign_msg_id`): one
//!   that fails there (the peer lacks the feature) or is canceled or
//!   timed out took none.
//! - A message or atomic that took its number and ends before its first
//!   packet left (canceled, timed out, refused by the device) sends
//!   PEER_ERROR MSG_ID_SKIP naming it: the receiver moves past the
//!   number (held as a tombstone in its reorder buffer when it arrives
//!   early) and owes no completion. One that ends after some of its
//!   packets left sends MSG_ID: the receive that took it completes with
//!   the error. Only a peer that advertised PEER_ERROR gets either; to
//!   another, such an operation cannot be withdrawn (`rdm4_cancel`
//!   answers `Busy`), and a timeout leaves it to finish.
//! - Cancel (`Endpoint::cancel`): a posted receive (`rtm.rs`), else an
//!   operation of the endpoint's own that has not started: still waiting
//!   for the HANDSHAKE, or queued with no packet handed to the device.
//!   Started ones are not canceled (`Busy`: they complete as usual).

use super::op::{State, Tx};
use super::peer::{msg_order, MsgOrder};
use super::{send_flags, Core, Cqe, Status};
use crate::wire::{self, peer_error_ref, Packet};

impl Core {
    /// Gives operation `key`, leaving the HANDSHAKE wait, its peer's next
    /// `msg_id` if it is a message or an atomic.
    pub(crate) fn assign_msg_id(&mut self, key: u32) {
        let Some(op) = self.ops.get_mut(key) else { return };
        if !matches!(op.state, State::Send { .. } | State::Atomic { .. }) {
            return;
        }
        let Some(p) = self.peers.get_mut(op.peer) else { return };
        if let Some(id) = op.msg_id_mut() {
            *id = p.tx_msg_id;
            p.tx_msg_id = p.tx_msg_id.wrapping_add(1);
        }
    }

    /// Whether the `msg_id` of a message to `peer` can be withdrawn.
    fn can_withdraw(&self, peer: u32) -> bool {
        self.peers.get(peer).is_some_and(|p| self.both(p, wire::extra::PEER_ERROR))
    }

    /// Tells `peer` that message `msg_id` ends here: MSG_ID_SKIP when none
    /// of it left (`started` false), else MSG_ID with `status`.
    fn withdraw_msg_id(&mut self, peer: u32, msg_id: u32, started: bool, status: Status) {
        let e = wire::PeerError {
            flags: 0,
            op_id: msg_id,
            ref_kind: if started { peer_error_ref::MSG_ID } else { peer_error_ref::MSG_ID_SKIP },
            prov_errno: status.code().unsigned_abs(),
            connid: self.my_connid(),
            padding: 0,
        };
        crate::log::log!(crate::log::INFO, "message {msg_id} to peer {peer} withdrawn ({status:?}): PEER_ERROR");
        self.queue_ctrl(peer, &Packet::PeerError(e));
    }

    /// Operation `key` (a message or atomic that holds a `msg_id`) ends
    /// here with `status`: withdraws its number where the peer takes it.
    /// False when it cannot be withdrawn.
    pub(crate) fn abandon(&mut self, key: u32, status: Status) -> bool {
        let Some(op) = self.ops.get(key) else { return true };
        let msg_id = match &op.state {
            State::Send { msg, .. } => msg.msg_id,
            State::Atomic { msg_id, .. } => *msg_id,
            _ => return true,
        };
        let (peer, started) = (op.peer, op.started() || op.sent > 0);
        if self.peers.get(peer).is_some_and(|p| p.waiting_hs.contains(&key)) {
            return true; // no number taken yet
        }
        if !self.can_withdraw(peer) {
            return false;
        }
        self.withdraw_msg_id(peer, msg_id, started, status);
        true
    }

    /// Cancels the endpoint's own operation with `context` that has not
    /// started; see the module docs.
    pub(crate) fn cancel_op(&mut self, context: u64) -> Result<(), Status> {
        let found = self
            .ops
            .iter()
            .find(|(_, o)| o.context == context && o.is_request() && !o.closing)
            .map(|(key, o)| (key, o.peer, o.started() || o.sent > 0 || o.inflight > 0));
        if let Some((key, peer, started)) = found {
            let waiting = self.peers.get(peer).is_some_and(|p| p.waiting_hs.contains(&key));
            if started && !waiting {
                return Err(Status::Busy);
            }
            if !waiting && !self.abandon(key, Status::Canceled) {
                return Err(Status::Busy);
            }
            if let Some(p) = self.peers.get_mut(peer) {
                p.waiting_hs.retain(|&k| k != key);
            }
            self.complete(key, Status::Canceled);
            return Ok(());
        }
        // A queued eager message without an entry.
        let pos = self.txq.iter().position(|t| matches!(t, Tx::Eager(e) if e.context == context));
        let Some(Tx::Eager(e)) = pos.and_then(|i| self.txq.get(i).copied()) else { return Err(Status::NoEnt) };
        if !self.can_withdraw(e.peer) {
            return Err(Status::Busy);
        }
        self.txq.remove(pos.unwrap_or_default());
        self.queued_eager -= 1;
        self.withdraw_msg_id(e.peer, e.msg_id, false, Status::Canceled);
        self.cq.push_back(Cqe::new(e.context, send_flags(e.tag.is_some()), e.buf.len() as u64, Status::Canceled));
        Ok(())
    }

    /// A PEER_ERROR naming a message of `peer` by its `msg_id`.
    pub(crate) fn handle_msg_error(&mut self, peer: u32, e: &wire::PeerError, bytes: &[u8]) {
        if e.ref_kind == peer_error_ref::MSG_ID {
            // The sender ended a message begun: the receive (or the
            // unexpected message) it was filling fails.
            let found = self.ops.iter().find(|(_, o)| {
                o.peer == peer
                    && matches!(&o.state, State::Recv { msg, .. } | State::Unexpected { msg, .. } if msg.msg_id == e.op_id)
            });
            match found.map(|(k, _)| k) {
                Some(key) => self.complete(key, super::rma::peer_status(e.prov_errno)),
                None => self.stats.protocol_errors += 1,
            }
            return;
        }
        let window = self.cfg.reorder_window;
        let Some(p) = self.peers.get_mut(peer) else { return };
        match msg_order(e.op_id, p.rx_msg_id, window) {
            MsgOrder::Now => {
                p.rx_msg_id = p.rx_msg_id.wrapping_add(1);
                if p.deferred {
                    self.redeliver_due = true;
                }
                self.drain_reorder(peer);
            }
            MsgOrder::Ahead => {
                // A tombstone, taken in its turn by `drain_reorder`.
                let mut copy = self.pool.pop().unwrap_or_default();
                copy.clear();
                copy.extend_from_slice(bytes);
                p.reorder_bytes += copy.len();
                self.reorder_bytes += copy.len();
                p.reorder.entry(e.op_id).or_default().push(copy);
            }
            MsgOrder::Past | MsgOrder::TooFar => self.stats.protocol_errors += 1,
        }
    }
}
