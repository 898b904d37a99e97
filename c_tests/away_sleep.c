/*
 * away_sleep.c: a receiver that sleeps (on the endpoint's descriptor, or
 * in rdm4_wait) and, once it has its last message, blocks on a pipe away
 * from the library; its sender must still get every send completion.
 *
 * Two rounds, each with two forked processes (the parent only waits for
 * them; names go over pipes), RDM4_UDP_GIVEUP_MS=300 (harmless over shm):
 *  - epoll: the receiver sleeps in epoll_wait on rdm4_ep_fd, an event loop
 *    as the header describes it: rdm4_poll until it returns 0, then
 *    rdm4_trywait, and sleep only on RDM4_SUCCESS (RDM4_EAGAIN: poll
 *    again);
 *  - wait: the receiver sleeps in rdm4_wait, then polls.
 * The sender posts 50 tagged messages of 200,000 bytes at once and waits
 * (in rdm4_wait) for their completions. The receiver keeps 4 receives
 * posted, checks every byte of each message as it comes, reposts, and
 * after the 50th tells the sender and blocks in read() on a pipe, not
 * calling the library, until the sender has reported. Checked: all 50
 * send completions arrive with status 0 (within 10 s) while the receiver
 * is away; every receive completion (status, length, tag, source, bytes);
 * no other completion; both processes exit 0; nothing left in /dev/shm.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define MSGS 50
#define LEN 200000
#define WINDOW 4
#define CTX(n) ((void *)(uintptr_t)(n))

enum mode { BY_EPOLL, BY_WAIT };

static char prefix[64];
/* s2r: the sender writes (its name, then its report); r2s: the receiver
 * writes (its name, then "all received"). */
static int s2r[2], r2s[2];

static int sender_main(void)
{
    tu_role = "[sender] ";
    rdm4_addr r;
    rdm4_ep *ep = tu_open_and_meet(s2r[1], r2s[0], &r, 0);
    struct tu_cq q = { .ep = ep };
    uint8_t *bufs = malloc((size_t)MSGS * LEN);
    if (!bufs) {
        FATAL("malloc");
    }
    for (int i = 0; i < MSGS; i++) {
        tu_fill(bufs + (size_t)i * LEN, LEN, 100 + (uint32_t)i);
    }
    double t0 = tu_now_ms();
    for (int i = 0; i < MSGS; i++) {
        int32_t rc;
        while ((rc = rdm4_tsend(ep, bufs + (size_t)i * LEN, LEN, r, (uint64_t)i, CTX(i))) == RDM4_EAGAIN) {
            if (tu_now_ms() - t0 > 10000 * tu_slow()) {
                FATAL("rdm4_tsend %d: still RDM4_EAGAIN after 10 s", i);
            }
            tu_cq_poll(&q);
        }
        if (rc != RDM4_SUCCESS) {
            FATAL("rdm4_tsend %d: %s", i, tu_status(rc));
        }
    }
    /* Wait for every completion, sleeping in rdm4_wait meanwhile. */
    int done = 0, good = 0;
    double last = 0;
    while (done < MSGS && tu_now_ms() - t0 < 10000 * tu_slow()) {
        if (tu_cq_poll(&q) == 0) {
            (void)rdm4_wait(ep, 10);
            continue;
        }
        for (int i = 0; i < MSGS; i++) {
            rdm4_cqe c;
            if (tu_cq_take(&q, CTX(i), &c)) {
                done++;
                last = tu_now_ms() - t0;
                if (c.status == RDM4_SUCCESS && (c.flags & (RDM4_CQ_SEND | RDM4_CQ_TAGGED)) ==
                                                    (RDM4_CQ_SEND | RDM4_CQ_TAGGED)) {
                    good++;
                } else {
                    CHECK(0, "send %d completed with %s (flags %#llx) after %.0f ms", i, tu_status(c.status),
                          (unsigned long long)c.flags, last);
                }
            }
        }
    }
    CHECK(done == MSGS && good == MSGS,
          "%d of %d sends of %d bytes completed, %d with status 0 (the last after %.0f ms)", done, MSGS, LEN, good,
          last);
    CHECK(q.n == 0, "no other completion (%zu)", q.n);
    /* Has the receiver been away meanwhile? It said so before it blocked. */
    char b;
    tu_read_all(r2s[0], &b, 1);
    CHECK(b == 'D', "the receiver had all %d messages before it went away", MSGS);
    b = done == MSGS && good == MSGS ? 'Y' : 'N';
    tu_write_all(s2r[1], &b, 1);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    free(bufs);
    return tu_failures ? 1 : 0;
}

/* The receive buffer (slot) of each message. */
static int slot_of[MSGS];

/* Takes the receive completions that came: checks them, reposts into the
 * slot each one freed. */
