/*
 * away_idle.c: a receiver takes its messages and then computes, making no
 * library call for three times the udp device's give-up time; its sender's
 * sends must complete meanwhile, and the two go on talking afterwards.
 *
 * Two forked processes (the parent only waits for them; names and notices
 * go over pipes), RDM4_UDP_GIVEUP_MS=300 (harmless over shm):
 *  - the sender posts a 4 MiB and an 8-byte tagged message and waits for
 *    their completions in rdm4_wait, watching a pipe for the receiver's
 *    notices;
 *  - the receiver takes both (every byte checked), writes "away" on the
 *    pipe, computes for 900 ms (a busy loop, no library call), writes
 *    "back".
 * Checked: both sends complete with status 0 before the receiver is back
 * (they may complete before it goes away, not after it returns); then
 * messages both ways (8 B and 1 MiB each way) are delivered intact and
 * complete with status 0: the receiver was not given up. Every completion's
 * status is checked; both processes exit 0; nothing left in /dev/shm.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define GIVEUP_MS 300
#define BIG (4u << 20)
#define MID (1u << 20)
#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];
static int s2r[2], r2s[2];

/* A byte waiting on `fd` (without blocking), or 0. */
static char notice(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    char b = 0;
    if (poll(&p, 1, 0) == 1) {
        tu_read_all(fd, &b, 1);
    }
    return b;
}

/* Sends 8 B (tag `tag`) and 1 MiB (tag `tag` + 1) to `to`, receives the
 * same from it (tags `rtag`, `rtag` + 1); waits for all four, checks them. */
static void both_ways(struct tu_cq *q, rdm4_addr to, uint64_t tag, uint64_t rtag, const char *what)
{
    static uint8_t small_out[8], small_in[8];
    uint8_t *mid_out = malloc(MID), *mid_in = malloc(MID);
    if (!mid_out || !mid_in) {
        FATAL("malloc");
    }
    tu_fill(small_out, 8, (uint32_t)tag);
    tu_fill(mid_out, MID, (uint32_t)tag + 1);
    memset(small_in, 0, 8);
    memset(mid_in, 0, MID);
    EXPECT(rdm4_trecv(q->ep, small_in, 8, to, rtag, 0, CTX(10)), RDM4_SUCCESS);
    EXPECT(rdm4_trecv(q->ep, mid_in, MID, to, rtag + 1, 0, CTX(11)), RDM4_SUCCESS);
    EXPECT(rdm4_tsend(q->ep, small_out, 8, to, tag, CTX(12)), RDM4_SUCCESS);
    EXPECT(rdm4_tsend(q->ep, mid_out, MID, to, tag + 1, CTX(13)), RDM4_SUCCESS);
    struct tu_cq *qs[1] = { q };
    static const char *const names[4] = { "8 B in", "1 MiB in", "8 B out", "1 MiB out" };
    for (int k = 0; k < 4; k++) {
        rdm4_cqe c = tu_cq_expect(q, CTX(10 + k), qs, 1, 5000 * tu_slow(), names[k]);
        CHECK(c.status == RDM4_SUCCESS, "%s: %s completes with status 0 (%s)", what, names[k], tu_status(c.status));
    }
    CHECK(tu_verify(small_in, 8, (uint32_t)rtag) < 0 && tu_verify(mid_in, MID, (uint32_t)rtag + 1) < 0,
          "%s: 8 B and 1 MiB received intact", what);
    free(mid_out);
    free(mid_in);
}

