/*
 * timeout.c: requests a peer never serves end with RDM4_ETIMEDOUT instead
 * of waiting forever (rdm4_ep_attr.timeout_ms, RDM4_TIMEOUT_MS).
 *
 * Two endpoints in this process over the device of the environment (the
 * harness runs it over each; the checks hold on every device); B never
 * calls the library while A's requests wait. Checked:
 *  - with timeout_ms 300, a fetch-add and an atomic write of A towards B complete
 *    with RDM4_ETIMEDOUT, not before 300 ms and well before 5 s; the
 *    fetch's result buffer is untouched; rdm4_wait(-1) wakes for the
 *    timeout (it does not sleep past it);
 *  - once B progresses, what it answers late is dropped: A gets no other
 *    completion, the result buffer stays untouched;
 *  - then a fetch-add that B serves completes with success: the timeout
 *    ends only requests that are not served;
 *  - rdm4_ep_query reports the timeout: 300, the default 60000,
 *    RDM4_TIMEOUT_NONE as 0, RDM4_TIMEOUT_MS=100 and =off override the
 *    attribute, a bad RDM4_TIMEOUT_MS fails the open with RDM4_EINVAL.
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

static rdm4_ep *open_timeout(uint64_t timeout_ms, uint8_t addr[RDM4_ADDR_LEN])
{
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.timeout_ms = timeout_ms;
    return tu_open_attr(&at, addr);
}

static uint64_t queried_timeout(rdm4_ep *ep)
{
    rdm4_ep_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (rdm4_ep_query(ep, &info) != RDM4_SUCCESS) {
        FATAL("rdm4_ep_query");
    }
    return info.timeout_ms;
}

/* Waits with rdm4_wait(-1) and polls until `ctx` completes at A. */
static rdm4_cqe wait_forever_for(struct tu_cq *q, void *ctx)
{
    rdm4_cqe c;
    for (int i = 0; i < 1000; i++) {
        if (tu_cq_take(q, ctx, &c)) {
            return c;
        }
        if (tu_cq_poll(q) == 0) {
            int32_t rc = rdm4_wait(q->ep, -1);
            if (rc != RDM4_SUCCESS && rc != RDM4_ETIMEDOUT) {
                FATAL("rdm4_wait: %s", tu_status(rc));
            }
        }
    }
    FATAL("no completion after 1000 waits");
}

int main(void)
{
    alarm(60);
    tu_set_prefix("timeout", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    uint8_t addr_a[RDM4_ADDR_LEN], addr_b[RDM4_ADDR_LEN];
    rdm4_ep *a = open_timeout(300, addr_a), *b = open_timeout(0, addr_b);
    rdm4_addr a_to_b = tu_insert(a, addr_b);
    (void)tu_insert(b, addr_a);
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *qs[2] = { &qa, &qb };
    CHECK(queried_timeout(a) == 300 && queried_timeout(b) == 60000, "rdm4_ep_query: 300 and the default 60000");

    static uint64_t mem[8];
    uint64_t key = 0;
    EXPECT(rdm4_mr_reg(b, mem, sizeof mem, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &key), RDM4_SUCCESS);
    uint64_t operand = 5, result = 0xABAB, src[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    double t0 = tu_now_ms();
    EXPECT(rdm4_fetch_atomic(a, &operand, 1, &result, RDM4_UINT64, RDM4_SUM, a_to_b, (uint64_t)(uintptr_t)mem, key,
                             CTX(1)),
           RDM4_SUCCESS);
    /* An atomic write (a plain write goes by cross-memory attach, served
     * without B). */
    EXPECT(rdm4_atomic(a, src, 1, RDM4_UINT64, RDM4_SUM, a_to_b, (uint64_t)(uintptr_t)mem, key, CTX(2)),
           RDM4_SUCCESS);
    rdm4_cqe c = wait_forever_for(&qa, CTX(1));
    double t1 = tu_now_ms() - t0;
    CHECK(c.status == RDM4_ETIMEDOUT, "a fetch-add B never serves completes with RDM4_ETIMEDOUT (%s)",
          tu_status(c.status));
    CHECK(t1 >= 290 && t1 < 5000, "after the timeout, and rdm4_wait(-1) woke for it (%.0f ms)", t1);
    CHECK(result == 0xABAB, "the result buffer is untouched");
    c = wait_forever_for(&qa, CTX(2));
    CHECK(c.status == RDM4_ETIMEDOUT, "so does an atomic write (%s)", tu_status(c.status));

    /* B wakes up: its late answers are dropped. */
    for (int i = 0; i < 200; i++) {
        tu_cq_poll(&qb);
        tu_cq_poll(&qa);
    }
    CHECK(qa.n == 0 && result == 0xABAB, "late answers complete nothing and write nothing (%zu)", qa.n);

    /* Served requests do not time out. */
    EXPECT(rdm4_fetch_atomic(a, &operand, 1, &result, RDM4_UINT64, RDM4_SUM, a_to_b, (uint64_t)(uintptr_t)mem, key,
                             CTX(3)),
           RDM4_SUCCESS);
    c = tu_cq_expect(&qa, CTX(3), qs, 2, 5000, "a served fetch-add");
    CHECK(c.status == RDM4_SUCCESS && result == mem[0] - 5, "a fetch-add B serves succeeds (%s)", tu_status(c.status));
    EXPECT(rdm4_mr_close(b, key), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);

    /* The attribute's never, and the variable's overrides. */
    rdm4_ep *e = open_timeout(RDM4_TIMEOUT_NONE, NULL);
    CHECK(queried_timeout(e) == 0, "RDM4_TIMEOUT_NONE: never (0)");
    EXPECT(rdm4_ep_close(e), RDM4_SUCCESS);
    setenv("RDM4_TIMEOUT_MS", "100", 1);
    e = open_timeout(300, NULL);
    CHECK(queried_timeout(e) == 100, "RDM4_TIMEOUT_MS=100 overrides the attribute");
    EXPECT(rdm4_ep_close(e), RDM4_SUCCESS);
    setenv("RDM4_TIMEOUT_MS", "off", 1);
    e = open_timeout(300, NULL);
    CHECK(queried_timeout(e) == 0, "RDM4_TIMEOUT_MS=off: never");
    EXPECT(rdm4_ep_close(e), RDM4_SUCCESS);
    setenv("RDM4_TIMEOUT_MS", "soon", 1);
    rdm4_ep *none = NULL;
    EXPECT(rdm4_ep_open(NULL, &none), RDM4_EINVAL);
    unsetenv("RDM4_TIMEOUT_MS");
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment left behind");
    return tu_failures ? 1 : 0;
}
