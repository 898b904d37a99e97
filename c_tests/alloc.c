/*
 * alloc.c: rdm4_mr_alloc / rdm4_mr_free, memory peers of this host map.
 *
 * Two endpoints in this process over the device of the environment (the
 * harness runs it over each). B allocates; A writes and reads B's memory
 * while B never calls the library between its allocation and its free
 * (over shm: copies through A's mapping of B's memory, no target progress;
 * over udp: served by B's device without B's calls), except for atomics
 * over udp, which B's progress serves. Checked:
 *  - the memory is zeroed, the key works for writes (8 B, 4 KiB at an odd
 *    offset, 1 MiB) and reads, data verified in B's memory and read back;
 *  - out of bounds and a wrong key: RDM4_EREMOTEACCESS, nothing written;
 *  - rdm4_write_now, rdm4_read_now, rdm4_atomic_now: over shm done in the
 *    call on allocated and registered memory, refusals; over udp refused
 *    with RDM4_ENOTSUP, nothing written; no completion written;
 *  - rdm4_mr_reg_fd of a memfd: writes and a fetch-add land in its pages
 *    (shm: in the call; udp: rdm4_write and rdm4_fetch_atomic), refused
 *    after rdm4_mr_close; bad arguments refused (the file's checks: shm);
 *  - rdm4_mr_close refuses the key; rdm4_mr_free frees it once; a write
 *    after the free is refused; no file is left behind (shm).
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#ifndef _GNU_SOURCE /* also given on the command line by some builds */
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

/* Polls A alone until `ctx` completes; returns its status. */
static int32_t wait_a(struct tu_cq *qa, uintptr_t ctx)
{
    rdm4_cqe c = tu_cq_expect(qa, CTX(ctx), &qa, 1, 5000, "an RMA of A");
    return c.status;
}

