/*
 * test_util.h: helpers shared by the C programs in c_tests/ (not a program:
 * the harness ignores *.h files). Everything is `static inline` so a program
 * that uses only part of it still compiles with -Wall -Wextra -Werror.
 *
 * Needs _POSIX_C_SOURCE >= 200809L (or _GNU_SOURCE) defined before any include.
 */
#ifndef RDM4_TEST_UTIL_H
#define RDM4_TEST_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdm4.h"

/* Checks that fail count and continue; the program exits 1 at the end. */
static int tu_failures;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond) {                                                                        \
            printf("ok - %s", tu_role);                                                    \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
        } else {                                                                           \
            fprintf(stderr, "FAIL %s%s:%d: `%s`: ", tu_role, __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            fflush(stderr);                                                                \
            tu_failures++;                                                                 \
        }                                                                                  \
    } while (0)

/* A failure after which going on makes no sense: message, then exit 1. */
#define FATAL(...)                                                                  \
    do {                                                                            \
        fprintf(stderr, "FATAL %s%s:%d: ", tu_role, __FILE__, __LINE__);            \
        fprintf(stderr, __VA_ARGS__);                                               \
        fprintf(stderr, "\n");                                                      \
        fflush(stderr);                                                             \
        tu_fatal_hook();                                                            \
        exit(EXIT_FAILURE);                                                         \
    } while (0)

/* Printed before every check and failure message (e.g. "[child] "). */
static const char *tu_role = "";
/* Called by FATAL before exiting (e.g. to kill a child, remove segments). */
static void (*tu_fatal_cleanup)(void);

static inline void tu_fatal_hook(void)
{
    if (tu_fatal_cleanup) {
        void (*f)(void) = tu_fatal_cleanup;
        tu_fatal_cleanup = NULL;
        f();
    }
}

/* The name of a status code ("RDM4_EINVAL"), or "?" for an unknown one. */
static inline const char *tu_status(int32_t s)
{
    static const char *const names[] = {
        "RDM4_SUCCESS",   "RDM4_EAGAIN",    "RDM4_EINVAL",    "RDM4_ENOMEM",   "RDM4_EBADHANDLE",
        "RDM4_ENOADDR",   "RDM4_ETRUNC",    "RDM4_EREMOTEACCESS", "RDM4_ENOREG", "RDM4_EBUSY",
        "RDM4_ENOTSUP",   "RDM4_EPEER",     "RDM4_ETIMEDOUT", "RDM4_ECANCELED", "RDM4_EPROTO",
        "RDM4_EOVERFLOW", "RDM4_EIO",       "RDM4_EINTERNAL", "RDM4_EREMOTE",  "RDM4_ETOOSMALL",
        "RDM4_ENOENT",
    };
    if (s > 0) {
        return "(positive)";
    }
    if (s < -20) {
        return "?";
    }
    return names[-s];
}

/* Monotonic milliseconds. */
static inline double tu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sleeps `us` microseconds. */
static inline void tu_sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

/* Bounds the process's run time: alarm(secs), or alarm(RDM4_TEST_TIMEOUT_S)
 * when that is set (runs under valgrind). An alarm is not inherited by
 * fork(): every forked process calls this itself. */
static inline void tu_alarm(unsigned secs)
{
    const char *t = getenv("RDM4_TEST_TIMEOUT_S");
    if (t && atoi(t) > 0) {
        secs = (unsigned)atoi(t);
    }
    alarm(secs);
}

/* A factor for a program's own time bounds: 1, or 20 when
 * RDM4_TEST_TIMEOUT_S is set (under valgrind, where time says nothing). */
static inline double tu_slow(void)
{
    const char *t = getenv("RDM4_TEST_TIMEOUT_S");
    return t && atoi(t) > 0 ? 20.0 : 1.0;
}

/* Sets an environment variable; FATAL when that fails. */
static inline void tu_setenv(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        FATAL("setenv %s", name);
    }
}

/* Computes (a busy loop, no library call) for `ms` milliseconds; returns
 * the result so that the work is not optimised away. */
