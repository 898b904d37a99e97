//! Progress: the calls that take packets and device events and send what
//! is queued (general and express), sleeping and waking, and handing out
//! completions; the handling of device events (sends done, peers lost,
//! writes with immediate data).

use super::op::{State, Via};
use super::*;

impl<D: Device> Endpoint<D> {
    /// Makes progress: handles device events and received packets, sends
    /// what is queued. `now` is the caller's clock in nanoseconds.
    pub fn progress(&mut self, now: u64) {
        self.expire(now);
        self.progress_into(now, &mut ());
    }

    /// [`Self::progress`], offering `sink` the completions of eager messages
    /// taken by posted receives while the queue is empty (the common
    /// receive). Entries the sink takes are older than any queued during the
    /// call: the queue was empty when the sink took them.
    #[inline(never)]
    pub fn progress_into<S: CqSink>(&mut self, _now: u64, sink: &mut S) {
        let Endpoint { dev, core } = self;
        // Packets first: what a peer sent before the device reports it lost
        // is still handled.
        {
            if core.redeliver_due {
                core.start_redelivery(dev);
            }
            let batch = core.cfg.rx_batch;
            // A call stops taking packets after an eager message that found
            // no receive when the application has posted receives since the
            // last call: it is likely to post more before the next, and the
            // messages behind then go straight into them. Otherwise a
            // receiver once handed messages ahead of its receives stays
            // that way, every message copied twice (each new one finds no
            // receive, each receive takes an unexpected one), which slows a
            // stream (docs/performance.md, "Express receive"). An
            // application that posts no receives meanwhile still has every
            // packet taken.
            core.rx_stop = false;
            let taken = dev.recv(batch, |from, pkt: &[u8], gathered| {
                match gathered {
                    None => core.handle_packet(from, pkt, sink),
                    Some(payload) => core.handle_gathered(from, pkt, payload),
                }
                if core.rx_defer {
                    core.rx_defer = false;
                    Rx::Defer
                } else if core.rx_stop {
                    Rx::Stop
                } else {
                    Rx::Next
                }
            });
            core.packets_in += taken as u64;
            core.recvs_posted = false;
        }
        core.finish_progress(dev);
    }

    /// The express receive: takes waiting packets while each is the usual
    /// eager message from the last sender and the oldest posted receive
    /// takes it, up to `room`, offering their completions to `sink` (which
    /// must take `room` entries). It runs only while nothing is queued
    /// (completions, packets to send). Returns how many it took and whether
    /// the call must go on with [`Self::progress_into`]:
    /// - (0, false): no packet waited, and the rest of a progress call
    ///   (device events, queues) was done here, which may have queued
    ///   completions.
    /// - (n > 0, false): done. Another packet may wait, left where it is
    ///   for the next call: `room` ran out, or the next is the usual
    ///   message but no receive is posted for it yet.
    /// - (n, true): another packet waits that this path does not take (or
    ///   the device's periodic work is due), or nothing could be taken
    ///   this way at all: `progress_into` does the rest.
    ///
    /// A call that delivered messages does not take the next one as
    /// unexpected: its caller is busy taking completions and posting
    /// receives, so the message likely finds its receive on the next call,
    /// copied once and by this path. A streaming receiver a little behind
    /// its sender otherwise takes one message per call as unexpected, the
    /// completion that its next receive then queues makes the next call go
    /// the general way, and so on: the state a stream whose sender runs
    /// ahead (`rdm4-perf`'s) settles in without this rule (see also
    /// [`Self::took_unexpected`] and docs/performance.md, "Express
    /// receive"). The next call that delivers nothing this way takes it by
    /// the general path, so a caller that posts no receive still gets every
    /// packet taken, one call later.
    ///
    /// It is the receiving half of a ping-pong, and the messages of a
    /// stream, in fewer instructions than `progress_into`: no batch
    /// machinery, no look past the packet taken but one load, no events or
    /// queues to go through afterwards. An empty poll looks at the ring
    /// once, here, and not again in `progress_into`, so this path adds
    /// little to it. (Polls that are longer or shorter both lengthen a
    /// ping-pong: docs/performance.md, "Express receive".)
    #[inline(always)]
    pub fn progress_express<S: CqSink>(&mut self, sink: &mut S, room: usize) -> (usize, bool) {
        let Endpoint { dev, core } = self;
        if !core.quiet() {
            return (0, true);
        }
        // Set by the express path when a usual message finds no receive.
        core.rx_stop = false;
        // Taking a message changes none of what `quiet` looked at: the
        // sink takes its entry, the queues stay empty.
        let Some(express) = dev.as_in_call() else { return (0, true) };
        let (n, more) = express.recv_express(
            room,
            #[inline(always)]
            |ah, pkt| core.eager_express(ah, pkt, sink),
        );
        let more = more && (n == 0 || (n < room && !core.rx_stop));
        if !more {
            // As at the end of a progress call (that took packets or
            // found none).
            core.recvs_posted = false;
            if n == 0 {
                core.finish_progress(dev);
            }
        }
        (n, more)
    }

