/*
 * fi_check: checks the libfabric provider rdm4 (fi/) through libfabric's
 * public API only. It opens two endpoints in one process, each in a fabric
 * and domain of its own (a domain of rdm4 has one endpoint), exchanges
 * their names with fi_getname / fi_av_insert, and checks, group by group:
 *
 *   1 getinfo    fi_getinfo: FI_EP_MSG / FI_EP_DGRAM hints and a node name
 *                get -FI_ENODATA (with FI_SOURCE a service is the udp
 *                device's port, which a domain opened from it holds); caps FI_TAGGED alone give no FI_MSG,
 *                FI_RMA or FI_ATOMIC; tx op_flags hold FI_COMPLETION;
 *                mem_tag_format has bit 63; cq_data_size >= 4; mr_mode
 *                FI_MR_SCALABLE with FI_RMA is refused, FI_MR_BASIC is kept;
 *                fi_getname(NULL, &len) gives -FI_ETOOSMALL and the length;
 *                names are at most 64 bytes
 *   2 msg        fi_send/recv, fi_tsend/trecv (0 B .. 4 MiB, receive posted
 *                before and after the send), fi_sendv/recvv and fi_tsendv/
 *                trecvv with 3 buffers, fi_senddata / fi_tsenddata and
 *                fi_sendmsg / fi_tsendmsg with 8 bytes of FI_REMOTE_CQ_DATA,
 *                fi_inject / fi_tinject / fi_injectdata / fi_tinjectdata
 *                (buffer scribbled right after the call, no completion):
 *                every byte, the guard bytes after the buffers, and the
 *                completions' op_context, flags, len, tag and data; tag
 *                matching with ignore bits; FI_DIRECTED_RECV; FI_MORE and
 *                FI_DELIVERY_COMPLETE; FI_THREAD_DOMAIN; each CQ format
 *                (CONTEXT, MSG, DATA, TAGGED; nothing written past an
 *                entry); fi_cq_readfrom gives the sender's fi_addr
 *                (FI_SOURCE) with FI_AV_MAP and FI_AV_TABLE, and
 *                FI_ADDR_NOTAVAIL (or a usable fi_addr) for a sender never
 *                inserted; fi_av_lookup, fi_av_remove, inserting again
 *   3 trunc      a message longer than the receive: fi_cq_read gives
 *                -FI_EAVAIL, fi_cq_readerr FI_ETRUNC with olen (what did not
 *                fit), fi_cq_strerror a string; nothing past the buffer
 *   4 selective  tx CQ bound FI_TRANSMIT | FI_SELECTIVE_COMPLETION, op_flags
 *                without FI_COMPLETION (FI_SETOPSFLAG): fi_tsendmsg flags 0
 *                and fi_tsend write no completion, FI_COMPLETION ones do;
 *                counters bound FI_SEND / FI_RECV count every one; a failing
 *                operation without FI_COMPLETION still reports its error
 *   5 probe      FI_PEEK with no message (FI_ENOMSG with the context), after
 *                one arrived (len, tag, data); FI_PEEK | FI_CLAIM then
 *                FI_CLAIM with the same fi_context2; FI_CLAIM | FI_DISCARD;
 *                FI_PEEK | FI_DISCARD; a context reused after a discard
 *   6 cancel     fi_cancel of posted fi_trecv / fi_recv: FI_ECANCELED with the
 *                context, canceling again -FI_ENOENT, the buffer untouched
 *   7 rma        fi_mr_reg / fi_mr_key; fi_write, fi_read (1 B .. 8 MiB),
 *                fi_writedata (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA at the
 *                target), fi_writev / fi_readv with 3 local buffers,
 *                fi_inject_write / fi_inject_writedata; a bad key, a range
 *                past the region and a closed region: error completions
 *                (FI_EACCES) and the target memory unchanged
 *   8 atomic     fi_atomicvalid / fi_fetch_atomicvalid /
 *                fi_compare_atomicvalid, fi_query_atomic; fi_atomic FI_SUM,
 *                fi_fetch_atomic FI_SUM and FI_ATOMIC_READ, fi_compare_atomic
 *                FI_CSWAP on FI_UINT64 and FI_UINT32, fi_inject_atomic: exact
 *                results, neighbours untouched; a bad key
 *   9 wait       fi_cntr_wait to a threshold and its timeout; a poll set
 *                of a CQ and a counter; a CQ with
 *                FI_WAIT_FD: FI_GETWAIT, fi_cq_sread timing out with
 *                -FI_EAGAIN, woken by a message another thread sends, by
 *                fi_cq_signal; fi_trywait with poll(2) on the fd
 *  10 badargs    bad arguments get -FI_E* codes and no crash (a crash in
 *                the call or in the progress after it is caught, reported,
 *                and its objects left open): NULL buffers, an fi_addr never
 *                inserted, fi_enable without an AV, fi_av_insert of garbage,
 *                unknown CQ formats and access bits, an endpoint of
 *                another type, binds without direction
 *  11 close      fi_close of a domain / fabric / AV / CQ / counter in use gives
 *                -FI_EBUSY, closing in another order then works, closing with
 *                operations in flight; 50 rounds of open, exchange, close
 *                with no descriptor left behind
 *  12 multi_recv FI_MULTI_RECV buffers: messages one after another, each
 *                completion at its place, FI_MULTI_RECV on release (below
 *                FI_OPT_MIN_MULTI_RECV, truncation, cancel), buffers in order
 *  13 multi_ep   a second and third endpoint on one domain (one AV): messages
 *                each way with sources, RMA from it, no RMA target (the keys
 *                are the first endpoint's), fi_trywait and poll(2) on the
 *                domain's wait fd for it, close and reopen, fi_av_remove
 *  14 ip         addr_format FI_SOCKADDR_IN (auto and udp; shm has none):
 *                names are IPv4 socket addresses, fi_addrs indices under
 *                FI_AV_MAP too; entries inserted without asking anyone
 *                (a dead port, a bad family refused); a first message to
 *                an entry, its source at a receiver that never used its
 *                entry (FI_SOURCE), a receive directed at an entry not
 *                used yet, messages of every size both ways, RMA;
 *                fi_av_lookup / fi_av_straddr; a dead entry's send fails
 *                with -FI_EHOSTUNREACH; a sender in no entry: the unused
 *                entries asked once, not again until an entry is
 *                inserted; node and service in fi_getinfo become the
 *                dest_addr without asking
 *
 * Every wait is bounded (WAIT_MS) and fails its check when it runs out; the
 * whole run is bounded by alarm(120) (FI_CHECK_ALARM=<seconds> changes it,
 * e.g. under valgrind). Each check prints "ok - <group>: <what>" on stdout,
 * or "not ok - <group>: <what>: <why>" on stderr; the last line is a
 * summary, and the exit status is 0 only when every check passed.
 *
 *   make -C fi
 *   cc -std=gnu11 -Wall -Wextra -Werror -O1 -g fi/tests/fi_check.c -lfabric -o /tmp/fi_check
 *   FI_PROVIDER_PATH=$PWD/target/release /tmp/fi_check [auto|shm|udp] [group numbers...]
 *   (udp: RDM4_UDP_ADDR=127.0.0.1)
 *   FI_PROVIDER_PATH=$PWD/target/release valgrind --leak-check=full \
 *       --errors-for-leak-kinds=definite --error-exitcode=1 /tmp/fi_check auto
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define API_VERSION FI_VERSION(1, 17)
#define WAIT_MS 10000          /* longest wait for one completion or event */
#define QUIET_MS 50            /* how long "no completion comes" is watched */
#define MAX_MSG (4u << 20)     /* largest message */
#define MAX_RMA (8u << 20)     /* largest RMA transfer */
#define GUARD 64               /* bytes after (and between) buffers that must stay untouched */
#define GUARD_BYTE 0x5a
#define SCRIBBLE 0xcc          /* written over an inject's buffer right after the call */
#define BUF_LEN (MAX_RMA + 8 * GUARD)
#define QCAP 512               /* completions kept per CQ between reads and checks */
#define NAME_MAX_LEN 64
#define ROUNDS 50              /* open/close rounds of group 11 */

/* ------------------------------------------------------------------ */
/* Reporting                                                          */
/* ------------------------------------------------------------------ */

static const char *dom_name = "auto";
static const char *group = "setup";
static int n_checks, n_failed;
static char why[1024]; /* why the check under way fails (set by bad()) */

