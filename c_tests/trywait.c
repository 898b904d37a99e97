/*
 * trywait.c: rdm4_trywait with rdm4_ep_fd in an event loop, over the
 * device of the environment (run over shm and over udp).
 *
 * Two endpoints (A, B) in this process. Checked:
 *  - an idle endpoint: RDM4_SUCCESS, and its descriptor stays quiet;
 *  - a message arrived and not yet taken: the descriptor is readable;
 *    after it is polled (its completion taken) trywait is RDM4_SUCCESS;
 *  - a completion waiting to be polled: RDM4_EAGAIN;
 *  - an event loop (poll until 0, trywait, sleep on the descriptor only
 *    on RDM4_SUCCESS) receives 200 messages sent in bursts between its
 *    trywait and its sleep, missing no wake-up (each sleep is bounded at
 *    2 s and must not time out);
 *  - a bad handle: RDM4_EBADHANDLE.
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

#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

static int readable(int fd, int ms)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll(&p, 1, ms) == 1;
}

int main(void)
{
    alarm(60);
    tu_set_prefix("trywait", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);
    rdm4_ep *a, *b;
    rdm4_addr a_to_b, b_to_a;
    tu_pair(&a, &b, &a_to_b, &b_to_a);
    (void)a_to_b;
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *both[2] = { &qa, &qb }; /* udp: a send completes once A acknowledges it */

    int fd = rdm4_ep_fd(a);
    CHECK(fd >= 0, "rdm4_ep_fd: %d", fd);
    EXPECT(rdm4_trywait(NULL), RDM4_EBADHANDLE);
    EXPECT(rdm4_trywait(a), RDM4_SUCCESS);
    CHECK(!readable(fd, 100), "an idle endpoint's descriptor stays quiet for 100 ms");

    /* A message arrives: the descriptor is readable; polled, it is safe
     * to sleep again. */
    uint8_t s[8], r[8];
    tu_fill(s, sizeof s, 3);
    EXPECT(rdm4_recv(a, r, sizeof r, RDM4_ADDR_UNSPEC, CTX(1)), RDM4_SUCCESS);
    EXPECT(rdm4_send(b, s, sizeof s, b_to_a, CTX(2)), RDM4_SUCCESS);
    double t0 = tu_now_ms();
    int woke = 0;
    while (!woke && tu_now_ms() - t0 < 2000) {
        tu_cq_poll(&qb); /* B sends (udp: and retransmits) */
        woke = readable(fd, 10);
    }
    CHECK(woke, "the descriptor is readable once a message waits");
    rdm4_cqe e;
    int got = 0;
    t0 = tu_now_ms();
    while (!got && tu_now_ms() - t0 < 2000) {
        got = rdm4_poll(a, &e, 1);
        tu_cq_poll(&qb);
    }
    CHECK(got == 1 && e.context == CTX(1) && e.status == RDM4_SUCCESS && tu_verify(r, 8, 3) < 0,
          "the message is received");
    (void)tu_cq_expect(&qb, CTX(2), both, 2, 2000, "the send");
    /* Let the device settle (udp: the acknowledgement of the send). */
    t0 = tu_now_ms();
    while (tu_now_ms() - t0 < 20) {
        (void)rdm4_poll(a, &e, 0);
        tu_cq_poll(&qb);
    }
    EXPECT(rdm4_trywait(a), RDM4_SUCCESS);

    /* A completion waiting to be polled: not safe. */
    EXPECT(rdm4_recv(a, r, sizeof r, RDM4_ADDR_UNSPEC, CTX(3)), RDM4_SUCCESS);
    EXPECT(rdm4_send(b, s, sizeof s, b_to_a, CTX(4)), RDM4_SUCCESS);
    t0 = tu_now_ms();
    int32_t rc = RDM4_ETIMEDOUT;
    while (rc != RDM4_SUCCESS && tu_now_ms() - t0 < 2000) {
        tu_cq_poll(&qb);
        rc = rdm4_wait(a, 10); /* progresses; the completion is kept for rdm4_poll */
    }
    CHECK(rc == RDM4_SUCCESS, "rdm4_wait: a completion is available (%s)", tu_status(rc));
    EXPECT(rdm4_trywait(a), RDM4_EAGAIN);
    got = rdm4_poll(a, &e, 1);
    CHECK(got == 1 && e.context == CTX(3), "the waiting completion is polled");
    (void)tu_cq_expect(&qb, CTX(4), both, 2, 2000, "the send");
    CHECK(qa.n == 0, "no other completion at A (%zu)", qa.n);

    /* An event loop: 200 messages in bursts of 10 sent between sleeps. B
     * is progressed by this thread before each sleep. */
    enum { N = 200 };
    static uint8_t bufs[N][8];
    for (int i = 0; i < N; i++) {
        EXPECT(rdm4_trecv(a, bufs[i], 8, RDM4_ADDR_UNSPEC, 1000 + i, 0, CTX(1000 + i)), RDM4_SUCCESS);
    }
    int sent = 0, done = 0, sleeps = 0, timeouts = 0;
    while (done < N && timeouts == 0) {
        rdm4_cqe es[16];
        for (;;) {
            int n = rdm4_poll(a, es, 16);
            if (n < 0) {
                FATAL("rdm4_poll: %s", tu_status(n));
            }
            done += n;
            tu_cq_poll(&qb);
            qb.n = 0; /* B's send completions are not checked here */
            if (n == 0 && rdm4_trywait(a) == RDM4_SUCCESS) {
                break;
            }
        }
        if (done < N) {
            /* A burst arrives after trywait said it is safe to sleep: the
             * descriptor must announce it. */
            for (int k = 0; k < 10 && sent < N; k++, sent++) {
                EXPECT(rdm4_tsend(b, s, sizeof s, b_to_a, 1000 + sent, CTX(5000 + sent)), RDM4_SUCCESS);
            }
            sleeps++;
            if (!readable(fd, 2000)) {
                timeouts++;
            }
        }
    }
    CHECK(done == N && timeouts == 0, "the event loop received %d of %d messages in %d sleeps, %d timed out", done, N,
          sleeps, timeouts);
    for (int i = 0; i < N; i++) {
        if (tu_verify(bufs[i], 8, 3) >= 0) {
            CHECK(0, "message %d intact", i);
        }
    }
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment left behind");
    return tu_failures ? 1 : 0;
}
