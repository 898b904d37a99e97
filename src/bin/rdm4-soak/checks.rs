//! The soak worker's checks of what arrives: completions, messages
//! (bytes, length, tag, data), reads, the probes' finds and the writes
//! peers announce.

use rdm4::status::codes::RDM4_ECANCELED;

use super::super::plan::*;
use super::super::*;
use super::*;

impl Worker<'_> {
    pub(super) fn check_read(&mut self, op: Op) {
        let Op::Read { kind, buf, off, len } = op else { return };
        if self.reads[buf..buf + len] != *self.table.bytes(off, len) {
            self.error(&format!("a read of {len} bytes brought wrong bytes"));
        }
        self.bytes += len as u64;
        self.count(kind);
    }

    /// Adds this rank + 1 to rank 0's counter, fetching the old value or not.
    pub(super) fn atomic(&mut self, i: usize) {
        let peer = &self.peers[0];
        let (dest, raddr, key) = (self.handle(0), peer.reg, peer.reg_key);
        let operand = &self.operands[i] as *const u64 as *const c_void;
        let result = &mut self.results[i] as *mut u64 as *mut c_void;
        let fetch = self.rng.chance(70).then_some((i, self.posted_sum));
        self.posted_sum += self.rank as u64 + 1;
        self.post(Op::Atomic { fetch }, "an atomic", |ep, ctx| match fetch {
            Some(_) => rdm4_fetch_atomic(ep, operand, 1, result, RDM4_UINT64, RDM4_SUM, dest, raddr, key, ctx),
            None => rdm4_atomic(ep, operand, 1, RDM4_UINT64, RDM4_SUM, dest, raddr, key, ctx),
        });
    }

    /// Probes for the messages that probes take: claims them (and
    /// receives them) or discards them. True when one was found.
    pub(super) fn probe(&mut self) -> bool {
        // SAFETY: plain data.
        let mut e: rdm4_cqe = unsafe { std::mem::zeroed() };
        let ctx = (self.ops.len() + 1) as *mut c_void;
        let (any, all, null) = (RDM4_ADDR_UNSPEC, IGNORE_BUT_CLASS, std::ptr::null_mut());
        let (tagged, claim, discard) = (RDM4_MSG_TAGGED, RDM4_PROBE_CLAIM, RDM4_PROBE_DISCARD);
        let class = if self.found(rdm4_probe(self.ep, any, class_tag(Class::Claim), all, tagged | claim, ctx, &mut e)) {
            Class::Claim
        } else if self.found(rdm4_probe(self.ep, any, class_tag(Class::Discard), all, tagged | discard, null, &mut e)) {
            Class::Discard
        } else if self.umode == Untagged::Claim && self.found(rdm4_probe(self.ep, any, 0, 0, claim, ctx, &mut e)) {
            Class::Untagged
        } else {
            return false;
        };
        let Some(&s) = self.ranks.get(&e.src) else {
            self.fatal(&format!("a probe found a message of an unknown source {}", e.src));
        };
        // A tagged message names itself; an untagged one is its sender's oldest.
        let seq = if class == Class::Untagged {
            self.inbox[s].iter().position(|i| i.m.class == Class::Untagged && !i.taken)
        } else {
            Some((e.tag >> SEQ_SHIFT) as usize & 0xFF_FFFF).filter(|_| (e.tag >> SENDER_SHIFT) as usize & 0xFFFF == s)
        };
        let Some(seq) = seq.filter(|&q| self.inbox[s].get(q).is_some_and(|i| i.m.class == class && !i.taken)) else {
            self.fatal(&format!("a probe found a message nobody sent (from {s}, tag {:#x})", e.tag));
        };
        let (m, buf) = (self.inbox[s][seq].m, self.inbox[s][seq].buf);
        self.inbox[s][seq].taken = true;
        self.probes_left -= 1;
        if e.len != m.len as u64 || (class != Class::Untagged && e.tag != m.tag) {
            self.error(&format!(
                "a probe found {} bytes, tag {:#x}; sent {} bytes, tag {:#x}",
                e.len, e.tag, m.len, m.tag
            ));
        }
        if class == Class::Discard {
            self.inbox[s][seq].got = true;
            self.count(Kind::Discard);
            return true;
        }
        self.count(Kind::Claim);
        let p = self.arena[buf..].as_mut_ptr().cast::<c_void>();
        let op = Op::Recv { buf, cap: m.len, want: Want::Msg(s, seq) };
        self.post(op, "rdm4_recv_claimed", |ep, ctx| rdm4_recv_claimed(ep, ctx, p, m.len));
        true
    }

    pub(super) fn found(&self, rc: i32) -> bool {
        self.ok("rdm4_probe", rc) == 1
    }

    /// Handles one completion.
    pub(super) fn complete(&mut self, e: &rdm4_cqe) {
        if e.context.is_null() {
            return self.remote_write(e);
        }
        let Some(op) = self.ops.get_mut(e.context as usize - 1).map(|o| std::mem::replace(o, Op::Done)) else {
            self.fatal(&format!("a completion of an unknown context {:?}", e.context));
        };
        self.pending -= 1;
        match (op, e.status) {
            (Op::Done, _) => self.fatal("a second completion of one operation"),
            (Op::Cancel, RDM4_ECANCELED) if e.len == 0 => self.count(Kind::Cancel),
            (Op::Cancel, rc) => self.fatal(&format!("the canceled receive completed with {}", strerror(rc))),
            (_, rc) if rc != 0 => self.fatal(&format!("an operation completed with {}", strerror(rc))),
            (Op::Sent(kind), _) => self.count(kind),
            (op @ Op::Read { .. }, _) => self.check_read(op),
            (Op::Recv { buf, cap, want }, _) => self.received(e, buf, cap, want),
            (Op::Atomic { fetch }, _) => {
                self.added += self.rank as u64 + 1;
                self.count(Kind::Atomic);
                if let Some((i, floor)) = fetch {
                    if self.results[i] < floor {
                        let got = self.results[i];
                        self.error(&format!(
                            "a fetch-add returned {got}, below this process's own adds before it ({floor})"
                        ));
                    }
                }
            }
        }
    }

    /// A write with remote CQ data into this process's memory.
    pub(super) fn remote_write(&mut self, e: &rdm4_cqe) {
        let s = self.ranks.get(&e.src).copied().unwrap_or(usize::MAX);
        let pos = self.remote.iter().position(|&(w, d)| w == s && d == e.data);
        let want = RDM4_CQ_REMOTE_WRITE | RDM4_CQ_REMOTE_CQ_DATA;
        match pos {
            Some(i) if e.status == 0 && e.flags & want == want => {
                self.remote.swap_remove(i);
            }
            _ => self.fatal(&format!(
                "an unexpected remote write: status {}, flags {:#x}, data {:#x}, from {s}",
                e.status, e.flags, e.data
            )),
        }
    }

    /// Checks a receive's message: which one it is, its length, tag,
    /// remote CQ data and every byte.
    pub(super) fn received(&mut self, e: &rdm4_cqe, buf: usize, cap: usize, want: Want) {
        let Some(&s) = self.ranks.get(&e.src) else {
            return self.error(&format!("a message from an unknown source {}", e.src));
        };
        let len = e.len as usize;
        if len > cap {
            return self.error(&format!("a receive of {cap} bytes reports {len}"));
        }
        let bytes = &self.arena[buf..buf + len];
        let same = |m: &Msg| m.len == len && *self.table.bytes(m.off, len) == *bytes;
        let seq = match want {
            Want::Msg(from, seq) => Some(seq).filter(|_| from == s),
            Want::AnyTagged => Some((e.tag >> SEQ_SHIFT) as usize & 0xFF_FFFF)
                .filter(|_| (e.tag >> SENDER_SHIFT) as usize & 0xFFFF == s),
            Want::AnyUntagged => {
                self.inbox[s].iter().position(|i| i.m.class == Class::Untagged && !i.got && same(&i.m))
            }
        };
        let Some((seq, m)) = seq.and_then(|q| self.inbox[s].get(q).filter(|i| !i.got).map(|i| (q, i.m))) else {
            return self.error(&format!("{len} bytes, tag {:#x} from {s}: no such message was sent, or twice", e.tag));
        };
        let same = same(&m);
        let tagged = m.class != Class::Untagged;
        let data = (e.flags & RDM4_CQ_REMOTE_CQ_DATA != 0).then_some(e.data);
        let flags = RDM4_CQ_RECV | if tagged { RDM4_CQ_TAGGED } else { RDM4_CQ_MSG };
        if len != m.len || (tagged && e.tag != m.tag) || data != m.data || e.flags & flags != flags {
            let got = format!("{len} bytes, tag {:#x}, data {data:?}, flags {:#x}", e.tag, e.flags);
            let sent = format!("{} bytes, tag {:#x}, data {:?}", m.len, m.tag, m.data);
            return self.error(&format!("message {seq} from {s}: {got}; sent {sent}"));
        }
        if !same {
            self.error(&format!("message {seq} from {s} ({len} bytes): wrong bytes"));
        }
        self.inbox[s][seq].got = true;
        self.bytes += len as u64;
        self.count(Kind::Recv);
    }
}
