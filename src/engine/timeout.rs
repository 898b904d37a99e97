//! Request timeouts: a one-sided operation (write, read, atomic) that the
//! target must answer or serve (and a delivery-complete send, see below) ends with `TimedOut` when it is not done
//! within `Config::request_timeout_ns` of its post — a peer that never
//! answers (a legacy peer that drops a request it cannot serve, a process
//! that stopped progressing) never leaves its requester waiting forever.
//!
//! Decisions:
//! - Timed: writes, reads and atomics, emulated or waiting for the
//!   peer's HANDSHAKE; delivery-complete sends to a peer without
//!   PEER_ERROR (a receive that fails there sends nothing back, and the
//!   RECEIPT never comes; a peer with it reports the failure). Not timed:
//!   other messages (a send waits for the receiver's application to post
//!   a receive, which may rightly take any time; a lost peer ends them
//!   through the device), and direct RDMA once handed to the device (the
//!   device ends it: completion or error).
//! - The clock is the caller's: the engine reads none. Deadlines are set
//!   by the first [`Endpoint::expire`] after the post (a post between
//!   progress calls has no time of its own), so the timeout counts from
//!   at most one progress call after the post.
//! - A response that arrives after the timeout names an operation entry
//!   that no longer exists: it is dropped and counted as a protocol
//!   error, and nothing is written into the buffer the application got
//!   back.

use super::op::{State, Via};
use super::{Core, Device, Endpoint, Status};

impl Core {
    /// Starts the timeout of request `key` (its deadline is set at the
    /// next [`Endpoint::expire`]).
    pub(crate) fn time_request(&mut self, key: u32) {
        if self.cfg.request_timeout_ns == 0 {
            return;
        }
        // Entries of finished requests leave from the front as they are
        // met; requests finishing out of order could still pile them up
        // behind a long one: dropped once they outnumber the live.
        if self.timed.len() >= 64 && self.timed.len() > 2 * self.ops.len() {
            let ops = &self.ops;
            self.timed.retain(|&(k, _, ctx)| ops.get(k).is_some_and(|o| o.context == ctx));
        }
        let context = self.ops.get(key).map_or(0, |o| o.context);
        self.timed.push_back((key, 0, context));
    }

    fn expire(&mut self, now: u64) {
        let deadline = now.saturating_add(self.cfg.request_timeout_ns).max(1);
        // New entries (deadline 0) are at the back: give them theirs.
        for e in self.timed.iter_mut().rev() {
            if e.1 != 0 {
                break;
            }
            e.1 = deadline;
        }
        while let Some(&(key, at, ctx)) = self.timed.front() {
            // The entry's operation (the context tells a reused key apart).
            let live = self.ops.get(key).filter(|o| o.context == ctx);
            if live.is_some() && at > now {
                break;
            }
            self.timed.pop_front();
            let Some(op) = live else { continue };
            let request = match &op.state {
                State::Write { .. } | State::Read { .. } | State::Atomic { .. } => true,
                // A DC send waits for its RECEIPT; a peer that cannot
                // report a failed receive (no PEER_ERROR) would leave it
                // waiting for ever.
                State::Send { msg, .. } if msg.dc => {
                    !self.peers.get(op.peer).is_some_and(|p| self.both(p, crate::wire::extra::PEER_ERROR))
                }
                _ => false,
            };
            let direct_started = op.out().is_some_and(|o| o.via == Via::Direct && o.started);
            if !request || op.closing || direct_started {
                continue;
            }
            let peer = op.peer;
            let waiting = self.peers.get(peer).is_some_and(|p| p.waiting_hs.contains(&key));
            // An atomic whose RTA has not left holds a `msg_id` to withdraw;
            // where the peer cannot be told, it is left to finish.
            if matches!(op.state, State::Atomic { .. } | State::Send { .. })
                && !op.started()
                && !waiting
                && !self.abandon(key, Status::TimedOut)
            {
                continue;
            }
            self.stats.timeouts += 1;
            crate::log::log!(crate::log::INFO, "a request to peer {peer} timed out");
            if let Some(p) = self.peers.get_mut(peer) {
                p.waiting_hs.retain(|&k| k != key);
            }
            self.complete(key, Status::TimedOut);
        }
    }
}

impl<D: Device> Endpoint<D> {
    /// True while requests are timed ([`Self::expire`] has work).
    #[inline(always)]
    pub fn timers_armed(&self) -> bool {
        !self.core.timed.is_empty()
    }

    /// Ends the requests whose timeout passed at `now` (the caller's clock,
    /// nanoseconds, the same as [`Self::progress`]'s) with `TimedOut`.
    pub fn expire(&mut self, now: u64) {
        if self.timers_armed() {
            self.core.expire(now);
        }
    }

    /// [`Self::progress_into`] after [`Self::expire`] with the time `clock`
    /// tells, which it asks only while requests are timed.
    #[inline(always)]
    pub fn progress_timed<S: super::CqSink>(&mut self, clock: impl FnOnce() -> u64, sink: &mut S) {
        if self.timers_armed() {
            self.expire_now(clock());
        }
        self.progress_into(0, sink);
    }

    #[inline(never)]
    fn expire_now(&mut self, now: u64) {
        self.core.expire(now);
    }

    /// Nanoseconds from `now` until the next request times out (0: due),
    /// `None` when none is timed. A request posted since the last
    /// [`Self::expire`] counts the whole timeout.
    pub fn next_timeout(&self, now: u64) -> Option<u64> {
        let &(_, at, _) = self.core.timed.front()?;
        Some(if at == 0 { self.core.cfg.request_timeout_ns } else { at.saturating_sub(now) })
    }
}
