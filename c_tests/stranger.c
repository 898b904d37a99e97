/*
 * stranger.c: a peer the application never inserted (a server that
 * answers whoever writes to it).
 *
 * Two endpoints in this process: B knows A; A never inserts B. Checked:
 *  - B's message to A arrives with a source handle (not RDM4_ADDR_UNSPEC);
 *  - B's write with CQ data (rdm4_writedata) into A's registered memory
 *    lands, and A's completion names the same handle;
 *  - rdm4_av_lookup of that handle gives B's address (on auto: the
 *    device's address of B), and refuses bad arguments;
 *  - A's rdm4_av_insert of B's address returns that handle; A's send to it
 *    reaches B;
 *  - B's messages after the insert still arrive, in order, from that
 *    handle (its message stream continues: nothing waits for a message
 *    that was never sent);
 *  - in the other order too: a write with CQ data first, then messages.
 * As a server and a client do: for messages each side waits for its own
 * completion alone (A asleep on its descriptor in rdm4_wait), while the
 * other does not call the library (over udp its responder answers for it).
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
enum { LEN = 3000, REGION = 64 * 1024 };

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

/* Waits for the completion with context `ctx` of one endpoint alone (the
 * other does not call the library meanwhile): asleep in rdm4_wait. */
static rdm4_cqe alone(struct tu_cq *q, void *ctx, const char *what)
{
    struct tu_cq *one[1] = { q };
    return tu_cq_expect(q, ctx, one, 1, 5000, what);
}

/* B sends `len` bytes (pattern `seed`) to A; A receives them from any
 * source; returns the source A's completion names. */
static rdm4_addr message(rdm4_ep *a, rdm4_ep *b, rdm4_addr b_to_a, struct tu_cq **qs, uint8_t *src, uint8_t *dst,
                         size_t len, uint32_t seed, const char *what)
{
    tu_fill(src, len, seed);
    memset(dst, 0, len);
    EXPECT(rdm4_recv(a, dst, LEN, RDM4_ADDR_UNSPEC, CTX(10 + seed)), RDM4_SUCCESS);
    EXPECT(rdm4_send(b, src, len, b_to_a, CTX(20 + seed)), RDM4_SUCCESS);
    rdm4_cqe r = alone(qs[0], CTX(10 + seed), what);
    (void)alone(qs[1], CTX(20 + seed), what);
    CHECK(r.status == RDM4_SUCCESS && r.len == len && tu_verify(dst, len, seed) < 0,
          "%s arrives whole (%s, len %llu)", what, tu_status(r.status), (unsigned long long)r.len);
    return r.src;
}

/* B writes `len` bytes with CQ data `data` into A's region at `off`;
 * returns the source of A's completion. */
static rdm4_addr writedata(rdm4_ep *b, rdm4_addr b_to_a, struct tu_cq **qs, uint8_t *src, uint8_t *region,
                           uint64_t key, size_t off, size_t len, uint64_t data, uint32_t seed, const char *what)
{
    tu_fill(src, len, seed);
    EXPECT(rdm4_writedata(b, src, len, data, b_to_a, (uint64_t)(uintptr_t)(region + off), key, CTX(30 + seed)),
           RDM4_SUCCESS);
    /* Both progress: over udp a write is emulated, and its first one
     * towards a peer waits for the peer's HANDSHAKE, which needs the writer
     * to call the library again (rdm4(3), rdm4_write). */
    (void)tu_cq_expect(qs[1], CTX(30 + seed), qs, 2, 5000, what);
    rdm4_cqe t = tu_cq_expect(qs[0], NULL, qs, 2, 5000, what);
    CHECK(t.status == RDM4_SUCCESS && t.data == data && t.len == len &&
              (t.flags & (RDM4_CQ_REMOTE_WRITE | RDM4_CQ_REMOTE_CQ_DATA)) ==
                  (RDM4_CQ_REMOTE_WRITE | RDM4_CQ_REMOTE_CQ_DATA),
          "%s: the target's completion (%s, data %#llx, len %llu, flags %#llx)", what, tu_status(t.status),
          (unsigned long long)t.data, (unsigned long long)t.len, (unsigned long long)t.flags);
    CHECK(tu_verify(region + off, len, seed) < 0, "%s lands", what);
    return t.src;
}

/* A answers `to` (its handle of B); B receives the answer from A. */
static void answer(rdm4_ep *a, rdm4_ep *b, rdm4_addr to, rdm4_addr b_to_a, struct tu_cq **qs, uint8_t *src,
                   uint8_t *dst, uint32_t seed, const char *what)
{
    tu_fill(src, 100, seed);
    memset(dst, 0, 100);
    EXPECT(rdm4_recv(b, dst, 100, b_to_a, CTX(40 + seed)), RDM4_SUCCESS);
    EXPECT(rdm4_send(a, src, 100, to, CTX(50 + seed)), RDM4_SUCCESS);
    rdm4_cqe r = alone(qs[1], CTX(40 + seed), what);
    rdm4_cqe s = alone(qs[0], CTX(50 + seed), what);
    CHECK(r.status == RDM4_SUCCESS && s.status == RDM4_SUCCESS && tu_verify(dst, 100, seed) < 0,
          "%s reaches B (%s, %s)", what, tu_status(r.status), tu_status(s.status));
}

