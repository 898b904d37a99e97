/*
 * limits.c: the endpoint's limits (rdm4_ep_attr.max_ops, max_peers,
 * max_mrs and their variables RDM4_MAX_OPS, RDM4_MAX_PEERS, RDM4_MAX_MRS),
 * each driven to its edge over the device of the environment.
 *
 * Checked: operations (posted receives, then sends) up to max_ops are
 * taken and the next post is RDM4_EAGAIN, with nothing changed: every
 * message sent then still arrives once, whole, and a post is taken again
 * once one completes; peers up to max_peers are inserted, the next new
 * address is RDM4_ENOMEM (an address already inserted is not a new peer);
 * registrations up to max_mrs are taken, the next is RDM4_ENOMEM and the
 * first deregistration makes room; the variables override the attributes;
 * out-of-range values are refused at open (RDM4_EINVAL); a non-zero
 * reserved32 is refused.
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

static char prefix[64];

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

#define OPS 6

/* max_ops: OPS receives posted at B, then the next refused; sends from A
 * fill them; a send past A's own limit refused. */
static void ops_limit(void)
{
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.max_ops = OPS;
    uint8_t name_a[RDM4_ADDR_LEN], name_b[RDM4_ADDR_LEN];
    rdm4_ep *a = tu_open_attr(&at, name_a);
    rdm4_ep *b = tu_open_attr(&at, name_b);
    rdm4_addr to_b = tu_insert(a, name_b);
    (void)tu_insert(b, name_a);
    struct tu_cq qa = {.ep = a}, qb = {.ep = b};
    struct tu_cq *qs[] = {&qa, &qb};

    static char rbuf[OPS + 1][256];
    for (int i = 0; i < OPS; i++) {
        EXPECT(rdm4_trecv(b, rbuf[i], sizeof rbuf[i], RDM4_ADDR_UNSPEC, (uint64_t)i, 0, &rbuf[i]), RDM4_SUCCESS);
    }
    EXPECT(rdm4_trecv(b, rbuf[OPS], sizeof rbuf[OPS], RDM4_ADDR_UNSPEC, OPS, 0, &rbuf[OPS]), RDM4_EAGAIN);

    /* A: OPS sends of 200 bytes in flight at most (they may complete
     * before the next is posted; then more are taken). */
    static char sbuf[OPS][200];
    int posted = 0;
    for (int i = 0; i < OPS; i++) {
        tu_fill(sbuf[i], sizeof sbuf[i], (uint32_t)i + 1);
        if (rdm4_tsend(a, sbuf[i], sizeof sbuf[i], to_b, (uint64_t)i, &sbuf[i]) == RDM4_SUCCESS) {
            posted++;
        }
    }
    CHECK(posted == OPS, "%d sends of %d posted within the limit", posted, OPS);
    for (int i = 0; i < OPS; i++) {
        rdm4_cqe c = tu_cq_expect(&qb, rbuf[i], qs, 2, 10000 * tu_slow(), "a receive");
        CHECK(c.status == RDM4_SUCCESS && c.len == 200 && tu_verify(rbuf[i], 200, (uint32_t)i + 1) < 0,
              "message %d arrived whole (status %s, %zu bytes)", i, tu_status(c.status), (size_t)c.len);
        (void)tu_cq_expect(&qa, sbuf[i], qs, 2, 10000 * tu_slow(), "a send");
    }
    /* Room again once completed. */
    EXPECT(rdm4_trecv(b, rbuf[OPS], sizeof rbuf[OPS], RDM4_ADDR_UNSPEC, OPS, 0, &rbuf[OPS]), RDM4_SUCCESS);
    EXPECT(rdm4_cancel(b, &rbuf[OPS]), RDM4_SUCCESS);
    rdm4_cqe c = tu_cq_expect(&qb, rbuf[OPS], qs, 2, 10000 * tu_slow(), "the canceled receive");
    CHECK(c.status == RDM4_ECANCELED, "the last receive canceled (%s)", tu_status(c.status));

    /* A's own limit: OPS receives posted at A, then a send that would be
     * outstanding (1 MiB: it waits for the receiver) is refused. (A small
     * send that a device completes in the call is never outstanding.) */
    for (int i = 0; i < OPS; i++) {
        EXPECT(rdm4_trecv(a, rbuf[i], sizeof rbuf[i], RDM4_ADDR_UNSPEC, 100 + (uint64_t)i, 0, &rbuf[i]), RDM4_SUCCESS);
    }
    static char big[1 << 20];
    EXPECT(rdm4_tsend(a, big, sizeof big, to_b, 7, big), RDM4_EAGAIN);
    EXPECT(rdm4_trecv(b, rbuf[0], sizeof rbuf[0], RDM4_ADDR_UNSPEC, 7, 0, &rbuf[0]), RDM4_SUCCESS);
    CHECK(!tu_cq_wait(&qb, rbuf[0], qs, 2, 100, &c), "the refused send sent nothing");
    EXPECT(rdm4_cancel(b, &rbuf[0]), RDM4_SUCCESS);
    c = tu_cq_expect(&qb, rbuf[0], qs, 2, 10000 * tu_slow(), "the canceled receive");
    rdm4_ep_close(a);
    rdm4_ep_close(b);
}