static void take_receives(rdm4_ep *ep, rdm4_addr s, uint8_t *slots, rdm4_cqe *es, int n, int *received,
                          int *next_post)
{
    for (int k = 0; k < n; k++) {
        rdm4_cqe *c = &es[k];
        uintptr_t i = (uintptr_t)c->context;
        if (i >= MSGS) {
            CHECK(0, "a completion with an unknown context %p (status %s)", c->context, tu_status(c->status));
            continue;
        }
        uint8_t *slot = slots + (size_t)slot_of[i] * LEN;
        long bad = tu_verify(slot, LEN, 100 + (uint32_t)i);
        if (c->status != RDM4_SUCCESS || c->len != LEN || c->tag != i || c->src != s || c->buf != slot ||
            !(c->flags & RDM4_CQ_RECV) || bad >= 0) {
            CHECK(0, "message %lu: %s, len %llu, tag %llu, src %llu, first bad byte %ld", (unsigned long)i,
                  tu_status(c->status), (unsigned long long)c->len, (unsigned long long)c->tag,
                  (unsigned long long)c->src, bad);
        }
        (*received)++;
        /* The application's own work on the message, then the next receive. */
        (void)tu_compute_ms(0.5);
        if (*next_post < MSGS) {
            slot_of[*next_post] = slot_of[i];
            int32_t rc = rdm4_trecv(ep, slot, LEN, s, (uint64_t)*next_post, 0, CTX(*next_post));
            if (rc != RDM4_SUCCESS) {
                FATAL("rdm4_trecv %d: %s", *next_post, tu_status(rc));
            }
            (*next_post)++;
        }
    }
}

static int receiver_main(enum mode mode)
{
    tu_role = mode == BY_EPOLL ? "[receiver, epoll] " : "[receiver, rdm4_wait] ";
    rdm4_addr s;
    rdm4_ep *ep = tu_open_and_meet(r2s[1], s2r[0], &s, 0);
    uint8_t *slots = malloc((size_t)WINDOW * LEN);
    if (!slots) {
        FATAL("malloc");
    }
    int next_post = 0, received = 0;
    for (; next_post < WINDOW; next_post++) {
        slot_of[next_post] = next_post;
        EXPECT(rdm4_trecv(ep, slots + (size_t)next_post * LEN, LEN, s, (uint64_t)next_post, 0, CTX(next_post)),
               RDM4_SUCCESS);
    }
    int epfd = -1;
    if (mode == BY_EPOLL) {
        int fd = rdm4_ep_fd(ep);
        epfd = epoll_create1(0);
        struct epoll_event ev = { .events = EPOLLIN };
        if (fd < 0 || epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            FATAL("rdm4_ep_fd %d, epoll", fd);
        }
    }
    int sleeps = 0, quiet = 0, trywait_again = 0;
    double t0 = tu_now_ms();
    while (received < MSGS) {
        if (tu_now_ms() - t0 > 20000 * tu_slow()) {
            FATAL("%d of %d messages after 20 s", received, MSGS);
        }
        rdm4_cqe es[8];
        int n = rdm4_poll(ep, es, 8);
        if (n < 0) {
            FATAL("rdm4_poll: %s", tu_status(n));
        }
        if (n > 0) {
            take_receives(ep, s, slots, es, n, &received, &next_post);
            continue;
        }
        if (mode == BY_EPOLL) {
            int32_t rc = rdm4_trywait(ep);
            if (rc == RDM4_EAGAIN) {
                trywait_again++;
                continue;
            }
            if (rc != RDM4_SUCCESS) {
                FATAL("rdm4_trywait: %s", tu_status(rc));
            }
            struct epoll_event ev;
            sleeps++;
            if (epoll_wait(epfd, &ev, 1, 1000) == 0) {
                quiet++;
            }
        } else {
            sleeps++;
            int32_t rc = rdm4_wait(ep, 1000);
            if (rc == RDM4_ETIMEDOUT) {
                quiet++;
            } else if (rc != RDM4_SUCCESS) {
                FATAL("rdm4_wait: %s", tu_status(rc));
            }
        }
    }
    CHECK(received == MSGS, "received all %d messages, every byte checked (%d sleeps, %d of them 1 s without a "
          "wake-up, %d trywait RDM4_EAGAIN)", MSGS, sleeps, quiet, trywait_again);
    /* Away: tell the sender, then block on the pipe until it reports. */
    char b = 'D';
    double away0 = tu_now_ms();
    tu_write_all(r2s[1], &b, 1);
    tu_read_all(s2r[0], &b, 1);
    CHECK(b == 'Y', "while this receiver was away (%.0f ms, no library call), the sender got all %d send "
          "completions with status 0", tu_now_ms() - away0, MSGS);
    if (epfd >= 0) {
        close(epfd);
    }
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    free(slots);
    return tu_failures ? 1 : 0;
}

static void round_trip(enum mode mode)
{
    const char *name = mode == BY_EPOLL ? "epoll" : "rdm4_wait";
    if (pipe(s2r) != 0 || pipe(r2s) != 0) {
        FATAL("pipe");
    }
    for (int k = 0; k < 2; k++) {
        if (tu_fork(k)) {
            /* Only the ends this side uses stay open. */
            close(k == 0 ? s2r[0] : s2r[1]);
            close(k == 0 ? r2s[1] : r2s[0]);
            exit(k == 0 ? sender_main() : receiver_main(mode));
        }
    }
    close(s2r[0]);
    close(s2r[1]);
    close(r2s[0]);
    close(r2s[1]);
    char what[64];
    snprintf(what, sizeof what, "%s round: the sender", name);
    tu_reap(tu_kids[0], what);
    snprintf(what, sizeof what, "%s round: the receiver", name);
    tu_reap(tu_kids[1], what);
    tu_kids[0] = tu_kids[1] = 0;
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("away-sleep", prefix, sizeof prefix);
    tu_setenv("RDM4_UDP_GIVEUP_MS", "300");
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = tu_kill_kids;
    round_trip(BY_EPOLL);
    round_trip(BY_WAIT);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? 1 : 0;
}
