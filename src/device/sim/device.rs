//! The sim device's side of the device contract ([`Device`]) and of every
//! extension, each present as its [`SimConfig`] asks.

use super::*;

impl Device for SimDevice {
    type Sleep = Self;
    type Responder = Self;
    type MoreFollows = Self;
    type Doorbell = Self;
    type Mapped = Self;
    type InCall = Self;

    fn caps(&self) -> Caps {
        let net = self.net.borrow();
        let rdma = net.cfg.rdma;
        Caps {
            mtu: net.cfg.mtu,
            max_rdma_size: if rdma { net.cfg.max_rdma_size } else { 0 },
            rdma_read: rdma,
            rdma_write: rdma,
            rdma_write_imm: rdma && net.cfg.write_imm,
            sync_send: !net.cfg.async_send,
            gather_in_place: !net.cfg.copy_gathered,
            longread_min: net.cfg.longread_min,
            runt: true,
        }
    }

    fn local_addr(&self) -> RawAddr {
        self.net.borrow().nodes[self.me].addr
    }

    fn insert(&mut self, addr: &RawAddr) -> Result<Ah, Status> {
        let mut net = self.net.borrow_mut();
        let target = net.nodes.iter().position(|n| n.addr == *addr).ok_or(Status::NoAddr)?;
        let node = &mut net.nodes[self.me];
        if let Some(&Some(ah)) = node.by_node.get(target) {
            return Ok(ah);
        }
        let ah = node.ahs.len() as Ah;
        node.ahs.push(Some(target));
        if node.by_node.len() <= target {
            node.by_node.resize(target + 1, None);
        }
        node.by_node[target] = Some(ah);
        Ok(ah)
    }

    fn remove(&mut self, ah: Ah) {
        let mut net = self.net.borrow_mut();
        let node = &mut net.nodes[self.me];
        if let Some(Some(target)) = node.ahs.get(ah as usize).copied() {
            node.ahs[ah as usize] = None;
            node.by_node[target] = None;
        }
    }

    fn send_with(
        &mut self,
        ah: Ah,
        wr_id: u64,
        max_len: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<Sent, DevError> {
        self.queue(ah, wr_id, max_len, &mut build, None)
    }

    fn send_gather(
        &mut self,
        ah: Ah,
        wr_id: u64,
        hdr_max: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
        payload: UserBuf,
    ) -> Result<Sent, DevError> {
        if self.net.borrow().cfg.copy_gathered {
            self.gathering = payload.len();
            let sent = crate::device::copy_gather(self, ah, wr_id, hdr_max, &mut build, payload, false);
            self.gathering = 0; // also when nothing was queued
            return sent;
        }
        let gathered = if payload.is_empty() { None } else { Some(payload) };
        self.queue(ah, wr_id, hdr_max, &mut build, gathered)
    }

    fn recv<R: Flow>(&mut self, max: usize, mut f: impl FnMut(Option<Ah>, &[u8], Option<UserBuf>) -> R) -> usize {
        let mut n = 0;
        while n < max {
            let pkt = {
                let mut net = self.net.borrow_mut();
                let now = net.now;
                let reorder = net.cfg.reorder;
                let node = &mut net.nodes[self.me];
                if node.alive && node.redeliver_left > 0 {
                    // Deferred packets first, in their order.
                    node.redeliver_left -= 1;
                    let pkt = node.parked.pop_front().expect("parked packets to redeliver");
                    let from = node.by_node.get(pkt.from).copied().flatten();
                    drop(net);
                    let verdict = f(from, &pkt.data[..pkt.len], pkt.gathered);
                    self.after_recv(pkt, verdict.defer());
                    n += 1;
                    if !verdict.go_on() {
                        break;
                    }
                    continue;
                }
                let node = &net.nodes[self.me];
                if !node.alive || node.inbox.is_empty() {
                    break;
                }
                let ready: usize = if reorder {
                    node.inbox.iter().filter(|p| p.at <= now).count()
                } else {
                    usize::from(node.inbox[0].at <= now)
                };
                if ready == 0 {
                    break;
                }
                let pick = if reorder { (net.rand() % ready as u64) as usize } else { 0 };
                let node = &mut net.nodes[self.me];
                let idx = if reorder {
                    node.inbox.iter().enumerate().filter(|(_, p)| p.at <= now).nth(pick).map_or(0, |(i, _)| i)
                } else {
                    0
                };
                let Some(pkt) = (if reorder { node.inbox.swap_remove_back(idx) } else { node.inbox.pop_front() })
                else {
                    break;
                };
                let from = node.by_node.get(pkt.from).copied().flatten();
                (from, pkt)
            };
            let (from, pkt) = pkt;
            let verdict = f(from, &pkt.data[..pkt.len], pkt.gathered);
            self.after_recv(pkt, verdict.defer());
            n += 1;
            if !verdict.go_on() {
                break;
            }
        }
        n
    }

    fn control_next(&mut self) {
        self.control = true;
    }

    fn awaiting(&mut self, ah: Ah) {
        let node = self.net.borrow().nodes[self.me].ahs.get(ah as usize).copied().flatten();
        self.awaited.extend(node);
    }

    fn redeliver(&mut self) {
        let mut net = self.net.borrow_mut();
        let node = &mut net.nodes[self.me];
        node.redeliver_left = node.parked.len();
    }

    fn events(&mut self, out: &mut Vec<DevEvent>) {
        let mut net = self.net.borrow_mut();
        let events = &mut net.nodes[self.me].events;
        if !events.is_empty() {
            out.append(events);
        }
    }

    fn reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        let mut net = self.net.borrow_mut();
        let mut key = net.rand();
        while net.nodes[self.me].mrs.contains_key(&key) {
            key = net.rand();
        }
        net.nodes[self.me].mrs.insert(key, Mr { buf, access, mapped: None });
        Ok(key)
    }

