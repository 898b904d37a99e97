//! The soak worker's endpoint and the coordinator: opening and closing
//! the endpoint (modes, regions), its counters, and the barriers that
//! exchange names and regions (outside rdm4).

use std::os::fd::AsRawFd;

use super::super::plan::*;
use super::super::*;
use super::*;

impl Worker<'_> {
    /// Opens an endpoint with a random progress and threading mode,
    /// registers the region and allocates the other; every peer is to be
    /// inserted again.
    pub(super) fn open(&mut self) {
        let mut attr = std::mem::MaybeUninit::<rdm4_ep_attr>::uninit();
        self.ok("rdm4_ep_attr_init", rdm4_ep_attr_init(attr.as_mut_ptr()));
        // SAFETY: initialised by rdm4_ep_attr_init.
        let mut attr = unsafe { attr.assume_init() };
        (attr.progress, attr.threading) = match self.rng.below(3) {
            0 => (RDM4_PROGRESS_MANUAL, RDM4_THREAD_SINGLE),
            1 => (RDM4_PROGRESS_MANUAL, RDM4_THREAD_SAFE),
            _ => (RDM4_PROGRESS_AUTO, RDM4_THREAD_SAFE),
        };
        let rc = rdm4_ep_open(&attr, &mut self.ep);
        self.ok("rdm4_ep_open", rc);
        self.opens += 1;
        let access = RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE;
        let len = region_len(self.n);
        let rc = rdm4_mr_reg(self.ep, self.region.cast(), len, access, &mut self.reg_key);
        self.ok("rdm4_mr_reg", rc);
        let mut p = std::ptr::null_mut();
        let rc = rdm4_mr_alloc(self.ep, len, access, &mut p, &mut self.alloc_key);
        self.ok("rdm4_mr_alloc", rc);
        self.alloc = p.cast();
        // SAFETY: `len` bytes of the endpoint's until it closes.
        unsafe {
            std::ptr::write_bytes(self.alloc, 0, len);
            let area = self.table.bytes(read_area(self.seed, self.rank), READ_LEN);
            std::ptr::copy_nonoverlapping(area.as_ptr(), self.alloc.add(READ_AT), READ_LEN);
        }
        let none = Peer { info: [0; INFO], handle: None, reg: 0, reg_key: 0, alloc: 0, alloc_key: 0 };
        self.peers = vec![none; self.n];
        self.ranks.clear();
    }

    pub(super) fn close(&mut self) {
        self.retransmits += self.retransmits();
        self.ok("rdm4_mr_close", rdm4_mr_close(self.ep, self.reg_key));
        self.ok("rdm4_ep_close", rdm4_ep_close(self.ep));
    }

    /// The endpoint's `udp_retransmits` counter.
    pub(super) fn retransmits(&self) -> u64 {
        let (mut names, mut values) = ([std::ptr::null(); 16], [0u64; 16]);
        let mut first = 0;
        loop {
            let got = rdm4_counters(self.ep, first, names.as_mut_ptr(), values.as_mut_ptr(), 16);
            if got <= 0 {
                return 0;
            }
            for i in 0..got as usize {
                // SAFETY: the library's static counter names.
                if unsafe { CStr::from_ptr(names[i]) } == c"udp_retransmits" {
                    return values[i];
                }
            }
            first += got as usize;
        }
    }

    /// A barrier at the coordinator with `payload`; the endpoint is
    /// polled and slept on meanwhile. The frames of all processes, and
    /// whether to go on.
    pub(super) fn barrier(&mut self, kind: u8, payload: &[u8]) -> (bool, Vec<Vec<u8>>) {
        if send_frame(&mut self.coord, kind, payload).is_err() {
            self.fatal("the coordinator is gone");
        }
        let deadline = Instant::now() + Duration::from_secs(self.o.timeout);
        loop {
            // Only a peer's write of the next round may complete here.
            let rc = rdm4_poll(self.ep, self.cq.as_mut_ptr(), self.cq.len());
            for i in 0..self.ok("rdm4_poll", rc) as usize {
                match self.cq[i] {
                    e if e.context.is_null() => self.remote_write(&e),
                    _ => self.error("a completion while nothing was posted"),
                }
            }
            let ep_fd = if rdm4_trywait(self.ep) == 0 { rdm4_ep_fd(self.ep) } else { -1 };
            let mut fds = [
                libc::pollfd { fd: self.coord.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: ep_fd, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: two valid pollfd entries (a negative fd is ignored).
            unsafe { libc::poll(fds.as_mut_ptr(), 2, if ep_fd >= 0 { 20 } else { 1 }) };
            if fds[0].revents != 0 {
                break;
            }
            if Instant::now() > deadline {
                self.fatal(&format!("no barrier in {} s", self.o.timeout));
            }
        }
        match read_frame(&mut self.coord) {
            Ok((flag @ (GO | STOP), p)) => {
                let mut frames = Vec::new();
                let mut at = 0;
                while at + 4 <= p.len() {
                    let len = u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes")) as usize;
                    frames.push(p[at + 4..at + 4 + len].to_vec());
                    at += 4 + len;
                }
                if kind == BARRIER {
                    self.count(Kind::Barrier);
                }
                (flag == GO, frames)
            }
            Ok(_) => self.fatal("stopped by the coordinator"),
            Err(e) => self.fatal(&format!("the coordinator is gone ({e})")),
        }
    }

    /// The round's first barrier: exchanges names and regions; a peer
    /// whose endpoint is new is removed and inserted again. False when
    /// the time is up.
    pub(super) fn exchange(&mut self) -> bool {
        let mut name = [0u8; RDM4_ADDR_LEN];
        let mut len = name.len();
        self.ok("rdm4_ep_getname", rdm4_ep_getname(self.ep, name.as_mut_ptr().cast(), &mut len));
        let mut info = name.to_vec();
        for v in [self.opens, self.region as u64, self.reg_key, self.alloc as u64, self.alloc_key] {
            info.extend(v.to_le_bytes());
        }
        // The remote writes of the round may come as soon as a peer has
        // this process's address.
        let (me, k) = (self.rank, self.round);
        self.remote = (0..self.n)
            .filter(|&s| s != me)
            .flat_map(|s| writes(self.seed, k, s, me).into_iter().filter_map(move |w| Some((s, w.data?))))
            .collect();
        let (go, frames) = self.barrier(BARRIER, &info);
        if !go {
            return false;
        }
        let mut changed = false;
        for (rank, f) in frames.iter().enumerate() {
            if f.len() != INFO {
                self.fatal("a bad address frame");
            }
            if f[..] == self.peers[rank].info[..] {
                continue;
            }
            if let Some(old) = self.peers[rank].handle.take() {
                self.ok("rdm4_av_remove", rdm4_av_remove(self.ep, &old, 1));
                self.ranks.remove(&old);
            }
            changed = true;
            let mut handle = 0;
            self.ok("rdm4_av_insert", rdm4_av_insert(self.ep, f.as_ptr().cast(), 1, &mut handle));
            self.ranks.insert(handle, rank);
            let at = |i: usize| u64_at(f, RDM4_ADDR_LEN + 8 * i);
            self.peers[rank] = Peer {
                info: f[..].try_into().expect("INFO bytes"),
                handle: Some(handle),
                reg: at(1),
                reg_key: at(2),
                alloc: at(3),
                alloc_key: at(4),
            };
        }
        // Every process saw the same change: all take this barrier, and
        // start only once everyone has the new addresses.
        if changed {
            self.barrier(BARRIER, &[]);
        }
        true
    }

    pub(super) fn handle(&self, rank: usize) -> rdm4_addr {
        self.peers[rank].handle.expect("inserted")
    }
}