    /// Blocks until the device may have a packet or `timeout_ms` passed
    /// (negative: no limit); returns at once when completions are waiting.
    /// False when the device cannot block (then busy-poll with `progress`).
    pub fn wait(&mut self, timeout_ms: i32) -> bool {
        if !self.core.cq.is_empty() {
            return true;
        }
        self.dev.as_sleep().is_some_and(|s| s.wait(timeout_ms))
    }

    /// Whether the endpoint has work queued that only more progress calls
    /// do (packets the device refused for now, inserts, registrations to
    /// drop, packets held back to hand over again): a progress thread
    /// then polls on rather than sleeps.
    pub fn has_queued_work(&self) -> bool {
        !(self.core.ctrl.is_empty()
            && self.core.txq.is_empty()
            && self.core.pending_insert.is_empty()
            && self.core.dereg.is_empty()
            && !self.core.redeliver_due)
    }

    /// Whether the application may sleep on [`Self::wait_fd`]'s descriptor
    /// now: no completion is queued, no work waits for a progress call
    /// (packets to send, a peer's packets to take again), and the device
    /// holds nothing the descriptor would not announce. False: progress
    /// (and take the completions) first.
    pub fn trywait(&mut self) -> bool {
        self.before_sleep();
        self.core.cq.is_empty() && !self.has_queued_work() && self.dev.as_sleep().is_none_or(|s| s.trywait())
    }

    /// See [`Sleep::sleep_begin`]; `None` also where the device cannot
    /// sleep (then poll on).
    pub fn sleep_begin(&mut self) -> Option<(std::os::fd::RawFd, i32)> {
        self.before_sleep();
        self.dev.as_sleep()?.sleep_begin()
    }

    /// See [`Sleep::sleep_end`].
    pub fn sleep_end(&mut self) {
        if let Some(s) = self.dev.as_sleep() {
            s.sleep_end()
        }
    }

    /// See [`Sleep::wake_sleeper`].
    pub fn wake_sleeper(&self) {
        if let Some(s) = self.dev.as_sleeper() {
            s.wake_sleeper()
        }
    }

    /// A descriptor that polls readable when a packet may have arrived
    /// (for epoll/poll loops), if the device has one ([`Sleep`]).
    pub fn wait_fd(&mut self) -> Option<std::os::fd::RawFd> {
        self.dev.as_sleep()?.wait_fd()
    }

    /// Moves up to `max` completions into `out`; returns how many.
    pub fn poll_cq(&mut self, out: &mut Vec<Cqe>, max: usize) -> usize {
        out.reserve(max.min(self.core.cq.len()));
        self.core.cq.take_front(max, |_, e| out.push(*e))
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many.
    pub fn drain_cq(&mut self, max: usize, f: impl FnMut(usize, &Cqe)) -> usize {
        self.core.cq.take_front(max, f)
    }

    /// Completions waiting to be polled.
    pub fn cq_len(&self) -> usize {
        self.core.cq.len()
    }

    /// Whether an entry queued by a receive that took an unexpected eager
    /// message whole (completed when posted) may still wait in the queue.
    /// A poll that then hands out the queue first lets
    /// [`Self::progress_express`] run: a streaming receiver that fell
    /// behind its sender once (one message taken as unexpected, so its
    /// next receive's completion is queued, so the next call goes the
    /// general way, which takes one message as unexpected again, ...)
    /// gets back to the express path, instead of staying behind for good
    /// on the longer general path (`scripts/icount.sh ahead`). Other
    /// queued completions (a send's, in a ping-pong) are left to the end of
    /// the call: handing them out first lengthens the ping-pong
    /// (docs/performance.md, "Express receive"). True until a call of this
    /// finds the queue empty.
    #[inline(always)]
    pub fn took_unexpected(&mut self) -> bool {
        if !self.core.took_unexpected {
            return false;
        }
        self.core.took_unexpected = !self.core.cq.is_empty();
        true
    }
}

impl Core {
    /// A progress call after the packets: device events, then what is
    /// queued to send.
    #[inline(always)]
    pub(super) fn finish_progress<D: Device>(&mut self, dev: &mut D) {
        dev.events(&mut self.events);
        if !self.events.is_empty() {
            self.handle_events(dev);
        }
        self.flush(dev);
    }

