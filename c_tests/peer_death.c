/*
 * peer_death.c: a process is killed (SIGKILL) while its peer has sends and
 * reads outstanding towards it; each of them must end with RDM4_EPEER
 * within 1 s of the kill, and the survivor goes on with a third process.
 *
 * Forked processes; the parent relays names over pipes, kills, and never
 * opens an endpoint. RDM4_SHM_CMA=0 and RDM4_UDP_RDMA=0: reads are then
 * served by the victim's own progress on every device (shm's cross-memory
 * attach, or the udp device, would serve them without it), so that they
 * are still outstanding when it dies. RDM4_UDP_GIVEUP_MS keeps its default
 * (5 s): a dead peer must be found by other means than silence.
 *  - the victim registers 32 MiB, exchanges a message each way with the
 *    survivor (handshakes done), then computes (a busy loop, no library
 *    call) until it is killed;
 *  - the survivor posts towards it a 64 MiB send, four 8-byte sends, four
 *    8-byte sends with delivery complete (RDM4_MSG_DELIVERY_COMPLETE: they
 *    wait for the victim's application) and four 8 MiB rdm4_read of its
 *    memory, and polls (rdm4_wait) while the parent kills the victim
 *    100 ms later;
 *  - a third process opens, and it and the survivor exchange messages
 *    (8 B, 64 KiB, 1 MiB) both ways.
 * Checked: the 64 MiB send, the delivery-complete sends and the reads end
 * with RDM4_EPEER within 1 s of the kill (the time is printed); a plain
 * 8-byte send ends either with status 0 (it was handed to the victim's
 * endpoint, which the header's promise allows before its death) or with
 * RDM4_EPEER within 1 s; a send posted after the death fails with
 * RDM4_EPEER (at once or as its completion, within 1 s); the messages with
 * the third process arrive intact and complete with status 0; the
 * processes exit as they should; nothing left in /dev/shm.
 * Over udp, as root where `ip netns` works, the scenario runs a second
 * time across two network namespaces joined by a veth pair ("hosts"; made
 * and removed by the program): the victim in one, the survivor and the
 * third process in the other.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#ifndef _GNU_SOURCE /* also given on the command line by some builds */
#define _GNU_SOURCE /* setns */
#endif

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define HUGE_LEN (64u << 20)
#define READ_LEN (8u << 20)
#define READS 4
#define SMALLS 4
#define CTX(n) ((void *)(uintptr_t)(n))

/* The survivor's operations towards the victim, by context. */
enum { OP_HUGE = 0, OP_PLAIN = 1, OP_DC = OP_PLAIN + SMALLS, OP_READ = OP_DC + SMALLS, OPS = OP_READ + READS };

static char prefix[64];
#define victim tu_kids[0]
#define survivor tu_kids[1]
#define third tu_kids[2]
/* Parent <-> child pipes: to_x (parent writes), from_x (child writes). */
static int to_v[2], from_v[2], to_s[2], from_s[2], to_c[2], from_c[2];

struct victim_info {
    uint8_t name[RDM4_ADDR_LEN];
    uint64_t raddr, key;
};

/* The two namespaces of the second round ("" in the first), and the
 * address each child binds there. */
static char ns_name[2][32];
static const char *const ns_addr[2] = { "10.78.0.1", "10.78.0.2" };
/* The namespace (0 or 1) of the child being spawned; -1: none. */
static int ns_next = -1;

/* Runs `ip` with the arguments in `fmt`; true when it succeeds. */
static int ip_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ip_cmd(const char *fmt, ...)
{
    char args[256], cmd[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "ip %s >/dev/null 2>&1", args);
    return system(cmd) == 0;
}

static void ns_remove(void)
{
    for (int k = 0; k < 2; k++) {
        if (ns_name[k][0]) {
            ip_cmd("netns del %s", ns_name[k]);
            ns_name[k][0] = 0;
        }
    }
}

