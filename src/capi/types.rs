//! The C types and constants of the API (their layout is ABI: structs only
//! grow at the end, and constants are never renumbered).

use std::ffi::c_void;

/// An address handle returned by `rdm4_av_insert`.
#[allow(non_camel_case_types)]
pub type rdm4_addr = u64;

/// `rdm4_cqe.src` when the source is not known; also "any source" for receives.
pub const RDM4_ADDR_UNSPEC: rdm4_addr = u64::MAX;

/// Length of a raw endpoint address (`rdm4_ep_getname`).
pub const RDM4_ADDR_LEN: usize = 32;

/// Device: the default, auto (`RDM4_DEVICE` overrides).
pub const RDM4_DEVICE_DEFAULT: u32 = 0;
/// Device: shared memory between processes of one host.
pub const RDM4_DEVICE_SHM: u32 = 1;
/// Device: UDP between hosts on any IP network (reliable datagrams and RDMA
/// over UDP, in the device).
pub const RDM4_DEVICE_UDP: u32 = 2;
/// Device: both, behind one endpoint: shared memory to the peers of this
/// host, udp to the others (one address vector, one completion queue, one
/// descriptor). Its name has `RDM4_ADDR_LEN` bytes as every endpoint's: the
/// udp address with a locator of its shared memory; names of shm and udp
/// endpoints are inserted as they are. A device that cannot open leaves it
/// working with the other (`rdm4_ep_query` says which it has). The
/// default device.
pub const RDM4_DEVICE_AUTO: u32 = 3;

/// The largest message, RMA transfer, atomic payload or registration, in
/// bytes: 2^47 (128 TiB, the user address space of x86_64 and aarch64
/// Linux, so no real buffer is larger). Longer lengths give
/// `RDM4_EOVERFLOW`.
pub const RDM4_MSG_MAX: u64 = 0x8000_0000_0000;

/// Progress: the application drives everything through `rdm4_poll` / `rdm4_wait`.
pub const RDM4_PROGRESS_MANUAL: u32 = 0;
/// Progress: a thread of the library also progresses the endpoint, so
/// one-sided operations complete while the target does not call in. The
/// thread polls while traffic flows; when none comes it spins briefly
/// (50 us to 2 ms, adapted to the traffic) and then sleeps until a packet
/// arrives, a call queues work for it, or the device's periodic peer check
/// is due (`RDM4_SHM_PEER_CHECK_MS`): an idle endpoint costs well under 1%
/// of a core.
pub const RDM4_PROGRESS_AUTO: u32 = 1;

/// Threading: any thread may call on the endpoint at any time; each call
/// takes the endpoint's lock.
pub const RDM4_THREAD_SAFE: u32 = 0;
/// Threading: the application promises that calls on the endpoint never
/// overlap (one thread, or threads that serialise their calls, as with
/// `FI_THREAD_DOMAIN` or `UCS_THREAD_MODE_SINGLE`); calls then take no
/// lock (over udp, their accesses to the device keep its responder, see
/// `rdm4_ep_open`, out without one: the responder waits for a
/// process-wide memory barrier, `membarrier(2)`, and where the kernel has
/// none both sides fence). Requires `RDM4_PROGRESS_MANUAL`.
/// Overlapping calls on such an endpoint are undefined behaviour.
pub const RDM4_THREAD_SINGLE: u32 = 1;

/// Memory access: local use.
pub const RDM4_ACCESS_LOCAL: u64 = 1 << 0;
/// Memory access: peers may read.
pub const RDM4_ACCESS_REMOTE_READ: u64 = 1 << 1;
/// Memory access: peers may write and run atomics.
pub const RDM4_ACCESS_REMOTE_WRITE: u64 = 1 << 2;

/// Completion flag: a send.
pub const RDM4_CQ_SEND: u64 = 1 << 0;
/// Completion flag: a receive.
pub const RDM4_CQ_RECV: u64 = 1 << 1;
/// Completion flag: an untagged message.
pub const RDM4_CQ_MSG: u64 = 1 << 2;
/// Completion flag: a tagged message.
pub const RDM4_CQ_TAGGED: u64 = 1 << 3;
/// Completion flag: an RMA operation.
pub const RDM4_CQ_RMA: u64 = 1 << 4;
/// Completion flag: a read (RMA read, or an atomic that returned values).
pub const RDM4_CQ_READ: u64 = 1 << 5;
/// Completion flag: a write (RMA write or atomic).
pub const RDM4_CQ_WRITE: u64 = 1 << 6;
/// Completion flag: an atomic.
pub const RDM4_CQ_ATOMIC: u64 = 1 << 7;
/// Completion flag: `data` holds remote CQ data.
pub const RDM4_CQ_REMOTE_CQ_DATA: u64 = 1 << 8;
/// Completion flag: a peer wrote into this endpoint's memory (with CQ data).
pub const RDM4_CQ_REMOTE_WRITE: u64 = 1 << 9;

