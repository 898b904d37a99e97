/*
 * close_inflight.c: an endpoint closed with operations in flight, while its
 * peer keeps sending to it and writing into its memory (issue 41).
 *
 * Two processes (forked first; names, and the peer's region address and
 * key, go over pipes). The closer A posts, each buffer between guard bytes:
 * 8 tagged receives (8 B to 1 MiB) of which the peer fills only the first
 * ones, 4 sends of 4 MiB the peer never receives, a 1 MiB read of and a
 * 1 MiB write into the peer's region, and registers a 1 MiB region of its
 * own that the peer writes into again and again. With all of it under way
 * (the peer sending and writing), A closes. Checked: the close returns
 * RDM4_SUCCESS; afterwards (A fills every buffer with a pattern right
 * after the close, then watches them for 300 ms while the peer goes on)
 * no byte of any receive, send, read or registered buffer, and no guard
 * byte, changes: the library touches none of them after rdm4_ep_close
 * returns. The peer: every operation it posted ends (status 0 before A's
 * close, an error after it: RDM4_EPEER or the like) within 3 s of A's
 * close, none hangs; both processes exit 0; nothing left in /dev/shm.
 * Runs over the device of the environment (the harness runs each).
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define CTX(n) ((void *)(uintptr_t)(n))
#define GUARD 64
#define RECVS 8
#define SENDS 4
#define FILLED 3 /* receives the peer fills before the close */
#define REGION (1u << 20)

static char prefix[64];
static int a2b[2], b2a[2];

struct peer_info {
    uint8_t name[RDM4_ADDR_LEN];
    uint64_t raddr, key;
};

/* A buffer of `len` bytes between guard bytes of 0xC3. */
struct guarded {
    uint8_t *mem;
    size_t len;
};

static struct guarded guarded(size_t len)
{
    struct guarded g = { malloc(len + 2 * GUARD), len };
    if (!g.mem) {
        FATAL("malloc");
    }
    memset(g.mem, 0xC3, len + 2 * GUARD);
    return g;
}

static uint8_t *body(struct guarded g)
{
    return g.mem + GUARD;
}

/* Whether the guards are intact and the body is all `v`. */
static int untouched(struct guarded g, uint8_t v)
{
    return tu_all(g.mem, GUARD, 0xC3) && tu_all(g.mem + GUARD + g.len, GUARD, 0xC3) && tu_all(body(g), g.len, v);
}

static const size_t recv_lens[RECVS] = { 8, 64, 4096, 65536, 8, 4096, 262144, 1u << 20 };

static int closer_main(void)
{
    uint8_t me[RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open(me);
    struct peer_info pi;
    tu_read_all(b2a[0], &pi, sizeof pi);
    rdm4_addr b = tu_insert(ep, pi.name);
    struct peer_info mine;
    memcpy(mine.name, me, sizeof me);
    struct guarded region = guarded(REGION);
    memset(body(region), 0, REGION);
    EXPECT(rdm4_mr_reg(ep, body(region), REGION, RDM4_ACCESS_REMOTE_WRITE | RDM4_ACCESS_REMOTE_READ, &mine.key),
           RDM4_SUCCESS);
    mine.raddr = (uint64_t)(uintptr_t)body(region);
    tu_write_all(a2b[1], &mine, sizeof mine);

    struct guarded recvs[RECVS], sends[SENDS], rd = guarded(REGION), wr = guarded(REGION);
    for (int k = 0; k < RECVS; k++) {
        recvs[k] = guarded(recv_lens[k]);
        memset(body(recvs[k]), 0, recv_lens[k]);
        EXPECT(rdm4_trecv(ep, body(recvs[k]), recv_lens[k], b, 100 + (uint64_t)k, 0, CTX(100 + k)), RDM4_SUCCESS);
    }
    for (int k = 0; k < SENDS; k++) {
        sends[k] = guarded(4u << 20);
        tu_fill(body(sends[k]), 4u << 20, (uint32_t)k);
        EXPECT(rdm4_tsend(ep, body(sends[k]), 4u << 20, b, 200 + (uint64_t)k, CTX(200 + k)), RDM4_SUCCESS);
    }
    tu_fill(body(wr), REGION, 77);
    EXPECT(rdm4_read(ep, body(rd), REGION, b, pi.raddr, pi.key, CTX(300)), RDM4_SUCCESS);
    EXPECT(rdm4_write(ep, body(wr), REGION, b, pi.raddr, pi.key, CTX(301)), RDM4_SUCCESS);

    /* The peer goes: it fills the first receives and writes into `region`
     * from now on. A lets it, progressing, for 50 ms, then closes. */
    char go = 'g';
    tu_write_all(a2b[1], &go, 1);
    struct tu_cq q = { .ep = ep };
    double t0 = tu_now_ms();
    while (tu_now_ms() - t0 < 50) {
        tu_cq_poll(&q);
        q.n = 0; /* whatever completed before the close: not looked at */
    }
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);

    /* From here on the library touches none of these buffers. */
    const uint8_t v = 0x5A;
    for (int k = 0; k < RECVS; k++) {
        memset(body(recvs[k]), v, recv_lens[k]);
    }
    for (int k = 0; k < SENDS; k++) {
        memset(body(sends[k]), v, 4u << 20);
    }
    memset(body(rd), v, REGION);
    memset(body(wr), v, REGION);
    memset(body(region), v, REGION);
    char closed = 'c';
    tu_write_all(a2b[1], &closed, 1);
    tu_sleep_us(300000);
    int ok = 1;
    for (int k = 0; k < RECVS; k++) {
        ok &= untouched(recvs[k], v);
    }
    for (int k = 0; k < SENDS; k++) {
        ok &= untouched(sends[k], v);
    }
    CHECK(ok, "no receive or send buffer (or their guards) changed after the close");
    CHECK(untouched(rd, v) && untouched(wr, v), "the read's and the write's buffers unchanged after the close");
    CHECK(untouched(region, v), "the registered region unchanged after the close, the peer writing on");
    char stop = 's';
    tu_write_all(a2b[1], &stop, 1);
    for (int k = 0; k < RECVS; k++) {
        free(recvs[k].mem);
    }
    for (int k = 0; k < SENDS; k++) {
        free(sends[k].mem);
    }
    free(rd.mem);
    free(wr.mem);
    free(region.mem);
    return tu_failures ? 1 : 0;
}