/* max_peers: 2 peers (itself and one more), the third new one refused. */
static void peers_limit(void)
{
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.max_peers = 2;
    uint8_t names[3][RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open_attr(&at, names[0]);
    rdm4_ep *others[2];
    for (int i = 0; i < 2; i++) {
        others[i] = tu_open(names[i + 1]);
    }
    rdm4_addr h[3];
    EXPECT(rdm4_av_insert(ep, names[0], 1, &h[0]), 1);
    EXPECT(rdm4_av_insert(ep, names[1], 1, &h[1]), 1);
    EXPECT(rdm4_av_insert(ep, names[2], 1, &h[2]), RDM4_ENOMEM);
    EXPECT(rdm4_av_insert(ep, names[1], 1, &h[2]), 1);
    CHECK(h[2] == h[1], "an address inserted again is the same peer, within the limit");
    /* Removing a peer does not make room: its protocol state is kept. */
    rdm4_ep_close(ep);
    for (int i = 0; i < 2; i++) {
        rdm4_ep_close(others[i]);
    }
}

/* max_mrs: 3 registrations, the fourth refused, room after a dereg. */
static void mrs_limit(const char *how)
{
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.max_mrs = 9; /* the variable, when set, says 3 */
    rdm4_ep *ep = tu_open_attr(&at, NULL);
    static char mem[5][4096];
    uint64_t keys[5];
    for (int i = 0; i < 3; i++) {
        EXPECT(rdm4_mr_reg(ep, mem[i], sizeof mem[i], RDM4_ACCESS_REMOTE_WRITE, &keys[i]), RDM4_SUCCESS);
    }
    uint64_t k = 0xABCD;
    EXPECT(rdm4_mr_reg(ep, mem[3], sizeof mem[3], RDM4_ACCESS_REMOTE_WRITE, &k), RDM4_ENOMEM);
    CHECK(k == 0xABCD, "%s: a refused registration leaves the key untouched", how);
    void *p = NULL;
    EXPECT(rdm4_mr_alloc(ep, 4096, RDM4_ACCESS_REMOTE_WRITE, &p, &k), RDM4_ENOMEM);
    EXPECT(rdm4_mr_close(ep, keys[0]), RDM4_SUCCESS);
    EXPECT(rdm4_mr_reg(ep, mem[4], sizeof mem[4], RDM4_ACCESS_REMOTE_WRITE, &keys[4]), RDM4_SUCCESS);
    rdm4_ep_close(ep);
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("limits", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);

    ops_limit();
    peers_limit();

    tu_setenv("RDM4_MAX_MRS", "3");
    mrs_limit("RDM4_MAX_MRS=3 over max_mrs 9");
    unsetenv("RDM4_MAX_MRS");

    /* Values out of range, and reserved32, refused at open. */
    rdm4_ep *ep = NULL;
    const char *bad[][2] = {{"RDM4_MAX_OPS", "0"}, {"RDM4_MAX_PEERS", "2000000"}, {"RDM4_MAX_MRS", "many"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tu_setenv(bad[i][0], bad[i][1]);
        EXPECT(rdm4_ep_open(NULL, &ep), RDM4_EINVAL);
        unsetenv(bad[i][0]);
    }
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.reserved32 = 1;
    EXPECT(rdm4_ep_open(&at, &ep), RDM4_EINVAL);
    CHECK(ep == NULL, "no endpoint from refused attributes");

    int left = tu_shm_files(prefix, 1, 1);
    CHECK(left == 0, "no segment left behind (%d)", left);
    return tu_failures ? 1 : 0;
}
