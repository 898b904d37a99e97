/*
 * query.c: rdm4_ep_query and rdm4_counters over the device of the
 * environment (run over shm and over udp).
 *
 * Checked: the device the environment chose, the modes and the settings
 * the endpoint was opened with (defaults, then attributes), the limits
 * (RDM4_MSG_MAX, the inject size, which rdm4_inject honours at its edge),
 * thresholds consistent with each other and the MTU; a caller's struct
 * smaller than this version's is written only up to its size; NULL,
 * sizes too small and bad handles refused. Counters: every name present
 * once, read in pieces as a whole, packets counted on both sides of a
 * message, the udp counters moving on udp only.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

static char prefix[64];

/* The value of counter `name` of `ep` (FATAL when there is none). */
static uint64_t counter(rdm4_ep *ep, const char *name)
{
    const char *names[512];
    uint64_t values[512];
    int32_t n = rdm4_counters(ep, 0, names, values, 512);
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return values[i];
        }
    }
    FATAL("no counter %s", name);
}

static void cleanup_segments(void)
{
    tu_shm_files(prefix, 1, 0);
}

int main(void)
{
    alarm(60);
    tu_set_prefix("query", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup_segments;
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dev = getenv("RDM4_DEVICE");
    uint32_t want_dev = !dev                       ? RDM4_DEVICE_AUTO
                        : strcmp(dev, "udp") == 0  ? RDM4_DEVICE_UDP
                        : strcmp(dev, "auto") == 0 ? RDM4_DEVICE_AUTO
                                                   : RDM4_DEVICE_SHM;
    const uint64_t want_devices = want_dev == RDM4_DEVICE_AUTO ? 3 : want_dev == RDM4_DEVICE_UDP ? 2 : 1;

    /* Defaults. */
    rdm4_ep *a, *b;
    rdm4_addr a_to_b, b_to_a;
    tu_pair(&a, &b, &a_to_b, &b_to_a);
    (void)b_to_a;
    rdm4_ep_info in;
    memset(&in, 0x5a, sizeof in);
    in.size = sizeof in;
    EXPECT(rdm4_ep_query(a, &in), RDM4_SUCCESS);
    CHECK(in.size == sizeof in && in.device == want_dev && in.progress == RDM4_PROGRESS_MANUAL &&
              in.threading == RDM4_THREAD_SAFE,
          "device %u (want %u), progress %u, threading %u", in.device, want_dev, in.progress, in.threading);
    CHECK(in.max_msg_size == RDM4_MSG_MAX && in.inject_size == 65536, "limits: max %llu, inject %llu",
          (unsigned long long)in.max_msg_size, (unsigned long long)in.inject_size);
    CHECK(in.mtu >= 1024 && in.eager_max > 0 && in.eager_max < in.mtu && in.eager_max_untagged >= in.eager_max &&
              in.eager_max_untagged < in.mtu,
          "thresholds: mtu %llu, eager %llu / %llu", (unsigned long long)in.mtu, (unsigned long long)in.eager_max,
          (unsigned long long)in.eager_max_untagged);
    CHECK(in.medium_max == 65536 && in.unexpected_limit == 64ull << 20 && in.max_credits == 64,
          "default settings: medium %llu, unexpected %llu, credits %llu", (unsigned long long)in.medium_max,
          (unsigned long long)in.unexpected_limit, (unsigned long long)in.max_credits);
    CHECK(want_dev != RDM4_DEVICE_UDP || in.rdma == 3, "udp offers RDMA read and write (%u)", in.rdma);
    CHECK(in.devices == want_devices, "devices %llu (want %llu)", (unsigned long long)in.devices,
          (unsigned long long)want_devices);
    CHECK(in.timeout_ms == 60000 && in.longread_min == UINT64_MAX && in.runt_size == 262144,
          "timeout %llu ms, long-read from %llu, runt %llu", (unsigned long long)in.timeout_ms,
          (unsigned long long)in.longread_min, (unsigned long long)in.runt_size);
    CHECK(tu_all(in.reserved, sizeof in.reserved, 0), "reserved fields are zero");
    /* rdm4_inject takes exactly up to inject_size. */
    static uint8_t big[65537];
    EXPECT(rdm4_inject(a, big, (size_t)in.inject_size + 1, a_to_b), RDM4_EINVAL);
    EXPECT(rdm4_inject(a, big, (size_t)in.inject_size, a_to_b), RDM4_SUCCESS);

    /* A shorter struct (an older caller's): nothing past its size. */
    rdm4_ep_info part;
    memset(&part, 0x5a, sizeof part);
    part.size = offsetof(rdm4_ep_info, mtu);
    EXPECT(rdm4_ep_query(a, &part), RDM4_SUCCESS);
    CHECK(part.size == offsetof(rdm4_ep_info, mtu) && part.inject_size == 65536 &&
              tu_all((uint8_t *)&part + offsetof(rdm4_ep_info, mtu), sizeof part - offsetof(rdm4_ep_info, mtu), 0x5a),
          "a %zu-byte struct is written up to its size only", (size_t)offsetof(rdm4_ep_info, mtu));
    /* Counters: names unique, read in pieces as a whole. */
    static const char *names[512], *piece[512];
    static uint64_t values[512];
    int32_t n = rdm4_counters(a, 0, names, values, 512);
    CHECK(n >= 100 && n < 512, "%d counters", (int)n);
    int unique = 1;
    for (int32_t i = 0; i < n; i++) {
        for (int32_t j = 0; j < i; j++) {
            unique &= strcmp(names[i], names[j]) != 0;
        }
    }
    CHECK(unique, "every counter name once");
    int32_t got = 0;
    for (size_t first = 0;; first += 5) {
        int32_t k = rdm4_counters(a, first, piece + first, NULL, 5);
        if (k <= 0) {
            break;
        }
        got += k;
    }
    CHECK(got == n && memcmp(piece, names, (size_t)n * sizeof names[0]) == 0, "read five at a time: the same %d",
          (int)got);
    EXPECT(rdm4_counters(a, (size_t)n, names, values, 512), 0);
    EXPECT(rdm4_counters(NULL, 0, names, values, 512), RDM4_EBADHANDLE);
    /* The injected message: sent by A, received by B. */
    struct tu_cq qb = { .ep = b };
    double t0 = tu_now_ms();
    while (counter(b, "rx_packets") == 0 && tu_now_ms() - t0 < 2000) {
        tu_cq_poll(&qb);
        rdm4_cqe e;
        (void)rdm4_poll(a, &e, 1);
    }
    CHECK(counter(a, "tx_packets") >= 1 && counter(b, "rx_packets") >= 1, "tx_packets %llu at A, rx_packets %llu at B",
          (unsigned long long)counter(a, "tx_packets"), (unsigned long long)counter(b, "rx_packets"));
    /* By type and by protocol: the injected 64 KiB message went by medium. */
    CHECK(counter(a, "tx_MEDIUM_MSGRTM") >= 1 && counter(b, "rx_MEDIUM_MSGRTM") >= 1 &&
              counter(a, "ops_msg_medium") == 1 && counter(a, "bytes_msg_medium") == in.inject_size &&
              counter(a, "ops_msg_eager") == 0,
          "medium: tx_MEDIUM_MSGRTM %llu at A, rx_MEDIUM_MSGRTM %llu at B, ops_msg_medium %llu (%llu bytes) at A",
          (unsigned long long)counter(a, "tx_MEDIUM_MSGRTM"), (unsigned long long)counter(b, "rx_MEDIUM_MSGRTM"),
          (unsigned long long)counter(a, "ops_msg_medium"), (unsigned long long)counter(a, "bytes_msg_medium"));
    /* A 1 MiB tagged message goes by long-CTS: its RTM out, CTS back,
     * CTSDATA out (tagged: the injected message waits unexpected). */
    {
        enum { M = 1 << 20 };
        uint8_t *s = calloc(1, M), *r = calloc(1, M);
        if (!s || !r) {
            FATAL("calloc");
        }
        struct tu_cq qa = { .ep = a };
        struct tu_cq *qs[2] = { &qa, &qb };
        EXPECT(rdm4_trecv(b, r, M, RDM4_ADDR_UNSPEC, 9, 0, (void *)(uintptr_t)2), RDM4_SUCCESS);
        EXPECT(rdm4_tsend(a, s, M, a_to_b, 9, (void *)(uintptr_t)1), RDM4_SUCCESS);
        (void)tu_cq_expect(&qb, (void *)(uintptr_t)2, qs, 2, 5000, "the 1 MiB receive");
        (void)tu_cq_expect(&qa, (void *)(uintptr_t)1, qs, 2, 5000, "the 1 MiB send");
        CHECK(counter(a, "ops_msg_longcts") == 1 && counter(a, "bytes_msg_longcts") == M &&
                  counter(a, "tx_LONGCTS_TAGRTM") == 1 && counter(b, "rx_LONGCTS_TAGRTM") == 1 &&
                  counter(a, "rx_CTS") >= 1 && counter(b, "tx_CTS") == counter(a, "rx_CTS") &&
                  counter(a, "tx_CTSDATA") >= 1 && counter(a, "tx_CTSDATA") == counter(b, "rx_CTSDATA"),
              "long-CTS: ops %llu (%llu bytes), RTM %llu/%llu, CTS %llu/%llu, CTSDATA %llu/%llu",
              (unsigned long long)counter(a, "ops_msg_longcts"), (unsigned long long)counter(a, "bytes_msg_longcts"),
              (unsigned long long)counter(a, "tx_LONGCTS_TAGRTM"), (unsigned long long)counter(b, "rx_LONGCTS_TAGRTM"),
              (unsigned long long)counter(b, "tx_CTS"), (unsigned long long)counter(a, "rx_CTS"),
              (unsigned long long)counter(a, "tx_CTSDATA"), (unsigned long long)counter(b, "rx_CTSDATA"));
        free(s);
        free(r);
    }
    uint64_t dgrams = counter(a, "udp_datagrams_sent");
    CHECK(want_dev == RDM4_DEVICE_UDP ? dgrams >= 1 && counter(a, "udp_send_calls") >= 1 : dgrams == 0,
          "udp_datagrams_sent %llu on this device", (unsigned long long)dgrams);
    EXPECT(rdm4_ep_query(a, NULL), RDM4_EINVAL);
    part.size = 4;
    EXPECT(rdm4_ep_query(a, &part), RDM4_EINVAL);
    EXPECT(rdm4_ep_query(NULL, &in), RDM4_EBADHANDLE);
    EXPECT(rdm4_ep_close(a), RDM4_SUCCESS);
    EXPECT(rdm4_ep_close(b), RDM4_SUCCESS);
    in.size = sizeof in;
    EXPECT(rdm4_ep_query(a, &in), RDM4_EBADHANDLE);

    /* Attributes show. */
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.medium_max = 100000;
    at.unexpected_limit = 1 << 20;
    at.max_credits = 16;
    at.threading = RDM4_THREAD_SINGLE;
    rdm4_ep *c = NULL;
    EXPECT(rdm4_ep_open(&at, &c), RDM4_SUCCESS);
    in.size = sizeof in;
    EXPECT(rdm4_ep_query(c, &in), RDM4_SUCCESS);
    CHECK(in.medium_max == 100000 && in.unexpected_limit == 1 << 20 && in.max_credits == 16 &&
              in.threading == RDM4_THREAD_SINGLE,
          "the attributes: medium %llu, unexpected %llu, credits %llu, threading %u",
          (unsigned long long)in.medium_max, (unsigned long long)in.unexpected_limit,
          (unsigned long long)in.max_credits, in.threading);
    EXPECT(rdm4_ep_close(c), RDM4_SUCCESS);
    rdm4_ep_attr_init(&at);
    at.progress = RDM4_PROGRESS_AUTO;
    EXPECT(rdm4_ep_open(&at, &c), RDM4_SUCCESS);
    EXPECT(rdm4_ep_query(c, &in), RDM4_SUCCESS);
    CHECK(in.progress == RDM4_PROGRESS_AUTO, "automatic progress shows (%u)", in.progress);
    EXPECT(rdm4_ep_close(c), RDM4_SUCCESS);
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "no segment left behind");
    return tu_failures ? 1 : 0;
}