/* Records why the check under way fails; returns 0 for `return bad(...)`. */
__attribute__((format(printf, 1, 2))) static int bad(const char *fmt, ...)
{
    if (why[0]) {
        return 0; /* keep the first reason */
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return 0;
}

/* One check: "ok - ..." or "not ok - ...: why". Returns `good`. */
__attribute__((format(printf, 2, 3))) static int check(int good, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    n_checks++;
    if (good) {
        printf("ok - %s: %s\n", group, what);
    } else {
        n_failed++;
        fflush(stdout);
        fprintf(stderr, "not ok - %s: %s%s%s\n", group, what, why[0] ? ": " : "", why);
    }
    why[0] = 0;
    return good;
}

static const char *errs(ssize_t r)
{
    return r < 0 ? fi_strerror((int)-r) : r == 0 ? "success" : "a count";
}

/* Whether `r` is `want`; else records why. */
static int rc_is(ssize_t r, ssize_t want, const char *call)
{
    if (r == want) {
        return 1;
    }
    return bad("%s returned %zd (%s), expected %zd (%s)", call, r, errs(r), want, errs(want));
}

/* Whether `r` is a -FI_E* code (an error, not a crash or a success). */
static int is_fi_error(ssize_t r, const char *call)
{
    if (r < 0 && -r < FI_ERRNO_MAX) {
        return 1;
    }
    return bad("%s returned %zd (%s), expected a -FI_E* error", call, r, errs(r));
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ------------------------------------------------------------------ */
/* Data patterns                                                      */
/* ------------------------------------------------------------------ */

static uint8_t *sbuf, *rbuf, *region; /* BUF_LEN bytes each */

/* Byte `i` of the stream `seed`: a position shifted by any amount, or
 * another stream, shows. */
static inline uint8_t pat(uint32_t seed, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u + seed * 0x9e3779b9u;
    return (uint8_t)((x >> 24) ^ (x >> 11));
}

static void fill(uint8_t *p, size_t n, uint32_t seed, size_t start)
{
    for (size_t k = 0; k < n; k++) {
        p[k] = pat(seed, start + k);
    }
}

/* Whether p[0..n) is bytes start.. of stream `seed`. */
static int data_ok(const volatile uint8_t *p, size_t n, uint32_t seed, size_t start, const char *what)
{
    for (size_t k = 0; k < n; k++) {
        if (p[k] != pat(seed, start + k)) {
            return bad("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, k, n, p[k], pat(seed, start + k));
        }
    }
    return 1;
}

static int guard_ok(const uint8_t *p, size_t n, const char *what)
{
    for (size_t k = 0; k < n; k++) {
        if (p[k] != GUARD_BYTE) {
            return bad("%s: guard byte %zu overwritten (0x%02x)", what, k, p[k]);
        }
    }
    return 1;
}

/* Three pieces of `n` bytes (`variant` picks where it is cut). */
static void split3(size_t n, int variant, size_t len[3], size_t start[3])
{
    if (variant == 0) {
        len[0] = n / 3;
        len[1] = n / 3;
    } else {
        len[0] = n / 5;
        len[1] = n / 2;
    }
    len[2] = n - len[0] - len[1];
    start[0] = 0;
    start[1] = len[0];
    start[2] = len[0] + len[1];
}

/* iov of the 3 pieces of `n` bytes in `base`, GUARD bytes apart. */
static void iov3(uint8_t *base, size_t n, int variant, struct iovec iov[3], size_t start[3])
{
    size_t len[3];
    split3(n, variant, len, start);
    for (int k = 0; k < 3; k++) {
        iov[k].iov_base = base + start[k] + (size_t)k * GUARD;
        iov[k].iov_len = len[k];
    }
}

/* ------------------------------------------------------------------ */
/* Completion queues: every completion read is kept per CQ until a    */
/* check takes it, so that waiting on one endpoint can drive the other */
/* ------------------------------------------------------------------ */

struct cqe {
    struct fi_cq_tagged_entry e; /* the fields of the CQ's format; the rest 0 */
    enum fi_cq_format fmt;
    fi_addr_t src;
    int err; /* 0, or the positive FI_E* of an error entry */
    int prov_errno;
    size_t olen;
    char errstr[96]; /* fi_cq_strerror of an error entry */
};

struct cq {
    struct fid_cq *cq;
    enum fi_cq_format fmt;
    char name[32];
    int reported; /* an anomaly was reported already */
    size_t head, n;
    struct cqe q[QCAP];
};

static size_t entry_size(enum fi_cq_format f)
{
    switch (f) {
    case FI_CQ_FORMAT_CONTEXT:
        return sizeof(struct fi_cq_entry);
    case FI_CQ_FORMAT_MSG:
        return sizeof(struct fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
        return sizeof(struct fi_cq_data_entry);
    default:
        return sizeof(struct fi_cq_tagged_entry);
    }
}

static const char *fmt_name(enum fi_cq_format f)
{
    switch (f) {
    case FI_CQ_FORMAT_CONTEXT:
        return "FI_CQ_FORMAT_CONTEXT";
    case FI_CQ_FORMAT_MSG:
        return "FI_CQ_FORMAT_MSG";
    case FI_CQ_FORMAT_DATA:
        return "FI_CQ_FORMAT_DATA";
    default:
        return "FI_CQ_FORMAT_TAGGED";
    }
}

static void parse(enum fi_cq_format f, const void *p, struct cqe *out)
{
    memset(out, 0, sizeof *out);
    out->fmt = f;
    switch (f) {
    case FI_CQ_FORMAT_CONTEXT: {
        struct fi_cq_entry e;
        memcpy(&e, p, sizeof e);
        out->e.op_context = e.op_context;
        break;
    }
    case FI_CQ_FORMAT_MSG: {
        struct fi_cq_msg_entry e;
        memcpy(&e, p, sizeof e);
        out->e.op_context = e.op_context;
        out->e.flags = e.flags;
        out->e.len = e.len;
        break;
    }
    case FI_CQ_FORMAT_DATA: {
        struct fi_cq_data_entry e;
        memcpy(&e, p, sizeof e);
        out->e.op_context = e.op_context;
        out->e.flags = e.flags;
        out->e.len = e.len;
        out->e.buf = e.buf;
        out->e.data = e.data;
        break;
    }
    default:
        memcpy(&out->e, p, sizeof out->e);
    }
}

static void anomaly(struct cq *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void anomaly(struct cq *c, const char *fmt, ...)
{
    if (c->reported) {
        return;
    }
    c->reported = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char saved[sizeof why];
    memcpy(saved, why, sizeof why);
    why[0] = 0;
    check(0, "reading %s: %s", c->name, msg);
    memcpy(why, saved, sizeof why);
}

static void push(struct cq *c, const struct cqe *e)
{
    if (c->n == QCAP) {
        anomaly(c, "more than %d completions unread (a flood of unexpected completions?)", QCAP);
        return;
    }
    c->q[(c->head + c->n) % QCAP] = *e;
    c->n++;
}

static int pop(struct cq *c, struct cqe *out)
{
    if (!c->n) {
        return 0;
    }
    *out = c->q[c->head];
    c->head = (c->head + 1) % QCAP;
    c->n--;
    return 1;
}

/* Reads everything `c` has (fi_cq_readfrom, up to 8 at once; errors with
 * fi_cq_readerr) into its queue. */
static void drain(struct cq *c)
{
    if (!c->cq) {
        return;
    }
    size_t esz = entry_size(c->fmt);
    for (;;) {
        struct fi_cq_tagged_entry raw[9];
        fi_addr_t src[8];
        memset(raw, 0xee, sizeof raw);
        ssize_t r = fi_cq_readfrom(c->cq, raw, 8, src);
        if (r == -FI_EAGAIN) {
            return;
        }
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof ee);
            r = fi_cq_readerr(c->cq, &ee, 0);
            if (r != 1) {
                anomaly(c, "fi_cq_readerr after -FI_EAVAIL returned %zd (%s)", r, errs(r));
                return;
            }
            struct cqe e;
            memset(&e, 0, sizeof e);
            e.fmt = c->fmt;
            e.e.op_context = ee.op_context;
            e.e.flags = ee.flags;
            e.e.len = ee.len;
            e.e.buf = ee.buf;
            e.e.data = ee.data;
            e.e.tag = ee.tag;
            e.src = FI_ADDR_NOTAVAIL;
            e.err = ee.err ? ee.err : -1;
            e.prov_errno = ee.prov_errno;
            e.olen = ee.olen;
            const char *s = fi_cq_strerror(c->cq, ee.prov_errno, ee.err_data, NULL, 0);
            snprintf(e.errstr, sizeof e.errstr, "%s", s ? s : "(null)");
            push(c, &e);
            continue;
        }
        if (r < 0 || r > 8) {
            anomaly(c, "fi_cq_readfrom returned %zd (%s)", r, errs(r));
            return;
        }
        const uint8_t *tail = (const uint8_t *)raw + (size_t)r * esz;
        for (size_t k = 0; k < esz; k++) {
            if (tail[k] != 0xee) {
                anomaly(c, "fi_cq_readfrom of %zd %s entries wrote past them (byte %zu after)", r,
                        fmt_name(c->fmt), k);
                break;
            }
        }
        for (ssize_t i = 0; i < r; i++) {
            struct cqe e;
            parse(c->fmt, (const uint8_t *)raw + (size_t)i * esz, &e);
            e.src = src[i];
            push(c, &e);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Endpoints: a side is a fabric, domain, AV, CQs, counters, endpoint  */
/* ------------------------------------------------------------------ */

struct side {
    const char *label;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct cq tx, rx;
    struct fid_cntr *txcntr, *rxcntr;
    struct fid_ep *ep;
    fi_addr_t self, peer; /* its own name and the other side's in its AV */
    uint8_t name[NAME_MAX_LEN];
    size_t namelen;
};

struct opts {
    enum fi_cq_format fmt;
    enum fi_av_type av;
    enum fi_wait_obj rx_wait; /* of the rx CQ */
    int selective;            /* tx CQ bound with FI_SELECTIVE_COMPLETION */
    int cntrs;                /* counters bound FI_SEND (tx) and FI_RECV (rx) */
    int no_av;                /* leave the endpoint without AV and not enabled */
    enum fi_threading threading;
    int ip; /* addr_format FI_SOCKADDR_IN */
};

static const struct opts DEFAULT_OPTS = { FI_CQ_FORMAT_TAGGED, FI_AV_MAP, FI_WAIT_NONE, 0, 0, 0, FI_THREAD_UNSPEC, 0 };

/* A and B: the pair; C: a third endpoint some checks open. */
static struct side sides[3];
static struct side *const A = &sides[0];
static struct side *const B = &sides[1];
static struct side *const C = &sides[2];
/* Objects left open after a crash, kept reachable ("used": the stores
 * stay, so that valgrind does not call them lost). */
__attribute__((used)) static struct side abandoned[8];
static int n_abandoned;
__attribute__((used)) static struct fid_mr *abandoned_mr;

static struct fi_info *hints_new(void)
{
    struct fi_info *h = fi_allocinfo();
    if (!h) {
        fprintf(stderr, "fi_allocinfo failed\n");
        exit(2);
    }
    h->fabric_attr->prov_name = strdup("rdm4");
    h->domain_attr->name = strdup(dom_name);
    h->ep_attr->type = FI_EP_RDM;
    return h;
}

static const uint64_t ALL_CAPS = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SOURCE | FI_DIRECTED_RECV;

static void progress(void);

/* Opens `s` (the endpoint enabled unless o->no_av); records why not. */
static int open_side(struct side *s, const struct opts *o, const char *label)
{
    memset(s, 0, sizeof *s);
    s->label = label;
    struct fi_info *h = hints_new();
    h->caps = ALL_CAPS;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    h->domain_attr->av_type = o->av;
    h->domain_attr->threading = o->threading;
    if (o->ip) {
        h->addr_format = FI_SOCKADDR_IN;
    }
    h->mode = FI_CONTEXT | FI_CONTEXT2; /* every context given is a struct fi_context2 */
    ssize_t r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &s->info);
    fi_freeinfo(h);
    if (r) {
        s->info = NULL;
        return bad("%s: fi_getinfo: %zd (%s)", label, r, errs(r));
    }
    if (s->info->domain_attr->mr_mode & FI_MR_LOCAL) {
        return bad("%s: fi_getinfo returned mr_mode FI_MR_LOCAL, which the hints did not allow", label);
    }
#define TRY(call)                                                                   \
    do {                                                                            \
        r = (call);                                                                 \
        if (r) {                                                                    \
            return bad("%s: %s: %zd (%s)", label, #call, r, errs(r));               \
        }                                                                           \
    } while (0)
    TRY(fi_fabric(s->info->fabric_attr, &s->fabric, NULL));
    TRY(fi_domain(s->fabric, s->info, &s->domain, NULL));
    struct fi_av_attr aa = { .type = o->av };
    TRY(fi_av_open(s->domain, &aa, &s->av, NULL));
    struct fi_cq_attr ca = { .format = o->fmt, .wait_obj = FI_WAIT_NONE };
    TRY(fi_cq_open(s->domain, &ca, &s->tx.cq, NULL));
    ca.wait_obj = o->rx_wait;
    TRY(fi_cq_open(s->domain, &ca, &s->rx.cq, NULL));
    s->tx.fmt = s->rx.fmt = o->fmt;
    snprintf(s->tx.name, sizeof s->tx.name, "%s tx CQ", label);
    snprintf(s->rx.name, sizeof s->rx.name, "%s rx CQ", label);
    if (o->cntrs) {
        struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
        TRY(fi_cntr_open(s->domain, &na, &s->txcntr, NULL));
        TRY(fi_cntr_open(s->domain, &na, &s->rxcntr, NULL));
    }
    TRY(fi_endpoint(s->domain, s->info, &s->ep, NULL));
    if (!o->no_av) {
        TRY(fi_ep_bind(s->ep, &s->av->fid, 0));
    }
    TRY(fi_ep_bind(s->ep, &s->tx.cq->fid, FI_TRANSMIT | (o->selective ? FI_SELECTIVE_COMPLETION : 0)));
    TRY(fi_ep_bind(s->ep, &s->rx.cq->fid, FI_RECV));
    if (o->cntrs) {
        TRY(fi_ep_bind(s->ep, &s->txcntr->fid, FI_SEND));
        TRY(fi_ep_bind(s->ep, &s->rxcntr->fid, FI_RECV));
    }
    if (!o->no_av) {
        TRY(fi_enable(s->ep));
    }
    s->namelen = sizeof s->name;
    TRY(fi_getname(&s->ep->fid, s->name, &s->namelen));
#undef TRY
    return 1;
}

/* Closes what `s` has open, endpoint first; records why not. */
static int close_side(struct side *s)
{
    int good = 1;
    struct fid *f[] = {
        s->ep ? &s->ep->fid : NULL,         s->txcntr ? &s->txcntr->fid : NULL,
        s->rxcntr ? &s->rxcntr->fid : NULL, s->tx.cq ? &s->tx.cq->fid : NULL,
        s->rx.cq ? &s->rx.cq->fid : NULL,   s->av ? &s->av->fid : NULL,
        s->domain ? &s->domain->fid : NULL, s->fabric ? &s->fabric->fid : NULL,
    };
    static const char *const names[] = { "endpoint", "tx counter", "rx counter", "tx CQ",
                                          "rx CQ",    "AV",         "domain",     "fabric" };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i]) {
            int r = fi_close(f[i]);
            if (r) {
                good = bad("%s: fi_close(%s): %d (%s)", s->label, names[i], r, errs(r));
            }
        }
    }
    if (s->info) {
        fi_freeinfo(s->info);
    }
    memset(s, 0, sizeof *s);
    return good;
}

/* Opens both sides; each inserts its own name then the other's (so that
 * with FI_AV_TABLE the peer is fi_addr 1, not 0). */
static int open_pair(const struct opts *o)
{
    if (!open_side(A, o, "A") || !open_side(B, o, "B")) {
        return 0;
    }
    struct side *s[2] = { A, B };
    for (int i = 0; i < 2; i++) {
        struct side *me = s[i], *other = s[1 - i];
        if (me->namelen != other->namelen) {
            return bad("names of different lengths: %zu and %zu", me->namelen, other->namelen);
        }
        uint8_t names[2 * NAME_MAX_LEN];
        memcpy(names, me->name, me->namelen);
        memcpy(names + me->namelen, other->name, other->namelen);
        fi_addr_t fa[2] = { 0, 0 };
        int r = fi_av_insert(me->av, names, 2, fa, 0, NULL);
        if (r != 2) {
            return bad("%s: fi_av_insert of its own and the peer's name returned %d (%s)", me->label, r, errs(r));
        }
        if (fa[0] == FI_ADDR_NOTAVAIL || fa[1] == FI_ADDR_NOTAVAIL || fa[0] == fa[1]) {
            return bad("%s: fi_av_insert gave fi_addrs %#" PRIx64 " and %#" PRIx64, me->label, fa[0], fa[1]);
        }
        if (o->av == FI_AV_TABLE && (fa[0] != 0 || fa[1] != 1)) {
            return bad("%s: FI_AV_TABLE gave fi_addrs %" PRIu64 " and %" PRIu64 ", expected 0 and 1", me->label,
                       fa[0], fa[1]);
        }
        me->self = fa[0];
        me->peer = fa[1];
    }
    return 1;
}

static int close_pair(void)
{
    int a = close_side(A);
    int b = close_side(B);
    return a && b;
}

/* Reads every CQ of both sides (which makes progress on both domains). */
static void progress(void)
{
    for (int i = 0; i < 3; i++) {
        if (sides[i].ep) {
            drain(&sides[i].tx);
            drain(&sides[i].rx);
        }
    }
}

/* The next completion of `c`, progressing both sides for up to `ms`. */
static int wait_cqe(struct cq *c, struct cqe *out, int ms)
{
    double end = now_ms() + ms;
    for (;;) {
        drain(c);
        if (pop(c, out)) {
            return 1;
        }
        progress();
        if (pop(c, out)) {
            return 1;
        }
        if (now_ms() > end) {
            return bad("no completion on %s within %d ms", c->name, ms);
        }
        sched_yield();
    }
}

static void describe(const struct cqe *e, char *buf, size_t len)
{
    snprintf(buf, len, "{ctx %p flags %#" PRIx64 " len %zu tag %#" PRIx64 " data %#" PRIx64 " err %d%s%s}",
             e->e.op_context, (uint64_t)e->e.flags, e->e.len, (uint64_t)e->e.tag, (uint64_t)e->e.data, e->err,
             e->err ? " " : "", e->err ? e->errstr : "");
}

/* Whether `c` stays empty for `ms` while both sides progress (what comes
 * is taken, so that it is not blamed on a later check). */
static int quiet(struct cq *c, int ms)
{
    double end = now_ms() + ms;
    int good = 1;
    do {
        progress();
        struct cqe e;
        while (pop(c, &e)) {
            char d[256];
            describe(&e, d, sizeof d);
            good = bad("unexpected completion on %s: %s", c->name, d);
        }
        sched_yield();
    } while (now_ms() < end);
    return good;
}

/* Whether the queued completions are all taken (none is left over). */
static int all_taken(void)
{
    progress();
    for (int i = 0; i < 3; i++) {
        struct cq *cs[2] = { &sides[i].tx, &sides[i].rx };
        for (int k = 0; k < 2; k++) {
            if (cs[k]->cq && cs[k]->n) {
                char d[256];
                describe(&cs[k]->q[cs[k]->head], d, sizeof d);
                size_t n = cs[k]->n;
                struct cqe e;
                while (pop(cs[k], &e)) {
                }
                return bad("%zu unexpected completion(s) left on %s, first %s", n, cs[k]->name, d);
            }
        }
    }
    return 1;
}

/* Retries a post that gives -FI_EAGAIN, progressing both sides. */
#define POST(r, call)                                                       \
    do {                                                                    \
        double end_ = now_ms() + WAIT_MS;                                   \
        while (((r) = (call)) == -FI_EAGAIN && now_ms() < end_) {           \
            progress();                                                     \
        }                                                                   \
    } while (0)

/* A successful completion of a receive. `kind` FI_MSG or FI_TAGGED. */
static int rx_ok(const struct cqe *e, void *ctx, uint64_t kind, size_t len, uint64_t tag, int data_on, uint64_t data)
{
    char d[256];
    describe(e, d, sizeof d);
    if (e->err) {
        return bad("error completion %d (%s) instead of success: %s", e->err, fi_strerror(e->err), d);
    }
    if (e->e.op_context != ctx) {
        return bad("op_context %p, expected %p: %s", e->e.op_context, ctx, d);
    }
    if (e->fmt == FI_CQ_FORMAT_CONTEXT) {
        return 1;
    }
    uint64_t other = kind == FI_MSG ? FI_TAGGED : FI_MSG;
    if ((e->e.flags & (FI_RECV | kind)) != (FI_RECV | kind) || (e->e.flags & (FI_SEND | other))) {
        return bad("flags %#" PRIx64 ", expected FI_RECV|%s and not FI_SEND|%s: %s", (uint64_t)e->e.flags,
                   kind == FI_MSG ? "FI_MSG" : "FI_TAGGED", kind == FI_MSG ? "FI_TAGGED" : "FI_MSG", d);
    }
    if (!!(e->e.flags & FI_REMOTE_CQ_DATA) != !!data_on) {
        return bad("FI_REMOTE_CQ_DATA %s in flags: %s", data_on ? "missing" : "set", d);
    }
    if (e->e.len != len) {
        return bad("len %zu, expected %zu: %s", e->e.len, len, d);
    }
    if (e->fmt == FI_CQ_FORMAT_MSG) {
        return 1;
    }
    if (data_on && e->e.data != data) {
        return bad("data %#" PRIx64 ", expected %#" PRIx64 ": %s", (uint64_t)e->e.data, data, d);
    }
    if (e->fmt == FI_CQ_FORMAT_TAGGED && kind == FI_TAGGED && e->e.tag != tag) {
        return bad("tag %#" PRIx64 ", expected %#" PRIx64 ": %s", (uint64_t)e->e.tag, tag, d);
    }
    return 1;
}

/* A successful completion of a transmit with flags `need`. */
static int tx_ok(const struct cqe *e, void *ctx, uint64_t need)
{
    char d[256];
    describe(e, d, sizeof d);
    if (e->err) {
        return bad("error completion %d (%s) instead of success: %s", e->err, fi_strerror(e->err), d);
    }
    if (e->e.op_context != ctx) {
        return bad("op_context %p, expected %p: %s", e->e.op_context, ctx, d);
    }
    if (e->fmt != FI_CQ_FORMAT_CONTEXT && ((e->e.flags & need) != need || (e->e.flags & FI_RECV))) {
        return bad("flags %#" PRIx64 ", expected %#" PRIx64 " and not FI_RECV: %s", (uint64_t)e->e.flags, need, d);
    }
    return 1;
}

/* An error completion with `err` (0: any error) and context `ctx`. */
static int err_ok(const struct cqe *e, void *ctx, int err)
{
    char d[256];
    describe(e, d, sizeof d);
    if (!e->err) {
        return bad("success completion, expected error %s: %s", err ? fi_strerror(err) : "", d);
    }
    if (err && e->err != err) {
        return bad("error %d (%s), expected %d (%s): %s", e->err, fi_strerror(e->err), err, fi_strerror(err), d);
    }
    if (e->e.op_context != ctx) {
        return bad("op_context %p, expected %p: %s", e->e.op_context, ctx, d);
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* Group 1: fi_getinfo and names                                      */
/* ------------------------------------------------------------------ */

/* A UDP port P of 127.0.0.1 such that P and P + 1 are free now. */
static uint16_t free_port_pair(void)
{
    for (int tries = 0; tries < 100; tries++) {
        int a = socket(AF_INET, SOCK_DGRAM, 0), b = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof sa;
        int ok = bind(a, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(a, (struct sockaddr *)&sa, &len) == 0;
        uint16_t p = ntohs(sa.sin_port);
        sa.sin_port = htons((uint16_t)(p + 1));
        ok = ok && p < 65535 && bind(b, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(a);
        close(b);
        if (ok) {
            return p;
        }
    }
    return 42421;
}

static void g_getinfo(void)
{
    struct fi_info *h, *info = NULL;
    ssize_t r;

    h = hints_new();
    r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &info);
    if (check(rc_is(r, 0, "fi_getinfo") && info, "fi_getinfo with prov_name rdm4, domain %s", dom_name)) {
        int good = 1;
        for (struct fi_info *i = info; i; i = i->next) {
            if (strcmp(i->fabric_attr->prov_name, "rdm4") || strcmp(i->domain_attr->name, dom_name) ||
                i->ep_attr->type != FI_EP_RDM) {
                good = bad("entry of provider %s, domain %s, type %d", i->fabric_attr->prov_name,
                           i->domain_attr->name, i->ep_attr->type);
            }
        }
        check(good, "every entry is rdm4, domain %s, FI_EP_RDM", dom_name);
        check(info->tx_attr->op_flags & FI_COMPLETION || bad("tx op_flags %#" PRIx64, info->tx_attr->op_flags),
              "tx_attr->op_flags contains FI_COMPLETION");
        check((info->ep_attr->mem_tag_format >> 63) & 1 ||
                  bad("mem_tag_format %#" PRIx64, info->ep_attr->mem_tag_format),
              "mem_tag_format has bit 63");
        check(info->domain_attr->cq_data_size >= 4 || bad("cq_data_size %zu", info->domain_attr->cq_data_size),
              "cq_data_size >= 4 (%zu)", info->domain_attr->cq_data_size);
        check(info->ep_attr->max_msg_size >= MAX_MSG || bad("max_msg_size %zu", info->ep_attr->max_msg_size),
              "max_msg_size >= 4 MiB");
        check(info->tx_attr->inject_size > 0 || bad("inject_size 0"), "inject_size %zu > 0",
              info->tx_attr->inject_size);
    }
    fi_freeinfo(info);

    enum fi_ep_type types[] = { FI_EP_MSG, FI_EP_DGRAM };
    const char *tnames[] = { "FI_EP_MSG", "FI_EP_DGRAM" };
    for (int t = 0; t < 2; t++) {
        info = NULL;
        h->ep_attr->type = types[t];
        r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &info);
        check(rc_is(r, -FI_ENODATA, "fi_getinfo"), "hints asking %s get -FI_ENODATA", tnames[t]);
        if (!r) {
            fi_freeinfo(info);
        }
    }
    h->ep_attr->type = FI_EP_RDM;

    info = NULL;
    h->caps = FI_TAGGED;
    r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &info);
    if (check(rc_is(r, 0, "fi_getinfo"), "fi_getinfo with caps FI_TAGGED only")) {
        int good = 1;
        for (struct fi_info *i = info; i; i = i->next) {
            uint64_t c[3] = { i->caps, i->tx_attr->caps, i->rx_attr->caps };
            const char *w[3] = { "caps", "tx_attr->caps", "rx_attr->caps" };
            for (int k = 0; k < 3; k++) {
                if (!(c[k] & FI_TAGGED) && k == 0) {
                    good = bad("%s %#" PRIx64 " lack FI_TAGGED", w[k], c[k]);
                }
                if (c[k] & (FI_MSG | FI_RMA | FI_ATOMIC)) {
                    good = bad("%s %#" PRIx64 " contain FI_MSG, FI_RMA or FI_ATOMIC", w[k], c[k]);
                }
            }
        }
        check(good, "caps FI_TAGGED only: returned caps have FI_TAGGED, not FI_MSG/FI_RMA/FI_ATOMIC");
        fi_freeinfo(info);
    }

    info = NULL;
    h->caps = FI_RMA;
    h->domain_attr->mr_mode = FI_MR_SCALABLE;
    r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &info);
    check(rc_is(r, -FI_ENODATA, "fi_getinfo"), "mr_mode FI_MR_SCALABLE with FI_RMA gets -FI_ENODATA");
    if (!r) {
        fi_freeinfo(info);
    }

    info = NULL;
    h->caps = FI_RMA | FI_MSG;
    h->domain_attr->mr_mode = FI_MR_BASIC;
    r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &info);
    check(rc_is(r, 0, "fi_getinfo") &&
              (info->domain_attr->mr_mode == FI_MR_BASIC || bad("mr_mode %d", info->domain_attr->mr_mode)),
          "mr_mode FI_MR_BASIC with FI_RMA gets FI_MR_BASIC");
    if (!r) {
        fi_freeinfo(info);
    }
    h->caps = 0;
    h->domain_attr->mr_mode = 0;

    info = NULL;
    r = fi_getinfo(API_VERSION, "127.0.0.1", NULL, 0, h, &info);
    check(rc_is(r, -FI_ENODATA, "fi_getinfo(node \"127.0.0.1\")"), "a destination node without a service gets -FI_ENODATA");
    if (!r) {
        fi_freeinfo(info);
    }
    info = NULL;
    /* No node, service or FI_SOURCE: a source that binds anywhere. */
    r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &info);
    check(rc_is(r, 0, "fi_getinfo()") && ((info->src_addr && info->src_addrlen > 0) || bad("no src_addr")),
          "an answer without node or service has a source address");
    if (!r) {
        fi_freeinfo(info);
    }
    info = NULL;
    /* With FI_SOURCE, node and service name the udp device's own address
     * and port: a domain opened from the answer binds there. */
    r = fi_getinfo(API_VERSION, NULL, "notaport", FI_SOURCE, h, &info);
    check(rc_is(r, -FI_ENODATA, "fi_getinfo(service \"notaport\", FI_SOURCE)"), "a service that is no port gets -FI_ENODATA");
    r = fi_getinfo(API_VERSION, "no.such.host", NULL, FI_SOURCE, h, &info);
    check(rc_is(r, -FI_ENODATA, "fi_getinfo(node \"no.such.host\", FI_SOURCE)"), "a node that is no address gets -FI_ENODATA");
    info = NULL;
    /* Two free ports, P and P + 1 (tests of this file may run at once). */
    char port_s[8], port2_s[8];
    uint16_t port = free_port_pair();
    snprintf(port_s, sizeof port_s, "%u", port);
    snprintf(port2_s, sizeof port2_s, "%u", port + 1);
    r = fi_getinfo(API_VERSION, "127.0.0.1", port_s, FI_SOURCE, h, &info);
    if (check(rc_is(r, 0, "fi_getinfo(\"127.0.0.1\", P, FI_SOURCE)"), "a local node and service with FI_SOURCE are an address and port")) {
        struct fid_fabric *fab = NULL;
        struct fid_domain *dom = NULL;
        int ok = fi_fabric(info->fabric_attr, &fab, NULL) == 0 && fi_domain(fab, info, &dom, NULL) == 0;
        if (ok && strcmp(info->domain_attr->name, "shm") != 0) {
            int sock = socket(AF_INET, SOCK_DGRAM, 0);
            struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
            int bound = bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0;
            close(sock);
            check(!bound, "the domain's udp device holds UDP port P (%u)", port);
        }
        check(ok, "a domain opens from that answer");
        if (ok && strcmp(info->domain_attr->name, "shm") != 0) {
            /* A destination's node and service: the name of the endpoint
             * bound there, asked of its port; its domain's progress thread
             * answers while this process does not call it. */
            struct fi_info *dst = NULL;
            struct fid_ep *ep = NULL;
            uint8_t name[NAME_MAX_LEN];
            size_t nlen = sizeof name;
            int named = fi_endpoint(dom, info, &ep, NULL) == 0 && fi_getname(&ep->fid, name, &nlen) == 0;
            r = fi_getinfo(API_VERSION, "127.0.0.1", port_s, 0, h, &dst);
            if (check(rc_is(r, 0, "fi_getinfo(\"127.0.0.1\", P)"), "a destination node and service resolve")) {
                int shm = 0;
                for (struct fi_info *i = dst; i; i = i->next) {
                    shm |= strcmp(i->domain_attr->name, "shm") == 0;
                }
                check(named && dst->dest_addrlen == nlen && memcmp(dst->dest_addr, name, nlen) == 0,
                      "its dest_addr is the name of the endpoint bound there");
                check(!shm, "no shm domain is offered for a destination found by udp");
                fi_freeinfo(dst);
            }
            /* fi_av_insertsvc and fi_av_insertsym ask the same way. */
            struct fid_av *av = NULL;
            struct fi_av_attr aa = { .type = FI_AV_TABLE };
            if (check(rc_is(fi_av_open(dom, &aa, &av, NULL), 0, "fi_av_open"), "an AV on that domain")) {
                fi_addr_t fa[2] = { 0, 0 };
                uint8_t got[NAME_MAX_LEN];
                size_t glen = sizeof got;
                int ok = rc_is(fi_av_insertsvc(av, "127.0.0.1", port_s, &fa[0], 0, NULL), 1, "fi_av_insertsvc") &&
                         rc_is(fi_av_lookup(av, fa[0], got, &glen), 0, "fi_av_lookup") &&
                         (glen == nlen && memcmp(got, name, nlen) == 0 ? 1 : bad("another name"));
                check(named && ok, "fi_av_insertsvc of a node and service inserts the endpoint bound there");
                setenv("FI_RDM4_RESOLVE_MS", "300", 1);
                int errs[2] = { -1, -1 };
                ok = rc_is(fi_av_insertsym(av, "127.0.0.1", 1, port_s, 2, fa, FI_SYNC_ERR, errs), 1,
                           "fi_av_insertsym") &&
                     (fa[0] != FI_ADDR_NOTAVAIL && fa[1] == FI_ADDR_NOTAVAIL && errs[0] == 0 && errs[1] != 0
                          ? 1
                          : bad("fi_addrs %#" PRIx64 " %#" PRIx64 ", errors %d %d", fa[0], fa[1], errs[0], errs[1]));
                unsetenv("FI_RDM4_RESOLVE_MS");
                check(ok, "fi_av_insertsym of ports P and P + 1: the first inserted, the second (nothing "
                          "bound) FI_ADDR_NOTAVAIL with its error");
                check(rc_is(fi_av_insertsvc(av, "127.0.0.1", "notaport", &fa[0], 0, NULL), -FI_EINVAL,
                            "fi_av_insertsvc"),
                      "fi_av_insertsvc of a service that is no port: -FI_EINVAL");
                fi_close(&av->fid);
            }
            if (ep) {
                fi_close(&ep->fid);
            }
            /* Nothing bound at a port: -FI_ENODATA once FI_RDM4_RESOLVE_MS is over. */
            setenv("FI_RDM4_RESOLVE_MS", "300", 1);
            double t0 = now_ms();
            r = fi_getinfo(API_VERSION, "127.0.0.1", port2_s, 0, h, &dst);
            double took = now_ms() - t0;
            unsetenv("FI_RDM4_RESOLVE_MS");
            check(rc_is(r, -FI_ENODATA, "fi_getinfo(\"127.0.0.1\", P + 1)") &&
                      ((took >= 250 && took < 5000) || bad("after %.0f ms", took)),
                  "a destination port nothing is bound at gets -FI_ENODATA after FI_RDM4_RESOLVE_MS");
        }
        if (dom) {
            fi_close(&dom->fid);
        }
        if (fab) {
            fi_close(&fab->fid);
        }
        fi_freeinfo(info);
    }
    fi_freeinfo(h);

    if (!check(open_side(A, &DEFAULT_OPTS, "A"), "open fabric, domain, AV, CQs and endpoint")) {
        close_side(A);
        return;
    }
    size_t len = 0;
    r = fi_getname(&A->ep->fid, NULL, &len);
    check(rc_is(r, -FI_ETOOSMALL, "fi_getname(NULL, &len)") &&
              ((len > 0 && len <= NAME_MAX_LEN) || bad("len set to %zu", len)),
          "fi_getname(NULL, &len) gives -FI_ETOOSMALL and len %zu", len);
    uint8_t small[4];
    size_t slen = sizeof small;
    r = fi_getname(&A->ep->fid, small, &slen);
    check(rc_is(r, -FI_ETOOSMALL, "fi_getname(4-byte buffer)") && (slen == len || bad("len set to %zu", slen)),
          "fi_getname into 4 bytes gives -FI_ETOOSMALL and the length");
    check((A->namelen > 0 && A->namelen <= NAME_MAX_LEN && A->namelen == len) ||
              bad("name of %zu bytes (asked length %zu)", A->namelen, len),
          "the name has %zu bytes (at most %d)", A->namelen, NAME_MAX_LEN);
    char str[256];
    size_t strl = sizeof str;
    const char *s = fi_av_straddr(A->av, A->name, str, &strl);
    check((s && *s) || bad("fi_av_straddr returned %s", s ? "\"\"" : "NULL"), "fi_av_straddr: %s", s ? s : "-");
    check(close_side(A), "close");
}

/* ------------------------------------------------------------------ */
/* Group 2: messages                                                  */
/* ------------------------------------------------------------------ */

enum api {
    M_SEND,
    M_TSEND,
    M_SENDV,
    M_TSENDV,
    M_SENDDATA,
    M_TSENDDATA,
    M_SENDMSG,
    M_TSENDMSG,
    M_INJECT,
    M_TINJECT,
    M_INJECTDATA,
    M_TINJECTDATA,
};

static const char *const api_name[] = {
    "fi_send/fi_recv",
    "fi_tsend/fi_trecv",
    "fi_sendv/fi_recvv (3 buffers each)",
    "fi_tsendv/fi_trecvv (3 buffers each)",
    "fi_senddata/fi_recv",
    "fi_tsenddata/fi_trecv",
    "fi_sendmsg(FI_REMOTE_CQ_DATA)/fi_recvmsg (3 buffers each)",
    "fi_tsendmsg(FI_REMOTE_CQ_DATA)/fi_trecvmsg (3 buffers each)",
    "fi_inject/fi_recv",
    "fi_tinject/fi_trecv",
    "fi_injectdata/fi_recv",
    "fi_tinjectdata/fi_trecv",
};

static int api_tagged(enum api a)
{
    return a == M_TSEND || a == M_TSENDV || a == M_TSENDDATA || a == M_TSENDMSG || a == M_TINJECT ||
           a == M_TINJECTDATA;
}

static int api_data(enum api a)
{
    return a == M_SENDDATA || a == M_TSENDDATA || a == M_SENDMSG || a == M_TSENDMSG || a == M_INJECTDATA ||
           a == M_TINJECTDATA;
}

static int api_vec(enum api a)
{
    return a == M_SENDV || a == M_TSENDV || a == M_SENDMSG || a == M_TSENDMSG;
}

static int api_inject(enum api a)
{
    return a >= M_INJECT;
}

static uint64_t tag_of(uint32_t seed)
{
    return 0xc3a5000000000000ull ^ ((uint64_t)seed << 16) ^ seed;
}

static uint64_t data_of(uint32_t seed)
{
    return 0xfedcba9876543210ull ^ ((uint64_t)seed << 32) ^ seed;
}

static struct cqe last_rx; /* the receive completion of the last xfer() */

static ssize_t post_recv(struct side *rx, enum api a, size_t len, uint64_t tag, struct iovec riov[3], void *ctx)
{
    ssize_t r;
    switch (a) {
    case M_SEND:
    case M_SENDDATA:
    case M_INJECT:
    case M_INJECTDATA:
        POST(r, fi_recv(rx->ep, rbuf, len, NULL, FI_ADDR_UNSPEC, ctx));
        break;
    case M_TSEND:
    case M_TSENDDATA:
    case M_TINJECT:
    case M_TINJECTDATA:
        POST(r, fi_trecv(rx->ep, rbuf, len, NULL, FI_ADDR_UNSPEC, tag, 0, ctx));
        break;
    case M_SENDV:
        POST(r, fi_recvv(rx->ep, riov, NULL, 3, FI_ADDR_UNSPEC, ctx));
        break;
    case M_TSENDV:
        POST(r, fi_trecvv(rx->ep, riov, NULL, 3, FI_ADDR_UNSPEC, tag, 0, ctx));
        break;
    case M_SENDMSG: {
        struct fi_msg m = { .msg_iov = riov, .iov_count = 3, .addr = FI_ADDR_UNSPEC, .context = ctx };
        POST(r, fi_recvmsg(rx->ep, &m, FI_COMPLETION));
        break;
    }
    default: {
        struct fi_msg_tagged m = {
            .msg_iov = riov, .iov_count = 3, .addr = FI_ADDR_UNSPEC, .tag = tag, .ignore = 0, .context = ctx
        };
        POST(r, fi_trecvmsg(rx->ep, &m, FI_COMPLETION));
        break;
    }
    }
    return r;
}

static ssize_t post_send(struct side *tx, enum api a, size_t len, uint64_t tag, uint64_t data, struct iovec siov[3],
                         void *ctx)
{
    ssize_t r;
    struct fid_ep *ep = tx->ep;
    switch (a) {
    case M_SEND:
        POST(r, fi_send(ep, sbuf, len, NULL, tx->peer, ctx));
        break;
    case M_TSEND:
        POST(r, fi_tsend(ep, sbuf, len, NULL, tx->peer, tag, ctx));
        break;
    case M_SENDV:
        POST(r, fi_sendv(ep, siov, NULL, 3, tx->peer, ctx));
        break;
    case M_TSENDV:
        POST(r, fi_tsendv(ep, siov, NULL, 3, tx->peer, tag, ctx));
        break;
    case M_SENDDATA:
        POST(r, fi_senddata(ep, sbuf, len, NULL, data, tx->peer, ctx));
        break;
    case M_TSENDDATA:
        POST(r, fi_tsenddata(ep, sbuf, len, NULL, data, tx->peer, tag, ctx));
        break;
    case M_SENDMSG: {
        struct fi_msg m = { .msg_iov = siov, .iov_count = 3, .addr = tx->peer, .context = ctx, .data = data };
        POST(r, fi_sendmsg(ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION));
        break;
    }
    case M_TSENDMSG: {
        struct fi_msg_tagged m = {
            .msg_iov = siov, .iov_count = 3, .addr = tx->peer, .tag = tag, .context = ctx, .data = data
        };
        POST(r, fi_tsendmsg(ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION));
        break;
    }
    case M_INJECT:
        POST(r, fi_inject(ep, sbuf, len, tx->peer));
        break;
    case M_TINJECT:
        POST(r, fi_tinject(ep, sbuf, len, tx->peer, tag));
        break;
    case M_INJECTDATA:
        POST(r, fi_injectdata(ep, sbuf, len, data, tx->peer));
        break;
    default:
        POST(r, fi_tinjectdata(ep, sbuf, len, data, tx->peer, tag));
        break;
    }
    if (api_inject(a) && r == 0) {
        memset(sbuf, SCRIBBLE, len); /* the buffer is the application's again */
    }
    return r;
}

/* One message of `len` bytes from `tx` to `rx` by `a`, the receive posted
 * before the send or after; every byte and both completions checked. */
static int xfer(struct side *tx, struct side *rx, enum api a, size_t len, int recv_first, uint32_t seed)
{
    struct fi_context2 sctx, rctx;
    uint64_t tag = tag_of(seed), data = data_of(seed);
    struct iovec siov[3], riov[3];
    size_t sst[3], rst[3];
    int vec = api_vec(a), tagged = api_tagged(a);
    memset(rbuf, GUARD_BYTE, len + 4 * GUARD);
    if (vec) {
        iov3(sbuf, len, 0, siov, sst);
        for (int k = 0; k < 3; k++) {
            fill(siov[k].iov_base, siov[k].iov_len, seed, sst[k]);
        }
        iov3(rbuf, len, 1, riov, rst);
    } else {
        fill(sbuf, len, seed, 0);
    }
    ssize_t r;
    if (recv_first && !rc_is(post_recv(rx, a, len, tag, riov, &rctx), 0, "posting the receive")) {
        return 0;
    }
    r = post_send(tx, a, len, tag, data, siov, &sctx);
    if (!rc_is(r, 0, api_name[a])) {
        return 0;
    }
    if (!recv_first && !rc_is(post_recv(rx, a, len, tag, riov, &rctx), 0, "posting the receive")) {
        return 0;
    }
    struct cqe re, te;
    if (!wait_cqe(&rx->rx, &re, WAIT_MS)) {
        return 0;
    }
    last_rx = re;
    if (!rx_ok(&re, &rctx, tagged ? FI_TAGGED : FI_MSG, len, tag, api_data(a), data)) {
        return 0;
    }
    if (vec) {
        for (int k = 0; k < 3; k++) {
            if (!data_ok(riov[k].iov_base, riov[k].iov_len, seed, rst[k], "received data") ||
                !guard_ok((uint8_t *)riov[k].iov_base + riov[k].iov_len, GUARD, "after a receive buffer")) {
                return 0;
            }
        }
    } else if (!data_ok(rbuf, len, seed, 0, "received data") || !guard_ok(rbuf + len, GUARD, "after the buffer")) {
        return 0;
    }
    if (api_inject(a)) {
        return quiet(&tx->tx, QUIET_MS) || bad("(an inject must write no completion)");
    }
    return wait_cqe(&tx->tx, &te, WAIT_MS) && tx_ok(&te, &sctx, FI_SEND | (tagged ? FI_TAGGED : FI_MSG));
}

static const size_t msg_sizes[] = { 0, 1, 63, 4096, 8193, 65536, 65537, (1u << 20) + 17, MAX_MSG };
#define N_MSG_SIZES (sizeof msg_sizes / sizeof msg_sizes[0])

/* Tags matched out of order, and with ignore bits. */
static int tag_matching(void)
{
    struct fi_context2 r1, r2, r3, s1, s2, s3;
    uint64_t ta = 0x8000000000000a0aull, tb = 0x8000000000000b0bull;
    uint8_t *b1 = rbuf, *b2 = rbuf + 4096, *b3 = rbuf + 8192;
    memset(rbuf, GUARD_BYTE, 3 * 4096);
    uint8_t *m1 = sbuf, *m2 = sbuf + 4096, *m3 = sbuf + 8192;
    fill(m1, 100, 1, 0);
    fill(m2, 200, 2, 0);
    fill(m3, 300, 3, 0);
    ssize_t r;
    POST(r, fi_trecv(B->ep, b1, 1000, NULL, FI_ADDR_UNSPEC, tb, 0, &r1));
    if (!rc_is(r, 0, "fi_trecv")) {
        return 0;
    }
    POST(r, fi_trecv(B->ep, b2, 1000, NULL, FI_ADDR_UNSPEC, ta, 0, &r2));
    if (!rc_is(r, 0, "fi_trecv")) {
        return 0;
    }
    /* matches tag 0x...1234ff when the low byte is ignored */
    POST(r, fi_trecv(B->ep, b3, 1000, NULL, FI_ADDR_UNSPEC, 0x90000000001234ffull, 0xff, &r3));
    if (!rc_is(r, 0, "fi_trecv")) {
        return 0;
    }
    POST(r, fi_tsend(A->ep, m1, 100, NULL, A->peer, ta, &s1));
    if (!rc_is(r, 0, "fi_tsend")) {
        return 0;
    }
    POST(r, fi_tsend(A->ep, m2, 200, NULL, A->peer, tb, &s2));
    if (!rc_is(r, 0, "fi_tsend")) {
        return 0;
    }
    POST(r, fi_tsend(A->ep, m3, 300, NULL, A->peer, 0x9000000000123412ull, &s3));
    if (!rc_is(r, 0, "fi_tsend")) {
        return 0;
    }
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        struct cqe e;
        if (!wait_cqe(&B->rx, &e, WAIT_MS)) {
            return 0;
        }
        if (e.e.op_context == &r1) {
            seen |= 1;
            if (!rx_ok(&e, &r1, FI_TAGGED, 200, tb, 0, 0) || !data_ok(b1, 200, 2, 0, "tag b")) {
                return 0;
            }
        } else if (e.e.op_context == &r2) {
            seen |= 2;
            if (!rx_ok(&e, &r2, FI_TAGGED, 100, ta, 0, 0) || !data_ok(b2, 100, 1, 0, "tag a")) {
                return 0;
            }
        } else {
            seen |= 4;
            if (!rx_ok(&e, &r3, FI_TAGGED, 300, 0x9000000000123412ull, 0, 0) ||
                !data_ok(b3, 300, 3, 0, "ignored bits")) {
                return 0;
            }
        }
    }
    for (int i = 0; i < 3; i++) {
        struct cqe e;
        if (!wait_cqe(&A->tx, &e, WAIT_MS) || e.err) {
            return bad("send completion missing or failed");
        }
    }
    return seen == 7 || bad("completions of receives %#x", seen);
}