static int fcntl_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* A non-blocking look at the pipe from A: the byte, or 0. */
static char from_closer(void)
{
    char c = 0;
    ssize_t n = read(a2b[0], &c, 1);
    return n == 1 ? c : 0;
}

/* Polls `q` once and drops what it got: returns how many completions
 * came, counting those with an error status into *failed. */
static size_t take_completions(struct tu_cq *q, size_t *failed)
{
    size_t got = (size_t)tu_cq_poll(q);
    for (size_t i = 0; i < q->n; i++) {
        if (q->e[i].status != RDM4_SUCCESS) {
            (*failed)++;
        }
    }
    q->n = 0;
    return got;
}

static int peer_main(void)
{
    struct peer_info mine;
    rdm4_ep *ep = tu_open(mine.name);
    static uint8_t region[REGION];
    EXPECT(rdm4_mr_reg(ep, region, REGION, RDM4_ACCESS_REMOTE_WRITE | RDM4_ACCESS_REMOTE_READ, &mine.key),
           RDM4_SUCCESS);
    mine.raddr = (uint64_t)(uintptr_t)region;
    tu_write_all(b2a[1], &mine, sizeof mine);
    struct peer_info pi;
    tu_read_all(a2b[0], &pi, sizeof pi);
    rdm4_addr a = tu_insert(ep, pi.name);
    char go;
    tu_read_all(a2b[0], &go, 1);
    if (fcntl_nonblock(a2b[0]) != 0) {
        FATAL("fcntl");
    }

    struct tu_cq q = { .ep = ep };
    static uint8_t msg[1u << 20], wbuf[REGION];
    tu_fill(wbuf, REGION, 5);
    /* Posted operations not yet completed, by context. */
    size_t outstanding = 0, posted = 0, failed = 0;
    for (int k = 0; k < FILLED; k++) {
        if (rdm4_tsend(ep, msg, recv_lens[k], a, 100 + (uint64_t)k, CTX(1000 + k)) == RDM4_SUCCESS) {
            outstanding++;
            posted++;
        }
    }
    double closed_at = 0;
    uint64_t n = 0;
    char c = 0;
    while (c != 's') {
        char got = from_closer();
        if (got) {
            c = got;
            if (c == 'c') {
                closed_at = tu_now_ms();
            }
        }
        /* Writes into A's region, one at a time, for as long as A lets. */
        if (outstanding < 4) {
            int32_t rc = rdm4_write(ep, wbuf, REGION, a, pi.raddr, pi.key, CTX(5000 + n));
            if (rc == RDM4_SUCCESS) {
                outstanding++;
                posted++;
                n++;
            } else if (rc != RDM4_EAGAIN) {
                failed++; /* refused at once: A is gone */
            }
        }
        outstanding -= take_completions(&q, &failed);
        if (closed_at > 0 && tu_now_ms() - closed_at > 3000 * tu_slow()) {
            break;
        }
    }
    /* Everything posted ends, within 3 s of A's close. */
    double t0 = tu_now_ms();
    while (outstanding > 0 && tu_now_ms() - t0 < 3000 * tu_slow()) {
        outstanding -= take_completions(&q, &failed);
    }
    CHECK(outstanding == 0, "every operation posted towards the closed endpoint ended (%zu of %zu left)", outstanding,
          posted);
    CHECK(failed > 0, "operations after the close failed (%zu)", failed);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

static void cleanup(void)
{
    tu_kill_kids();
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("closeinflight", prefix, sizeof prefix);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = cleanup;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (pipe(a2b) != 0 || pipe(b2a) != 0) {
        FATAL("pipe");
    }
    if (tu_fork(0)) {
        tu_role = "[peer] ";
        close(a2b[1]);
        close(b2a[0]);
        exit(peer_main());
    }
    close(a2b[0]);
    close(b2a[1]);
    tu_role = "[closer] ";
    int rc = closer_main();
    tu_role = "";
    tu_reap(tu_kids[0], "the peer");
    tu_kids[0] = 0;
    int left = tu_shm_files(prefix, 1, 1);
    CHECK(left == 0, "no segment left behind (%d)", left);
    return rc || tu_failures ? 1 : 0;
}