    fn dereg(&mut self, key: u64) -> Result<(), Status> {
        let mut net = self.net.borrow_mut();
        net.nodes[self.me].mrs.remove(&key).map(|_| ()).ok_or(Status::Inval)
    }

    fn rdma_read(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.rdma(ah, local, remote_addr, key, wr_id, None)
    }

    fn rdma_write(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, wr_id: u64) -> Result<(), DevError> {
        self.rdma(ah, local, remote_addr, key, wr_id, Some(None))
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
        self.rdma(ah, local, remote_addr, key, wr_id, Some(Some(imm)))
    }
    fn as_sleep(&mut self) -> Option<&mut Self> {
        {
            let on = self.net.borrow().cfg.sleep;
            on.then_some(self)
        }
    }

    fn as_sleeper(&self) -> Option<&Self> {
        {
            let on = self.net.borrow().cfg.sleep;
            on.then_some(self)
        }
    }

    fn as_responder(&mut self) -> Option<&mut Self> {
        {
            let on = self.net.borrow().cfg.responder;
            on.then_some(self)
        }
    }

    fn as_more_follows(&mut self) -> Option<&mut Self> {
        {
            let on = self.net.borrow().cfg.backlog_min > 0;
            on.then_some(self)
        }
    }

    fn as_doorbell(&mut self) -> Option<&mut Self> {
        {
            let on = self.net.borrow().cfg.doorbell;
            on.then_some(self)
        }
    }

    fn as_mapped(&mut self) -> Option<&mut Self> {
        {
            let on = self.net.borrow().cfg.mapped;
            on.then_some(self)
        }
    }

    fn as_in_call(&mut self) -> Option<&mut Self> {
        {
            let on = self.net.borrow().cfg.in_call;
            on.then_some(self)
        }
    }

    fn as_in_call_ref(&self) -> Option<&Self> {
        {
            let on = self.net.borrow().cfg.in_call;
            on.then_some(self)
        }
    }
}

impl SimDevice {
    /// The node's eventfd.
    fn fd(&self) -> std::os::fd::RawFd {
        let net = self.net.borrow();
        net.nodes[self.me].fd.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd)
    }

    /// Puts the packets held for the doorbell on the wire, in their order.
    pub(super) fn ring(&mut self) {
        let mut net = self.net.borrow_mut();
        let held = std::mem::take(&mut net.nodes[self.me].held);
        for (target, pkt) in held {
            if net.nodes[target].alive {
                net.nodes[target].inbox.push_back(pkt);
                net.nodes[target].signal();
                continue;
            }
            if let Some((wr_id, ah)) = pkt.notify {
                let status = Err(Status::PeerUnreachable);
                net.nodes[self.me].events.push(DevEvent::SendDone { wr_id, ah, status });
            }
            net.pool.push(pkt.data);
        }
    }
}

impl Sleep for SimDevice {
    fn wait_fd(&mut self) -> Option<std::os::fd::RawFd> {
        Some(self.fd())
    }

    /// Waits in real time on the eventfd: a packet sent by another node of
    /// the net signals it (virtual time does not move here).
    fn wait(&mut self, timeout_ms: i32) -> bool {
        if !self.trywait() {
            return true;
        }
        let mut p = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    }

    fn trywait(&mut self) -> bool {
        let net = self.net.borrow();
        !net.nodes[self.me].ready(net.now)
    }

    fn sleep_begin(&mut self) -> Option<(std::os::fd::RawFd, i32)> {
        self.trywait().then(|| (self.fd(), 1))
    }

    fn wake_sleeper(&self) {
        self.net.borrow().nodes[self.me].signal();
    }
}

impl Responder for SimDevice {
    /// Nothing in the sim waits for its receiver (no acknowledgements):
    /// the responder's share is to make the descriptor readable when a
    /// packet is ready for the engine.
    fn respond(&mut self) -> (std::os::fd::RawFd, i32) {
        let net = self.net.borrow();
        let node = &net.nodes[self.me];
        if node.ready(net.now) {
            node.signal();
        }
        (self.fd(), 1)
    }

    fn responder_fds(&self) -> Vec<std::os::fd::RawFd> {
        vec![self.fd()]
    }
}

impl MoreFollows for SimDevice {
    fn backlog_min(&self) -> u64 {
        self.net.borrow().cfg.backlog_min
    }

