/*
 * cancel.c: rdm4_cancel of posted receives, and the receives that
 * rdm4_av_remove cancels.
 *
 * Two endpoints (A, B) in this process talk over the shm device with a
 * private segment prefix. Checked:
 *  - each kind of posted receive (untagged, tagged, directed, rdm4_recvmsg
 *    with one buffer and with three) completes with RDM4_ECANCELED, its
 *    context, len 0, and nothing written into its buffer; canceling it
 *    again is RDM4_ENOENT;
 *  - of two receives with one context, the older goes first;
 *  - a receive a message has filled is RDM4_ENOENT, its completion a
 *    success; an unknown context is RDM4_ENOENT;
 *  - messages sent after a cancel go to the receives still posted, in
 *    order (a canceled receive takes nothing);
 *  - operations that have not started: a fresh endpoint C's atomic write
 *    and fetch-add towards B wait for B's first answer (B is not polled):
 *    both cancel (RDM4_ECANCELED, B's memory unchanged, the result buffer
 *    untouched), again is RDM4_ENOENT; a 1 MiB send whose request left is
 *    under way: RDM4_EBUSY, and it completes once B receives it;
 *  - rdm4_av_remove of B cancels A's receives directed at B, not the
 *    others;
 *  - a bad handle is RDM4_EBADHANDLE.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
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

#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

/* Expects the canceled completion of a receive with `ctx` whose buffer
 * `buf` (len bytes, filled with 0xAB) must be untouched. */
static void expect_canceled(struct tu_cq *q, struct tu_cq **qs, void *ctx, const uint8_t *buf, size_t len,
                            const char *what)
{
    rdm4_cqe c = tu_cq_expect(q, ctx, qs, 2, 2000, what);
    CHECK(c.status == RDM4_ECANCELED && c.len == 0 && (c.flags & RDM4_CQ_RECV) != 0,
          "%s: RDM4_ECANCELED, len 0, a receive (%s, len %llu, flags %#llx)", what, tu_status(c.status),
          (unsigned long long)c.len, (unsigned long long)c.flags);
    CHECK(buf == NULL || tu_all(buf, len, 0xAB), "%s: nothing written into its buffer", what);
}