/* A receive from the peer's fi_addr only (FI_DIRECTED_RECV): a receive
 * from another address (the receiver's own) is passed over. */
static int directed_recv(void)
{
    struct fi_context2 rself, rpeer, s;
    ssize_t r;
    memset(rbuf, GUARD_BYTE, 2 * 4096);
    fill(sbuf, 64, 77, 0);
    POST(r, fi_recv(B->ep, rbuf, 1000, NULL, B->self, &rself));
    if (!rc_is(r, 0, "fi_recv(src = own fi_addr)")) {
        return 0;
    }
    POST(r, fi_recv(B->ep, rbuf + 4096, 1000, NULL, B->peer, &rpeer));
    if (!rc_is(r, 0, "fi_recv(src = peer)")) {
        return 0;
    }
    POST(r, fi_send(A->ep, sbuf, 64, NULL, A->peer, &s));
    if (!rc_is(r, 0, "fi_send")) {
        return 0;
    }
    struct cqe e;
    if (!wait_cqe(&B->rx, &e, WAIT_MS) || !rx_ok(&e, &rpeer, FI_MSG, 64, 0, 0, 0) ||
        !data_ok(rbuf + 4096, 64, 77, 0, "directed receive") || !guard_ok(rbuf, 1000, "the other receive") ||
        !wait_cqe(&A->tx, &e, WAIT_MS) || !tx_ok(&e, &s, FI_SEND | FI_MSG)) {
        return 0;
    }
    r = fi_cancel(&B->ep->fid, &rself);
    if (!rc_is(r, 0, "fi_cancel of the receive from its own address")) {
        return 0;
    }
    return wait_cqe(&B->rx, &e, WAIT_MS) && err_ok(&e, &rself, FI_ECANCELED);
}

/* fi_sendmsg with FI_MORE (held, then sent with the next), and
 * fi_tsendmsg with FI_DELIVERY_COMPLETE. */
static int more_and_delivery(void)
{
    enum { N = 4 };
    struct fi_context2 rc[N], sc[N];
    const size_t len = 3000;
    ssize_t r;
    uint64_t tag = 0x8000000000007777ull;
    memset(rbuf, GUARD_BYTE, N * 4096);
    for (int i = 0; i < N; i++) {
        fill(sbuf + (size_t)i * 4096, len, 300 + (uint32_t)i, 0);
        if (i < 3) {
            POST(r, fi_recv(B->ep, rbuf + (size_t)i * 4096, len, NULL, FI_ADDR_UNSPEC, &rc[i]));
        } else {
            POST(r, fi_trecv(B->ep, rbuf + (size_t)i * 4096, len, NULL, FI_ADDR_UNSPEC, tag, 0, &rc[i]));
        }
        if (!rc_is(r, 0, "posting a receive")) {
            return 0;
        }
    }
    for (int i = 0; i < N; i++) {
        struct iovec iov = { sbuf + (size_t)i * 4096, len };
        if (i < 3) {
            struct fi_msg m = { .msg_iov = &iov, .iov_count = 1, .addr = A->peer, .context = &sc[i] };
            POST(r, fi_sendmsg(A->ep, &m, FI_COMPLETION | (i < 2 ? FI_MORE : 0)));
        } else {
            struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = A->peer, .tag = tag,
                                       .context = &sc[i] };
            POST(r, fi_tsendmsg(A->ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE));
        }
        if (!rc_is(r, 0, i < 2 ? "fi_sendmsg(FI_MORE)" : i < 3 ? "fi_sendmsg" : "fi_tsendmsg(FI_DELIVERY_COMPLETE)")) {
            return 0;
        }
    }
    for (int i = 0; i < N; i++) {
        struct cqe e;
        if (!wait_cqe(&B->rx, &e, WAIT_MS) ||
            !rx_ok(&e, &rc[i], i < 3 ? FI_MSG : FI_TAGGED, len, tag, 0, 0) ||
            !data_ok(rbuf + (size_t)i * 4096, len, 300 + (uint32_t)i, 0, "received")) {
            return 0;
        }
    }
    int seen = 0;
    for (int i = 0; i < N; i++) {
        struct cqe e;
        if (!wait_cqe(&A->tx, &e, WAIT_MS)) {
            return 0;
        }
        for (int k = 0; k < N; k++) {
            if (e.e.op_context == &sc[k] && tx_ok(&e, &sc[k], FI_SEND)) {
                seen |= 1 << k;
            }
        }
    }
    return seen == (1 << N) - 1 || bad("send completions seen %#x", seen);
}

/* fi_av_lookup, fi_av_remove, then inserting the address again. */
static int av_remove_reinsert(void)
{
    uint8_t name[NAME_MAX_LEN];
    size_t len = sizeof name;
    int r = fi_av_lookup(B->av, B->peer, name, &len);
    if (!rc_is(r, 0, "fi_av_lookup")) {
        return 0;
    }
    if (len != A->namelen || memcmp(name, A->name, len)) {
        return bad("fi_av_lookup gave %zu bytes, not the peer's name", len);
    }
    uint8_t small[4] = { 0, 0, 0, 0 };
    len = sizeof small;
    r = fi_av_lookup(B->av, B->peer, small, &len);
    if ((r != 0 && r != -FI_ETOOSMALL) || len != A->namelen || memcmp(small, A->name, sizeof small)) {
        return bad("fi_av_lookup into 4 bytes: returned %d, len %zu (expected the first 4 bytes, len %zu)", r, len,
                   A->namelen);
    }
    fi_addr_t old = B->peer;
    r = fi_av_remove(B->av, &old, 1, 0);
    if (!rc_is(r, 0, "fi_av_remove")) {
        return 0;
    }
    len = sizeof name;
    r = fi_av_lookup(B->av, old, name, &len);
    if (!is_fi_error(r, "fi_av_lookup of a removed address")) {
        return 0;
    }
    struct fi_context2 c;
    ssize_t rr = fi_send(B->ep, sbuf, 10, NULL, old, &c);
    if (rr == 0) {
        struct cqe e;
        if (!wait_cqe(&B->tx, &e, WAIT_MS) || !err_ok(&e, &c, 0)) {
            return bad("fi_send to a removed fi_addr: accepted, then %s", why);
        }
    } else if (!is_fi_error(rr, "fi_send to a removed fi_addr")) {
        return 0;
    }
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    r = fi_av_insert(B->av, A->name, 1, &fa, 0, NULL);
    if (r != 1 || fa == FI_ADDR_NOTAVAIL) {
        return bad("inserting the removed address again: returned %d, fi_addr %#" PRIx64, r, (uint64_t)fa);
    }
    B->peer = fa;
    if (!xfer(B, A, M_SEND, 100, 1, 555) || !xfer(A, B, M_TSEND, 100000, 1, 556)) {
        return 0;
    }
    return last_rx.src == B->peer ||
           bad("src %#" PRIx64 ", expected the new fi_addr %#" PRIx64, (uint64_t)last_rx.src, (uint64_t)B->peer);
}

/* A message from an endpoint that the receiver never inserted: its source
 * is FI_ADDR_NOTAVAIL, or (FI_AV_MAP) an fi_addr that works. */
static int unknown_source(const struct opts *o)
{
    if (!open_side(C, o, "C")) {
        return 0;
    }
    fi_addr_t cb = FI_ADDR_NOTAVAIL;
    int r = fi_av_insert(C->av, B->name, 1, &cb, 0, NULL);
    if (r != 1) {
        return bad("C: fi_av_insert of B returned %d", r);
    }
    struct fi_context2 rc, sc;
    ssize_t rr;
    fill(sbuf, 64, 31, 0);
    POST(rr, fi_recv(B->ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, &rc));
    if (!rc_is(rr, 0, "fi_recv")) {
        return 0;
    }
    POST(rr, fi_send(C->ep, sbuf, 64, NULL, cb, &sc));
    struct cqe e, te;
    if (!rc_is(rr, 0, "fi_send from C") || !wait_cqe(&B->rx, &e, WAIT_MS) || !rx_ok(&e, &rc, FI_MSG, 64, 0, 0, 0) ||
        !wait_cqe(&C->tx, &te, WAIT_MS) || !tx_ok(&te, &sc, FI_SEND)) {
        return 0;
    }
    if (e.src == FI_ADDR_NOTAVAIL) {
        return 1;
    }
    if (o->av == FI_AV_TABLE) {
        return bad("src %#" PRIx64 " for a sender not in the FI_AV_TABLE, expected FI_ADDR_NOTAVAIL",
                   (uint64_t)e.src);
    }
    /* FI_AV_MAP may give a usable fi_addr: it must reach C. */
    POST(rr, fi_recv(C->ep, rbuf + 4096, 64, NULL, FI_ADDR_UNSPEC, &rc));
    if (!rc_is(rr, 0, "fi_recv at C")) {
        return 0;
    }
    POST(rr, fi_send(B->ep, sbuf, 64, NULL, e.src, &sc));
    if (!rc_is(rr, 0, "fi_send to the src fi_addr") || !wait_cqe(&C->rx, &e, WAIT_MS) ||
        !rx_ok(&e, &rc, FI_MSG, 64, 0, 0, 0) || !wait_cqe(&B->tx, &te, WAIT_MS) || !tx_ok(&te, &sc, FI_SEND)) {
        return bad("(src %#" PRIx64 " given for a sender not inserted is not usable) %s", (uint64_t)e.src, why);
    }
    return 1;
}

static void g_msg(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints (CQ format TAGGED, FI_AV_MAP)")) {
        close_pair();
        return;
    }
    uint32_t seed = 100;
    for (size_t i = 0; i < N_MSG_SIZES; i++) {
        for (enum api a = M_SEND; a <= M_TSEND; a++) {
            for (int first = 1; first >= 0; first--) {
                check(xfer(A, B, a, msg_sizes[i], first, seed++), "%s %zu B, receive posted %s", api_name[a],
                      msg_sizes[i], first ? "first" : "after the send");
            }
        }
    }
    static const size_t sizes2[] = { 0, 1, 1000, 70000, (1u << 20) + 1, MAX_MSG };
    for (size_t i = 0; i < sizeof sizes2 / sizeof sizes2[0]; i++) {
        for (enum api a = M_SENDV; a <= M_TSENDMSG; a++) {
            check(xfer(A, B, a, sizes2[i], 1, seed++), "%s %zu B", api_name[a], sizes2[i]);
        }
    }
    size_t inj = A->info->tx_attr->inject_size;
    const size_t isizes[] = { 0, 1, 100, inj < 4096 ? inj : 4096, inj };
    for (size_t i = 0; i < sizeof isizes / sizeof isizes[0]; i++) {
        for (enum api a = M_INJECT; a <= M_TINJECTDATA; a++) {
            int first = (int)((i + a) & 1);
            check(xfer(A, B, a, isizes[i], first, seed++), "%s %zu B, receive posted %s, buffer scribbled",
                  api_name[a], isizes[i], first ? "first" : "after");
        }
    }
    check(xfer(B, A, M_TSENDDATA, 5000, 1, seed++), "the other direction: %s 5000 B", api_name[M_TSENDDATA]);
    check(tag_matching(), "tags matched out of posting order, and with ignore bits");
    check(directed_recv(), "FI_DIRECTED_RECV: a receive from the peer's fi_addr only");
    check(more_and_delivery(), "fi_sendmsg with FI_MORE (twice, then without), fi_tsendmsg with FI_DELIVERY_COMPLETE");
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close both endpoints");

    struct opts td = DEFAULT_OPTS;
    td.threading = FI_THREAD_DOMAIN;
    if (check(open_pair(&td), "open two endpoints with FI_THREAD_DOMAIN")) {
        check(xfer(A, B, M_SEND, 0, 1, seed++), "FI_THREAD_DOMAIN: fi_send 0 B");
        check(xfer(A, B, M_TSEND, 70000, 0, seed++), "FI_THREAD_DOMAIN: fi_tsend 70000 B");
        check(xfer(B, A, M_SENDV, MAX_MSG, 1, seed++), "FI_THREAD_DOMAIN: fi_sendv 4 MiB");
        check(xfer(A, B, M_TINJECT, 1000, 1, seed++), "FI_THREAD_DOMAIN: fi_tinject 1000 B");
        check(all_taken(), "FI_THREAD_DOMAIN: no unexpected completion left");
    }
    check(close_pair(), "FI_THREAD_DOMAIN: close");

    enum fi_cq_format fmts[] = { FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED };
    for (int f = 0; f < 4; f++) {
        struct opts o = DEFAULT_OPTS;
        o.fmt = fmts[f];
        if (!check(open_pair(&o), "open two endpoints with %s CQs", fmt_name(fmts[f]))) {
            close_pair();
            continue;
        }
        check(xfer(A, B, M_TSENDDATA, 100, 1, seed++), "%s: fi_tsenddata 100 B", fmt_name(fmts[f]));
        check(xfer(A, B, M_SENDMSG, (1u << 20) + 3, 0, seed++), "%s: fi_sendmsg 1 MiB + 3 B",
              fmt_name(fmts[f]));
        check(xfer(A, B, M_INJECTDATA, 10, 1, seed++), "%s: fi_injectdata 10 B", fmt_name(fmts[f]));
        check(all_taken(), "%s: no unexpected completion left", fmt_name(fmts[f]));
        check(close_pair(), "%s: close", fmt_name(fmts[f]));
    }

    enum fi_av_type avs[] = { FI_AV_MAP, FI_AV_TABLE };
    for (int v = 0; v < 2; v++) {
        const char *an = v ? "FI_AV_TABLE" : "FI_AV_MAP";
        struct opts o = DEFAULT_OPTS;
        o.av = avs[v];
        if (!check(open_pair(&o), "open two endpoints with %s", an)) {
            close_pair();
            continue;
        }
        check(xfer(A, B, M_SEND, 32, 1, seed++) &&
                  (last_rx.src == B->peer ||
                   bad("src %#" PRIx64 ", expected %#" PRIx64, (uint64_t)last_rx.src, (uint64_t)B->peer)),
              "%s: fi_cq_readfrom gives the sender's fi_addr %#" PRIx64 " (A to B)", an, (uint64_t)B->peer);
        check(xfer(B, A, M_TSEND, 70000, 0, seed++) &&
                  (last_rx.src == A->peer ||
                   bad("src %#" PRIx64 ", expected %#" PRIx64, (uint64_t)last_rx.src, (uint64_t)A->peer)),
              "%s: fi_cq_readfrom gives the sender's fi_addr %#" PRIx64 " (B to A, 70000 B)", an,
              (uint64_t)A->peer);
        check(unknown_source(&o), "%s: a sender the receiver never inserted: src FI_ADDR_NOTAVAIL%s", an,
              v ? "" : " or a usable fi_addr");
        check(close_side(C), "%s: close the third endpoint", an);
        check(av_remove_reinsert(), "%s: fi_av_lookup, fi_av_remove (a send to it fails), insert again, messages "
                                    "both ways",
              an);
        check(all_taken(), "%s: no unexpected completion left", an);
        check(close_pair(), "%s: close", an);
    }
}

/* ------------------------------------------------------------------ */
/* Group 3: truncation                                                */
/* ------------------------------------------------------------------ */

/* fi_cq_read on `c` of `s` until it gives something other than
 * -FI_EAGAIN, progressing the other side only. */
static ssize_t raw_read(struct side *s, struct cq *c, struct fi_cq_tagged_entry *e)
{
    struct side *other = s == A ? B : A;
    double end = now_ms() + WAIT_MS;
    for (;;) {
        ssize_t r = fi_cq_read(c->cq, e, 1);
        if (r != -FI_EAGAIN || now_ms() > end) {
            return r;
        }
        drain(&other->tx);
        drain(&other->rx);
        sched_yield();
    }
}

