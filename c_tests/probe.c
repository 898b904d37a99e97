/*
 * probe.c: rdm4_probe (peek, claim, discard) and rdm4_recv_claimed, as
 * MPI_Iprobe, MPI_Improbe / MPI_Mrecv and a probe that drops a message
 * need them.
 *
 * Two endpoints (A, B) in this process talk over the shm device with a
 * private segment prefix. B sends; A probes. Checked:
 *  - nothing waits: 0, and *entry untouched;
 *  - peek: the entry (length, tag, source, CQ data) of the oldest
 *    matching message, tag masks and source filters honoured, untagged
 *    and tagged apart; the message stays, and a receive takes it after;
 *  - claim: no receive matches the claimed message; rdm4_recv_claimed
 *    with the probe's context takes it, whole or truncated; a second
 *    rdm4_recv_claimed is RDM4_ENOENT; a second claim with a context
 *    that holds one is RDM4_EINVAL;
 *  - discard: the message is gone, no completion for it, the next one is
 *    received; the sender's send completes;
 *  - messages of every protocol: 8 B, 40 KB (medium), 1 MiB (long-CTS),
 *    probed while bytes may still arrive, claimed and received intact;
 *  - bad arguments: NULL entry, unknown flags, claim with discard.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];
static struct tu_cq qa, qb;
static struct tu_cq *qs[2] = { &qa, &qb };

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

/* Probes until a message is found (FATAL after 2 s); returns the entry. */
static rdm4_cqe probe_until(rdm4_ep *a, rdm4_addr src, uint64_t tag, uint64_t ignore, uint64_t flags, void *ctx,
                            const char *what)
{
    rdm4_cqe e;
    double t0 = tu_now_ms();
    for (;;) {
        int32_t rc = rdm4_probe(a, src, tag, ignore, flags, ctx, &e);
        if (rc == 1) {
            return e;
        }
        if (rc != 0) {
            FATAL("%s: rdm4_probe: %s", what, tu_status(rc));
        }
        tu_cq_poll(&qb); /* the sender progresses too */
        if (tu_now_ms() - t0 > 2000) {
            FATAL("%s: nothing found in 2 s", what);
        }
    }
}

