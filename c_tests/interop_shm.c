/*
 * interop_shm.c: two processes talk through the C API over the shm device.
 *
 * The parent forks a child; each opens its own endpoint. They exchange their
 * 32-byte addresses and the address and key of two registered regions (one
 * read-write, one read-only) through pipes created before the fork, and then
 * synchronise every step through the same pipes. Checked, with data verified
 * byte for byte and every completion field that matters:
 *
 *  - tagged and untagged ping-pong of 0, 1, 64, 4096, 9000, 65536, 300000
 *    bytes and 4 MiB (untagged: the message arrives before the receive is
 *    posted; tagged: after), tag matching with an ignore mask;
 *  - senddata (RDM4_CQ_REMOTE_CQ_DATA and `data` at the receiver);
 *  - sendmsg / recvmsg with one iovec (and none), tagged and with CQ data;
 *    with several iovecs (gathered, scattered, truncated);
 *  - inject (the buffer is the caller's at once, no completion);
 *  - a burst of sendmsg with RDM4_MSG_MORE ended by a send without it;
 *  - truncation: RDM4_ETRUNC, `len` = buffer, `olen` = message, nothing
 *    written past the buffer (canary), both for expected and unexpected
 *    messages;
 *  - rdm4_wait: RDM4_ETIMEDOUT when nothing comes, 0 when a message does;
 *  - RMA write, writedata and read of registered memory in both directions,
 *    contents verified on both sides, the target's completion of writedata;
 *    RDM4_EREMOTEACCESS for a wrong key, out of bounds and a read-only region,
 *    with the target's memory unchanged;
 *  - every atomic operation valid for RDM4_INT64, RDM4_UINT64 and RDM4_DOUBLE
 *    in its write, fetch and compare forms, against expected values, in both
 *    directions; RDM4_EREMOTEACCESS with a wrong key.
 *
 * All of it runs in three passes: cross-memory attach on (direct RMA), off
 * (RDM4_SHM_CMA=0: emulated RMA, the target progresses by polling), and off
 * with the child's endpoint on RDM4_PROGRESS_AUTO (the child does not call
 * in while it is the target). At the end no /dev/shm/<prefix>-* file remains.
 *
 * Both processes print "ok - [parent|child] ..." lines; failures go to
 * stderr. The parent exits 1 when it or the child failed. Time limit: 60 s
 * per process (RDM4_TEST_TIMEOUT_S overrides, e.g. under valgrind).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define MiB (1024u * 1024u)
#define REG_LEN (2 * MiB)    /* read-write region */
#define RO_LEN (64u * 1024u) /* read-only region */
#define ATOM_OFF (REG_LEN - 4096)
#define ATOM_N 4          /* elements per atomic */
#define CANARY 64         /* bytes checked past every receive buffer */
#define OP_TIMEOUT_MS 30000.0

enum { PARENT = 0, CHILD = 1 };

/* What each process tells the other at the start of a pass. */
struct info {
    uint8_t addr[RDM4_ADDR_LEN];
    uint64_t reg_addr, reg_key;
    uint64_t ro_addr, ro_key;
};

/* One pipe message: a step token and a little data. */
struct token {
    uint32_t tok;
    uint32_t len;
    uint8_t data[120];
};

static struct {
    int role;
    const char *name;
    int pass;
    int rfd, wfd;
    int manual; /* this process's endpoint is on manual progress */
    rdm4_ep *ep;
    struct tu_cq q;
    rdm4_addr peer;
    struct info me, them;
    uint8_t *reg, *ro;
} g;

static char prefix[64];
static volatile pid_t child_pid;

/* ---------------------------------------------------------------------- */
/* Failure handling                                                        */
/* ---------------------------------------------------------------------- */

static void parent_cleanup(void)
{
    if (child_pid > 0) {
        kill(child_pid, SIGKILL);
        waitpid(child_pid, NULL, 0);
        child_pid = 0;
    }
    tu_shm_files(prefix, 1, 0);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FATAL: interop_shm: time limit reached\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
    if (child_pid > 0) {
        kill(child_pid, SIGKILL);
    }
    _exit(3);
}

