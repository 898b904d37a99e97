/*
 * away_compute.c: a target computes, making no library call for three
 * times the udp device's give-up time, while two initiators wait on
 * fetch-adds to its memory.
 *
 * Three forked processes (the parent only waits for them; names, the
 * counter's address and key, and the results go over pipes), with
 * RDM4_UDP_GIVEUP_MS=300 (harmless over shm) and RDM4_TIMEOUT_MS=60000:
 *  - the target registers a uint64_t counter (1000, rdm4_mr_reg: its
 *    atomics are served by the target's progress), says "go" to the
 *    initiators and computes for 900 ms (450 ms of busy loop, 450 ms
 *    asleep), then polls again, serving;
 *  - each initiator posts two fetch-adds (RDM4_SUM, RDM4_UINT64) at "go",
 *    waits 450 ms (in rdm4_wait, 1.5 times the give-up time), posts two
 *    more, and waits for the four completions.
 * Checked: every post returns RDM4_SUCCESS (not RDM4_EPEER); every
 * completion has status 0 (the 60 s operation timeout cannot have passed;
 * within 10 s); the counter ends at 1000 plus the sum of the operands
 * (1, 2, ..., 128: one bit each); the fetched old values are distinct and
 * chain up as one serial order of the eight adds would; the processes exit
 * 0; nothing left in /dev/shm. Prints "ok - ..." per check, failures to
 * stderr, exits 1 on any failure.
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
#define INITS 2
#define ADDS 4 /* per initiator */
#define START 1000u
#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];
/* t2i[i]: target -> initiator i; i2t[i]: initiator i -> target. */
static int t2i[INITS][2], i2t[INITS][2];

struct target_info {
    uint8_t name[RDM4_ADDR_LEN];
    uint64_t raddr, key;
};

struct result {
    uint64_t operand, old;
    int32_t status, post;
    double ms; /* after "go" */
};

/* ---------------------------------------------------------------------- */

