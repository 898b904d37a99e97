//! Memory registrations (ordinary, and allocations peers may map), and
//! the checks of remote accesses against them: key, access rights and
//! bounds, before any byte is touched.

use super::{Core, Device, Endpoint, Mr};
use crate::device::{Access, Doorbell, Mapped};
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

    /// Marks the registrations of `iovs` busy (a long remote operation
    /// uses them); the keys, for [`Self::mr_release`].
    pub(crate) fn mr_hold(&mut self, iovs: &[RmaIov]) -> Box<[u64]> {
        for v in iovs {
            if let Some(mr) = self.mrs.get_mut(&v.key()) {
                mr.busy += 1;
            }
        }
        iovs.iter().map(RmaIov::key).collect()
    }

    /// Releases what [`Self::mr_hold`] held.
    pub(crate) fn mr_release(&mut self, keys: &[u64]) {
        for k in keys {
            if let Some(mr) = self.mrs.get_mut(k) {
                mr.busy = mr.busy.saturating_sub(1);
            }
        }
    }
}

impl<D: Device> Endpoint<D> {
    /// `NoMem` when `Config::max_mrs` registrations are held.
    fn room_for_mr(&self) -> Result<(), Status> {
        if self.core.mrs.len() >= self.core.cfg.max_mrs {
            crate::log::log!(crate::log::WARN, "registration refused: {} held, the limit", self.core.mrs.len());
            return Err(Status::NoMem);
        }
        Ok(())
    }

    /// Registers `buf` for local use and remote `access`; returns the key.
    pub fn mr_reg(&mut self, buf: UserBuf, access: Access) -> Result<u64, Status> {
        self.room_for_mr()?;
        let key = self.dev.reg(buf, access)?;
        self.core.mrs.insert(key, Mr { buf, access, busy: 0 });
        Ok(key)
    }

    /// Registers `buf`, which the application maps from file descriptor
    /// `fd` at file offset `offset`, for local use and remote `access`:
    /// peers of this host map the file (`Mapped::reg_shared`) where the
    /// device can; elsewhere an ordinary registration. Deregistered by
    /// [`Self::mr_dereg`].
    pub fn mr_reg_fd(&mut self, buf: UserBuf, fd: i32, offset: u64, access: Access) -> Result<u64, Status> {
        self.room_for_mr()?;
        let shared = match self.dev.as_mapped() {
            Some(m) => m.reg_shared(buf, fd, offset, access),
            None => Err(Status::NotSup),
        };
        let key = match shared {
            Err(Status::NotSup) => self.dev.reg(buf, access)?,
            r => r?,
        };
        self.core.mrs.insert(key, Mr { buf, access, busy: 0 });
        Ok(key)
    }

    /// Removes a registration; when this returns `Ok`, no peer reads or
    /// writes the memory any more. `Busy` while an emulated remote
    /// operation uses it, or while the device's RDMA by a peer is still
    /// under way after the device's wait (the registration then takes no
    /// new remote access, and a later call tries again).
    pub fn mr_dereg(&mut self, key: u64) -> Result<(), Status> {
        if self.core.allocs.contains_key(&key) {
            return Err(Status::Inval); // an allocation: `mr_free`
        }
        self.dereg_any(key)
    }

    /// Allocates `len` bytes registered with `access`, in memory that peers
    /// on this host map (their RMA to it is then a copy: `Mapped::alloc`),
    /// or ordinary memory registered where the device has none. The memory
    /// is zeroed and the endpoint's until [`Self::mr_free`] (or its drop).
    pub fn mr_alloc(&mut self, len: usize, access: Access) -> Result<(UserBuf, u64), Status> {
        self.room_for_mr()?;
        let mapped = match self.dev.as_mapped() {
            Some(m) => m.alloc(len, access),
            None => Err(Status::NotSup),
        };
        let (buf, key, owned) = match mapped {
            Ok((buf, key)) => (buf, key, None),
            Err(Status::NotSup) => {
                let mut mem = crate::mem::OwnedBuf::zeroed(len.max(1));
                let buf = mem.buf().slice(0, len).ok_or(Status::Inval)?;
                let key = self.dev.reg(buf, access)?;
                (buf, key, Some(mem))
            }
            Err(e) => return Err(e),
        };
        self.core.mrs.insert(key, Mr { buf, access, busy: 0 });
        self.core.allocs.insert(key, owned);
        Ok((buf, key))
    }

    /// Frees allocation `key` of [`Self::mr_alloc`]: deregistered as
    /// [`Self::mr_dereg`] (`Busy` while an access is under way: it stays,
    /// try again), then released. `Inval` for a key that is no allocation.
    pub fn mr_free(&mut self, key: u64) -> Result<(), Status> {
        let device_owned = match self.core.allocs.get(&key) {
            None => return Err(Status::Inval),
            Some(owned) => owned.is_none(),
        };
        if device_owned {
            if self.core.mrs.get(&key).is_some_and(|mr| mr.busy > 0) {
                return Err(Status::Busy);
            }
            self.dev.as_mapped().ok_or(Status::Inval)?.free(key)?;
            self.core.mrs.remove(&key);
        } else {
            self.dereg_any(key)?;
        }
        self.core.allocs.remove(&key);
        Ok(())
    }

    /// [`Self::mr_dereg`] of any registration.
    fn dereg_any(&mut self, key: u64) -> Result<(), Status> {
        match self.core.mrs.get(&key) {
            None => Err(Status::Inval),
            Some(mr) if mr.busy > 0 => Err(Status::Busy),
            Some(_) => {
                let r = self.dev.dereg(key);
                if let Some(d) = self.dev.as_doorbell() {
                    d.doorbell(); // refusals of the reads it was serving
                }
                r?;
                self.core.mrs.remove(&key);
                Ok(())
            }
        }
    }
}
