/*
 * args.c: argument validation of every exported function.
 *
 * Every function that takes an endpoint is called with a NULL endpoint, a
 * pointer to a stack variable cast to rdm4_ep*, and a closed endpoint
 * (RDM4_EBADHANDLE, also beside bad arguments: the handle is checked first);
 * every pointer argument is passed NULL where the header
 * says it is required (RDM4_EINVAL); unknown address handles give
 * RDM4_ENOADDR; short buffers RDM4_ETOOSMALL; unsupported atomics
 * RDM4_ENOTSUP / RDM4_EOVERFLOW; bad iovec arrays RDM4_EINVAL / RDM4_EOVERFLOW.
 * Any context value, including ones with the top bits set, comes back in
 * its completion. A failing call must change nothing: out
 * parameters keep their sentinel values, no message is sent, no completion
 * appears, a failed av_insert leaves the address vector as it was, a failed
 * av_remove removes nothing, a failed ep_open leaves no segment behind.
 *
 * Two endpoints (A, B) in this process talk over the device of the
 * environment (the harness runs it over each), with a private segment
 * prefix. The checks of rdm4_ep_open choose their devices by attribute, with
 * RDM4_DEVICE unset while they run (it overrides the attribute). Prints
 * "ok - ..." per check, failures to stderr, exits 1 when any check failed.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

/* Either of two codes (where the header leaves the choice open). */
#define EXPECT2(call, want1, want2)                                                                     \
    do {                                                                                                \
        int32_t rc_ = (call);                                                                           \
        CHECK(rc_ == (want1) || rc_ == (want2), "%s is %s or %s (got %s %d)", #call, #want1, #want2,    \
              tu_status(rc_), (int)rc_);                                                                \
    } while (0)

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

static rdm4_ep *open_ep(void)
{
    rdm4_ep *ep = NULL;
    int32_t rc = rdm4_ep_open(NULL, &ep);
    if (rc != RDM4_SUCCESS || ep == NULL) {
        FATAL("rdm4_ep_open: %s (%d)", tu_status(rc), (int)rc);
    }
    return ep;
}

static void getname(rdm4_ep *ep, uint8_t addr[RDM4_ADDR_LEN])
{
    size_t len = RDM4_ADDR_LEN;
    int32_t rc = rdm4_ep_getname(ep, addr, &len);
    if (rc != RDM4_SUCCESS || len != RDM4_ADDR_LEN) {
        FATAL("rdm4_ep_getname: %s (%d), len %zu", tu_status(rc), (int)rc, len);
    }
}

/* Polls A and B for `ms` milliseconds; returns how many completions came. */
static int quiet_for(struct tu_cq *qa, struct tu_cq *qb, double ms)
{
    size_t na = qa->n, nb = qb->n;
    double start = tu_now_ms();
    while (tu_now_ms() - start < ms) {
        tu_cq_poll(qa);
        tu_cq_poll(qb);
        tu_sleep_us(1000);
    }
    int got = (int)(qa->n - na + qb->n - nb);
    for (size_t i = na; i < qa->n; i++) {
        fprintf(stderr, "  unexpected completion on A: context %p flags %#llx status %s\n", qa->e[i].context,
                (unsigned long long)qa->e[i].flags, tu_status(qa->e[i].status));
    }
    for (size_t i = nb; i < qb->n; i++) {
        fprintf(stderr, "  unexpected completion on B: context %p flags %#llx status %s\n", qb->e[i].context,
                (unsigned long long)qb->e[i].flags, tu_status(qb->e[i].status));
    }
    return got;
}

/* ---------------------------------------------------------------------- */

static void check_strerror(void)
{
    for (int32_t code = 1; code >= -25; code--) {
        const char *s = rdm4_strerror(code);
        CHECK(s != NULL && s[0] != '\0', "rdm4_strerror(%d) is a non-empty string", (int)code);
    }
    static const int32_t odd[] = { INT32_MIN, INT32_MAX, -1000, 1000 };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        const char *s = rdm4_strerror(odd[i]);
        CHECK(s != NULL && strcmp(s, "unknown status code") == 0, "rdm4_strerror(%d) = \"unknown status code\"",
              (int)odd[i]);
    }
    CHECK(rdm4_version_string() != NULL, "rdm4_version_string() is not NULL");
    CHECK(rdm4_version() == RDM4_VERSION, "rdm4_version() == RDM4_VERSION");
}

/* ---------------------------------------------------------------------- */

/* Restores an environment variable saved with getenv (NULL: unset). */
static void restore_env(const char *name, const char *saved)
{
    if (saved) {
        setenv(name, saved, 1);
    } else {
        unsetenv(name);
    }
}

