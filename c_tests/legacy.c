/*
 * legacy.c: an endpoint opened with RDM4_EP_LEGACY (protocol v4's baseline
 * only) and a full one work together through every fallback: messages of
 * each protocol both ways, RMA write and read (emulated: the legacy side
 * advertises no RDMA), and a fetching atomic, each verified; RDM4_LEGACY=1
 * gives the same as the flag; unknown attribute flags are refused.
 * Delivery complete (RDM4_MSG_DELIVERY_COMPLETE, RDM4_EP_DELIVERY_COMPLETE):
 * between full endpoints a send completes only once a receive has taken
 * the message; towards a legacy peer it fails with RDM4_ENOTSUP, and a
 * legacy endpoint refuses it at once.
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

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

static rdm4_ep *open_with(uint64_t flags, uint8_t addr[RDM4_ADDR_LEN])
{
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.flags = flags;
    return tu_open_attr(&at, addr);
}

/* Messages of each protocol from `x` to `y`, then RMA and an atomic by
 * `x` against `y`'s memory. */
static void exchange(rdm4_ep *x, rdm4_ep *y, rdm4_addr x_to_y, rdm4_addr y_to_x, const char *what)
{
    struct tu_cq qx = { .ep = x }, qy = { .ep = y };
    struct tu_cq *qs[2] = { &qx, &qy };
    static const size_t lens[3] = { 8, 40000, 1 << 20 };
    (void)y_to_x;
    for (int i = 0; i < 3; i++) {
        uint8_t *s = malloc(lens[i]), *r = calloc(1, lens[i]);
        if (!s || !r) {
            FATAL("malloc");
        }
        tu_fill(s, lens[i], 20 + i);
        EXPECT(rdm4_trecv(y, r, lens[i], RDM4_ADDR_UNSPEC, 7, 0, CTX(1)), RDM4_SUCCESS);
        EXPECT(rdm4_tsend(x, s, lens[i], x_to_y, 7, CTX(2)), RDM4_SUCCESS);
        rdm4_cqe c = tu_cq_expect(&qy, CTX(1), qs, 2, 5000, "the receive");
        CHECK(c.status == RDM4_SUCCESS && c.len == lens[i] && tu_verify(r, lens[i], 20 + i) < 0,
              "%s: %zu bytes received intact", what, lens[i]);
        c = tu_cq_expect(&qx, CTX(2), qs, 2, 5000, "the send");
        CHECK(c.status == RDM4_SUCCESS, "%s: the send of %zu bytes completes", what, lens[i]);
        free(s);
        free(r);
    }
    /* RMA into y's memory. */
    enum { M = 300000 };
    uint8_t *mem = calloc(1, M), *src = malloc(M), *back = calloc(1, M);
    if (!mem || !src || !back) {
        FATAL("malloc");
    }
    uint64_t key = 0;
    EXPECT(rdm4_mr_reg(y, mem, M, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &key), RDM4_SUCCESS);
    tu_fill(src, M, 33);
    EXPECT(rdm4_write(x, src, M, x_to_y, (uint64_t)(uintptr_t)mem, key, CTX(3)), RDM4_SUCCESS);
    rdm4_cqe c = tu_cq_expect(&qx, CTX(3), qs, 2, 5000, "the write");
    CHECK(c.status == RDM4_SUCCESS && tu_verify(mem, M, 33) < 0, "%s: RMA write lands (%s)", what,
          tu_status(c.status));
    EXPECT(rdm4_read(x, back, M, x_to_y, (uint64_t)(uintptr_t)mem, key, CTX(4)), RDM4_SUCCESS);
    c = tu_cq_expect(&qx, CTX(4), qs, 2, 5000, "the read");
    CHECK(c.status == RDM4_SUCCESS && tu_verify(back, M, 33) < 0, "%s: RMA read returns it", what);
    uint64_t *word = (uint64_t *)(void *)mem, add = 5, old = 0, before = word[0];
    EXPECT(rdm4_fetch_atomic(x, &add, 1, &old, RDM4_UINT64, RDM4_SUM, x_to_y, (uint64_t)(uintptr_t)mem, key, CTX(5)),
           RDM4_SUCCESS);
    c = tu_cq_expect(&qx, CTX(5), qs, 2, 5000, "the atomic");
    CHECK(c.status == RDM4_SUCCESS && old == before && word[0] == before + 5, "%s: fetch-add", what);
    EXPECT(rdm4_mr_close(y, key), RDM4_SUCCESS);
    free(mem);
    free(src);
    free(back);
}

