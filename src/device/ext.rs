//! The device contract's optional extensions (docs/architecture.md).
//!
//! The core [`Device`](super::Device) trait is what every device gives. An
//! extension is a trait of its own that a device implements or not; the
//! device names it as one of its associated types (`type Sleep = Self`) and
//! hands it out through its accessor (`fn as_sleep(&mut self) ->
//! Option<&mut Self>`), or names [`Lacks`] and keeps the accessor's default
//! `None`. The engine asks for an extension where it uses it
//! (`if let Some(s) = dev.as_sleep() { .. }`): the accessor inlines to a
//! constant for the real devices, so a device that lacks an extension costs
//! nothing, and one that has it pays only for its calls. A device may also
//! decide at run time (the sim device models each extension on request).
//!
//! | extension | what it adds | shm | udp | sim |
//! |---|---|---|---|---|
//! | [`Sleep`] | sleeping on a descriptor | yes | yes | on request |
//! | [`Responder`] | work done while the application is away | — | yes | on request |
//! | [`MoreFollows`] | the bytes queued behind a packet | yes | — | on request |
//! | [`Doorbell`] | the end of a call's packets | — | yes | on request |
//! | [`Mapped`] | memory peers of one host map | yes | — | on request |
//! | [`InCall`] | operations done in the call | yes | — | on request |

use std::os::fd::RawFd;

use super::{Access, Ah, DevError, RemoteAtomic};
use crate::mem::UserBuf;
use crate::status::Status;

/// Sleeping on a file descriptor: the application (or the automatic
/// progress thread) may block until a packet may have arrived.
pub trait Sleep {
    /// A descriptor that polls readable when a packet may have arrived. The
    /// device signals it from then on (which may cost senders a syscall).
    /// `None`: the device could not make one (out of descriptors).
    fn wait_fd(&mut self) -> Option<RawFd>;

    /// Blocks until a packet may have arrived or `timeout_ms` passed
    /// (negative: no limit); false when it returned at once.
    fn wait(&mut self, timeout_ms: i32) -> bool;

    /// Whether the application may sleep on the [`Sleep::wait_fd`]
    /// descriptor now: nothing the device holds waits for a progress call
    /// that the descriptor would not announce (a packet ready, packets taken
    /// from the medium and not handed over, packets to hand over again).
    fn trywait(&mut self) -> bool;

    /// Prepares to sleep outside the endpoint's lock (the automatic progress
    /// thread): peers are asked to signal, and the descriptor to poll is
    /// returned with the longest the sleep may last (the device's periodic
    /// work). `None`: a packet already waits (the caller polls on).
    /// [`Sleep::sleep_end`] follows.
    fn sleep_begin(&mut self) -> Option<(RawFd, i32)>;

    /// Ends a sleep that [`Sleep::sleep_begin`] began.
    fn sleep_end(&mut self) {}

    /// Wakes a sleep of this device's own (another thread posted work).
    fn wake_sleeper(&self);
}

/// Work that cannot wait for the application's next call (udp:
/// acknowledgements, probes, RDMA of this endpoint's memory). The C API
/// runs a responder thread beside an endpoint in manual progress that has
/// this extension.
pub trait Responder {
    /// The responder's call, made while the application is away (it has
    /// made no call for a while) and never during one of its calls: does
    /// what cannot wait — acknowledgements owed, retransmissions, answers to
    /// probes, the RDMA peers ask of this endpoint's memory — and keeps what
    /// arrives for the engine (handed over by the next
    /// [`Device::recv`](super::Device::recv)), making the application's
    /// [`Sleep::wait_fd`] descriptor readable when it kept anything. Returns
    /// the descriptor on which new work shows and the longest to wait (ms)
    /// before the next call.
    fn respond(&mut self) -> (RawFd, i32);

    /// The descriptors [`Responder::respond`] uses: the responder runs with
    /// a descriptor table of its own that holds only these (and the
    /// standard ones), so that it keeps none of the application's files
    /// open.
    fn responder_fds(&self) -> Vec<RawFd>;