static void check_open(void)
{
    rdm4_ep_attr attr;
    rdm4_ep *const sentinel = (rdm4_ep *)(uintptr_t)0x5a5a5a5a;
    rdm4_ep *ep;
    /* The harness's device choice overrides attr.device: these checks run
     * without it, and the rest of the program with it again. */
    char *saved_device = getenv("RDM4_DEVICE") ? strdup(getenv("RDM4_DEVICE")) : NULL;
    char *saved_udp_addr = getenv("RDM4_UDP_ADDR") ? strdup(getenv("RDM4_UDP_ADDR")) : NULL;
    unsetenv("RDM4_DEVICE");

    EXPECT(rdm4_ep_attr_init(NULL), RDM4_EINVAL);
    EXPECT(rdm4_ep_open(NULL, NULL), RDM4_EINVAL);
    rdm4_ep_attr_init(&attr);
    EXPECT(rdm4_ep_open(&attr, NULL), RDM4_EINVAL);

#define OPEN_FAILS(mutate, want)                                                                        \
    do {                                                                                                \
        rdm4_ep_attr_init(&attr);                                                                       \
        mutate;                                                                                         \
        ep = sentinel;                                                                                  \
        int32_t rc_ = rdm4_ep_open(&attr, &ep);                                                         \
        CHECK(rc_ == (want), "rdm4_ep_open with `%s` == %s (got %s)", #mutate, #want, tu_status(rc_)); \
        CHECK(ep == sentinel, "  ... and *ep is left unchanged");                                       \
        if (rc_ == RDM4_SUCCESS && ep != sentinel) {                                                    \
            rdm4_ep_close(ep);                                                                          \
        }                                                                                               \
    } while (0)

    OPEN_FAILS(attr.progress = 2, RDM4_EINVAL);
    OPEN_FAILS(attr.progress = 0xffffffffu, RDM4_EINVAL);
    OPEN_FAILS(attr.threading = 2, RDM4_EINVAL);
    OPEN_FAILS((attr.threading = RDM4_THREAD_SINGLE, attr.progress = RDM4_PROGRESS_AUTO), RDM4_EINVAL);
    OPEN_FAILS(attr.reserved[0] = 1, RDM4_EINVAL);
    OPEN_FAILS(attr.reserved[3] = 0x8000000000000000ULL, RDM4_EINVAL);
    OPEN_FAILS(attr.reserved32 = 1, RDM4_EINVAL);
    OPEN_FAILS(attr.flags = 1u << 2, RDM4_EINVAL);
    OPEN_FAILS(attr.size = 0, RDM4_EINVAL);
    OPEN_FAILS(attr.device = 77, RDM4_EINVAL);
    /* The udp device with a bad setting of its own (loopback only here). */
    setenv("RDM4_UDP_ADDR", "not-an-address", 1);
    OPEN_FAILS(attr.device = RDM4_DEVICE_UDP, RDM4_EINVAL);
    setenv("RDM4_UDP_ADDR", "127.0.0.1", 1);
    setenv("RDM4_UDP_MTU", "100", 1);
    OPEN_FAILS(attr.device = RDM4_DEVICE_UDP, RDM4_EINVAL);
    unsetenv("RDM4_UDP_MTU");

    setenv("RDM4_DEVICE", "bogus", 1);
    OPEN_FAILS((void)0, RDM4_EINVAL);
    /* The variable overrides a valid attribute, never an invalid one. */
    for (int d = 0; d < 2; d++) {
        setenv("RDM4_DEVICE", d ? "udp" : "shm", 1);
        OPEN_FAILS(attr.device = 77, RDM4_EINVAL);
        OPEN_FAILS(attr.device = 0xffffffffu, RDM4_EINVAL);
    }
    /* Both ways of asking for udp open one. */
    setenv("RDM4_DEVICE", "udp", 1);
    rdm4_ep *u = NULL;
    EXPECT(rdm4_ep_open(NULL, &u), RDM4_SUCCESS);
    if (u) {
        uint8_t name[RDM4_ADDR_LEN];
        size_t nl = sizeof name;
        EXPECT(rdm4_ep_getname(u, name, &nl), RDM4_SUCCESS);
        CHECK(name[10] == 0xff && name[11] == 0xff && name[12] == 127, "a udp name holds its IPv4 address mapped into IPv6");
        EXPECT(rdm4_ep_close(u), RDM4_SUCCESS);
    }
    unsetenv("RDM4_DEVICE");
    u = NULL;
    rdm4_ep_attr_init(&attr);
    attr.device = RDM4_DEVICE_UDP;
    EXPECT(rdm4_ep_open(&attr, &u), RDM4_SUCCESS);
    if (u) {
        EXPECT(rdm4_ep_close(u), RDM4_SUCCESS);
    }
    unsetenv("RDM4_UDP_ADDR");
#undef OPEN_FAILS

    int left = tu_shm_files(prefix, 0, 1);
    CHECK(left == 0, "failed rdm4_ep_open calls left no segment in /dev/shm (%d)", left);

    /* An older caller's shorter struct: only its first `size` bytes are read. */
    union {
        rdm4_ep_attr attr;
        unsigned char bytes[sizeof(rdm4_ep_attr)];
    } old;
    memset(old.bytes, 0xff, sizeof old.bytes);
    old.attr.size = offsetof(rdm4_ep_attr, medium_max);
    old.attr.device = RDM4_DEVICE_SHM;
    old.attr.progress = RDM4_PROGRESS_MANUAL;
    ep = NULL;
    int32_t rc = rdm4_ep_open(&old.attr, &ep);
    CHECK(rc == RDM4_SUCCESS && ep != NULL,
          "rdm4_ep_open with attr.size = 16 and 0xff after it succeeds (only `size` bytes read) (%s)",
          tu_status(rc));
    if (rc == RDM4_SUCCESS) {
        EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    }
    /* Explicit settings and automatic progress open and close. */
    rdm4_ep_attr_init(&attr);
    attr.device = RDM4_DEVICE_SHM;
    attr.progress = RDM4_PROGRESS_AUTO;
    attr.medium_max = 32768;
    attr.unexpected_limit = 1 << 20;
    attr.max_credits = 8;
    ep = NULL;
    rc = rdm4_ep_open(&attr, &ep);
    CHECK(rc == RDM4_SUCCESS && ep != NULL, "rdm4_ep_open with explicit settings and RDM4_PROGRESS_AUTO (%s)",
          tu_status(rc));
    if (rc == RDM4_SUCCESS) {
        EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    }
    left = tu_shm_files(prefix, 0, 1);
    CHECK(left == 0, "closed endpoints left no segment in /dev/shm (%d)", left);
    restore_env("RDM4_DEVICE", saved_device);
    restore_env("RDM4_UDP_ADDR", saved_udp_addr);
    free(saved_device);
    free(saved_udp_addr);
}

/* ---------------------------------------------------------------------- */

/* Every function that takes an endpoint, called with `bad` and otherwise
 * valid arguments: RDM4_EBADHANDLE, out parameters untouched. */
static void check_bad_handle(rdm4_ep *bad, const char *what, rdm4_addr dest, const uint8_t peer[RDM4_ADDR_LEN])
{
    uint64_t buf[16] = { 1, 2, 3 };
    uint64_t cmp[16] = { 0 };
    uint64_t res[16];
    struct iovec iov = { buf, sizeof buf };
    rdm4_msg msg = { &iov, 1, dest, 7, 0, 9, NULL };
    int failed_before = tu_failures;

#define BAD(call)                                                                                       \
    do {                                                                                                \
        int32_t rc_ = (call);                                                                           \
        CHECK(rc_ == RDM4_EBADHANDLE, "%s: %s == RDM4_EBADHANDLE (got %s)", what, #call, tu_status(rc_)); \
    } while (0)

    BAD(rdm4_send(bad, buf, 8, dest, NULL));
    BAD(rdm4_tsend(bad, buf, 8, dest, 5, NULL));
    BAD(rdm4_senddata(bad, buf, 8, 42, dest, NULL));
    BAD(rdm4_inject(bad, buf, 8, dest));
    BAD(rdm4_tinject(bad, buf, 8, dest, 5));
    BAD(rdm4_sendmsg(bad, &msg, 0));
    BAD(rdm4_recv(bad, buf, 8, RDM4_ADDR_UNSPEC, NULL));
    BAD(rdm4_trecv(bad, buf, 8, RDM4_ADDR_UNSPEC, 5, 0, NULL));
    BAD(rdm4_recvmsg(bad, &msg, 0));
    BAD(rdm4_cancel(bad, NULL));
    BAD(rdm4_trywait(bad));
    BAD(rdm4_counters(bad, 0, NULL, NULL, 0));
    BAD(rdm4_ep_query(bad, &(rdm4_ep_info){ .size = sizeof(rdm4_ep_info) }));
    BAD(rdm4_probe(bad, RDM4_ADDR_UNSPEC, 0, 0, 0, NULL, &(rdm4_cqe){ 0 }));
    BAD(rdm4_recv_claimed(bad, NULL, buf, 8));
    BAD(rdm4_write(bad, buf, 8, dest, 0x1000, 1, NULL));
    BAD(rdm4_writedata(bad, buf, 8, 42, dest, 0x1000, 1, NULL));
    BAD(rdm4_read(bad, buf, 8, dest, 0x1000, 1, NULL));
    BAD(rdm4_mr_reg_fd(bad, buf, 8, 0, 0, RDM4_ACCESS_REMOTE_READ, &res[0]));
    BAD(rdm4_write_now(bad, buf, 8, dest, 0x1000, 1));
    BAD(rdm4_read_now(bad, buf, 8, dest, 0x1000, 1));
    BAD(rdm4_atomic_now(bad, buf, NULL, res, 1, RDM4_INT64, RDM4_SUM, dest, 0x1000, 1));
    BAD(rdm4_atomic(bad, buf, 1, RDM4_INT64, RDM4_SUM, dest, 0x1000, 1, NULL));
    BAD(rdm4_fetch_atomic(bad, buf, 1, res, RDM4_INT64, RDM4_SUM, dest, 0x1000, 1, NULL));
    BAD(rdm4_compare_atomic(bad, buf, 1, cmp, res, RDM4_INT64, RDM4_CSWAP, dest, 0x1000, 1, NULL));

    /* The handle is checked first: bad arguments beside it do not change the answer. */
    BAD(rdm4_send(bad, NULL, 8, ~0ull, NULL));
    BAD(rdm4_sendmsg(bad, NULL, ~0ull));
    BAD(rdm4_recvmsg(bad, NULL, ~0ull));
    BAD(rdm4_probe(bad, ~0ull - 1, 0, 0, RDM4_PROBE_CLAIM | RDM4_PROBE_DISCARD, NULL, NULL));
    BAD(rdm4_ep_query(bad, NULL));
    BAD(rdm4_ep_query(bad, &(rdm4_ep_info){ .size = 1 }));
    BAD(rdm4_ep_getname(bad, NULL, NULL));
    BAD(rdm4_av_insert(bad, NULL, 1, NULL));
    BAD(rdm4_av_remove(bad, NULL, 1));
    BAD(rdm4_mr_reg(bad, NULL, 8, ~0ull, NULL));
    BAD(rdm4_mr_alloc(bad, 64, ~0ull, NULL, NULL));
    BAD(rdm4_poll(bad, NULL, 1));
    BAD(rdm4_write(bad, NULL, 8, ~0ull, 0, 1, NULL));
    BAD(rdm4_atomic(bad, NULL, 0, RDM4_LONG_DOUBLE, RDM4_SUM, ~0ull, 0, 1, NULL));

    uint8_t name[RDM4_ADDR_LEN + 8];
    memset(name, 0xee, sizeof name);
    size_t len = sizeof name;
    BAD(rdm4_ep_getname(bad, name, &len));
    CHECK(len == sizeof name && tu_all(name, sizeof name, 0xee), "%s: getname left addr and *len unchanged", what);

    rdm4_addr out[2] = { 0x1111, 0x2222 };
    BAD(rdm4_av_insert(bad, peer, 1, out));
    CHECK(out[0] == 0x1111 && out[1] == 0x2222, "%s: av_insert left out[] unchanged", what);
    BAD(rdm4_av_remove(bad, &dest, 1));

    uint64_t key = 0x7777;
    BAD(rdm4_mr_reg(bad, buf, sizeof buf, RDM4_ACCESS_REMOTE_READ, &key));
    CHECK(key == 0x7777, "%s: mr_reg left *key unchanged", what);
    BAD(rdm4_mr_close(bad, 0));
    {
        void *mem = (void *)&key;
        BAD(rdm4_mr_alloc(bad, 64, RDM4_ACCESS_REMOTE_READ, &mem, &key));
        BAD(rdm4_mr_free(bad, 1));
    }
    BAD(rdm4_mr_close(bad, 1));

    rdm4_cqe cqe[2];
    memset(cqe, 0xcd, sizeof cqe);
    BAD(rdm4_poll(bad, cqe, 2));
    CHECK(tu_all(cqe, sizeof cqe, 0xcd), "%s: poll left entries unchanged", what);
    BAD(rdm4_poll(bad, NULL, 0));

    double t0 = tu_now_ms();
    BAD(rdm4_wait(bad, 2000));
    double dt = tu_now_ms() - t0;
    CHECK(dt < 1000, "%s: rdm4_wait(bad, 2000) returns at once (%.1f ms)", what, dt);
    BAD(rdm4_wait(bad, -1));

    BAD(rdm4_ep_fd(bad));
    BAD(rdm4_ep_close(bad));
#undef BAD
    CHECK(tu_failures == failed_before, "%s: every endpoint function refused it", what);
}

/* ---------------------------------------------------------------------- */

/* NULL pointers and bad values with a valid endpoint; nothing may be posted. */
static void check_null_args(rdm4_ep *a, rdm4_addr dest)
{
    uint64_t buf[16] = { 0 };
    uint64_t cmp[16] = { 0 };
    uint64_t res[16];
    struct iovec iov = { buf, sizeof buf };
    struct iovec iov_null = { NULL, 8 };
    struct iovec iov2[2] = { { buf, 8 }, { buf + 1, 8 } };
    rdm4_msg msg = { &iov, 1, dest, 7, 0, 9, NULL };
    const uint64_t raddr = (uint64_t)(uintptr_t)buf;
    const uint64_t rkey = 12345;

    /* Two-sided. */
    EXPECT(rdm4_send(a, NULL, 8, dest, NULL), RDM4_EINVAL);
    EXPECT(rdm4_tsend(a, NULL, 8, dest, 5, NULL), RDM4_EINVAL);
    EXPECT(rdm4_senddata(a, NULL, 8, 42, dest, NULL), RDM4_EINVAL);
    EXPECT(rdm4_inject(a, NULL, 8, dest), RDM4_EINVAL);
    EXPECT(rdm4_inject(a, buf, 64 * 1024 + 1, dest), RDM4_EINVAL);
    EXPECT(rdm4_inject(a, buf, SIZE_MAX, dest), RDM4_EINVAL);
    EXPECT(rdm4_tinject(a, NULL, 8, dest, 5), RDM4_EINVAL);
    EXPECT(rdm4_tinject(a, buf, 64 * 1024 + 1, dest, 5), RDM4_EINVAL);
    EXPECT(rdm4_recv(a, NULL, 8, RDM4_ADDR_UNSPEC, NULL), RDM4_EINVAL);
    EXPECT(rdm4_trecv(a, NULL, 8, RDM4_ADDR_UNSPEC, 5, 0, NULL), RDM4_EINVAL);
    /* One limit for every length: RDM4_MSG_MAX. */
    static const uint64_t huge_lens[] = { RDM4_MSG_MAX + 1, (uint64_t)1 << 62, SIZE_MAX };
    for (size_t i = 0; i < sizeof huge_lens / sizeof huge_lens[0]; i++) {
        size_t n = (size_t)huge_lens[i];
        EXPECT(rdm4_send(a, buf, n, dest, NULL), RDM4_EOVERFLOW);
        EXPECT(rdm4_tsend(a, buf, n, dest, 5, NULL), RDM4_EOVERFLOW);
        EXPECT(rdm4_recv(a, buf, n, RDM4_ADDR_UNSPEC, NULL), RDM4_EOVERFLOW);
        EXPECT(rdm4_write(a, buf, n, dest, 0x1000, 1, NULL), RDM4_EOVERFLOW);
        EXPECT(rdm4_read(a, buf, n, dest, 0x1000, 1, NULL), RDM4_EOVERFLOW);
        uint64_t k;
        EXPECT(rdm4_mr_reg(a, buf, n, RDM4_ACCESS_REMOTE_READ, &k), RDM4_EOVERFLOW);
    }

    EXPECT(rdm4_sendmsg(a, NULL, 0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, NULL, 0), RDM4_EINVAL);
    EXPECT(rdm4_sendmsg(a, &msg, 1u << 7), RDM4_EINVAL);
    EXPECT(rdm4_sendmsg(a, &msg, ~(uint64_t)0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, 1u << 7), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, RDM4_MSG_MORE), RDM4_EINVAL); /* sends only */
    msg.iov = NULL;
    EXPECT(rdm4_sendmsg(a, &msg, 0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, 0), RDM4_EINVAL);
    msg.iov = &iov_null;
    EXPECT(rdm4_sendmsg(a, &msg, 0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, 0), RDM4_EINVAL);
    /* Several buffers: NULL array, NULL buffer, more than 1024, total too large. */
    msg.iov = NULL;
    msg.iov_count = 2;
    EXPECT(rdm4_sendmsg(a, &msg, 0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, RDM4_MSG_TAGGED), RDM4_EINVAL);
    iov2[1].iov_base = NULL;
    msg.iov = iov2;
    EXPECT(rdm4_sendmsg(a, &msg, RDM4_MSG_TAGGED), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, 0), RDM4_EINVAL);
    iov2[1].iov_base = buf + 1;
    static struct iovec many[1025];
    for (size_t i = 0; i < 1025; i++) {
        many[i].iov_base = buf;
        many[i].iov_len = 0;
    }
    msg.iov = many;
    msg.iov_count = 1025;
    EXPECT(rdm4_sendmsg(a, &msg, 0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, 0), RDM4_EINVAL);
    msg.iov_count = SIZE_MAX;
    EXPECT(rdm4_sendmsg(a, &msg, 0), RDM4_EINVAL);
    EXPECT(rdm4_recvmsg(a, &msg, 0), RDM4_EINVAL);
    struct iovec huge[2] = { { buf, SIZE_MAX / 2 }, { buf, SIZE_MAX / 2 } };
    msg.iov = huge;
    msg.iov_count = 2;
    EXPECT(rdm4_sendmsg(a, &msg, 0), RDM4_EOVERFLOW);
    EXPECT(rdm4_recvmsg(a, &msg, 0), RDM4_EOVERFLOW);
    msg.iov = iov2;

    /* RMA. */
    EXPECT(rdm4_write(a, NULL, 8, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_writedata(a, NULL, 8, 42, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_read(a, NULL, 8, dest, raddr, rkey, NULL), RDM4_EINVAL);

    /* Atomics: NULL buffers, count 0. */
    EXPECT(rdm4_atomic(a, NULL, 1, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_atomic(a, buf, 0, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_fetch_atomic(a, buf, 1, NULL, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_fetch_atomic(a, NULL, 1, res, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_fetch_atomic(a, buf, 0, res, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EINVAL);
    EXPECT(rdm4_fetch_atomic(a, NULL, 1, NULL, RDM4_INT64, RDM4_ATOMIC_READ, dest, raddr, rkey, NULL),
           RDM4_EINVAL);
    EXPECT(rdm4_compare_atomic(a, buf, 1, NULL, res, RDM4_INT64, RDM4_CSWAP, dest, raddr, rkey, NULL),
           RDM4_EINVAL);
    EXPECT(rdm4_compare_atomic(a, buf, 1, cmp, NULL, RDM4_INT64, RDM4_CSWAP, dest, raddr, rkey, NULL),
           RDM4_EINVAL);
    EXPECT(rdm4_compare_atomic(a, NULL, 1, cmp, res, RDM4_INT64, RDM4_CSWAP, dest, raddr, rkey, NULL),
           RDM4_EINVAL);
    EXPECT(rdm4_compare_atomic(a, buf, 0, cmp, res, RDM4_INT64, RDM4_CSWAP, dest, raddr, rkey, NULL),
           RDM4_EINVAL);

    /* Atomics: operations that do not apply to the datatype, long double. */
    EXPECT(rdm4_atomic(a, buf, 1, RDM4_LONG_DOUBLE, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_ENOTSUP);
    EXPECT(rdm4_atomic(a, buf, 1, RDM4_LONG_DOUBLE_COMPLEX, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_ENOTSUP);
    EXPECT(rdm4_fetch_atomic(a, buf, 1, res, RDM4_LONG_DOUBLE, RDM4_ATOMIC_READ, dest, raddr, rkey, NULL),
           RDM4_ENOTSUP);
    EXPECT(rdm4_atomic(a, buf, 1, RDM4_DOUBLE, RDM4_BOR, dest, raddr, rkey, NULL), RDM4_ENOTSUP);
    EXPECT(rdm4_atomic(a, buf, 1, RDM4_FLOAT, RDM4_BXOR, dest, raddr, rkey, NULL), RDM4_ENOTSUP);
    EXPECT(rdm4_fetch_atomic(a, buf, 1, res, RDM4_DOUBLE, RDM4_BAND, dest, raddr, rkey, NULL), RDM4_ENOTSUP);
    EXPECT(rdm4_compare_atomic(a, buf, 1, cmp, res, RDM4_DOUBLE, RDM4_MSWAP, dest, raddr, rkey, NULL),
           RDM4_ENOTSUP);
    EXPECT(rdm4_atomic(a, buf, 1, RDM4_DOUBLE_COMPLEX, RDM4_MIN, dest, raddr, rkey, NULL), RDM4_ENOTSUP);
    EXPECT(rdm4_compare_atomic(a, buf, 1, cmp, res, RDM4_FLOAT_COMPLEX, RDM4_CSWAP_LT, dest, raddr, rkey, NULL),
           RDM4_ENOTSUP);
    /* Unknown datatype / operation values: refused (the header does not say which code). */
    EXPECT2(rdm4_atomic(a, buf, 1, 99, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_ENOTSUP, RDM4_EINVAL);
    EXPECT2(rdm4_atomic(a, buf, 1, RDM4_INT64, 99, dest, raddr, rkey, NULL), RDM4_ENOTSUP, RDM4_EINVAL);
    EXPECT2(rdm4_compare_atomic(a, buf, 1, cmp, res, RDM4_INT64, 99, dest, raddr, rkey, NULL), RDM4_ENOTSUP,
            RDM4_EINVAL);
    /* An operation used with the wrong function. */
    EXPECT2(rdm4_atomic(a, buf, 1, RDM4_INT64, RDM4_CSWAP, dest, raddr, rkey, NULL), RDM4_EINVAL, RDM4_ENOTSUP);
    EXPECT2(rdm4_atomic(a, buf, 1, RDM4_INT64, RDM4_ATOMIC_READ, dest, raddr, rkey, NULL), RDM4_EINVAL,
            RDM4_ENOTSUP);
    EXPECT2(rdm4_fetch_atomic(a, buf, 1, res, RDM4_INT64, RDM4_CSWAP, dest, raddr, rkey, NULL), RDM4_EINVAL,
            RDM4_ENOTSUP);
    EXPECT2(rdm4_compare_atomic(a, buf, 1, cmp, res, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL),
            RDM4_EINVAL, RDM4_ENOTSUP);
    /* Payload larger than a packet (the shm MTU is 64 KiB); element count overflowing size_t. */
    static uint64_t big[16384];
    static uint64_t bigres[16384];
    EXPECT(rdm4_atomic(a, big, 16384, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EOVERFLOW);
    EXPECT(rdm4_fetch_atomic(a, big, 16384, bigres, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL),
           RDM4_EOVERFLOW);
    EXPECT(rdm4_compare_atomic(a, big, 16384, big, bigres, RDM4_UINT64, RDM4_CSWAP, dest, raddr, rkey, NULL),
           RDM4_EOVERFLOW);
    EXPECT(rdm4_atomic(a, buf, SIZE_MAX / 4, RDM4_INT64, RDM4_SUM, dest, raddr, rkey, NULL), RDM4_EOVERFLOW);
}

/* Unknown address handles: RDM4_ENOADDR from every operation. */
static void check_unknown_addr(rdm4_ep *a, rdm4_addr good)
{
    uint64_t buf[4] = { 0 };
    uint64_t cmp[4] = { 0 };
    uint64_t res[4];
    struct iovec iov = { buf, 8 };
    const uint64_t raddr = (uint64_t)(uintptr_t)buf;
    const rdm4_addr unknown[] = { good + 1, good + 1000, 12345, (rdm4_addr)1 << 32, RDM4_ADDR_UNSPEC,
                                  RDM4_ADDR_UNSPEC - 1 };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        rdm4_addr u = unknown[i];
        rdm4_msg msg = { &iov, 1, u, 7, 0, 9, NULL };
        int before = tu_failures;
#define NOADDR(call)                                                                                     \
    do {                                                                                                 \
        int32_t rc_ = (call);                                                                            \
        CHECK(rc_ == RDM4_ENOADDR, "addr %#llx: %s == RDM4_ENOADDR (got %s)", (unsigned long long)u, #call, \
              tu_status(rc_));                                                                           \
    } while (0)
        NOADDR(rdm4_send(a, buf, 8, u, NULL));
        NOADDR(rdm4_send(a, NULL, 0, u, NULL));
        NOADDR(rdm4_tsend(a, buf, 8, u, 5, NULL));
        NOADDR(rdm4_senddata(a, buf, 8, 42, u, NULL));
        NOADDR(rdm4_inject(a, buf, 8, u));
        NOADDR(rdm4_tinject(a, buf, 8, u, 5));
        NOADDR(rdm4_sendmsg(a, &msg, 0));
        NOADDR(rdm4_sendmsg(a, &msg, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA));
        NOADDR(rdm4_write(a, buf, 8, u, raddr, 1, NULL));
        NOADDR(rdm4_writedata(a, buf, 8, 42, u, raddr, 1, NULL));
        NOADDR(rdm4_read(a, buf, 8, u, raddr, 1, NULL));
        NOADDR(rdm4_atomic(a, buf, 1, RDM4_INT64, RDM4_SUM, u, raddr, 1, NULL));
        NOADDR(rdm4_fetch_atomic(a, buf, 1, res, RDM4_INT64, RDM4_SUM, u, raddr, 1, NULL));
        NOADDR(rdm4_compare_atomic(a, buf, 1, cmp, res, RDM4_INT64, RDM4_CSWAP, u, raddr, 1, NULL));
        NOADDR(rdm4_av_remove(a, &u, 1));
        if (u != RDM4_ADDR_UNSPEC) {
            /* As a source filter (RDM4_ADDR_UNSPEC means "any" there). */
            NOADDR(rdm4_recv(a, buf, 8, u, NULL));
            NOADDR(rdm4_trecv(a, buf, 8, u, 5, 0, NULL));
            NOADDR(rdm4_recvmsg(a, &msg, 0));
        }
#undef NOADDR
        if (tu_failures != before) {
            break; /* one address's worth of messages is enough */
        }
    }
}

/* ---------------------------------------------------------------------- */

static void check_getname(rdm4_ep *a)
{
    uint8_t name[64];
    size_t len;

    /* A NULL buffer asks for the size, as with rdm4_av_straddr. */
    len = sizeof name;
    EXPECT(rdm4_ep_getname(a, NULL, &len), RDM4_ETOOSMALL);
    CHECK(len == RDM4_ADDR_LEN, "getname(NULL addr) sets *len to the size needed (%zu)", len);
    len = 0;
    EXPECT(rdm4_ep_getname(a, NULL, &len), RDM4_ETOOSMALL);
    CHECK(len == RDM4_ADDR_LEN, "getname(NULL addr, *len = 0) sets *len (%zu)", len);
    EXPECT(rdm4_ep_getname(a, name, NULL), RDM4_EINVAL);
    EXPECT(rdm4_ep_getname(a, NULL, NULL), RDM4_EINVAL);

    static const size_t small[] = { 0, 1, 16, RDM4_ADDR_LEN - 1 };
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        memset(name, 0xee, sizeof name);
        len = small[i];
        int32_t rc = rdm4_ep_getname(a, name, &len);
        CHECK(rc == RDM4_ETOOSMALL && len == RDM4_ADDR_LEN,
              "getname with *len = %zu: RDM4_ETOOSMALL and *len = 32 (got %s, *len = %zu)", small[i],
              tu_status(rc), len);
        CHECK(tu_all(name, sizeof name, 0xee), "  ... and nothing copied");
    }

    memset(name, 0xee, sizeof name);
    len = sizeof name;
    int32_t rc = rdm4_ep_getname(a, name, &len);
    CHECK(rc == RDM4_SUCCESS && len == RDM4_ADDR_LEN, "getname with *len = 64: success, *len = 32 (%s, %zu)",
          tu_status(rc), len);
    CHECK(tu_all(name + RDM4_ADDR_LEN, sizeof name - RDM4_ADDR_LEN, 0xee), "  ... nothing written past 32 bytes");
    CHECK(!tu_all(name, RDM4_ADDR_LEN, 0xee), "  ... and the address was copied");
    uint8_t again[RDM4_ADDR_LEN];
    len = RDM4_ADDR_LEN;
    rc = rdm4_ep_getname(a, again, &len);
    CHECK(rc == RDM4_SUCCESS && memcmp(again, name, RDM4_ADDR_LEN) == 0, "getname is stable");
}

static void check_straddr(const uint8_t addr_a[RDM4_ADDR_LEN], const uint8_t addr_b[RDM4_ADDR_LEN])
{
    char buf[256];
    size_t len;

    len = sizeof buf;
    EXPECT(rdm4_av_straddr(NULL, buf, &len), RDM4_EINVAL);
    CHECK(len == sizeof buf, "straddr(NULL addr) left *len unchanged (%zu)", len);
    EXPECT(rdm4_av_straddr(addr_a, buf, NULL), RDM4_EINVAL);

    /* Size query: NULL buffer with *len == 0. */
    len = 0;
    int32_t rc = rdm4_av_straddr(addr_a, NULL, &len);
    CHECK(rc == RDM4_ETOOSMALL && len > 1 && len < sizeof buf,
          "straddr(addr, NULL, *len = 0) == RDM4_ETOOSMALL with the needed size (%s, %zu)", tu_status(rc), len);
    size_t need = len;
    /* The same with room to spare: a NULL buffer is always a size query. */
    len = sizeof buf;
    rc = rdm4_av_straddr(addr_a, NULL, &len);
    CHECK(rc == RDM4_ETOOSMALL && len == need, "straddr(addr, NULL, *len = 256) == RDM4_ETOOSMALL, *len = %zu (%s, %zu)",
          need, tu_status(rc), len);

    memset(buf, 'x', sizeof buf);
    len = need - 1;
    rc = rdm4_av_straddr(addr_a, buf, &len);
    CHECK(rc == RDM4_ETOOSMALL && len == need, "straddr with *len = need - 1: RDM4_ETOOSMALL, *len = %zu (%s, %zu)",
          need, tu_status(rc), len);
    CHECK(tu_all(buf, sizeof buf, 'x'), "  ... and nothing written");

    memset(buf, 'x', sizeof buf);
    len = need;
    rc = rdm4_av_straddr(addr_a, buf, &len);
    CHECK(rc == RDM4_SUCCESS && len == need && strlen(buf) == need - 1,
          "straddr with *len = need: success, \"%s\" (%s, len %zu)", rc == RDM4_SUCCESS ? buf : "", tu_status(rc),
          len);
    CHECK(tu_all(buf + need, sizeof buf - need, 'x'), "  ... nothing written past the NUL");
    char first[256];
    memcpy(first, buf, need);

    len = sizeof buf;
    rc = rdm4_av_straddr(addr_a, buf, &len);
    CHECK(rc == RDM4_SUCCESS && len == need && strcmp(buf, first) == 0, "straddr is deterministic");

    len = sizeof buf;
    rc = rdm4_av_straddr(addr_b, buf, &len);
    CHECK(rc == RDM4_SUCCESS && strcmp(buf, first) != 0, "two endpoints have different strings (\"%s\")",
          rc == RDM4_SUCCESS ? buf : "");
}

static void check_mr(rdm4_ep *a)
{
    static uint8_t region[4096];
    uint64_t key = 0x7777;
    EXPECT(rdm4_mr_reg(a, region, sizeof region, RDM4_ACCESS_REMOTE_READ, NULL), RDM4_EINVAL);
    EXPECT(rdm4_mr_reg(a, NULL, sizeof region, RDM4_ACCESS_REMOTE_READ, &key), RDM4_EINVAL);
    CHECK(key == 0x7777, "mr_reg(NULL buf) left *key unchanged");
    EXPECT(rdm4_mr_reg(a, region, sizeof region, 1u << 3, &key), RDM4_EINVAL);
    EXPECT(rdm4_mr_reg(a, region, sizeof region, ~(uint64_t)0, &key), RDM4_EINVAL);
    CHECK(key == 0x7777, "mr_reg(unknown access bits) left *key unchanged");

    uint64_t k1 = 0, k2 = 0;
    EXPECT(rdm4_mr_reg(a, region, sizeof region, RDM4_ACCESS_LOCAL | RDM4_ACCESS_REMOTE_READ |
                                                     RDM4_ACCESS_REMOTE_WRITE, &k1),
           RDM4_SUCCESS);
    EXPECT(rdm4_mr_reg(a, region, 64, RDM4_ACCESS_REMOTE_READ, &k2), RDM4_SUCCESS);
    CHECK(k1 != k2, "two registrations have different keys (%#llx, %#llx)", (unsigned long long)k1,
          (unsigned long long)k2);
    uint64_t unknown = (k1 ^ k2) | 0x4000000000000000ULL;
    if (unknown == k1 || unknown == k2) {
        unknown = ~k1 & ~k2;
    }
    EXPECT(rdm4_mr_close(a, unknown), RDM4_EINVAL);
    EXPECT(rdm4_mr_close(a, k1), RDM4_SUCCESS);
    EXPECT(rdm4_mr_close(a, k1), RDM4_EINVAL);
    EXPECT(rdm4_mr_close(a, k2), RDM4_SUCCESS);
    EXPECT(rdm4_mr_close(a, k2), RDM4_EINVAL);

    /* rdm4_mr_alloc / rdm4_mr_free: bad arguments change nothing. */
    void *mem = (void *)region;
    key = 0x7777;
    EXPECT(rdm4_mr_alloc(a, 64, RDM4_ACCESS_REMOTE_READ, NULL, &key), RDM4_EINVAL);
    EXPECT(rdm4_mr_alloc(a, 64, RDM4_ACCESS_REMOTE_READ, &mem, NULL), RDM4_EINVAL);
    EXPECT(rdm4_mr_alloc(a, 64, 1u << 3, &mem, &key), RDM4_EINVAL);
    EXPECT(rdm4_mr_alloc(a, (size_t)RDM4_MSG_MAX + 1, RDM4_ACCESS_REMOTE_READ, &mem, &key), RDM4_EINVAL);
    CHECK(mem == (void *)region && key == 0x7777, "failed rdm4_mr_alloc calls wrote nothing");
    EXPECT(rdm4_mr_alloc(a, 4096, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &mem, &key), RDM4_SUCCESS);
    CHECK(mem != NULL && mem != (void *)region && tu_all(mem, 4096, 0), "rdm4_mr_alloc gives zeroed memory");
    memset(mem, 0x5a, 4096); /* the caller's to use */
    EXPECT(rdm4_mr_close(a, key), RDM4_EINVAL);
    EXPECT(rdm4_mr_free(a, key), RDM4_SUCCESS);
    EXPECT(rdm4_mr_free(a, key), RDM4_EINVAL);
    EXPECT(rdm4_mr_reg(a, region, 64, RDM4_ACCESS_REMOTE_READ, &k1), RDM4_SUCCESS);
    EXPECT(rdm4_mr_free(a, k1), RDM4_EINVAL);
    EXPECT(rdm4_mr_close(a, k1), RDM4_SUCCESS);

    uint64_t k0 = 0x7777;
    int32_t rc = rdm4_mr_reg(a, NULL, 0, RDM4_ACCESS_REMOTE_READ, &k0);
    CHECK(rc == RDM4_SUCCESS, "mr_reg(NULL, 0 bytes) is allowed (%s)", tu_status(rc));
    if (rc == RDM4_SUCCESS) {
        EXPECT(rdm4_mr_close(a, k0), RDM4_SUCCESS);
    }
}

static void check_poll_wait(rdm4_ep *a)
{
    EXPECT(rdm4_poll(a, NULL, 1), RDM4_EINVAL);
    EXPECT(rdm4_poll(a, NULL, 0), 0);
    rdm4_cqe c[1];
    EXPECT(rdm4_poll(a, c, 0), 0);
    EXPECT(rdm4_wait(a, 0), RDM4_ETIMEDOUT);
    double t0 = tu_now_ms();
    int32_t rc = rdm4_wait(a, 50);
    double dt = tu_now_ms() - t0;
    CHECK(rc == RDM4_ETIMEDOUT && dt >= 45 && dt < 5000,
          "rdm4_wait(ep, 50) with nothing pending: RDM4_ETIMEDOUT after ~50 ms (%s, %.1f ms)", tu_status(rc), dt);
    int fd = rdm4_ep_fd(a);
    CHECK(fd >= 0, "rdm4_ep_fd >= 0 (%d)", fd);
    CHECK(rdm4_ep_fd(a) == fd, "rdm4_ep_fd is stable");
}

/* ---------------------------------------------------------------------- */

/* av_insert / av_remove are all or nothing. */
static void check_av(rdm4_ep *a, rdm4_ep *b, rdm4_addr a_to_b, const uint8_t addr_b[RDM4_ADDR_LEN],
                     const uint8_t addr_closed[RDM4_ADDR_LEN], struct tu_cq *qa, struct tu_cq *qb)
{
    uint8_t two[2 * RDM4_ADDR_LEN];
    rdm4_addr out[3] = { 0x1111, 0x2222, 0x3333 };
    uint8_t other_host[RDM4_ADDR_LEN];
    memcpy(other_host, addr_b, RDM4_ADDR_LEN);
    other_host[0] ^= 0xff;              /* another boot ID: another host */
    memset(other_host + 24, 0, 8);      /* and no shm locator (an auto name's) */
    uint8_t zeros[RDM4_ADDR_LEN] = { 0 };

    EXPECT(rdm4_av_insert(a, NULL, 1, out), RDM4_EINVAL);
    EXPECT(rdm4_av_insert(a, addr_b, 1, NULL), RDM4_EINVAL);
    EXPECT(rdm4_av_insert(a, NULL, 0, NULL), 0);
    EXPECT(rdm4_av_remove(a, NULL, 1), RDM4_EINVAL);
    EXPECT(rdm4_av_remove(a, NULL, 0), RDM4_SUCCESS);
    CHECK(out[0] == 0x1111, "failed av_insert left out[] unchanged");

    EXPECT(rdm4_av_insert(a, other_host, 1, out), RDM4_ENOADDR);
    EXPECT(rdm4_av_insert(a, zeros, 1, out), RDM4_ENOADDR);
    if (tu_device(a) == RDM4_DEVICE_SHM) {
        /* A closed shm endpoint's segment is gone: the insert can tell. */
        EXPECT(rdm4_av_insert(a, addr_closed, 1, out), RDM4_ENOADDR);
    }
    CHECK(out[0] == 0x1111 && out[1] == 0x2222, "failed av_insert left out[] unchanged");
    if (tu_device(a) == RDM4_DEVICE_UDP) {
        /* A closed udp endpoint's address is a port like any other, which
         * only the network can tell closed: the insert succeeds, and a
         * send to it fails with RDM4_EPEER as soon as its host reports the
         * port closed (rdm4(7): given up at once). */
        rdm4_addr closed = 0;
        EXPECT(rdm4_av_insert(a, addr_closed, 1, &closed), 1);
        static uint8_t lost[8] = "lost";
        EXPECT(rdm4_send(a, lost, sizeof lost, closed, lost), RDM4_SUCCESS);
        struct tu_cq *qs[2] = { qa, qb };
        double t0 = tu_now_ms();
        rdm4_cqe c = tu_cq_expect(qa, lost, qs, 2, 10000, "a send to a closed udp endpoint");
        double ms = tu_now_ms() - t0;
        CHECK(c.status == RDM4_EPEER && ms < 1000,
              "udp: a send to a closed endpoint's address fails with RDM4_EPEER within 1 s (%s after %.0f ms)",
              tu_status(c.status), ms);
        EXPECT(rdm4_av_remove(a, &closed, 1), RDM4_SUCCESS);
    }

    /* The same address twice in one call: the same handle, count returned. */
    memcpy(two, addr_b, RDM4_ADDR_LEN);
    memcpy(two + RDM4_ADDR_LEN, addr_b, RDM4_ADDR_LEN);
    int32_t rc = rdm4_av_insert(a, two, 2, out);
    CHECK(rc == 2 && out[0] == a_to_b && out[1] == a_to_b,
          "av_insert([B, B]) == 2 with B's existing handle twice (rc %d, %llu %llu, want %llu)", (int)rc,
          (unsigned long long)out[0], (unsigned long long)out[1], (unsigned long long)a_to_b);

    /* [B (already inserted), garbage]: fails, and B must still be there.
     * On an endpoint of its own, so that a bug here does not spoil A. */
    {
        rdm4_ep *e0 = open_ep();
        struct tu_cq q0 = { .ep = e0 };
        struct tu_cq *qs[3] = { &q0, qb, qa };
        rdm4_addr e0_to_b = tu_insert(e0, addr_b);
        memcpy(two + RDM4_ADDR_LEN, other_host, RDM4_ADDR_LEN);
        out[0] = out[1] = 0x1111;
        EXPECT(rdm4_av_insert(e0, two, 2, out), RDM4_ENOADDR);
        CHECK(out[0] == 0x1111 && out[1] == 0x1111, "failed av_insert([B, other host]) left out[] unchanged");
        static uint8_t probe[8] = "probe1";
        static uint8_t into[8];
        int32_t s = rdm4_send(e0, probe, sizeof probe, e0_to_b, probe);
        CHECK(s == RDM4_SUCCESS,
              "a failed av_insert([B, garbage]) did not remove B, inserted before it (send to B: %s)",
              tu_status(s));
        if (s == RDM4_SUCCESS) {
            EXPECT(rdm4_recv(b, into, sizeof into, RDM4_ADDR_UNSPEC, into), RDM4_SUCCESS);
            rdm4_cqe c = tu_cq_expect(&q0, probe, qs, 3, 5000, "send after failed av_insert");
            CHECK(c.status == RDM4_SUCCESS, "  ... and the send completes (%s)", tu_status(c.status));
            rdm4_cqe r = tu_cq_expect(qb, into, qs, 3, 5000, "receive of the probe");
            CHECK(r.status == RDM4_SUCCESS && memcmp(into, probe, sizeof probe) == 0, "  ... and B receives it");
        }
        EXPECT(rdm4_ep_close(e0), RDM4_SUCCESS);
    }

    /* av_remove([B, unknown]) removes nothing. */
    rdm4_addr pair[2] = { a_to_b, a_to_b + 77 };
    EXPECT(rdm4_av_remove(a, pair, 2), RDM4_ENOADDR);
    {
        uint64_t key = 0;
        static uint8_t mem[64];
        EXPECT(rdm4_mr_reg(b, mem, sizeof mem, RDM4_ACCESS_REMOTE_READ, &key), RDM4_SUCCESS);
        static uint8_t got[8];
        int32_t s = rdm4_read(a, got, sizeof got, a_to_b, (uint64_t)(uintptr_t)mem, key, got);
        CHECK(s == RDM4_SUCCESS, "a failed av_remove([B, unknown]) did not remove B (read from B: %s)",
              tu_status(s));
        if (s == RDM4_SUCCESS) {
            struct tu_cq *qs[2] = { qa, qb };
            rdm4_cqe c = tu_cq_expect(qa, got, qs, 2, 5000, "read after failed av_remove");
            CHECK(c.status == RDM4_SUCCESS, "  ... and the read completes (%s)", tu_status(c.status));
        }
        EXPECT(rdm4_mr_close(b, key), RDM4_SUCCESS);
    }
}

/* A failed insert of [new, garbage] leaves nothing behind: the handle a
 * fresh insert of `new` gets (on an endpoint with the same history) is not
 * usable, and `new` can be inserted and used afterwards. Then: a removed
 * handle is dead, and an address removed and inserted again is usable. */
static void check_av_rollback(rdm4_ep *b, struct tu_cq *qb, const uint8_t addr_b[RDM4_ADDR_LEN],
                              const uint8_t addr_d[RDM4_ADDR_LEN])
{
    rdm4_ep *e1 = open_ep();
    rdm4_ep *e2 = open_ep();
    uint8_t pair[2 * RDM4_ADDR_LEN];
    memcpy(pair, addr_d, RDM4_ADDR_LEN);
    memset(pair + RDM4_ADDR_LEN, 0x42, RDM4_ADDR_LEN);
    rdm4_addr out[2] = { 0x1111, 0x2222 };

    /* e2: the fresh history (insert B, insert D). */
    rdm4_addr b2 = tu_insert(e2, addr_b);
    rdm4_addr d2 = tu_insert(e2, addr_d);

    /* e1: insert B, fail to insert [D, garbage]. */
    rdm4_addr b1 = tu_insert(e1, addr_b);
    CHECK(b1 == b2, "the same history gives the same handle (%llu, %llu)", (unsigned long long)b1,
          (unsigned long long)b2);
    EXPECT(rdm4_av_insert(e1, pair, 2, out), RDM4_ENOADDR);
    CHECK(out[0] == 0x1111 && out[1] == 0x2222, "failed av_insert([D, garbage]) left out[] unchanged");
    int32_t rc = rdm4_inject(e1, "x", 1, d2);
    CHECK(rc == RDM4_ENOADDR, "after the failed av_insert([D, garbage]) D is not reachable (inject: %s)",
          tu_status(rc));
    rc = rdm4_av_remove(e1, &d2, 1);
    CHECK(rc == RDM4_ENOADDR, "... and has no handle to remove (av_remove: %s)", tu_status(rc));
    rdm4_addr d1 = tu_insert(e1, addr_d);
    rc = rdm4_inject(e1, "x", 1, d1);
    CHECK(rc == RDM4_SUCCESS, "inserting D afterwards works (handle %llu; a fresh insert gave %llu) (inject: %s)",
          (unsigned long long)d1, (unsigned long long)d2, tu_status(rc));

    /* Remove: the handle is dead; removing again is ENOADDR. */
    EXPECT(rdm4_av_remove(e1, &d1, 1), RDM4_SUCCESS);
    EXPECT(rdm4_av_remove(e1, &d1, 1), RDM4_ENOADDR);
    EXPECT(rdm4_inject(e1, "x", 1, d1), RDM4_ENOADDR);

    /* A peer removed and inserted again can be talked to again. */
    {
        struct tu_cq q1 = { .ep = e1 };
        struct tu_cq *qs[2] = { &q1, qb };
        static char r1[16], r2[16];
        rdm4_cqe c;
        EXPECT(rdm4_trecv(b, r1, sizeof r1, RDM4_ADDR_UNSPEC, 0xe1, 0, r1), RDM4_SUCCESS);
        EXPECT(rdm4_tsend(e1, "before", 7, b1, 0xe1, &q1), RDM4_SUCCESS);
        CHECK(tu_cq_wait(qb, r1, qs, 2, 5000, &c) && strcmp(r1, "before") == 0, "e1 -> B before av_remove");
        (void)tu_cq_wait(&q1, &q1, qs, 2, 5000, &c);
        EXPECT(rdm4_av_remove(e1, &b1, 1), RDM4_SUCCESS);
        rdm4_addr b1again = tu_insert(e1, addr_b);
        EXPECT(rdm4_trecv(b, r2, sizeof r2, RDM4_ADDR_UNSPEC, 0xe2, 0, r2), RDM4_SUCCESS);
        EXPECT(rdm4_tsend(e1, "after", 6, b1again, 0xe2, &q1), RDM4_SUCCESS);
        int sent = tu_cq_wait(&q1, &q1, qs, 2, 5000, &c);
        CHECK(sent, "e1's send after av_remove + av_insert of B completes (%s)",
              sent ? tu_status(c.status) : "no completion");
        int got = tu_cq_wait(qb, r2, qs, 2, 1000, &c);
        CHECK(got && strcmp(r2, "after") == 0,
              "B receives e1's message sent after e1 removed and re-inserted B (%s)",
              got ? tu_status(c.status) : "nothing arrived in 1 s");
        /* If it never arrived, B's tagged receive (tag 0xe2, which nothing
         * else uses) stays posted until B is closed. */
    }
    EXPECT(rdm4_ep_close(e1), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(e2), RDM4_SUCCESS);
}

/* ---------------------------------------------------------------------- */

/* After all the refused calls above: nothing reached B. B's two probe
 * receives stay empty until A's "flush" messages arrive. */
static void check_nothing_posted(rdm4_ep *a, rdm4_ep *b, rdm4_addr a_to_b, struct tu_cq *qa, struct tu_cq *qb)
{
    static uint8_t probe_msg[64], probe_tag[64];
    memset(probe_msg, 0, sizeof probe_msg);
    memset(probe_tag, 0, sizeof probe_tag);
    EXPECT(rdm4_recv(b, probe_msg, sizeof probe_msg, RDM4_ADDR_UNSPEC, probe_msg), RDM4_SUCCESS);
    EXPECT(rdm4_trecv(b, probe_tag, sizeof probe_tag, RDM4_ADDR_UNSPEC, 0, ~(uint64_t)0, probe_tag), RDM4_SUCCESS);
    int got = quiet_for(qa, qb, 100);
    CHECK(got == 0, "no completion on A or B after the refused calls (%d)", got);

    static const char flush_msg[] = "flush untagged";
    static const char flush_tag[] = "flush tagged";
    EXPECT(rdm4_send(a, flush_msg, sizeof flush_msg, a_to_b, (void *)flush_msg), RDM4_SUCCESS);
    EXPECT(rdm4_tsend(a, flush_tag, sizeof flush_tag, a_to_b, 0xabc, (void *)flush_tag), RDM4_SUCCESS);
    struct tu_cq *qs[2] = { qa, qb };
    rdm4_cqe c = tu_cq_expect(qb, probe_msg, qs, 2, 5000, "untagged probe");
    CHECK(c.status == RDM4_SUCCESS && c.len == sizeof flush_msg && strcmp((char *)probe_msg, flush_msg) == 0,
          "B's untagged probe got the flush message first (len %llu, \"%.20s\")", (unsigned long long)c.len,
          (char *)probe_msg);
    c = tu_cq_expect(qb, probe_tag, qs, 2, 5000, "tagged probe");
    CHECK(c.status == RDM4_SUCCESS && c.tag == 0xabc && strcmp((char *)probe_tag, flush_tag) == 0,
          "B's tagged probe got the flush message first (tag %#llx, \"%.20s\")", (unsigned long long)c.tag,
          (char *)probe_tag);
    (void)tu_cq_expect(qa, (void *)flush_msg, qs, 2, 5000, "flush send");
    (void)tu_cq_expect(qa, (void *)flush_tag, qs, 2, 5000, "flush tsend");
}

/* Valid edge cases: zero-length with NULL buffers, a 64 KiB inject. */
static void check_valid_edges(rdm4_ep *a, rdm4_ep *b, rdm4_addr a_to_b, struct tu_cq *qa, struct tu_cq *qb)
{
    struct tu_cq *qs[2] = { qa, qb };
    int ctx_r = 0, ctx_s = 0;
    EXPECT(rdm4_recv(b, NULL, 0, RDM4_ADDR_UNSPEC, &ctx_r), RDM4_SUCCESS);
    EXPECT(rdm4_send(a, NULL, 0, a_to_b, &ctx_s), RDM4_SUCCESS);
    rdm4_cqe c = tu_cq_expect(qb, &ctx_r, qs, 2, 5000, "zero-length receive");
    CHECK(c.status == RDM4_SUCCESS && c.len == 0 && (c.flags & RDM4_CQ_RECV),
          "zero-length message with NULL buffers received (%s, len %llu)", tu_status(c.status),
          (unsigned long long)c.len);
    c = tu_cq_expect(qa, &ctx_s, qs, 2, 5000, "zero-length send");
    CHECK(c.status == RDM4_SUCCESS && (c.flags & RDM4_CQ_SEND), "zero-length send completed");

    static uint8_t big[64 * 1024], into[64 * 1024];
    tu_fill(big, sizeof big, 99);
    EXPECT(rdm4_recv(b, into, sizeof into, RDM4_ADDR_UNSPEC, into), RDM4_SUCCESS);
    EXPECT(rdm4_inject(a, big, sizeof big, a_to_b), RDM4_SUCCESS);
    memset(big, 0, sizeof big); /* the caller's again at once */
    c = tu_cq_expect(qb, into, qs, 2, 10000, "64 KiB inject");
    CHECK(c.status == RDM4_SUCCESS && c.len == sizeof into && tu_verify(into, sizeof into, 99) < 0,
          "inject of 64 KiB (the maximum) arrives intact (%s, len %llu)", tu_status(c.status),
          (unsigned long long)c.len);
    int got = quiet_for(qa, qb, 20);
    CHECK(got == 0, "inject wrote no completion (%d)", got);

    /* A small tagged inject goes out during the call, straight from the buffer. */
    uint8_t small[24], small_in[24] = { 0 };
    tu_fill(small, sizeof small, 7);
    EXPECT(rdm4_trecv(b, small_in, sizeof small_in, RDM4_ADDR_UNSPEC, 0x77, 0, small_in), RDM4_SUCCESS);
    EXPECT(rdm4_tinject(a, small, sizeof small, a_to_b, 0x77), RDM4_SUCCESS);
    memset(small, 0, sizeof small);
    c = tu_cq_expect(qb, small_in, qs, 2, 5000, "tagged inject");
    CHECK(c.status == RDM4_SUCCESS && c.len == sizeof small && c.tag == 0x77 && (c.flags & RDM4_CQ_TAGGED) &&
              tu_verify(small_in, sizeof small_in, 7) < 0,
          "a tagged inject arrives intact with its tag (%s, len %llu)", tu_status(c.status), (unsigned long long)c.len);
    got = quiet_for(qa, qb, 20);
    CHECK(got == 0, "tinject wrote no completion (%d)", got);

    /* Contexts are the caller's: every value comes back, top bits included. */
    static const uintptr_t ctxs[] = { 1, 0x00007fffffffffffULL, 0x4000000000000000ULL, 0x8000000000000000ULL,
                                      0xc000000000000000ULL, UINTPTR_MAX };
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) {
        void *ctx = (void *)ctxs[i];
        static char in[16];
        char out[16];
        snprintf(out, sizeof out, "ctx %zu", i);
        EXPECT(rdm4_recv(b, in, sizeof in, RDM4_ADDR_UNSPEC, ctx), RDM4_SUCCESS);
        EXPECT(rdm4_send(a, out, sizeof out, a_to_b, ctx), RDM4_SUCCESS);
        int s = tu_cq_wait(qa, ctx, qs, 2, 500, &c);
        CHECK(s && c.status == RDM4_SUCCESS, "a send with context %p completes with that context", ctx);
        int r = tu_cq_wait(qb, ctx, qs, 2, 500, &c);
        CHECK(r && c.status == RDM4_SUCCESS && strcmp(in, out) == 0,
              "a receive with context %p completes with that context", ctx);
    }
}

/* ---------------------------------------------------------------------- */

int main(void)
{
    alarm(60);
    tu_set_prefix("args", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    check_strerror();
    check_open();

    rdm4_ep *a = open_ep();
    rdm4_ep *b = open_ep();
    uint8_t addr_a[RDM4_ADDR_LEN], addr_b[RDM4_ADDR_LEN], addr_c[RDM4_ADDR_LEN], addr_d[RDM4_ADDR_LEN];
    getname(a, addr_a);
    getname(b, addr_b);
    rdm4_addr a_to_b = tu_insert(a, addr_b);
    rdm4_addr b_to_a = tu_insert(b, addr_a);
    (void)b_to_a;
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };

    /* Bad handles: NULL, a stack variable, a closed endpoint. */
    check_bad_handle(NULL, "NULL ep", a_to_b, addr_b);
    {
        uint64_t fake[32];
        memset(fake, 0x5c, sizeof fake);
        check_bad_handle((rdm4_ep *)(void *)fake, "stack ep", a_to_b, addr_b);
    }
    rdm4_ep *c = open_ep();
    getname(c, addr_c);
    EXPECT(rdm4_ep_close(c), RDM4_SUCCESS);
    check_bad_handle(c, "closed ep", a_to_b, addr_b);

    check_null_args(a, a_to_b);
    check_unknown_addr(a, a_to_b);
    check_getname(a);
    check_straddr(addr_a, addr_b);
    check_mr(a);
    check_poll_wait(a);
    check_nothing_posted(a, b, a_to_b, &qa, &qb);
    check_av(a, b, a_to_b, addr_b, addr_c, &qa, &qb);

    rdm4_ep *d = open_ep();
    getname(d, addr_d);
    check_av_rollback(b, &qb, addr_b, addr_d);
    EXPECT(rdm4_ep_close(d), RDM4_SUCCESS);

    check_valid_edges(a, b, a_to_b, &qa, &qb);

    /* Close: once; a second close is EBADHANDLE; NULL is EBADHANDLE. */
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(a), RDM4_EBADHANDLE);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_EBADHANDLE);
    EXPECT(rdm4_ep_close(NULL), RDM4_EBADHANDLE);

    /* A closed handle stays closed when another endpoint is opened after it
     * (handles must not be recycled under the caller). */
    rdm4_ep *e = open_ep();
    rdm4_ep *f = open_ep();
    EXPECT(rdm4_ep_close(e), RDM4_SUCCESS);
    rdm4_ep *g = open_ep();
    int32_t rc = rdm4_ep_close(e);
    CHECK(rc == RDM4_EBADHANDLE, "closing a closed handle after another open is RDM4_EBADHANDLE (%s%s)",
          tu_status(rc), g == e ? "; the new endpoint got the same pointer" : "");
    int fd = rdm4_ep_fd(g);
    CHECK(fd >= 0, "... and the endpoint opened after it is still open (rdm4_ep_fd: %d)", fd);
    if (rc != RDM4_SUCCESS) {
        /* Otherwise the stale close above closed g already. */
        EXPECT(rdm4_ep_close(g), RDM4_SUCCESS);
    }
    EXPECT(rdm4_ep_close(f), RDM4_SUCCESS);

    int left = tu_shm_files(prefix, 1, 1);
    CHECK(left == 0, "no /dev/shm/%s-* file left after closing every endpoint (%d)", prefix, left);

    if (tu_failures) {
        fprintf(stderr, "args: %d check(s) failed\n", tu_failures);
        return EXIT_FAILURE;
    }
    printf("args: all checks passed\n");
    return EXIT_SUCCESS;
}
