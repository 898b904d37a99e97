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