    /// What a responder thread holds to do [`Responder::respond`] while the
    /// application is away: given by a device shared with one
    /// ([`Shared`](super::away::Shared)); `None` for a device the
    /// application holds alone (it calls `respond` itself, or nobody does).
    fn away(&self) -> Option<std::sync::Arc<dyn super::away::AwayWork>> {
        None
    }
}

/// Hints on the bytes that follow a packet (shm: a producer that streams
/// lets its consumer trail it).
pub trait MoreFollows {
    /// Bytes for one peer queued behind a packet from which the device wants
    /// to hear of them; 0: not now.
    fn backlog_min(&self) -> u64;

    /// Says whether at least [`MoreFollows::backlog_min`] bytes for the same
    /// peer are queued behind the next packet sent: the engine says so
    /// before each bulk packet (CTSDATA, and a long-CTS RTM whose bytes it
    /// hands over by `send_gather`). A hint for that one packet.
    fn more_follows(&mut self, more: bool);
}

/// The end of a call's packets: a device that gathers packets into fewer
/// system calls (udp) puts what it gathered on the wire at the latest here.
pub trait Doorbell {
    /// Says that the engine is done queueing packets for now: it rings at
    /// the end of every call that may have sent (`send_with`, RDMA, a
    /// deregistration's refusals), so no packet waits for a later call.
    fn doorbell(&mut self);
}

/// Memory that the device's peers on this host map (shm): their RDMA to it
/// is a copy, and atomics on it are done by their CPU.
pub trait Mapped {
    /// Allocates `len` bytes registered with `access` (returned with their
    /// key) in memory the device's peers on this host can map. `NotSup`: not
    /// now (the engine then allocates ordinary memory and registers it).
    fn alloc(&mut self, len: usize, access: Access) -> Result<(UserBuf, u64), Status>;

    /// Frees an allocation of [`Mapped::alloc`]: deregistered as by
    /// `dereg` (`Busy` while a peer's access is under way: it stays), then
    /// released.
    fn free(&mut self, key: u64) -> Result<(), Status>;

    /// Registers `buf`, which the application maps from file descriptor `fd`
    /// at file offset `offset` (a memfd, `shm_open`), so that the device's
    /// peers on this host may map the file too. `NotSup`: not such a file
    /// (the engine registers the memory as usual).
    fn reg_shared(&mut self, buf: UserBuf, fd: RawFd, offset: u64, access: Access) -> Result<u64, Status>;

    /// An atomic on the peer's memory at `(remote_addr, key)`, done now by
    /// this process's CPU where the device maps that memory: the old values
    /// are in `a.result` when it returns `Ok`. `Failed(NotSup)`: not such
    /// memory (the engine emulates the atomic); `Failed(RemoteAccess)`:
    /// refused (key, bounds, access); `Again`: try later (or emulate).
    fn atomic(&mut self, ah: Ah, remote_addr: u64, key: u64, a: &RemoteAtomic) -> Result<(), DevError>;
}

/// Operations done in the call, without events (shm: copies through its
/// mapping of a peer's memory or by cross-memory attach).
pub trait InCall {
    /// Every peer the device reaches can be the target of its RDMA read and
    /// write without its owner's help: the engine then reads and writes
    /// directly without waiting for a new peer's HANDSHAKE, so a peer that
    /// never calls the library is still reached. shm: with cross-memory
    /// attach.
    fn any_peer(&self) -> bool;

    /// An RDMA write (`write`) or read done now, in this call, where the
    /// device can: no event follows. `Failed(NotSup)`: not done (the engine
    /// posts the usual RDMA); `Failed(RemoteAccess)`: refused; `Again`: try
    /// later.
    fn rdma_now(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, write: bool) -> Result<(), DevError>;

    /// [`InCall::rdma_now`] done in this call or not at all, whatever would
    /// be quicker. `Failed(NotSup)`: the device cannot; `Again`: operations
    /// of this endpoint to the peer that this one must not pass are still
    /// under way; `Failed(RemoteAccess)`: refused.
    fn rdma_in_call(&mut self, ah: Ah, local: UserBuf, remote_addr: u64, key: u64, write: bool)
        -> Result<(), DevError>;

