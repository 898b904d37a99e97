//! RMA by cross-memory attach (`process_vm_readv` / `process_vm_writev`),
//! after checking key, bounds and access in the memory owner's published
//! registration table.

use super::mrtable::claim_remote;
use super::ShmDevice;
use super::{off, segment, HDR_LEN, SLOT_HDR};
use crate::device::{Access, Ah, DevError, DevEvent};
use crate::mem::UserBuf;
use crate::status::Status;

/// Cross-memory attach is usable: the syscall works here, and the ptrace
/// policy lets peers attach (Yama scope 0, or 1 with this process opting in
/// through `PR_SET_PTRACER`, or any scope for root).
pub(super) fn cma_works() -> bool {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if scope == 1 && !root {
        // SAFETY: PR_SET_PTRACER with PR_SET_PTRACER_ANY only widens who may attach.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    } else if scope >= 2 && !root {
        return false;
    }
    self_read_works()
}

fn self_read_works() -> bool {
    let src = [0x5Au8; 8];
    let mut dst = [0u8; 8];
    let local = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: src.as_ptr() as *mut _, iov_len: 8 };
    // SAFETY: both iovecs name 8 valid bytes of this process.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 8 && dst == src
}

/// Copies `len` bytes between `local` (this process) and `remote` (in
/// process `pid`) by cross-memory attach, written there with `write`:
/// `Err` with the errno when the system call failed.
pub(super) fn cma_copy(pid: libc::pid_t, local: *mut u8, remote: u64, len: usize, write: bool) -> Result<(), i32> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec { iov_base: local.wrapping_add(done).cast(), iov_len: len - done };
        let riov = libc::iovec { iov_base: (remote as usize + done) as *mut _, iov_len: len - done };
        // SAFETY: the callers name memory lent to this endpoint (`local`)
        // and memory the other process registered or lent for this access
        // (`remote`); the kernel checks both again.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0)
            } else {
                libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0)
            }
        };
        if n <= 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        done += n as usize;
    }
    Ok(())
}

/// The status of a failed cross-memory-attach copy's errno.
pub(super) fn cma_status(errno: i32) -> Status {
    if errno == libc::ESRCH {
        Status::PeerUnreachable
    } else {
        Status::RemoteAccess
    }
}

impl ShmDevice {
    pub(super) fn rdma(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        wr_id: u64,
        write: bool,
    ) -> Result<(), DevError> {
        if self.copy_only(ah, local, remote_addr, key, write).is_ok() {
            self.copied(ah, wr_id, Ok(()));
            return Ok(());
        }
        // Towards an owner that polls, a request through its ring
        // (`ringrma.rs`), and behind requests of ours still there, in
        // order: through the ring too, or later.
        let waiting = self.ring_waiting(ah);
        if waiting || self.ring_rdma_ok(ah, local.len()) {
            let fits = self.ring_fits(local.len());
            if fits && self.ring_request(ah, local, (remote_addr, key), wr_id, write).is_ok() {
                return Ok(());
            }
            if waiting {
                return Err(DevError::Again);
            }
        }
        let status = self.copy_cma(ah, local, remote_addr, key, write)?;
        self.copied(ah, wr_id, status);
        Ok(())
    }

    /// `Device::rdma_now` (`in_call` false) and `Device::rdma_in_call`
    /// (true): a copy through this process's mapping of the memory; else,
    /// behind requests of ours still in the owner's ring, not now
    /// (`rdma_now`: `NotSup`, the engine posts it and `rdma` queues it
    /// behind them; `rdma_in_call`: `Again`); else, for `rdma_now`,
    /// towards an owner that polls, `NotSup` too (`rdma` sends it through
    /// the ring); else by cross-memory attach, done here and reported by
    /// the return value alone (a lost peer also as an event, as `rdma`
    /// reports it).
    #[inline(always)]
    pub(super) fn rdma_direct(
        &mut self,
        ah: Ah,
        local: UserBuf,
        (remote_addr, key): (u64, u64),
        write: bool,
        in_call: bool,
    ) -> Result<(), DevError> {
        let mapped = self.copy_only(ah, local, remote_addr, key, write);
        if mapped.is_ok() {
            return mapped;
        }
        if self.ring_waiting(ah) {
            return if in_call { Err(DevError::Again) } else { mapped };
        }
        if !in_call && self.ring_rdma_ok(ah, local.len()) {
            return mapped;
        }
        match self.copy_cma(ah, local, remote_addr, key, write)? {
            Ok(()) => Ok(()),
            Err(s) => {
                if s == Status::PeerUnreachable {
                    self.peer_gone(ah);
                }
                Err(DevError::Failed(s))
            }
        }
    }