static inline uint64_t tu_compute_ms(double ms)
{
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    double until = tu_now_ms() + ms;
    do {
        for (int i = 0; i < 4096; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    } while (tu_now_ms() < until);
    return x;
}

/* Sets RDM4_SHM_PREFIX to "rdm4t-<name>-<pid>" (written to `out`). */
static inline void tu_set_prefix(const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "rdm4t-%s-%ld", name, (long)getpid());
    if (setenv("RDM4_SHM_PREFIX", out, 1) != 0) {
        perror("setenv");
        exit(EXIT_FAILURE);
    }
}

/* Files in /dev/shm whose name starts with "<prefix>-"; removes them when
 * `remove` is set. Returns how many there were (-1 if /dev/shm is unreadable). */
static inline int tu_shm_files(const char *prefix, int remove, int print)
{
    DIR *d = opendir("/dev/shm");
    if (!d) {
        return -1;
    }
    char want[128];
    snprintf(want, sizeof want, "%s-", prefix);
    size_t wl = strlen(want);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, want, wl) == 0) {
            n++;
            if (print) {
                fprintf(stderr, "  left in /dev/shm: %s\n", e->d_name);
            }
            if (remove) {
                char path[512];
                snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
                unlink(path);
            }
        }
    }
    closedir(d);
    return n;
}

/* A deterministic byte pattern: stream `seed`, built from 64-bit words so
 * that filling and checking megabytes stays cheap (also under valgrind). */
