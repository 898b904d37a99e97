//! Memory that peers on this host can map (`Device::alloc`): each
//! allocation is a file of its own in `/dev/shm`, named after the owner's
//! segment and the registration's key (`<segment>.m<key>`), mapped shared
//! by the owner and registered in its table with the [`MAPPED`] flag.
//!
//! - A peer's RDMA read or write or atomic on such a region works on its
//!   own mapping of the file, made on first use and kept per (peer, key)
//!   (at most [`PEER_MAPS`] of them; then they are all dropped and made
//!   again), instead of a cross-memory-attach system call. It reads the
//!   owner's table entry first, without a claim (`mrtable::read_remote`
//!   says why none is needed): after the owner's `free` returns, a new
//!   access finds the key gone, and a mapping a peer kept is never used
//!   again (it only keeps the unlinked file's pages alive until the peer
//!   drops it). A cached mapping is used only for the base and length the
//!   entry shows now, so a key reused by a later allocation is mapped
//!   afresh.
//! - `free` deregisters (as `dereg`), unmaps and unlinks. Closing the endpoint frees
//!   what is left. The files of a process that died are removed by the
//!   next open of the prefix, with its segment (`segment.rs`).

use std::os::fd::RawFd;

use super::mrtable::{claim_remote, read_remote, Entry, MAPPED, SHARED};
use super::segment::{cstr, Mapping};
use super::{Peer, ShmDevice};
use crate::device::{Access, Ah, DevError};
use crate::fxhash::FxHashMap;
use crate::mem::UserBuf;
use crate::status::Status;

/// Mappings of peers' allocations kept at most.
const PEER_MAPS: usize = 256;

/// The file of allocation `key` of the endpoint whose segment is `seg`.
pub(super) fn alloc_file(seg: &str, key: u64) -> String {
    format!("{seg}.m{key:x}")
}

/// One allocation of this endpoint.
pub(super) struct Alloc {
    map: Mapping,
    file: String,
}

/// A peer's allocation (or shared memory) as mapped here: for the entry's
/// base and length; the region starts `shift` bytes into the mapping (a
/// shared file's page offset of the region's first byte).
pub(super) struct PeerMap {
    map: Mapping,
    base: u64,
    len: u64,
    shift: usize,
}

/// The peers' allocations mapped here, by (peer, key), and the last one
/// used (an RMA loop on one region finds it without a hash lookup).
#[derive(Default)]
pub(super) struct PeerMaps {
    maps: FxHashMap<(Ah, u64), PeerMap>,
    last: Option<Last>,
}

/// The last mapping used: its (peer, key), the entry's base and length it
/// was made for, its address (as an integer: the mapping lives in `maps`)
/// and length.
#[derive(Clone, Copy)]
struct Last {
    ah: Ah,
    key: u64,
    base: u64,
    len: u64,
    at: usize,
    map_len: usize,
}

impl PeerMaps {
    /// Drops the mappings of peer `ah` (removed).
    pub(super) fn forget_peer(&mut self, ah: Ah) {
        self.maps.retain(|&(a, _), _| a != ah);
        self.last = None;
    }

    /// `n` bytes at `addr` of peer `p`'s allocation `key` (its `entry`) as
    /// this process's mapping of it (made on first use). `None`: the file
    /// could not be mapped, or the range is not in it.
    #[inline(always)]
    fn range(&mut self, p: &Peer, ah: Ah, (key, entry): (u64, Entry), addr: u64, n: usize) -> Option<UserBuf> {
        let hit = self.last.filter(|l| l.ah == ah && l.key == key && l.base == entry.base && l.len == entry.len);
        let l = match hit {
            Some(l) => l,
            None => self.refresh(p, ah, key, entry)?,
        };
        let off = usize::try_from(addr.checked_sub(entry.base)?).ok()?;
        if off.checked_add(n)? > l.map_len {
            return None;
        }
        // SAFETY: `off + n` lies within the mapping (checked), which holds
        // the region the entry read just now grants this access to, and
        // stays mapped while it is in `maps` (this call's duration).
        unsafe { UserBuf::from_raw((l.at as *mut u8).add(off), n) }
    }

    /// The mapping for `entry` of (`ah`, `key`): the kept one, or a new one.
    fn refresh(&mut self, p: &Peer, ah: Ah, key: u64, entry: Entry) -> Option<Last> {
        let fresh = self.maps.get(&(ah, key)).is_none_or(|m| m.base != entry.base || m.len != entry.len);
        if fresh {
            self.last = None;
            if self.maps.len() >= PEER_MAPS {
                self.maps.clear();
            }
            let (map, shift) = match entry.shared {
                // The application's file, through the owner's descriptor.
                Some((fd, page)) => {
                    let shift = (entry.base % PAGE) as usize;
                    let path = format!("/proc/{}/fd/{fd}", p.pid);
                    (map_file(&path, u64::from(page) * PAGE, entry.len + shift as u64)?, shift)
                }
                None => (map_file(&format!("/dev/shm/{}", alloc_file(&p.name, key)), 0, entry.len)?, 0),
            };
            self.maps.insert((ah, key), PeerMap { map, base: entry.base, len: entry.len, shift });
        }
        let m = self.maps.get(&(ah, key))?;
        let at = m.map.base() as usize + m.shift;
        let l = Last { ah, key, base: m.base, len: m.len, at, map_len: m.map.len - m.shift };
        self.last = Some(l);
        Some(l)
    }
}