static void set_alarm(void)
{
    unsigned secs = 60;
    const char *t = getenv("RDM4_TEST_TIMEOUT_S");
    if (t && atoi(t) > 0) {
        secs = (unsigned)atoi(t);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(secs);
}

/* ---------------------------------------------------------------------- */
/* Pipes: step tokens                                                      */
/* ---------------------------------------------------------------------- */

static void put(uint32_t tok, const void *data, size_t len)
{
    struct token t;
    memset(&t, 0, sizeof t);
    if (len > sizeof t.data) {
        FATAL("token data too long");
    }
    t.tok = tok;
    t.len = (uint32_t)len;
    if (len) {
        memcpy(t.data, data, len);
    }
    ssize_t w;
    do {
        w = write(g.wfd, &t, sizeof t);
    } while (w < 0 && errno == EINTR);
    if (w != (ssize_t)sizeof t) {
        FATAL("pipe write for step %#x: %s", tok, w < 0 ? strerror(errno) : "short write");
    }
}

/* Waits for step `tok` from the peer. With manual progress the endpoint is
 * polled meanwhile (this process may be the target of one-sided operations);
 * completions are kept in g.q. */
static void get(uint32_t tok, void *data, size_t len)
{
    struct token t;
    double start = tu_now_ms();
    for (;;) {
        struct pollfd p = { g.rfd, POLLIN, 0 };
        int r = poll(&p, 1, g.manual ? 0 : 1000);
        if (r > 0) {
            break;
        }
        if (r < 0 && errno != EINTR) {
            FATAL("poll on pipe: %s", strerror(errno));
        }
        if (g.manual) {
            tu_cq_poll(&g.q);
            (void)rdm4_wait(g.ep, 1);
        }
        if (tu_now_ms() - start > 3 * OP_TIMEOUT_MS) {
            FATAL("the peer did not reach step %#x", tok);
        }
    }
    ssize_t n;
    do {
        n = read(g.rfd, &t, sizeof t);
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
        FATAL("the peer exited before step %#x", tok);
    }
    if (n != (ssize_t)sizeof t) {
        FATAL("pipe read for step %#x: %s", tok, n < 0 ? strerror(errno) : "short read");
    }
    if (t.tok != tok) {
        FATAL("out of step: expected step %#x, the peer sent %#x", tok, t.tok);
    }
    if (data) {
        if (t.len != len) {
            FATAL("step %#x carries %u bytes, expected %zu", tok, t.len, len);
        }
        memcpy(data, t.data, len);
    }
}

/* Both processes reach the same point. */
static void barrier(uint32_t tok)
{
    put(tok, NULL, 0);
    get(tok, NULL, 0);
}

/* ---------------------------------------------------------------------- */
/* Posting and completions                                                 */
/* ---------------------------------------------------------------------- */

/* Runs a posting call, retrying on RDM4_EAGAIN (after progress); FATAL on
 * another failure. */
#define POST(call)                                                                       \
    do {                                                                                 \
        double t0_ = tu_now_ms();                                                        \
        int32_t rc_;                                                                     \
        while ((rc_ = (call)) == RDM4_EAGAIN) {                                          \
            tu_cq_poll(&g.q);                                                            \
            if (tu_now_ms() - t0_ > OP_TIMEOUT_MS) {                                     \
                FATAL("%s: RDM4_EAGAIN for %.0f ms", #call, OP_TIMEOUT_MS);              \
            }                                                                            \
        }                                                                                \
        if (rc_ != RDM4_SUCCESS) {                                                       \
            FATAL("%s: %s (%d)", #call, tu_status(rc_), (int)rc_);                       \
        }                                                                                \
    } while (0)

/* Context values: small distinct integers. */
#define CTX(n) ((void *)(uintptr_t)(0x1000 + (n)))

static rdm4_cqe wait_op(void *ctx, const char *what)
{
    struct tu_cq *qs[1] = { &g.q };
    return tu_cq_expect(&g.q, ctx, qs, 1, OP_TIMEOUT_MS, what);
}

/* Takes the oldest target-side entry (context NULL); FATAL after a while. */
static rdm4_cqe wait_target_entry(const char *what)
{
    return wait_op(NULL, what);
}

/* Entries nobody asked for are failures. */
static void check_no_stray(const char *when)
{
    tu_cq_poll(&g.q);
    for (size_t i = 0; i < g.q.n; i++) {
        fprintf(stderr, "  stray completion: context %p flags %#llx len %llu status %s\n", g.q.e[i].context,
                (unsigned long long)g.q.e[i].flags, (unsigned long long)g.q.e[i].len, tu_status(g.q.e[i].status));
    }
    CHECK(g.q.n == 0, "no unexpected completion %s (%zu)", when, g.q.n);
    g.q.n = 0;
}

static uint32_t seed_of(int test, int idx, int dir)
{
    return (uint32_t)(g.pass * 1000000 + test * 10000 + idx * 4 + dir);
}

static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        FATAL("out of memory (%zu bytes)", n);
    }
    return p;
}

/* A receive buffer of `len` bytes followed by a canary. */
static uint8_t *rbuf_new(size_t len)
{
    uint8_t *p = xmalloc(len + CANARY);
    memset(p, 0xee, len + CANARY);
    return p;
}

static int canary_ok(const uint8_t *p, size_t len)
{
    return tu_all(p + len, CANARY, 0xee);
}

/* Checks a receive completion. */
static void check_recv(const rdm4_cqe *c, const char *what, uint8_t *buf, size_t len, uint64_t flags,
                       uint32_t seed)
{
    long bad = tu_verify(buf, len, seed);
    CHECK(c->status == RDM4_SUCCESS && c->len == len && c->flags == flags && c->buf == (void *)buf &&
              c->src == g.peer && bad < 0 && canary_ok(buf, len),
          "%s: %zu bytes received (status %s, len %llu, flags %#llx/%#llx, src %llu/%llu, buf %s, first bad byte "
          "%ld, canary %s)",
          what, len, tu_status(c->status), (unsigned long long)c->len, (unsigned long long)c->flags,
          (unsigned long long)flags, (unsigned long long)c->src, (unsigned long long)g.peer,
          c->buf == (void *)buf ? "ok" : "WRONG", bad, canary_ok(buf, len) ? "intact" : "OVERWRITTEN");
}

static void check_send(const rdm4_cqe *c, const char *what, size_t len, uint64_t flags)
{
    CHECK(c->status == RDM4_SUCCESS && c->flags == flags && c->len == len && c->buf == NULL,
          "%s: send of %zu bytes completed (status %s, flags %#llx/%#llx, len %llu)", what, len,
          tu_status(c->status), (unsigned long long)c->flags, (unsigned long long)flags,
          (unsigned long long)c->len);
}

/* ---------------------------------------------------------------------- */
/* Two-sided                                                               */
/* ---------------------------------------------------------------------- */

static const size_t SIZES[] = { 0, 1, 64, 4096, 9000, 65536, 300000, 4 * MiB };
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
#define TAG_PING 0x1000000000000000ULL
#define TAG_PONG 0x2000000000000000ULL

enum {
    T_SENT = 0x100,
    T_POSTED = 0x200,
    T_DONE = 0x300,
    T_RMA = 0x400,
    T_ATOM = 0x500,
    T_BAR = 0x600,
};

/* Ping-pong: untagged (ping unexpected at the child: it posts after the
 * parent sent) and tagged (ping expected: posted before the send). */
static void test_pingpong(int tagged)
{
    const char *kind = tagged ? "tagged" : "untagged";
    const uint64_t fl_recv = RDM4_CQ_RECV | (tagged ? RDM4_CQ_TAGGED : RDM4_CQ_MSG);
    const uint64_t fl_send = RDM4_CQ_SEND | (tagged ? RDM4_CQ_TAGGED : RDM4_CQ_MSG);
    uint8_t *sbuf = xmalloc(4 * MiB);
    uint8_t *rbuf = rbuf_new(4 * MiB);
    char what[96];
    for (size_t i = 0; i < NSIZES; i++) {
        size_t len = SIZES[i];
        uint32_t s_ping = seed_of(1 + tagged, (int)i, 0), s_pong = seed_of(1 + tagged, (int)i, 1);
        snprintf(what, sizeof what, "%s ping %zu", kind, len);
        memset(rbuf, 0xee, len + CANARY);
        if (g.role == PARENT) {
            if (tagged) {
                POST(rdm4_trecv(g.ep, rbuf, len, RDM4_ADDR_UNSPEC, TAG_PONG | len, 0, CTX(2)));
                get(T_POSTED + (uint32_t)i, NULL, 0);
                tu_fill(sbuf, len, s_ping);
                POST(rdm4_tsend(g.ep, sbuf, len, g.peer, TAG_PING | len, CTX(1)));
            } else {
                POST(rdm4_recv(g.ep, rbuf, len, g.peer, CTX(2)));
                tu_fill(sbuf, len, s_ping);
                POST(rdm4_send(g.ep, sbuf, len, g.peer, CTX(1)));
                put(T_SENT + (uint32_t)i, NULL, 0);
            }
            rdm4_cqe c = wait_op(CTX(1), what);
            check_send(&c, what, len, fl_send);
            snprintf(what, sizeof what, "%s pong %zu", kind, len);
            c = wait_op(CTX(2), what);
            check_recv(&c, what, rbuf, len, fl_recv, s_pong);
            if (tagged) {
                CHECK(c.tag == (TAG_PONG | len), "%s: tag %#llx", what, (unsigned long long)c.tag);
            }
        } else {
            if (tagged) {
                POST(rdm4_trecv(g.ep, rbuf, len, g.peer, TAG_PING | len, 0, CTX(3)));
                put(T_POSTED + (uint32_t)i, NULL, 0);
            } else {
                get(T_SENT + (uint32_t)i, NULL, 0);
                POST(rdm4_recv(g.ep, rbuf, len, RDM4_ADDR_UNSPEC, CTX(3)));
            }
            rdm4_cqe c = wait_op(CTX(3), what);
            check_recv(&c, what, rbuf, len, fl_recv, s_ping);
            if (tagged) {
                CHECK(c.tag == (TAG_PING | len), "%s: tag %#llx", what, (unsigned long long)c.tag);
            }
            snprintf(what, sizeof what, "%s pong %zu", kind, len);
            tu_fill(sbuf, len, s_pong);
            if (tagged) {
                POST(rdm4_tsend(g.ep, sbuf, len, g.peer, TAG_PONG | len, CTX(4)));
            } else {
                POST(rdm4_send(g.ep, sbuf, len, g.peer, CTX(4)));
            }
            c = wait_op(CTX(4), what);
            check_send(&c, what, len, fl_send);
        }
    }
    free(sbuf);
    free(rbuf);
    barrier(T_BAR + 1 + (uint32_t)tagged);
    check_no_stray(tagged ? "after the tagged ping-pong" : "after the untagged ping-pong");
}

/* Tag matching: receives for tags 0xA, 0xB and 0xC0 with the low 4 bits
 * ignored; the parent sends 0xB, 0xC7, 0xA in that order. */
static void test_tag_matching(void)
{
    static const uint64_t sent_tags[3] = { 0xB, 0xC7, 0xA };
    if (g.role == CHILD) {
        uint8_t *b[3];
        static const uint64_t want[3] = { 0xA, 0xB, 0xC0 };
        static const uint64_t ign[3] = { 0, 0, 0xF };
        for (int i = 0; i < 3; i++) {
            b[i] = rbuf_new(1000);
            POST(rdm4_trecv(g.ep, b[i], 1000, RDM4_ADDR_UNSPEC, want[i], ign[i], CTX(10 + i)));
        }
        put(T_POSTED + 0x10, NULL, 0);
        /* receive i gets the message whose tag it matches */
        static const int which[3] = { 2, 0, 1 }; /* index into sent_tags */
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "trecv(tag %#llx, ignore %#llx)", (unsigned long long)want[i],
                     (unsigned long long)ign[i]);
            rdm4_cqe c = wait_op(CTX(10 + i), what);
            check_recv(&c, what, b[i], 1000, RDM4_CQ_RECV | RDM4_CQ_TAGGED, seed_of(3, which[i], 0));
            CHECK(c.tag == sent_tags[which[i]], "%s: got the message tagged %#llx (%#llx)", what,
                  (unsigned long long)sent_tags[which[i]], (unsigned long long)c.tag);
            free(b[i]);
        }
    } else {
        uint8_t *s[3];
        get(T_POSTED + 0x10, NULL, 0);
        for (int i = 0; i < 3; i++) {
            s[i] = xmalloc(1000);
            tu_fill(s[i], 1000, seed_of(3, i, 0));
            POST(rdm4_tsend(g.ep, s[i], 1000, g.peer, sent_tags[i], CTX(20 + i)));
        }
        for (int i = 0; i < 3; i++) {
            rdm4_cqe c = wait_op(CTX(20 + i), "tsend for tag matching");
            check_send(&c, "tag matching", 1000, RDM4_CQ_SEND | RDM4_CQ_TAGGED);
            free(s[i]);
        }
    }
    barrier(T_BAR + 3);
    check_no_stray("after tag matching");
}