/// `rdm4_msg` flag: tagged (use `tag`, and `ignore` on receives).
pub const RDM4_MSG_TAGGED: u64 = 1 << 0;
/// `rdm4_msg` flag: send `data` as remote CQ data.
pub const RDM4_MSG_REMOTE_CQ_DATA: u64 = 1 << 1;
/// `rdm4_probe` flag: take the message found out of matching, for
/// `rdm4_recv_claimed` with the probe's context.
pub const RDM4_PROBE_CLAIM: u64 = 1 << 8;
/// `rdm4_probe` flag: drop the message found (no completion anywhere).
pub const RDM4_PROBE_DISCARD: u64 = 1 << 9;
/// `rdm4_sendmsg` flag: more sends follow at once; the library may hold
/// this one until a call without the flag (see `rdm4_sendmsg`).
pub const RDM4_MSG_MORE: u64 = 1 << 2;
/// `rdm4_sendmsg` flag: delivery complete (see `rdm4_sendmsg`).
pub const RDM4_MSG_DELIVERY_COMPLETE: u64 = 1 << 3;
/// `rdm4_sendmsg` flag: inject (as `rdm4_inject`): the buffers are the
/// caller's again when the call returns and no completion is written; at
/// most 64 KiB in all (see `rdm4_sendmsg`).
pub const RDM4_MSG_INJECT: u64 = 1 << 4;

/// Atomic datatypes: libfabric's `enum fi_datatype` values.
pub const RDM4_INT8: u32 = 0;
/// See `RDM4_INT8`.
pub const RDM4_UINT8: u32 = 1;
/// See `RDM4_INT8`.
pub const RDM4_INT16: u32 = 2;
/// See `RDM4_INT8`.
pub const RDM4_UINT16: u32 = 3;
/// See `RDM4_INT8`.
pub const RDM4_INT32: u32 = 4;
/// See `RDM4_INT8`.
pub const RDM4_UINT32: u32 = 5;
/// See `RDM4_INT8`.
pub const RDM4_INT64: u32 = 6;
/// See `RDM4_INT8`.
pub const RDM4_UINT64: u32 = 7;
/// See `RDM4_INT8`.
pub const RDM4_FLOAT: u32 = 8;
/// See `RDM4_INT8`.
pub const RDM4_DOUBLE: u32 = 9;
/// See `RDM4_INT8`.
pub const RDM4_FLOAT_COMPLEX: u32 = 10;
/// See `RDM4_INT8`.
pub const RDM4_DOUBLE_COMPLEX: u32 = 11;
/// See `RDM4_INT8` (refused: `RDM4_ENOTSUP`).
pub const RDM4_LONG_DOUBLE: u32 = 12;
/// See `RDM4_INT8` (refused: `RDM4_ENOTSUP`).
pub const RDM4_LONG_DOUBLE_COMPLEX: u32 = 13;
/// See `RDM4_INT8`.
pub const RDM4_INT128: u32 = 14;
/// See `RDM4_INT8`.
pub const RDM4_UINT128: u32 = 15;

/// Atomic operations: libfabric's `enum fi_op` values.
pub const RDM4_MIN: u32 = 0;
/// See `RDM4_MIN`.
pub const RDM4_MAX: u32 = 1;
/// See `RDM4_MIN`.
pub const RDM4_SUM: u32 = 2;
/// See `RDM4_MIN`.
pub const RDM4_PROD: u32 = 3;
/// See `RDM4_MIN`.
pub const RDM4_LOR: u32 = 4;
/// See `RDM4_MIN`.
pub const RDM4_LAND: u32 = 5;
/// See `RDM4_MIN`.
pub const RDM4_BOR: u32 = 6;
/// See `RDM4_MIN`.
pub const RDM4_BAND: u32 = 7;
/// See `RDM4_MIN`.
pub const RDM4_LXOR: u32 = 8;
/// See `RDM4_MIN`.
pub const RDM4_BXOR: u32 = 9;
/// See `RDM4_MIN`.
pub const RDM4_ATOMIC_READ: u32 = 10;
/// See `RDM4_MIN`.
pub const RDM4_ATOMIC_WRITE: u32 = 11;
/// See `RDM4_MIN`.
pub const RDM4_CSWAP: u32 = 12;
/// See `RDM4_MIN`.
pub const RDM4_CSWAP_NE: u32 = 13;
/// See `RDM4_MIN`.
pub const RDM4_CSWAP_LE: u32 = 14;
/// See `RDM4_MIN`.
pub const RDM4_CSWAP_LT: u32 = 15;
/// See `RDM4_MIN`.
pub const RDM4_CSWAP_GE: u32 = 16;
/// See `RDM4_MIN`.
pub const RDM4_CSWAP_GT: u32 = 17;
/// See `RDM4_MIN`.
pub const RDM4_MSWAP: u32 = 18;

