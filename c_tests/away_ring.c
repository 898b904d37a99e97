/*
 * away_ring.c: a ring of 4 processes passes a token, then they meet at a
 * barrier over pipes, away from the library, and only then look at their
 * last sends.
 *
 * The parent forks 4 ranks; it never opens an endpoint (it relays the
 * names and runs the barriers, over pipes). Rank r takes the token from
 * rank r-1 and passes it to rank r+1: 400 hops, each an 8-byte tagged
 * message (tag: the hop; payload: a word of the hop's pattern), and on
 * every 50th hop from hop 25 on a 4 MiB tagged message sent just before
 * the token. (Not on the last hops: a long message also needs its
 * sender's progress, for the data its receiver asks for, so a sender that
 * goes away right after posting one holds its receiver up, as with MPI's
 * weak progress; the last long one is taken while its sender still waits
 * for the token.) A rank posts its next receives as soon as a hop
 * arrives, waits for the token in rdm4_wait (tu_cq_wait), checks it,
 * computes a little and passes it on; it checks each send's completion as
 * it comes, without waiting for it.
 *
 * After its last hop a rank does not wait for its last sends: it computes
 * for rank * 300 ms (odd ranks busily, even ranks asleep), with
 * RDM4_UDP_GIVEUP_MS=300 (harmless over shm), and meets the others at a
 * barrier: a blocking read() on a pipe, no library call, up to 900 ms for
 * the first to arrive. Then each polls: every send it made has completed
 * with status 0 (its last ones within 1 s of the barrier), nothing else
 * completed; a second barrier, and every rank closes.
 *
 * Checked: every byte of every message, every tag, length and status; the
 * ranks' exit statuses; nothing left in /dev/shm. Prints "ok - ..." per
 * check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define RANKS 4
#define HOPS 400
#define BIG_EVERY 50
#define BIG (4u << 20)
#define GIVEUP_MS 300

#define BIG_TAG (1ULL << 32)
#define CTX(kind, hop) ((void *)(uintptr_t)((kind) * 1000000u + (hop)))
enum { TOKEN_SEND = 1, TOKEN_RECV = 2, BIG_SEND = 3, BIG_RECV = 4 };

static char prefix[64];
/* Parent <-> rank pipes: up (rank writes), down (parent writes). */
static int up[RANKS][2], down[RANKS][2];

static int sender_of(int hop)
{
    return (hop - 1) % RANKS;
}

static int receiver_of(int hop)
{
    return hop % RANKS;
}

static int is_big(int hop)
{
    return hop % BIG_EVERY == BIG_EVERY / 2;
}

/* ---------------------------------------------------------------------- */
/* A rank                                                                   */
/* ---------------------------------------------------------------------- */

/* Sends not yet seen complete. */
struct pending {
    void *ctx[64];
    void *buf[64]; /* freed when it completes (NULL: nothing to free) */
    size_t n;
};

static void pending_add(struct pending *p, void *ctx, void *buf)
{
    if (p->n == 64) {
        FATAL("more than 64 sends outstanding");
    }
    p->ctx[p->n] = ctx;
    p->buf[p->n] = buf;
    p->n++;
}

/* Takes the completions of pending sends out of the store; each must have
 * status 0. Returns how many are still pending. */
static size_t pending_reap(struct pending *p, struct tu_cq *q)
{
    for (size_t i = 0; i < p->n;) {
        rdm4_cqe c;
        if (tu_cq_take(q, p->ctx[i], &c)) {
            uintptr_t v = (uintptr_t)p->ctx[i];
            if (c.status != RDM4_SUCCESS || !(c.flags & RDM4_CQ_SEND)) {
                CHECK(0, "send %lu (kind %lu) completed with %s, flags %#llx", (unsigned long)(v % 1000000),
                      (unsigned long)(v / 1000000), tu_status(c.status), (unsigned long long)c.flags);
            }
            free(p->buf[i]);
            p->ctx[i] = p->ctx[p->n - 1];
            p->buf[i] = p->buf[p->n - 1];
            p->n--;
        } else {
            i++;
        }
    }
    return p->n;
}

/* Posts the receives of hop `hop` (the token, and before it the big
 * message on big hops) from `prev`. */
static void post_receives(rdm4_ep *ep, rdm4_addr prev, int hop, uint64_t *tok, uint8_t *bigbuf)
{
    int32_t rc;
    if (is_big(hop)) {
        rc = rdm4_trecv(ep, bigbuf, BIG, prev, BIG_TAG | (uint64_t)hop, 0, CTX(BIG_RECV, hop));
        if (rc != RDM4_SUCCESS) {
            FATAL("rdm4_trecv (big, hop %d): %s", hop, tu_status(rc));
        }
    }
    rc = rdm4_trecv(ep, &tok[hop], 8, prev, (uint64_t)hop, 0, CTX(TOKEN_RECV, hop));
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_trecv (hop %d): %s", hop, tu_status(rc));
    }
}