impl ShmDevice {
    /// RDMA reads and writes this device did as copies through its mapping
    /// of a peer's allocation (not by cross-memory attach).
    pub fn mapped_copies(&self) -> u64 {
        self.mapped_copies
    }

    /// RDMA requests this device sent into owners' rings, and of those the
    /// ones it took back and copied by cross-memory attach (`ringrma.rs`).
    pub fn ring_rdma_counts(&self) -> (u64, u64) {
        (self.ring.sent, self.ring.taken_back)
    }

    /// Allocates `len` bytes in a file of their own, registered with
    /// `access` and the [`MAPPED`] flag.
    pub(super) fn alloc_shared(&mut self, len: usize, access: Access) -> Result<(UserBuf, u64), Status> {
        let (idx, key) = self.reserve_entry()?;
        let file = alloc_file(&self.name, key);
        let c = cstr(&format!("/{file}"));
        // SAFETY: valid name; exclusive creation.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) };
        if fd < 0 {
            return Err(Status::Io);
        }
        let size = len.max(1);
        // SAFETY: sizing and allocating the descriptor we created (the pages
        // exist before anyone touches them: no SIGBUS on a full /dev/shm).
        let sized = unsafe {
            libc::ftruncate(fd, size as libc::off_t) == 0 && libc::posix_fallocate(fd, 0, size as libc::off_t) == 0
        };
        let map = if sized { Mapping::map(fd, size) } else { Err(Status::NoMem) };
        close(fd);
        let map = match map {
            Ok(m) => m,
            Err(e) => {
                unlink(&file);
                return Err(e);
            }
        };
        // SAFETY: the mapping lives in `allocs` until `free_shared` (or the
        // device's drop), which the engine calls only once no operation of
        // its own uses the buffer; peers reach it only under a claim.
        let buf = unsafe { UserBuf::from_raw(map.base(), len) }.ok_or(Status::NoMem)?;
        self.publish_entry(idx, key, buf, (access.bits() | MAPPED, None));
        self.allocs.insert(key, Alloc { map, file });
        Ok((buf, key))
    }

    /// Frees allocation `key`: deregistered (as `dereg`: `Busy` while a
    /// peer's copy is still under way), unmapped, unlinked.
    pub(super) fn free_shared(&mut self, key: u64) -> Result<(), Status> {
        if !self.allocs.contains_key(&key) {
            return Err(Status::Inval);
        }
        self.table_dereg(key)?;
        if let Some(a) = self.allocs.remove(&key) {
            unlink(&a.file);
            drop(a.map);
        }
        Ok(())
    }

    /// [`crate::device::Device::atomic`]: on a peer's allocation, by this
    /// CPU's atomics; `NotSup` for other memory.
    pub(super) fn atomic_mapped(
        &mut self,
        ah: Ah,
        addr: u64,
        key: u64,
        a: &crate::device::RemoteAtomic,
    ) -> Result<(), DevError> {
        use crate::atomic_ops::op::ATOMIC_READ;
        if !self.cma {
            return Err(DevError::Failed(Status::NotSup));
        }
        let len = if a.op == ATOMIC_READ { a.result.len() } else { a.operand.len() };
        let need = if a.result.is_empty() { Access::REMOTE_WRITE } else { Access::REMOTE_WRITE | Access::REMOTE_READ };
        let p = super::peer_of(&mut self.peers, ah)?;
        // A refusal by the table is the answer; other memory: emulated.
        read_remote(&p.map, &p.shape, key, addr, len as u64, need).map_err(DevError::Failed)?;
        let r = mapped_access(&mut self.peer_maps, p, ah, (key, addr, len), need, |remote| {
            a.operand.with_slice(|opnd| {
                a.compare.with_slice(|cmp| {
                    a.result.with_slice_mut(|res| remote.atomic_apply(a.datatype, a.op, opnd, cmp, res))
                })
            })
        });
        let r = r.ok_or(DevError::Failed(Status::NotSup))?;
        self.mapped_copies += 1;
        r.map_err(DevError::Failed)
    }

