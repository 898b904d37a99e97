/*
 * fork.c: a process that holds an endpoint forks; the child inherits no
 * endpoint, the parent's goes on undisturbed.
 *
 * The parent opens endpoint A and forks. In the child, calls on A's handle
 * give RDM4_EBADHANDLE (rdm4_poll, rdm4_send, rdm4_ep_close); the child
 * opens an endpoint of its own, inserts A's name (inherited in memory) and
 * sends A a 100,000-byte message, then receives one back, closes its own
 * endpoint and exits (its exit handling must not disturb A). The parent
 * receives the child's
 * message and answers it over A; after the child is gone, A still talks to
 * a fresh endpoint B of the parent's. Every byte is checked, and nothing is
 * left in /dev/shm at the end.
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

#define LEN 100000
#define CTX(n) ((void *)(uintptr_t)(n))

static char prefix[64];

/* Sends `seed`'s pattern from `ep` to `to` and receives one of `rseed` into
 * a fresh buffer, in the order `send_first` says; every byte checked. */
static void exchange(rdm4_ep *ep, rdm4_addr to, uint32_t seed, uint32_t rseed, int send_first, const char *what)
{
    struct tu_cq q = { .ep = ep };
    struct tu_cq *qs[] = { &q };
    uint8_t *out = malloc(LEN), *in = malloc(LEN);
    tu_fill(out, LEN, seed);
    memset(in, 0, LEN);
    EXPECT(rdm4_recv(ep, in, LEN, RDM4_ADDR_UNSPEC, CTX(2)), RDM4_SUCCESS);
    if (send_first) {
        EXPECT(rdm4_send(ep, out, LEN, to, CTX(1)), RDM4_SUCCESS);
    }
    rdm4_cqe r = tu_cq_expect(&q, CTX(2), qs, 1, 30000, what);
    CHECK(r.status == RDM4_SUCCESS && r.len == LEN && tu_verify(in, LEN, rseed) < 0, "%s: %d bytes received whole",
          what, LEN);
    if (!send_first) {
        EXPECT(rdm4_send(ep, out, LEN, to, CTX(1)), RDM4_SUCCESS);
    }
    rdm4_cqe s = tu_cq_expect(&q, CTX(1), qs, 1, 30000, what);
    CHECK(s.status == RDM4_SUCCESS, "%s: the send completed (%s)", what, tu_status(s.status));
    free(out);
    free(in);
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("fork", prefix, sizeof prefix);
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = tu_kill_kids;
    uint8_t a_name[RDM4_ADDR_LEN], c_name[RDM4_ADDR_LEN];
    rdm4_ep *a = tu_open(a_name);
    printf("# device: %s\n", tu_device_name(tu_device(a)));
    int up[2];
    if (pipe(up) != 0) {
        FATAL("pipe");
    }
    if (tu_fork(0)) {
        tu_role = "[child] ";
        close(up[0]);
        rdm4_cqe e;
        EXPECT(rdm4_poll(a, &e, 1), RDM4_EBADHANDLE);
        EXPECT(rdm4_send(a, "x", 1, 0, CTX(9)), RDM4_EBADHANDLE);
        EXPECT(rdm4_ep_close(a), RDM4_EBADHANDLE);
        rdm4_ep *c = tu_open(c_name);
        tu_write_all(up[1], c_name, sizeof c_name);
        rdm4_addr to_a = tu_insert(c, a_name);
        exchange(c, to_a, 11, 22, 1, "child to parent and back");
        EXPECT(rdm4_ep_close(c), RDM4_SUCCESS);
        /* Its exit runs the library's exit handling, which must leave the
         * parent's endpoint alone. */
        exit(tu_failures ? 1 : 0);
    }
    tu_role = "[parent] ";
    close(up[1]);
    tu_read_all(up[0], c_name, sizeof c_name);
    rdm4_addr to_c = tu_insert(a, c_name);
    exchange(a, to_c, 22, 11, 0, "from the child and back");
    tu_reap(tu_kids[0], "the child");
    tu_kids[0] = 0;
    uint8_t b_name[RDM4_ADDR_LEN];
    rdm4_ep *b = tu_open(b_name);
    rdm4_addr a_to_b = tu_insert(a, b_name), b_to_a = tu_insert(b, a_name);
    struct tu_cq qa = { .ep = a }, qb = { .ep = b };
    struct tu_cq *qs[] = { &qa, &qb };
    uint8_t *out = malloc(LEN), *in = malloc(LEN);
    tu_fill(out, LEN, 33);
    EXPECT(rdm4_recv(b, in, LEN, b_to_a, CTX(4)), RDM4_SUCCESS);
    EXPECT(rdm4_send(a, out, LEN, a_to_b, CTX(3)), RDM4_SUCCESS);
    rdm4_cqe r = tu_cq_expect(&qb, CTX(4), qs, 2, 30000, "A to B after the fork");
    rdm4_cqe s = tu_cq_expect(&qa, CTX(3), qs, 2, 30000, "A's send to B");
    CHECK(r.status == RDM4_SUCCESS && s.status == RDM4_SUCCESS && tu_verify(in, LEN, 33) < 0,
          "A still works after its child left: %d bytes to B, whole", LEN);
    free(out);
    free(in);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? 1 : 0;
}