/* Makes the two namespaces; false (nothing left) where it cannot. */
static int ns_make(void)
{
    int id = (int)getpid() % 100000;
    snprintf(ns_name[0], sizeof ns_name[0], "rdm4pdA%d", id);
    snprintf(ns_name[1], sizeof ns_name[1], "rdm4pdB%d", id);
    int ok = ip_cmd("netns add %s", ns_name[0]) && ip_cmd("netns add %s", ns_name[1]) &&
             ip_cmd("link add pda%d type veth peer name pdb%d", id, id) &&
             ip_cmd("link set pda%d netns %s", id, ns_name[0]) && ip_cmd("link set pdb%d netns %s", id, ns_name[1]) &&
             ip_cmd("-n %s addr add %s/24 dev pda%d", ns_name[0], ns_addr[0], id) &&
             ip_cmd("-n %s addr add %s/24 dev pdb%d", ns_name[1], ns_addr[1], id) &&
             ip_cmd("-n %s link set pda%d up", ns_name[0], id) && ip_cmd("-n %s link set pdb%d up", ns_name[1], id) &&
             ip_cmd("-n %s link set lo up", ns_name[0]) && ip_cmd("-n %s link set lo up", ns_name[1]);
    if (!ok) {
        ns_remove();
    }
    return ok;
}

/* In a child: enters namespace `k` and binds its address there. */
static void ns_enter(int k)
{
    char path[64];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns_name[k]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        FATAL("setns %s", path);
    }
    close(fd);
    tu_setenv("RDM4_UDP_ADDR", ns_addr[k]);
}

static void cleanup(void)
{
    tu_kill_kids();
    ns_remove();
}

/* Closes the parent's end of a pipe, and forgets it (-1). */
static void close_end(int *fd)
{
    close(*fd);
    *fd = -1;
}

/* Forks a child that runs `fn`, with only the ends `keep_r` (read) and
 * `keep_w` (write) of the pipes in `pipes` kept open. */
static pid_t spawn(int (*fn)(void), const char *role, int *pipes[], int npipes, int keep_r, int keep_w)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        FATAL("fork");
    }
    if (pid == 0) {
        tu_role = role;
        tu_fatal_cleanup = NULL;
        tu_failures = 0;
        tu_alarm(60);
        if (ns_next >= 0) {
            ns_enter(ns_next);
        }
        for (int k = 0; k < npipes; k++) {
            for (int e = 0; e < 2; e++) {
                if (pipes[k][e] >= 0 && pipes[k][e] != keep_r && pipes[k][e] != keep_w) {
                    close(pipes[k][e]);
                }
            }
        }
        exit(fn());
    }
    return pid;
}

/* Sends `hello` to `to` and receives one from it (8 bytes each way). */
static void hello(struct tu_cq *q, rdm4_addr to, uint32_t out_seed, uint32_t in_seed)
{
    static uint8_t out[8], in[8];
    tu_fill(out, 8, out_seed);
    struct tu_cq *qs[1] = { q };
    EXPECT(rdm4_trecv(q->ep, in, 8, to, 77, 0, CTX(900)), RDM4_SUCCESS);
    EXPECT(rdm4_tsend(q->ep, out, 8, to, 77, CTX(901)), RDM4_SUCCESS);
    rdm4_cqe r = tu_cq_expect(q, CTX(900), qs, 1, 10000 * tu_slow(), "hello in");
    rdm4_cqe s = tu_cq_expect(q, CTX(901), qs, 1, 10000 * tu_slow(), "hello out");
    CHECK(r.status == RDM4_SUCCESS && s.status == RDM4_SUCCESS && tu_verify(in, 8, in_seed) < 0,
          "a message each way with the peer (%s, %s)", tu_status(r.status), tu_status(s.status));
}

/* ---------------------------------------------------------------------- */

static int victim_main(void)
{
    struct victim_info vi;
    rdm4_ep *ep = tu_open(vi.name);
    uint8_t *mem = malloc((size_t)READS * READ_LEN);
    if (!mem) {
        FATAL("malloc");
    }
    tu_fill(mem, (size_t)READS * READ_LEN, 5);
    EXPECT(rdm4_mr_reg(ep, mem, (size_t)READS * READ_LEN, RDM4_ACCESS_REMOTE_READ, &vi.key), RDM4_SUCCESS);
    vi.raddr = (uint64_t)(uintptr_t)mem;
    tu_write_all(from_v[1], &vi, sizeof vi);
    uint8_t s_name[RDM4_ADDR_LEN];
    tu_read_all(to_v[0], s_name, sizeof s_name);
    rdm4_addr s = tu_insert(ep, s_name);
    struct tu_cq q = { .ep = ep };
    hello(&q, s, 1, 2);
    /* Away for good: compute until killed (the alarm ends it otherwise). */
    char b = 'A';
    tu_write_all(from_v[1], &b, 1);
    fflush(stdout);
    for (;;) {
        (void)tu_compute_ms(1000);
    }
}