static inline uint64_t tu_word(uint64_t k, uint32_t seed)
{
    uint64_t z = k + (uint64_t)(seed + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void tu_fill(void *buf, size_t len, uint32_t seed)
{
    uint8_t *b = buf;
    for (size_t k = 0; k * 8 < len; k++) {
        uint64_t w = tu_word(k, seed);
        size_t n = len - k * 8 < 8 ? len - k * 8 : 8;
        memcpy(b + k * 8, &w, n);
    }
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long tu_verify(const void *buf, size_t len, uint32_t seed)
{
    const uint8_t *b = buf;
    for (size_t k = 0; k * 8 < len; k++) {
        uint64_t w = tu_word(k, seed);
        size_t n = len - k * 8 < 8 ? len - k * 8 : 8;
        if (memcmp(b + k * 8, &w, n) != 0) {
            const uint8_t *e = (const uint8_t *)&w;
            for (size_t i = 0; i < n; i++) {
                if (b[k * 8 + i] != e[i]) {
                    return (long)(k * 8 + i);
                }
            }
        }
    }
    return -1;
}

/* True when `len` bytes at `p` all equal `v`. */
static inline int tu_all(const void *p, size_t len, uint8_t v)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++) {
        if (b[i] != v) {
            return 0;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------------- */
/* Completion store: entries polled from an endpoint, taken out by match.  */
/* ---------------------------------------------------------------------- */

#define TU_CQ_MAX 256

struct tu_cq {
    rdm4_ep *ep;
    rdm4_cqe e[TU_CQ_MAX];
    size_t n;
};

/* One rdm4_poll into the store; returns the number of new entries. */
static inline int tu_cq_poll(struct tu_cq *q)
{
    if (q->n >= TU_CQ_MAX) {
        FATAL("completion store full (%d entries never taken)", TU_CQ_MAX);
    }
    int32_t rc = rdm4_poll(q->ep, &q->e[q->n], TU_CQ_MAX - q->n);
    if (rc < 0) {
        FATAL("rdm4_poll: %s (%d)", tu_status(rc), (int)rc);
    }
    if ((size_t)rc > TU_CQ_MAX - q->n) {
        FATAL("rdm4_poll returned %d entries for a room of %zu", (int)rc, TU_CQ_MAX - q->n);
    }
    q->n += (size_t)rc;
    return rc;
}

/* Takes out the oldest entry with this context, if any. */
static inline int tu_cq_take(struct tu_cq *q, void *ctx, rdm4_cqe *out)
{
    for (size_t i = 0; i < q->n; i++) {
        if (q->e[i].context == ctx) {
            *out = q->e[i];
            memmove(&q->e[i], &q->e[i + 1], (q->n - i - 1) * sizeof q->e[0]);
            q->n--;
            return 1;
        }
    }
    return 0;
}

/* Polls the stores in `qs` (progressing every endpoint) until `q` has an
 * entry with context `ctx` (then 1, the entry in *out), or `timeout_ms`
 * passed (then 0). */
static inline int tu_cq_wait(struct tu_cq *q, void *ctx, struct tu_cq **qs, size_t nq, double timeout_ms,
                             rdm4_cqe *out)
{
    double start = tu_now_ms();
    for (;;) {
        if (tu_cq_take(q, ctx, out)) {
            return 1;
        }
        int got = 0;
        for (size_t i = 0; i < nq; i++) {
            got += tu_cq_poll(qs[i]);
        }
        if (got == 0) {
            if (tu_now_ms() - start > timeout_ms) {
                return 0;
            }
            if (nq == 1) {
                (void)rdm4_wait(q->ep, 1);
            } else {
                tu_sleep_us(50);
            }
        }
    }
}

/* tu_cq_wait, FATAL on timeout. */
static inline rdm4_cqe tu_cq_expect(struct tu_cq *q, void *ctx, struct tu_cq **qs, size_t nq, double timeout_ms,
                                    const char *what)
{
    rdm4_cqe c;
    if (!tu_cq_wait(q, ctx, qs, nq, timeout_ms, &c)) {
        FATAL("no completion for %s after %.0f ms", what, timeout_ms);
    }
    return c;
}

/* Opens an endpoint with attributes `at` (NULL: the defaults) and writes
 * its address (unless `addr` is NULL); FATAL when that fails. */
static inline rdm4_ep *tu_open_attr(const rdm4_ep_attr *at, uint8_t addr[RDM4_ADDR_LEN])
{
    rdm4_ep *ep = NULL;
    int32_t rc = rdm4_ep_open(at, &ep);
    if (rc != RDM4_SUCCESS || ep == NULL) {
        FATAL("rdm4_ep_open: %s (%d)", tu_status(rc), (int)rc);
    }
    size_t len = RDM4_ADDR_LEN;
    rc = addr ? rdm4_ep_getname(ep, addr, &len) : RDM4_SUCCESS;
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_ep_getname: %s (%d)", tu_status(rc), (int)rc);
    }
    return ep;
}

/* tu_open_attr with the default attributes. */
static inline rdm4_ep *tu_open(uint8_t addr[RDM4_ADDR_LEN])
{
    return tu_open_attr(NULL, addr);
}

/* The value of the endpoint's counter `name` (rdm4_counters); FATAL when
 * it has none of that name. */
static inline uint64_t tu_counter(rdm4_ep *ep, const char *name)
{
    for (size_t first = 0;; first += 64) {
        const char *names[64];
        uint64_t values[64];
        int32_t n = rdm4_counters(ep, first, names, values, 64);
        if (n <= 0) {
            break;
        }
        for (int32_t i = 0; i < n; i++) {
            if (strcmp(names[i], name) == 0) {
                return values[i];
            }
        }
    }
    FATAL("no counter named %s", name);
}

/* Opens an endpoint (single-threaded with `single`), sends its name on
 * `to_peer`, reads the peer's from `from_peer` and inserts it. */
static inline rdm4_ep *tu_open_and_meet(int to_peer, int from_peer, rdm4_addr *peer, int single);

/* tu_open_attr for a single-threaded application (RDM4_THREAD_SINGLE):
 * no lock; over udp the device is shared with its responder without one. */
static inline rdm4_ep *tu_open_single(uint8_t addr[RDM4_ADDR_LEN])
{
    rdm4_ep_attr at;
    rdm4_ep_attr_init(&at);
    at.threading = RDM4_THREAD_SINGLE;
    return tu_open_attr(&at, addr);
}

/* The device `ep` runs on (RDM4_DEVICE_SHM or RDM4_DEVICE_UDP, from
 * rdm4_ep_query), for the checks that belong to one device; FATAL when the
 * query fails. */
static inline uint32_t tu_device(rdm4_ep *ep)
{
    rdm4_ep_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    int32_t rc = rdm4_ep_query(ep, &info);
    if (rc != RDM4_SUCCESS) {
        FATAL("rdm4_ep_query: %s (%d)", tu_status(rc), (int)rc);
    }
    return info.device;
}

/* A device's name ("shm", "udp", "auto"). */
static inline const char *tu_device_name(uint32_t device)
{
    return device == RDM4_DEVICE_SHM ? "shm" : device == RDM4_DEVICE_UDP ? "udp" : device == RDM4_DEVICE_AUTO ? "auto" : "?";
}

/* Writes all `len` bytes to a pipe; FATAL when that fails. */
static inline void tu_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n <= 0) {
            FATAL("write to a pipe: %zd", n);
        }
        p += n;
        len -= (size_t)n;
    }
}