static int truncation(int tagged, size_t sent, size_t posted, uint32_t seed)
{
    struct fi_context2 rctx, sctx;
    uint64_t tag = tag_of(seed);
    memset(rbuf, GUARD_BYTE, posted + GUARD);
    fill(sbuf, sent, seed, 0);
    ssize_t r;
    if (tagged) {
        POST(r, fi_trecv(B->ep, posted ? rbuf : NULL, posted, NULL, FI_ADDR_UNSPEC, tag, 0, &rctx));
    } else {
        POST(r, fi_recv(B->ep, posted ? rbuf : NULL, posted, NULL, FI_ADDR_UNSPEC, &rctx));
    }
    if (!rc_is(r, 0, "posting the receive")) {
        return 0;
    }
    if (tagged) {
        POST(r, fi_tsend(A->ep, sbuf, sent, NULL, A->peer, tag, &sctx));
    } else {
        POST(r, fi_send(A->ep, sbuf, sent, NULL, A->peer, &sctx));
    }
    if (!rc_is(r, 0, "send")) {
        return 0;
    }
    struct fi_cq_tagged_entry e;
    r = raw_read(B, &B->rx, &e);
    if (!rc_is(r, -FI_EAVAIL, "fi_cq_read")) {
        return 0;
    }
    struct fi_cq_err_entry ee;
    memset(&ee, 0, sizeof ee);
    r = fi_cq_readerr(B->rx.cq, &ee, 0);
    if (!rc_is(r, 1, "fi_cq_readerr")) {
        return 0;
    }
    if (ee.err != FI_ETRUNC) {
        return bad("err %d (%s), expected FI_ETRUNC", ee.err, fi_strerror(ee.err));
    }
    if (ee.olen != sent - posted) {
        return bad("olen %zu, expected %zu (the bytes that did not fit)", ee.olen, sent - posted);
    }
    if (ee.op_context != &rctx) {
        return bad("op_context %p, expected %p", ee.op_context, (void *)&rctx);
    }
    if (!(ee.flags & FI_RECV)) {
        return bad("flags %#" PRIx64 " lack FI_RECV", (uint64_t)ee.flags);
    }
    if (ee.len != posted) {
        return bad("len %zu, expected %zu (what was received)", ee.len, posted);
    }
    if (tagged && ee.tag != tag) {
        return bad("tag %#" PRIx64 ", expected %#" PRIx64, (uint64_t)ee.tag, tag);
    }
    char sbuf_err[128] = "";
    const char *s1 = fi_cq_strerror(B->rx.cq, ee.prov_errno, ee.err_data, sbuf_err, sizeof sbuf_err);
    const char *s2 = fi_cq_strerror(B->rx.cq, ee.prov_errno, ee.err_data, NULL, 0);
    if (!s1 || !*s1 || !s2 || !*s2) {
        return bad("fi_cq_strerror gave %s / %s", s1 ? s1 : "NULL", s2 ? s2 : "NULL");
    }
    if (!data_ok(rbuf, posted, seed, 0, "truncated data") || !guard_ok(rbuf + posted, GUARD, "after the buffer")) {
        return 0;
    }
    r = fi_cq_readerr(B->rx.cq, &ee, 0);
    if (!rc_is(r, -FI_EAGAIN, "fi_cq_readerr with no error entry")) {
        return 0;
    }
    struct cqe te;
    return wait_cqe(&A->tx, &te, WAIT_MS) && tx_ok(&te, &sctx, FI_SEND);
}