/* senddata: 0, 100 and 300000 bytes with CQ data. */
static void test_senddata(void)
{
    static const size_t lens[3] = { 0, 100, 300000 };
    static const uint64_t data[3] = { 0, 0xdeadbeefcafef00dULL, 0x0123456789abcdefULL };
    if (g.role == CHILD) {
        uint8_t *b[3];
        for (int i = 0; i < 3; i++) {
            b[i] = rbuf_new(300000);
            POST(rdm4_recv(g.ep, b[i], 300000, RDM4_ADDR_UNSPEC, CTX(30 + i)));
        }
        put(T_POSTED + 0x20, NULL, 0);
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "senddata of %zu bytes", lens[i]);
            rdm4_cqe c = wait_op(CTX(30 + i), what);
            check_recv(&c, what, b[i], lens[i], RDM4_CQ_RECV | RDM4_CQ_MSG | RDM4_CQ_REMOTE_CQ_DATA,
                       seed_of(4, i, 0));
            CHECK(c.data == data[i], "%s: CQ data %#llx (%#llx)", what, (unsigned long long)data[i],
                  (unsigned long long)c.data);
            free(b[i]);
        }
    } else {
        uint8_t *s = xmalloc(3 * 300000);
        get(T_POSTED + 0x20, NULL, 0);
        for (int i = 0; i < 3; i++) {
            tu_fill(s + i * 300000, lens[i], seed_of(4, i, 0));
            POST(rdm4_senddata(g.ep, s + i * 300000, lens[i], data[i], g.peer, CTX(40 + i)));
        }
        for (int i = 0; i < 3; i++) {
            rdm4_cqe c = wait_op(CTX(40 + i), "senddata");
            check_send(&c, "senddata", lens[i], RDM4_CQ_SEND | RDM4_CQ_MSG);
        }
        free(s);
    }
    barrier(T_BAR + 4);
    check_no_stray("after senddata");
}

/* sendmsg / recvmsg: one iovec untagged, one iovec tagged with CQ data and
 * an ignore mask, no iovec (zero bytes); several iovecs on both sides, and
 * a message truncated into two iovecs. */
static void test_msg(void)
{
    if (g.role == CHILD) {
        uint8_t *b0 = rbuf_new(5000), *b1 = rbuf_new(4000);
        struct iovec v0 = { b0, 5000 }, v1 = { b1, 4000 };
        rdm4_msg m0 = { &v0, 1, RDM4_ADDR_UNSPEC, 0, 0, 0, CTX(50) };
        rdm4_msg m1 = { &v1, 1, g.peer, 0x5500, 0xff, 0, CTX(51) };
        rdm4_msg m2 = { NULL, 0, RDM4_ADDR_UNSPEC, 0, 0, 0, CTX(52) };
        POST(rdm4_recvmsg(g.ep, &m0, 0));
        POST(rdm4_recvmsg(g.ep, &m1, RDM4_MSG_TAGGED));
        POST(rdm4_recvmsg(g.ep, &m2, 0));
        uint8_t *b3[3] = { rbuf_new(1000), rbuf_new(0), rbuf_new(5000) };
        struct iovec v3[3] = { { b3[0], 1000 }, { b3[1], 0 }, { b3[2], 5000 } };
        rdm4_msg m3 = { v3, 3, RDM4_ADDR_UNSPEC, 0, 0, 0, CTX(53) };
        POST(rdm4_recvmsg(g.ep, &m3, 0));
        uint8_t *b4[2] = { rbuf_new(100), rbuf_new(200) };
        struct iovec v4[2] = { { b4[0], 100 }, { b4[1], 200 } };
        rdm4_msg m4 = { v4, 2, g.peer, 0, 0, 0, CTX(54) };
        POST(rdm4_recvmsg(g.ep, &m4, 0));
        memset(v3, 0, sizeof v3); /* the iovec arrays are only read during the call */
        memset(v4, 0, sizeof v4);
        memset(&m0, 0, sizeof m0); /* msg is only read during the call */
        memset(&v0, 0, sizeof v0);
        put(T_POSTED + 0x30, NULL, 0);
        rdm4_cqe c = wait_op(CTX(50), "recvmsg untagged");
        check_recv(&c, "recvmsg untagged", b0, 5000, RDM4_CQ_RECV | RDM4_CQ_MSG, seed_of(5, 0, 0));
        c = wait_op(CTX(51), "recvmsg tagged");
        check_recv(&c, "recvmsg tagged with CQ data", b1, 3000,
                   RDM4_CQ_RECV | RDM4_CQ_TAGGED | RDM4_CQ_REMOTE_CQ_DATA, seed_of(5, 1, 0));
        CHECK(c.tag == 0x5537 && c.data == 0xd00d, "recvmsg tagged: tag %#llx (0x5537), data %#llx (0xd00d)",
              (unsigned long long)c.tag, (unsigned long long)c.data);
        c = wait_op(CTX(52), "recvmsg without iovec");
        CHECK(c.status == RDM4_SUCCESS && c.len == 0 && c.flags == (RDM4_CQ_RECV | RDM4_CQ_MSG),
              "recvmsg without iovec: zero-byte message (status %s, len %llu, flags %#llx)", tu_status(c.status),
              (unsigned long long)c.len, (unsigned long long)c.flags);

        /* Several iovecs: 6000 bytes into 1000 + 0 + 5000; 9000 bytes into 100 + 200. */
        uint8_t *exp = xmalloc(9000);
        tu_fill(exp, 6000, seed_of(5, 3, 0));
        c = wait_op(CTX(53), "recvmsg with 3 iovecs");
        int data_ok = memcmp(b3[0], exp, 1000) == 0 && memcmp(b3[2], exp + 1000, 5000) == 0;
        int can_ok = canary_ok(b3[0], 1000) && canary_ok(b3[1], 0) && canary_ok(b3[2], 5000);
        CHECK(c.status == RDM4_SUCCESS && c.len == 6000 && c.buf == NULL && c.flags == (RDM4_CQ_RECV | RDM4_CQ_MSG) &&
                  data_ok && can_ok,
              "recvmsg with 3 iovecs (1000 + 0 + 5000) of a 6000-byte message from 4 iovecs (status %s, len %llu, "
              "buf %p, data %s, canaries %s)",
              tu_status(c.status), (unsigned long long)c.len, c.buf, data_ok ? "ok" : "WRONG",
              can_ok ? "intact" : "OVERWRITTEN");
        tu_fill(exp, 9000, seed_of(5, 4, 0));
        c = wait_op(CTX(54), "recvmsg with 2 iovecs, truncated");
        data_ok = memcmp(b4[0], exp, 100) == 0 && memcmp(b4[1], exp + 100, 200) == 0;
        can_ok = canary_ok(b4[0], 100) && canary_ok(b4[1], 200);
        CHECK(c.status == RDM4_ETRUNC && c.len == 300 && c.olen == 9000 && data_ok && can_ok,
              "recvmsg with 2 iovecs (100 + 200) of a 9000-byte message: RDM4_ETRUNC (status %s, len %llu, olen "
              "%llu, data %s, canaries %s)",
              tu_status(c.status), (unsigned long long)c.len, (unsigned long long)c.olen, data_ok ? "ok" : "WRONG",
              can_ok ? "intact" : "OVERWRITTEN");
        free(exp);
        for (int i = 0; i < 3; i++) {
            free(b3[i]);
        }
        free(b4[0]);
        free(b4[1]);
        free(b0);
        free(b1);
    } else {
        uint8_t *s0 = xmalloc(5000), *s1 = xmalloc(3000);
        tu_fill(s0, 5000, seed_of(5, 0, 0));
        tu_fill(s1, 3000, seed_of(5, 1, 0));
        struct iovec v0 = { s0, 5000 }, v1 = { s1, 3000 };
        rdm4_msg m0 = { &v0, 1, g.peer, 0, 0, 0, CTX(60) };
        rdm4_msg m1 = { &v1, 1, g.peer, 0x5537, 0, 0xd00d, CTX(61) };
        rdm4_msg m2 = { NULL, 0, g.peer, 0, 0, 0, CTX(62) };
        get(T_POSTED + 0x30, NULL, 0);
        POST(rdm4_sendmsg(g.ep, &m0, 0));
        POST(rdm4_sendmsg(g.ep, &m1, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA));
        POST(rdm4_sendmsg(g.ep, &m2, 0));
        uint8_t *s3 = xmalloc(6000), *s4 = xmalloc(9000);
        tu_fill(s3, 6000, seed_of(5, 3, 0));
        tu_fill(s4, 9000, seed_of(5, 4, 0));
        struct iovec v3[4] = { { s3, 1 }, { s3 + 1, 0 }, { s3 + 1, 2999 }, { s3 + 3000, 3000 } };
        rdm4_msg m3 = { v3, 4, g.peer, 0, 0, 0, CTX(63) };
        POST(rdm4_sendmsg(g.ep, &m3, 0));
        memset(v3, 0, sizeof v3);
        struct iovec v4 = { s4, 9000 };
        rdm4_msg m4 = { &v4, 1, g.peer, 0, 0, 0, CTX(64) };
        POST(rdm4_sendmsg(g.ep, &m4, 0));
        memset(&m1, 0, sizeof m1);
        memset(&v1, 0, sizeof v1);
        rdm4_cqe c = wait_op(CTX(60), "sendmsg untagged");
        check_send(&c, "sendmsg untagged", 5000, RDM4_CQ_SEND | RDM4_CQ_MSG);
        c = wait_op(CTX(61), "sendmsg tagged");
        check_send(&c, "sendmsg tagged with CQ data", 3000, RDM4_CQ_SEND | RDM4_CQ_TAGGED);
        c = wait_op(CTX(62), "sendmsg without iovec");
        check_send(&c, "sendmsg without iovec", 0, RDM4_CQ_SEND | RDM4_CQ_MSG);
        c = wait_op(CTX(63), "sendmsg with 4 iovecs");
        check_send(&c, "sendmsg with 4 iovecs", 6000, RDM4_CQ_SEND | RDM4_CQ_MSG);
        c = wait_op(CTX(64), "sendmsg of 9000 bytes");
        CHECK(c.status == RDM4_SUCCESS, "sendmsg of 9000 bytes truncated by the receiver completes (%s)",
              tu_status(c.status));
        free(s3);
        free(s4);
        free(s0);
        free(s1);
    }
    barrier(T_BAR + 5);
    check_no_stray("after sendmsg/recvmsg");
}

