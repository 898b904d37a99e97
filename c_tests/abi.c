/*
 * abi.c: pins the ABI of rdm4.h as it is on x86_64 today.
 *
 * - the size, alignment and offset of every field of every public struct
 *   (rdm4_ep_attr, rdm4_cqe, rdm4_msg, rdm4_ep_info) and the type of every field;
 * - the prototype of every exported function (assigned to a pointer of the
 *   exact expected type: a changed prototype is a compile error under -Werror);
 * - the value of every public constant and status code, written as literal
 *   numbers so that a renumbering fails;
 * - rdm4_ep_attr_init sets `size` and the documented defaults.
 *
 * Layout checks are _Static_assert (compile time) and are only compiled on
 * x86_64 Linux (LP64), the platform whose values they pin. Constants are
 * checked at compile time too and once more at run time, so the program also
 * prints what it checked. Exits 1 with a message on any failure.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rdm4.h"

static int failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) {                                                           \
            printf("ok - ");                                                  \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
        } else {                                                              \
            fprintf(stderr, "FAIL %s:%d: `%s`: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            failures++;                                                       \
        }                                                                     \
    } while (0)

/* ---------------------------------------------------------------------- */
/* Struct layout (x86_64 / LP64).                                          */
/* ---------------------------------------------------------------------- */