    fn more_follows(&mut self, more: bool) {
        self.more = more;
    }
}

impl Doorbell for SimDevice {
    fn doorbell(&mut self) {
        self.ring();
    }
}

impl Mapped for SimDevice {
    fn alloc(&mut self, len: usize, access: Access) -> Result<(UserBuf, u64), Status> {
        let mut mem = crate::mem::OwnedBuf::zeroed(len.max(1));
        let buf = mem.buf().slice(0, len).ok_or(Status::Inval)?;
        let key = self.reg(buf, access)?;
        let mut net = self.net.borrow_mut();
        if let Some(mr) = net.nodes[self.me].mrs.get_mut(&key) {
            mr.mapped = Some(Some(mem));
        }
        Ok((buf, key))
    }

    fn free(&mut self, key: u64) -> Result<(), Status> {
        let mut net = self.net.borrow_mut();
        match net.nodes[self.me].mrs.get(&key) {
            Some(Mr { mapped: Some(Some(_)), .. }) => {
                net.nodes[self.me].mrs.remove(&key);
                Ok(())
            }
            _ => Err(Status::Inval),
        }
    }

    fn reg_shared(
        &mut self,
        buf: UserBuf,
        fd: std::os::fd::RawFd,
        _offset: u64,
        access: Access,
    ) -> Result<u64, Status> {
        // SAFETY: fcntl on a descriptor number only queries it.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(Status::Inval);
        }
        let key = self.reg(buf, access)?;
        if let Some(mr) = self.net.borrow_mut().nodes[self.me].mrs.get_mut(&key) {
            mr.mapped = Some(None);
        }
        Ok(key)
    }

    fn atomic(&mut self, ah: Ah, remote_addr: u64, key: u64, a: &RemoteAtomic) -> Result<(), DevError> {
        use crate::atomic_ops::op::ATOMIC_READ;
        let net = self.net.borrow();
        let target =
            net.nodes[self.me].ahs.get(ah as usize).copied().flatten().ok_or(DevError::Failed(Status::NoAddr))?;
        if !net.nodes[target].alive {
            return Err(DevError::Failed(Status::PeerUnreachable));
        }
        let Some(mr) = net.nodes[target].mrs.get(&key) else { return Err(DevError::Failed(Status::RemoteAccess)) };
        if mr.mapped.is_none() {
            return Err(DevError::Failed(Status::NotSup)); // not mapped: emulated
        }
        let len = if a.op == ATOMIC_READ { a.result.len() } else { a.operand.len() };
        let need = if a.result.is_empty() { Access::REMOTE_WRITE } else { Access::REMOTE_WRITE | Access::REMOTE_READ };
        let remote =
            net.lookup_mr(target, remote_addr, len, key, need).ok_or(DevError::Failed(Status::RemoteAccess))?;
        let r = a.operand.with_slice(|opnd| {
            a.compare
                .with_slice(|cmp| a.result.with_slice_mut(|res| remote.atomic_apply(a.datatype, a.op, opnd, cmp, res)))
        });
        r.map_err(DevError::Failed)
    }
}

impl InCall for SimDevice {
    fn any_peer(&self) -> bool {
        self.net.borrow().cfg.rdma
    }

    fn rdma_now(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, write: bool) -> Result<(), DevError> {
        self.rdma_in_call(ah, local, remote_addr, key, write)
    }

    fn rdma_in_call(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<(), DevError> {
        let net = self.net.borrow();
        if !net.cfg.rdma {
            return Err(DevError::Failed(Status::NotSup));
        }
        if local.len() as u64 > net.cfg.max_rdma_size {
            return Err(DevError::Failed(Status::Inval));
        }
        let target =
            net.nodes[self.me].ahs.get(ah as usize).copied().flatten().ok_or(DevError::Failed(Status::NoAddr))?;
        net.rdma_copy(target, local, remote_addr, key, write).map_err(DevError::Failed)
    }

    /// Whole packets from inserted senders, oldest first, as long as no
    /// event, redelivery or reordering stands in the way.
    fn recv_express(&mut self, max: usize, mut f: impl FnMut(Ah, &[u8]) -> bool) -> (usize, bool) {
        let mut n = 0;
        while n < max {
            let pkt = {
                let mut net = self.net.borrow_mut();
                let (now, reorder) = (net.now, net.cfg.reorder);
                let node = &mut net.nodes[self.me];
                if reorder || !node.alive || !node.events.is_empty() || node.redeliver_left > 0 {
                    return (n, true);
                }
                let Some(front) = node.inbox.front() else { return (n, false) };
                let from = node.by_node.get(front.from).copied().flatten();
                let (Some(ah), true, None) = (from, front.at <= now, front.gathered) else { return (n, true) };
                let Some(pkt) = node.inbox.pop_front() else { return (n, false) };
                (ah, pkt)
            };
            let (ah, pkt) = pkt;
            if !f(ah, &pkt.data[..pkt.len]) {
                self.net.borrow_mut().nodes[self.me].inbox.push_front(pkt);
                return (n, true);
            }
            self.after_recv(pkt, false);
            n += 1;
        }
        (n, true)
    }
}