int main(void)
{
    alarm(60);
    tu_set_prefix("alloc", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    rdm4_ep *a, *b;
    rdm4_addr a_to_b, b_to_a;
    tu_pair(&a, &b, &a_to_b, &b_to_a);
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *both[2] = { &qa, &qb };
    /* Auto between two endpoints of one host goes by shm too. */
    const int shm = tu_device(a) != RDM4_DEVICE_UDP;
    printf("# device: %s\n", tu_device_name(tu_device(a)));

    enum { LEN = 2 << 20 };
    uint8_t *mem = NULL;
    uint64_t key = 0;
    EXPECT(rdm4_mr_alloc(b, LEN, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, (void **)&mem, &key),
           RDM4_SUCCESS);
    CHECK(mem != NULL && tu_all(mem, LEN, 0), "the allocation is zeroed");
    if (!shm) {
        /* Over udp the first RMA towards B waits for B's HANDSHAKE, which
         * B's own progress sends (man 7 rdm4): one message, then B makes
         * no call until its free; its device's responder serves A. */
        uint8_t hi = 1, got = 0;
        EXPECT(rdm4_recv(b, &got, 1, b_to_a, CTX(1)), RDM4_SUCCESS);
        EXPECT(rdm4_send(a, &hi, 1, a_to_b, CTX(2)), RDM4_SUCCESS);
        rdm4_cqe c = tu_cq_expect(&qb, CTX(1), both, 2, 5000, "B's receive");
        CHECK(c.status == RDM4_SUCCESS && got == 1, "udp: a first message gives A B's handshake");
        c = tu_cq_expect(&qa, CTX(2), both, 2, 5000, "A's send");
        CHECK(c.status == RDM4_SUCCESS, "and completes (%s)", tu_status(c.status));
    }

    static const size_t offs[3] = { 0, 4093, 65536 }, lens[3] = { 8, 4096, 1 << 20 };
    uint8_t *src = malloc(1 << 20), *back = malloc(1 << 20);
    if (!src || !back) {
        FATAL("malloc");
    }
    for (int i = 0; i < 3; i++) {
        tu_fill(src, lens[i], 40 + i);
        uint64_t raddr = (uint64_t)(uintptr_t)(mem + offs[i]);
        EXPECT(rdm4_write(a, src, lens[i], a_to_b, raddr, key, CTX(10 + i)), RDM4_SUCCESS);
        int32_t st = wait_a(&qa, 10 + i);
        CHECK(st == RDM4_SUCCESS && tu_verify(mem + offs[i], lens[i], 40 + i) < 0,
              "a %zu-byte write at offset %zu lands in B's memory (%s)", lens[i], offs[i], tu_status(st));
        memset(back, 0, lens[i]);
        EXPECT(rdm4_read(a, back, lens[i], a_to_b, raddr, key, CTX(20 + i)), RDM4_SUCCESS);
        st = wait_a(&qa, 20 + i);
        CHECK(st == RDM4_SUCCESS && tu_verify(back, lens[i], 40 + i) < 0, "and reads back (%s)", tu_status(st));
    }
    /* Out of bounds, wrong key: refused, nothing written. */
    uint64_t end = (uint64_t)(uintptr_t)(mem + LEN - 4);
    EXPECT(rdm4_write(a, src, 8, a_to_b, end, key, CTX(30)), RDM4_SUCCESS);
    CHECK(wait_a(&qa, 30) == RDM4_EREMOTEACCESS && tu_all(mem + LEN - 4, 4, 0), "a write past the end is refused");
    EXPECT(rdm4_write(a, src, 8, a_to_b, (uint64_t)(uintptr_t)mem, key ^ 1, CTX(31)), RDM4_SUCCESS);
    CHECK(wait_a(&qa, 31) == RDM4_EREMOTEACCESS, "a wrong key is refused");

    /* Done in the call (B never calls the library): no completion. Over
     * udp nothing is done in the call: each call is refused with
     * RDM4_ENOTSUP and changes nothing. */
    tu_fill(src, 64, 50);
    uint64_t at = (uint64_t)(uintptr_t)(mem + 128);
    uint64_t *ctr = (uint64_t *)(void *)(mem + 4096), one = 1, old = 99, cmp = 0, swap = 7;
    uint64_t cat = (uint64_t)(uintptr_t)ctr;
    static uint64_t plain[8];
    uint64_t pkey = 0;
    uint64_t v = 0x1122334455667788ULL, got = 0;
    if (shm) {
        EXPECT(rdm4_write_now(a, src, 64, a_to_b, at, key), RDM4_SUCCESS);
        CHECK(tu_verify(mem + 128, 64, 50) < 0, "rdm4_write_now: the data is there when it returns");
        memset(back, 0, 64);
        EXPECT(rdm4_read_now(a, back, 64, a_to_b, at, key), RDM4_SUCCESS);
        CHECK(tu_verify(back, 64, 50) < 0, "rdm4_read_now: the data is in the buffer when it returns");
        *ctr = 41;
        EXPECT(rdm4_atomic_now(a, &one, NULL, &old, 1, RDM4_UINT64, RDM4_SUM, a_to_b, cat, key), RDM4_SUCCESS);
        CHECK(old == 41 && *ctr == 42, "rdm4_atomic_now fetch-add: old %llu, now %llu", (unsigned long long)old,
              (unsigned long long)*ctr);
        EXPECT(rdm4_atomic_now(a, &one, NULL, NULL, 1, RDM4_UINT64, RDM4_SUM, a_to_b, cat, key), RDM4_SUCCESS);
        CHECK(*ctr == 43, "rdm4_atomic_now add without result");
        cmp = 43;
        EXPECT(rdm4_atomic_now(a, &swap, &cmp, &old, 1, RDM4_UINT64, RDM4_CSWAP, a_to_b, cat, key), RDM4_SUCCESS);
        CHECK(old == 43 && *ctr == 7, "rdm4_atomic_now compare-swap");
        EXPECT(rdm4_atomic_now(a, &swap, NULL, &old, 1, RDM4_UINT64, RDM4_CSWAP, a_to_b, cat, key), RDM4_EINVAL);
        EXPECT(rdm4_write_now(a, src, 8, a_to_b, end, key), RDM4_EREMOTEACCESS);
        CHECK(tu_all(mem + LEN - 4, 4, 0), "rdm4_write_now past the end: refused, nothing written");
        EXPECT(rdm4_read_now(a, back, 8, a_to_b, at, key ^ 1), RDM4_EREMOTEACCESS);
        EXPECT(rdm4_atomic_now(a, &one, NULL, &old, 1, RDM4_UINT64, RDM4_SUM, a_to_b, cat, key ^ 1),
               RDM4_EREMOTEACCESS);
        EXPECT(rdm4_write_now(a, src, 8, 12345, at, key), RDM4_ENOADDR);
        /* Ordinary registered memory: writes and reads in the call, atomics not. */
        EXPECT(rdm4_mr_reg(b, plain, sizeof plain, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &pkey),
               RDM4_SUCCESS);
        EXPECT(rdm4_write_now(a, &v, 8, a_to_b, (uint64_t)(uintptr_t)&plain[2], pkey), RDM4_SUCCESS);
        EXPECT(rdm4_read_now(a, &got, 8, a_to_b, (uint64_t)(uintptr_t)&plain[2], pkey), RDM4_SUCCESS);
        CHECK(plain[2] == v && got == v, "rdm4_write_now / rdm4_read_now on registered memory");
        EXPECT(rdm4_atomic_now(a, &one, NULL, &old, 1, RDM4_UINT64, RDM4_SUM, a_to_b, (uint64_t)(uintptr_t)plain,
                               pkey),
               RDM4_ENOTSUP);
        CHECK(plain[0] == 0, "an atomic not done in the call applies nothing");
    } else {
        *ctr = 41;
        memset(back, 0, 64);
        EXPECT(rdm4_write_now(a, src, 64, a_to_b, at, key), RDM4_ENOTSUP);
        CHECK(tu_all(mem + 128, 64, 0), "udp: rdm4_write_now wrote nothing");
        EXPECT(rdm4_read_now(a, back, 64, a_to_b, at, key), RDM4_ENOTSUP);
        CHECK(tu_all(back, 64, 0), "udp: rdm4_read_now wrote nothing into the buffer");
        EXPECT(rdm4_atomic_now(a, &one, NULL, &old, 1, RDM4_UINT64, RDM4_SUM, a_to_b, cat, key), RDM4_ENOTSUP);
        CHECK(old == 99 && *ctr == 41, "udp: rdm4_atomic_now applied nothing, wrote no result");
        EXPECT(rdm4_mr_reg(b, plain, sizeof plain, RDM4_ACCESS_REMOTE_READ | RDM4_ACCESS_REMOTE_WRITE, &pkey),
               RDM4_SUCCESS);
        EXPECT(rdm4_write_now(a, &v, 8, a_to_b, (uint64_t)(uintptr_t)&plain[2], pkey), RDM4_ENOTSUP);
        EXPECT(rdm4_read_now(a, &got, 8, a_to_b, (uint64_t)(uintptr_t)&plain[2], pkey), RDM4_ENOTSUP);
        EXPECT(rdm4_atomic_now(a, &one, NULL, &old, 1, RDM4_UINT64, RDM4_SUM, a_to_b, (uint64_t)(uintptr_t)plain,
                               pkey),
               RDM4_ENOTSUP);
        CHECK(tu_all(plain, sizeof plain, 0) && got == 0, "udp: nothing done on registered memory either");
    }
    struct rdm4_cqe e;
    CHECK(rdm4_poll(a, &e, 1) == 0, "the _now calls wrote no completion");
    EXPECT(rdm4_mr_close(b, pkey), RDM4_SUCCESS);

    /* Memory the application shares by a memfd: peers map the file. */
    int mfd = memfd_create("rdm4-alloc-test", MFD_CLOEXEC);
    CHECK(mfd >= 0 && ftruncate(mfd, 8192) == 0, "a memfd of two pages");
    uint8_t *shared = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (shared == MAP_FAILED) {
        FATAL("mmap");
    }
    uint64_t skey = 0;
    int32_t st;
    if (shm) { /* shm checks the file it shares; elsewhere it is an ordinary registration */
        EXPECT(rdm4_mr_reg_fd(b, shared + 4096, 4096, mfd, 100, RDM4_ACCESS_REMOTE_WRITE, &skey), RDM4_EINVAL);
        EXPECT(rdm4_mr_reg_fd(b, shared + 4096, 4096, -1, 4096, RDM4_ACCESS_REMOTE_WRITE, &skey), RDM4_EINVAL);
    }
    EXPECT(rdm4_mr_reg_fd(b, shared + 4096, 4096, mfd, 4096, RDM4_ACCESS_REMOTE_WRITE, NULL), RDM4_EINVAL);
    EXPECT(rdm4_mr_reg_fd(b, shared + 4096, 4096, mfd, 4096, RDM4_ACCESS_REMOTE_WRITE | RDM4_ACCESS_REMOTE_READ,
                          &skey),
           RDM4_SUCCESS);
    close(mfd); /* the library keeps its own descriptor */
    tu_fill(src, 256, 60);
    uint64_t sat = (uint64_t)(uintptr_t)(shared + 4096 + 512);
    uint64_t *sctr = (uint64_t *)(void *)(shared + 4096 + 1024);
    uint64_t sctr_at = (uint64_t)(uintptr_t)sctr;
    *sctr = 5;
    if (shm) {
        EXPECT(rdm4_write_now(a, src, 256, a_to_b, sat, skey), RDM4_SUCCESS);
        CHECK(tu_verify(shared + 4096 + 512, 256, 60) < 0, "a write lands in the memfd's pages");
        EXPECT(rdm4_atomic_now(a, &one, NULL, &old, 1, RDM4_UINT64, RDM4_SUM, a_to_b, sctr_at, skey),
               RDM4_SUCCESS);
        CHECK(old == 5 && *sctr == 6, "a fetch-add on the memfd's pages by this CPU");
    } else {
        /* udp: the same through operations with completions (the fetch-add
         * is served by B's progress). */
        EXPECT(rdm4_write(a, src, 256, a_to_b, sat, skey, CTX(40)), RDM4_SUCCESS);
        st = wait_a(&qa, 40);
        CHECK(st == RDM4_SUCCESS && tu_verify(shared + 4096 + 512, 256, 60) < 0,
              "udp: a write lands in the memfd's pages (%s)", tu_status(st));
        EXPECT(rdm4_fetch_atomic(a, &one, 1, &old, RDM4_UINT64, RDM4_SUM, a_to_b, sctr_at, skey, CTX(41)),
               RDM4_SUCCESS);
        st = tu_cq_expect(&qa, CTX(41), both, 2, 5000, "a fetch-add on the memfd's pages").status;
        CHECK(st == RDM4_SUCCESS && old == 5 && *sctr == 6, "udp: a fetch-add on the memfd's pages (%s)",
              tu_status(st));
    }
    EXPECT(rdm4_mr_close(b, skey), RDM4_SUCCESS);
    if (shm) {
        EXPECT(rdm4_write_now(a, src, 8, a_to_b, sat, skey), RDM4_EREMOTEACCESS);
    } else {
        EXPECT(rdm4_write(a, src, 8, a_to_b, sat, skey, CTX(42)), RDM4_SUCCESS);
        st = wait_a(&qa, 42);
        CHECK(st == RDM4_EREMOTEACCESS, "udp: a write after rdm4_mr_close is refused (%s)", tu_status(st));
    }
    munmap(shared, 8192);

    /* Freeing: mr_close refuses it; free once; later writes refused. */
    EXPECT(rdm4_mr_close(b, key), RDM4_EINVAL);
    EXPECT(rdm4_mr_free(b, key), RDM4_SUCCESS);
    EXPECT(rdm4_mr_free(b, key), RDM4_EINVAL);
    EXPECT(rdm4_write(a, src, 8, a_to_b, (uint64_t)(uintptr_t)mem, key, CTX(32)), RDM4_SUCCESS);
    st = wait_a(&qa, 32);
    CHECK(st == RDM4_EREMOTEACCESS || st == RDM4_ETIMEDOUT, "a write after the free is refused (%s)", tu_status(st));
    free(src);
    free(back);
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment or allocation file left behind");
    return tu_failures ? 1 : 0;
}