static void g_trunc(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    check(truncation(0, 1000, 100, 1), "fi_send 1000 B into fi_recv 100 B: -FI_EAVAIL, FI_ETRUNC, olen 900");
    check(truncation(1, (1u << 20) + 5, 4096, 2),
          "fi_tsend 1 MiB + 5 B into fi_trecv 4096 B: -FI_EAVAIL, FI_ETRUNC, olen");
    check(truncation(1, 100, 0, 3), "fi_tsend 100 B into fi_trecv 0 B: FI_ETRUNC, olen 100");
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 4: selective completion and counters                         */
/* ------------------------------------------------------------------ */

static int cntr_reaches(struct fid_cntr *c, uint64_t want, const char *what)
{
    double end = now_ms() + WAIT_MS;
    uint64_t v;
    while ((v = fi_cntr_read(c)) < want && now_ms() < end) {
        progress();
    }
    if (v != want) {
        return bad("%s counter %" PRIu64 ", expected %" PRIu64, what, v, want);
    }
    uint64_t e = fi_cntr_readerr(c);
    return e == 0 || bad("%s error counter %" PRIu64, what, e);
}

static void g_selective(void)
{
    struct opts o = DEFAULT_OPTS;
    o.selective = 1;
    o.cntrs = 1;
    if (!check(open_pair(&o), "open two endpoints, A's tx CQ bound FI_TRANSMIT | FI_SELECTIVE_COMPLETION, "
                              "counters bound FI_SEND / FI_RECV")) {
        close_pair();
        return;
    }
    uint64_t f = FI_TRANSMIT;
    int r = fi_control(&A->ep->fid, FI_SETOPSFLAG, &f);
    check(rc_is(r, 0, "fi_control(FI_SETOPSFLAG, FI_TRANSMIT)"), "fi_control(FI_SETOPSFLAG) clears FI_COMPLETION");
    f = FI_TRANSMIT;
    r = fi_control(&A->ep->fid, FI_GETOPSFLAG, &f);
    check(rc_is(r, 0, "fi_control(FI_GETOPSFLAG)") &&
              (!(f & FI_COMPLETION) || bad("tx op flags %#" PRIx64, f)),
          "fi_control(FI_GETOPSFLAG) shows no FI_COMPLETION");

    enum { N = 5 };
    struct fi_context2 rctx[N], c1, c2, c3;
    const size_t len = 1000;
    uint64_t tag = 0x8000000000000444ull;
    for (int i = 0; i < N; i++) {
        fill(sbuf + (size_t)i * 4096, len, 40 + (uint32_t)i, 0);
        memset(rbuf + (size_t)i * 4096, GUARD_BYTE, 4096);
        ssize_t rr;
        POST(rr, fi_trecv(B->ep, rbuf + (size_t)i * 4096, len, NULL, FI_ADDR_UNSPEC, tag, 0, &rctx[i]));
        check(rc_is(rr, 0, "fi_trecv"), "B posts receive %d", i);
    }
    struct iovec iov;
    struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = A->peer, .tag = tag };
    ssize_t rr;
    iov = (struct iovec){ sbuf, len };
    m.context = NULL;
    POST(rr, fi_tsendmsg(A->ep, &m, 0));
    check(rc_is(rr, 0, "fi_tsendmsg"), "fi_tsendmsg(flags 0, context NULL)");
    iov = (struct iovec){ sbuf + 4096, len };
    m.context = &c1;
    POST(rr, fi_tsendmsg(A->ep, &m, FI_COMPLETION));
    check(rc_is(rr, 0, "fi_tsendmsg"), "fi_tsendmsg(flags FI_COMPLETION)");
    POST(rr, fi_tsend(A->ep, sbuf + 2 * 4096, len, NULL, A->peer, tag, &c2));
    check(rc_is(rr, 0, "fi_tsend"), "fi_tsend with op_flags lacking FI_COMPLETION");
    f = FI_TRANSMIT | FI_COMPLETION;
    r = fi_control(&A->ep->fid, FI_SETOPSFLAG, &f);
    check(rc_is(r, 0, "fi_control(FI_SETOPSFLAG, FI_TRANSMIT | FI_COMPLETION)"),
          "fi_control(FI_SETOPSFLAG) sets FI_COMPLETION");
    POST(rr, fi_tsend(A->ep, sbuf + 3 * 4096, len, NULL, A->peer, tag, &c3));
    check(rc_is(rr, 0, "fi_tsend"), "fi_tsend with op_flags FI_COMPLETION");
    POST(rr, fi_tinject(A->ep, sbuf + 4 * 4096, len, A->peer, tag));
    check(rc_is(rr, 0, "fi_tinject"), "fi_tinject");

    int good = 1;
    for (int i = 0; i < N && good; i++) {
        struct cqe e;
        good = wait_cqe(&B->rx, &e, WAIT_MS) && rx_ok(&e, &rctx[i], FI_TAGGED, len, tag, 0, 0) &&
               data_ok(rbuf + (size_t)i * 4096, len, 40 + (uint32_t)i, 0, "received data");
    }
    check(good, "B receives all %d messages in order", N);
    int seen1 = 0, seen3 = 0;
    good = 1;
    for (int i = 0; i < 2 && good; i++) {
        struct cqe e;
        good = wait_cqe(&A->tx, &e, WAIT_MS);
        if (good && e.e.op_context == &c1) {
            seen1 = tx_ok(&e, &c1, FI_SEND | FI_TAGGED);
        } else if (good && e.e.op_context == &c3) {
            seen3 = tx_ok(&e, &c3, FI_SEND | FI_TAGGED);
        } else if (good) {
            char d[256];
            describe(&e, d, sizeof d);
            good = bad("unexpected completion %s", d);
        }
    }
    check(good && seen1 && seen3, "the two sends asking FI_COMPLETION complete on A's tx CQ");
    check(quiet(&A->tx, 4 * QUIET_MS), "the sends without FI_COMPLETION write no completion");
    check(cntr_reaches(A->txcntr, N, "send"), "A's send counter counts all %d sends", N);
    check(cntr_reaches(B->rxcntr, N, "recv"), "B's recv counter counts all %d receives", N);

    /* A failure is reported even without FI_COMPLETION. */
    struct fid_mr *mr = NULL;
    r = fi_mr_reg(B->domain, region, 4096, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
    if (check(rc_is(r, 0, "fi_mr_reg"), "B registers 4096 B")) {
        uint64_t key = fi_mr_key(mr);
        uint64_t base = (uint64_t)(uintptr_t)region;
        struct iovec wiov = { sbuf, 64 };
        struct fi_rma_iov rio = { base, 64, key ^ 0x5a5a5a5a00000000ull };
        struct fi_msg_rma wm = { .msg_iov = &wiov, .iov_count = 1, .addr = A->peer, .rma_iov = &rio,
                                 .rma_iov_count = 1, .context = NULL };
        POST(rr, fi_writemsg(A->ep, &wm, 0));
        struct cqe e;
        check(rc_is(rr, 0, "fi_writemsg") && wait_cqe(&A->tx, &e, WAIT_MS) && err_ok(&e, NULL, 0),
              "fi_writemsg(flags 0) with a bad key: its error is reported anyway");
        check(rc_is(fi_close(&mr->fid), 0, "fi_close(mr)"), "close the registration");
    }
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 5: probe (FI_PEEK, FI_CLAIM, FI_DISCARD)                     */
/* ------------------------------------------------------------------ */

static int peek_once(struct side *rx, uint64_t tag, uint64_t flags, void *ctx, struct cqe *out)
{
    struct fi_msg_tagged m = { .addr = FI_ADDR_UNSPEC, .tag = tag, .ignore = 0, .context = ctx };
    ssize_t r;
    POST(r, fi_trecvmsg(rx->ep, &m, FI_PEEK | flags));
    if (!rc_is(r, 0, "fi_trecvmsg(FI_PEEK)")) {
        return 0;
    }
    return wait_cqe(&rx->rx, out, WAIT_MS);
}

/* Peeks until a message is found (each miss is an FI_ENOMSG entry). */
static int peek_found(struct side *rx, uint64_t tag, uint64_t flags, void *ctx, struct cqe *out)
{
    double end = now_ms() + WAIT_MS;
    for (;;) {
        if (!peek_once(rx, tag, flags, ctx, out)) {
            return 0;
        }
        if (out->err != FI_ENOMSG) {
            /* What MPI_Probe reports as the source (fi_cq_readfrom). */
            if (!out->err && rx == B && out->src != B->peer) {
                return bad("FI_PEEK's source %#" PRIx64 ", expected A's %#" PRIx64, (uint64_t)out->src,
                           (uint64_t)B->peer);
            }
            return 1;
        }
        if (now_ms() > end) {
            return bad("every FI_PEEK for %d ms gave FI_ENOMSG", WAIT_MS);
        }
        progress();
    }
}

static int tsend_data(size_t len, uint64_t tag, uint32_t seed, size_t at, void *ctx)
{
    fill(sbuf + at, len, seed, 0);
    ssize_t r;
    POST(r, fi_tsenddata(A->ep, sbuf + at, len, NULL, data_of(seed), A->peer, tag, ctx));
    return rc_is(r, 0, "fi_tsenddata");
}

static int sends_done(int n)
{
    for (int i = 0; i < n; i++) {
        struct cqe e;
        if (!wait_cqe(&A->tx, &e, WAIT_MS)) {
            return 0;
        }
        if (e.err) {
            return bad("a send failed: %d (%s)", e.err, fi_strerror(e.err));
        }
    }
    return 1;
}

static int trecv_into(uint8_t *buf, size_t len, uint64_t tag, void *ctx)
{
    ssize_t r;
    POST(r, fi_trecv(B->ep, buf, len, NULL, FI_ADDR_UNSPEC, tag, 0, ctx));
    return rc_is(r, 0, "fi_trecv");
}

static int probe_found(size_t len, uint32_t seed)
{
    struct fi_context2 pctx, rctx, sctx;
    uint64_t tag = tag_of(seed);
    struct cqe e;
    memset(rbuf, GUARD_BYTE, len + GUARD);
    if (!tsend_data(len, tag, seed, 0, &sctx) || !peek_found(B, tag, 0, &pctx, &e) ||
        !rx_ok(&e, &pctx, FI_TAGGED, len, tag, 1, data_of(seed))) {
        return 0;
    }
    if (!trecv_into(rbuf, len, tag, &rctx) || !wait_cqe(&B->rx, &e, WAIT_MS) ||
        !rx_ok(&e, &rctx, FI_TAGGED, len, tag, 1, data_of(seed)) || !data_ok(rbuf, len, seed, 0, "received")) {
        return bad("(after the peek, a receive) %s", why);
    }
    return sends_done(1);
}

static int probe_claim(void)
{
    struct fi_context2 cctx, r1, s1, s2;
    uint64_t tag = 0x8000000000005151ull;
    struct cqe e;
    uint8_t *bx = rbuf, *by = rbuf + 8192;
    memset(rbuf, GUARD_BYTE, 16384);
    if (!tsend_data(5000, tag, 51, 0, &s1) || !peek_found(B, tag, FI_CLAIM, &cctx, &e) ||
        !rx_ok(&e, &cctx, FI_TAGGED, 5000, tag, 1, data_of(51))) {
        return 0;
    }
    /* The claimed message is no one else's: a receive gets the next. */
    if (!trecv_into(by, 1000, tag, &r1) || !tsend_data(64, tag, 52, 8192, &s2) || !wait_cqe(&B->rx, &e, WAIT_MS) ||
        !rx_ok(&e, &r1, FI_TAGGED, 64, tag, 1, data_of(52)) || !data_ok(by, 64, 52, 0, "the next message")) {
        return bad("(a receive posted after the claim) %s", why);
    }
    struct iovec iov = { bx, 5000 };
    struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = tag, .context = &cctx };
    ssize_t r;
    POST(r, fi_trecvmsg(B->ep, &m, FI_CLAIM));
    if (!rc_is(r, 0, "fi_trecvmsg(FI_CLAIM)") || !wait_cqe(&B->rx, &e, WAIT_MS) ||
        !rx_ok(&e, &cctx, FI_TAGGED, 5000, tag, 1, data_of(51)) || !data_ok(bx, 5000, 51, 0, "claimed message") ||
        !guard_ok(bx + 5000, GUARD, "after the buffer")) {
        return 0;
    }
    return sends_done(2);
}

static int claim_discard(struct fi_context2 *cctx, size_t len, uint64_t tag, uint32_t seed)
{
    struct cqe e;
    if (!peek_found(B, tag, FI_CLAIM, cctx, &e) || !rx_ok(&e, cctx, FI_TAGGED, len, tag, 1, data_of(seed))) {
        return 0;
    }
    struct fi_msg_tagged m = { .addr = FI_ADDR_UNSPEC, .tag = tag, .context = cctx };
    ssize_t r;
    POST(r, fi_trecvmsg(B->ep, &m, FI_CLAIM | FI_DISCARD));
    if (!rc_is(r, 0, "fi_trecvmsg(FI_CLAIM | FI_DISCARD)") || !wait_cqe(&B->rx, &e, WAIT_MS)) {
        return 0;
    }
    char d[256];
    describe(&e, d, sizeof d);
    if (e.err || e.e.op_context != cctx) {
        return bad("discard completion %s, expected success with context %p", d, (void *)cctx);
    }
    return 1;
}

static int probe_claim_discard(void)
{
    struct fi_context2 cctx, rctx, s1, s2;
    uint64_t tag = 0x8000000000005252ull;
    struct cqe e;
    memset(rbuf, GUARD_BYTE, 4096);
    if (!tsend_data(1000, tag, 61, 0, &s1) || !tsend_data(1000, tag, 62, 4096, &s2) ||
        !claim_discard(&cctx, 1000, tag, 61)) {
        return 0;
    }
    if (!guard_ok(rbuf, 4096, "receive buffer (no data for a discard)") || !trecv_into(rbuf, 2000, tag, &rctx) ||
        !wait_cqe(&B->rx, &e, WAIT_MS) || !rx_ok(&e, &rctx, FI_TAGGED, 1000, tag, 1, data_of(62)) ||
        !data_ok(rbuf, 1000, 62, 0, "the message after the discarded one")) {
        return bad("(the receive after the discard) %s", why);
    }
    return sends_done(2);
}

static int probe_peek_discard(void)
{
    struct fi_context2 pctx, rctx, s1, s2;
    uint64_t tag = 0x8000000000005353ull;
    struct cqe e;
    memset(rbuf, GUARD_BYTE, 4096);
    if (!tsend_data(700, tag, 71, 0, &s1) || !peek_found(B, tag, FI_DISCARD, &pctx, &e)) {
        return 0;
    }
    char d[256];
    describe(&e, d, sizeof d);
    if (e.err || e.e.op_context != &pctx) {
        return bad("FI_PEEK | FI_DISCARD completion %s, expected success with its context", d);
    }
    if (!trecv_into(rbuf, 2000, tag, &rctx) || !tsend_data(300, tag, 72, 4096, &s2) ||
        !wait_cqe(&B->rx, &e, WAIT_MS) || !rx_ok(&e, &rctx, FI_TAGGED, 300, tag, 1, data_of(72)) ||
        !data_ok(rbuf, 300, 72, 0, "the message after the discarded one")) {
        return bad("(the receive after the discard) %s", why);
    }
    return sends_done(2);
}

/* A 0-byte message claimed and discarded; then the same context serves a
 * receive that is truncated: its FI_ETRUNC must show. */
static int probe_discard_reuse(void)
{
    struct fi_context2 ctx, s1, s2;
    uint64_t tag = 0x8000000000005454ull, tag2 = 0x8000000000005455ull;
    struct cqe e;
    if (!tsend_data(0, tag, 81, 0, &s1) || !claim_discard(&ctx, 0, tag, 81)) {
        return 0;
    }
    memset(rbuf, GUARD_BYTE, 4096);
    if (!trecv_into(rbuf, 10, tag2, &ctx) || !tsend_data(100, tag2, 82, 0, &s2) || !wait_cqe(&B->rx, &e, WAIT_MS)) {
        return 0;
    }
    int good = err_ok(&e, &ctx, FI_ETRUNC) && (e.olen == 90 || bad("olen %zu, expected 90", e.olen));
    return sends_done(2) && good;
}

static void g_probe(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    struct fi_context2 pctx;
    struct cqe e;
    check(peek_once(B, 0x8000000000005050ull, 0, &pctx, &e) && err_ok(&e, &pctx, FI_ENOMSG),
          "FI_PEEK with no message: error completion FI_ENOMSG with the context");
    check(probe_found(300, 91), "FI_PEEK finds a 300 B message (len, tag, data), a receive then takes it");
    check(probe_found(200000, 92), "FI_PEEK finds a 200000 B message (len, tag, data), a receive then takes it");
    check(probe_claim(), "FI_PEEK | FI_CLAIM, a receive meanwhile gets the next message, "
                         "FI_CLAIM with the same fi_context2 receives the claimed one");
    check(probe_claim_discard(), "FI_PEEK | FI_CLAIM then FI_CLAIM | FI_DISCARD: success, no data, "
                                 "the next receive gets the next message");
    check(probe_peek_discard(), "FI_PEEK | FI_DISCARD: success, the next receive gets the next message");
    check(probe_discard_reuse(), "after FI_CLAIM | FI_DISCARD of a 0 B message, a truncated receive with the same "
                                 "context reports FI_ETRUNC");
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 6: cancel                                                    */
/* ------------------------------------------------------------------ */

static int cancel_recv(int tagged)
{
    struct fi_context2 c, c2, s;
    uint64_t tag = 0x8000000000006161ull;
    uint8_t *b1 = rbuf, *b2 = rbuf + 4096;
    memset(rbuf, GUARD_BYTE, 8192);
    ssize_t r;
    if (tagged) {
        POST(r, fi_trecv(B->ep, b1, 100, NULL, FI_ADDR_UNSPEC, tag, 0, &c));
    } else {
        POST(r, fi_recv(B->ep, b1, 100, NULL, FI_ADDR_UNSPEC, &c));
    }
    if (!rc_is(r, 0, "posting the receive")) {
        return 0;
    }
    r = fi_cancel(&B->ep->fid, &c);
    if (!rc_is(r, 0, "fi_cancel")) {
        return 0;
    }
    r = fi_cancel(&B->ep->fid, &c);
    if (!rc_is(r, -FI_ENOENT, "fi_cancel again (before its completion is read)")) {
        return 0;
    }
    struct cqe e;
    if (!wait_cqe(&B->rx, &e, WAIT_MS) || !err_ok(&e, &c, FI_ECANCELED)) {
        return 0;
    }
    if (e.fmt != FI_CQ_FORMAT_CONTEXT && !(e.e.flags & FI_RECV)) {
        return bad("flags %#" PRIx64 " of the canceled receive lack FI_RECV", (uint64_t)e.e.flags);
    }
    r = fi_cancel(&B->ep->fid, &c);
    if (!rc_is(r, -FI_ENOENT, "fi_cancel again (after its completion)")) {
        return 0;
    }
    /* A message now goes to a new receive, not the canceled one. */
    fill(sbuf, 100, 66, 0);
    if (tagged) {
        POST(r, fi_trecv(B->ep, b2, 100, NULL, FI_ADDR_UNSPEC, tag, 0, &c2));
    } else {
        POST(r, fi_recv(B->ep, b2, 100, NULL, FI_ADDR_UNSPEC, &c2));
    }
    if (!rc_is(r, 0, "posting a receive")) {
        return 0;
    }
    if (tagged) {
        POST(r, fi_tsend(A->ep, sbuf, 100, NULL, A->peer, tag, &s));
    } else {
        POST(r, fi_send(A->ep, sbuf, 100, NULL, A->peer, &s));
    }
    if (!rc_is(r, 0, "send")) {
        return 0;
    }
    return wait_cqe(&B->rx, &e, WAIT_MS) && rx_ok(&e, &c2, tagged ? FI_TAGGED : FI_MSG, 100, tag, 0, 0) &&
           data_ok(b2, 100, 66, 0, "the new receive") && guard_ok(b1, 4096, "the canceled receive's buffer") &&
           sends_done(1);
}

static void g_cancel(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    check(cancel_recv(1), "fi_cancel of a posted fi_trecv: FI_ECANCELED with the context, again -FI_ENOENT, "
                          "the buffer untouched");
    check(cancel_recv(0), "fi_cancel of a posted fi_recv: FI_ECANCELED with the context, again -FI_ENOENT, "
                          "the buffer untouched");
    struct fi_context2 never;
    check(rc_is(fi_cancel(&B->ep->fid, &never), -FI_ENOENT, "fi_cancel"), "fi_cancel of an unknown context: "
                                                                         "-FI_ENOENT");
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 7: RMA                                                       */
/* ------------------------------------------------------------------ */

#define RLEN (MAX_RMA + 4 * GUARD) /* registered bytes of `region` */
#define ROFF 5                     /* where transfers start in it */

static uint64_t rkey, rbase; /* B's registration of `region` */

static uint64_t base_of(struct side *s, const void *buf)
{
    int virt = (s->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) || s->info->domain_attr->mr_mode == FI_MR_BASIC;
    return virt ? (uint64_t)(uintptr_t)buf : 0;
}

/* Whether the region holds `seed_bg` except [ROFF, ROFF+n) holding
 * `seed` from `start` (n 0: background only). */
static int region_ok(size_t n, uint32_t seed, size_t start, uint32_t seed_bg)
{
    size_t upto = ROFF + n + GUARD;
    return data_ok(region, ROFF, seed_bg, 0, "target before the range") &&
           data_ok(region + ROFF, n, seed, start, "target") &&
           data_ok(region + ROFF + n, upto - ROFF - n, seed_bg, ROFF + n, "target after the range");
}

static int rma_wait(void *ctx, uint64_t flags)
{
    struct cqe e;
    return wait_cqe(&A->tx, &e, WAIT_MS) && tx_ok(&e, ctx, flags);
}

static int rma_write(size_t n, uint32_t seed)
{
    struct fi_context2 c;
    uint32_t bg = seed + 1000;
    fill(region, ROFF + n + GUARD, bg, 0);
    fill(sbuf, n, seed, 0);
    ssize_t r;
    POST(r, fi_write(A->ep, sbuf, n, NULL, A->peer, rbase + ROFF, rkey, &c));
    return rc_is(r, 0, "fi_write") && rma_wait(&c, FI_RMA | FI_WRITE) && region_ok(n, seed, 0, bg);
}

static int rma_read(size_t n, uint32_t seed)
{
    struct fi_context2 c;
    fill(region, ROFF + n + GUARD, seed, 0);
    memset(rbuf, GUARD_BYTE, n + GUARD);
    ssize_t r;
    POST(r, fi_read(A->ep, rbuf, n, NULL, A->peer, rbase + ROFF, rkey, &c));
    return rc_is(r, 0, "fi_read") && rma_wait(&c, FI_RMA | FI_READ) && data_ok(rbuf, n, seed, ROFF, "read data") &&
           guard_ok(rbuf + n, GUARD, "after the buffer");
}

static int rma_writedata(size_t n, uint32_t seed)
{
    struct fi_context2 c;
    uint32_t bg = seed + 1000;
    uint64_t data = data_of(seed);
    fill(region, ROFF + n + GUARD, bg, 0);
    fill(sbuf, n, seed, 0);
    ssize_t r;
    POST(r, fi_writedata(A->ep, sbuf, n, NULL, data, A->peer, rbase + ROFF, rkey, &c));
    if (!rc_is(r, 0, "fi_writedata") || !rma_wait(&c, FI_RMA | FI_WRITE)) {
        return 0;
    }
    struct cqe e;
    if (!wait_cqe(&B->rx, &e, WAIT_MS)) {
        return bad("(the target's completion) %s", why);
    }
    char d[256];
    describe(&e, d, sizeof d);
    if (e.err || (e.e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) != (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) ||
        e.e.data != data || e.e.len != n) {
        return bad("target completion %s, expected flags FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA, data %#" PRIx64
                   ", len %zu",
                   d, data, n);
    }
    return region_ok(n, seed, 0, bg);
}

static int rma_writev(size_t n, uint32_t seed)
{
    struct fi_context2 c;
    uint32_t bg = seed + 1000;
    struct iovec iov[3];
    size_t st[3];
    fill(region, ROFF + n + GUARD, bg, 0);
    iov3(sbuf, n, 1, iov, st);
    for (int k = 0; k < 3; k++) {
        fill(iov[k].iov_base, iov[k].iov_len, seed, st[k]);
    }
    ssize_t r;
    POST(r, fi_writev(A->ep, iov, NULL, 3, A->peer, rbase + ROFF, rkey, &c));
    return rc_is(r, 0, "fi_writev") && rma_wait(&c, FI_RMA | FI_WRITE) && region_ok(n, seed, 0, bg);
}

static int rma_readv(size_t n, uint32_t seed)
{
    struct fi_context2 c;
    struct iovec iov[3];
    size_t st[3];
    fill(region, ROFF + n + GUARD, seed, 0);
    memset(rbuf, GUARD_BYTE, n + 4 * GUARD);
    iov3(rbuf, n, 0, iov, st);
    ssize_t r;
    POST(r, fi_readv(A->ep, iov, NULL, 3, A->peer, rbase + ROFF, rkey, &c));
    if (!rc_is(r, 0, "fi_readv") || !rma_wait(&c, FI_RMA | FI_READ)) {
        return 0;
    }
    for (int k = 0; k < 3; k++) {
        if (!data_ok(iov[k].iov_base, iov[k].iov_len, seed, ROFF + st[k], "read data") ||
            !guard_ok((uint8_t *)iov[k].iov_base + iov[k].iov_len, GUARD, "after a buffer")) {
            return 0;
        }
    }
    return 1;
}

/* Waits (progressing) until the region holds what an inject wrote. */
static int region_becomes(size_t n, uint32_t seed, uint32_t bg)
{
    double end = now_ms() + WAIT_MS;
    for (;;) {
        if (region_ok(n, seed, 0, bg)) {
            return 1;
        }
        if (now_ms() > end) {
            return 0; /* why says where it differs */
        }
        why[0] = 0;
        progress();
        sched_yield();
    }
}

static int rma_inject(size_t n, uint32_t seed, int with_data)
{
    uint32_t bg = seed + 1000;
    uint64_t data = data_of(seed);
    fill(region, ROFF + n + GUARD, bg, 0);
    fill(sbuf, n, seed, 0);
    ssize_t r;
    if (with_data) {
        POST(r, fi_inject_writedata(A->ep, sbuf, n, data, A->peer, rbase + ROFF, rkey));
    } else {
        POST(r, fi_inject_write(A->ep, sbuf, n, A->peer, rbase + ROFF, rkey));
    }
    if (!rc_is(r, 0, with_data ? "fi_inject_writedata" : "fi_inject_write")) {
        return 0;
    }
    memset(sbuf, SCRIBBLE, n);
    if (!region_becomes(n, seed, bg)) {
        return 0;
    }
    if (with_data) {
        struct cqe e;
        if (!wait_cqe(&B->rx, &e, WAIT_MS)) {
            return 0;
        }
        if (e.err || !(e.e.flags & FI_REMOTE_CQ_DATA) || e.e.data != data) {
            char d[256];
            describe(&e, d, sizeof d);
            return bad("target completion %s, expected FI_REMOTE_CQ_DATA with %#" PRIx64, d, data);
        }
    }
    return quiet(&A->tx, QUIET_MS) || bad("(an inject must write no completion)");
}

/* A write or read that must fail with `err` (0: any), the region and the
 * local buffer untouched. */
static int rma_fails(int is_read, uint64_t addr, size_t n, uint64_t key, int err)
{
    struct fi_context2 c;
    uint32_t bg = 4242;
    fill(region, RLEN, bg, 0);
    fill(sbuf, n, 4343, 0);
    memset(rbuf, GUARD_BYTE, n + GUARD);
    ssize_t r;
    if (is_read) {
        POST(r, fi_read(A->ep, rbuf, n, NULL, A->peer, addr, key, &c));
    } else {
        POST(r, fi_write(A->ep, sbuf, n, NULL, A->peer, addr, key, &c));
    }
    if (r < 0) {
        return is_fi_error(r, is_read ? "fi_read" : "fi_write"); /* refused at once: fine too */
    }
    struct cqe e;
    if (!wait_cqe(&A->tx, &e, WAIT_MS) || !err_ok(&e, &c, err)) {
        return 0;
    }
    return data_ok(region, RLEN, bg, 0, "target memory") && guard_ok(rbuf, n + GUARD, "local buffer");
}

static void g_rma(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    struct fid_mr *mr = NULL;
    int r = fi_mr_reg(B->domain, region, RLEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
    if (!check(rc_is(r, 0, "fi_mr_reg"), "fi_mr_reg of %u B with FI_REMOTE_READ | FI_REMOTE_WRITE", RLEN)) {
        close_pair();
        return;
    }
    rkey = fi_mr_key(mr);
    rbase = base_of(B, region);
    check(rkey != FI_KEY_NOTAVAIL || bad("fi_mr_key gave FI_KEY_NOTAVAIL"), "fi_mr_key gives key %#" PRIx64, rkey);

    static const size_t sizes[] = { 1, 7, 4096, 65537, (1u << 20) + 3, MAX_RMA };
    uint32_t seed = 700;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check(rma_write(sizes[i], seed++), "fi_write %zu B: completion, target bytes, bytes around untouched",
              sizes[i]);
        check(rma_read(sizes[i], seed++), "fi_read %zu B: completion, every byte, guard untouched", sizes[i]);
    }
    check(rma_writedata(100, seed++), "fi_writedata 100 B: target gets FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA with data");
    check(rma_writedata((1u << 20) + 1, seed++), "fi_writedata 1 MiB + 1 B: target completion with data");
    check(rma_writev(3000, seed++), "fi_writev 3000 B from 3 local buffers");
    check(rma_writev((2u << 20) + 1, seed++), "fi_writev 2 MiB + 1 B from 3 local buffers");
    check(rma_readv(3000, seed++), "fi_readv 3000 B into 3 local buffers");
    check(rma_readv((2u << 20) + 1, seed++), "fi_readv 2 MiB + 1 B into 3 local buffers");
    size_t inj = A->info->tx_attr->inject_size;
    check(rma_inject(8, seed++, 0), "fi_inject_write 8 B: buffer scribbled, target right, no completion");
    check(rma_inject(inj, seed++, 0), "fi_inject_write %zu B (inject_size): target right, no completion", inj);
    check(rma_inject(64, seed++, 1), "fi_inject_writedata 64 B: target right with its data, no completion");
    check(rma_fails(0, rbase + ROFF, 64, rkey ^ 0x5a5a5a5a00000000ull, FI_EACCES),
          "fi_write with a bad key: FI_EACCES, target memory unchanged");
    check(rma_fails(1, rbase + ROFF, 64, rkey ^ 0x5a5a5a5a00000000ull, FI_EACCES),
          "fi_read with a bad key: FI_EACCES, local buffer unchanged");
    check(rma_fails(0, rbase + RLEN - 8, 64, rkey, 0), "fi_write past the end of the region: an error, target "
                                                         "memory unchanged");
    check(all_taken(), "no unexpected completion left");
    check(rc_is(fi_close(&mr->fid), 0, "fi_close(mr)"), "close the registration");
    check(rma_fails(0, rbase + ROFF, 64, rkey, FI_EACCES), "fi_write to a closed registration: FI_EACCES, memory "
                                                           "unchanged");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 8: atomics                                                   */
/* ------------------------------------------------------------------ */

struct atomic_area {
    uint64_t u64[8];
    uint32_t u32[8];
};

static volatile struct atomic_area *area; /* in `region`, registered by B */
static uint64_t akey, abase;

static uint64_t a_addr(const volatile void *p)
{
    return abase + (uint64_t)((const volatile uint8_t *)p - (const volatile uint8_t *)area);
}

static int atomic_done(void *ctx, uint64_t flags)
{
    struct cqe e;
    return wait_cqe(&A->tx, &e, WAIT_MS) && tx_ok(&e, ctx, FI_ATOMIC | flags);
}

static void reset_area(void)
{
    for (int i = 0; i < 8; i++) {
        area->u64[i] = 0x1111111111111111ull * (uint64_t)(i + 1);
        area->u32[i] = 0x01010101u * (uint32_t)(i + 1);
    }
}

/* Whether the words of the area other than u64[i64] and u32[i32] (-1:
 * none) hold their reset values. */
static int others_ok(int i64, int i32, int n)
{
    for (int i = 0; i < 8; i++) {
        if ((i < i64 || i >= i64 + n) && area->u64[i] != 0x1111111111111111ull * (uint64_t)(i + 1)) {
            return bad("u64[%d] changed to %#" PRIx64, i, area->u64[i]);
        }
        if ((i < i32 || i >= i32 + n) && area->u32[i] != 0x01010101u * (uint32_t)(i + 1)) {
            return bad("u32[%d] changed to %#" PRIx32, i, area->u32[i]);
        }
    }
    return 1;
}

static int valid_is(int r, size_t count, int want_valid, const char *call)
{
    if (want_valid) {
        return rc_is(r, 0, call) && (count > 0 || bad("%s gave count 0", call));
    }
    return rc_is(r, -FI_EOPNOTSUPP, call);
}

static void atomic_valid_checks(void)
{
    size_t count = 0;
    int r;
    r = fi_atomicvalid(A->ep, FI_UINT64, FI_SUM, &count);
    check(valid_is(r, count, 1, "fi_atomicvalid"), "fi_atomicvalid(FI_UINT64, FI_SUM): valid, count %zu", count);
    count = 0;
    r = fi_fetch_atomicvalid(A->ep, FI_UINT64, FI_SUM, &count);
    check(valid_is(r, count, 1, "fi_fetch_atomicvalid"), "fi_fetch_atomicvalid(FI_UINT64, FI_SUM): valid, count %zu",
          count);
    count = 0;
    r = fi_fetch_atomicvalid(A->ep, FI_UINT64, FI_ATOMIC_READ, &count);
    check(valid_is(r, count, 1, "fi_fetch_atomicvalid"), "fi_fetch_atomicvalid(FI_UINT64, FI_ATOMIC_READ): valid");
    count = 0;
    r = fi_compare_atomicvalid(A->ep, FI_UINT64, FI_CSWAP, &count);
    check(valid_is(r, count, 1, "fi_compare_atomicvalid"),
          "fi_compare_atomicvalid(FI_UINT64, FI_CSWAP): valid, count %zu", count);
    r = fi_compare_atomicvalid(A->ep, FI_UINT64, FI_SUM, &count);
    check(valid_is(r, count, 0, "fi_compare_atomicvalid"),
          "fi_compare_atomicvalid(FI_UINT64, FI_SUM): -FI_EOPNOTSUPP (not a compare operation)");
    count = 0;
    r = fi_compare_atomicvalid(A->ep, FI_UINT32, FI_CSWAP, &count);
    check(valid_is(r, count, 1, "fi_compare_atomicvalid"), "fi_compare_atomicvalid(FI_UINT32, FI_CSWAP): valid");
    r = fi_atomicvalid(A->ep, FI_DOUBLE, FI_BOR, &count);
    check(valid_is(r, count, 0, "fi_atomicvalid"), "fi_atomicvalid(FI_DOUBLE, FI_BOR): -FI_EOPNOTSUPP");
    r = fi_fetch_atomicvalid(A->ep, FI_DOUBLE, FI_BOR, &count);
    check(valid_is(r, count, 0, "fi_fetch_atomicvalid"), "fi_fetch_atomicvalid(FI_DOUBLE, FI_BOR): -FI_EOPNOTSUPP");
    r = fi_compare_atomicvalid(A->ep, FI_DOUBLE, FI_BOR, &count);
    check(valid_is(r, count, 0, "fi_compare_atomicvalid"),
          "fi_compare_atomicvalid(FI_DOUBLE, FI_BOR): -FI_EOPNOTSUPP");
    static const enum fi_op ops[] = { FI_SUM, FI_MIN, FI_ATOMIC_WRITE, FI_ATOMIC_READ, FI_CSWAP };
    int good = 1;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        good &= valid_is(fi_atomicvalid(A->ep, FI_LONG_DOUBLE, ops[i], &count), 0, 0, "fi_atomicvalid");
        good &= valid_is(fi_fetch_atomicvalid(A->ep, FI_LONG_DOUBLE, ops[i], &count), 0, 0, "fi_fetch_atomicvalid");
        good &= valid_is(fi_compare_atomicvalid(A->ep, FI_LONG_DOUBLE, ops[i], &count), 0, 0,
                         "fi_compare_atomicvalid");
    }
    check(good, "FI_LONG_DOUBLE with any operation: -FI_EOPNOTSUPP from all three");

    struct fi_atomic_attr at = { 0, 0 };
    r = fi_query_atomic(A->domain, FI_UINT64, FI_SUM, &at, 0);
    check(rc_is(r, 0, "fi_query_atomic") && ((at.size == 8 && at.count > 0) || bad("size %zu count %zu", at.size,
                                                                                    at.count)),
          "fi_query_atomic(FI_UINT64, FI_SUM): size 8, count %zu", at.count);
    memset(&at, 0, sizeof at);
    r = fi_query_atomic(A->domain, FI_UINT32, FI_CSWAP, &at, FI_COMPARE_ATOMIC);
    check(rc_is(r, 0, "fi_query_atomic") && ((at.size == 4 && at.count > 0) || bad("size %zu count %zu", at.size,
                                                                                    at.count)),
          "fi_query_atomic(FI_UINT32, FI_CSWAP, FI_COMPARE_ATOMIC): size 4, count %zu", at.count);
    memset(&at, 0, sizeof at);
    r = fi_query_atomic(A->domain, FI_UINT64, FI_ATOMIC_READ, &at, FI_FETCH_ATOMIC);
    check(rc_is(r, 0, "fi_query_atomic") && (at.size == 8 || bad("size %zu", at.size)),
          "fi_query_atomic(FI_UINT64, FI_ATOMIC_READ, FI_FETCH_ATOMIC): size 8");
    r = fi_query_atomic(A->domain, FI_LONG_DOUBLE, FI_SUM, &at, 0);
    check(rc_is(r, -FI_EOPNOTSUPP, "fi_query_atomic"), "fi_query_atomic(FI_LONG_DOUBLE, FI_SUM): -FI_EOPNOTSUPP");
    r = fi_query_atomic(A->domain, FI_UINT64, FI_SUM, &at, FI_TAGGED);
    check(is_fi_error(r, "fi_query_atomic(..., FI_TAGGED)"),
          "fi_query_atomic with FI_TAGGED (atomics on tagged buffers, not offered): an error");
    r = fi_query_atomic(A->domain, FI_UINT64, FI_CSWAP, &at, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC);
    check(is_fi_error(r, "fi_query_atomic(..., FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)"),
          "fi_query_atomic with FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC (\"may not both be set\"): an error");
}

static int at_sum64(void)
{
    struct fi_context2 c;
    reset_area();
    area->u64[0] = 0xffffffff00000001ull;
    uint64_t v = 0x00000001ffffffffull;
    ssize_t r;
    POST(r, fi_atomic(A->ep, &v, 1, NULL, A->peer, a_addr(&area->u64[0]), akey, FI_UINT64, FI_SUM, &c));
    if (!rc_is(r, 0, "fi_atomic") || !atomic_done(&c, FI_WRITE)) {
        return 0;
    }
    return (area->u64[0] == 0x0000000100000000ull || bad("result %#" PRIx64 ", expected 0x100000000", area->u64[0])) &&
           others_ok(0, -8, 1);
}

static int at_sum64_count4(void)
{
    struct fi_context2 c;
    reset_area();
    uint64_t v[4] = { 1, 1ull << 40, 0xffffffffffffffffull, 0x8000000000000000ull };
    ssize_t r;
    POST(r, fi_atomic(A->ep, v, 4, NULL, A->peer, a_addr(&area->u64[2]), akey, FI_UINT64, FI_SUM, &c));
    if (!rc_is(r, 0, "fi_atomic") || !atomic_done(&c, FI_WRITE)) {
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        uint64_t want = 0x1111111111111111ull * (uint64_t)(i + 3) + v[i];
        if (area->u64[2 + i] != want) {
            return bad("u64[%d] %#" PRIx64 ", expected %#" PRIx64, 2 + i, area->u64[2 + i], want);
        }
    }
    return others_ok(2, -8, 4);
}

static int at_fetch_sum64(void)
{
    struct fi_context2 c;
    reset_area();
    area->u64[6] = 1000;
    uint64_t v = 234, res[2] = { 0xdeaddeaddeaddeadull, 0xbeefbeefbeefbeefull };
    ssize_t r;
    POST(r, fi_fetch_atomic(A->ep, &v, 1, NULL, res, NULL, A->peer, a_addr(&area->u64[6]), akey, FI_UINT64, FI_SUM,
                            &c));
    if (!rc_is(r, 0, "fi_fetch_atomic") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    return (res[0] == 1000 || bad("fetched %#" PRIx64 ", expected 1000", res[0])) &&
           (res[1] == 0xbeefbeefbeefbeefull || bad("the word after the result was written")) &&
           (area->u64[6] == 1234 || bad("target %" PRIu64 ", expected 1234", area->u64[6])) && others_ok(6, -8, 1);
}

static int at_read64(void)
{
    struct fi_context2 c;
    reset_area();
    uint64_t res = 0;
    ssize_t r;
    POST(r, fi_fetch_atomic(A->ep, NULL, 1, NULL, &res, NULL, A->peer, a_addr(&area->u64[5]), akey, FI_UINT64,
                            FI_ATOMIC_READ, &c));
    if (!rc_is(r, 0, "fi_fetch_atomic(NULL buf, FI_ATOMIC_READ)") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    return (res == 0x6666666666666666ull || bad("read %#" PRIx64 ", expected 0x6666666666666666", res)) &&
           others_ok(-8, -8, 1);
}

static int at_cswap64(void)
{
    struct fi_context2 c;
    reset_area();
    area->u64[7] = 0x1111;
    uint64_t v = 0x2222222222222222ull, cmp = 0x1111, res = 0;
    ssize_t r;
    POST(r, fi_compare_atomic(A->ep, &v, 1, NULL, &cmp, NULL, &res, NULL, A->peer, a_addr(&area->u64[7]), akey,
                              FI_UINT64, FI_CSWAP, &c));
    if (!rc_is(r, 0, "fi_compare_atomic") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    if (res != 0x1111 || area->u64[7] != v) {
        return bad("equal compare: result %#" PRIx64 " target %#" PRIx64 ", expected 0x1111 and %#" PRIx64, res,
                   area->u64[7], v);
    }
    uint64_t v2 = 0x3333, cmp2 = 0x9999;
    POST(r, fi_compare_atomic(A->ep, &v2, 1, NULL, &cmp2, NULL, &res, NULL, A->peer, a_addr(&area->u64[7]), akey,
                              FI_UINT64, FI_CSWAP, &c));
    if (!rc_is(r, 0, "fi_compare_atomic") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    if (res != v || area->u64[7] != v) {
        return bad("unequal compare: result %#" PRIx64 " target %#" PRIx64 ", expected both %#" PRIx64, res,
                   area->u64[7], v);
    }
    return others_ok(7, -8, 1);
}

static int at_u32(void)
{
    struct fi_context2 c;
    reset_area();
    area->u32[0] = 0xffffffffu;
    uint32_t v = 2;
    ssize_t r;
    POST(r, fi_atomic(A->ep, &v, 1, NULL, A->peer, a_addr(&area->u32[0]), akey, FI_UINT32, FI_SUM, &c));
    if (!rc_is(r, 0, "fi_atomic(FI_UINT32)") || !atomic_done(&c, FI_WRITE)) {
        return 0;
    }
    if (area->u32[0] != 1) {
        return bad("sum: u32[0] %#" PRIx32 ", expected 1", area->u32[0]);
    }
    area->u32[2] = 7;
    uint32_t add = 5, res[2] = { 0xdeadbeefu, 0xfeedfaceu };
    POST(r, fi_fetch_atomic(A->ep, &add, 1, NULL, res, NULL, A->peer, a_addr(&area->u32[2]), akey, FI_UINT32,
                            FI_SUM, &c));
    if (!rc_is(r, 0, "fi_fetch_atomic(FI_UINT32)") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    if (res[0] != 7 || res[1] != 0xfeedfaceu || area->u32[2] != 12) {
        return bad("fetch sum: result %#" PRIx32 " (next word %#" PRIx32 "), target %" PRIu32
                   ", expected 7, 0xfeedface, 12",
                   res[0], res[1], area->u32[2]);
    }
    area->u32[4] = 0xabcd0123u;
    uint32_t nv = 0x55667788u, cmp = 0xabcd0123u, cres[2] = { 0, 0x12121212u };
    POST(r, fi_compare_atomic(A->ep, &nv, 1, NULL, &cmp, NULL, cres, NULL, A->peer, a_addr(&area->u32[4]), akey,
                              FI_UINT32, FI_CSWAP, &c));
    if (!rc_is(r, 0, "fi_compare_atomic(FI_UINT32)") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    if (cres[0] != 0xabcd0123u || cres[1] != 0x12121212u || area->u32[4] != nv) {
        return bad("cswap equal: result %#" PRIx32 " target %#" PRIx32, cres[0], area->u32[4]);
    }
    uint32_t nv2 = 1, cmp2 = 2;
    POST(r, fi_compare_atomic(A->ep, &nv2, 1, NULL, &cmp2, NULL, cres, NULL, A->peer, a_addr(&area->u32[4]), akey,
                              FI_UINT32, FI_CSWAP, &c));
    if (!rc_is(r, 0, "fi_compare_atomic(FI_UINT32)") || !atomic_done(&c, FI_READ)) {
        return 0;
    }
    if (cres[0] != nv || area->u32[4] != nv) {
        return bad("cswap unequal: result %#" PRIx32 " target %#" PRIx32 ", expected both %#" PRIx32, cres[0],
                   area->u32[4], nv);
    }
    for (int i = 0; i < 8; i++) {
        if (i != 0 && i != 2 && i != 4 && area->u32[i] != 0x01010101u * (uint32_t)(i + 1)) {
            return bad("u32[%d] changed to %#" PRIx32, i, area->u32[i]);
        }
    }
    return others_ok(-8, 0, 8);
}

static int at_inject(void)
{
    reset_area();
    uint64_t v = 5;
    ssize_t r;
    POST(r, fi_inject_atomic(A->ep, &v, 1, A->peer, a_addr(&area->u64[3]), akey, FI_UINT64, FI_SUM));
    if (!rc_is(r, 0, "fi_inject_atomic")) {
        return 0;
    }
    v = 0xcccccccccccccccc;
    uint64_t want = 0x4444444444444444ull + 5;
    double end = now_ms() + WAIT_MS;
    while (area->u64[3] != want && now_ms() < end) {
        progress();
    }
    if (area->u64[3] != want) {
        return bad("target %#" PRIx64 ", expected %#" PRIx64, area->u64[3], want);
    }
    return others_ok(3, -8, 1) && (quiet(&A->tx, QUIET_MS) || bad("(an inject must write no completion)"));
}

static int at_bad_key(void)
{
    struct fi_context2 c;
    reset_area();
    uint64_t v = 1;
    ssize_t r;
    POST(r, fi_atomic(A->ep, &v, 1, NULL, A->peer, a_addr(&area->u64[0]), akey ^ 0x5a5a5a5a00000000ull, FI_UINT64,
                      FI_SUM, &c));
    if (r < 0) {
        return is_fi_error(r, "fi_atomic");
    }
    struct cqe e;
    return wait_cqe(&A->tx, &e, WAIT_MS) && err_ok(&e, &c, FI_EACCES) && others_ok(-8, -8, 1);
}

static void g_atomic(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    atomic_valid_checks();
    area = (volatile struct atomic_area *)region;
    struct fid_mr *mr = NULL;
    int r = fi_mr_reg(B->domain, region, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
    if (check(rc_is(r, 0, "fi_mr_reg"), "B registers the target words")) {
        akey = fi_mr_key(mr);
        abase = base_of(B, region);
        check(at_sum64(), "fi_atomic FI_UINT64 FI_SUM (with carry across 32 bits): exact result, neighbours "
                          "untouched");
        check(at_sum64_count4(), "fi_atomic FI_UINT64 FI_SUM of 4 elements (wrapping)");
        check(at_fetch_sum64(), "fi_fetch_atomic FI_UINT64 FI_SUM: old value fetched, target updated");
        check(at_read64(), "fi_fetch_atomic FI_UINT64 FI_ATOMIC_READ (buf NULL): value fetched, target unchanged");
        check(at_cswap64(), "fi_compare_atomic FI_UINT64 FI_CSWAP, equal and unequal");
        check(at_u32(), "FI_UINT32: fi_atomic FI_SUM (wrapping), fi_fetch_atomic FI_SUM, fi_compare_atomic "
                        "FI_CSWAP equal and unequal; 4-byte results, neighbours untouched");
        check(at_inject(), "fi_inject_atomic FI_UINT64 FI_SUM: operand scribbled, target right, no completion");
        check(at_bad_key(), "fi_atomic with a bad key: FI_EACCES, target unchanged");
        uint64_t v = 1;
        struct fi_context2 c;
        check(is_fi_error(fi_atomic(A->ep, &v, 1, NULL, A->peer, abase, akey, FI_DOUBLE, FI_BOR, &c),
                          "fi_atomic(FI_DOUBLE, FI_BOR)"),
              "fi_atomic with an invalid datatype/op: an error");
        check(all_taken(), "no unexpected completion left");
        check(rc_is(fi_close(&mr->fid), 0, "fi_close(mr)"), "close the registration");
    }
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 9: counters and waits                                        */
/* ------------------------------------------------------------------ */

struct later {
    int ms;
    int what; /* 0: A sends 64 B to B; 1: fi_cq_signal(B's rx CQ) */
    ssize_t ret;
    struct fi_context2 ctx;
};

static void *later_fn(void *p)
{
    struct later *l = p;
    usleep((useconds_t)l->ms * 1000);
    if (l->what == 0) {
        double end = now_ms() + WAIT_MS;
        while ((l->ret = fi_send(A->ep, sbuf, 64, NULL, A->peer, &l->ctx)) == -FI_EAGAIN && now_ms() < end) {
            sched_yield();
        }
    } else {
        l->ret = fi_cq_signal(B->rx.cq);
    }
    return NULL;
}

static void g_wait(void)
{
    struct opts o = DEFAULT_OPTS;
    o.cntrs = 1;
    o.rx_wait = FI_WAIT_FD;
    if (!check(open_pair(&o), "open two endpoints with counters and an rx CQ with FI_WAIT_FD")) {
        close_pair();
        return;
    }
    enum { N = 10 };
    struct fi_context2 rc[N], sc[N];
    ssize_t r;
    int good = 1;
    /* A poll set of B's rx CQ and recv counter: nothing to report before
     * the messages, both after. */
    struct fid_poll *ps = NULL;
    struct fi_poll_attr pa = { 0 };
    void *ready[4];
    int po = fi_poll_open(B->domain, &pa, &ps);
    check(rc_is(po, 0, "fi_poll_open") && rc_is(fi_poll_add(ps, &B->rx.cq->fid, 0), 0, "fi_poll_add(rx CQ)") &&
              rc_is(fi_poll_add(ps, &B->rxcntr->fid, 0), 0, "fi_poll_add(recv counter)"),
          "a poll set of B's rx CQ and recv counter");
    check(ps && fi_poll(ps, ready, 4) == 0, "fi_poll reports nothing before any message");
    for (int i = 0; i < N && good; i++) {
        POST(r, fi_recv(B->ep, rbuf + (size_t)i * 128, 64, NULL, FI_ADDR_UNSPEC, &rc[i]));
        good = rc_is(r, 0, "fi_recv");
    }
    fill(sbuf, 64, 9, 0);
    for (int i = 0; i < N && good; i++) {
        POST(r, fi_send(A->ep, sbuf, 64, NULL, A->peer, &sc[i]));
        good = rc_is(r, 0, "fi_send");
    }
    check(good, "%d receives and sends posted", N);
    double t0 = now_ms();
    r = fi_cntr_wait(B->rxcntr, N, WAIT_MS);
    check(rc_is(r, 0, "fi_cntr_wait(B recv counter, 10)") &&
              (fi_cntr_read(B->rxcntr) >= N || bad("counter %" PRIu64, fi_cntr_read(B->rxcntr))),
          "fi_cntr_wait until B's recv counter reaches %d (%.0f ms)", N, now_ms() - t0);
    r = fi_cntr_wait(A->txcntr, N, WAIT_MS);
    check(rc_is(r, 0, "fi_cntr_wait(A send counter, 10)"), "fi_cntr_wait until A's send counter reaches %d", N);
    if (ps) {
        int n = fi_poll(ps, ready, 4);
        int cq_seen = 0, cntr_seen = 0;
        for (int i = 0; i < n; i++) {
            cq_seen |= ready[i] == B->rx.cq->fid.context;
            cntr_seen |= ready[i] == B->rxcntr->fid.context;
        }
        check(n == 2 && cq_seen && cntr_seen, "fi_poll reports the rx CQ (entries wait) and the counter (%d)", n);
        check(fi_poll(ps, ready, 4) == 1 && ready[0] == B->rx.cq->fid.context,
              "then only the CQ, until its entries are read");
        check(rc_is(fi_poll_del(ps, &B->rx.cq->fid, 0), 0, "fi_poll_del") &&
                  rc_is(fi_poll_del(ps, &B->rxcntr->fid, 0), 0, "fi_poll_del") && rc_is(fi_close(&ps->fid), 0, "fi_close"),
              "the poll set closes");
    }
    t0 = now_ms();
    r = fi_cntr_wait(B->rxcntr, N + 1, 300);
    double dt = now_ms() - t0;
    check(rc_is(r, -FI_ETIMEDOUT, "fi_cntr_wait(11, 300 ms)") &&
              ((dt >= 280 && dt < 2000) || bad("returned after %.0f ms", dt)),
          "fi_cntr_wait to a threshold never reached: -FI_ETIMEDOUT after %.0f ms (300 asked)", dt);
    check(rc_is(fi_cntr_set(B->rxcntr, 3), 0, "fi_cntr_set") && rc_is(fi_cntr_add(B->rxcntr, 4), 0, "fi_cntr_add") &&
              (fi_cntr_read(B->rxcntr) == 7 || bad("counter %" PRIu64, fi_cntr_read(B->rxcntr))) &&
              (fi_cntr_readerr(B->rxcntr) == 0 || bad("error counter %" PRIu64, fi_cntr_readerr(B->rxcntr))),
          "fi_cntr_set 3, fi_cntr_add 4: fi_cntr_read 7, fi_cntr_readerr 0");
    good = 1;
    for (int i = 0; i < N && good; i++) {
        struct cqe e;
        good = wait_cqe(&B->rx, &e, WAIT_MS) && rx_ok(&e, &rc[i], FI_MSG, 64, 0, 0, 0) &&
               wait_cqe(&A->tx, &e, WAIT_MS) && tx_ok(&e, &sc[i], FI_SEND | FI_MSG);
    }
    check(good, "the %d completions of each side", N);

    int fd = -1;
    r = fi_control(&B->rx.cq->fid, FI_GETWAIT, &fd);
    check(rc_is(r, 0, "fi_control(FI_GETWAIT)") && (fcntl(fd, F_GETFD) >= 0 || bad("fd %d is not open", fd)),
          "fi_control(FI_GETWAIT) on the FI_WAIT_FD CQ gives fd %d", fd);

    struct fi_cq_tagged_entry te[2];
    t0 = now_ms();
    r = fi_cq_sread(B->rx.cq, te, 1, NULL, 300);
    dt = now_ms() - t0;
    check(rc_is(r, -FI_EAGAIN, "fi_cq_sread(300 ms)") && ((dt >= 280 && dt < 1500) || bad("after %.0f ms", dt)),
          "fi_cq_sread with nothing coming: -FI_EAGAIN after %.0f ms (300 asked)", dt);

    struct fi_context2 rctx;
    POST(r, fi_recv(B->ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, &rctx));
    struct later l = { .ms = 200, .what = 0 };
    pthread_t th;
    if (check(rc_is(r, 0, "fi_recv") && !pthread_create(&th, NULL, later_fn, &l), "B posts a receive")) {
        t0 = now_ms();
        memset(te, 0, sizeof te);
        r = fi_cq_sread(B->rx.cq, te, 1, NULL, WAIT_MS);
        dt = now_ms() - t0;
        pthread_join(th, NULL);
        check(rc_is(l.ret, 0, "fi_send (other thread)") && rc_is(r, 1, "fi_cq_sread") &&
                  (te[0].op_context == &rctx || bad("op_context %p", te[0].op_context)) &&
                  (te[0].len == 64 || bad("len %zu", te[0].len)) && data_ok(rbuf, 64, 9, 0, "received") &&
                  (dt >= 150 || bad("returned after %.0f ms, before the message was sent", dt)),
              "fi_cq_sread returns the completion of a message another thread sends 200 ms later (%.0f ms)", dt);
        struct cqe e;
        check(wait_cqe(&A->tx, &e, WAIT_MS) && tx_ok(&e, &l.ctx, FI_SEND), "the send's completion");
    }

    struct later sig = { .ms = 200, .what = 1 };
    if (!pthread_create(&th, NULL, later_fn, &sig)) {
        t0 = now_ms();
        r = fi_cq_sread(B->rx.cq, te, 1, NULL, 5000);
        dt = now_ms() - t0;
        pthread_join(th, NULL);
        check(rc_is(sig.ret, 0, "fi_cq_signal") && rc_is(r, -FI_EAGAIN, "fi_cq_sread") &&
                  (dt < 2500 || bad("returned after %.0f ms", dt)),
              "fi_cq_signal from another thread ends fi_cq_sread: -FI_EAGAIN after %.0f ms", dt);
    }

    /* fi_trywait, then poll(2) on the fd. */
    progress();
    uint64_t cnt0 = fi_cntr_read(B->rxcntr);
    double end;
    struct fid *fids[1] = { &B->rx.cq->fid };
    r = fi_trywait(B->fabric, fids, 1);
    check(rc_is(r, 0, "fi_trywait"), "fi_trywait with nothing pending: 0 (safe to block)");
    POST(r, fi_recv(B->ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, &rctx));
    struct fi_context2 sctx;
    ssize_t s;
    POST(s, fi_send(A->ep, sbuf, 64, NULL, A->peer, &sctx));
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    t0 = now_ms();
    int pr = poll(&pfd, 1, 3000);
    dt = now_ms() - t0;
    check(rc_is(r, 0, "fi_recv") && rc_is(s, 0, "fi_send") && (pr == 1 || bad("poll returned %d", pr)),
          "after fi_trywait, poll(2) on the fd wakes for a message (%.0f ms)", dt);
    r = fi_trywait(B->fabric, fids, 1);
    pr = poll(&pfd, 1, 0);
    check(r == -FI_EAGAIN || (r == 0 && pr == 1) || bad("fi_trywait returned %zd, poll %d", r, pr),
          "fi_trywait once the message arrived: -FI_EAGAIN, or 0 with the fd readable (%s)",
          r ? "-FI_EAGAIN" : "0, fd readable");
    /* Reading the counter makes progress: the completion is then queued. */
    end = now_ms() + WAIT_MS;
    while (fi_cntr_read(B->rxcntr) < cnt0 + 1 && now_ms() < end) {
        sched_yield();
    }
    r = fi_trywait(B->fabric, fids, 1);
    check(rc_is(r, -FI_EAGAIN, "fi_trywait"),
          "fi_trywait with a completion queued in the CQ (counter read %" PRIu64 "): -FI_EAGAIN",
          fi_cntr_read(B->rxcntr) - cnt0);
    struct cqe e;
    check(wait_cqe(&B->rx, &e, WAIT_MS) && rx_ok(&e, &rctx, FI_MSG, 64, 0, 0, 0) && wait_cqe(&A->tx, &e, WAIT_MS) &&
              tx_ok(&e, &sctx, FI_SEND),
          "the message's completions");
    end = now_ms() + WAIT_MS;
    while ((r = fi_trywait(B->fabric, fids, 1)) == -FI_EAGAIN && now_ms() < end) {
        progress();
    }
    check(rc_is(r, 0, "fi_trywait") && all_taken(), "fi_trywait gives 0 again once everything is read");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 10: bad arguments                                            */
/* ------------------------------------------------------------------ */

static sigjmp_buf crash_jmp;
static volatile sig_atomic_t crash_armed;

static void on_crash(int sig)
{
    if (crash_armed) {
        crash_armed = 0;
        siglongjmp(crash_jmp, sig);
    }
    static const char msg[] = "not ok - crashed (signal outside a guarded call)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_alarm(int sig)
{
    (void)sig;
    char msg[256];
    int n = snprintf(msg, sizeof msg, "not ok - %s: run time limit (alarm) reached; %d checks so far, %d failed\n",
                     group, n_checks, n_failed + 1);
    ssize_t w = write(2, msg, (size_t)n);
    (void)w;
    _exit(1);
}

typedef ssize_t (*bad_fn)(void);

/* Runs `fn`, catching a crash; *sig is the signal or 0. */
static ssize_t guarded(bad_fn fn, int *sig)
{
    *sig = 0;
    int got = sigsetjmp(crash_jmp, 1);
    if (got) {
        *sig = got;
        return 0;
    }
    crash_armed = 1;
    ssize_t r = fn();
    crash_armed = 0;
    return r;
}

static ssize_t progress_a_while(void)
{
    double end = now_ms() + 20;
    while (now_ms() < end) {
        progress();
    }
    return 0;
}

static struct fi_context2 bctx;
static uint64_t bkey;
static const fi_addr_t NEVER = (fi_addr_t)0x7777777777ull;

static ssize_t b_send(void) { return fi_send(A->ep, NULL, 10, NULL, A->peer, &bctx); }
static ssize_t b_tsend(void) { return fi_tsend(A->ep, NULL, 10, NULL, A->peer, 1, &bctx); }
static ssize_t b_senddata(void) { return fi_senddata(A->ep, NULL, 10, NULL, 1, A->peer, &bctx); }
static ssize_t b_recv(void) { return fi_recv(A->ep, NULL, 10, NULL, FI_ADDR_UNSPEC, &bctx); }
static ssize_t b_trecv(void) { return fi_trecv(A->ep, NULL, 10, NULL, FI_ADDR_UNSPEC, 1, 0, &bctx); }
static ssize_t b_sendv(void)
{
    struct iovec v = { NULL, 10 };
    return fi_sendv(A->ep, &v, NULL, 1, A->peer, &bctx);
}
static ssize_t b_recvv(void)
{
    struct iovec v = { NULL, 10 };
    return fi_recvv(A->ep, &v, NULL, 1, FI_ADDR_UNSPEC, &bctx);
}
static ssize_t b_inject(void) { return fi_inject(A->ep, NULL, 10, A->peer); }
static ssize_t b_tinject(void) { return fi_tinject(A->ep, NULL, 10, A->peer, 1); }
static ssize_t b_injectdata(void) { return fi_injectdata(A->ep, NULL, 10, 1, A->peer); }
static ssize_t b_tinjectdata(void) { return fi_tinjectdata(A->ep, NULL, 10, 1, A->peer, 1); }
static ssize_t b_write(void) { return fi_write(A->ep, NULL, 10, NULL, A->peer, rbase, bkey, &bctx); }
static ssize_t b_read(void) { return fi_read(A->ep, NULL, 10, NULL, A->peer, rbase, bkey, &bctx); }
static ssize_t b_inject_write(void) { return fi_inject_write(A->ep, NULL, 10, A->peer, rbase, bkey); }
static ssize_t b_writev(void)
{
    struct iovec v[2] = { { sbuf, 4 }, { NULL, 10 } };
    return fi_writev(A->ep, v, NULL, 2, A->peer, rbase, bkey, &bctx);
}
static ssize_t b_readv(void)
{
    struct iovec v[2] = { { rbuf, 4 }, { NULL, 10 } };
    return fi_readv(A->ep, v, NULL, 2, A->peer, rbase, bkey, &bctx);
}
static ssize_t b_compare_null(void)
{
    uint64_t v = 1, res = 0;
    return fi_compare_atomic(A->ep, &v, 1, NULL, NULL, NULL, &res, NULL, A->peer, rbase, bkey, FI_UINT64, FI_CSWAP,
                             &bctx);
}
static ssize_t b_atomic(void)
{
    return fi_atomic(A->ep, NULL, 1, NULL, A->peer, rbase, bkey, FI_UINT64, FI_SUM, &bctx);
}
static ssize_t b_fetch(void)
{
    uint64_t v = 1;
    return fi_fetch_atomic(A->ep, &v, 1, NULL, NULL, NULL, A->peer, rbase, bkey, FI_UINT64, FI_SUM, &bctx);
}
static ssize_t b_inject_atomic(void)
{
    return fi_inject_atomic(A->ep, NULL, 1, A->peer, rbase, bkey, FI_UINT64, FI_SUM);
}
static ssize_t b_send_never(void) { return fi_send(A->ep, sbuf, 10, NULL, NEVER, &bctx); }
static ssize_t b_tsend_notavail(void) { return fi_tsend(A->ep, sbuf, 10, NULL, FI_ADDR_NOTAVAIL, 1, &bctx); }
static ssize_t b_inject_never(void) { return fi_inject(A->ep, sbuf, 10, NEVER); }
static ssize_t b_write_never(void) { return fi_write(A->ep, sbuf, 10, NULL, NEVER, rbase, bkey, &bctx); }
static ssize_t b_recv_never(void) { return fi_recv(A->ep, rbuf, 10, NULL, NEVER, &bctx); }
static ssize_t b_cq_read_null(void) { return fi_cq_read(A->tx.cq, NULL, 1); }
static ssize_t b_cq_readerr_null(void) { return fi_cq_readerr(A->tx.cq, NULL, 0); }
static ssize_t b_discard_alone(void)
{
    struct fi_msg_tagged m = { .addr = FI_ADDR_UNSPEC, .context = &bctx };
    return fi_trecvmsg(A->ep, &m, FI_DISCARD);
}
static ssize_t b_claim_unknown(void)
{
    struct fi_msg_tagged m = { .addr = FI_ADDR_UNSPEC, .context = &bctx };
    return fi_trecvmsg(A->ep, &m, FI_CLAIM);
}
static ssize_t b_mr_null(void)
{
    struct fid_mr *mr = NULL;
    ssize_t r = fi_mr_reg(A->domain, NULL, 4096, FI_REMOTE_READ, 0, 0, 0, &mr, NULL);
    if (!r) {
        fi_close(&mr->fid);
    }
    return r;
}
static ssize_t b_mr_access(void)
{
    struct fid_mr *mr = NULL;
    ssize_t r = fi_mr_reg(A->domain, sbuf, 4096, FI_REMOTE_READ | (1ull << 62), 0, 0, 0, &mr, NULL);
    if (!r) {
        fi_close(&mr->fid);
    }
    return r;
}
static ssize_t b_cq_format(void)
{
    struct fi_cq_attr ca = { .format = (enum fi_cq_format)99 };
    struct fid_cq *cq = NULL;
    ssize_t r = fi_cq_open(A->domain, &ca, &cq, NULL);
    if (!r) {
        fi_close(&cq->fid);
    }
    return r;
}
static ssize_t b_cq_wait(void)
{
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = (enum fi_wait_obj)77 };
    struct fid_cq *cq = NULL;
    ssize_t r = fi_cq_open(A->domain, &ca, &cq, NULL);
    if (!r) {
        fi_close(&cq->fid);
    }
    return r;
}
static ssize_t b_av_type(void)
{
    struct fi_av_attr aa = { .type = (enum fi_av_type)55 };
    struct fid_av *av = NULL;
    ssize_t r = fi_av_open(A->domain, &aa, &av, NULL);
    if (!r) {
        fi_close(&av->fid);
    }
    return r;
}
static ssize_t b_msg_ep(void)
{
    struct fi_info *i = fi_dupinfo(A->info);
    if (!i) {
        return 0; /* not what is checked */
    }
    i->ep_attr->type = FI_EP_MSG;
    struct fid_ep *ep = NULL;
    ssize_t r = fi_endpoint(A->domain, i, &ep, NULL);
    if (!r) {
        fi_close(&ep->fid);
    }
    fi_freeinfo(i);
    return r;
}
static ssize_t b_bind_after_enable(void)
{
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
    struct fid_cq *cq = NULL;
    ssize_t r = fi_cq_open(A->domain, &ca, &cq, NULL);
    if (r) {
        return 0; /* not what is checked */
    }
    r = fi_ep_bind(A->ep, &cq->fid, FI_TRANSMIT);
    int c = fi_close(&cq->fid);
    return r ? r : c;
}
static ssize_t b_getname_nolen(void)
{
    uint8_t name[64];
    return fi_getname(&A->ep->fid, name, NULL);
}

static const struct {
    const char *what;
    bad_fn fn;
} bad_calls[] = {
    { "fi_send(NULL, 10)", b_send },
    { "fi_tsend(NULL, 10)", b_tsend },
    { "fi_senddata(NULL, 10)", b_senddata },
    { "fi_recv(NULL, 10)", b_recv },
    { "fi_trecv(NULL, 10)", b_trecv },
    { "fi_sendv({NULL, 10})", b_sendv },
    { "fi_recvv({NULL, 10})", b_recvv },
    { "fi_inject(NULL, 10)", b_inject },
    { "fi_tinject(NULL, 10)", b_tinject },
    { "fi_injectdata(NULL, 10)", b_injectdata },
    { "fi_tinjectdata(NULL, 10)", b_tinjectdata },
    { "fi_write(NULL, 10)", b_write },
    { "fi_read(NULL, 10)", b_read },
    { "fi_inject_write(NULL, 10)", b_inject_write },
    { "fi_writev({buf, 4}, {NULL, 10})", b_writev },
    { "fi_readv({buf, 4}, {NULL, 10})", b_readv },
    { "fi_atomic(NULL, 1 FI_UINT64)", b_atomic },
    { "fi_compare_atomic(compare NULL)", b_compare_null },
    { "fi_fetch_atomic(result NULL)", b_fetch },
    { "fi_inject_atomic(NULL, 1)", b_inject_atomic },
    { "fi_send to an fi_addr never inserted", b_send_never },
    { "fi_tsend to FI_ADDR_NOTAVAIL", b_tsend_notavail },
    { "fi_inject to an fi_addr never inserted", b_inject_never },
    { "fi_write to an fi_addr never inserted", b_write_never },
    { "fi_recv from an fi_addr never inserted (FI_DIRECTED_RECV)", b_recv_never },
    { "fi_cq_read(NULL buf, count 1)", b_cq_read_null },
    { "fi_cq_readerr(NULL)", b_cq_readerr_null },
    { "fi_trecvmsg(FI_DISCARD without FI_PEEK or FI_CLAIM)", b_discard_alone },
    { "fi_trecvmsg(FI_CLAIM) of a context that claimed nothing", b_claim_unknown },
    { "fi_mr_reg(NULL, 4096)", b_mr_null },
    { "fi_mr_reg with unknown access bits", b_mr_access },
    { "fi_cq_open with an unknown format", b_cq_format },
    { "fi_cq_open with an unknown wait object", b_cq_wait },
    { "fi_av_open with an unknown type", b_av_type },
    { "fi_endpoint of an FI_EP_MSG info", b_msg_ep },
    { "fi_ep_bind of a CQ to an enabled endpoint", b_bind_after_enable },
    { "fi_getname with a NULL length", b_getname_nolen },
};

/* A side whose endpoint is not enabled and has no AV. */
static void unenabled_checks(void)
{
    struct side s;
    struct opts o = DEFAULT_OPTS;
    o.no_av = 1;
    if (!check(open_side(&s, &o, "C"), "open an endpoint without binding an AV")) {
        close_side(&s);
        return;
    }
    check(rc_is(fi_enable(s.ep), -FI_ENOAV, "fi_enable"), "fi_enable without an AV: -FI_ENOAV");
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
    struct fid_cq *cq = NULL;
    if (check(rc_is(fi_cq_open(s.domain, &ca, &cq, NULL), 0, "fi_cq_open"), "open another CQ")) {
        check(is_fi_error(fi_ep_bind(s.ep, &cq->fid, 0), "fi_ep_bind(cq, 0)"),
              "binding a CQ with no direction flags: an error");
        check(is_fi_error(fi_ep_bind(s.ep, &cq->fid, FI_SELECTIVE_COMPLETION), "fi_ep_bind(cq, SELECTIVE)"),
              "binding a CQ with FI_SELECTIVE_COMPLETION only: an error");
        check(is_fi_error(fi_ep_bind(s.ep, &cq->fid, FI_TRANSMIT), "fi_ep_bind(cq, FI_TRANSMIT)"),
              "binding a second CQ for FI_TRANSMIT: an error");
        check(rc_is(fi_close(&cq->fid), 0, "fi_close(cq)"), "close that CQ");
    }
    /* An AV of another domain. */
    struct fi_av_attr aa = { .type = FI_AV_MAP };
    struct fid_av *av = NULL;
    if (check(rc_is(fi_av_open(A->domain, &aa, &av, NULL), 0, "fi_av_open"), "open an AV on another domain")) {
        check(is_fi_error(fi_ep_bind(s.ep, &av->fid, 0), "fi_ep_bind(AV of another domain)"),
              "binding an AV of another domain: an error");
        check(rc_is(fi_close(&av->fid), 0, "fi_close(av)"), "close that AV");
    }
    check(close_side(&s), "close it");
}

static void av_garbage(void)
{
    struct fi_av_attr aa = { .type = FI_AV_TABLE };
    struct fid_av *av = NULL;
    if (!check(rc_is(fi_av_open(A->domain, &aa, &av, NULL), 0, "fi_av_open"), "open a second AV")) {
        return;
    }
    size_t n = A->namelen;
    uint8_t addrs[3 * NAME_MAX_LEN];
    memset(addrs, 0xff, n);
    memcpy(addrs + n, B->name, n);
    for (size_t k = 0; k < n; k++) {
        addrs[2 * n + k] = (uint8_t)(k * 37 + 11);
    }
    fi_addr_t fa[3] = { 0, 0, 0 };
    int r = fi_av_insert(av, addrs, 1, fa, 0, NULL);
    check((r == 0 || bad("fi_av_insert returned %d (%s)", r, errs(r))) &&
              (fa[0] == FI_ADDR_NOTAVAIL || bad("fi_addr %#" PRIx64, (uint64_t)fa[0])),
          "fi_av_insert of %zu bytes 0xff: returns 0 (< 1), fi_addr FI_ADDR_NOTAVAIL", n);
    fa[0] = fa[1] = fa[2] = 0;
    r = fi_av_insert(av, addrs, 3, fa, 0, NULL);
    check((r == 1 || bad("fi_av_insert returned %d (%s)", r, errs(r))) &&
              ((fa[0] == FI_ADDR_NOTAVAIL && fa[1] != FI_ADDR_NOTAVAIL && fa[2] == FI_ADDR_NOTAVAIL) ||
               bad("fi_addrs %#" PRIx64 " %#" PRIx64 " %#" PRIx64, (uint64_t)fa[0], (uint64_t)fa[1],
                   (uint64_t)fa[2])),
          "fi_av_insert of garbage, a real name, garbage: returns 1, the garbage FI_ADDR_NOTAVAIL");
    int errv[3] = { 0, 0, 0 };
    r = fi_av_insert(av, addrs, 1, fa, FI_SYNC_ERR, errv);
    check((r == 0 || bad("returned %d", r)) && (errv[0] != 0 || bad("error 0 reported for the garbage")),
          "fi_av_insert(FI_SYNC_ERR) of garbage reports an error (%d) for it", errv[0]);
    check(rc_is(fi_av_insert(av, NULL, 0, NULL, 0, NULL), 0, "fi_av_insert(NULL, 0)"),
          "fi_av_insert of nothing: 0");
    check(rc_is(fi_close(&av->fid), 0, "fi_close(av)"), "close the second AV");
}

static void g_badargs(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    struct fid_mr *mr = NULL;
    int r = fi_mr_reg(B->domain, region, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
    check(rc_is(r, 0, "fi_mr_reg"), "B registers 4096 B");
    bkey = r ? 0 : fi_mr_key(mr);
    rbase = base_of(B, region);
    int crashed = 0;
    for (size_t i = 0; i < sizeof bad_calls / sizeof bad_calls[0]; i++) {
        int sig;
        ssize_t rr = guarded(bad_calls[i].fn, &sig);
        if (sig) {
            crashed = 1;
            bad("crashed with signal %d (%s)", sig, strsignal(sig));
        }
        int later = 0;
        if (!sig) {
            /* What such a call set going may crash at its completion. */
            guarded(progress_a_while, &later);
            if (later) {
                crashed = 1;
                bad("crashed with signal %d (%s) in progress after the call returned %zd", later, strsignal(later),
                    rr);
            }
        }
        check(!sig && !later && is_fi_error(rr, bad_calls[i].what), "%s: %s", bad_calls[i].what,
              sig || later ? "crash" : rr < 0 ? fi_strerror((int)-rr) : "no error");
    }
    if (crashed) {
        /* The state of these domains may be broken: leave them open, and
         * go on with a new pair. */
        printf("# after the crash above, this pair is left open and a new one opened\n");
        for (int i = 0; i < 2 && n_abandoned < 8; i++) {
            abandoned[n_abandoned++] = sides[i];
        }
        abandoned_mr = mr;
        memset(sides, 0, sizeof sides);
        mr = NULL;
        if (!check(open_pair(&DEFAULT_OPTS), "open two new endpoints")) {
            close_pair();
            return;
        }
    }
    unenabled_checks();
    av_garbage();
    /* Whatever the bad calls posted that still completes. */
    double end = now_ms() + 200;
    while (now_ms() < end) {
        progress();
    }
    struct cqe e;
    while (pop(&A->tx, &e) || pop(&A->rx, &e) || pop(&B->tx, &e) || pop(&B->rx, &e)) {
    }
    if (mr) {
        check(rc_is(fi_close(&mr->fid), 0, "fi_close(mr)"), "close the registration");
    }
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 11: closing                                                  */
/* ------------------------------------------------------------------ */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        return -1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n;
}

static int busy(struct fid *f, const char *what)
{
    int r = fi_close(f);
    return rc_is(r, -FI_EBUSY, what);
}

static void close_order(void)
{
    struct opts o = DEFAULT_OPTS;
    o.cntrs = 1;
    struct side s;
    if (!check(open_side(&s, &o, "C"), "open fabric, domain, AV, CQs, counters, endpoint")) {
        close_side(&s);
        return;
    }
    struct fid_mr *mr = NULL;
    int r = fi_mr_reg(s.domain, region, 4096, FI_REMOTE_READ, 0, 0, 0, &mr, NULL);
    check(rc_is(r, 0, "fi_mr_reg"), "and a memory registration");
    check(busy(&s.domain->fid, "fi_close(domain)"), "fi_close of the domain while its objects are open: -FI_EBUSY");
    check(busy(&s.fabric->fid, "fi_close(fabric)"), "fi_close of the fabric while its domain is open: -FI_EBUSY");
    check(busy(&s.av->fid, "fi_close(av)"), "fi_close of the AV while an endpoint is bound to it: -FI_EBUSY");
    check(busy(&s.rx.cq->fid, "fi_close(cq)"), "fi_close of a CQ while an endpoint is bound to it: -FI_EBUSY");
    check(busy(&s.txcntr->fid, "fi_close(cntr)"), "fi_close of a counter while an endpoint is bound to it: "
                                                  "-FI_EBUSY");
    int good = rc_is(fi_close(&s.ep->fid), 0, "fi_close(ep)");
    if (!r) {
        good &= rc_is(fi_close(&mr->fid), 0, "fi_close(mr)");
    }
    good &= rc_is(fi_close(&s.av->fid), 0, "fi_close(av)") && rc_is(fi_close(&s.rxcntr->fid), 0, "fi_close(cntr)") &&
            rc_is(fi_close(&s.rx.cq->fid), 0, "fi_close(rx cq)") &&
            rc_is(fi_close(&s.txcntr->fid), 0, "fi_close(cntr)") &&
            rc_is(fi_close(&s.tx.cq->fid), 0, "fi_close(tx cq)") &&
            rc_is(fi_close(&s.domain->fid), 0, "fi_close(domain)") &&
            rc_is(fi_close(&s.fabric->fid), 0, "fi_close(fabric)");
    check(good, "then endpoint, registration, AV, counter, CQ, counter, CQ, domain, fabric close");
    fi_freeinfo(s.info);
}

/* Closes with operations in flight: receives posted, a long send to a
 * receiver that never posts it, unread completions. */
static void close_busy(void)
{
    if (!check(open_pair(&DEFAULT_OPTS), "open two endpoints")) {
        close_pair();
        return;
    }
    struct fi_context2 r1, r2, s1, s2, s3;
    ssize_t r;
    int good = 1;
    fill(sbuf, MAX_MSG, 5, 0);
    POST(r, fi_trecv(A->ep, rbuf, 4096, NULL, FI_ADDR_UNSPEC, 0x8000000000000001ull, 0, &r1));
    good &= rc_is(r, 0, "fi_trecv");
    POST(r, fi_recv(A->ep, rbuf + 8192, 4096, NULL, FI_ADDR_UNSPEC, &r2));
    good &= rc_is(r, 0, "fi_recv");
    POST(r, fi_tsend(B->ep, sbuf, MAX_MSG, NULL, B->peer, 0x8000000000000002ull, &s1));
    good &= rc_is(r, 0, "fi_tsend");
    POST(r, fi_send(B->ep, sbuf, 100, NULL, B->peer, &s2));
    good &= rc_is(r, 0, "fi_send");
    POST(r, fi_injectdata(A->ep, sbuf, 100, 7, A->peer));
    good &= rc_is(r, 0, "fi_injectdata");
    POST(r, fi_tsend(A->ep, sbuf, 3u << 20, NULL, A->peer, 0x8000000000000003ull, &s3));
    good &= rc_is(r, 0, "fi_tsend");
    double end = now_ms() + 100;
    while (now_ms() < end) {
        progress();
    }
    check(good, "post receives, a 4 MiB send nobody receives and other sends");
    int a = close_side(A);
    check(a, "close A with its operations in flight (endpoint first)");
    check(close_side(B), "close B, whose peer is gone, with its operations in flight");
}

static void g_close(void)
{
    close_order();
    close_busy();
    int fds0 = count_fds();
    double t0 = now_ms();
    int good = 1, round;
    for (round = 0; round < ROUNDS && good; round++) {
        good = open_pair(&DEFAULT_OPTS) && xfer(A, B, round & 1 ? M_TSEND : M_SEND, 64, 1, 900 + (uint32_t)round);
        good &= close_pair();
    }
    if (!good) {
        close_pair();
    }
    check(good, "%d rounds of open both endpoints, exchange a message, close (%d done, %.0f ms)", ROUNDS, round,
          now_ms() - t0);
    int fds1 = count_fds();
    check(fds1 == fds0 || bad("%d descriptors before, %d after", fds0, fds1),
          "no file descriptor left behind by the rounds (%d)", fds1);
}

/* ------------------------------------------------------------------ */
/* Group 12: multi-receive buffers (FI_MULTI_RECV)                    */
/* ------------------------------------------------------------------ */

/* A posts `n` untagged messages of `len` bytes (seeds seed, seed+1, ...)
 * and takes their send completions. */
static int mr_send(size_t n, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        struct fi_context2 s;
        fill(sbuf, len, seed + (uint32_t)i, 0);
        ssize_t r;
        POST(r, fi_send(A->ep, sbuf, len, NULL, A->peer, &s));
        struct cqe e;
        if (!rc_is(r, 0, "fi_send") || !wait_cqe(&A->tx, &e, WAIT_MS) || !tx_ok(&e, &s, FI_SEND | FI_MSG)) {
            return 0;
        }
    }
    return 1;
}

/* The next receive completion of B: a success of `len` bytes with context
 * `ctx` at `at`, holding stream `seed`, with FI_MULTI_RECV when `last`. */
static int mr_expect(void *ctx, uint8_t *at, size_t len, uint32_t seed, int last)
{
    struct cqe e;
    if (!wait_cqe(&B->rx, &e, WAIT_MS) || !rx_ok(&e, ctx, FI_MSG, len, 0, 0, 0)) {
        return 0;
    }
    if ((uint8_t *)e.e.buf != at) {
        return bad("buf %p, expected %p (offset %td)", e.e.buf, (void *)at, (uint8_t *)e.e.buf - at);
    }
    if (!!(e.e.flags & FI_MULTI_RECV) != last) {
        return bad("FI_MULTI_RECV %s in flags %#" PRIx64, last ? "missing" : "set", (uint64_t)e.e.flags);
    }
    return data_ok(at, len, seed, 0, "message in the multi-receive buffer");
}

static void g_multi_recv(void)
{
    struct opts o = DEFAULT_OPTS;
    if (!check(open_pair(&o), "open two endpoints")) {
        close_pair();
        return;
    }
    size_t min = 0, mlen = sizeof min;
    check(rc_is(fi_getopt(&B->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &mlen), 0, "fi_getopt") &&
              (min > 0 || bad("min %zu", min)),
          "FI_OPT_MIN_MULTI_RECV is %zu by default", min);
    check(rc_is(fi_setopt(&B->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, 4), -FI_EINVAL, "fi_setopt"),
          "fi_setopt(FI_OPT_MIN_MULTI_RECV) of 4 bytes: -FI_EINVAL");
    min = 1000;
    check(rc_is(fi_setopt(&B->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0, "fi_setopt"),
          "fi_setopt(FI_OPT_MIN_MULTI_RECV, 1000)");

    /* Two buffers of 4096 bytes: four messages of 1000 fill the first (96
     * bytes left, under 1000: released with the fourth), the next ones go
     * to the second, one after another. */
    struct fi_context2 c1, c2, c3;
    uint8_t *b1 = rbuf, *b2 = rbuf + 8192, *b3 = rbuf + 16384;
    memset(rbuf, GUARD_BYTE, 24576);
    struct iovec v1 = { b1, 4096 }, v2 = { b2, 4096 }, v3 = { b3, 4096 };
    struct fi_msg m1 = { .msg_iov = &v1, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &c1 };
    struct fi_msg m2 = { .msg_iov = &v2, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &c2 };
    struct fi_msg m3 = { .msg_iov = &v3, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &c3 };
    ssize_t r1, r2;
    POST(r1, fi_recvmsg(B->ep, &m1, FI_MULTI_RECV));
    POST(r2, fi_recvmsg(B->ep, &m2, FI_MULTI_RECV));
    int ok = rc_is(r1, 0, "fi_recvmsg(FI_MULTI_RECV)") && rc_is(r2, 0, "fi_recvmsg(FI_MULTI_RECV)") &&
             mr_send(6, 1000, 100);
    for (int i = 0; ok && i < 4; i++) {
        ok = mr_expect(&c1, b1 + 1000 * i, 1000, 100 + (uint32_t)i, i == 3);
    }
    ok = ok && guard_ok(b1 + 4000, 96, "after the messages in the first buffer");
    for (int i = 0; ok && i < 2; i++) {
        ok = mr_expect(&c2, b2 + 1000 * i, 1000, 104 + (uint32_t)i, 0);
    }
    check(ok, "messages fill a multi-receive buffer one after another, each completion at its place, "
              "FI_MULTI_RECV with the one that leaves less than the minimum; the next buffer takes over");

    /* A message larger than what is left: truncated, and the buffer
     * released with it (2000 bytes are left of the second). */
    ok = mr_send(1, 3000, 200);
    struct cqe e;
    ok = ok && wait_cqe(&B->rx, &e, WAIT_MS) && err_ok(&e, &c2, FI_ETRUNC) &&
         ((e.e.flags & FI_MULTI_RECV) || bad("FI_MULTI_RECV missing in %#" PRIx64, (uint64_t)e.e.flags)) &&
         data_ok(b2 + 2000, 2000, 200, 0, "the truncated message's first bytes") &&
         guard_ok(b2 + 4096, 4096, "after the second buffer");
    check(ok, "a message larger than what is left is truncated there, and releases the buffer (FI_MULTI_RECV)");

    /* Cancel: of a buffer behind the first (never posted to rdm4), then of
     * the first; each ends with FI_ECANCELED and FI_MULTI_RECV. */
    POST(r1, fi_recvmsg(B->ep, &m1, FI_MULTI_RECV));
    POST(r2, fi_recvmsg(B->ep, &m3, FI_MULTI_RECV));
    ok = rc_is(r1, 0, "fi_recvmsg") && rc_is(r2, 0, "fi_recvmsg") &&
         rc_is(fi_cancel(&B->ep->fid, &c3), 0, "fi_cancel of the second buffer") &&
         wait_cqe(&B->rx, &e, WAIT_MS) && err_ok(&e, &c3, FI_ECANCELED) && (e.e.flags & FI_MULTI_RECV) &&
         rc_is(fi_cancel(&B->ep->fid, &c1), 0, "fi_cancel of the first buffer") &&
         rc_is(fi_cancel(&B->ep->fid, &c1), -FI_ENOENT, "fi_cancel of it again") &&
         wait_cqe(&B->rx, &e, WAIT_MS) && err_ok(&e, &c1, FI_ECANCELED) && (e.e.flags & FI_MULTI_RECV);
    check(ok, "fi_cancel of a multi-receive buffer, queued or posted: FI_ECANCELED with FI_MULTI_RECV");

    /* The endpoint's rx op_flags with FI_MULTI_RECV: fi_recv takes the
     * buffer as a multi-receive one. */
    uint64_t f = FI_RECV;
    ok = rc_is(fi_control(&B->ep->fid, FI_GETOPSFLAG, &f), 0, "FI_GETOPSFLAG");
    f |= FI_RECV | FI_MULTI_RECV;
    ok = ok && rc_is(fi_control(&B->ep->fid, FI_SETOPSFLAG, &f), 0, "FI_SETOPSFLAG");
    memset(rbuf, GUARD_BYTE, 8192);
    POST(r1, fi_recv(B->ep, b1, 2500, NULL, FI_ADDR_UNSPEC, &c1));
    ok = ok && rc_is(r1, 0, "fi_recv") && mr_send(2, 1000, 300) && mr_expect(&c1, b1, 1000, 300, 0) &&
         mr_expect(&c1, b1 + 1000, 1000, 301, 1) && guard_ok(b1 + 2000, 500, "after the messages");
    check(ok, "with FI_MULTI_RECV in the receive op_flags, fi_recv posts a multi-receive buffer");
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */
/* Group 13: several endpoints on one domain                          */
/* ------------------------------------------------------------------ */

/* A later endpoint of A's domain: its CQs (rx with a wait fd), A's AV. */
static struct fid_ep *a2;
static struct cq a2tx, a2rx;

static int open_a2(const char *label)
{
    memset(&a2tx, 0, sizeof a2tx);
    memset(&a2rx, 0, sizeof a2rx);
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
    ssize_t r = fi_cq_open(A->domain, &ca, &a2tx.cq, NULL);
    ca.wait_obj = FI_WAIT_FD;
    r = r ? r : fi_cq_open(A->domain, &ca, &a2rx.cq, NULL);
    a2tx.fmt = a2rx.fmt = FI_CQ_FORMAT_TAGGED;
    snprintf(a2tx.name, sizeof a2tx.name, "%s tx CQ", label);
    snprintf(a2rx.name, sizeof a2rx.name, "%s rx CQ", label);
    r = r ? r : fi_endpoint(A->domain, A->info, &a2, NULL);
    r = r ? r : fi_ep_bind(a2, &A->av->fid, 0);
    r = r ? r : fi_ep_bind(a2, &a2tx.cq->fid, FI_TRANSMIT);
    r = r ? r : fi_ep_bind(a2, &a2rx.cq->fid, FI_RECV);
    r = r ? r : fi_enable(a2);
    return rc_is(r, 0, "opening a later endpoint on A's domain");
}

static int close_a2(void)
{
    int r = a2 ? fi_close(&a2->fid) : 0;
    a2 = NULL;
    r |= a2tx.cq ? fi_close(&a2tx.cq->fid) : 0;
    r |= a2rx.cq ? fi_close(&a2rx.cq->fid) : 0;
    a2tx.cq = a2rx.cq = NULL;
    return rc_is(r, 0, "closing the later endpoint");
}

/* `from` sends `len` bytes (stream `seed`) to `dest`; `to` receives them
 * into rbuf; the receive's source must be `src` (B's or A's AV). */
static int me_xfer(struct fid_ep *from, struct cq *ftx, fi_addr_t dest, struct fid_ep *to, struct cq *trx,
                   fi_addr_t src, size_t len, uint32_t seed)
{
    struct fi_context2 rc, sc;
    fill(sbuf, len, seed, 0);
    memset(rbuf, GUARD_BYTE, len + GUARD);
    ssize_t r, t;
    POST(r, fi_recv(to, rbuf, len, NULL, FI_ADDR_UNSPEC, &rc));
    POST(t, fi_send(from, sbuf, len, NULL, dest, &sc));
    struct cqe e, se;
    if (!rc_is(r, 0, "fi_recv") || !rc_is(t, 0, "fi_send") || !wait_cqe(trx, &e, WAIT_MS) ||
        !rx_ok(&e, &rc, FI_MSG, len, 0, 0, 0) || !wait_cqe(ftx, &se, WAIT_MS) || !tx_ok(&se, &sc, FI_SEND)) {
        return 0;
    }
    if (e.src != src) {
        return bad("source %#" PRIx64 ", expected %#" PRIx64, (uint64_t)e.src, (uint64_t)src);
    }
    return data_ok(rbuf, len, seed, 0, "message") && guard_ok(rbuf + len, GUARD, "after the message");
}

static void g_multi_ep(void)
{
    struct opts o = DEFAULT_OPTS;
    o.av = FI_AV_TABLE;
    if (!check(open_pair(&o), "open two endpoints") || !check(open_a2("A2"), "a second endpoint on A's domain")) {
        close_a2();
        close_pair();
        return;
    }
    uint8_t name[NAME_MAX_LEN];
    size_t nlen = sizeof name;
    int ok = rc_is(fi_getname(&a2->fid, name, &nlen), 0, "fi_getname") &&
             (nlen == A->namelen || bad("name of %zu bytes", nlen)) &&
             (memcmp(name, A->name, nlen) != 0 || bad("the same name as A's"));
    check(ok, "the second endpoint has a name of its own");
    fi_addr_t b_a2 = FI_ADDR_NOTAVAIL;
    ok = ok && (fi_av_insert(B->av, name, 1, &b_a2, 0, NULL) == 1 || bad("B's fi_av_insert of A2"));
    ok = ok && me_xfer(a2, &a2tx, A->peer, B->ep, &B->rx, b_a2, 3000, 1) &&
         me_xfer(B->ep, &B->tx, b_a2, a2, &a2rx, A->peer, 3000, 2) &&
         me_xfer(A->ep, &A->tx, A->peer, B->ep, &B->rx, B->peer, 100, 3) &&
         me_xfer(B->ep, &B->tx, b_a2, a2, &a2rx, A->peer, 200000, 4);
    check(ok, "messages each way between the second endpoint and B (3000 B, 200000 B), sources named by each AV; "
              "the first endpoint goes on as before");

    /* RMA from the second endpoint into B's memory; none into A's through it. */
    struct fid_mr *bmr = NULL, *amr = NULL;
    int r = fi_mr_reg(B->domain, region, 4096, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &bmr, NULL);
    r = r ? r : fi_mr_reg(A->domain, region + 8192, 4096, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &amr, NULL);
    if (check(rc_is(r, 0, "fi_mr_reg"), "registrations on A's and B's domains")) {
        struct fi_context2 c;
        struct cqe e;
        fill(sbuf, 512, 5, 0);
        memset(region, GUARD_BYTE, 4096);
        ssize_t w;
        POST(w, fi_write(a2, sbuf, 512, NULL, A->peer, base_of(B, region) + 64, fi_mr_key(bmr), &c));
        ok = rc_is(w, 0, "fi_write") && wait_cqe(&a2tx, &e, WAIT_MS) && tx_ok(&e, &c, FI_RMA | FI_WRITE) &&
             guard_ok(region, 64, "before the write") && data_ok(region + 64, 512, 5, 0, "written") &&
             guard_ok(region + 576, 4096 - 576, "after the write");
        check(ok, "fi_write from the second endpoint into B's registered memory");
        memset(region + 8192, GUARD_BYTE, 4096);
        POST(w, fi_write(B->ep, sbuf, 512, NULL, b_a2, base_of(A, region + 8192), fi_mr_key(amr), &c));
        ok = rc_is(w, 0, "fi_write") && wait_cqe(&B->tx, &e, WAIT_MS) && err_ok(&e, &c, 0) &&
             guard_ok(region + 8192, 4096, "A's registered memory");
        check(ok, "an fi_write to the second endpoint with a key of A's domain fails (registrations are the "
                  "first endpoint's), A's memory untouched");
    }
    if (bmr) {
        fi_close(&bmr->fid);
    }
    if (amr) {
        fi_close(&amr->fid);
    }

    /* Sleeping on the domain's wait fd wakes for the second endpoint. */
    int fd = -1;
    struct fid *fids[1] = { &a2rx.cq->fid };
    ok = rc_is(fi_control(&a2rx.cq->fid, FI_GETWAIT, &fd), 0, "FI_GETWAIT");
    double end = now_ms() + WAIT_MS;
    ssize_t tw;
    while (ok && (tw = fi_trywait(A->fabric, fids, 1)) == -FI_EAGAIN && now_ms() < end) {
        progress();
        drain(&a2rx);
    }
    ok = ok && rc_is(tw, 0, "fi_trywait");
    struct fi_context2 rc, sc;
    ssize_t pr, ps;
    POST(pr, fi_recv(a2, rbuf, 64, NULL, FI_ADDR_UNSPEC, &rc));
    fill(sbuf, 64, 6, 0);
    POST(ps, fi_send(B->ep, sbuf, 64, NULL, b_a2, &sc));
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int polled = ok ? poll(&pfd, 1, 5000) : -1;
    struct cqe e;
    ok = ok && rc_is(pr, 0, "fi_recv") && rc_is(ps, 0, "fi_send") && (polled == 1 || bad("poll: %d", polled)) &&
         wait_cqe(&a2rx, &e, WAIT_MS) && rx_ok(&e, &rc, FI_MSG, 64, 0, 0, 0) && wait_cqe(&B->tx, &e, WAIT_MS) &&
         tx_ok(&e, &sc, FI_SEND);
    check(ok, "after fi_trywait, poll(2) on the domain's wait fd wakes for a message to the second endpoint");
    POST(pr, fi_recv(a2, rbuf, 64, NULL, FI_ADDR_UNSPEC, &rc));
    POST(ps, fi_send(B->ep, sbuf, 64, NULL, b_a2, &sc));
    struct fi_cq_tagged_entry te;
    ssize_t got = fi_cq_sread(a2rx.cq, &te, 1, NULL, 5000);
    ok = rc_is(pr, 0, "fi_recv") && rc_is(ps, 0, "fi_send") && (got == 1 || bad("fi_cq_sread: %zd", got)) &&
         (te.op_context == &rc || bad("context")) && wait_cqe(&B->tx, &e, WAIT_MS);
    check(ok, "fi_cq_sread of the second endpoint's queue returns its message");

    /* Closed and opened again (A's first endpoint keeps the domain's). */
    ok = close_a2() && open_a2("A3");
    nlen = sizeof name;
    ok = ok && rc_is(fi_getname(&a2->fid, name, &nlen), 0, "fi_getname") &&
         (fi_av_insert(B->av, name, 1, &b_a2, 0, NULL) == 1 || bad("B's fi_av_insert of A3")) &&
         me_xfer(B->ep, &B->tx, b_a2, a2, &a2rx, A->peer, 1000, 7) &&
         me_xfer(a2, &a2tx, A->peer, B->ep, &B->rx, b_a2, 1000, 8) &&
         me_xfer(A->ep, &A->tx, A->peer, B->ep, &B->rx, B->peer, 100, 9);
    check(ok, "a later endpoint closed, another opened: both endpoints of A exchange with B");

    /* An address removed from the shared AV is gone for both. */
    fi_addr_t gone = A->peer;
    ok = rc_is(fi_av_remove(A->av, &gone, 1, 0), 0, "fi_av_remove");
    ssize_t s1 = fi_send(a2, sbuf, 8, NULL, gone, &sc), s2 = fi_send(A->ep, sbuf, 8, NULL, gone, &sc);
    check(ok && (s1 < 0 || bad("the second endpoint's send: %zd", s1)) && (s2 < 0 || bad("the first's: %zd", s2)),
          "after fi_av_remove, sends to the address fail on both endpoints");
    check(close_a2(), "close the later endpoint");
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");
}

/* IP addressing: a message from `tx` to `rx` (`to`: tx's fi_addr of rx;
 * `from`: rx's of tx, whose source the completion must name; `directed`:
 * the receive accepts only `from`). */
static int ip_msg(struct side *tx, fi_addr_t to, struct side *rx, fi_addr_t from, size_t len, int directed,
                  uint32_t seed)
{
    struct fi_context2 rc, sc;
    struct cqe e, te;
    ssize_t r;
    fill(sbuf, len, seed, 0);
    memset(rbuf, GUARD_BYTE, len + GUARD);
    POST(r, fi_recv(rx->ep, rbuf, len, NULL, directed ? from : FI_ADDR_UNSPEC, &rc));
    if (!rc_is(r, 0, "fi_recv")) {
        return 0;
    }
    POST(r, fi_send(tx->ep, sbuf, len, NULL, to, &sc));
    return rc_is(r, 0, "fi_send") && wait_cqe(&rx->rx, &e, WAIT_MS) && rx_ok(&e, &rc, FI_MSG, len, 0, 0, 0) &&
           (e.src == from || bad("source %#" PRIx64 ", expected %#" PRIx64, (uint64_t)e.src, (uint64_t)from)) &&
           data_ok(rbuf, len, seed, 0, "received data") && guard_ok(rbuf + len, GUARD, "after the buffer") &&
           wait_cqe(&tx->tx, &te, WAIT_MS) && tx_ok(&te, &sc, FI_SEND);
}

/* UDP sockets on loopback that never answer, and the datagrams each got. */
static int mute_open(int fd[], struct sockaddr_in sin[], int n)
{
    for (int k = 0; k < n; k++) {
        socklen_t len = sizeof sin[k];
        memset(&sin[k], 0, sizeof sin[k]);
        sin[k].sin_family = AF_INET;
        sin[k].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd[k] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (fd[k] < 0 || bind(fd[k], (struct sockaddr *)&sin[k], sizeof sin[k]) != 0 ||
            getsockname(fd[k], (struct sockaddr *)&sin[k], &len) != 0) {
            return bad("a UDP socket on loopback");
        }
    }
    return 1;
}

static int mute_count(int fd)
{
    char b[2048];
    int n = 0;
    while (recv(fd, b, sizeof b, 0) >= 0) {
        n++;
    }
    return n;
}

/* IP addressing: a sender in no entry of A's (C) while A has entries not
   used yet (sockets that never answer): they are asked once, at C's first
   message, and not again for C's next messages (a quarter second apart)
   until an entry is inserted; every message arrives, its source
   FI_ADDR_NOTAVAIL. */
static void ip_stranger(const struct opts *o)
{
    int fd[4] = { -1, -1, -1, -1 };
    struct sockaddr_in mute[4];
    fi_addr_t ca = FI_ADDR_NOTAVAIL, fa[4];
    int ok = mute_open(fd, mute, 4) && open_side(C, o, "C") &&
             (fi_av_insert(A->av, mute, 3, fa, 0, NULL) == 3 || bad("A's fi_av_insert of 3 sockets")) &&
             (fi_av_insert(C->av, A->name, 1, &ca, 0, NULL) == 1 || bad("C's fi_av_insert of A"));
    int asked[5][4] = { { 0 } };
    for (int k = 0; k < 5 && ok; k++) {
        if (k != 3 && k > 0) {
            usleep(250 * 1000); /* longer than an entry asked in vain is left alone */
        }
        if (k == 3) { /* one more entry */
            ok = fi_av_insert(A->av, &mute[3], 1, &fa[3], 0, NULL) == 1 || bad("A's fi_av_insert of a 4th");
        }
        struct fi_context2 rc, sc;
        struct cqe e, te;
        ssize_t r;
        POST(r, fi_recv(A->ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, &rc));
        ok = ok && rc_is(r, 0, "fi_recv");
        POST(r, fi_send(C->ep, sbuf, 64, NULL, ca, &sc));
        ok = ok && rc_is(r, 0, "fi_send from C") && wait_cqe(&A->rx, &e, WAIT_MS) &&
             rx_ok(&e, &rc, FI_MSG, 64, 0, 0, 0) && wait_cqe(&C->tx, &te, WAIT_MS) && tx_ok(&te, &sc, FI_SEND) &&
             (e.src == FI_ADDR_NOTAVAIL || bad("message %d: source %#" PRIx64, k, (uint64_t)e.src));
        for (int s = 0; s < 4; s++) {
            asked[k][s] = mute_count(fd[s]);
        }
    }
    check(ok, "five messages from a sender in no entry arrive, source FI_ADDR_NOTAVAIL");
    check(ok && asked[0][0] && asked[0][1] && asked[0][2] && !asked[0][3],
          "at its first message the 3 entries not used yet were asked for their names (%d, %d, %d)", asked[0][0],
          asked[0][1], asked[0][2]);
    check(ok && !asked[1][0] && !asked[1][1] && !asked[1][2] && !asked[2][0] && !asked[2][1] && !asked[2][2],
          "at its 2nd and 3rd none was asked again");
    check(ok && asked[3][3] && !asked[4][3], "an entry inserted: it is asked at the next message, once");
    for (int s = 0; s < 4; s++) {
        if (fd[s] >= 0) {
            close(fd[s]);
        }
    }
    check(close_side(C), "close C");
}

static void g_ip(void)
{
    struct fi_info *h = hints_new(), *got = NULL;
    h->addr_format = FI_SOCKADDR_IN;
    int r = fi_getinfo(API_VERSION, NULL, NULL, 0, h, &got);
    if (!strcmp(dom_name, "shm")) {
        check(r == -FI_ENODATA || bad("fi_getinfo: %d", r), "no FI_SOCKADDR_IN on the shm domain (-FI_ENODATA)");
        fi_freeinfo(got);
        fi_freeinfo(h);
        return;
    }
    check(rc_is(r, 0, "fi_getinfo") && (got->addr_format == FI_SOCKADDR_IN || bad("addr_format %u", got->addr_format)),
          "FI_SOCKADDR_IN hints get an FI_SOCKADDR_IN answer");
    fi_freeinfo(got);
    got = NULL;
    /* A destination's node and service are taken as they are: nothing is
     * bound at the port, and the answer comes at once. */
    uint16_t none = free_port_pair();
    char svc[8];
    snprintf(svc, sizeof svc, "%u", none);
    double t0 = now_ms();
    r = fi_getinfo(API_VERSION, "127.0.0.1", svc, 0, h, &got);
    const struct sockaddr_in *d = got ? got->dest_addr : NULL;
    check(rc_is(r, 0, "fi_getinfo") &&
              (got->dest_addrlen == sizeof *d || bad("dest_addrlen %zu", got->dest_addrlen)) &&
              ((d->sin_family == AF_INET && d->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
                ntohs(d->sin_port) == none) ||
               bad("dest_addr not 127.0.0.1:%u", none)) &&
              (now_ms() - t0 < 1000 || bad("took %.0f ms", now_ms() - t0)),
          "fi_getinfo(\"127.0.0.1\", a port) gives that socket address as dest_addr without asking it");
    fi_freeinfo(got);
    fi_freeinfo(h);

    struct opts o = DEFAULT_OPTS;
    o.ip = 1;
    if (!check(open_pair(&o), "open two endpoints with FI_SOCKADDR_IN (each inserts itself and the other)")) {
        close_pair();
        return;
    }
    const struct sockaddr_in *an = (const struct sockaddr_in *)A->name;
    check((A->namelen == sizeof *an || bad("%zu bytes", A->namelen)) &&
              ((an->sin_family == AF_INET && an->sin_port != 0) || bad("family %u port %u", an->sin_family,
                                                                      ntohs(an->sin_port))) &&
              ((A->self == 0 && A->peer == 1) || bad("fi_addrs %" PRIu64 ", %" PRIu64, A->self, A->peer)),
          "fi_getname gives an IPv4 socket address; FI_AV_MAP's fi_addrs are indices (0, 1)");
    struct sockaddr_in sin;
    size_t len = 4;
    check(fi_getname(&A->ep->fid, &sin, &len) == -FI_ETOOSMALL && len == sizeof sin,
          "fi_getname with 4 bytes: -FI_ETOOSMALL and the length");

    /* B never used its entry of A: the source is found all the same. */
    check(ip_msg(A, A->peer, B, B->peer, 100, 0, 1), "A's first message to B (its entry asked at first use); "
                                                     "B's completion names A's entry as the source");
    check(ip_msg(B, B->peer, A, A->peer, 100, 0, 2), "B answers A; A's completion names B's entry");
    int ok = 1;
    for (size_t i = 0; i < N_MSG_SIZES && ok; i++) {
        ok = ip_msg(A, A->peer, B, B->peer, msg_sizes[i], 1, 10 + (uint32_t)i) &&
             ip_msg(B, B->peer, A, A->peer, msg_sizes[i], 1, 20 + (uint32_t)i);
    }
    check(ok, "directed messages of 0 B .. 4 MiB both ways, every byte");

    /* RMA towards an IP entry. */
    struct fid_mr *mr = NULL;
    r = fi_mr_reg(B->domain, region, 4096, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr, NULL);
    if (check(rc_is(r, 0, "fi_mr_reg"), "B registers memory")) {
        struct fi_context2 c;
        struct cqe e;
        ssize_t w;
        fill(sbuf, 1000, 30, 0);
        memset(region, GUARD_BYTE, 4096);
        POST(w, fi_write(A->ep, sbuf, 1000, NULL, A->peer, base_of(B, region) + 8, fi_mr_key(mr), &c));
        check(rc_is(w, 0, "fi_write") && wait_cqe(&A->tx, &e, WAIT_MS) && tx_ok(&e, &c, FI_RMA | FI_WRITE) &&
                  data_ok(region + 8, 1000, 30, 0, "written") && guard_ok(region + 1008, 64, "after the write"),
              "fi_write to B's entry");
        fi_close(&mr->fid);
    }

    /* Lookup and text of an entry. */
    len = sizeof sin;
    ok = rc_is(fi_av_lookup(A->av, A->peer, &sin, &len), 0, "fi_av_lookup") && len == sizeof sin &&
         memcmp(&sin, B->name, sizeof sin) == 0;
    check(ok || bad("not B's name"), "fi_av_lookup gives the socket address inserted");
    char text[128], want[128], ip[INET_ADDRSTRLEN];
    size_t tl = sizeof text;
    const struct sockaddr_in *bn = (const struct sockaddr_in *)B->name;
    inet_ntop(AF_INET, &bn->sin_addr, ip, sizeof ip);
    snprintf(want, sizeof want, "fi_sockaddr_in://%s:%u", ip, ntohs(bn->sin_port));
    const char *t = fi_av_straddr(A->av, B->name, text, &tl);
    check((t && !strcmp(t, want)) || bad("\"%s\", expected \"%s\"", t ? t : "(null)", want),
          "fi_av_straddr: fi_sockaddr_in://address:port");

    /* Entries inserted without asking anyone; a dead one fails at first use. */
    setenv("FI_RDM4_RESOLVE_MS", "300", 1);
    struct sockaddr_in two[2] = { { .sin_family = AF_INET, .sin_port = htons(none) },
                                  { .sin_family = 0 } };
    two[0].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fi_addr_t fa[2] = { 0, 0 };
    int errs_[2] = { -1, -1 };
    t0 = now_ms();
    r = fi_av_insert(A->av, two, 2, fa, FI_SYNC_ERR, errs_);
    check((r == 1 || bad("returned %d", r)) && (fa[0] == 2 || bad("fi_addr %" PRIu64, fa[0])) &&
              (fa[1] == FI_ADDR_NOTAVAIL || bad("bad one's fi_addr %#" PRIx64, fa[1])) &&
              ((errs_[0] == 0 && errs_[1] == FI_EINVAL) || bad("errors %d, %d", errs_[0], errs_[1])) &&
              (now_ms() - t0 < 100 || bad("took %.0f ms", now_ms() - t0)),
          "fi_av_insert of a dead port and of a bad family: the first taken at once (fi_addr 2), the second "
          "refused (FI_EINVAL)");
    struct fi_context2 sc;
    ssize_t s1 = fi_send(A->ep, sbuf, 8, NULL, fa[0], &sc);
    check(s1 == -FI_EHOSTUNREACH || bad("fi_send: %zd (%s)", s1, errs(s1)),
          "a send to the dead entry: -FI_EHOSTUNREACH once no name came");
    unsetenv("FI_RDM4_RESOLVE_MS");
    check(ip_msg(A, A->peer, B, B->peer, 64, 1, 40), "messages between A and B go on");
    fi_addr_t gone = fa[0];
    check(rc_is(fi_av_remove(A->av, &gone, 1, 0), 0, "fi_av_remove") &&
              (fi_send(A->ep, sbuf, 8, NULL, gone, &sc) == -FI_EINVAL || bad("still usable")),
          "the dead entry removed: -FI_EINVAL");
    ip_stranger(&o);
    check(all_taken(), "no unexpected completion left");
    check(close_pair(), "close");

    /* A receive directed at an entry not used yet (FI_AV_TABLE). */
    o.av = FI_AV_TABLE;
    if (check(open_pair(&o), "open two endpoints with FI_SOCKADDR_IN and FI_AV_TABLE")) {
        check(ip_msg(A, A->peer, B, B->peer, 5000, 1, 50),
              "B's receive directed at A's entry before anything came; A's first message matches it");
        check(ip_msg(B, B->peer, A, A->peer, 5000, 1, 51), "and back");
        check(all_taken(), "no unexpected completion left");
    }
    check(close_pair(), "close");
}

/* ------------------------------------------------------------------ */

static const struct {
    const char *name;
    void (*run)(void);
} groups[] = {
    { "1 getinfo", g_getinfo }, { "2 msg", g_msg },         { "3 trunc", g_trunc },   { "4 selective", g_selective },
    { "5 probe", g_probe },     { "6 cancel", g_cancel },   { "7 rma", g_rma },       { "8 atomic", g_atomic },
    { "9 wait", g_wait },       { "10 badargs", g_badargs }, { "11 close", g_close },
    { "12 multi_recv", g_multi_recv }, { "13 multi_ep", g_multi_ep }, { "14 ip", g_ip },
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1) {
        dom_name = argv[1];
    }
    if (strcmp(dom_name, "auto") && strcmp(dom_name, "shm") && strcmp(dom_name, "udp")) {
        fprintf(stderr, "usage: %s [auto|shm|udp] [group numbers 1..14...]\n", argv[0]);
        return 2;
    }
    unsigned seconds = 120;
    const char *al = getenv("FI_CHECK_ALARM");
    if (al && atoi(al) > 0) {
        seconds = (unsigned)atoi(al);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
    alarm(seconds);

    sbuf = aligned_alloc(4096, BUF_LEN);
    rbuf = aligned_alloc(4096, BUF_LEN);
    region = aligned_alloc(4096, BUF_LEN);
    if (!sbuf || !rbuf || !region) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    memset(sbuf, 0, BUF_LEN);
    memset(rbuf, 0, BUF_LEN);
    memset(region, 0, BUF_LEN);
    printf("# fi_check: provider rdm4, domain %s, FI_PROVIDER_PATH=%s\n", dom_name,
           getenv("FI_PROVIDER_PATH") ? getenv("FI_PROVIDER_PATH") : "(unset)");
    double t0 = now_ms();
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        int wanted = argc <= 2;
        for (int i = 2; i < argc; i++) {
            wanted |= atoi(argv[i]) == (int)g + 1;
        }
        if (!wanted) {
            continue;
        }
        group = groups[g].name;
        int before = n_failed;
        double tg = now_ms();
        groups[g].run();
        printf("# group %s: %s (%.1f s)\n", group, n_failed == before ? "passed" : "FAILED", (now_ms() - tg) / 1e3);
    }
    free(sbuf);
    free(rbuf);
    free(region);
    printf("# fi_check %s: %d checks, %d failed (%.1f s)\n", dom_name, n_checks, n_failed, (now_ms() - t0) / 1e3);
    return n_failed ? 1 : 0;
}