int main(void)
{
    alarm(60);
    tu_set_prefix("probe", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    rdm4_ep *a, *b;
    rdm4_addr a_to_b, b_to_a;
    tu_pair(&a, &b, &a_to_b, &b_to_a);
    qa.ep = a;
    qb.ep = b;

    /* Nothing waits. */
    rdm4_cqe e;
    memset(&e, 0x5a, sizeof e);
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 0, ~0ull, RDM4_MSG_TAGGED, CTX(1), &e), 0);
    CHECK(tu_all(&e, sizeof e, 0x5a), "an empty probe leaves *entry untouched");
    /* Bad arguments. */
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 0, 0, 0, CTX(1), NULL), RDM4_EINVAL);
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 0, 0, 1u << 20, CTX(1), &e), RDM4_EINVAL);
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 0, 0, RDM4_PROBE_CLAIM | RDM4_PROBE_DISCARD, CTX(1), &e), RDM4_EINVAL);
    EXPECT(rdm4_probe(a, 999, 0, 0, 0, CTX(1), &e), RDM4_ENOADDR);
    EXPECT(rdm4_recv_claimed(a, CTX(1), NULL, 8), RDM4_EINVAL);
    EXPECT(rdm4_recv_claimed(a, CTX(1), &e, 8), RDM4_ENOENT);

    /* Peek: tag 0x1234 with CQ data, then an untagged one. */
    uint8_t s1[8], s2[8];
    tu_fill(s1, sizeof s1, 1);
    tu_fill(s2, sizeof s2, 2);
    rdm4_msg m1 = { &(struct iovec){ s1, sizeof s1 }, 1, b_to_a, 0x1234, 0, 77, CTX(101) };
    EXPECT(rdm4_sendmsg(b, &m1, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA), RDM4_SUCCESS);
    EXPECT(rdm4_send(b, s2, sizeof s2, b_to_a, CTX(102)), RDM4_SUCCESS);
    e = probe_until(a, RDM4_ADDR_UNSPEC, 0x1200, 0xff, RDM4_MSG_TAGGED, CTX(2), "peek, tag under a mask");
    CHECK(e.len == 8 && e.tag == 0x1234 && e.src == a_to_b && e.data == 77 && e.context == CTX(2) &&
              e.status == RDM4_SUCCESS && e.buf == NULL &&
              e.flags == (RDM4_CQ_RECV | RDM4_CQ_TAGGED | RDM4_CQ_REMOTE_CQ_DATA),
          "peek: len %llu tag %#llx src %llu data %llu flags %#llx", (unsigned long long)e.len,
          (unsigned long long)e.tag, (unsigned long long)e.src, (unsigned long long)e.data,
          (unsigned long long)e.flags);
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 0x1300, 0xff, RDM4_MSG_TAGGED, CTX(2), &e), 0);
    e = probe_until(a, a_to_b, 0, 0, 0, CTX(3), "peek, untagged from B");
    CHECK(e.len == 8 && (e.flags & RDM4_CQ_MSG) != 0, "peek finds the untagged message apart");
    /* Both stay for receives. */
    uint8_t r1[8], r2[8];
    EXPECT(rdm4_trecv(a, r1, sizeof r1, RDM4_ADDR_UNSPEC, 0x1234, 0, CTX(11)), RDM4_SUCCESS);
    EXPECT(rdm4_recv(a, r2, sizeof r2, RDM4_ADDR_UNSPEC, CTX(12)), RDM4_SUCCESS);
    rdm4_cqe c = tu_cq_expect(&qa, CTX(11), qs, 2, 2000, "the peeked tagged message");
    CHECK(c.status == RDM4_SUCCESS && tu_verify(r1, 8, 1) < 0, "a receive takes the peeked tagged message");
    c = tu_cq_expect(&qa, CTX(12), qs, 2, 2000, "the peeked untagged message");
    CHECK(c.status == RDM4_SUCCESS && tu_verify(r2, 8, 2) < 0, "a receive takes the peeked untagged message");
    (void)tu_cq_expect(&qb, CTX(101), qs, 2, 2000, "send 101");
    (void)tu_cq_expect(&qb, CTX(102), qs, 2, 2000, "send 102");

    /* Claim, for each protocol; a posted receive does not get it. */
    static const size_t lens[3] = { 8, 40000, 1 << 20 };
    for (int i = 0; i < 3; i++) {
        size_t len = lens[i];
        uint8_t *s = malloc(len), *r = malloc(len), *other = malloc(len);
        if (!s || !r || !other) {
            FATAL("malloc");
        }
        tu_fill(s, len, 10 + i);
        memset(r, 0, len);
        EXPECT(rdm4_tsend(b, s, len, b_to_a, 50 + i, CTX(200 + i)), RDM4_SUCCESS);
        e = probe_until(a, a_to_b, 50 + i, 0, RDM4_MSG_TAGGED | RDM4_PROBE_CLAIM, CTX(300 + i), "claim");
        CHECK(e.len == len && e.tag == (uint64_t)(50 + i), "claim of %zu bytes: the entry (len %llu)", len,
              (unsigned long long)e.len);
        EXPECT(rdm4_probe(a, a_to_b, 50 + i, 0, RDM4_MSG_TAGGED | RDM4_PROBE_CLAIM, CTX(300 + i), &e), 0);
        /* A receive posted now does not take the claimed message. */
        EXPECT(rdm4_trecv(a, other, len, RDM4_ADDR_UNSPEC, 50 + i, 0, CTX(400 + i)), RDM4_SUCCESS);
        EXPECT(rdm4_recv_claimed(a, CTX(300 + i), r, len), RDM4_SUCCESS);
        c = tu_cq_expect(&qa, CTX(300 + i), qs, 2, 5000, "the claimed message");
        CHECK(c.status == RDM4_SUCCESS && c.len == len && tu_verify(r, len, 10 + i) < 0 && c.tag == (uint64_t)(50 + i),
              "%zu bytes claimed and received intact (%s, len %llu)", len, tu_status(c.status),
              (unsigned long long)c.len);
        EXPECT(rdm4_recv_claimed(a, CTX(300 + i), r, len), RDM4_ENOENT);
        (void)tu_cq_expect(&qb, CTX(200 + i), qs, 2, 5000, "the claimed message's send");
        EXPECT(rdm4_cancel(a, CTX(400 + i)), RDM4_SUCCESS);
        c = tu_cq_expect(&qa, CTX(400 + i), qs, 2, 2000, "the receive posted after the claim");
        CHECK(c.status == RDM4_ECANCELED, "the receive posted after the claim got nothing (%s)", tu_status(c.status));
        free(s);
        free(r);
        free(other);
    }
    /* Truncated, and a context that holds a claim already. */
    EXPECT(rdm4_tsend(b, s1, sizeof s1, b_to_a, 60, CTX(210)), RDM4_SUCCESS);
    EXPECT(rdm4_tsend(b, s2, sizeof s2, b_to_a, 61, CTX(211)), RDM4_SUCCESS);
    (void)probe_until(a, RDM4_ADDR_UNSPEC, 60, 0, RDM4_MSG_TAGGED | RDM4_PROBE_CLAIM, CTX(310), "claim 60");
    (void)probe_until(a, RDM4_ADDR_UNSPEC, 61, 0, RDM4_MSG_TAGGED, CTX(310), "peek 61");
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 61, 0, RDM4_MSG_TAGGED | RDM4_PROBE_CLAIM, CTX(310), &e), RDM4_EINVAL);
    uint8_t small[4];
    EXPECT(rdm4_recv_claimed(a, CTX(310), small, sizeof small), RDM4_SUCCESS);
    c = tu_cq_expect(&qa, CTX(310), qs, 2, 2000, "the truncated claimed message");
    CHECK(c.status == RDM4_ETRUNC && c.len == 4 && c.olen == 8, "a claimed message longer than the buffer: ETRUNC");

    /* Discard: gone without a completion; the next message is received. */
    e = probe_until(a, RDM4_ADDR_UNSPEC, 61, 0, RDM4_MSG_TAGGED | RDM4_PROBE_DISCARD, CTX(320), "discard");
    CHECK(e.len == 8 && e.tag == 61, "discard reports the message it dropped");
    EXPECT(rdm4_probe(a, RDM4_ADDR_UNSPEC, 61, 0, RDM4_MSG_TAGGED, CTX(320), &e), 0);
    uint8_t *big = malloc(1 << 20);
    if (!big) {
        FATAL("malloc");
    }
    tu_fill(big, 1 << 20, 7);
    EXPECT(rdm4_tsend(b, big, 1 << 20, b_to_a, 62, CTX(212)), RDM4_SUCCESS);
    (void)probe_until(a, RDM4_ADDR_UNSPEC, 62, 0, RDM4_MSG_TAGGED | RDM4_PROBE_DISCARD, CTX(321), "discard 1 MiB");
    c = tu_cq_expect(&qb, CTX(212), qs, 2, 5000, "the discarded 1 MiB message's send");
    CHECK(c.status == RDM4_SUCCESS, "the sender of a discarded message completes (%s)", tu_status(c.status));
    EXPECT(rdm4_tsend(b, s2, sizeof s2, b_to_a, 63, CTX(213)), RDM4_SUCCESS);
    uint8_t r3[8];
    EXPECT(rdm4_trecv(a, r3, sizeof r3, RDM4_ADDR_UNSPEC, 0, ~0ull, CTX(13)), RDM4_SUCCESS);
    c = tu_cq_expect(&qa, CTX(13), qs, 2, 2000, "the message after the discarded ones");
    CHECK(c.tag == 63 && tu_verify(r3, 8, 2) < 0, "a catch-all receive gets the next message, not a discarded one");
    (void)tu_cq_expect(&qb, CTX(210), qs, 2, 2000, "send 210");
    (void)tu_cq_expect(&qb, CTX(211), qs, 2, 2000, "send 211");
    (void)tu_cq_expect(&qb, CTX(213), qs, 2, 2000, "send 213");
    double t0 = tu_now_ms();
    while (tu_now_ms() - t0 < 50) {
        tu_cq_poll(&qa);
        tu_cq_poll(&qb);
    }
    CHECK(qa.n == 0 && qb.n == 0, "no other completion (A %zu, B %zu)", qa.n, qb.n);
    free(big);

    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment left behind");
    return tu_failures ? 1 : 0;
}