/* Reads exactly `len` bytes from a pipe (blocking; the program's alarm
 * bounds it); FATAL on end of file or error. */
static inline void tu_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            FATAL("read from a pipe: %zd (the other side ended)", n);
        }
        p += n;
        len -= (size_t)n;
    }
}

/* Waits for the forked process `pid` (the alarm bounds the wait) and checks
 * that it exited with status 0; returns 1 when it did. */
static inline int tu_reap(pid_t pid, const char *what)
{
    int st = 0;
    pid_t got;
    do {
        got = waitpid(pid, &st, 0);
    } while (got < 0 && errno == EINTR);
    int ok = got == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    CHECK(ok, "%s exited with status 0 (it ended with %s %d)", what,
          got != pid ? "waitpid failed" : WIFSIGNALED(st) ? "signal" : "status",
          got != pid ? -1 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return ok;
}

/* Inserts one raw address; FATAL when that fails. */
static inline rdm4_addr tu_insert(rdm4_ep *ep, const uint8_t addr[RDM4_ADDR_LEN])
{
    rdm4_addr a = 0;
    int32_t rc = rdm4_av_insert(ep, addr, 1, &a);
    if (rc != 1) {
        FATAL("rdm4_av_insert: %s (%d)", tu_status(rc), (int)rc);
    }
    return a;
}

/* Checks that `call` returns status `want`. */
#define EXPECT(call, want)                                                                              \
    do {                                                                                                \
        int32_t rc_ = (call);                                                                           \
        CHECK(rc_ == (want), "%s == %s (got %s %d)", #call, #want, tu_status(rc_), (int)rc_);           \
    } while (0)

/* Opens two endpoints that know each other: *a_to_b is B's handle at A,
 * *b_to_a A's at B. */
static inline void tu_pair(rdm4_ep **a, rdm4_ep **b, rdm4_addr *a_to_b, rdm4_addr *b_to_a)
{
    uint8_t addr_a[RDM4_ADDR_LEN], addr_b[RDM4_ADDR_LEN];
    *a = tu_open(addr_a);
    *b = tu_open(addr_b);
    *a_to_b = tu_insert(*a, addr_b);
    *b_to_a = tu_insert(*b, addr_a);
}

/* The children a program forked (up to 16, 0: none) and the segment
 * prefix it uses: tu_kill_kids, a FATAL cleanup, kills them and removes
 * the segments. */
static pid_t tu_kids[16];
static const char *tu_kids_prefix;

static inline void tu_kill_kids(void)
{
    for (size_t k = 0; k < sizeof tu_kids / sizeof tu_kids[0]; k++) {
        if (tu_kids[k] > 0) {
            kill(tu_kids[k], SIGKILL);
        }
    }
    if (tu_kids_prefix) {
        tu_shm_files(tu_kids_prefix, 1, 0);
    }
}

static inline rdm4_ep *tu_open_and_meet(int to_peer, int from_peer, rdm4_addr *peer, int single)
{
    uint8_t me[RDM4_ADDR_LEN], other[RDM4_ADDR_LEN];
    rdm4_ep *ep = single ? tu_open_single(me) : tu_open(me);
    tu_write_all(to_peer, me, sizeof me);
    tu_read_all(from_peer, other, sizeof other);
    *peer = tu_insert(ep, other);
    return ep;
}

/* Forks child `k` (its pid in tu_kids[k]); in the child (then true) the
 * parent's checks and FATAL cleanup are not its own, and it gets 60 s. */
static inline int tu_fork(int k)
{
    fflush(stdout);
    tu_kids[k] = fork();
    if (tu_kids[k] < 0) {
        FATAL("fork");
    }
    if (tu_kids[k] != 0) {
        return 0;
    }
    tu_fatal_cleanup = NULL;
    tu_failures = 0;
    tu_alarm(60);
    return 1;
}

#endif /* RDM4_TEST_UTIL_H */