static int target_main(void)
{
    tu_role = "[target] ";
    static _Alignas(64) uint64_t counter = START;
    struct target_info ti;
    rdm4_ep *ep = tu_open_single(ti.name); /* single-threaded: shared with the responder */
    EXPECT(rdm4_mr_reg(ep, &counter, sizeof counter, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &ti.key),
           RDM4_SUCCESS);
    ti.raddr = (uint64_t)(uintptr_t)&counter;
    for (int i = 0; i < INITS; i++) {
        tu_write_all(t2i[i][1], &ti, sizeof ti);
    }
    for (int i = 0; i < INITS; i++) {
        uint8_t name[RDM4_ADDR_LEN];
        tu_read_all(i2t[i][0], name, sizeof name);
        (void)tu_insert(ep, name);
    }
    /* Go, and away: compute, then sleep, no library call. */
    char b = 'G';
    for (int i = 0; i < INITS; i++) {
        tu_write_all(t2i[i][1], &b, 1);
    }
    double t0 = tu_now_ms();
    uint64_t work = tu_compute_ms(1.5 * GIVEUP_MS);
    tu_sleep_us((long)(1.5 * GIVEUP_MS * 1000));
    printf("# away for %.0f ms (work %llx)\n", tu_now_ms() - t0, (unsigned long long)(work & 0xff));
    if (tu_device(ep) == RDM4_DEVICE_UDP) {
        /* The requests that came meanwhile were taken by the responder. */
        uint64_t kept = tu_counter(ep, "udp_kept");
        CHECK(kept >= 1, "udp: the responder kept the requests that came while away (%llu)", (unsigned long long)kept);
    }

    /* Back: serve until both initiators report. */
    struct tu_cq q = { .ep = ep };
    struct result res[INITS][ADDS];
    int reported = 0;
    int got[INITS] = { 0 };
    t0 = tu_now_ms();
    while (reported < INITS) {
        if (tu_now_ms() - t0 > 20000 * tu_slow()) {
            FATAL("%d of %d initiators reported after 20 s", reported, INITS);
        }
        if (tu_cq_poll(&q) == 0) {
            (void)rdm4_wait(ep, 1);
        }
        for (int i = 0; i < INITS; i++) {
            struct pollfd p = { i2t[i][0], POLLIN, 0 };
            if (!got[i] && poll(&p, 1, 0) == 1) {
                tu_read_all(i2t[i][0], res[i], sizeof res[i]);
                got[i] = 1;
                reported++;
            }
        }
    }
    CHECK(q.n == 0, "no completion at the target (%zu)", q.n);

    /* The adds as one serial order: sorted by the value each found. */
    struct result all[INITS * ADDS];
    uint64_t sum = 0;
    int n = 0;
    for (int i = 0; i < INITS; i++) {
        for (int k = 0; k < ADDS; k++) {
            all[n++] = res[i][k];
            sum += res[i][k].operand;
        }
    }
    for (int a = 1; a < n; a++) {
        for (int z = a; z > 0 && all[z - 1].old > all[z].old; z--) {
            struct result t = all[z];
            all[z] = all[z - 1];
            all[z - 1] = t;
        }
    }
    int chain = all[0].old == START;
    for (int a = 1; a < n; a++) {
        chain &= all[a].old == all[a - 1].old + all[a - 1].operand;
    }
    int distinct = 1;
    for (int a = 1; a < n; a++) {
        distinct &= all[a].old != all[a - 1].old;
    }
    uint64_t final = counter; /* the adds are done: every initiator has its completions */
    CHECK(final == START + sum, "the counter is %llu: %u plus the sum of the %d operands (%llu)",
          (unsigned long long)final, START, n, (unsigned long long)sum);
    CHECK(distinct, "the %d fetched old values are distinct", n);
    CHECK(chain && final == all[n - 1].old + all[n - 1].operand,
          "the old values chain up from %u as one serial order of the adds", START);
    for (int a = 0; a < n; a++) {
        printf("# old %llu + %llu (completed %.0f ms after go)\n", (unsigned long long)all[a].old,
               (unsigned long long)all[a].operand, all[a].ms);
    }
    b = 'E';
    for (int i = 0; i < INITS; i++) {
        tu_write_all(t2i[i][1], &b, 1);
    }
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

/* ---------------------------------------------------------------------- */

static int initiator_main(int i)
{
    static char role[32];
    snprintf(role, sizeof role, "[initiator %d] ", i);
    tu_role = role;
    uint8_t me[RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open(me);
    struct target_info ti;
    tu_read_all(t2i[i][0], &ti, sizeof ti);
    rdm4_addr t = tu_insert(ep, ti.name);
    tu_write_all(i2t[i][1], me, sizeof me);
    struct tu_cq q = { .ep = ep };

    static uint64_t operand[ADDS], old[ADDS];
    struct result res[ADDS];
    memset(res, 0, sizeof res);
    char b;
    tu_read_all(t2i[i][0], &b, 1); /* "go": the target is away from now on */
    double t0 = tu_now_ms();
    int posted = 0, done = 0;
    while (done < ADDS) {
        double now = tu_now_ms() - t0;
        if (now > 10000 * tu_slow()) {
            FATAL("%d of %d fetch-adds completed after 10 s", done, ADDS);
        }
        /* Two at once, two more after 1.5 times the give-up time. */
        while (posted < (now < 1.5 * GIVEUP_MS ? ADDS / 2 : ADDS)) {
            int k = posted++;
            operand[k] = 1ULL << (i * ADDS + k);
            old[k] = 0xdeadbeef;
            res[k].operand = operand[k];
            res[k].status = 1;
            res[k].post = rdm4_fetch_atomic(ep, &operand[k], 1, &old[k], RDM4_UINT64, RDM4_SUM, t, ti.raddr,
                                            ti.key, CTX(k));
            CHECK(res[k].post == RDM4_SUCCESS, "fetch-add %d posted %.0f ms into the target's absence (%s)", k,
                  now, tu_status(res[k].post));
            if (res[k].post != RDM4_SUCCESS) {
                res[k].status = res[k].post;
                done++;
            }
        }
        if (tu_cq_poll(&q) == 0) {
            (void)rdm4_wait(ep, 1);
        }
        for (int k = 0; k < posted; k++) {
            rdm4_cqe c;
            if (tu_cq_take(&q, CTX(k), &c)) {
                res[k].status = c.status;
                res[k].old = old[k];
                res[k].ms = tu_now_ms() - t0;
                done++;
                CHECK(c.status == RDM4_SUCCESS &&
                          (c.flags & (RDM4_CQ_ATOMIC | RDM4_CQ_READ)) == (RDM4_CQ_ATOMIC | RDM4_CQ_READ),
                      "fetch-add %d (+%llu) completed with status 0 after %.0f ms: old value %llu (%s)", k,
                      (unsigned long long)operand[k], res[k].ms, (unsigned long long)old[k], tu_status(c.status));
            }
        }
    }
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    tu_write_all(i2t[i][1], res, sizeof res);
    tu_read_all(t2i[i][0], &b, 1); /* the target has checked */
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

/* ---------------------------------------------------------------------- */

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("away-compute", prefix, sizeof prefix);
    tu_setenv("RDM4_UDP_GIVEUP_MS", "300");
    tu_setenv("RDM4_TIMEOUT_MS", "60000");
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = tu_kill_kids;
    for (int i = 0; i < INITS; i++) {
        if (pipe(t2i[i]) != 0 || pipe(i2t[i]) != 0) {
            FATAL("pipe");
        }
    }
    for (int k = 0; k < 1 + INITS; k++) {
        if (tu_fork(k)) {
            /* Keep only this process's ends. */
            for (int i = 0; i < INITS; i++) {
                int mine = k == 0 || k == 1 + i;
                if (k != 0 || !mine) {
                    close(t2i[i][1]);
                    close(i2t[i][0]);
                }
                if (k == 0 || !mine) {
                    close(t2i[i][0]);
                    close(i2t[i][1]);
                }
            }
            exit(k == 0 ? target_main() : initiator_main(k - 1));
        }
    }
    for (int i = 0; i < INITS; i++) {
        close(t2i[i][0]);
        close(t2i[i][1]);
        close(i2t[i][0]);
        close(i2t[i][1]);
    }
    tu_reap(tu_kids[0], "the target");
    for (int i = 0; i < INITS; i++) {
        char what[32];
        snprintf(what, sizeof what, "initiator %d", i);
        tu_reap(tu_kids[1 + i], what);
    }
    memset(tu_kids, 0, sizeof tu_kids);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? 1 : 0;
}