/// Endpoint attributes. Initialise with `rdm4_ep_attr_init`, which sets
/// `size`; fields added in later versions go at the end, and the library
/// reads only the first `size` bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdm4_ep_attr {
    /// `sizeof(rdm4_ep_attr)` as the caller compiled it.
    pub size: usize,
    /// `RDM4_DEVICE_*`.
    pub device: u32,
    /// `RDM4_PROGRESS_*`.
    pub progress: u32,
    /// Messages longer than one packet (eager, up to 16 KiB) and up to this
    /// many bytes use the medium protocol (0: default 64 KiB); longer ones
    /// use long-CTS. On shm, long-read (one copy by cross-memory attach)
    /// replaces long-CTS only from `RDM4_SHM_LONGREAD_MIN` bytes on, which
    /// is off by default: the ring's pipelined copies were measured faster.
    pub medium_max: usize,
    /// Bytes of message data of unexpected messages (arrived before their
    /// receive) held at most (0: default 64 MiB). Past it the endpoint
    /// leaves new messages with the device, which holds their senders back
    /// (their sends wait, "try again" inside the library), until receives
    /// are posted; nothing is dropped, and the endpoint's own operations go
    /// on. One message is always taken when none is held, even a larger
    /// one (up to the larger of `medium_max` and a packet).
    pub unexpected_limit: usize,
    /// Long-CTS window in packets (0: default 64).
    pub max_credits: u32,
    /// `RDM4_THREAD_*` (0: `RDM4_THREAD_SAFE`).
    pub threading: u32,
    /// `RDM4_EP_*` flags (0: none).
    pub flags: u64,
    /// A write, read or atomic that its target has not served this many
    /// milliseconds after its post completes with `RDM4_ETIMEDOUT` (0: the
    /// default, 60000; `RDM4_TIMEOUT_NONE`: never). Messages have no
    /// timeout: a send waits for the receiver's application; except a
    /// delivery-complete send to a peer that cannot report a failed
    /// receive (no PEER_ERROR: libfabric up to 2.6, a baseline peer),
    /// which completes with `RDM4_ETIMEDOUT` when its receipt has not come
    /// within it. Read again from `RDM4_TIMEOUT_MS`, which overrides it.
    pub timeout_ms: u64,
    /// Operations outstanding at most (0: default 65536): sends, posted
    /// receives, writes, reads and atomics not yet completed. A post past
    /// it returns `RDM4_EAGAIN` and changes nothing; new unexpected
    /// messages then wait with their senders. Read again from
    /// `RDM4_MAX_OPS`, which overrides it.
    pub max_ops: u32,
    /// Peers at most (0: default 65536): addresses inserted, and senders
    /// that introduced themselves. `rdm4_av_insert` past it returns
    /// `RDM4_ENOMEM`; a packet from a new sender past it is dropped and
    /// counted (`drop_peer_limit`), so that packets from forged addresses
    /// cannot grow the endpoint without bound. Read again from
    /// `RDM4_MAX_PEERS`, which overrides it.
    pub max_peers: u32,
    /// Memory registrations at most (0: default 65536), the library's own
    /// (one per long-read send in flight) included: `rdm4_mr_reg`,
    /// `rdm4_mr_reg_fd` and `rdm4_mr_alloc` past it return `RDM4_ENOMEM`.
    /// The shm device holds 1024 at most whatever this says. Read again
    /// from `RDM4_MAX_MRS`, which overrides it.
    pub max_mrs: u32,
    /// Reserved, must be zero.
    pub reserved32: u32,
    /// Reserved for later fields, must be zero.
    pub reserved: [u64; 4],
}

/// `rdm4_ep_attr.timeout_ms`: requests never time out.
pub const RDM4_TIMEOUT_NONE: u64 = u64::MAX;

/// `rdm4_ep_attr.flags`: speak protocol v4's baseline only, as a peer of an
/// older implementation does: advertise no extra feature or request in the
/// HANDSHAKE (no RDMA read or write, no delivery complete, no connid
/// header, no PEER_ERROR), so that peers fall back to the emulated
/// protocols. For testing interoperability and each fallback; also set by
/// `RDM4_LEGACY=1`.
pub const RDM4_EP_LEGACY: u64 = 1 << 0;
/// `rdm4_ep_attr.flags`: every send of the endpoint is delivery complete
/// (as `RDM4_MSG_DELIVERY_COMPLETE`; inject aside, which has no
/// completion).
pub const RDM4_EP_DELIVERY_COMPLETE: u64 = 1 << 1;