/* inject: 0, 100 and 65536 bytes; the buffer is overwritten right after
 * each call; no completion at the sender. */
static void test_inject(void)
{
    static const size_t lens[3] = { 0, 100, 65536 };
    if (g.role == CHILD) {
        uint8_t *b[3];
        for (int i = 0; i < 3; i++) {
            b[i] = rbuf_new(65536);
            POST(rdm4_recv(g.ep, b[i], 65536, RDM4_ADDR_UNSPEC, CTX(70 + i)));
        }
        put(T_POSTED + 0x40, NULL, 0);
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "inject of %zu bytes", lens[i]);
            rdm4_cqe c = wait_op(CTX(70 + i), what);
            check_recv(&c, what, b[i], lens[i], RDM4_CQ_RECV | RDM4_CQ_MSG, seed_of(6, i, 0));
            free(b[i]);
        }
        put(T_DONE + 0x40, NULL, 0);
    } else {
        uint8_t *s = xmalloc(65536);
        get(T_POSTED + 0x40, NULL, 0);
        for (int i = 0; i < 3; i++) {
            tu_fill(s, lens[i], seed_of(6, i, 0));
            POST(rdm4_inject(g.ep, s, lens[i], g.peer));
            memset(s, 0x11, 65536);
        }
        get(T_DONE + 0x40, NULL, 0);
        double t0 = tu_now_ms();
        while (tu_now_ms() - t0 < 20) {
            tu_cq_poll(&g.q);
        }
        CHECK(g.q.n == 0, "inject wrote no completion at the sender (%zu entries)", g.q.n);
        free(s);
    }
    barrier(T_BAR + 6);
    check_no_stray("after inject");
}

/* A burst of sends with RDM4_MSG_MORE ended by one without: every message
 * arrives intact in its tagged receive, and every send completes. */
static void test_more(void)
{
    enum { N = 100 };
    static const size_t lens[4] = { 0, 8, 1000, 70000 };
    if (g.role == CHILD) {
        uint8_t *b[N];
        for (int i = 0; i < N; i++) {
            b[i] = rbuf_new(70000);
            POST(rdm4_trecv(g.ep, b[i], 70000, RDM4_ADDR_UNSPEC, 500 + i, 0, CTX(500 + i)));
        }
        put(T_POSTED + 0x70, NULL, 0);
        for (int i = 0; i < N; i++) {
            char what[64];
            snprintf(what, sizeof what, "burst message %d", i);
            rdm4_cqe c = wait_op(CTX(500 + i), what);
            check_recv(&c, what, b[i], lens[i % 4], RDM4_CQ_RECV | RDM4_CQ_TAGGED, seed_of(11, i, 0));
            free(b[i]);
        }
    } else {
        uint8_t *s[N];
        get(T_POSTED + 0x70, NULL, 0);
        for (int i = 0; i < N; i++) {
            s[i] = xmalloc(70000);
            tu_fill(s[i], lens[i % 4], seed_of(11, i, 0));
            struct iovec iov = { s[i], lens[i % 4] };
            rdm4_msg m = { &iov, 1, g.peer, 500 + i, 0, 0, CTX(500 + i) };
            uint64_t fl = RDM4_MSG_TAGGED | (i < N - 1 ? RDM4_MSG_MORE : 0);
            POST(rdm4_sendmsg(g.ep, &m, fl));
        }
        for (int i = 0; i < N; i++) {
            rdm4_cqe c = wait_op(CTX(500 + i), "burst send");
            CHECK(c.status == RDM4_SUCCESS, "burst send %d: %s", i, tu_status(c.status));
            free(s[i]);
        }
    }
    barrier(T_BAR + 11);
    check_no_stray("after a burst with RDM4_MSG_MORE");
}

/* Truncation: expected (posted first) and unexpected (sent first) messages
 * longer than the receive buffer. */
static void test_truncation(void)
{
    /* message length, buffer length, tagged */
    static const struct {
        size_t msg, buf;
        int tagged;
    } cases[] = { { 1000, 100, 0 }, { 9000, 4096, 1 }, { 300000, 65536, 0 }, { 4 * MiB, 9000, 1 } };
    enum { N = sizeof cases / sizeof cases[0] };
    if (g.role == CHILD) {
        uint8_t *b[N];
        /* expected: posted before the parent sends */
        for (int i = 0; i < N; i++) {
            b[i] = rbuf_new(cases[i].buf);
            if (cases[i].tagged) {
                POST(rdm4_trecv(g.ep, b[i], cases[i].buf, g.peer, 0x77 + (uint64_t)i, 0, CTX(80 + i)));
            } else {
                POST(rdm4_recv(g.ep, b[i], cases[i].buf, g.peer, CTX(80 + i)));
            }
        }
        put(T_POSTED + 0x50, NULL, 0);
        for (int i = 0; i < N; i++) {
            char what[80];
            snprintf(what, sizeof what, "%s %zu-byte message into %zu bytes", cases[i].tagged ? "tagged" : "untagged",
                     cases[i].msg, cases[i].buf);
            rdm4_cqe c = wait_op(CTX(80 + i), what);
            long bad = tu_verify(b[i], cases[i].buf, seed_of(7, i, 0));
            CHECK(c.status == RDM4_ETRUNC && c.len == cases[i].buf && c.olen == cases[i].msg && bad < 0 &&
                      canary_ok(b[i], cases[i].buf),
                  "%s: RDM4_ETRUNC, len = buffer, olen = message, prefix intact, nothing past the buffer "
                  "(status %s, len %llu, olen %llu, first bad byte %ld, canary %s)",
                  what, tu_status(c.status), (unsigned long long)c.len, (unsigned long long)c.olen, bad,
                  canary_ok(b[i], cases[i].buf) ? "intact" : "OVERWRITTEN");
            free(b[i]);
        }
        /* unexpected: the parent sends first */
        get(T_SENT + 0x50, NULL, 0);
        for (int i = 0; i < N; i++) {
            b[i] = rbuf_new(cases[i].buf);
            if (cases[i].tagged) {
                POST(rdm4_trecv(g.ep, b[i], cases[i].buf, RDM4_ADDR_UNSPEC, 0x177 + (uint64_t)i, 0, CTX(90 + i)));
            } else {
                POST(rdm4_recv(g.ep, b[i], cases[i].buf, RDM4_ADDR_UNSPEC, CTX(90 + i)));
            }
        }
        for (int i = 0; i < N; i++) {
            char what[96];
            snprintf(what, sizeof what, "unexpected %s %zu-byte message into %zu bytes",
                     cases[i].tagged ? "tagged" : "untagged", cases[i].msg, cases[i].buf);
            rdm4_cqe c = wait_op(CTX(90 + i), what);
            long bad = tu_verify(b[i], cases[i].buf, seed_of(7, i, 1));
            CHECK(c.status == RDM4_ETRUNC && c.len == cases[i].buf && c.olen == cases[i].msg && bad < 0 &&
                      canary_ok(b[i], cases[i].buf),
                  "%s: RDM4_ETRUNC, len = buffer, olen = message, prefix intact, nothing past the buffer "
                  "(status %s, len %llu, olen %llu, first bad byte %ld, canary %s)",
                  what, tu_status(c.status), (unsigned long long)c.len, (unsigned long long)c.olen, bad,
                  canary_ok(b[i], cases[i].buf) ? "intact" : "OVERWRITTEN");
            free(b[i]);
        }
    } else {
        uint8_t *s[N];
        get(T_POSTED + 0x50, NULL, 0);
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < N; i++) {
                s[i] = xmalloc(cases[i].msg);
                tu_fill(s[i], cases[i].msg, seed_of(7, i, pass));
                uint64_t tag = (pass ? 0x177 : 0x77) + (uint64_t)i;
                if (cases[i].tagged) {
                    POST(rdm4_tsend(g.ep, s[i], cases[i].msg, g.peer, tag, CTX(100 + i)));
                } else {
                    POST(rdm4_send(g.ep, s[i], cases[i].msg, g.peer, CTX(100 + i)));
                }
            }
            if (pass) {
                put(T_SENT + 0x50, NULL, 0);
            }
            for (int i = 0; i < N; i++) {
                rdm4_cqe c = wait_op(CTX(100 + i), "send of a truncated message");
                CHECK(c.status == RDM4_SUCCESS,
                      "the sender of a %zu-byte message truncated by the receiver completes with success (%s)",
                      cases[i].msg, tu_status(c.status));
                free(s[i]);
            }
        }
    }
    barrier(T_BAR + 7);
    check_no_stray("after truncation");
}