/* ---------------------------------------------------------------------- */

/* Messages of 8 B, 64 KiB and 1 MiB each way with `to`. */
static void talk(struct tu_cq *q, rdm4_addr to, uint32_t seed_out, uint32_t seed_in, const char *what)
{
    static const size_t lens[3] = { 8, 64 << 10, 1 << 20 };
    uint8_t *out[3], *in[3];
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(lens[k]);
        in[k] = calloc(1, lens[k]);
        if (!out[k] || !in[k]) {
            FATAL("malloc");
        }
        tu_fill(out[k], lens[k], seed_out + (uint32_t)k);
        EXPECT(rdm4_trecv(q->ep, in[k], lens[k], to, 50 + (uint64_t)k, 0, CTX(950 + k)), RDM4_SUCCESS);
    }
    for (int k = 0; k < 3; k++) {
        EXPECT(rdm4_tsend(q->ep, out[k], lens[k], to, 50 + (uint64_t)k, CTX(960 + k)), RDM4_SUCCESS);
    }
    struct tu_cq *qs[1] = { q };
    for (int k = 0; k < 3; k++) {
        rdm4_cqe r = tu_cq_expect(q, CTX(950 + k), qs, 1, 10000 * tu_slow(), "a receive");
        rdm4_cqe s = tu_cq_expect(q, CTX(960 + k), qs, 1, 10000 * tu_slow(), "a send");
        CHECK(r.status == RDM4_SUCCESS && r.len == lens[k] && tu_verify(in[k], lens[k], seed_in + (uint32_t)k) < 0 &&
                  s.status == RDM4_SUCCESS,
              "%s: %zu bytes each way, intact (receive %s, send %s)", what, lens[k], tu_status(r.status),
              tu_status(s.status));
        free(out[k]);
        free(in[k]);
    }
}