    /// Registers `buf`, which the application maps from `fd` at file
    /// offset `offset`, with the [`SHARED`] flag: peers of this host map
    /// the file through a duplicate of `fd` this device keeps until the
    /// deregistration. `Inval`: `buf` and `offset` lie at different places
    /// of a page, or the file is shorter than `offset + len`; `NoMem`: no
    /// descriptor or table entry left.
    pub(super) fn reg_shared(&mut self, buf: UserBuf, fd: RawFd, offset: u64, access: Access) -> Result<u64, Status> {
        if offset % PAGE != buf.addr() % PAGE {
            return Err(Status::Inval);
        }
        let page = u32::try_from(offset / PAGE).map_err(|_| Status::Inval)?;
        // SAFETY: fstat into a zeroed struct of the right type.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let end = offset.checked_add(buf.len() as u64).ok_or(Status::Inval)?;
        if unsafe { libc::fstat(fd, &mut st) } != 0 || (st.st_size as u64) < end {
            return Err(Status::Inval);
        }
        // SAFETY: duplicating a descriptor the caller passed; checked.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(Status::NoMem);
        }
        let (idx, key) = match self.reserve_entry() {
            Ok(r) => r,
            Err(e) => {
                close(dup);
                return Err(e);
            }
        };
        self.publish_entry(idx, key, buf, (access.bits() | SHARED, Some((dup as u32, page))));
        self.shared_fds.insert(key, dup);
        Ok(key)
    }

    /// After the deregistration of `key`: its file descriptor, if it was
    /// shared memory, is closed.
    pub(super) fn unshare(&mut self, key: u64) {
        if let Some(fd) = self.shared_fds.remove(&key) {
            close(fd);
        }
    }

    /// Unlinks every allocation's file and closes the shared descriptors
    /// (the device closes).
    pub(super) fn release_all(&mut self) {
        for a in self.allocs.values() {
            unlink(&a.file);
        }
        for (_, fd) in self.shared_fds.drain() {
            close(fd);
        }
    }
}

/// Runs `f` on `n` bytes at `addr` of peer `p`'s memory `key` as this
/// process's mapping of it, when the owner's table grants `need` there and
/// the memory maps: an allocation (no claim: `mrtable::read_remote`), or
/// memory the application shares (under the entry's claim: it stays the
/// application's after a deregistration). `None` otherwise (the caller
/// goes by cross-memory attach or emulates, which checks and reports the
/// access itself).
#[inline(always)]
fn mapped_access<R>(
    maps: &mut PeerMaps,
    p: &Peer,
    ah: Ah,
    (key, addr, n): (u64, u64, usize),
    need: Access,
    f: impl FnOnce(UserBuf) -> R,
) -> Option<R> {
    let entry = read_remote(&p.map, &p.shape, key, addr, n as u64, need).ok()?;
    if entry.mapped {
        return Some(f(maps.range(p, ah, (key, entry), addr, n)?));
    }
    entry.shared?;
    let (_claim, entry) = claim_remote(&p.map, &p.shape, key, addr, n as u64, need).ok()?;
    entry.shared?;
    Some(f(maps.range(p, ah, (key, entry), addr, n)?))
}

/// Copies between `local` and peer `p`'s memory `key` at `addr` through
/// this process's mapping of it ([`mapped_access`]); `None`: not such
/// memory.
#[inline(always)]
pub(super) fn copy_mapped(
    maps: &mut PeerMaps,
    p: &Peer,
    ah: Ah,
    key: u64,
    (local, addr): (UserBuf, u64),
    write: bool,
) -> Option<()> {
    let need = if write { Access::REMOTE_WRITE } else { Access::REMOTE_READ };
    mapped_access(maps, p, ah, (key, addr, local.len()), need, |remote| {
        if write {
            remote.copy_from(0, &local, 0, local.len());
        } else {
            local.copy_from(0, &remote, 0, local.len());
        }
    })
}

/// Bytes of a page (the granule of a shared file's mapping offset).
const PAGE: u64 = 4096;

/// Maps `len` bytes at `off` of the file at `path` (a peer's allocation in
/// `/dev/shm`, or `/proc/<pid>/fd/<fd>` of memory a peer shares), when the
/// file holds them.
fn map_file(path: &str, off: u64, len: u64) -> Option<Mapping> {
    let c = cstr(path);
    // SAFETY: valid path; opened read-write to map it shared.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fstat into a zeroed struct of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let end = off.checked_add(len.max(1))?;
    let size_ok = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as u64 >= end;
    let map = if size_ok { Mapping::map_at(fd, len.max(1) as usize, off).ok() } else { None };
    close(fd);
    map
}

fn close(fd: RawFd) {
    // SAFETY: closing a descriptor we opened; the mapping keeps the memory.
    unsafe { libc::close(fd) };
}

fn unlink(file: &str) {
    let c = cstr(&format!("/{file}"));
    // SAFETY: valid name; failure (already gone) is fine.
    unsafe { libc::shm_unlink(c.as_ptr()) };
}