/* rdm4_wait: times out when nothing comes, returns when a message does. */
static void test_wait(void)
{
    barrier(T_BAR + 8);
    double t0 = tu_now_ms();
    int32_t rc = rdm4_wait(g.ep, 100);
    double dt = tu_now_ms() - t0;
    CHECK(rc == RDM4_ETIMEDOUT && dt >= 95 && dt < 10000,
          "rdm4_wait(ep, 100) with nothing coming: RDM4_ETIMEDOUT after %.1f ms (%s)", dt, tu_status(rc));
    CHECK(rdm4_poll(g.ep, g.q.e, 1) == 0, "... and rdm4_poll then has nothing");
    barrier(T_BAR + 9);

    uint8_t buf[100 + CANARY];
    if (g.role == CHILD) {
        memset(buf, 0xee, sizeof buf);
        POST(rdm4_recv(g.ep, buf, 100, RDM4_ADDR_UNSPEC, CTX(110)));
        put(T_POSTED + 0x60, NULL, 0);
        t0 = tu_now_ms();
        rc = rdm4_wait(g.ep, 20000);
        dt = tu_now_ms() - t0;
        CHECK(rc == RDM4_SUCCESS && dt < 20000, "rdm4_wait(ep, 20000) returns when a message arrives (%s, %.1f ms)",
              tu_status(rc), dt);
        rdm4_cqe c = wait_op(CTX(110), "receive after rdm4_wait");
        check_recv(&c, "receive after rdm4_wait", buf, 100, RDM4_CQ_RECV | RDM4_CQ_MSG, seed_of(8, 0, 0));
    } else {
        get(T_POSTED + 0x60, NULL, 0);
        tu_sleep_us(50000);
        tu_fill(buf, 100, seed_of(8, 0, 0));
        POST(rdm4_send(g.ep, buf, 100, g.peer, CTX(111)));
        rdm4_cqe c = wait_op(CTX(111), "send to a waiting peer");
        check_send(&c, "send to a waiting peer", 100, RDM4_CQ_SEND | RDM4_CQ_MSG);
    }
    barrier(T_BAR + 10);
    check_no_stray("after rdm4_wait");
}

/* ---------------------------------------------------------------------- */
/* RMA                                                                     */
/* ---------------------------------------------------------------------- */

/* The target's read-write region as the initiator's operations leave it:
 * both sides build it. Writes: (offset, length, seed). */
struct wr {
    size_t off, len;
};
static const struct wr WRITES[] = {
    { 0, 1 * MiB },          /* large */
    { 5, 9000 },             /* unaligned, inside the first */
    { REG_LEN - 1 - 4096 * 2, 1 }, /* one byte */
    { 1 * MiB + 3, 4096 },   /* page-sized, unaligned */
};
#define NWRITES (sizeof WRITES / sizeof WRITES[0])
#define WD_OFF (1 * MiB + 3 * 4096)
#define WD_LEN 4096
#define WD_DATA 0xfeedfacecafebeefULL

static uint32_t rma_seed(int initiator, int what)
{
    return seed_of(20 + initiator, what, 0);
}

static void build_model(uint8_t *model, int initiator)
{
    tu_fill(model, REG_LEN, rma_seed(initiator, 99));
    for (size_t i = 0; i < NWRITES; i++) {
        tu_fill(model + WRITES[i].off, WRITES[i].len, rma_seed(initiator, (int)i));
    }
    tu_fill(model + WD_OFF, WD_LEN, rma_seed(initiator, 50));
}

/* Waits for an initiator-side RMA completion and checks its status/flags. */
static void check_rma(void *ctx, const char *what, int32_t want, uint64_t flags)
{
    rdm4_cqe c = wait_op(ctx, what);
    if (want == RDM4_SUCCESS) {
        CHECK(c.status == RDM4_SUCCESS && c.flags == flags, "%s (status %s, flags %#llx/%#llx)", what,
              tu_status(c.status), (unsigned long long)c.flags, (unsigned long long)flags);
    } else {
        CHECK(c.status == want, "%s: %s (got %s)", what, tu_status(want), tu_status(c.status));
    }
}

