/*
 * peer_close.c: a receiver ends right after its last receive, and its
 * sender's sends must still complete with status 0; afterwards operations
 * towards it fail with RDM4_EPEER instead of hanging.
 *
 * Two rounds, each with two forked processes (the parent only waits for
 * them; names, and the receiver's memory address and key, go over pipes):
 *  - exit: the receiver returns from main with its endpoint open (no
 *    rdm4_ep_close: the library's exit handling must give the sender what
 *    it owes);
 *  - close: the receiver calls rdm4_ep_close, then returns from main.
 * The sender posts a 4 MiB, a 200,000-byte and an 8-byte tagged message;
 * the receiver takes them (the last completion polled, it ends at once;
 * every byte checked afterwards). Checked: the three sends complete with
 * status 0 (within 5 s); once the parent has seen the receiver exit, an
 * 8-byte send, a 1 MiB send, an 8-byte rdm4_read and a fetch-add towards
 * it each fail with RDM4_EPEER, at once or as their completion within 1 s
 * (in the exit round the first 8-byte send may also complete with status
 * 0: the header lets a send to a dead peer complete until its death is
 * found; a second one, after the others failed, must fail); both processes
 * exit 0 (a signal is a failure); nothing left in /dev/shm (the exit
 * round's segments go at the close round's opens).
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

#define MSGS 3
#define CTX(n) ((void *)(uintptr_t)(n))

static const size_t lens[MSGS] = { 4u << 20, 200000, 8 };

enum ending { EXITS, CLOSES };

static char prefix[64];
static int s2r[2], r2s[2], p2s[2];

struct receiver_info {
    uint8_t name[RDM4_ADDR_LEN];
    uint64_t raddr, key;
};

/* Posting `rc`, then (if it was accepted) its completion: RDM4_EPEER, at
 * once or within 1 s; with `may_succeed`, status 0 is accepted too. */
static void expect_peer_gone(struct tu_cq *q, int32_t rc, void *ctx, const char *what, int may_succeed)
{
    if (rc != RDM4_SUCCESS) {
        CHECK(rc == RDM4_EPEER, "%s towards the ended receiver is refused with RDM4_EPEER (%s)", what,
              tu_status(rc));
        return;
    }
    struct tu_cq *qs[1] = { q };
    rdm4_cqe c;
    double t0 = tu_now_ms();
    int got = tu_cq_wait(q, ctx, qs, 1, 1000 * tu_slow(), &c);
    CHECK(got && (c.status == RDM4_EPEER || (may_succeed && c.status == RDM4_SUCCESS)),
          "%s towards the ended receiver completes with RDM4_EPEER%s (%s after %.0f ms)", what,
          may_succeed ? " or status 0 (its death not found yet)" : "", got ? tu_status(c.status) : "nothing",
          tu_now_ms() - t0);
}

