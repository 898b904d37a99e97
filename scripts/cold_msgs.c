/* The cost of an 8 B message when rdm4's state has left the caches, as it
 * does where processes outnumber the CPUs (docs/performance.md, "the 8 B
 * all-to-all, cold"). Per round, endpoint 0 of this process exchanges an
 * 8 B tagged message with each of N other endpoints, after touching EVICT
 * bytes of other memory; prints the time per message of the rounds
 * (the eviction not counted; the first tenth of the rounds not timed).
 *
 *   cc -O2 -g -Iinclude -o /tmp/cold_msgs scripts/cold_msgs.c \
 *      target/release/librdm4.a -lpthread -ldl -lm -lgcc_s
 *   RDM4_DEVICE=shm taskset -c 0 /tmp/cold_msgs N ROUNDS EVICT
 *   e.g. 7 20000 0 (warm) and 7 20000 8388608 (cold); under
 *   valgrind --tool=cachegrind --cache-sim=yes --LL=2097152,16,64 the
 *   misses per source line. */
#include <rdm4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((noinline)) static void evict(volatile char *b, size_t n) { for (size_t i = 0; i < n; i += 64) b[i]++; }
int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: cold_msgs N ROUNDS EVICT\n"); return 2; }
    int n = atoi(argv[1]), rounds = atoi(argv[2]); size_t ev = (size_t)atol(argv[3]);
    if (n < 1 || n > 64 || rounds < 10) { fprintf(stderr, "N from 1 to 64, ROUNDS at least 10\n"); return 2; }
    rdm4_ep_attr a; rdm4_ep_attr_init(&a);
    rdm4_ep *e[65]; rdm4_addr to[65], back[65];
    for (int i = 0; i <= n; i++) if (rdm4_ep_open(&a, &e[i])) { fprintf(stderr, "rdm4_ep_open failed\n"); return 1; }
    uint8_t ad[64]; size_t l;
    for (int i = 1; i <= n; i++) {
        l = sizeof ad; rdm4_ep_getname(e[i], ad, &l); rdm4_av_insert(e[0], ad, 1, &to[i]);
        l = sizeof ad; rdm4_ep_getname(e[0], ad, &l); rdm4_av_insert(e[i], ad, 1, &back[i]);
    }
    char *big = malloc(ev + 64); memset(big, 1, ev + 64);
    rdm4_cqe c[64]; char sb[8] = "abcdefg", rb[65][8], rb0[65][8];
    double busy = 0; long msgs = 0;
    for (int r = 0; r < rounds; r++) {
        evict(big, ev);
        double t0 = now();
        for (int i = 1; i <= n; i++) rdm4_trecv(e[0], rb0[i], 8, RDM4_ADDR_UNSPEC, 0, 0, NULL);
        for (int i = 1; i <= n; i++) rdm4_trecv(e[i], rb[i], 8, RDM4_ADDR_UNSPEC, 0, 0, NULL);
        for (int i = 1; i <= n; i++) while (rdm4_tsend(e[0], sb, 8, to[i], 0, NULL) == RDM4_EAGAIN) rdm4_poll(e[0], c, 64);
        for (int i = 1; i <= n; i++) {
            int got = 0; while (got < 1) { int m = rdm4_poll(e[i], c, 64); if (m > 0) got += m; }
            while (rdm4_tsend(e[i], sb, 8, back[i], 0, NULL) == RDM4_EAGAIN) rdm4_poll(e[i], c, 64);
        }
        int s = 0; while (s < 2 * n) { int m = rdm4_poll(e[0], c, 64); if (m > 0) s += m; }
        for (int i = 1; i <= n; i++) { int got = 0; while (got < 1) { int m = rdm4_poll(e[i], c, 64); if (m > 0) got += m; } }
        if (r >= rounds / 10) { busy += now() - t0; msgs += 2 * n; }
    }
    printf("n=%d evict=%zu: %.1f ns/msg\n", n, ev, busy * 1e9 / msgs);
    for (int i = 0; i <= n; i++) rdm4_ep_close(e[i]);
    return 0;
}