static void test_rma(int initiator)
{
    char what[128];
    const uint64_t W = RDM4_CQ_RMA | RDM4_CQ_WRITE, R = RDM4_CQ_RMA | RDM4_CQ_READ;
    uint32_t tok = T_RMA + (uint32_t)initiator * 0x10;
    const char *dir = initiator == PARENT ? "parent -> child" : "child -> parent";

    if (g.role != initiator) {
        /* The target: prepare the memory, then serve (manual progress: by
         * polling in get(); automatic: the library's thread does it). */
        tu_fill(g.reg, REG_LEN, rma_seed(initiator, 99));
        tu_fill(g.ro, RO_LEN, rma_seed(initiator, 98));
        put(tok + 1, NULL, 0);
        get(tok + 2, NULL, 0);
        uint8_t *model = xmalloc(REG_LEN);
        build_model(model, initiator);
        size_t first_bad = REG_LEN;
        for (size_t i = 0; i < REG_LEN; i++) {
            if (g.reg[i] != model[i]) {
                first_bad = i;
                break;
            }
        }
        CHECK(first_bad == REG_LEN,
              "%s: the target's region holds exactly what the writes put there, and nothing from the refused "
              "ones (first difference at %zu)",
              dir, first_bad);
        CHECK(tu_verify(g.ro, RO_LEN, rma_seed(initiator, 98)) < 0,
              "%s: the read-only region is unchanged", dir);
        free(model);
        rdm4_cqe c = wait_target_entry("the target's writedata completion");
        const uint64_t fl = RDM4_CQ_REMOTE_WRITE | RDM4_CQ_REMOTE_CQ_DATA;
        CHECK(c.status == RDM4_SUCCESS && (c.flags & fl) == fl && c.data == WD_DATA && c.context == NULL,
              "%s: the target gets one writedata completion (status %s, flags %#llx, data %#llx, len %llu)", dir,
              tu_status(c.status), (unsigned long long)c.flags, (unsigned long long)c.data,
              (unsigned long long)c.len);
        check_no_stray("at the RMA target (refused writedata must not complete there)");
        put(tok + 3, NULL, 0);
        return;
    }

    get(tok + 1, NULL, 0);
    const uint64_t raddr = g.them.reg_addr, rkey = g.them.reg_key;
    uint8_t *lbuf = xmalloc(REG_LEN);
    uint8_t *rbuf = rbuf_new(REG_LEN);
    uint8_t *model = xmalloc(REG_LEN);
    tu_fill(model, REG_LEN, rma_seed(initiator, 99));

    /* Read the initial contents. */
    POST(rdm4_read(g.ep, rbuf, REG_LEN, g.peer, raddr, rkey, CTX(200)));
    snprintf(what, sizeof what, "%s: read of the whole %u-byte region", dir, REG_LEN);
    check_rma(CTX(200), what, RDM4_SUCCESS, R);
    CHECK(memcmp(rbuf, model, REG_LEN) == 0 && canary_ok(rbuf, REG_LEN), "%s: read data matches the target's",
          dir);

    /* Writes, each read back. */
    for (size_t i = 0; i < NWRITES; i++) {
        const struct wr *w = &WRITES[i];
        tu_fill(lbuf, w->len, rma_seed(initiator, (int)i));
        tu_fill(model + w->off, w->len, rma_seed(initiator, (int)i));
        POST(rdm4_write(g.ep, lbuf, w->len, g.peer, raddr + w->off, rkey, CTX(210)));
        snprintf(what, sizeof what, "%s: write of %zu bytes at offset %zu", dir, w->len, w->off);
        check_rma(CTX(210), what, RDM4_SUCCESS, W);
        size_t off = w->off > 100 ? w->off - 100 : 0;
        size_t len = w->len + 200;
        if (off + len > REG_LEN) {
            len = REG_LEN - off;
        }
        memset(rbuf, 0xee, len + CANARY);
        POST(rdm4_read(g.ep, rbuf, len, g.peer, raddr + off, rkey, CTX(211)));
        snprintf(what, sizeof what, "%s: read back %zu bytes at offset %zu", dir, len, off);
        check_rma(CTX(211), what, RDM4_SUCCESS, R);
        CHECK(memcmp(rbuf, model + off, len) == 0 && canary_ok(rbuf, len), "%s: the data written is there", dir);
    }

    /* writedata: the target also gets a completion. */
    tu_fill(lbuf, WD_LEN, rma_seed(initiator, 50));
    tu_fill(model + WD_OFF, WD_LEN, rma_seed(initiator, 50));
    POST(rdm4_writedata(g.ep, lbuf, WD_LEN, WD_DATA, g.peer, raddr + WD_OFF, rkey, CTX(220)));
    snprintf(what, sizeof what, "%s: writedata of %u bytes", dir, WD_LEN);
    check_rma(CTX(220), what, RDM4_SUCCESS, W);

    /* The read-only region. */
    memset(rbuf, 0xee, RO_LEN + CANARY);
    POST(rdm4_read(g.ep, rbuf, RO_LEN, g.peer, g.them.ro_addr, g.them.ro_key, CTX(230)));
    snprintf(what, sizeof what, "%s: read of the read-only region", dir);
    check_rma(CTX(230), what, RDM4_SUCCESS, R);
    CHECK(tu_verify(rbuf, RO_LEN, rma_seed(initiator, 98)) < 0 && canary_ok(rbuf, RO_LEN),
          "%s: read-only region data matches", dir);

    /* Refused: wrong key, out of bounds, no write permission. */
    tu_fill(lbuf, 4096, 0xbad);
    const uint64_t badkey = rkey ^ 0x5a5a5a5a00ULL ^ 1;
    struct {
        const char *what;
        int write;
        uint64_t addr, key;
        size_t len;
    } bad[] = {
        { "write with a wrong key", 1, raddr, badkey, 100 },
        { "read with a wrong key", 0, raddr, badkey, 100 },
        { "write with the read-only region's key into the read-write region", 1, raddr, g.them.ro_key, 100 },
        { "write past the end of the region", 1, raddr + REG_LEN - 10, rkey, 100 },
        { "write before the start of the region", 1, raddr - 8, rkey, 16 },
        { "read past the end of the region", 0, raddr + REG_LEN - 10, rkey, 100 },
        { "write into the read-only region", 1, g.them.ro_addr, g.them.ro_key, 100 },
        { "large write with a wrong key", 1, raddr, badkey, 300000 },
        { "large read with a wrong key", 0, raddr, badkey, 300000 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].write) {
            POST(rdm4_write(g.ep, lbuf, bad[i].len, g.peer, bad[i].addr, bad[i].key, CTX(240 + i)));
        } else {
            POST(rdm4_read(g.ep, rbuf, bad[i].len, g.peer, bad[i].addr, bad[i].key, CTX(240 + i)));
        }
        snprintf(what, sizeof what, "%s: %s", dir, bad[i].what);
        check_rma(CTX(240 + i), what, RDM4_EREMOTEACCESS, 0);
    }
    POST(rdm4_writedata(g.ep, lbuf, 100, 0xbad, g.peer, raddr, badkey, CTX(260)));
    snprintf(what, sizeof what, "%s: writedata with a wrong key", dir);
    check_rma(CTX(260), what, RDM4_EREMOTEACCESS, 0);

    /* Everything once more as a whole. */
    memset(rbuf, 0xee, REG_LEN + CANARY);
    POST(rdm4_read(g.ep, rbuf, REG_LEN, g.peer, raddr, rkey, CTX(270)));
    snprintf(what, sizeof what, "%s: final read of the whole region", dir);
    check_rma(CTX(270), what, RDM4_SUCCESS, R);
    CHECK(memcmp(rbuf, model, REG_LEN) == 0 && canary_ok(rbuf, REG_LEN),
          "%s: the region as read equals the model", dir);

    check_no_stray("at the RMA initiator");
    put(tok + 2, NULL, 0);
    get(tok + 3, NULL, 0);
    free(lbuf);
    free(rbuf);
    free(model);
}

/* ---------------------------------------------------------------------- */
/* Atomics                                                                 */
/* ---------------------------------------------------------------------- */

static int64_t as_i(uint64_t v)
{
    int64_t x;
    memcpy(&x, &v, 8);
    return x;
}

static double as_d(uint64_t v)
{
    double x;
    memcpy(&x, &v, 8);
    return x;
}

static uint64_t of_d(double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    return v;
}

static uint64_t of_i(int64_t i)
{
    uint64_t v;
    memcpy(&v, &i, 8);
    return v;
}

/* The new value of `d` after a non-compare op with operand `x`. */
static uint64_t apply(uint32_t dt, uint32_t op, uint64_t d, uint64_t x)
{
    if (op == RDM4_ATOMIC_WRITE) {
        return x;
    }
    if (op == RDM4_ATOMIC_READ) {
        return d;
    }
    if (dt == RDM4_DOUBLE) {
        double a = as_d(d), b = as_d(x);
        switch (op) {
        case RDM4_MIN: return of_d(a < b ? a : b);
        case RDM4_MAX: return of_d(a > b ? a : b);
        case RDM4_SUM: return of_d(a + b);
        case RDM4_PROD: return of_d(a * b);
        case RDM4_LOR: return of_d((a != 0.0) || (b != 0.0) ? 1.0 : 0.0);
        case RDM4_LAND: return of_d((a != 0.0) && (b != 0.0) ? 1.0 : 0.0);
        case RDM4_LXOR: return of_d(((a != 0.0) != (b != 0.0)) ? 1.0 : 0.0);
        }
    } else if (dt == RDM4_INT64) {
        int64_t a = as_i(d), b = as_i(x);
        switch (op) {
        case RDM4_MIN: return of_i(a < b ? a : b);
        case RDM4_MAX: return of_i(a > b ? a : b);
        }
    } else {
        switch (op) {
        case RDM4_MIN: return d < x ? d : x;
        case RDM4_MAX: return d > x ? d : x;
        }
    }
    switch (op) { /* integers, signedness does not matter */
    case RDM4_SUM: return d + x;
    case RDM4_PROD: return d * x;
    case RDM4_LOR: return (d != 0) || (x != 0);
    case RDM4_LAND: return (d != 0) && (x != 0);
    case RDM4_LXOR: return (d != 0) != (x != 0);
    case RDM4_BOR: return d | x;
    case RDM4_BAND: return d & x;
    case RDM4_BXOR: return d ^ x;
    }
    FATAL("apply: op %u on datatype %u", op, dt);
}