/// What an endpoint runs with (`rdm4_ep_query`): its modes, limits and
/// protocol thresholds, as `fi_getinfo` reports a provider's.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdm4_ep_info {
    /// `sizeof(rdm4_ep_info)` as the caller compiled it; set it before the
    /// call: the library writes no more than that many bytes.
    pub size: usize,
    /// `RDM4_DEVICE_SHM` or `RDM4_DEVICE_UDP`: the device opened (after
    /// `RDM4_DEVICE`).
    pub device: u32,
    /// `RDM4_PROGRESS_*`.
    pub progress: u32,
    /// `RDM4_THREAD_*`.
    pub threading: u32,
    /// RDMA the device offers between these peers' devices: bit 0 read,
    /// bit 1 write (without, RMA is emulated through messages).
    pub rdma: u32,
    /// The longest message (`RDM4_MSG_MAX`).
    pub max_msg_size: u64,
    /// The longest message `rdm4_inject` takes.
    pub inject_size: u64,
    /// The largest packet of the device (auto: the one every peer takes,
    /// the smaller of its devices'; peers of this host get shm's).
    pub mtu: u64,
    /// Tagged messages up to this length go in one packet (eager);
    /// untagged ones up to `eager_max_untagged` (auto: to every peer; to
    /// peers of this host, up to shm's).
    pub eager_max: u64,
    pub eager_max_untagged: u64,
    /// Longer messages up to this length use the medium protocol, longer
    /// ones long-CTS (or long-read).
    pub medium_max: u64,
    /// Bytes of unexpected messages held at most.
    pub unexpected_limit: u64,
    /// Long-CTS window in packets.
    pub max_credits: u64,
    /// The request timeout in milliseconds (`rdm4_ep_attr.timeout_ms`; 0:
    /// never).
    pub timeout_ms: u64,
    /// Messages from this length on move by long-read (one RDMA read by
    /// the receiver) when both sides can read (`UINT64_MAX`: never; shm:
    /// `RDM4_SHM_LONGREAD_MIN`).
    pub longread_min: u64,
    /// Runting read: of a long-read message, up to this many bytes per
    /// peer in flight travel in packets, the rest is read (0: never;
    /// `RDM4_RUNT_SIZE`).
    pub runt_size: u64,
    /// The devices it has: 1 shared memory, 2 udp (auto: both, or the one
    /// that opened).
    pub devices: u64,
    /// Reserved for later fields (written as zero).
    pub reserved: [u64; 4],
}

/// One completion (`rdm4_poll`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdm4_cqe {
    /// The `context` given to the operation (NULL for target-side entries).
    pub context: *mut c_void,
    /// `RDM4_CQ_*` flags.
    pub flags: u64,
    /// Bytes transferred (for receives: bytes placed in the buffer).
    pub len: u64,
    /// Receive buffer the data went to (receives), else NULL.
    pub buf: *mut c_void,
    /// Remote CQ data when `RDM4_CQ_REMOTE_CQ_DATA` is set.
    pub data: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Source of a receive, or of a write that carried remote CQ data (the
    /// target-side entry): the sender's handle. For a sender the
    /// application never inserted (or removed), it is the handle that
    /// `rdm4_av_insert` of the sender's address returns: the same for all
    /// its messages, usable for sends once that insert is done
    /// (`RDM4_ENOADDR` before). `RDM4_ADDR_UNSPEC` for other entries.
    pub src: rdm4_addr,
    /// `RDM4_SUCCESS` or the failure (`RDM4_ETRUNC`, `RDM4_EREMOTEACCESS`, `RDM4_EPEER`, ...).
    pub status: i32,
    /// Detail of a failure: the target's error number (the magnitude of its
    /// `RDM4_E*` code, as an rdm4 peer sends it) when the target refused
    /// the operation, or when the device checked the target's registration
    /// for it (so `RDM4_EREMOTEACCESS` has detail 7 whichever side found
    /// it); 0 for other failures and for successes.
    pub detail: u32,
    /// With `RDM4_ETRUNC`: the full message length.
    pub olen: u64,
    /// Reserved for later fields.
    pub reserved: [u64; 2],
}

/// A message for `rdm4_sendmsg` / `rdm4_recvmsg`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdm4_msg {
    /// The buffers (up to 1024).
    pub iov: *const libc::iovec,
    /// Entries in `iov`.
    pub iov_count: usize,
    /// Destination (send) or source filter (receive; `RDM4_ADDR_UNSPEC` = any).
    pub addr: rdm4_addr,
    /// Tag (with `RDM4_MSG_TAGGED`).
    pub tag: u64,
    /// Tag bits to ignore (receives with `RDM4_MSG_TAGGED`).
    pub ignore: u64,
    /// Remote CQ data (sends with `RDM4_MSG_REMOTE_CQ_DATA`).
    pub data: u64,
    /// Returned in the completion.
    pub context: *mut c_void,
}
