//! Checks of remote accesses against the registration table: key, access
//! rights and bounds, before any byte is touched.

use super::Core;
use crate::device::Access;
use crate::mem::UserBuf;
use crate::status::Status;
use crate::wire::RmaIov;

impl Core {
    /// The local memory an `efa_rma_iov` names, if the key exists, grants
    /// `need` and covers the whole range.
    pub(crate) fn mr_check(&self, iov: &RmaIov, need: Access) -> Result<UserBuf, Status> {
        let mr = self.mrs.get(&iov.key()).ok_or(Status::RemoteAccess)?;
        if !mr.access.contains(need) {
            return Err(Status::RemoteAccess);
        }
        let off = iov.addr().checked_sub(mr.buf.addr()).ok_or(Status::RemoteAccess)?;
        let off = usize::try_from(off).map_err(|_| Status::RemoteAccess)?;
        let len = usize::try_from(iov.len()).map_err(|_| Status::RemoteAccess)?;
        mr.buf.slice(off, len).ok_or(Status::RemoteAccess)
    }

    /// Checks every entry of `iovs` (`need` access) and that together they
    /// cover `total` bytes; returns the local buffers in order.
    pub(crate) fn mr_check_all(&mut self, iovs: &[RmaIov], need: Access, total: u64) -> Result<Vec<UserBuf>, Status> {
        let bufs: Result<Vec<UserBuf>, Status> = iovs.iter().map(|v| self.mr_check(v, need)).collect();
        let bufs = bufs.inspect_err(|_| self.stats.access_errors += 1)?;
        let sum: u64 = iovs.iter().map(RmaIov::len).sum();
        if sum != total {
            self.stats.access_errors += 1;
            return Err(Status::RemoteAccess);
        }
        Ok(bufs)
    }

    /// Marks the registration of `key` busy (a long remote operation uses it).
    pub(crate) fn mr_hold(&mut self, key: u64) {
        if let Some(mr) = self.mrs.get_mut(&key) {
            mr.busy += 1;
        }
    }
}