    /// The express receive (`Endpoint::progress_express`): hands waiting
    /// packets to `f`, at most `max`, as long as each is one the device
    /// takes this way (whole, from a sender with a handle) and no device
    /// event waits (its periodic work, such as a peer check, it does
    /// itself, stopping when that makes an event); a packet `f` takes
    /// (true) leaves the device as through `recv`, one it declines stays for
    /// `recv`, and so does every packet after it. Returns how many `f` took
    /// and whether another packet may wait (false: the next position was
    /// seen empty).
    fn recv_express(&mut self, max: usize, f: impl FnMut(Ah, &[u8]) -> bool) -> (usize, bool);
}

/// The accessors of the extensions a device has in full, each handing out
/// the device itself (`has_extensions!(as_sleep, as_sleeper, ...)` inside
/// its `impl Device`).
#[macro_export]
#[doc(hidden)]
macro_rules! has_extensions {
    (@one as_sleeper) => {
        #[inline(always)]
        fn as_sleeper(&self) -> Option<&Self> {
            Some(self)
        }
    };
    (@one as_in_call_ref) => {
        #[inline(always)]
        fn as_in_call_ref(&self) -> Option<&Self> {
            Some(self)
        }
    };
    (@one $acc:ident) => {
        #[inline(always)]
        fn $acc(&mut self) -> Option<&mut Self> {
            Some(self)
        }
    };
    ($($acc:ident),+ $(,)?) => {
        $($crate::has_extensions!(@one $acc);)+
    };
}

/// The extension a device lacks: no value of it exists, so an accessor
/// typed with it can only answer `None`, and every use folds away.
#[derive(Debug)]
pub enum Lacks {}

impl Sleep for Lacks {
    fn wait_fd(&mut self) -> Option<RawFd> {
        match *self {}
    }
    fn wait(&mut self, _: i32) -> bool {
        match *self {}
    }
    fn trywait(&mut self) -> bool {
        match *self {}
    }
    fn sleep_begin(&mut self) -> Option<(RawFd, i32)> {
        match *self {}
    }
    fn wake_sleeper(&self) {
        match *self {}
    }
}

impl Responder for Lacks {
    fn respond(&mut self) -> (RawFd, i32) {
        match *self {}
    }
    fn responder_fds(&self) -> Vec<RawFd> {
        match *self {}
    }
}

impl MoreFollows for Lacks {
    fn backlog_min(&self) -> u64 {
        match *self {}
    }
    fn more_follows(&mut self, _: bool) {
        match *self {}
    }
}

impl Doorbell for Lacks {
    fn doorbell(&mut self) {
        match *self {}
    }
}

impl Mapped for Lacks {
    fn alloc(&mut self, _: usize, _: Access) -> Result<(UserBuf, u64), Status> {
        match *self {}
    }
    fn free(&mut self, _: u64) -> Result<(), Status> {
        match *self {}
    }
    fn reg_shared(&mut self, _: UserBuf, _: RawFd, _: u64, _: Access) -> Result<u64, Status> {
        match *self {}
    }
    fn atomic(&mut self, _: Ah, _: u64, _: u64, _: &RemoteAtomic) -> Result<(), DevError> {
        match *self {}
    }
}

impl InCall for Lacks {
    fn any_peer(&self) -> bool {
        match *self {}
    }
    fn rdma_now(&mut self, _: Ah, _: UserBuf, _: u64, _: u64, _: bool) -> Result<(), DevError> {
        match *self {}
    }
    fn rdma_in_call(&mut self, _: Ah, _: UserBuf, _: u64, _: u64, _: bool) -> Result<(), DevError> {
        match *self {}
    }
    fn recv_express(&mut self, _: usize, _: impl FnMut(Ah, &[u8]) -> bool) -> (usize, bool) {
        match *self {}
    }
}