/* The new value of `d` after a compare op: `c OP d` selects `x`. */
static uint64_t apply_compare(uint32_t dt, uint32_t op, uint64_t d, uint64_t x, uint64_t c)
{
    if (op == RDM4_MSWAP) {
        return (x & c) | (d & ~c);
    }
    int lt, eq;
    if (dt == RDM4_DOUBLE) {
        lt = as_d(c) < as_d(d);
        eq = as_d(c) == as_d(d);
    } else if (dt == RDM4_INT64) {
        lt = as_i(c) < as_i(d);
        eq = c == d;
    } else {
        lt = c < d;
        eq = c == d;
    }
    int take;
    switch (op) {
    case RDM4_CSWAP: take = eq; break;
    case RDM4_CSWAP_NE: take = !eq; break;
    case RDM4_CSWAP_LE: take = lt || eq; break;
    case RDM4_CSWAP_LT: take = lt; break;
    case RDM4_CSWAP_GE: take = !lt; break;
    case RDM4_CSWAP_GT: take = !lt && !eq; break;
    default: FATAL("apply_compare: op %u", op);
    }
    return take ? x : d;
}

static const char *op_name(uint32_t op)
{
    static const char *const n[] = { "MIN",    "MAX",     "SUM",     "PROD",    "LOR",     "LAND",    "BOR",
                                     "BAND",   "LXOR",    "BXOR",    "ATOMIC_READ", "ATOMIC_WRITE", "CSWAP",
                                     "CSWAP_NE", "CSWAP_LE", "CSWAP_LT", "CSWAP_GE", "CSWAP_GT", "MSWAP" };
    return op < 19 ? n[op] : "?";
}

static const char *dt_name(uint32_t dt)
{
    return dt == RDM4_INT64 ? "INT64" : dt == RDM4_UINT64 ? "UINT64" : "DOUBLE";
}

static int valid_for(uint32_t dt, uint32_t op)
{
    if (dt == RDM4_DOUBLE) {
        return op != RDM4_BOR && op != RDM4_BAND && op != RDM4_BXOR && op != RDM4_MSWAP;
    }
    return 1;
}

enum form { WRITE_FORM, FETCH_FORM, COMPARE_FORM };

/* One atomic: set the target to `init` (ATOMIC_WRITE), run `op` in `form`,
 * check the old values returned, read the target back (ATOMIC_READ) and
 * compare with the expected new values. Returns the new values in `now`. */
static void atomic_case(uint32_t dt, uint32_t op, enum form form, uint64_t raddr, uint64_t rkey, const char *dir,
                        uint64_t now[ATOM_N])
{
    uint64_t init[ATOM_N], x[ATOM_N], c[ATOM_N], res[ATOM_N], want[ATOM_N];
    if (dt == RDM4_DOUBLE) {
        const double vd[ATOM_N] = { -2.5, 0.0, 12.0, 6.25 };
        const double vx[ATOM_N] = { 3.0, 0.0, 0.0, -9.5 };
        const double vc[ATOM_N] = { -6.0, 1.0, 12.0, -1.0 };
        for (int i = 0; i < ATOM_N; i++) {
            init[i] = of_d(vd[i]);
            x[i] = of_d(vx[i]);
            c[i] = of_d(vc[i]);
        }
    } else {
        const int64_t vd[ATOM_N] = { -5, 0, 12, 6 };
        const int64_t vx[ATOM_N] = { 3, 0, 0, -9 };
        const int64_t vc[ATOM_N] = { -6, 1, 12, -1 };
        for (int i = 0; i < ATOM_N; i++) {
            init[i] = of_i(vd[i]);
            x[i] = of_i(vx[i]);
            c[i] = of_i(vc[i]);
        }
    }
    static const char *const forms[] = { "rdm4_atomic", "rdm4_fetch_atomic", "rdm4_compare_atomic" };
    char what[128];
    snprintf(what, sizeof what, "%s: %s %s %s", dir, forms[form], dt_name(dt), op_name(op));

    POST(rdm4_atomic(g.ep, init, ATOM_N, dt, RDM4_ATOMIC_WRITE, g.peer, raddr, rkey, CTX(300)));
    rdm4_cqe e = wait_op(CTX(300), "ATOMIC_WRITE of the initial values");
    if (e.status != RDM4_SUCCESS) {
        CHECK(0, "%s: setting the initial values: %s", what, tu_status(e.status));
        return;
    }

    for (int i = 0; i < ATOM_N; i++) {
        res[i] = 0xababababababababULL;
        want[i] = form == COMPARE_FORM ? apply_compare(dt, op, init[i], x[i], c[i]) : apply(dt, op, init[i], x[i]);
    }
    uint64_t flags_want;
    switch (form) {
    case WRITE_FORM:
        POST(rdm4_atomic(g.ep, x, ATOM_N, dt, op, g.peer, raddr, rkey, CTX(301)));
        flags_want = RDM4_CQ_ATOMIC | RDM4_CQ_WRITE;
        break;
    case FETCH_FORM:
        POST(rdm4_fetch_atomic(g.ep, op == RDM4_ATOMIC_READ ? NULL : x, ATOM_N, res, dt, op, g.peer, raddr, rkey,
                               CTX(301)));
        flags_want = RDM4_CQ_ATOMIC | RDM4_CQ_READ;
        break;
    default:
        POST(rdm4_compare_atomic(g.ep, x, ATOM_N, c, res, dt, op, g.peer, raddr, rkey, CTX(301)));
        flags_want = RDM4_CQ_ATOMIC | RDM4_CQ_READ;
        break;
    }
    e = wait_op(CTX(301), what);
    int flags_ok = form == WRITE_FORM ? e.flags == flags_want : (e.flags & flags_want) == flags_want;
    int old_ok = form == WRITE_FORM || memcmp(res, init, sizeof res) == 0;

    uint64_t cur[ATOM_N];
    memset(cur, 0xab, sizeof cur);
    POST(rdm4_fetch_atomic(g.ep, NULL, ATOM_N, cur, dt, RDM4_ATOMIC_READ, g.peer, raddr, rkey, CTX(302)));
    rdm4_cqe r = wait_op(CTX(302), "ATOMIC_READ of the result");
    int new_ok = r.status == RDM4_SUCCESS && memcmp(cur, want, sizeof cur) == 0;
    CHECK(e.status == RDM4_SUCCESS && flags_ok && old_ok && new_ok,
          "%s (status %s, flags %#llx, old values %s, new values %s)", what, tu_status(e.status),
          (unsigned long long)e.flags, old_ok ? "ok" : "WRONG", new_ok ? "ok" : "WRONG");
    if (!old_ok || !new_ok) {
        for (int i = 0; i < ATOM_N; i++) {
            fprintf(stderr, "    [%d] init %#llx operand %#llx compare %#llx | old %#llx | now %#llx want %#llx\n", i,
                    (unsigned long long)init[i], (unsigned long long)x[i], (unsigned long long)c[i],
                    (unsigned long long)res[i], (unsigned long long)cur[i], (unsigned long long)want[i]);
        }
    }
    memcpy(now, want, sizeof cur);
}

static void test_atomics(int initiator)
{
    uint32_t tok = T_ATOM + (uint32_t)initiator * 0x10;
    const char *dir = initiator == PARENT ? "parent -> child" : "child -> parent";
    uint64_t final[ATOM_N];

    if (g.role != initiator) {
        put(tok + 1, NULL, 0);
        get(tok + 2, final, sizeof final);
        CHECK(memcmp(g.reg + ATOM_OFF, final, sizeof final) == 0,
              "%s: the target's memory holds the values of the last atomic", dir);
        check_no_stray("at the atomics target");
        put(tok + 3, NULL, 0);
        return;
    }

    get(tok + 1, NULL, 0);
    const uint64_t raddr = g.them.reg_addr + ATOM_OFF, rkey = g.them.reg_key;
    static const uint32_t dts[] = { RDM4_INT64, RDM4_UINT64, RDM4_DOUBLE };
    int cases = 0;
    for (size_t t = 0; t < 3; t++) {
        uint32_t dt = dts[t];
        for (uint32_t op = RDM4_MIN; op <= RDM4_MSWAP; op++) {
            if (!valid_for(dt, op)) {
                continue;
            }
            if (op <= RDM4_ATOMIC_WRITE) {
                if (op != RDM4_ATOMIC_READ) {
                    atomic_case(dt, op, WRITE_FORM, raddr, rkey, dir, final);
                    cases++;
                }
                atomic_case(dt, op, FETCH_FORM, raddr, rkey, dir, final);
                cases++;
            } else {
                atomic_case(dt, op, COMPARE_FORM, raddr, rkey, dir, final);
                cases++;
            }
        }
    }
    CHECK(cases == 83, "%s: %d atomic cases run (83: 30 INT64, 30 UINT64, 23 DOUBLE)", dir, cases);

    /* Refused: wrong key, read-only region; the target's memory unchanged. */
    uint64_t one[ATOM_N] = { 1, 1, 1, 1 }, res[ATOM_N], cmp[ATOM_N] = { 0 };
    const uint64_t badkey = rkey ^ 0x5a5a5a5a00ULL ^ 1;
    POST(rdm4_atomic(g.ep, one, ATOM_N, RDM4_UINT64, RDM4_SUM, g.peer, raddr, badkey, CTX(310)));
    check_rma(CTX(310), "atomic SUM with a wrong key", RDM4_EREMOTEACCESS, 0);
    POST(rdm4_fetch_atomic(g.ep, one, ATOM_N, res, RDM4_UINT64, RDM4_SUM, g.peer, raddr, badkey, CTX(311)));
    check_rma(CTX(311), "fetch atomic SUM with a wrong key", RDM4_EREMOTEACCESS, 0);
    POST(rdm4_compare_atomic(g.ep, one, ATOM_N, cmp, res, RDM4_UINT64, RDM4_CSWAP_NE, g.peer, raddr, badkey,
                             CTX(312)));
    check_rma(CTX(312), "compare atomic with a wrong key", RDM4_EREMOTEACCESS, 0);
    POST(rdm4_atomic(g.ep, one, ATOM_N, RDM4_UINT64, RDM4_SUM, g.peer, g.them.ro_addr, g.them.ro_key, CTX(313)));
    check_rma(CTX(313), "atomic SUM on a read-only region", RDM4_EREMOTEACCESS, 0);
    POST(rdm4_atomic(g.ep, one, ATOM_N, RDM4_UINT64, RDM4_SUM, g.peer, g.them.reg_addr + REG_LEN - 8, rkey,
                     CTX(314)));
    check_rma(CTX(314), "atomic SUM across the end of the region", RDM4_EREMOTEACCESS, 0);

    check_no_stray("at the atomics initiator");
    put(tok + 2, final, sizeof final);
    get(tok + 3, NULL, 0);
}