int main(void)
{
    alarm(60);
    tu_set_prefix("cancel", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    rdm4_ep *a, *b;
    rdm4_addr a_to_b, b_to_a;
    tu_pair(&a, &b, &a_to_b, &b_to_a);
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *qs[2] = { &qa, &qb };

    /* Receive buffers, 0xAB until a message lands. */
    static struct {
        uint8_t r1[64], r2[64], r3[64], r4[64], r5a[16], r5b[16], r5c[16];
        uint8_t o1[8], o2[8], o3[8], d1[8], d2[8], any[8];
    } B;
    memset(&B, 0xAB, sizeof B);

    /* Every kind of receive, canceled. */
    EXPECT(rdm4_recv(a, B.r1, sizeof B.r1, RDM4_ADDR_UNSPEC, CTX(1)), RDM4_SUCCESS);
    EXPECT(rdm4_trecv(a, B.r2, sizeof B.r2, RDM4_ADDR_UNSPEC, 77, 0, CTX(2)), RDM4_SUCCESS);
    EXPECT(rdm4_recv(a, B.r3, sizeof B.r3, a_to_b, CTX(3)), RDM4_SUCCESS);
    struct iovec one = { B.r4, sizeof B.r4 };
    rdm4_msg m4 = { &one, 1, RDM4_ADDR_UNSPEC, 0, 0, 0, CTX(4) };
    EXPECT(rdm4_recvmsg(a, &m4, 0), RDM4_SUCCESS);
    struct iovec three[3] = { { B.r5a, sizeof B.r5a }, { B.r5b, sizeof B.r5b }, { B.r5c, sizeof B.r5c } };
    rdm4_msg m5 = { three, 3, RDM4_ADDR_UNSPEC, 9, 0, 0, CTX(5) };
    EXPECT(rdm4_recvmsg(a, &m5, RDM4_MSG_TAGGED), RDM4_SUCCESS);
    for (uintptr_t k = 1; k <= 5; k++) {
        EXPECT(rdm4_cancel(a, CTX(k)), RDM4_SUCCESS);
    }
    expect_canceled(&qa, qs, CTX(1), B.r1, sizeof B.r1, "untagged receive");
    expect_canceled(&qa, qs, CTX(2), B.r2, sizeof B.r2, "tagged receive");
    expect_canceled(&qa, qs, CTX(3), B.r3, sizeof B.r3, "directed receive");
    expect_canceled(&qa, qs, CTX(4), B.r4, sizeof B.r4, "recvmsg, one buffer");
    expect_canceled(&qa, qs, CTX(5), NULL, 0, "recvmsg, three buffers");
    CHECK(tu_all(B.r5a, sizeof B.r5a, 0xAB) && tu_all(B.r5b, sizeof B.r5b, 0xAB) && tu_all(B.r5c, sizeof B.r5c, 0xAB),
          "recvmsg, three buffers: nothing written into them");
    for (uintptr_t k = 1; k <= 5; k++) {
        EXPECT(rdm4_cancel(a, CTX(k)), RDM4_ENOENT);
    }
    EXPECT(rdm4_cancel(a, CTX(12345)), RDM4_ENOENT);
    EXPECT(rdm4_cancel(NULL, CTX(1)), RDM4_EBADHANDLE);

    /* Two receives with one context: the older goes; messages sent after
     * the cancel go to the receives still posted, in order. */
    EXPECT(rdm4_recv(a, B.o1, sizeof B.o1, RDM4_ADDR_UNSPEC, CTX(20)), RDM4_SUCCESS);
    EXPECT(rdm4_recv(a, B.o2, sizeof B.o2, RDM4_ADDR_UNSPEC, CTX(20)), RDM4_SUCCESS);
    EXPECT(rdm4_recv(a, B.o3, sizeof B.o3, RDM4_ADDR_UNSPEC, CTX(21)), RDM4_SUCCESS);
    EXPECT(rdm4_cancel(a, CTX(20)), RDM4_SUCCESS);
    expect_canceled(&qa, qs, CTX(20), NULL, 0, "the older of two receives with one context");
    uint8_t s1[8], s2[8];
    tu_fill(s1, sizeof s1, 1);
    tu_fill(s2, sizeof s2, 2);
    EXPECT(rdm4_send(b, s1, sizeof s1, b_to_a, CTX(31)), RDM4_SUCCESS);
    EXPECT(rdm4_send(b, s2, sizeof s2, b_to_a, CTX(32)), RDM4_SUCCESS);
    rdm4_cqe c = tu_cq_expect(&qa, CTX(20), qs, 2, 2000, "the younger receive of context 20");
    CHECK(c.status == RDM4_SUCCESS && c.len == 8 && tu_verify(B.o2, 8, 1) < 0,
          "the first message went to the receive still posted (%s, len %llu)", tu_status(c.status),
          (unsigned long long)c.len);
    CHECK(tu_all(B.o1, sizeof B.o1, 0xAB), "the canceled receive took nothing");
    c = tu_cq_expect(&qa, CTX(21), qs, 2, 2000, "receive 21");
    CHECK(c.status == RDM4_SUCCESS && tu_verify(B.o3, 8, 2) < 0, "the second message went to the next receive");
    EXPECT(rdm4_cancel(a, CTX(21)), RDM4_ENOENT);
    (void)tu_cq_expect(&qb, CTX(31), qs, 2, 2000, "send 31");
    (void)tu_cq_expect(&qb, CTX(32), qs, 2, 2000, "send 32");

    /* Operations that have not started. */
    {
        uint8_t addr_c[RDM4_ADDR_LEN], addr_b[RDM4_ADDR_LEN];
        size_t alen = sizeof addr_b;
        EXPECT(rdm4_ep_getname(b, addr_b, &alen), RDM4_SUCCESS);
        rdm4_ep *c_ep = tu_open(addr_c);
        rdm4_addr c_to_b = tu_insert(c_ep, addr_b);
        struct tu_cq qc = { .ep = c_ep };
        struct tu_cq *q3[3] = { &qa, &qb, &qc };
        static uint64_t mem[8], src[8], operand = 5, result = 0xABAB;
        uint64_t key = 0;
        EXPECT(rdm4_mr_reg(b, mem, sizeof mem, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &key),
               RDM4_SUCCESS);
        tu_fill(src, sizeof src, 77);
        /* An atomic write waits for B's first answer (a write would go by
         * cross-memory attach at once), the fetch-add behind it. */
        EXPECT(rdm4_atomic(c_ep, src, 8, RDM4_UINT64, RDM4_SUM, c_to_b, (uint64_t)(uintptr_t)mem, key, CTX(50)),
               RDM4_SUCCESS);
        EXPECT(rdm4_fetch_atomic(c_ep, &operand, 1, &result, RDM4_UINT64, RDM4_SUM, c_to_b, (uint64_t)(uintptr_t)mem,
                                 key, CTX(51)),
               RDM4_SUCCESS);
        for (int i = 0; i < 20; i++) {
            tu_cq_poll(&qc); /* C progresses; B does not */
        }
        EXPECT(rdm4_cancel(c_ep, CTX(50)), RDM4_SUCCESS);
        EXPECT(rdm4_cancel(c_ep, CTX(51)), RDM4_SUCCESS);
        EXPECT(rdm4_cancel(c_ep, CTX(50)), RDM4_ENOENT);
        rdm4_cqe c = tu_cq_expect(&qc, CTX(50), &q3[2], 1, 2000, "the canceled atomic write");
        CHECK(c.status == RDM4_ECANCELED, "an atomic write waiting for its peer is canceled (%s)", tu_status(c.status));
        c = tu_cq_expect(&qc, CTX(51), &q3[2], 1, 2000, "the canceled atomic");
        CHECK(c.status == RDM4_ECANCELED && result == 0xABAB, "a fetch-add waiting for its peer is canceled (%s)",
              tu_status(c.status));
        /* A large send whose request left: under way. */
        enum { BIG = 1 << 20 };
        uint8_t *big = malloc(BIG), *sink = malloc(BIG);
        if (!big || !sink) {
            FATAL("malloc");
        }
        tu_fill(big, BIG, 78);
        EXPECT(rdm4_send(c_ep, big, BIG, c_to_b, CTX(52)), RDM4_SUCCESS);
        for (int i = 0; i < 20; i++) {
            tu_cq_poll(&qc);
        }
        EXPECT(rdm4_cancel(c_ep, CTX(52)), RDM4_EBUSY);
        EXPECT(rdm4_recv(b, sink, BIG, RDM4_ADDR_UNSPEC, CTX(53)), RDM4_SUCCESS);
        c = tu_cq_expect(&qb, CTX(53), q3, 3, 5000, "B's receive of the large message");
        CHECK(c.status == RDM4_SUCCESS && tu_verify(sink, BIG, 78) < 0, "the busy send still arrives whole");
        c = tu_cq_expect(&qc, CTX(52), q3, 3, 5000, "the large send");
        CHECK(c.status == RDM4_SUCCESS, "and completes (%s)", tu_status(c.status));
        /* Nothing of the canceled operations reached B, also after it progressed. */
        for (int i = 0; i < 50; i++) {
            tu_cq_poll(&qb);
            tu_cq_poll(&qc);
        }
        CHECK(tu_all(mem, sizeof mem, 0), "B's memory is unchanged by the canceled atomics");
        CHECK(qc.n == 0, "no other completion at C (%zu)", qc.n);
        EXPECT(rdm4_mr_close(b, key), RDM4_SUCCESS);
        EXPECT(rdm4_ep_close(c_ep), RDM4_SUCCESS);
        free(big);
        free(sink);
    }

    /* rdm4_av_remove cancels the receives directed at the removed address
     * only. */
    EXPECT(rdm4_recv(a, B.d1, sizeof B.d1, a_to_b, CTX(40)), RDM4_SUCCESS);
    EXPECT(rdm4_trecv(a, B.d2, sizeof B.d2, a_to_b, 5, 0, CTX(41)), RDM4_SUCCESS);
    EXPECT(rdm4_recv(a, B.any, sizeof B.any, RDM4_ADDR_UNSPEC, CTX(42)), RDM4_SUCCESS);
    EXPECT(rdm4_av_remove(a, &a_to_b, 1), RDM4_SUCCESS);
    expect_canceled(&qa, qs, CTX(40), B.d1, sizeof B.d1, "directed receive, address removed");
    expect_canceled(&qa, qs, CTX(41), B.d2, sizeof B.d2, "directed tagged receive, address removed");
    EXPECT(rdm4_cancel(a, CTX(42)), RDM4_SUCCESS);
    expect_canceled(&qa, qs, CTX(42), B.any, sizeof B.any, "the undirected receive stayed until canceled");
    CHECK(qa.n == 0 && qb.n == 0, "no other completion (A %zu, B %zu)", qa.n, qb.n);

    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    EXPECT(rdm4_cancel(a, CTX(1)), RDM4_EBADHANDLE);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment left behind");
    return tu_failures ? 1 : 0;
}