#define FIELD(T, f) (((T *)0)->f)
#define SAME_TYPE(expr, T) _Generic((expr), T: 1, default: 0)
/* Pins offset, size and type of one field. */
#define PIN_FIELD(S, f, off, sz, T)                                                      \
    _Static_assert(offsetof(S, f) == (off), "offsetof(" #S ", " #f ") == " #off);      \
    _Static_assert(sizeof(FIELD(S, f)) == (sz), "sizeof(" #S "." #f ") == " #sz);      \
    _Static_assert(SAME_TYPE(FIELD(S, f), T), "type of " #S "." #f " is " #T)
/* Same for an array field: the element type is pinned through element 0. */
#define PIN_ARRAY(S, f, off, sz, T, n)                                                   \
    _Static_assert(offsetof(S, f) == (off), "offsetof(" #S ", " #f ") == " #off);      \
    _Static_assert(sizeof(FIELD(S, f)) == (sz), "sizeof(" #S "." #f ") == " #sz);      \
    _Static_assert(sizeof(FIELD(S, f)) / sizeof(FIELD(S, f)[0]) == (n),                \
                   #S "." #f " has " #n " elements");                                   \
    _Static_assert(SAME_TYPE(FIELD(S, f)[0], T), "element type of " #S "." #f " is " #T)

#if defined(__x86_64__) && defined(__LP64__)
#define LAYOUT_PINNED 1

/* struct rdm4_ep_attr: 104 bytes, 8-aligned, no padding. */
_Static_assert(sizeof(rdm4_ep_attr) == 104, "sizeof(rdm4_ep_attr) == 104");
_Static_assert(_Alignof(rdm4_ep_attr) == 8, "_Alignof(rdm4_ep_attr) == 8");
PIN_FIELD(rdm4_ep_attr, size, 0, 8, size_t);
PIN_FIELD(rdm4_ep_attr, device, 8, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, progress, 12, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, medium_max, 16, 8, size_t);
PIN_FIELD(rdm4_ep_attr, unexpected_limit, 24, 8, size_t);
PIN_FIELD(rdm4_ep_attr, max_credits, 32, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, threading, 36, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, flags, 40, 8, uint64_t);
PIN_FIELD(rdm4_ep_attr, timeout_ms, 48, 8, uint64_t);
PIN_FIELD(rdm4_ep_attr, max_ops, 56, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, max_peers, 60, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, max_mrs, 64, 4, uint32_t);
PIN_FIELD(rdm4_ep_attr, reserved32, 68, 4, uint32_t);
PIN_ARRAY(rdm4_ep_attr, reserved, 72, 32, uint64_t, 4);

/* struct rdm4_cqe: 88 bytes, 8-aligned, no padding. */
_Static_assert(sizeof(rdm4_cqe) == 88, "sizeof(rdm4_cqe) == 88");
_Static_assert(_Alignof(rdm4_cqe) == 8, "_Alignof(rdm4_cqe) == 8");
PIN_FIELD(rdm4_cqe, context, 0, 8, void *);
PIN_FIELD(rdm4_cqe, flags, 8, 8, uint64_t);
PIN_FIELD(rdm4_cqe, len, 16, 8, uint64_t);
PIN_FIELD(rdm4_cqe, buf, 24, 8, void *);
PIN_FIELD(rdm4_cqe, data, 32, 8, uint64_t);
PIN_FIELD(rdm4_cqe, tag, 40, 8, uint64_t);
PIN_FIELD(rdm4_cqe, src, 48, 8, rdm4_addr);
PIN_FIELD(rdm4_cqe, status, 56, 4, int32_t);
PIN_FIELD(rdm4_cqe, detail, 60, 4, uint32_t);
PIN_FIELD(rdm4_cqe, olen, 64, 8, uint64_t);
PIN_ARRAY(rdm4_cqe, reserved, 72, 16, uint64_t, 2);

/* struct rdm4_msg: 56 bytes, 8-aligned, no padding. */
_Static_assert(sizeof(rdm4_msg) == 56, "sizeof(rdm4_msg) == 56");
_Static_assert(_Alignof(rdm4_msg) == 8, "_Alignof(rdm4_msg) == 8");
PIN_FIELD(rdm4_msg, iov, 0, 8, const struct iovec *);
PIN_FIELD(rdm4_msg, iov_count, 8, 8, size_t);
PIN_FIELD(rdm4_msg, addr, 16, 8, rdm4_addr);
PIN_FIELD(rdm4_msg, tag, 24, 8, uint64_t);
PIN_FIELD(rdm4_msg, ignore, 32, 8, uint64_t);
PIN_FIELD(rdm4_msg, data, 40, 8, uint64_t);
PIN_FIELD(rdm4_msg, context, 48, 8, void *);

/* struct rdm4_ep_info: 152 bytes, 8-aligned, no padding. */
_Static_assert(sizeof(rdm4_ep_info) == 152, "sizeof(rdm4_ep_info) == 152");
_Static_assert(_Alignof(rdm4_ep_info) == 8, "_Alignof(rdm4_ep_info) == 8");
PIN_FIELD(rdm4_ep_info, size, 0, 8, size_t);
PIN_FIELD(rdm4_ep_info, device, 8, 4, uint32_t);
PIN_FIELD(rdm4_ep_info, progress, 12, 4, uint32_t);
PIN_FIELD(rdm4_ep_info, threading, 16, 4, uint32_t);
PIN_FIELD(rdm4_ep_info, rdma, 20, 4, uint32_t);
PIN_FIELD(rdm4_ep_info, max_msg_size, 24, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, inject_size, 32, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, mtu, 40, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, eager_max, 48, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, eager_max_untagged, 56, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, medium_max, 64, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, unexpected_limit, 72, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, max_credits, 80, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, timeout_ms, 88, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, longread_min, 96, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, runt_size, 104, 8, uint64_t);
PIN_FIELD(rdm4_ep_info, devices, 112, 8, uint64_t);
PIN_ARRAY(rdm4_ep_info, reserved, 120, 32, uint64_t, 4);

/* rdm4_addr is a 64-bit unsigned integer. */
_Static_assert(sizeof(rdm4_addr) == 8, "sizeof(rdm4_addr) == 8");
_Static_assert(SAME_TYPE((rdm4_addr)0, uint64_t), "rdm4_addr is uint64_t");
#else
#define LAYOUT_PINNED 0
#endif

/* ---------------------------------------------------------------------- */
/* Function prototypes: each initialiser must have exactly this type.     */
/* ---------------------------------------------------------------------- */

static uint32_t (*const p_version)(void) = rdm4_version;
static const char *(*const p_version_string)(void) = rdm4_version_string;
static const char *(*const p_strerror)(int32_t) = rdm4_strerror;
static int32_t (*const p_send)(struct rdm4_ep *, const void *, size_t, rdm4_addr, void *) = rdm4_send;
static int32_t (*const p_tsend)(struct rdm4_ep *, const void *, size_t, rdm4_addr, uint64_t, void *) =
    rdm4_tsend;
static int32_t (*const p_senddata)(struct rdm4_ep *, const void *, size_t, uint64_t, rdm4_addr, void *) =
    rdm4_senddata;
static int32_t (*const p_inject)(struct rdm4_ep *, const void *, size_t, rdm4_addr) = rdm4_inject;
static int32_t (*const p_tinject)(struct rdm4_ep *, const void *, size_t, rdm4_addr, uint64_t) = rdm4_tinject;
static int32_t (*const p_sendmsg)(struct rdm4_ep *, const struct rdm4_msg *, uint64_t) = rdm4_sendmsg;
static int32_t (*const p_recv)(struct rdm4_ep *, void *, size_t, rdm4_addr, void *) = rdm4_recv;
static int32_t (*const p_trecv)(struct rdm4_ep *, void *, size_t, rdm4_addr, uint64_t, uint64_t, void *) =
    rdm4_trecv;
static int32_t (*const p_recvmsg)(struct rdm4_ep *, const struct rdm4_msg *, uint64_t) = rdm4_recvmsg;
static int32_t (*const p_cancel)(struct rdm4_ep *, void *) = rdm4_cancel;
static int32_t (*const p_trywait)(struct rdm4_ep *) = rdm4_trywait;
static int32_t (*const p_ep_query)(struct rdm4_ep *, struct rdm4_ep_info *) = rdm4_ep_query;
static int32_t (*const p_counters)(struct rdm4_ep *, size_t, const char **, uint64_t *, size_t) = rdm4_counters;
static int32_t (*const p_probe)(struct rdm4_ep *, rdm4_addr, uint64_t, uint64_t, uint64_t, void *,
                                struct rdm4_cqe *) = rdm4_probe;
static int32_t (*const p_recv_claimed)(struct rdm4_ep *, void *, void *, size_t) = rdm4_recv_claimed;
static int32_t (*const p_write)(struct rdm4_ep *, const void *, size_t, rdm4_addr, uint64_t, uint64_t,
                                void *) = rdm4_write;
static int32_t (*const p_writedata)(struct rdm4_ep *, const void *, size_t, uint64_t, rdm4_addr, uint64_t,
                                    uint64_t, void *) = rdm4_writedata;
static int32_t (*const p_read)(struct rdm4_ep *, void *, size_t, rdm4_addr, uint64_t, uint64_t, void *) =
    rdm4_read;
static int32_t (*const p_write_now)(struct rdm4_ep *, const void *, size_t, rdm4_addr, uint64_t, uint64_t) =
    rdm4_write_now;
static int32_t (*const p_read_now)(struct rdm4_ep *, void *, size_t, rdm4_addr, uint64_t, uint64_t) =
    rdm4_read_now;
static int32_t (*const p_atomic_now)(struct rdm4_ep *, const void *, const void *, void *, size_t, uint32_t,
                                     uint32_t, rdm4_addr, uint64_t, uint64_t) = rdm4_atomic_now;
static int32_t (*const p_atomic)(struct rdm4_ep *, const void *, size_t, uint32_t, uint32_t, rdm4_addr,
                                 uint64_t, uint64_t, void *) = rdm4_atomic;
static int32_t (*const p_fetch_atomic)(struct rdm4_ep *, const void *, size_t, void *, uint32_t, uint32_t,
                                       rdm4_addr, uint64_t, uint64_t, void *) = rdm4_fetch_atomic;
static int32_t (*const p_compare_atomic)(struct rdm4_ep *, const void *, size_t, const void *, void *,
                                         uint32_t, uint32_t, rdm4_addr, uint64_t, uint64_t, void *) =
    rdm4_compare_atomic;
static int32_t (*const p_ep_attr_init)(struct rdm4_ep_attr *) = rdm4_ep_attr_init;
static int32_t (*const p_ep_open)(const struct rdm4_ep_attr *, struct rdm4_ep **) = rdm4_ep_open;
static int32_t (*const p_ep_close)(struct rdm4_ep *) = rdm4_ep_close;
static int32_t (*const p_ep_getname)(struct rdm4_ep *, void *, size_t *) = rdm4_ep_getname;
static int32_t (*const p_av_insert)(struct rdm4_ep *, const void *, size_t, rdm4_addr *) = rdm4_av_insert;
static int32_t (*const p_av_remove)(struct rdm4_ep *, const rdm4_addr *, size_t) = rdm4_av_remove;
static int32_t (*const p_av_straddr)(const void *, char *, size_t *) = rdm4_av_straddr;
static int32_t (*const p_resolve)(const char *, const char *, int, void *, size_t *) = rdm4_resolve;
static int32_t (*const p_av_lookup)(struct rdm4_ep *, rdm4_addr, void *, size_t *) = rdm4_av_lookup;
static int32_t (*const p_mr_reg)(struct rdm4_ep *, void *, size_t, uint64_t, uint64_t *) = rdm4_mr_reg;
static int32_t (*const p_mr_reg_fd)(struct rdm4_ep *, void *, size_t, int, uint64_t, uint64_t, uint64_t *) =
    rdm4_mr_reg_fd;
static int32_t (*const p_mr_close)(struct rdm4_ep *, uint64_t) = rdm4_mr_close;
static int32_t (*const p_mr_alloc)(struct rdm4_ep *, size_t, uint64_t, void **, uint64_t *) = rdm4_mr_alloc;
static int32_t (*const p_mr_free)(struct rdm4_ep *, uint64_t) = rdm4_mr_free;
static int32_t (*const p_poll)(struct rdm4_ep *, struct rdm4_cqe *, size_t) = rdm4_poll;
static int32_t (*const p_wait)(struct rdm4_ep *, int) = rdm4_wait;
static int32_t (*const p_ep_fd)(struct rdm4_ep *) = rdm4_ep_fd;

static void check_symbols(void)
{
    const void *syms[] = {
        (const void *)(uintptr_t)p_version,        (const void *)(uintptr_t)p_version_string,
        (const void *)(uintptr_t)p_strerror,       (const void *)(uintptr_t)p_send,
        (const void *)(uintptr_t)p_tsend,          (const void *)(uintptr_t)p_senddata,
        (const void *)(uintptr_t)p_inject,         (const void *)(uintptr_t)p_sendmsg,
        (const void *)(uintptr_t)p_recv,           (const void *)(uintptr_t)p_trecv,
        (const void *)(uintptr_t)p_recvmsg,        (const void *)(uintptr_t)p_cancel,
        (const void *)(uintptr_t)p_probe,          (const void *)(uintptr_t)p_recv_claimed,
        (const void *)(uintptr_t)p_trywait,        (const void *)(uintptr_t)p_ep_query,
        (const void *)(uintptr_t)p_counters,
        (const void *)(uintptr_t)p_write,
        (const void *)(uintptr_t)p_writedata,      (const void *)(uintptr_t)p_read,
        (const void *)(uintptr_t)p_atomic,         (const void *)(uintptr_t)p_fetch_atomic,
        (const void *)(uintptr_t)p_compare_atomic, (const void *)(uintptr_t)p_ep_attr_init,
        (const void *)(uintptr_t)p_ep_open,        (const void *)(uintptr_t)p_ep_close,
        (const void *)(uintptr_t)p_ep_getname,     (const void *)(uintptr_t)p_av_insert,
        (const void *)(uintptr_t)p_av_remove,      (const void *)(uintptr_t)p_av_straddr,
        (const void *)(uintptr_t)p_mr_reg,         (const void *)(uintptr_t)p_mr_close,
        (const void *)(uintptr_t)p_poll,           (const void *)(uintptr_t)p_wait,
        (const void *)(uintptr_t)p_ep_fd,          (const void *)(uintptr_t)p_tinject,
        (const void *)(uintptr_t)p_mr_alloc,       (const void *)(uintptr_t)p_mr_free,
        (const void *)(uintptr_t)p_write_now,      (const void *)(uintptr_t)p_read_now,
        (const void *)(uintptr_t)p_atomic_now,     (const void *)(uintptr_t)p_mr_reg_fd,
        (const void *)(uintptr_t)p_resolve,        (const void *)(uintptr_t)p_av_lookup,
    };
    size_t n = sizeof syms / sizeof syms[0];
    int all = 1;
    for (size_t i = 0; i < n; i++) {
        if (syms[i] == NULL) {
            all = 0;
        }
    }
    CHECK(n == 44 && all, "the %zu exported functions link with the pinned prototypes", n);
}

/* ---------------------------------------------------------------------- */
/* Constants: literal expected values.                                     */
/* ---------------------------------------------------------------------- */

/* Status codes: never renumbered. */
_Static_assert(RDM4_SUCCESS == 0, "RDM4_SUCCESS");
_Static_assert(RDM4_EAGAIN == -1, "RDM4_EAGAIN");
_Static_assert(RDM4_EINVAL == -2, "RDM4_EINVAL");
_Static_assert(RDM4_ENOMEM == -3, "RDM4_ENOMEM");
_Static_assert(RDM4_EBADHANDLE == -4, "RDM4_EBADHANDLE");
_Static_assert(RDM4_ENOADDR == -5, "RDM4_ENOADDR");
_Static_assert(RDM4_ETRUNC == -6, "RDM4_ETRUNC");
_Static_assert(RDM4_EREMOTEACCESS == -7, "RDM4_EREMOTEACCESS");
_Static_assert(RDM4_ENOREG == -8, "RDM4_ENOREG");
_Static_assert(RDM4_EBUSY == -9, "RDM4_EBUSY");
_Static_assert(RDM4_ENOTSUP == -10, "RDM4_ENOTSUP");
_Static_assert(RDM4_EPEER == -11, "RDM4_EPEER");
_Static_assert(RDM4_ETIMEDOUT == -12, "RDM4_ETIMEDOUT");
_Static_assert(RDM4_ECANCELED == -13, "RDM4_ECANCELED");
_Static_assert(RDM4_EPROTO == -14, "RDM4_EPROTO");
_Static_assert(RDM4_EOVERFLOW == -15, "RDM4_EOVERFLOW");
_Static_assert(RDM4_EIO == -16, "RDM4_EIO");
_Static_assert(RDM4_EINTERNAL == -17, "RDM4_EINTERNAL");
_Static_assert(RDM4_EREMOTE == -18, "RDM4_EREMOTE");
_Static_assert(RDM4_ETOOSMALL == -19, "RDM4_ETOOSMALL");
_Static_assert(RDM4_ENOENT == -20, "RDM4_ENOENT");

/* Version macros: self-consistent (their values change with each release,
 * so they are not pinned to literals; version.c checks the library agrees). */
_Static_assert(RDM4_VERSION == ((RDM4_VERSION_MAJOR << 16) | (RDM4_VERSION_MINOR << 8) | RDM4_VERSION_PATCH),
               "RDM4_VERSION == (major << 16) | (minor << 8) | patch");

struct constant {
    const char *name;
    unsigned long long value;
    unsigned long long expected;
};
#define K(name, expected) { #name, (unsigned long long)(name), (unsigned long long)(expected) }

static const struct constant constants[] = {
    K(RDM4_ADDR_LEN, 32),
    K(RDM4_ADDR_UNSPEC, 0xffffffffffffffffULL),
    K(RDM4_MSG_MAX, 1ULL << 47),

    K(RDM4_DEVICE_DEFAULT, 0),
    K(RDM4_DEVICE_SHM, 1),
    K(RDM4_DEVICE_UDP, 2),
    K(RDM4_DEVICE_AUTO, 3),

    K(RDM4_PROGRESS_MANUAL, 0),
    K(RDM4_PROGRESS_AUTO, 1),

    K(RDM4_ACCESS_LOCAL, 0x1),
    K(RDM4_ACCESS_REMOTE_READ, 0x2),
    K(RDM4_ACCESS_REMOTE_WRITE, 0x4),

    K(RDM4_CQ_SEND, 0x1),
    K(RDM4_CQ_RECV, 0x2),
    K(RDM4_CQ_MSG, 0x4),
    K(RDM4_CQ_TAGGED, 0x8),
    K(RDM4_CQ_RMA, 0x10),
    K(RDM4_CQ_READ, 0x20),
    K(RDM4_CQ_WRITE, 0x40),
    K(RDM4_CQ_ATOMIC, 0x80),
    K(RDM4_CQ_REMOTE_CQ_DATA, 0x100),
    K(RDM4_CQ_REMOTE_WRITE, 0x200),

    K(RDM4_MSG_TAGGED, 0x1),
    K(RDM4_MSG_REMOTE_CQ_DATA, 0x2),
    K(RDM4_MSG_MORE, 0x4),
    K(RDM4_MSG_INJECT, 0x10),
    K(RDM4_PROBE_CLAIM, 0x100),
    K(RDM4_PROBE_DISCARD, 0x200),
    K(RDM4_EP_LEGACY, 0x1),
    K(RDM4_EP_DELIVERY_COMPLETE, 0x2),
    K(RDM4_TIMEOUT_NONE, 0xffffffffffffffffull),
    K(RDM4_MSG_DELIVERY_COMPLETE, 0x8),

    /* libfabric's enum fi_datatype */
    K(RDM4_INT8, 0),
    K(RDM4_UINT8, 1),
    K(RDM4_INT16, 2),
    K(RDM4_UINT16, 3),
    K(RDM4_INT32, 4),
    K(RDM4_UINT32, 5),
    K(RDM4_INT64, 6),
    K(RDM4_UINT64, 7),
    K(RDM4_FLOAT, 8),
    K(RDM4_DOUBLE, 9),
    K(RDM4_FLOAT_COMPLEX, 10),
    K(RDM4_DOUBLE_COMPLEX, 11),
    K(RDM4_LONG_DOUBLE, 12),
    K(RDM4_LONG_DOUBLE_COMPLEX, 13),
    K(RDM4_INT128, 14),
    K(RDM4_UINT128, 15),

    /* libfabric's enum fi_op */
    K(RDM4_MIN, 0),
    K(RDM4_MAX, 1),
    K(RDM4_SUM, 2),
    K(RDM4_PROD, 3),
    K(RDM4_LOR, 4),
    K(RDM4_LAND, 5),
    K(RDM4_BOR, 6),
    K(RDM4_BAND, 7),
    K(RDM4_LXOR, 8),
    K(RDM4_BXOR, 9),
    K(RDM4_ATOMIC_READ, 10),
    K(RDM4_ATOMIC_WRITE, 11),
    K(RDM4_CSWAP, 12),
    K(RDM4_CSWAP_NE, 13),
    K(RDM4_CSWAP_LE, 14),
    K(RDM4_CSWAP_LT, 15),
    K(RDM4_CSWAP_GE, 16),
    K(RDM4_CSWAP_GT, 17),
    K(RDM4_MSWAP, 18),

    /* status codes (also pinned at compile time above) */
    K(RDM4_SUCCESS, 0),
    K(RDM4_EAGAIN, -1),
    K(RDM4_EINVAL, -2),
    K(RDM4_ENOMEM, -3),
    K(RDM4_EBADHANDLE, -4),
    K(RDM4_ENOADDR, -5),
    K(RDM4_ETRUNC, -6),
    K(RDM4_EREMOTEACCESS, -7),
    K(RDM4_ENOREG, -8),
    K(RDM4_EBUSY, -9),
    K(RDM4_ENOTSUP, -10),
    K(RDM4_EPEER, -11),
    K(RDM4_ETIMEDOUT, -12),
    K(RDM4_ECANCELED, -13),
    K(RDM4_EPROTO, -14),
    K(RDM4_EOVERFLOW, -15),
    K(RDM4_EIO, -16),
    K(RDM4_EINTERNAL, -17),
    K(RDM4_EREMOTE, -18),
    K(RDM4_ETOOSMALL, -19),
    K(RDM4_ENOENT, -20),
};

/* The same values at compile time (a renumbering fails the build). */
_Static_assert(RDM4_ADDR_LEN == 32, "RDM4_ADDR_LEN");
_Static_assert(RDM4_ADDR_UNSPEC == 0xffffffffffffffffULL, "RDM4_ADDR_UNSPEC");
_Static_assert(RDM4_MSG_MAX == 1ULL << 47, "RDM4_MSG_MAX");
_Static_assert(RDM4_DEVICE_DEFAULT == 0 && RDM4_DEVICE_SHM == 1 && RDM4_DEVICE_UDP == 2 && RDM4_DEVICE_AUTO == 3,
               "RDM4_DEVICE_*");
_Static_assert(RDM4_PROGRESS_MANUAL == 0 && RDM4_PROGRESS_AUTO == 1, "RDM4_PROGRESS_*");
_Static_assert(RDM4_ACCESS_LOCAL == 1 && RDM4_ACCESS_REMOTE_READ == 2 && RDM4_ACCESS_REMOTE_WRITE == 4,
               "RDM4_ACCESS_*");
_Static_assert(RDM4_CQ_SEND == 0x1 && RDM4_CQ_RECV == 0x2 && RDM4_CQ_MSG == 0x4 && RDM4_CQ_TAGGED == 0x8 &&
                   RDM4_CQ_RMA == 0x10 && RDM4_CQ_READ == 0x20 && RDM4_CQ_WRITE == 0x40 &&
                   RDM4_CQ_ATOMIC == 0x80 && RDM4_CQ_REMOTE_CQ_DATA == 0x100 && RDM4_CQ_REMOTE_WRITE == 0x200,
               "RDM4_CQ_*");
_Static_assert(RDM4_MSG_TAGGED == 1 && RDM4_MSG_REMOTE_CQ_DATA == 2, "RDM4_MSG_*");
_Static_assert(RDM4_INT8 == 0 && RDM4_UINT8 == 1 && RDM4_INT16 == 2 && RDM4_UINT16 == 3 && RDM4_INT32 == 4 &&
                   RDM4_UINT32 == 5 && RDM4_INT64 == 6 && RDM4_UINT64 == 7 && RDM4_FLOAT == 8 &&
                   RDM4_DOUBLE == 9 && RDM4_FLOAT_COMPLEX == 10 && RDM4_DOUBLE_COMPLEX == 11 &&
                   RDM4_LONG_DOUBLE == 12 && RDM4_LONG_DOUBLE_COMPLEX == 13 && RDM4_INT128 == 14 &&
                   RDM4_UINT128 == 15,
               "atomic datatypes");
_Static_assert(RDM4_MIN == 0 && RDM4_MAX == 1 && RDM4_SUM == 2 && RDM4_PROD == 3 && RDM4_LOR == 4 &&
                   RDM4_LAND == 5 && RDM4_BOR == 6 && RDM4_BAND == 7 && RDM4_LXOR == 8 && RDM4_BXOR == 9 &&
                   RDM4_ATOMIC_READ == 10 && RDM4_ATOMIC_WRITE == 11 && RDM4_CSWAP == 12 &&
                   RDM4_CSWAP_NE == 13 && RDM4_CSWAP_LE == 14 && RDM4_CSWAP_LT == 15 && RDM4_CSWAP_GE == 16 &&
                   RDM4_CSWAP_GT == 17 && RDM4_MSWAP == 18,
               "atomic operations");

static void check_constants(void)
{
    size_t n = sizeof constants / sizeof constants[0];
    for (size_t i = 0; i < n; i++) {
        CHECK(constants[i].value == constants[i].expected, "%s == %lld (header: %lld)", constants[i].name,
              (long long)constants[i].expected, (long long)constants[i].value);
    }
    /* The status codes are dense: every one of them has its own text. */
    for (int32_t code = RDM4_SUCCESS; code >= RDM4_ENOENT; code--) {
        const char *s = rdm4_strerror(code);
        CHECK(s != NULL && strcmp(s, "unknown status code") != 0, "rdm4_strerror(%d) = \"%s\"", (int)code,
              s ? s : "(null)");
    }
    const char *beyond = rdm4_strerror(RDM4_ENOENT - 1);
    CHECK(beyond != NULL && strcmp(beyond, "unknown status code") == 0,
          "RDM4_ENOENT (-20) is the last status code: rdm4_strerror(-21) = \"%s\"",
          beyond ? beyond : "(null)");
    CHECK(RDM4_VERSION == ((RDM4_VERSION_MAJOR << 16) | (RDM4_VERSION_MINOR << 8) | RDM4_VERSION_PATCH),
          "RDM4_VERSION 0x%06x == (%d << 16) | (%d << 8) | %d", (unsigned)RDM4_VERSION, RDM4_VERSION_MAJOR,
          RDM4_VERSION_MINOR, RDM4_VERSION_PATCH);
    char vs[32];
    snprintf(vs, sizeof vs, "%d.%d.%d", RDM4_VERSION_MAJOR, RDM4_VERSION_MINOR, RDM4_VERSION_PATCH);
    CHECK(strcmp(vs, RDM4_VERSION_STRING) == 0, "RDM4_VERSION_STRING \"%s\" == \"%s\"", RDM4_VERSION_STRING, vs);
}

static void check_layout(void)
{
    CHECK(LAYOUT_PINNED, "struct layouts pinned at compile time (x86_64 LP64)");
    /* Repeat the sizes at run time so the output shows them. */
    CHECK(sizeof(rdm4_ep_attr) == 104, "sizeof(rdm4_ep_attr) == 104 (%zu)", sizeof(rdm4_ep_attr));
    CHECK(sizeof(rdm4_cqe) == 88, "sizeof(rdm4_cqe) == 88 (%zu)", sizeof(rdm4_cqe));
    CHECK(sizeof(rdm4_msg) == 56, "sizeof(rdm4_msg) == 56 (%zu)", sizeof(rdm4_msg));
}

/* ---------------------------------------------------------------------- */
/* rdm4_ep_attr_init.                                                      */
/* ---------------------------------------------------------------------- */

static void check_attr_init(void)
{
    rdm4_ep_attr a;
    memset(&a, 0xa5, sizeof a);
    int32_t rc = rdm4_ep_attr_init(&a);
    CHECK(rc == RDM4_SUCCESS, "rdm4_ep_attr_init(&attr) == RDM4_SUCCESS (%d)", (int)rc);
    CHECK(a.size == sizeof(rdm4_ep_attr), "attr.size == sizeof(rdm4_ep_attr) == 104 (%zu)", a.size);
    CHECK(a.device == RDM4_DEVICE_DEFAULT, "attr.device == RDM4_DEVICE_DEFAULT (%u)", (unsigned)a.device);
    CHECK(a.progress == RDM4_PROGRESS_MANUAL, "attr.progress == RDM4_PROGRESS_MANUAL (%u)",
          (unsigned)a.progress);
    CHECK(a.medium_max == 0, "attr.medium_max == 0 (the default) (%zu)", a.medium_max);
    CHECK(a.unexpected_limit == 0, "attr.unexpected_limit == 0 (the default) (%zu)", a.unexpected_limit);
    CHECK(a.max_credits == 0, "attr.max_credits == 0 (the default) (%u)", (unsigned)a.max_credits);
    CHECK(a.threading == RDM4_THREAD_SAFE, "attr.threading == RDM4_THREAD_SAFE (%u)", (unsigned)a.threading);
    CHECK(a.flags == 0, "attr.flags == 0 (%llu)", (unsigned long long)a.flags);
    CHECK(a.timeout_ms == 0, "attr.timeout_ms == 0 (the default) (%llu)", (unsigned long long)a.timeout_ms);
    CHECK(a.max_ops == 0 && a.max_peers == 0 && a.max_mrs == 0, "attr.max_ops, max_peers, max_mrs == 0 (the defaults)");
    int zero = a.reserved32 == 0;
    for (size_t i = 0; i < 4; i++) {
        if (a.reserved[i] != 0) {
            zero = 0;
        }
    }
    CHECK(zero, "attr.reserved32 and reserved[0..4] are all zero");

    /* Every byte is written (no padding left with the 0xa5 fill). */
    rdm4_ep_attr expect;
    memset(&expect, 0, sizeof expect);
    expect.size = sizeof expect;
    CHECK(memcmp(&a, &expect, sizeof a) == 0, "attr_init writes all %zu bytes: size, then zeros", sizeof a);

    /* Idempotent: a second init gives the same bytes. */
    rdm4_ep_attr b;
    memset(&b, 0x5a, sizeof b);
    rc = rdm4_ep_attr_init(&b);
    CHECK(rc == RDM4_SUCCESS && memcmp(&a, &b, sizeof a) == 0, "a second rdm4_ep_attr_init gives the same bytes");

    CHECK(rdm4_ep_attr_init(NULL) == RDM4_EINVAL, "rdm4_ep_attr_init(NULL) == RDM4_EINVAL");
}

int main(void)
{
    alarm(60);
    check_layout();
    check_symbols();
    check_constants();
    check_attr_init();
    if (failures) {
        fprintf(stderr, "abi: %d check(s) failed\n", failures);
        return EXIT_FAILURE;
    }
    printf("abi: all checks passed\n");
    return EXIT_SUCCESS;
}
