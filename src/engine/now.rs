//! One-sided operations done in the call or not at all (`rdm4_write_now`,
//! `rdm4_read_now`, `rdm4_atomic_now`): no operation entry, no completion;
//! the return value is the result. For PGAS-style code (a put that is
//! complete when it returns, a fetch-add that returns the old value) on
//! devices that reach the target's memory themselves: shm (memory of
//! `rdm4_mr_alloc` by loads, stores and the CPU's atomics; other memory by
//! cross-memory attach). Elsewhere `NotSup`: the caller uses the
//! operations with completions.
//!
//! Decisions:
//! - Never through the target's ring, even towards a target that polls:
//!   the call would have to wait for it.
//! - `Again` while requests of this endpoint to the target are still in
//!   its ring (`rdm4_write` and `rdm4_read` may put small ones there): the
//!   operation would pass them. Poll and call again.
//! - Counted with the direct operations (`ops_write_direct`,
//!   `ops_read_direct`, `ops_atomic_direct`).

use super::{Addr, Device, Endpoint, Proto, RemoteBuf};
use crate::device::{DevError, InCall, Mapped, RemoteAtomic};
use crate::mem::UserBuf;
use crate::status::Status;

/// The status of a device call done in the call.
fn status(r: Result<(), DevError>) -> Result<(), Status> {
    match r {
        Ok(()) => Ok(()),
        Err(DevError::Again) => Err(Status::Again),
        Err(DevError::Failed(s)) => Err(s),
    }
}

impl<D: Device> Endpoint<D> {
    /// Writes (`write`) `buf` to, or reads it from, `remote` on `dest` in
    /// this call: `Ok` when the bytes are there.
    pub fn rma_in_call(&mut self, dest: Addr, buf: UserBuf, remote: RemoteBuf, write: bool) -> Result<(), Status> {
        let ah = self.core.direct_ah(dest, write, buf.len())?;
        if !self.core.any_peer {
            return Err(Status::NotSup);
        }
        remote.check(buf.len())?;
        let dev = self.dev.as_in_call().ok_or(Status::NotSup)?;
        status(dev.rdma_in_call(ah, buf, remote.addr, remote.key, write))?;
        let proto = if write { Proto::WriteDirect } else { Proto::ReadDirect };
        self.core.traffic.op(proto, buf.len() as u64);
        Ok(())
    }

    /// An atomic (as [`Endpoint::atomic`]) done in this call: `Ok` when it
    /// was applied (the old values in `result`); `NotSup` where the device
    /// does not map the target's memory (memory not from `mr_alloc`).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_in_call(
        &mut self,
        dest: Addr,
        datatype: u32,
        op: u32,
        (operand, compare, result): (UserBuf, UserBuf, UserBuf),
        remote: RemoteBuf,
    ) -> Result<(), Status> {
        let a = RemoteAtomic { datatype, op, operand, compare, result };
        let core = &mut self.core;
        let ah = core.reachable_peer(dest)?.ah.ok_or(Status::NoAddr)?;
        let (_, len) = core.check_atomic(&a, remote)?;
        if !core.any_peer {
            return Err(Status::NotSup);
        }
        let dev = self.dev.as_mapped().ok_or(Status::NotSup)?;
        status(dev.atomic(ah, remote.addr, remote.key, &a))?;
        self.core.traffic.op(Proto::AtomicDirect, len as u64);
        Ok(())
    }
}