static int sender_main(void)
{
    rdm4_addr r;
    rdm4_ep *ep = tu_open_and_meet(s2r[1], r2s[0], &r, 0);
    struct tu_cq q = { .ep = ep };
    uint8_t *big = malloc(BIG);
    static uint8_t small[8];
    if (!big) {
        FATAL("malloc");
    }
    tu_fill(big, BIG, 1);
    tu_fill(small, 8, 2);
    EXPECT(rdm4_tsend(ep, big, BIG, r, 1, CTX(1)), RDM4_SUCCESS);
    EXPECT(rdm4_tsend(ep, small, 8, r, 2, CTX(2)), RDM4_SUCCESS);

    /* Wait for both completions until the receiver is back. */
    double t0 = tu_now_ms(), away_at = -1, back_at = -1, done_at[2] = { -1, -1 };
    int32_t status[2] = { 1, 1 };
    while (back_at < 0 || done_at[0] < 0 || done_at[1] < 0) {
        if (tu_now_ms() - t0 > 10000 * tu_slow()) {
            FATAL("after 10 s: receiver away %s, back %s; sends done: %s, %s", away_at >= 0 ? "yes" : "no",
                  back_at >= 0 ? "yes" : "no", done_at[0] >= 0 ? "yes" : "no", done_at[1] >= 0 ? "yes" : "no");
        }
        if (tu_cq_poll(&q) == 0) {
            (void)rdm4_wait(ep, 1);
        }
        for (int k = 0; k < 2; k++) {
            rdm4_cqe c;
            if (tu_cq_take(&q, CTX(1 + k), &c)) {
                done_at[k] = tu_now_ms() - t0;
                status[k] = c.status;
            }
        }
        char b = notice(r2s[0]);
        if (b == 'A') {
            away_at = tu_now_ms() - t0;
        } else if (b == 'B') {
            back_at = tu_now_ms() - t0;
        } else if (b != 0) {
            FATAL("unexpected notice %c", b);
        }
    }
    static const char *const names[2] = { "the 4 MiB send", "the 8-byte send" };
    for (int k = 0; k < 2; k++) {
        CHECK(status[k] == RDM4_SUCCESS && done_at[k] < back_at,
              "%s completed with status 0 before the receiver was back (%s, %.0f ms after the receiver went away; "
              "it was away %.0f ms)",
              names[k], tu_status(status[k]), done_at[k] - away_at, back_at - away_at);
    }
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    free(big);

    /* It was not given up: messages both ways. */
    both_ways(&q, r, 3, 5, "afterwards");
    char b = 'E';
    tu_write_all(s2r[1], &b, 1);
    tu_read_all(r2s[0], &b, 1);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

static int receiver_main(void)
{
    rdm4_addr s;
    rdm4_ep *ep = tu_open_and_meet(r2s[1], s2r[0], &s, 0);
    struct tu_cq q = { .ep = ep };
    struct tu_cq *qs[1] = { &q };
    uint8_t *big = malloc(BIG);
    static uint8_t small[8];
    if (!big) {
        FATAL("malloc");
    }
    EXPECT(rdm4_trecv(ep, big, BIG, s, 1, 0, CTX(1)), RDM4_SUCCESS);
    EXPECT(rdm4_trecv(ep, small, 8, s, 2, 0, CTX(2)), RDM4_SUCCESS);
    rdm4_cqe c1 = tu_cq_expect(&q, CTX(1), qs, 1, 10000 * tu_slow(), "the 4 MiB message");
    rdm4_cqe c2 = tu_cq_expect(&q, CTX(2), qs, 1, 10000 * tu_slow(), "the 8-byte message");
    CHECK(c1.status == RDM4_SUCCESS && c1.len == BIG && tu_verify(big, BIG, 1) < 0,
          "the 4 MiB message arrived intact (%s)", tu_status(c1.status));
    CHECK(c2.status == RDM4_SUCCESS && c2.len == 8 && tu_verify(small, 8, 2) < 0,
          "the 8-byte message arrived intact (%s)", tu_status(c2.status));

    /* Away: compute on what came, no library call. */
    char b = 'A';
    tu_write_all(r2s[1], &b, 1);
    double t0 = tu_now_ms();
    uint64_t work = tu_compute_ms(3 * GIVEUP_MS);
    double away = tu_now_ms() - t0;
    b = 'B';
    tu_write_all(r2s[1], &b, 1);
    printf("# away for %.0f ms (work %llx)\n", away, (unsigned long long)(work & 0xff));
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    free(big);

    both_ways(&q, s, 5, 3, "afterwards");
    tu_read_all(s2r[0], &b, 1);
    tu_write_all(r2s[1], &b, 1);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("away-idle", prefix, sizeof prefix);
    tu_setenv("RDM4_UDP_GIVEUP_MS", "300");
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = tu_kill_kids;
    if (pipe(s2r) != 0 || pipe(r2s) != 0) {
        FATAL("pipe");
    }
    for (int k = 0; k < 2; k++) {
        if (tu_fork(k)) {
            tu_role = k == 0 ? "[sender] " : "[receiver] ";
            close(k == 0 ? s2r[0] : s2r[1]);
            close(k == 0 ? r2s[1] : r2s[0]);
            exit(k == 0 ? sender_main() : receiver_main());
        }
    }
    close(s2r[0]);
    close(s2r[1]);
    close(r2s[0]);
    close(r2s[1]);
    tu_reap(tu_kids[0], "the sender");
    tu_reap(tu_kids[1], "the receiver");
    tu_kids[0] = tu_kids[1] = 0;
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? 1 : 0;
}