int main(void)
{
    alarm(60);
    tu_set_prefix("legacy", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* Unknown flags are refused. */
    rdm4_ep_attr bad;
    rdm4_ep_attr_init(&bad);
    bad.flags = 1u << 5;
    rdm4_ep *none = NULL;
    EXPECT(rdm4_ep_open(&bad, &none), RDM4_EINVAL);

    for (int pass = 0; pass < 2; pass++) {
        /* Pass 0: the attribute flag; pass 1: RDM4_LEGACY=1 for the first
         * open only. */
        uint8_t addr_l[RDM4_ADDR_LEN], addr_f[RDM4_ADDR_LEN];
        if (pass == 1) {
            setenv("RDM4_LEGACY", "1", 1);
        }
        rdm4_ep *legacy = open_with(pass == 0 ? RDM4_EP_LEGACY : 0, addr_l);
        unsetenv("RDM4_LEGACY");
        rdm4_ep *full = open_with(0, addr_f);
        rdm4_addr l_to_f = tu_insert(legacy, addr_f), f_to_l = tu_insert(full, addr_l);
        exchange(full, legacy, f_to_l, l_to_f, pass == 0 ? "full to legacy (flag)" : "full to legacy (RDM4_LEGACY)");
        exchange(legacy, full, l_to_f, f_to_l, pass == 0 ? "legacy to full (flag)" : "legacy to full (RDM4_LEGACY)");
        EXPECT(rdm4_ep_close(legacy), RDM4_SUCCESS);
        EXPECT(rdm4_ep_close(full), RDM4_SUCCESS);
    }
    /* Delivery complete. */
    {
        uint8_t a1[RDM4_ADDR_LEN], a2[RDM4_ADDR_LEN], a3[RDM4_ADDR_LEN];
        rdm4_ep *f1 = open_with(0, a1), *f2 = open_with(RDM4_EP_DELIVERY_COMPLETE, a2);
        rdm4_ep *lg = open_with(RDM4_EP_LEGACY, a3);
        rdm4_addr f1_f2 = tu_insert(f1, a2), f2_f1 = tu_insert(f2, a1), f1_lg = tu_insert(f1, a3);
        rdm4_addr f2_lg = tu_insert(f2, a3), lg_f1 = tu_insert(lg, a1);
        struct tu_cq q1 = { .ep = f1 }, q2 = { .ep = f2 }, q3 = { .ep = lg };
        struct tu_cq *qs[3] = { &q1, &q2, &q3 };
        uint8_t s[4000], r[4000];
        tu_fill(s, sizeof s, 9);
        struct iovec iov = { s, sizeof s };
        rdm4_msg m = { &iov, 1, f1_f2, 3, 0, 0, CTX(60) };
        EXPECT(rdm4_sendmsg(f1, &m, RDM4_MSG_TAGGED | RDM4_MSG_DELIVERY_COMPLETE), RDM4_SUCCESS);
        /* Not before a receive takes it. */
        double t0 = tu_now_ms();
        while (tu_now_ms() - t0 < 100) {
            tu_cq_poll(&q1);
            tu_cq_poll(&q2);
        }
        CHECK(q1.n == 0, "a delivery-complete send waits for the receiver's receive (%zu entries)", q1.n);
        EXPECT(rdm4_trecv(f2, r, sizeof r, RDM4_ADDR_UNSPEC, 3, 0, CTX(61)), RDM4_SUCCESS);
        rdm4_cqe c = tu_cq_expect(&q1, CTX(60), qs, 3, 2000, "the DC send");
        CHECK(c.status == RDM4_SUCCESS && tu_verify(r, sizeof r, 9) < 0, "then it completes (%s)", tu_status(c.status));
        (void)tu_cq_expect(&q2, CTX(61), qs, 3, 2000, "the DC receive");
        /* Towards a legacy peer: ENOTSUP, by flag and by attribute. */
        m.addr = f1_lg;
        m.context = CTX(62);
        EXPECT(rdm4_sendmsg(f1, &m, RDM4_MSG_TAGGED | RDM4_MSG_DELIVERY_COMPLETE), RDM4_SUCCESS);
        c = tu_cq_expect(&q1, CTX(62), qs, 3, 2000, "DC towards a legacy peer");
        CHECK(c.status == RDM4_ENOTSUP, "DC towards a legacy peer: RDM4_ENOTSUP (%s)", tu_status(c.status));
        EXPECT(rdm4_tsend(f2, s, 8, f2_lg, 3, CTX(63)), RDM4_SUCCESS);
        c = tu_cq_expect(&q2, CTX(63), qs, 3, 2000, "an RDM4_EP_DELIVERY_COMPLETE send towards a legacy peer");
        CHECK(c.status == RDM4_ENOTSUP, "RDM4_EP_DELIVERY_COMPLETE applies to rdm4_tsend (%s)", tu_status(c.status));
        /* From a legacy endpoint: refused at once. */
        m.addr = lg_f1;
        EXPECT(rdm4_sendmsg(lg, &m, RDM4_MSG_DELIVERY_COMPLETE), RDM4_ENOTSUP);
        (void)f2_f1;
        EXPECT(rdm4_ep_close(f1), RDM4_SUCCESS);
        EXPECT(rdm4_ep_close(f2), RDM4_SUCCESS);
        EXPECT(rdm4_ep_close(lg), RDM4_SUCCESS);
    }
    /* Feature switches: RDM4_FEATURES_OFF takes one feature away (here
     * delivery complete) and leaves the rest; RDM4_CONSTANT_HEADER=1 asks
     * peers for a constant header length, and every fallback still works. */
    {
        uint8_t a1[RDM4_ADDR_LEN], a2[RDM4_ADDR_LEN];
        setenv("RDM4_FEATURES_OFF", "delivery_complete,runt", 1);
        setenv("RDM4_CONSTANT_HEADER", "1", 1);
        rdm4_ep *off = open_with(0, a1);
        unsetenv("RDM4_FEATURES_OFF");
        unsetenv("RDM4_CONSTANT_HEADER");
        rdm4_ep *full = open_with(0, a2);
        rdm4_addr off_full = tu_insert(off, a2), full_off = tu_insert(full, a1);
        exchange(full, off, full_off, off_full, "full to an endpoint with features off");
        exchange(off, full, off_full, full_off, "an endpoint with features off to full");
        struct tu_cq q1 = { .ep = off }, q2 = { .ep = full };
        struct tu_cq *qs[2] = { &q1, &q2 };
        uint8_t s[64] = { 0 };
        struct iovec iov = { s, sizeof s };
        rdm4_msg m = { &iov, 1, off_full, 0, 0, 0, CTX(70) };
        EXPECT(rdm4_sendmsg(off, &m, RDM4_MSG_DELIVERY_COMPLETE), RDM4_ENOTSUP);
        /* The full endpoint knows the other's features from the exchange:
         * refused at once. */
        m.addr = full_off;
        m.context = CTX(71);
        EXPECT(rdm4_sendmsg(full, &m, RDM4_MSG_DELIVERY_COMPLETE), RDM4_ENOTSUP);
        CHECK(tu_cq_poll(&q1) + tu_cq_poll(&q2) == 0, "no completion for refused sends");
        (void)qs;
        EXPECT(rdm4_ep_close(off), RDM4_SUCCESS);
        EXPECT(rdm4_ep_close(full), RDM4_SUCCESS);
        rdm4_ep *none = NULL;
        setenv("RDM4_FEATURES_OFF", "rdma_read,warp_drive", 1);
        EXPECT(rdm4_ep_open(NULL, &none), RDM4_EINVAL);
        unsetenv("RDM4_FEATURES_OFF");
    }
    setenv("RDM4_LEGACY", "yes", 1);
    uint8_t addr[RDM4_ADDR_LEN];
    (void)addr;
    EXPECT(rdm4_ep_open(NULL, &none), RDM4_EINVAL);
    unsetenv("RDM4_LEGACY");
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment left behind");
    return tu_failures ? 1 : 0;
}