    /// `Device::rdma_now` with `copy_only`: through the mapping of a peer's
    /// allocation, else `NotSup` (nothing done, not even a refusal: the
    /// caller picks another way, which checks the access itself).
    #[inline(always)]
    pub(super) fn copy_only(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<(), DevError> {
        let p = super::peer_of(&mut self.peers, ah)?;
        if super::alloc::copy_mapped(&mut self.peer_maps, p, ah, key, (local, remote_addr), write).is_none() {
            return Err(DevError::Failed(Status::NotSup));
        }
        self.mapped_copies += 1;
        Ok(())
    }

    /// [`Device::rdma_write`](crate::device::Device::rdma_write) with
    /// immediate data: the notice's entry in the owner's ring is claimed
    /// first (a full ring: `Again`, nothing written), published after the
    /// copy ended — as a [`segment::WRITE_IMM`] notice when it succeeded,
    /// else as padding (a refused write reports nothing to the owner). The
    /// owner reads the notice after every packet sent before it, and after
    /// the bytes are in its memory.
    pub(super) fn write_imm(
        &mut self,
        ah: Ah,
        local: UserBuf,
        (remote_addr, key): (u64, u64),
        imm: u32,
        wr_id: u64,
    ) -> Result<(), DevError> {
        if !self.cma {
            return Err(DevError::Failed(Status::NotSup));
        }
        if self.ring_waiting(ah) {
            // Behind requests of ours in the owner's ring (`ringrma.rs`).
            return Err(DevError::Again);
        }
        let ids = (self.epid, self.connid);
        let need = super::entry_len(12);
        let note = self.map.hdr_u64::<{ off::NOTE }>();
        let p = super::peer_of(&mut self.peers, ah)?;
        let pos = match super::claim_entry(p, need, true, ids, note) {
            Ok(pos) => pos,
            Err(e) => return Err(self.claim_failed(ah, e)),
        };
        let status = match self.copy(ah, local, remote_addr, key, true) {
            Ok(s) => s,
            // The registration is being changed: the write waits, the
            // claimed entry goes as padding.
            Err(e) => Err(if e == DevError::Again { Status::Again } else { Status::RemoteAccess }),
        };
        let note = self.map.hdr_u64::<{ off::NOTE }>();
        // The copy found the peer gone: the entry stays unpublished in its
        // ring, which no one reads.
        let p = match super::peer_of(&mut self.peers, ah) {
            Ok(p) => p,
            Err(e) => {
                super::unnote(note);
                return Err(e);
            }
        };
        let flag = if status.is_ok() {
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(&imm.to_le_bytes());
            b[4..].copy_from_slice(&(local.len() as u64).to_le_bytes());
            // SAFETY: the claimed entry's payload, `SLOT_HDR + 12 <= need`,
            // in bounds (see `claim`) and ours until published.
            unsafe { p.map.bytes(HDR_LEN + p.shape.at(pos) + SLOT_HDR, 12) }.copy_from_slice(&b);
            segment::WRITE_IMM
        } else {
            0
        };
        Self::publish_notice(p, pos, ids, need, flag, note);
        if status == Err(Status::Again) {
            return Err(DevError::Again);
        }
        self.copied(ah, wr_id, status);
        Ok(())
    }

    /// The copy of an RDMA read or write, after checking the owner's
    /// registration: through this process's mapping of the memory, else
    /// by cross-memory attach; `Err(Again)` while that registration is
    /// being changed.
    pub(super) fn copy(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<Result<(), Status>, DevError> {
        if self.cma && self.copy_only(ah, local, remote_addr, key, write).is_ok() {
            return Ok(Ok(()));
        }
        self.copy_cma(ah, local, remote_addr, key, write)
    }

    /// [`Self::copy`] by cross-memory attach alone (the caller tried the
    /// mapping already).
    pub(super) fn copy_cma(
        &mut self,
        ah: Ah,
        local: UserBuf,
        remote_addr: u64,
        key: u64,
        write: bool,
    ) -> Result<Result<(), Status>, DevError> {
        if !self.cma {
            return Err(DevError::Failed(Status::NotSup));
        }
        if !write && self.help_wanted(ah, local.len()) {
            return self.read_helped(ah, &local, remote_addr, key);
        }
        self.copy_alone(ah, local, (remote_addr, key), write)
    }

    /// [`Self::copy_cma`] by this endpoint alone, of `local` and the
    /// `(address, key)` of the peer's memory.
    pub(super) fn copy_alone(
        &mut self,
        ah: Ah,
        local: UserBuf,
        (remote_addr, key): (u64, u64),
        write: bool,
    ) -> Result<Result<(), Status>, DevError> {
        let p = super::peer_of(&mut self.peers, ah)?;
        let need = if write { Access::REMOTE_WRITE } else { Access::REMOTE_READ };
        // The claim is held until the copy has ended (`mrtable.rs`).
        let status = match claim_remote(&p.map, &p.shape, key, remote_addr, local.len() as u64, need) {
            Err(Status::Again) => return Err(DevError::Again),
            Err(s) => Err(s),
            Ok(_claim) => {
                // `local` is a buffer lent to us; the remote range is
                // memory the peer registered for this access (checked
                // above).
                let dst = local.with_slice_mut(|s| s.as_mut_ptr());
                cma_copy(p.pid as libc::pid_t, dst, remote_addr, local.len(), write).map_err(cma_status)
            }
        };
        Ok(status)
    }

    /// Reports the end of RDMA `wr_id` towards `ah`.
    fn copied(&mut self, ah: Ah, wr_id: u64, status: Result<(), Status>) {
        if status == Err(Status::PeerUnreachable) {
            self.peer_gone(ah);
        }
        self.events.push(DevEvent::SendDone { wr_id, ah, status });
    }

    /// Peer `ah`'s process is gone: every operation towards it fails now,
    /// sends included, not only at the next peer check.
    fn peer_gone(&mut self, ah: Ah) {
        if let Some(p) = self.peers.get_mut(ah as usize).and_then(Option::as_mut) {
            p.lost = true;
        }
        self.events.push(DevEvent::PeerLost { ah });
    }
}