/* One round: a stranger B that starts with a message (`write_first` 0) or
 * with a write with CQ data (1). */
static void round_of(int write_first)
{
    uint8_t addr_a[RDM4_ADDR_LEN], addr_b[RDM4_ADDR_LEN];
    rdm4_ep *a = tu_open(addr_a);
    rdm4_ep *b = tu_open(addr_b);
    rdm4_addr b_to_a = tu_insert(b, addr_a);
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *qs[2] = { &qa, &qb };
    uint8_t *src = malloc(REGION), *dst = malloc(REGION), *region = calloc(1, REGION);
    if (!src || !dst || !region) {
        FATAL("malloc");
    }
    uint64_t key = 0;
    EXPECT(rdm4_mr_reg(a, region, REGION, RDM4_ACCESS_REMOTE_WRITE, &key), RDM4_SUCCESS);
    const char *order = write_first ? "write first" : "message first";
    printf("# %s, device %s\n", order, tu_device_name(tu_device(a)));

    rdm4_addr h1, h2;
    if (write_first) {
        h1 = writedata(b, b_to_a, qs, src, region, key, 0, 1000, 0xABCD0001, 1, "a write with CQ data");
        h2 = message(a, b, b_to_a, qs, src, dst, LEN, 2, "a message");
    } else {
        h1 = message(a, b, b_to_a, qs, src, dst, LEN, 1, "a message");
        h2 = writedata(b, b_to_a, qs, src, region, key, 0, 1000, 0xABCD0001, 2, "a write with CQ data");
    }
    CHECK(h1 != RDM4_ADDR_UNSPEC, "%s: A's first completion names B (%llu)", order, (unsigned long long)h1);
    CHECK(h2 == h1, "%s: the second names the same handle (%llu, %llu)", order, (unsigned long long)h2,
          (unsigned long long)h1);

    /* The learnt handle's address, and what rdm4_av_lookup refuses. */
    uint8_t learnt[RDM4_ADDR_LEN], again[RDM4_ADDR_LEN];
    size_t len = sizeof learnt;
    EXPECT(rdm4_av_lookup(a, h1, learnt, &len), RDM4_SUCCESS);
    CHECK(len == RDM4_ADDR_LEN, "%s: rdm4_av_lookup of the learnt handle gives %zu bytes", order, len);
    if (tu_device(a) != RDM4_DEVICE_AUTO) {
        CHECK(memcmp(learnt, addr_b, RDM4_ADDR_LEN) == 0, "%s: it is B's name", order);
    }
    len = 7;
    EXPECT(rdm4_av_lookup(a, h1, learnt, &len), RDM4_ETOOSMALL);
    CHECK(len == RDM4_ADDR_LEN, "%s: a short buffer is told the size (%zu)", order, len);
    len = sizeof learnt;
    EXPECT(rdm4_av_lookup(a, h1, NULL, &len), RDM4_ETOOSMALL);
    EXPECT(rdm4_av_lookup(a, h1, learnt, NULL), RDM4_EINVAL);
    EXPECT(rdm4_av_lookup(a, RDM4_ADDR_UNSPEC, learnt, &len), RDM4_ENOADDR);
    EXPECT(rdm4_av_lookup(a, h1 + 1000, learnt, &len), RDM4_ENOADDR);
    EXPECT(rdm4_av_lookup(NULL, h1, learnt, &len), RDM4_EBADHANDLE);

    rdm4_addr ins = tu_insert(a, addr_b);
    CHECK(ins == h1, "%s: A's rdm4_av_insert of B's address returns that handle (%llu, %llu)", order,
          (unsigned long long)ins, (unsigned long long)h1);
    len = sizeof again;
    EXPECT(rdm4_av_lookup(a, ins, again, &len), RDM4_SUCCESS);
    CHECK(memcmp(again, learnt, RDM4_ADDR_LEN) == 0, "%s: the inserted handle looks up as the learnt one", order);
    CHECK(tu_insert(a, learnt) == ins, "%s: inserting the looked-up address gives the same handle", order);
    answer(a, b, ins, b_to_a, qs, src, dst, 3, "A's answer");

    /* B's stream goes on after the insert: in order, from the same handle. */
    int same = 1;
    for (uint32_t i = 0; i < 20; i++) {
        rdm4_addr h = message(a, b, b_to_a, qs, src, dst, 1 + i * 150, 100 + i, "a later message");
        same &= h == ins;
    }
    CHECK(same, "%s: 20 later messages come from the inserted handle", order);
    rdm4_addr h3 = writedata(b, b_to_a, qs, src, region, key, 4096, 5000, 0xABCD0002, 4, "a later write");
    CHECK(h3 == ins, "%s: so does a later write with CQ data (%llu)", order, (unsigned long long)h3);

    for (int i = 0; i < 50; i++) {
        tu_cq_poll(&qa);
        tu_cq_poll(&qb);
    }
    CHECK(qa.n == 0 && qb.n == 0, "%s: nothing else completed (%zu, %zu)", order, qa.n, qb.n);
    EXPECT(rdm4_mr_close(a, key), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    free(src);
    free(dst);
    free(region);
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("stranger", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);
    round_of(0);
    round_of(1);
    cleanup_segments();
    return tu_failures ? 1 : 0;
}