/* Posts a send, retrying while the library says RDM4_EAGAIN (bounded). */
static void send_retry(struct tu_cq *q, const void *buf, size_t len, rdm4_addr to, uint64_t tag, void *ctx)
{
    double t0 = tu_now_ms();
    for (;;) {
        int32_t rc = rdm4_tsend(q->ep, buf, len, to, tag, ctx);
        if (rc == RDM4_SUCCESS) {
            return;
        }
        if (rc != RDM4_EAGAIN || tu_now_ms() - t0 > 5000 * tu_slow()) {
            FATAL("rdm4_tsend (tag %#llx, %zu bytes): %s", (unsigned long long)tag, len, tu_status(rc));
        }
        tu_cq_poll(q);
    }
}

static void barrier(int r)
{
    char b = 'b';
    tu_write_all(up[r][1], &b, 1);
    tu_read_all(down[r][0], &b, 1); /* blocking, away from the library */
}

static int rank_main(int r)
{
    static char role[32];
    snprintf(role, sizeof role, "[rank %d] ", r);
    tu_role = role;

    uint8_t me[RDM4_ADDR_LEN], names[RANKS][RDM4_ADDR_LEN];
    /* Odd ranks single-threaded (over udp shared with the responder
     * without a lock), even ones thread-safe. */
    rdm4_ep *ep = r % 2 ? tu_open_single(me) : tu_open(me);
    tu_write_all(up[r][1], me, sizeof me);
    tu_read_all(down[r][0], names, sizeof names);
    rdm4_addr next = tu_insert(ep, names[(r + 1) % RANKS]);
    rdm4_addr prev = tu_insert(ep, names[(r + RANKS - 1) % RANKS]);
    struct tu_cq q = { .ep = ep };
    struct tu_cq *qs[1] = { &q };

    static uint64_t tok[HOPS + 1];     /* received tokens, by hop */
    static uint64_t out_tok[HOPS + 1]; /* sent tokens: a buffer per send */
    uint8_t *bigbuf = malloc(BIG);
    if (!bigbuf) {
        FATAL("malloc");
    }
    struct pending sends = { .n = 0 };
    int first_recv = r == 0 ? RANKS : r;
    post_receives(ep, prev, first_recv, tok, bigbuf);
    int received = 0, sent = 0, bigs = 0;
    uint64_t work = 0;
    double token_wait_max = 0;

    for (int hop = 1; hop <= HOPS; hop++) {
        if (sender_of(hop) == r) {
            if (is_big(hop)) {
                uint8_t *m = malloc(BIG);
                if (!m) {
                    FATAL("malloc");
                }
                tu_fill(m, BIG, (uint32_t)hop);
                send_retry(&q, m, BIG, next, BIG_TAG | (uint64_t)hop, CTX(BIG_SEND, hop));
                pending_add(&sends, CTX(BIG_SEND, hop), m);
                bigs++;
            }
            out_tok[hop] = tu_word((uint64_t)hop, 7);
            send_retry(&q, &out_tok[hop], 8, next, (uint64_t)hop, CTX(TOKEN_SEND, hop));
            pending_add(&sends, CTX(TOKEN_SEND, hop), NULL);
            sent++;
        }
        if (receiver_of(hop) == r) {
            double t0 = tu_now_ms();
            rdm4_cqe c;
            if (is_big(hop)) {
                if (!tu_cq_wait(&q, CTX(BIG_RECV, hop), qs, 1, 10000 * tu_slow(), &c)) {
                    FATAL("no 4 MiB message of hop %d after 10 s", hop);
                }
                long bad = tu_verify(bigbuf, BIG, (uint32_t)hop);
                if (c.status != RDM4_SUCCESS || c.len != BIG || c.tag != (BIG_TAG | (uint64_t)hop) || bad >= 0) {
                    CHECK(0, "hop %d: the 4 MiB message: %s, len %llu, tag %#llx, first bad byte %ld", hop,
                          tu_status(c.status), (unsigned long long)c.len, (unsigned long long)c.tag, bad);
                }
                bigs++;
            }
            if (!tu_cq_wait(&q, CTX(TOKEN_RECV, hop), qs, 1, 10000 * tu_slow(), &c)) {
                FATAL("no token of hop %d after 10 s", hop);
            }
            double waited = tu_now_ms() - t0;
            token_wait_max = waited > token_wait_max ? waited : token_wait_max;
            if (c.status != RDM4_SUCCESS || c.len != 8 || c.tag != (uint64_t)hop || c.src != prev ||
                tok[hop] != tu_word((uint64_t)hop, 7)) {
                CHECK(0, "hop %d: the token: %s, len %llu, tag %llu, src %llu (want %llu), payload %s", hop,
                      tu_status(c.status), (unsigned long long)c.len, (unsigned long long)c.tag,
                      (unsigned long long)c.src, (unsigned long long)prev,
                      tok[hop] == tu_word((uint64_t)hop, 7) ? "right" : "wrong");
            }
            received++;
            if (hop + RANKS <= HOPS) {
                post_receives(ep, prev, hop + RANKS, tok, bigbuf);
            }
            /* The rank's own work before it passes the token on. */
            work += tu_compute_ms(hop % 25 == 0 ? 2.0 : 0.02);
        }
        pending_reap(&sends, &q);
    }
    CHECK(received == HOPS / RANKS && sent == HOPS / RANKS, "passed the token on: %d hops received, %d sent, %d of "
          "them with a 4 MiB message (longest wait for the token %.1f ms)", received, sent, bigs, token_wait_max);
    size_t left = sends.n;

    /* Away from the library: the rank's last computation, then the barrier. */
    double away0 = tu_now_ms();
    if (r % 2) {
        work += tu_compute_ms(r * GIVEUP_MS);
    } else {
        tu_sleep_us((long)r * GIVEUP_MS * 1000);
    }
    barrier(r);
    double away = tu_now_ms() - away0;

    double t0 = tu_now_ms();
    while (pending_reap(&sends, &q) > 0 && tu_now_ms() - t0 < 1000 * tu_slow()) {
        if (tu_cq_poll(&q) == 0) {
            (void)rdm4_wait(ep, 1);
        }
    }
    CHECK(sends.n == 0, "after %.0f ms away from the library (%s, then the barrier): the %zu sends still pending "
          "before it completed with status 0 within %.0f ms (%zu did not)", away, r % 2 ? "computing" : "asleep",
          left, tu_now_ms() - t0, sends.n);
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    for (size_t i = 0; i < q.n; i++) {
        fprintf(stderr, "  unexpected completion: context %p flags %#llx status %s\n", q.e[i].context,
                (unsigned long long)q.e[i].flags, tu_status(q.e[i].status));
    }
    barrier(r);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    free(bigbuf);
    printf("# rank %d: work %llx\n", r, (unsigned long long)(work & 0xff));
    return tu_failures ? 1 : 0;
}