/* ---------------------------------------------------------------------- */
/* One pass: both processes                                                */
/* ---------------------------------------------------------------------- */

static void open_and_exchange(int auto_progress)
{
    rdm4_ep_attr attr;
    rdm4_ep_attr_init(&attr);
    attr.progress = auto_progress ? RDM4_PROGRESS_AUTO : RDM4_PROGRESS_MANUAL;
    g.manual = !auto_progress;
    int32_t rc = rdm4_ep_open(&attr, &g.ep);
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_ep_open: %s", tu_status(rc));
    }
    g.q.ep = g.ep;
    g.q.n = 0;

    size_t len = RDM4_ADDR_LEN;
    rc = rdm4_ep_getname(g.ep, g.me.addr, &len);
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_ep_getname: %s", tu_status(rc));
    }
    g.reg = aligned_alloc(4096, REG_LEN);
    g.ro = aligned_alloc(4096, RO_LEN);
    if (!g.reg || !g.ro) {
        FATAL("out of memory");
    }
    memset(g.reg, 0, REG_LEN);
    memset(g.ro, 0, RO_LEN);
    rc = rdm4_mr_reg(g.ep, g.reg, REG_LEN, RDM4_ACCESS_LOCAL | RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE,
                     &g.me.reg_key);
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_mr_reg: %s", tu_status(rc));
    }
    rc = rdm4_mr_reg(g.ep, g.ro, RO_LEN, RDM4_ACCESS_REMOTE_READ, &g.me.ro_key);
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_mr_reg (read-only): %s", tu_status(rc));
    }
    g.me.reg_addr = (uint64_t)(uintptr_t)g.reg;
    g.me.ro_addr = (uint64_t)(uintptr_t)g.ro;

    put(0x10, &g.me, sizeof g.me);
    get(0x10, &g.them, sizeof g.them);
    rc = rdm4_av_insert(g.ep, g.them.addr, 1, &g.peer);
    CHECK(rc == 1, "pass %d: the peer's address is inserted (%s)", g.pass, tu_status(rc < 0 ? rc : 0));
    if (rc != 1) {
        FATAL("cannot go on without the peer");
    }
    char text[128];
    len = sizeof text;
    if (rdm4_av_straddr(g.them.addr, text, &len) == RDM4_SUCCESS) {
        printf("ok - %speer is %s\n", tu_role, text);
    }
}

static void close_all(void)
{
    int32_t rc = rdm4_mr_close(g.ep, g.me.reg_key);
    CHECK(rc == RDM4_SUCCESS, "pass %d: rdm4_mr_close (read-write region) (%s)", g.pass, tu_status(rc));
    rc = rdm4_mr_close(g.ep, g.me.ro_key);
    CHECK(rc == RDM4_SUCCESS, "pass %d: rdm4_mr_close (read-only region) (%s)", g.pass, tu_status(rc));
    rc = rdm4_ep_close(g.ep);
    CHECK(rc == RDM4_SUCCESS, "pass %d: rdm4_ep_close (%s)", g.pass, tu_status(rc));
    free(g.reg);
    free(g.ro);
    g.reg = g.ro = NULL;
    g.ep = NULL;
    g.manual = 0; /* nothing to poll any more while waiting for the peer */
}

static void run_pass(int child_auto)
{
    open_and_exchange(g.role == CHILD && child_auto);
    double t0 = tu_now_ms();
    test_pingpong(0);
    test_pingpong(1);
    test_tag_matching();
    test_senddata();
    test_msg();
    test_inject();
    test_more();
    test_truncation();
    test_wait();
    test_rma(PARENT);
    test_rma(CHILD);
    test_atomics(PARENT);
    test_atomics(CHILD);
    barrier(T_BAR + 0x7f);
    close_all();
    /* Both are closed before either looks at /dev/shm. */
    barrier(T_BAR + 0x80);
    printf("ok - %spass %d took %.0f ms\n", tu_role, g.pass, tu_now_ms() - t0);
}

int main(void)
{
    set_alarm();
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_set_prefix("interop", prefix, sizeof prefix);
    tu_fatal_cleanup = parent_cleanup;
    tu_role = "[parent] ";

    static const struct {
        const char *cma;
        int child_auto;
        const char *what;
    } passes[] = {
        { "1", 0, "cross-memory attach on, manual progress" },
        { "0", 0, "cross-memory attach off (emulated RMA), manual progress" },
        { "0", 1, "cross-memory attach off, the child on RDM4_PROGRESS_AUTO" },
    };
    int child_failed = 0;
    for (int p = 0; p < 3; p++) {
        printf("# pass %d: %s\n", p + 1, passes[p].what);
        setenv("RDM4_SHM_CMA", passes[p].cma, 1);
        int p2c[2], c2p[2];
        if (pipe(p2c) != 0 || pipe(c2p) != 0) {
            FATAL("pipe: %s", strerror(errno));
        }
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            FATAL("fork: %s", strerror(errno));
        }
        g.pass = p + 1;
        if (pid == 0) {
            /* child */
            child_pid = 0;
            tu_fatal_cleanup = NULL;
            tu_role = "[child] ";
            set_alarm();
            close(p2c[1]);
            close(c2p[0]);
            g.role = CHILD;
            g.rfd = p2c[0];
            g.wfd = c2p[1];
            run_pass(passes[p].child_auto);
            fflush(stdout);
            if (tu_failures) {
                fprintf(stderr, "FAIL [child] pass %d: %d check(s) failed\n", g.pass, tu_failures);
            }
            exit(tu_failures ? EXIT_FAILURE : EXIT_SUCCESS);
        }
        child_pid = pid;
        close(p2c[0]);
        close(c2p[1]);
        g.role = PARENT;
        g.rfd = c2p[0];
        g.wfd = p2c[1];
        run_pass(passes[p].child_auto);
        close(g.rfd);
        close(g.wfd);
        int status = 0;
        if (waitpid(pid, &status, 0) != pid) {
            FATAL("waitpid: %s", strerror(errno));
        }
        child_pid = 0;
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        CHECK(ok, "pass %d: the child exited with status 0 (%s %d)", g.pass,
              WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        if (!ok) {
            child_failed = 1;
        }
        int left = tu_shm_files(prefix, 0, 1);
        CHECK(left == 0, "pass %d: no /dev/shm/%s-* file left (%d)", g.pass, prefix, left);
        tu_shm_files(prefix, 1, 0);
    }
    unsetenv("RDM4_SHM_CMA");
    if (tu_failures || child_failed) {
        fprintf(stderr, "interop_shm: %d check(s) failed in the parent%s\n", tu_failures,
                child_failed ? ", and the child failed" : "");
        return EXIT_FAILURE;
    }
    printf("interop_shm: all checks passed\n");
    return EXIT_SUCCESS;
}