static int survivor_main(void)
{
    uint8_t me[RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open(me);
    tu_write_all(from_s[1], me, sizeof me);
    struct victim_info vi;
    tu_read_all(to_s[0], &vi, sizeof vi);
    rdm4_addr v = tu_insert(ep, vi.name);
    struct tu_cq q = { .ep = ep };
    hello(&q, v, 2, 1);
    char b;
    tu_read_all(to_s[0], &b, 1); /* the victim is away */

    uint8_t *huge = calloc(1, HUGE_LEN), *rd = calloc(READS, READ_LEN);
    static uint8_t small[2 * SMALLS][8];
    if (!huge || !rd) {
        FATAL("calloc");
    }
    EXPECT(rdm4_tsend(ep, huge, HUGE_LEN, v, 1, CTX(OP_HUGE)), RDM4_SUCCESS);
    for (int k = 0; k < SMALLS; k++) {
        tu_fill(small[k], 8, 10 + (uint32_t)k);
        EXPECT(rdm4_tsend(ep, small[k], 8, v, 2 + (uint64_t)k, CTX(OP_PLAIN + k)), RDM4_SUCCESS);
    }
    for (int k = 0; k < SMALLS; k++) {
        tu_fill(small[SMALLS + k], 8, 20 + (uint32_t)k);
        struct iovec iov = { small[SMALLS + k], 8 };
        rdm4_msg m = { &iov, 1, v, 20 + (uint64_t)k, 0, 0, CTX(OP_DC + k) };
        EXPECT(rdm4_sendmsg(ep, &m, RDM4_MSG_TAGGED | RDM4_MSG_DELIVERY_COMPLETE), RDM4_SUCCESS);
    }
    for (int k = 0; k < READS; k++) {
        EXPECT(rdm4_read(ep, rd + (size_t)k * READ_LEN, READ_LEN, v, vi.raddr + (uint64_t)k * READ_LEN, vi.key,
                         CTX(OP_READ + k)),
               RDM4_SUCCESS);
    }
    b = 'P';
    tu_write_all(from_s[1], &b, 1);

    /* Poll while the victim is killed; each completion's time is kept. */
    double at[OPS];
    int32_t st[OPS];
    for (int k = 0; k < OPS; k++) {
        at[k] = -1;
    }
    double killed_at = -1, t0 = tu_now_ms();
    int done = 0;
    while (done < OPS || killed_at < 0) {
        if (tu_now_ms() - t0 > 10000 * tu_slow()) {
            break;
        }
        if (tu_cq_poll(&q) == 0) {
            (void)rdm4_wait(ep, 1);
        }
        for (int k = 0; k < OPS; k++) {
            rdm4_cqe c;
            if (at[k] < 0 && tu_cq_take(&q, CTX(k), &c)) {
                at[k] = tu_now_ms();
                st[k] = c.status;
                done++;
            }
        }
        struct pollfd p = { to_s[0], POLLIN, 0 };
        if (killed_at < 0 && poll(&p, 1, 0) == 1) {
            tu_read_all(to_s[0], &killed_at, sizeof killed_at);
        }
    }
    if (killed_at < 0) {
        FATAL("the parent did not report the kill");
    }
    double bound = 1000 * tu_slow(), worst = 0;
    int plain_ok = 0, plain_peer = 0;
    for (int k = 0; k < OPS; k++) {
        const char *what = k == OP_HUGE ? "the 64 MiB send"
                           : k < OP_DC  ? "an 8-byte send"
                           : k < OP_READ ? "an 8-byte delivery-complete send"
                                         : "an 8 MiB read";
        double ms = at[k] - killed_at;
        if (at[k] < 0) {
            CHECK(0, "%s (context %d) had not completed 10 s after the kill", what, k);
            continue;
        }
        if (k >= OP_PLAIN && k < OP_DC && st[k] == RDM4_SUCCESS) {
            plain_ok++; /* handed to the victim's endpoint (before its death) */
            continue;
        }
        if (k >= OP_PLAIN && k < OP_DC) {
            plain_peer++;
        }
        worst = ms > worst ? ms : worst;
        CHECK(st[k] == RDM4_EPEER && ms >= 0 && ms <= bound, "%s (context %d) ended with RDM4_EPEER %.0f ms after the "
              "kill (%s)", what, k, ms, tu_status(st[k]));
    }
    printf("# the outstanding operations ended at most %.0f ms after the kill; of the plain 8-byte sends %d had "
           "completed with status 0, %d ended with RDM4_EPEER\n",
           worst, plain_ok, plain_peer);
    CHECK(q.n == 0, "no other completion (%zu)", q.n);

    /* A send to the dead peer now fails, at once or as its completion. */
    static uint8_t late[8];
    int32_t rc = rdm4_tsend(ep, late, 8, v, 99, CTX(999));
    if (rc == RDM4_SUCCESS) {
        rdm4_cqe c;
        struct tu_cq *qs[1] = { &q };
        double t1 = tu_now_ms();
        int got = tu_cq_wait(&q, CTX(999), qs, 1, bound, &c);
        CHECK(got && c.status == RDM4_EPEER, "a send posted after the death completes with RDM4_EPEER (%s after "
              "%.0f ms)", got ? tu_status(c.status) : "nothing", tu_now_ms() - t1);
    } else {
        CHECK(rc == RDM4_EPEER, "a send posted after the death is refused with RDM4_EPEER (%s)", tu_status(rc));
    }
    free(huge);
    free(rd);

    /* Life goes on with a third process. */
    uint8_t c_name[RDM4_ADDR_LEN];
    tu_read_all(to_s[0], c_name, sizeof c_name);
    rdm4_addr c = tu_insert(ep, c_name);
    talk(&q, c, 30, 40, "with the third process");
    b = 'D';
    tu_write_all(from_s[1], &b, 1);
    tu_read_all(to_s[0], &b, 1);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

/* ---------------------------------------------------------------------- */

static int third_main(void)
{
    uint8_t me[RDM4_ADDR_LEN], s_name[RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open(me);
    tu_write_all(from_c[1], me, sizeof me);
    tu_read_all(to_c[0], s_name, sizeof s_name);
    rdm4_addr s = tu_insert(ep, s_name);
    struct tu_cq q = { .ep = ep };
    talk(&q, s, 40, 30, "with the survivor");
    char b = 'D';
    tu_write_all(from_c[1], &b, 1);
    tu_read_all(to_c[0], &b, 1);
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

/* ---------------------------------------------------------------------- */

/* One round: `hosts` puts the victim in one namespace, the others in
 * the other. */
static void scenario(int hosts)
{
    int *first[4] = { to_v, from_v, to_s, from_s };
    for (int k = 0; k < 4; k++) {
        if (pipe(first[k]) != 0) {
            FATAL("pipe");
        }
    }
    ns_next = hosts ? 1 : -1;
    victim = spawn(victim_main, hosts ? "[two hosts, victim] " : "[victim] ", first, 4, to_v[0], from_v[1]);
    ns_next = hosts ? 0 : -1;
    survivor = spawn(survivor_main, hosts ? "[two hosts, survivor] " : "[survivor] ", first, 4, to_s[0], from_s[1]);
    close_end(&to_v[0]);
    close_end(&from_v[1]);
    close_end(&to_s[0]);
    close_end(&from_s[1]);

    struct victim_info vi;
    uint8_t s_name[RDM4_ADDR_LEN];
    tu_read_all(from_v[0], &vi, sizeof vi);
    tu_read_all(from_s[0], s_name, sizeof s_name);
    tu_write_all(to_v[1], s_name, sizeof s_name);
    tu_write_all(to_s[1], &vi, sizeof vi);
    char b;
    tu_read_all(from_v[0], &b, 1); /* the victim is away */
    tu_write_all(to_s[1], &b, 1);
    tu_read_all(from_s[0], &b, 1); /* the survivor posted */
    tu_sleep_us(100000);
    double killed_at = tu_now_ms();
    kill(victim, SIGKILL);
    int st = 0;
    pid_t got = waitpid(victim, &st, 0);
    CHECK(got == victim && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the victim was killed by SIGKILL");
    victim = 0;
    tu_write_all(to_s[1], &killed_at, sizeof killed_at);

    /* The third process. */
    if (pipe(to_c) != 0 || pipe(from_c) != 0) {
        FATAL("pipe");
    }
    int *all[6] = { to_v, from_v, to_s, from_s, to_c, from_c };
    third = spawn(third_main, hosts ? "[two hosts, third] " : "[third] ", all, 6, to_c[0], from_c[1]);
    close_end(&to_c[0]);
    close_end(&from_c[1]);
    uint8_t c_name[RDM4_ADDR_LEN];
    tu_read_all(from_c[0], c_name, sizeof c_name);
    tu_write_all(to_c[1], s_name, sizeof s_name);
    tu_write_all(to_s[1], c_name, sizeof c_name);
    tu_read_all(from_s[0], &b, 1);
    tu_read_all(from_c[0], &b, 1);
    tu_write_all(to_s[1], &b, 1);
    tu_write_all(to_c[1], &b, 1);
    tu_reap(survivor, "the survivor");
    tu_reap(third, "the third process");
    survivor = third = 0;
    for (int k = 0; k < 6; k++) {
        for (int e = 0; e < 2; e++) {
            if (all[k][e] >= 0) {
                close_end(&all[k][e]);
            }
        }
    }
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("peer-death", prefix, sizeof prefix);
    tu_setenv("RDM4_SHM_CMA", "0");
    tu_setenv("RDM4_UDP_RDMA", "0");
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_kids_prefix = prefix;
    tu_fatal_cleanup = cleanup;
    scenario(0);
    const char *dev = getenv("RDM4_DEVICE");
    if (dev && strcmp(dev, "udp") == 0) {
        if (geteuid() == 0 && ns_make()) {
            scenario(1);
            ns_remove();
        } else {
            printf("# skip the two-namespace round: `ip netns add` needs root and iproute2\n");
        }
    }
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm (the victim's segments went at the next open)");
    return tu_failures ? 1 : 0;
}