/* ---------------------------------------------------------------------- */

static void parent_barrier(const char *what)
{
    char b;
    for (int r = 0; r < RANKS; r++) {
        tu_read_all(up[r][0], &b, 1);
    }
    for (int r = 0; r < RANKS; r++) {
        tu_write_all(down[r][1], &b, 1);
    }
    printf("# all ranks met at the %s\n", what);
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("away-ring", prefix, sizeof prefix);
    tu_setenv("RDM4_UDP_GIVEUP_MS", "300");
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = tu_kill_kids;

    for (int r = 0; r < RANKS; r++) {
        if (pipe(up[r]) != 0 || pipe(down[r]) != 0) {
            FATAL("pipe");
        }
    }
    for (int r = 0; r < RANKS; r++) {
        if (tu_fork(r)) {
            /* Only this rank's ends stay open, so that a rank's end is seen. */
            for (int k = 0; k < RANKS; k++) {
                close(up[k][0]);
                close(down[k][1]);
                if (k != r) {
                    close(up[k][1]);
                    close(down[k][0]);
                }
            }
            exit(rank_main(r));
        }
    }
    for (int r = 0; r < RANKS; r++) {
        close(up[r][1]);
        close(down[r][0]);
    }
    uint8_t names[RANKS][RDM4_ADDR_LEN];
    for (int r = 0; r < RANKS; r++) {
        tu_read_all(up[r][0], names[r], RDM4_ADDR_LEN);
    }
    for (int r = 0; r < RANKS; r++) {
        tu_write_all(down[r][1], names, sizeof names);
    }
    parent_barrier("barrier after the last hop");
    parent_barrier("barrier before closing");
    for (int r = 0; r < RANKS; r++) {
        char what[32];
        snprintf(what, sizeof what, "rank %d", r);
        tu_reap(tu_kids[r], what);
        tu_kids[r] = 0;
    }
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? 1 : 0;
}