    #[inline(never)]
    pub(super) fn handle_events<D: Device>(&mut self, dev: &mut D) {
        let events = std::mem::take(&mut self.events);
        let mut asked = false;
        for ev in &events {
            match *ev {
                DevEvent::SendDone { wr_id, status, .. } => {
                    if wr_id == 0 {
                        continue; // control packet: nobody waits for it
                    }
                    let key = (wr_id - 1) as u32;
                    let Some(op) = self.ops.get_mut(key) else {
                        continue;
                    };
                    if matches!(op.state, State::Recv { .. } | State::ServeWrite { .. }) {
                        // Only long-read receives (and writes) post device work.
                        self.longread_read_done(key, status.is_ok());
                        continue;
                    }
                    op.inflight = op.inflight.saturating_sub(1);
                    if op.closing {
                        if op.inflight == 0 {
                            let s = op.status;
                            self.complete(key, s);
                        }
                        continue;
                    }
                    if op.out().is_some_and(|o| o.via == Via::Direct) && status.is_ok() {
                        op.received = op.len; // the RDMA moved every byte
                    }
                    if let Err(s) = status {
                        if s == Status::RemoteAccess {
                            // The device checked the target's registration
                            // for it: the same detail as the target's own
                            // answer (PEER_ERROR) carries.
                            op.detail = s.code().unsigned_abs();
                        }
                        if s != Status::PeerUnreachable {
                            // Its peer must not wait for the rest.
                            self.abandon(key, s);
                        }
                        self.complete(key, s);
                    } else {
                        self.check_done(key);
                    }
                }
                // A peer's direct write with remote CQ data: its
                // target-side completion.
                DevEvent::WriteImm { ah, raw, imm, len } => {
                    // A writer the device does not know is learnt from its
                    // address (at the peer limit: unnamed).
                    let peer = match ah.and_then(|a| self.by_ah.get(a)) {
                        Some(p) => p,
                        None => self.learn(raw).unwrap_or(ADDR_UNSPEC),
                    };
                    self.remote_write_cqe(peer, len, u64::from(imm));
                }
                DevEvent::PeerLost { ah } => {
                    if let Some(p) = self.by_ah.get(ah) {
                        if let Some(peer) = self.peers.get_mut(p) {
                            peer.lost = true;
                            crate::log::log!(crate::log::WARN, "peer {p} lost: its operations fail with RDM4_EPEER");
                        }
                        self.fail_peer(p, Status::PeerUnreachable);
                    }
                }
                DevEvent::Awaiting => asked = true,
            }
        }
        self.events = events;
        self.events.clear();
        if asked {
            self.tell_awaiting(dev);
        }
    }

    /// Completes every operation towards or from `peer` with `status`:
    /// its sends, RMA and atomics, what it asked of this endpoint, its
    /// messages still arriving before a receive took them, and, with
    /// `receives`, the receives it was filling. Receives not matched yet
    /// stay posted, and so do its messages that arrived whole (they are
    /// still delivered).
    pub(super) fn cancel_ops_of(&mut self, peer: u32, status: Status, receives: bool) {
        if self.queued_eager > 0 {
            let mut failed = Vec::new();
            self.txq.retain(|tx| match tx {
                op::Tx::Eager(e) if e.peer == peer => {
                    failed.push(*e);
                    false
                }
                _ => true,
            });
            self.queued_eager -= failed.len();
            for e in failed {
                self.eager_sent(&e, status);
            }
        }
        for key in self.ops.keys() {
            let doomed = self.ops.get(key).is_some_and(|o| {
                o.peer == peer
                    && match o.state {
                        State::Recv { .. } => receives,
                        State::Unexpected { .. } => o.received < o.len || self.lr_iovs.contains_key(&key),
                        _ => true,
                    }
            });
            if doomed {
                self.complete(key, status);
            }
        }
    }

    /// Fails every operation towards or from a lost `peer` and drops what it held.
    pub(super) fn fail_peer(&mut self, peer: u32, status: Status) {
        self.cancel_ops_of(peer, status, true);
        if let Some(p) = self.peers.get_mut(peer) {
            p.reorder.clear();
            self.reorder_bytes -= p.reorder_bytes.min(self.reorder_bytes);
            p.reorder_bytes = 0;
            p.waiting_hs.clear();
        }
        self.ctrl.retain(|(p, _, _)| *p != peer);
        self.after_hs.retain(|(p, _)| *p != peer);
    }
}
