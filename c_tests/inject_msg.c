/*
 * inject_msg.c: rdm4_sendmsg with RDM4_MSG_INJECT (libfabric's
 * fi_tinjectdata, fi_injectdata and inject of several buffers).
 *
 * Two endpoints (A, B) in this process. Checked:
 *  - an inject of a tagged message with remote CQ data arrives whole, with
 *    its tag and data, although A overwrites its buffer as soon as the
 *    call returns; A gets no completion for it;
 *  - the same untagged, of three buffers, of 0 bytes and of 64 KiB (the
 *    largest), both to a posted receive and as an unexpected message;
 *  - 500 injects in a row (most are copies, queued behind the others)
 *    arrive in order with their data;
 *  - more than 64 KiB, or with RDM4_MSG_DELIVERY_COMPLETE: RDM4_EINVAL and
 *    nothing sent.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define CTX(n) ((void *)(uintptr_t)(n))
enum { BIG = 64 * 1024, COUNT = 500 };

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

/* Injects `len` bytes (pattern `seed`) from A in `nbuf` pieces, then
 * scribbles over the source at once. */
static int32_t inject(rdm4_ep *a, rdm4_addr to, uint8_t *src, size_t len, int nbuf, uint64_t flags, uint64_t tag,
                      uint64_t data, uint32_t seed)
{
    tu_fill(src, len, seed);
    struct iovec iov[3];
    size_t part = len / 3;
    for (int i = 0; i < nbuf; i++) {
        iov[i].iov_base = src + i * part;
        iov[i].iov_len = i == nbuf - 1 ? len - i * part : part;
    }
    rdm4_msg m = { iov, (size_t)nbuf, to, tag, 0, data, CTX(999) };
    int32_t r = rdm4_sendmsg(a, &m, flags | RDM4_MSG_INJECT);
    memset(src, 0xEE, len);
    return r;
}

static void expect_msg(struct tu_cq *qb, struct tu_cq **qs, void *ctx, const uint8_t *dst, size_t len, uint64_t flags,
                       uint64_t tag, uint64_t data, uint32_t seed, const char *what)
{
    rdm4_cqe c = tu_cq_expect(qb, ctx, qs, 2, 5000, what);
    int want_data = (flags & RDM4_MSG_REMOTE_CQ_DATA) != 0;
    CHECK(c.status == RDM4_SUCCESS && c.len == len && tu_verify(dst, len, seed) < 0 &&
              ((c.flags & RDM4_CQ_REMOTE_CQ_DATA) != 0) == want_data && (!want_data || c.data == data) &&
              (!(flags & RDM4_MSG_TAGGED) || c.tag == tag),
          "%s arrives whole with its tag and data (%s, len %llu, flags %#llx, data %#llx)", what,
          tu_status(c.status), (unsigned long long)c.len, (unsigned long long)c.flags, (unsigned long long)c.data);
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("inject_msg", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    rdm4_ep *a, *b;
    rdm4_addr a_to_b, b_to_a;
    tu_pair(&a, &b, &a_to_b, &b_to_a);
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *qs[2] = { &qa, &qb };
    uint8_t *src = malloc(BIG + 1), *dst = malloc(BIG + 1);
    if (!src || !dst) {
        FATAL("malloc");
    }

    /* Tagged with data, to a posted receive. */
    EXPECT(rdm4_trecv(b, dst, BIG, b_to_a, 7, 0, CTX(1)), RDM4_SUCCESS);
    EXPECT(inject(a, a_to_b, src, 100, 1, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA, 7, 0x1122334455667788ull, 1),
           RDM4_SUCCESS);
    expect_msg(&qb, qs, CTX(1), dst, 100, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA, 7, 0x1122334455667788ull, 1,
               "a tagged inject with data");

    /* Untagged, three buffers, unexpected (the receive comes later). */
    EXPECT(inject(a, a_to_b, src, 3000, 3, RDM4_MSG_REMOTE_CQ_DATA, 0, 42, 2), RDM4_SUCCESS);
    for (int i = 0; i < 20; i++) {
        tu_cq_poll(&qb);
    }
    EXPECT(rdm4_recv(b, dst, BIG, RDM4_ADDR_UNSPEC, CTX(2)), RDM4_SUCCESS);
    expect_msg(&qb, qs, CTX(2), dst, 3000, RDM4_MSG_REMOTE_CQ_DATA, 0, 42, 2, "an unexpected inject of three buffers");

    /* 0 bytes and the largest. */
    EXPECT(rdm4_trecv(b, dst, BIG, RDM4_ADDR_UNSPEC, 8, 0, CTX(3)), RDM4_SUCCESS);
    EXPECT(inject(a, a_to_b, src, 0, 1, RDM4_MSG_TAGGED, 8, 0, 3), RDM4_SUCCESS);
    expect_msg(&qb, qs, CTX(3), dst, 0, RDM4_MSG_TAGGED, 8, 0, 3, "an inject of 0 bytes");
    EXPECT(rdm4_trecv(b, dst, BIG, RDM4_ADDR_UNSPEC, 9, 0, CTX(4)), RDM4_SUCCESS);
    EXPECT(inject(a, a_to_b, src, BIG, 3, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA, 9, 5, 4), RDM4_SUCCESS);
    expect_msg(&qb, qs, CTX(4), dst, BIG, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA, 9, 5, 4, "an inject of 64 KiB");

    /* Many in a row, received later, in order. */
    int sent = 0;
    for (uint32_t i = 0; i < COUNT; i++) {
        int32_t r;
        do {
            r = inject(a, a_to_b, src, 1 + i * 7 % 2000, 1, RDM4_MSG_TAGGED | RDM4_MSG_REMOTE_CQ_DATA, 100, i, 10 + i);
            if (r == RDM4_EAGAIN) {
                tu_cq_poll(&qa);
                tu_cq_poll(&qb);
            }
        } while (r == RDM4_EAGAIN);
        sent += r == RDM4_SUCCESS;
    }
    CHECK(sent == COUNT, "%d injects in a row accepted (%d)", COUNT, sent);
    int in_order = 0;
    for (uint32_t i = 0; i < COUNT; i++) {
        EXPECT(rdm4_trecv(b, dst, BIG, b_to_a, 100, 0, CTX(5)), RDM4_SUCCESS);
        rdm4_cqe c = tu_cq_expect(&qb, CTX(5), qs, 2, 5000, "one of the injects in a row");
        size_t len = 1 + i * 7 % 2000;
        in_order += c.status == RDM4_SUCCESS && c.len == len && c.data == i && tu_verify(dst, len, 10 + i) < 0;
    }
    CHECK(in_order == COUNT, "they arrive in order with their data (%d of %d)", in_order, COUNT);

    /* Refused. */
    EXPECT(inject(a, a_to_b, src, BIG + 1, 2, 0, 0, 0, 6), RDM4_EINVAL);
    EXPECT(inject(a, a_to_b, src, 10, 1, RDM4_MSG_DELIVERY_COMPLETE, 0, 0, 6), RDM4_EINVAL);
    for (int i = 0; i < 50; i++) {
        tu_cq_poll(&qa);
        tu_cq_poll(&qb);
    }
    CHECK(qa.n == 0, "no completion at the sender (%zu)", qa.n);
    CHECK(qb.n == 0, "nothing else arrived (%zu)", qb.n);

    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    free(src);
    free(dst);
    cleanup_segments();
    return tu_failures ? 1 : 0;
}