static int sender_main(enum ending ending)
{
    uint8_t me[RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open(me);
    tu_write_all(s2r[1], me, sizeof me);
    struct receiver_info ri;
    tu_read_all(r2s[0], &ri, sizeof ri);
    rdm4_addr r = tu_insert(ep, ri.name);
    struct tu_cq q = { .ep = ep };
    struct tu_cq *qs[1] = { &q };

    uint8_t *bufs[MSGS];
    for (int k = 0; k < MSGS; k++) {
        bufs[k] = malloc(lens[k]);
        if (!bufs[k]) {
            FATAL("malloc");
        }
        tu_fill(bufs[k], lens[k], 10 + (uint32_t)k);
        EXPECT(rdm4_tsend(ep, bufs[k], lens[k], r, (uint64_t)k, CTX(k)), RDM4_SUCCESS);
    }
    double t0 = tu_now_ms();
    for (int k = 0; k < MSGS; k++) {
        rdm4_cqe c;
        int got = tu_cq_wait(&q, CTX(k), qs, 1, 5000 * tu_slow(), &c);
        CHECK(got && c.status == RDM4_SUCCESS, "the %zu-byte send completes with status 0 (%s after %.0f ms)",
              lens[k], got ? tu_status(c.status) : "nothing", tu_now_ms() - t0);
        free(bufs[k]);
    }
    CHECK(q.n == 0, "no other completion (%zu)", q.n);

    /* The parent saw the receiver exit: everything towards it fails. */
    char b;
    tu_read_all(p2s[0], &b, 1);
    static uint8_t small[8];
    uint8_t *mid = calloc(1, 1 << 20);
    static uint64_t got8, one = 1, old;
    if (!mid) {
        FATAL("calloc");
    }
    expect_peer_gone(&q, rdm4_tsend(ep, small, 8, r, 10, CTX(10)), CTX(10), "an 8-byte send", ending == EXITS);
    expect_peer_gone(&q, rdm4_tsend(ep, mid, 1 << 20, r, 11, CTX(11)), CTX(11), "a 1 MiB send", 0);
    expect_peer_gone(&q, rdm4_read(ep, &got8, 8, r, ri.raddr, ri.key, CTX(12)), CTX(12), "an 8-byte read", 0);
    expect_peer_gone(&q,
                     rdm4_fetch_atomic(ep, &one, 1, &old, RDM4_UINT64, RDM4_SUM, r, ri.raddr + 8, ri.key, CTX(13)),
                     CTX(13), "a fetch-add", 0);
    expect_peer_gone(&q, rdm4_tsend(ep, small, 8, r, 14, CTX(14)), CTX(14), "another 8-byte send", 0);
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    free(mid);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

static int receiver_main(enum ending ending)
{
    struct receiver_info ri;
    rdm4_ep *ep = tu_open_single(ri.name); /* single-threaded: shared with the responder */
    static uint64_t mem[8192];
    EXPECT(rdm4_mr_reg(ep, mem, sizeof mem, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &ri.key),
           RDM4_SUCCESS);
    ri.raddr = (uint64_t)(uintptr_t)mem;
    tu_write_all(r2s[1], &ri, sizeof ri);
    uint8_t s_name[RDM4_ADDR_LEN];
    tu_read_all(s2r[0], s_name, sizeof s_name);
    rdm4_addr s = tu_insert(ep, s_name);
    struct tu_cq q = { .ep = ep };
    struct tu_cq *qs[1] = { &q };
    uint8_t *bufs[MSGS];
    for (int k = 0; k < MSGS; k++) {
        bufs[k] = calloc(1, lens[k]);
        if (!bufs[k]) {
            FATAL("calloc");
        }
        EXPECT(rdm4_trecv(ep, bufs[k], lens[k], s, (uint64_t)k, 0, CTX(k)), RDM4_SUCCESS);
    }
    rdm4_cqe c[MSGS];
    for (int k = 0; k < MSGS; k++) {
        c[k] = tu_cq_expect(&q, CTX(k), qs, 1, 10000 * tu_slow(), "a message");
    }
    /* The last receive is in: end at once. */
    if (ending == CLOSES) {
        EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    }
    for (int k = 0; k < MSGS; k++) {
        CHECK(c[k].status == RDM4_SUCCESS && c[k].len == lens[k] && tu_verify(bufs[k], lens[k], 10 + (uint32_t)k) < 0,
              "the %zu-byte message arrived intact (%s)", lens[k], tu_status(c[k].status));
        free(bufs[k]);
    }
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    return tu_failures ? 1 : 0; /* EXITS: with the endpoint still open */
}

static void run(enum ending ending)
{
    const char *name = ending == EXITS ? "exit" : "close";
    if (pipe(s2r) != 0 || pipe(r2s) != 0 || pipe(p2s) != 0) {
        FATAL("pipe");
    }
    for (int k = 0; k < 2; k++) {
        if (tu_fork(k)) {
            static char role[48];
            snprintf(role, sizeof role, "[%s round, %s] ", name, k == 0 ? "sender" : "receiver");
            tu_role = role;
            close(k == 0 ? s2r[0] : s2r[1]);
            close(k == 0 ? r2s[1] : r2s[0]);
            close(p2s[1]);
            if (k == 1) {
                close(p2s[0]);
            }
            exit(k == 0 ? sender_main(ending) : receiver_main(ending));
        }
    }
    close(s2r[0]);
    close(s2r[1]);
    close(r2s[0]);
    close(r2s[1]);
    close(p2s[0]);
    char what[64];
    snprintf(what, sizeof what, "%s round: the receiver", name);
    tu_reap(tu_kids[1], what);
    tu_kids[1] = 0;
    char b = 'X';
    tu_write_all(p2s[1], &b, 1);
    close(p2s[1]);
    snprintf(what, sizeof what, "%s round: the sender", name);
    tu_reap(tu_kids[0], what);
    tu_kids[0] = 0;
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("peer-close", prefix, sizeof prefix);
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = tu_kill_kids;
    run(EXITS);
    run(CLOSES);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? 1 : 0;
}
