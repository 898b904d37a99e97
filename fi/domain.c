/*
 * Domains (one rdm4 endpoint each), memory registration, address vectors,
 * completion queues, counters, event queues, poll sets and progress.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rdm4_fi.h"

void rf_apply_settings(void);

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

const char *rf_strerror(int prov_errno, char *buf, size_t len)
{
    const char *s = rdm4_strerror(prov_errno);
    if (buf && len) {
        snprintf(buf, len, "%s", s);
        return buf;
    }
    return s;
}

/* Operation records. */

struct rf_op *rf_op_get(struct rf_domain *d)
{
    rf_lock(d->locked, &d->op_lock);
    struct rf_op *op = d->free_ops;
    if (op) {
        d->free_ops = op->next_free;
    }
    rf_unlock(d->locked, &d->op_lock);
    if (op) {
        memset(op, 0, sizeof *op);
        op->used = 1;
    }
    return op;
}

void rf_op_put(struct rf_domain *d, struct rf_op *op)
{
    free(op->bounce);
    free(op->iov);
    op->bounce = NULL;
    op->iov = NULL;
    op->used = 0;
    rf_lock(d->locked, &d->op_lock);
    op->next_free = d->free_ops;
    d->free_ops = op;
    rf_unlock(d->locked, &d->op_lock);
}

/* Domains. */

static int domain_close(struct fid *fid)
{
    struct rf_domain *d = (struct rf_domain *)fid;
    if (atomic_load(&d->ref) > 0) {
        return -FI_EBUSY;
    }
    if (d->epfd >= 0) {
        close(d->epfd);
    }
    rdm4_ep_close(d->ep);
    for (size_t i = 0; i < RF_OPS; i++) {
        free(d->ops[i].bounce);
        free(d->ops[i].iov);
    }
    pthread_mutex_destroy(&d->op_lock);
    pthread_mutex_destroy(&d->ep_lock);
    atomic_fetch_sub(&d->fabric->ref, 1);
    free(d);
    return 0;
}

static struct fi_ops domain_fi_ops = RF_FI_OPS(domain_close, rf_nosys_bind, rf_nosys_control);

static int domain_endpoint2(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, uint64_t flags,
                            void *context)
{
    return flags ? -FI_EBADFLAGS : rf_ep_open(domain, info, ep, context);
}

static struct fi_ops_domain domain_ops = {
    .size = sizeof(struct fi_ops_domain),
    .av_open = rf_av_open,
    .cq_open = rf_cq_open,
    .endpoint = rf_ep_open,
    .scalable_ep = (void *)rf_nosys_int,
    .cntr_open = rf_cntr_open,
    .poll_open = rf_poll_open,
    .stx_ctx = (void *)rf_nosys_int,
    .srx_ctx = (void *)rf_nosys_int,
    .query_atomic = rf_query_atomic,
    .query_collective = (void *)rf_nosys_int,
    .endpoint2 = domain_endpoint2,
};

static struct fi_ops_mr domain_mr_ops = {
    .size = sizeof(struct fi_ops_mr),
    .reg = rf_mr_reg,
    .regv = rf_mr_regv,
    .regattr = rf_mr_regattr,
};

/* Sets the variable `name` to `value` for the open (`value` NULL: unset);
 * `saved` keeps what was there. */
static void swap_env(const char *name, const char *value, char **saved)
{
    const char *old = getenv(name);
    *saved = old ? strdup(old) : NULL;
    if (value) {
        setenv(name, value, 1);
    } else {
        unsetenv(name);
    }
}

/* rdm4_ep_open, with the udp device bound where the info's source request
 * (fi_getinfo with FI_SOURCE) says: RDM4_UDP_ADDR and RDM4_UDP_PORT for
 * the open only. */
static int32_t open_at_source(const struct fi_info *info, const rdm4_ep_attr *attr, rdm4_ep **ep)
{
    struct rf_src_request sreq;
    const struct rf_src_request *req = info->src_addr;
    if (rf_is_sin(info->src_addr, info->src_addrlen)) {
        /* IP addressing: the address and port as a request (any: none). */
        const struct sockaddr_in *sin = info->src_addr;
        memset(&sreq, 0, sizeof sreq);
        memcpy(sreq.magic, RF_SRC_MAGIC, sizeof sreq.magic);
        if (sin->sin_addr.s_addr != htonl(INADDR_ANY)) {
            inet_ntop(AF_INET, &sin->sin_addr, sreq.node, sizeof sreq.node);
        }
        sreq.port = ntohs(sin->sin_port);
        req = &sreq;
    } else if (!req || info->src_addrlen != sizeof *req ||
               memcmp(req->magic, RF_SRC_MAGIC, sizeof req->magic) != 0) {
        return rdm4_ep_open(attr, ep);
    }
    char port[8], *old_addr = NULL, *old_port = NULL;
    snprintf(port, sizeof port, "%u", req->port);
    int set_addr = req->node[0] != 0, set_port = req->port != 0;
    if (set_addr) {
        swap_env("RDM4_UDP_ADDR", req->node, &old_addr);
    }
    if (set_port) {
        swap_env("RDM4_UDP_PORT", port, &old_port);
    }
    int32_t r = rdm4_ep_open(attr, ep);
    char *dummy;
    if (set_addr) {
        swap_env("RDM4_UDP_ADDR", old_addr, &dummy);
        free(dummy);
        free(old_addr);
    }
    if (set_port) {
        swap_env("RDM4_UDP_PORT", old_port, &dummy);
        free(dummy);
        free(old_port);
    }
    return r;
}

int rf_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, void *context)
{
    if (!fabric || !info || !dom || !info->domain_attr) {
        return -FI_EINVAL;
    }
    int device = info->domain_attr->name ? rf_device_of(info->domain_attr->name) : RDM4_DEVICE_AUTO;
    if (device < 0) {
        return -FI_EINVAL;
    }
    struct rf_domain *d = calloc(1, sizeof *d);
    if (!d) {
        return -FI_ENOMEM;
    }
    d->threading = info->domain_attr->threading == FI_THREAD_UNSPEC ? FI_THREAD_SAFE : info->domain_attr->threading;
    int auto_progress = info->domain_attr->data_progress == FI_PROGRESS_AUTO ||
                        info->domain_attr->control_progress == FI_PROGRESS_AUTO;
    d->locked = d->threading != FI_THREAD_DOMAIN;
    d->av_type = info->domain_attr->av_type;
    d->ip = info->addr_format == FI_SOCKADDR_IN || info->addr_format == FI_SOCKADDR;
    if (d->ip && device == RDM4_DEVICE_SHM) {
        free(d);
        return -FI_EINVAL; /* a shm endpoint has no IP address */
    }

    rf_apply_settings();
    rdm4_ep_attr attr;
    rdm4_ep_attr_init(&attr);
    attr.device = (uint32_t)device;
    attr.progress = auto_progress ? RDM4_PROGRESS_AUTO : RDM4_PROGRESS_MANUAL;
    attr.threading = d->threading == FI_THREAD_DOMAIN && !auto_progress ? RDM4_THREAD_SINGLE : RDM4_THREAD_SAFE;
    if (info->tx_attr && (info->tx_attr->op_flags & FI_DELIVERY_COMPLETE)) {
        attr.flags |= RDM4_EP_DELIVERY_COMPLETE;
    }
    d->attr = attr;
    int32_t r = open_at_source(info, &attr, &d->ep);
    if (r != RDM4_SUCCESS) {
        FI_WARN(&rf_prov, FI_LOG_DOMAIN, "rdm4_ep_open on %s: %s\n", rf_device_name((uint32_t)device),
                rdm4_strerror(r));
        free(d);
        return r == RDM4_ENOMEM ? -FI_ENOMEM : -FI_ENODEV;
    }
    d->info.size = sizeof d->info;
    rdm4_ep_query(d->ep, &d->info);
    pthread_mutex_init(&d->op_lock, NULL);
    pthread_mutex_init(&d->ep_lock, NULL);
    d->epfd = -1;
    for (size_t i = 0; i < RF_OPS; i++) {
        d->ops[i].next_free = i + 1 < RF_OPS ? &d->ops[i + 1] : NULL;
    }
    d->free_ops = &d->ops[0];
    d->fabric = (struct rf_fabric *)fabric;
    atomic_fetch_add(&d->fabric->ref, 1);
    d->fid.fid.fclass = FI_CLASS_DOMAIN;
    d->fid.fid.context = context;
    d->fid.fid.ops = &domain_fi_ops;
    d->fid.ops = &domain_ops;
    d->fid.mr = &domain_mr_ops;
    *dom = &d->fid;
    return 0;
}

/* Memory registration. */

struct rf_mr {
    struct fid_mr fid;
    struct rf_domain *domain;
};

static int mr_close(struct fid *fid)
{
    struct rf_mr *m = (struct rf_mr *)fid;
    int32_t r = rdm4_mr_close(m->domain->ep, m->fid.key);
    if (r != RDM4_SUCCESS) {
        return -rf_errno(r);
    }
    atomic_fetch_sub(&m->domain->ref, 1);
    free(m);
    return 0;
}

static struct fi_ops mr_fi_ops = RF_FI_OPS(mr_close, rf_nosys_bind, rf_nosys_control);

int rf_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key,
              uint64_t flags, struct fid_mr **mr, void *context)
{
    (void)requested_key; /* FI_MR_PROV_KEY: the key is rdm4's */
    if (!fid || fid->fclass != FI_CLASS_DOMAIN || !mr || (!buf && len) || offset || flags) {
        return fid && fid->fclass == FI_CLASS_DOMAIN && flags ? -FI_EBADFLAGS : -FI_EINVAL;
    }
    const uint64_t known = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (access & ~known) {
        return -FI_EINVAL;
    }
    struct rf_domain *d = (struct rf_domain *)fid;
    uint64_t a = RDM4_ACCESS_LOCAL;
    a |= access & FI_REMOTE_READ ? RDM4_ACCESS_REMOTE_READ : 0;
    a |= access & FI_REMOTE_WRITE ? RDM4_ACCESS_REMOTE_WRITE : 0;
    struct rf_mr *m = calloc(1, sizeof *m);
    if (!m) {
        return -FI_ENOMEM;
    }
    uint64_t key;
    int32_t r = rdm4_mr_reg(d->ep, (void *)buf, len, a, &key);
    if (r != RDM4_SUCCESS) {
        free(m);
        return r == RDM4_EOVERFLOW ? -FI_EINVAL : -rf_errno(r);
    }
    m->domain = d;
    m->fid.fid.fclass = FI_CLASS_MR;
    m->fid.fid.context = context;
    m->fid.fid.ops = &mr_fi_ops;
    m->fid.mem_desc = m;
    m->fid.key = key;
    atomic_fetch_add(&d->ref, 1);
    *mr = &m->fid;
    return 0;
}

int rf_mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
               uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
    if (count != 1 || !iov) {
        return -FI_EINVAL; /* mr_iov_limit 1 */
    }
    return rf_mr_reg(fid, iov->iov_base, iov->iov_len, access, offset, requested_key, flags, mr, context);
}

int rf_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
    if (!attr || attr->iface != FI_HMEM_SYSTEM) {
        return -FI_EINVAL;
    }
    return rf_mr_regv(fid, attr->mr_iov, attr->iov_count, attr->access, attr->offset, attr->requested_key, flags,
                      mr, attr->context);
}

/* Atomics that rdm4 applies. */

static int is_int(enum fi_datatype t)
{
    return t <= FI_UINT64 || t == FI_INT128 || t == FI_UINT128;
}

static int is_complex(enum fi_datatype t)
{
    return t == FI_FLOAT_COMPLEX || t == FI_DOUBLE_COMPLEX;
}

static size_t datatype_size(enum fi_datatype t)
{
    static const size_t sizes[] = {
        [FI_INT8] = 1,   [FI_UINT8] = 1,          [FI_INT16] = 2,          [FI_UINT16] = 2,
        [FI_INT32] = 4,  [FI_UINT32] = 4,         [FI_INT64] = 8,          [FI_UINT64] = 8,
        [FI_FLOAT] = 4,  [FI_DOUBLE] = 8,         [FI_FLOAT_COMPLEX] = 8,  [FI_DOUBLE_COMPLEX] = 16,
        [FI_INT128] = 16, [FI_UINT128] = 16,
    };
    return (size_t)t < sizeof sizes / sizeof sizes[0] ? sizes[t] : 0;
}

int rf_atomic_valid(struct rf_domain *d, enum fi_datatype t, enum fi_op op, int kind, size_t *count);
/* `kind`: 0 write, 1 fetch, 2 compare. The count is what one packet of
 * the device holds (the smallest packet, towards any peer). */
int rf_atomic_valid(struct rf_domain *d, enum fi_datatype t, enum fi_op op, int kind, size_t *count)
{
    size_t size = datatype_size(t);
    if (!size) {
        return -FI_EOPNOTSUPP; /* long double and unknown types */
    }
    int ok;
    switch (op) {
    case FI_MIN:
    case FI_MAX:
        ok = kind != 2 && !is_complex(t);
        break;
    case FI_SUM:
    case FI_PROD:
        ok = kind != 2;
        break;
    case FI_LOR:
    case FI_LAND:
    case FI_BOR:
    case FI_BAND:
    case FI_LXOR:
    case FI_BXOR:
        ok = kind != 2 && is_int(t);
        break;
    case FI_ATOMIC_WRITE:
        ok = kind != 2;
        break;
    case FI_ATOMIC_READ:
        ok = kind == 1;
        break;
    case FI_CSWAP:
    case FI_CSWAP_NE:
        ok = kind == 2;
        break;
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT:
        ok = kind == 2 && !is_complex(t);
        break;
    case FI_MSWAP:
        ok = kind == 2 && is_int(t);
        break;
    default:
        ok = 0;
    }
    if (!ok) {
        return -FI_EOPNOTSUPP;
    }
    if (count) {
        /* Room for the operands after the request's headers. */
        size_t room = d->info.mtu > 256 ? d->info.mtu - 256 : 0;
        *count = room / size / (kind == 2 ? 2 : 1);
    }
    return 0;
}

int rf_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op, struct fi_atomic_attr *attr,
                    uint64_t flags)
{
    if (!domain || !attr) {
        return -FI_EINVAL;
    }
    if (flags & ~(uint64_t)(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) {
        return -FI_EBADFLAGS; /* FI_TAGGED too: no atomics on tagged buffers */
    }
    if ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC)) {
        return -FI_EINVAL;
    }
    int kind = flags & FI_COMPARE_ATOMIC ? 2 : flags & FI_FETCH_ATOMIC ? 1 : 0;
    size_t count;
    int r = rf_atomic_valid((struct rf_domain *)domain, datatype, op, kind, &count);
    if (r == 0) {
        attr->size = datatype_size(datatype);
        attr->count = count;
    }
    return r;
}

/* Address vectors.
 *
 * IP addressing (addr_format FI_SOCKADDR_IN: `rf_domain.ip`): entries are
 * IPv4 socket addresses (the udp device's address and port, what
 * fi_getname gives), inserted without asking anyone, as libfabric's IP
 * providers take them: an entry may name a host that is not up yet, or
 * none. An entry's name is asked of its port (rdm4_resolve) at its first
 * use, an operation towards it or a receive directed at it, which waits
 * for the answer up to FI_RDM4_RESOLVE_MS; without one the operation
 * fails (-FI_EHOSTUNREACH) and the entry is asked again at its next use.
 * A message from an entry not asked yet names that entry as its source:
 * a udp sender whose name holds the entry's address and port is it;
 * otherwise (a sender on shared memory, through auto) the entries not
 * asked yet are asked now, each for RF_ADOPT_ASK_MS, RF_ADOPT_MS in all
 * (an entry that gave no name is not asked again this way for
 * RF_ADOPT_MS), until one is the sender; what is left is asked at the
 * sender's next message. A sender looked for in vain once every entry
 * had been asked is not looked for again for RF_MISS_MS, or until an entry
 * is inserted (`rf_av.misses`): its messages name no source
 * (FI_ADDR_NOTAVAIL) meanwhile, at no cost. fi_addrs are the entries'
 * indices, under FI_AV_MAP too. */

/* How long, in ms, the source of one message asks entries for their names,
 * one entry at most, and a sender found in no entry is not looked for. */
#define RF_ADOPT_MS 200
#define RF_ADOPT_ASK_MS 20
#define RF_MISS_MS 10000

static rdm4_addr av_resolve(struct rf_av *av, struct rf_ep *ep, fi_addr_t fi_addr, int ms);

rdm4_addr rf_av_handle(struct rf_av *av, fi_addr_t fi_addr)
{
    if (av->type == FI_AV_MAP && !av->ip) {
        return fi_addr; /* the handle itself */
    }
    if (fi_addr >= av->n) {
        return RDM4_ADDR_UNSPEC;
    }
    rdm4_addr h = av->handle[fi_addr];
    return h != RDM4_ADDR_UNSPEC || !av->ip ? h : av_resolve(av, NULL, fi_addr, 0);
}

static size_t hash_of(rdm4_addr h, size_t hcap)
{
    return (size_t)((h * 0x9E3779B97F4A7C15ull) >> 17) & (hcap - 1);
}

/* Indexes entry `i` of the handles at `h` (none for RDM4_ADDR_UNSPEC). */
static void hidx_put(struct rf_hidx *x, const rdm4_addr *h, size_t i)
{
    if (h[i] == RDM4_ADDR_UNSPEC) {
        return;
    }
    size_t k = hash_of(h[i], x->cap);
    while (x->slot[k]) {
        k = (k + 1) & (x->cap - 1);
    }
    x->slot[k] = i + 1;
}

/* Rebuilds index `x` of the `n` handles at `h`. */
static int hidx_rebuild(struct rf_hidx *x, const rdm4_addr *h, size_t n)
{
    size_t cap = 64;
    while (cap < 2 * n) {
        cap *= 2;
    }
    size_t *slot = calloc(cap, sizeof *slot);
    if (!slot) {
        return -FI_ENOMEM;
    }
    free(x->slot);
    x->slot = slot;
    x->cap = cap;
    for (size_t i = 0; i < n; i++) {
        hidx_put(x, h, i);
    }
    return 0;
}

/* Adds entries [from, to) of the `n` handles at `h` to `x`, or rebuilds
 * it when it would be over half full. */
static void hidx_add(struct rf_hidx *x, const rdm4_addr *h, size_t n, size_t from, size_t to)
{
    int r = 0;
    if (2 * n > x->cap) {
        r = hidx_rebuild(x, h, n);
    } else {
        for (size_t i = from; i < to; i++) {
            hidx_put(x, h, i);
        }
    }
    if (r) {
        FI_WARN(&rf_prov, FI_LOG_AV, "no memory for the address vector's index: sources unknown\n");
    }
}

/* The index of `handle` among the handles at `h` that `x` indexes, or -1. */
static ssize_t hidx_find(const struct rf_hidx *x, const rdm4_addr *h, rdm4_addr handle)
{
    for (size_t k = x->cap ? hash_of(handle, x->cap) : 0; x->cap && x->slot[k]; k = (k + 1) & (x->cap - 1)) {
        size_t i = x->slot[k] - 1;
        if (h[i] == handle) {
            return (ssize_t)i;
        }
    }
    return -1;
}

/* Rebuilds every index of `av` (after entries were removed). */
static void av_rehash(struct rf_av *av)
{
    int r = hidx_rebuild(&av->idx, av->handle, av->n);
    for (size_t v = 0; v < av->nviews; v++) {
        r |= hidx_rebuild(&av->views[v]->idx, av->views[v]->handle, av->n);
    }
    if (r) {
        FI_WARN(&rf_prov, FI_LOG_AV, "no memory for the address vector's index: sources unknown\n");
    }
}

/* Whether fi_addrs are indices (else rdm4 handles: FI_AV_MAP). */
static int by_index(const struct rf_av *av)
{
    return av->type == FI_AV_TABLE || av->ip;
}

/* The entry of `fi_addr`, or -1. Called with the lock held. */
static ssize_t av_entry(struct rf_av *av, fi_addr_t fi_addr)
{
    if (by_index(av)) {
        return fi_addr < av->n && av->state[fi_addr] != RF_ENTRY_FREE ? (ssize_t)fi_addr : -1;
    }
    return fi_addr == RDM4_ADDR_UNSPEC ? -1 : hidx_find(&av->idx, av->handle, fi_addr);
}

/* The entry whose handle in endpoint `ep` is `handle`, or -1. Called with
 * the lock held. */
static ssize_t av_entry_of(struct rf_av *av, struct rf_ep *ep, rdm4_addr handle)
{
    return ep->view ? hidx_find(&ep->view->idx, ep->view->handle, handle) : hidx_find(&av->idx, av->handle, handle);
}

static ssize_t av_adopt(struct rf_av *av, struct rf_ep *ep, rdm4_addr handle);

/* A source for the application: its entry's fi_addr when it has one; a
 * sender never inserted (or removed) has none (FI_ADDR_NOTAVAIL). */
fi_addr_t rf_ep_fi_addr(struct rf_ep *ep, rdm4_addr handle)
{
    struct rf_av *av = ep->av;
    if (handle == RDM4_ADDR_UNSPEC || !av) {
        return FI_ADDR_NOTAVAIL;
    }
    rf_lock(av->domain->locked, &av->lock);
    ssize_t i = av_entry_of(av, ep, handle);
    int adopt = i < 0 && av->unresolved;
    rf_unlock(av->domain->locked, &av->lock);
    if (adopt) {
        i = av_adopt(av, ep, handle);
    }
    if (i < 0) {
        return FI_ADDR_NOTAVAIL;
    }
    return by_index(av) ? (fi_addr_t)i : av->handle[i];
}

rdm4_addr rf_view_handle(struct rf_ep *ep, fi_addr_t fi_addr)
{
    struct rf_av *av = ep->av;
    rf_lock(av->domain->locked, &av->lock);
    ssize_t i = av_entry(av, fi_addr);
    rdm4_addr h = i < 0 ? RDM4_ADDR_UNSPEC : ep->view->handle[i];
    int ask = i >= 0 && av->state[i] == RF_ENTRY_UNRESOLVED;
    rf_unlock(av->domain->locked, &av->lock);
    return ask ? av_resolve(av, ep, fi_addr, 0) : h;
}

/* Inserts entry `i` into view `v`'s endpoint (none for an entry without a
 * name) and indexes it. */
static void view_put(struct rf_av *av, struct rf_avview *v, size_t i)
{
    v->handle[i] = RDM4_ADDR_UNSPEC;
    if (av->state[i] == RF_ENTRY_LIVE && rdm4_av_insert(v->ep->rep, av->raw[i], 1, &v->handle[i]) != 1) {
        FI_WARN(&rf_prov, FI_LOG_AV, "an address the domain took, a later endpoint did not\n");
        v->handle[i] = RDM4_ADDR_UNSPEC;
    }
}

/* Inserts entries [from, to) into view `v`'s endpoint. */
static void view_fill(struct rf_av *av, struct rf_avview *v, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        view_put(av, v, i);
    }
    hidx_add(&v->idx, v->handle, av->n, from, to);
}

int rf_av_view_add(struct rf_av *av, struct rf_ep *ep)
{
    struct rf_avview *v = calloc(1, sizeof *v);
    if (!v) {
        return -FI_ENOMEM;
    }
    v->ep = ep;
    rf_lock(av->domain->locked, &av->lock);
    struct rf_avview **views = realloc(av->views, (av->nviews + 1) * sizeof *views);
    if (views) {
        av->views = views;
        v->handle = malloc((av->cap ? av->cap : 1) * sizeof *v->handle);
    }
    if (!views || !v->handle || hidx_rebuild(&v->idx, v->handle, 0) != 0) {
        rf_unlock(av->domain->locked, &av->lock);
        free(v->handle);
        free(v);
        return -FI_ENOMEM;
    }
    view_fill(av, v, 0, av->n);
    av->views[av->nviews++] = v;
    ep->view = v;
    rf_unlock(av->domain->locked, &av->lock);
    return 0;
}

void rf_av_view_remove(struct rf_av *av, struct rf_ep *ep)
{
    rf_lock(av->domain->locked, &av->lock);
    for (size_t i = 0; i < av->nviews; i++) {
        if (av->views[i]->ep == ep) {
            struct rf_avview *v = av->views[i];
            av->views[i] = av->views[--av->nviews];
            free(v->handle);
            free(v->idx.slot);
            free(v);
            break;
        }
    }
    ep->view = NULL;
    for (size_t m = 0; m < sizeof av->misses / sizeof av->misses[0]; m++) {
        if (av->misses[m].ep == ep) {
            av->misses[m].ep = NULL;
        }
    }
    rf_unlock(av->domain->locked, &av->lock);
}

/* Grows one array of `av` to `cap` elements of `size` bytes. */
static int grow_one(void *arrayp, size_t cap, size_t size)
{
    void *p = realloc(*(void **)arrayp, cap * size);
    if (!p) {
        return -FI_ENOMEM;
    }
    *(void **)arrayp = p;
    return 0;
}

static int av_grow(struct rf_av *av, size_t more)
{
    if (av->n + more <= av->cap) {
        return 0;
    }
    size_t cap = av->cap ? av->cap : 64;
    while (cap < av->n + more) {
        cap *= 2;
    }
    if (grow_one(&av->handle, cap, sizeof *av->handle) || grow_one(&av->raw, cap, sizeof *av->raw) ||
        grow_one(&av->state, cap, sizeof *av->state) || grow_one(&av->sin, cap, sizeof *av->sin) ||
        grow_one(&av->failed_ms, cap, sizeof *av->failed_ms)) {
        return -FI_ENOMEM;
    }
    for (size_t v = 0; v < av->nviews; v++) {
        if (grow_one(&av->views[v]->handle, cap, sizeof *av->views[v]->handle)) {
            return -FI_ENOMEM;
        }
    }
    av->cap = cap;
    return 0;
}

/* Gives unresolved entry `i` its name: inserted into the domain's rdm4
 * endpoint and every view's. Called with the lock held. */
static int av_name(struct rf_av *av, size_t i, const uint8_t name[RF_ADDR_LEN])
{
    rdm4_addr h;
    if (rdm4_av_insert(av->domain->ep, name, 1, &h) != 1) {
        return -1;
    }
    av->handle[i] = h;
    memcpy(av->raw[i], name, RF_ADDR_LEN);
    av->state[i] = RF_ENTRY_LIVE;
    av->unresolved--;
    hidx_add(&av->idx, av->handle, av->n, i, i + 1);
    for (size_t v = 0; v < av->nviews; v++) {
        view_put(av, av->views[v], i);
        hidx_add(&av->views[v]->idx, av->views[v]->handle, av->n, i, i + 1);
    }
    return 0;
}

static int same_sin(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* Asks unresolved entry `fi_addr` for its name (for `ms`, 0: the
 * default), without holding the lock meanwhile. Returns its handle in
 * endpoint `ep`'s view (NULL: the domain's), or RDM4_ADDR_UNSPEC. */
static rdm4_addr av_resolve(struct rf_av *av, struct rf_ep *ep, fi_addr_t fi_addr, int ms)
{
    int locked = av->domain->locked;
    rf_lock(locked, &av->lock);
    size_t i = (size_t)fi_addr;
    int ask = i < av->n && av->state[i] == RF_ENTRY_UNRESOLVED;
    struct sockaddr_in sin = ask ? av->sin[i] : (struct sockaddr_in){ 0 };
    rf_unlock(locked, &av->lock);
    if (ask) {
        char host[INET_ADDRSTRLEN], port[8];
        inet_ntop(AF_INET, &sin.sin_addr, host, sizeof host);
        snprintf(port, sizeof port, "%u", ntohs(sin.sin_port));
        uint8_t name[RF_ADDR_LEN];
        int32_t r = rf_resolve(host, port, ms, name);
        rf_lock(locked, &av->lock);
        /* Still the same entry, not named meanwhile by another thread? */
        if (i < av->n && av->state[i] == RF_ENTRY_UNRESOLVED && same_sin(&av->sin[i], &sin) &&
            (r != RDM4_SUCCESS || av_name(av, i, name) != 0)) {
            av->failed_ms[i] = now_ms();
        }
    } else {
        rf_lock(locked, &av->lock);
    }
    rdm4_addr h = i >= av->n ? RDM4_ADDR_UNSPEC : ep && ep->view ? ep->view->handle[i] : av->handle[i];
    rf_unlock(locked, &av->lock);
    return h;
}

/* The unresolved entry that sender `handle` of endpoint `ep` is, named
 * now; or -1 (see "IP addressing" above). */
static ssize_t av_adopt(struct rf_av *av, struct rf_ep *ep, rdm4_addr handle)
{
    uint8_t raw[RF_ADDR_LEN];
    size_t len = sizeof raw;
    struct sockaddr_in sin;
    if (rdm4_av_lookup(ep->rep, handle, raw, &len) != RDM4_SUCCESS) {
        return -1;
    }
    int locked = av->domain->locked;
    ssize_t found = -1;
    rf_lock(locked, &av->lock);
    size_t m = hash_of(handle, sizeof av->misses / sizeof av->misses[0]);
    if (av->misses[m].ep == ep && av->misses[m].handle == handle && av->misses[m].gen == av->gen &&
        now_ms() - av->misses[m].at_ms < RF_MISS_MS) {
        rf_unlock(locked, &av->lock);
        return -1; /* looked for in vain among these entries already */
    }
    if (rf_name_sin(raw, &sin) == 0) {
        for (size_t j = 0; j < av->n && found < 0; j++) {
            if (av->state[j] == RF_ENTRY_UNRESOLVED && same_sin(&av->sin[j], &sin) && av_name(av, j, raw) == 0) {
                found = av_entry_of(av, ep, handle);
            }
        }
    }
    /* Ask the others, one at a time, until the sender is found, for
     * RF_ADOPT_MS in all; `every`: each entry left has been asked (now or
     * before) and gave no name. */
    double end = now_ms() + RF_ADOPT_MS;
    int every = 1;
    for (size_t j = 0; j < av->n && found < 0; j++) {
        if (av->state[j] != RF_ENTRY_UNRESOLVED || now_ms() - av->failed_ms[j] < RF_ADOPT_MS) {
            continue;
        }
        int left = (int)(end - now_ms());
        if (left < 1) {
            every &= av->failed_ms[j] > 0;
            continue;
        }
        rf_unlock(locked, &av->lock);
        av_resolve(av, ep, j, left < RF_ADOPT_ASK_MS ? left : RF_ADOPT_ASK_MS);
        rf_lock(locked, &av->lock);
        found = av_entry_of(av, ep, handle);
    }
    if (found < 0 && every) {
        av->misses[m].ep = ep;
        av->misses[m].handle = handle;
        av->misses[m].gen = av->gen;
        av->misses[m].at_ms = now_ms();
    }
    rf_unlock(locked, &av->lock);
    return found;
}

/* Entry `i`'s address from `a` (RF_ADDR_LEN bytes, or an IPv4 socket
 * address under IP addressing): 0, or the positive FI_E* error. Called
 * with the lock held. */
static int av_put(struct rf_av *av, size_t i, const uint8_t *a)
{
    if (av->ip) {
        struct sockaddr_in sin;
        memcpy(&sin, a, sizeof sin);
        if (sin.sin_family != AF_INET || sin.sin_port == 0 || sin.sin_addr.s_addr == htonl(INADDR_ANY)) {
            return FI_EINVAL;
        }
        av->sin[i] = sin;
        av->handle[i] = RDM4_ADDR_UNSPEC;
        av->state[i] = RF_ENTRY_UNRESOLVED;
        av->failed_ms[i] = -1e9;
        av->unresolved++;
        av->gen++;
        return 0;
    }
    int32_t s = rdm4_av_insert(av->domain->ep, a, 1, &av->handle[i]);
    if (s != 1) {
        return rf_errno(s);
    }
    memcpy(av->raw[i], a, RF_ADDR_LEN);
    av->state[i] = RF_ENTRY_LIVE;
    return 0;
}

/* Whether an insert with `flags` is taken: 0 or the -FI_E* code; `*event`
 * set when it reports by the event queue (FI_EVENT, on the call or the
 * vector). */
static int av_flags(struct rf_av *av, uint64_t flags, int *event)
{
    if (flags & ~(uint64_t)(FI_EVENT | FI_SYNC_ERR | FI_MORE)) {
        return -FI_EBADFLAGS;
    }
    *event = (flags & FI_EVENT) || av->event;
    return *event && !av->eq ? -FI_ENOEQ : 0;
}

/* Reports entry `i`'s error `err` (positive FI_E*) by the event queue,
 * before the insert's completion (fi_av(3)). */
static void av_event_error(struct rf_av *av, void *context, size_t i, int err)
{
    struct fi_eq_err_entry e = { .fid = &av->fid.fid, .context = context, .data = i, .err = err };
    rf_eq_post(av->eq, FI_AV_COMPLETE, &e, sizeof e, 1);
}

/* The insert's completion: `done` entries inserted. */
static int av_event_done(struct rf_av *av, void *context, size_t done)
{
    struct fi_eq_entry e = { .fid = &av->fid.fid, .context = context, .data = done };
    rf_eq_post(av->eq, FI_AV_COMPLETE, &e, sizeof e, 0);
    return 0;
}

/* Inserts `count` addresses at `addr`: how many were taken, or a -FI_E*
 * code; each one's fi_addr (FI_ADDR_NOTAVAIL when refused) into
 * `fi_addr`, its error into `errs`, and by the event queue with
 * `context` when `event`. */
static int av_insert_some(struct rf_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, int *errs,
                          int event, void *context)
{
    size_t stride = av->ip ? sizeof(struct sockaddr_in) : RF_ADDR_LEN;
    rf_lock(av->domain->locked, &av->lock);
    int r = av_grow(av, count);
    if (r) {
        rf_unlock(av->domain->locked, &av->lock);
        return r;
    }
    size_t done = 0, from = av->n;
    for (size_t i = 0; i < count; i++) {
        int err = av_put(av, av->n, (const uint8_t *)addr + i * stride);
        fi_addr_t out = FI_ADDR_NOTAVAIL;
        if (!err) {
            out = by_index(av) ? av->n : av->handle[av->n];
            av->n++;
            done++;
        } else if (event) {
            av_event_error(av, context, i, err);
        }
        if (fi_addr) {
            fi_addr[i] = out;
        }
        if (errs) {
            errs[i] = err;
        }
    }
    hidx_add(&av->idx, av->handle, av->n, from, av->n);
    for (size_t v = 0; done && v < av->nviews; v++) {
        view_fill(av, av->views[v], from, av->n);
    }
    rf_unlock(av->domain->locked, &av->lock);
    return (int)done;
}

static int av_insert(struct fid_av *fid, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
                     void *context)
{
    struct rf_av *av = (struct rf_av *)fid;
    int event;
    int r = !addr && count ? -FI_EINVAL : av_flags(av, flags, &event);
    if (r) {
        return r;
    }
    r = av_insert_some(av, addr, count, fi_addr, flags & FI_SYNC_ERR ? context : NULL, event, context);
    return r >= 0 && event ? av_event_done(av, context, (size_t)r) : r;
}

/* `nodecnt` hosts from `node` (an IPv4 address counted up, or one host
 * name) times `svccnt` ports from `service` (a number counted up), node
 * by node: each name asked of its port and inserted (under IP addressing:
 * each address and port inserted, to be asked at first use); one that
 * gives none is FI_ADDR_NOTAVAIL (its error in FI_SYNC_ERR's array). */
static int av_insertsym(struct fid_av *fid, const char *node, size_t nodecnt, const char *service, size_t svccnt,
                        fi_addr_t *fi_addr, uint64_t flags, void *context)
{
    struct in_addr ip;
    char *end = NULL;
    unsigned long port = service ? strtoul(service, &end, 10) : 0;
    int ipv4 = node && inet_pton(AF_INET, node, &ip) == 1;
    if (!node || !service || !*service || *end || port == 0 || port + svccnt - 1 > 65535 || !nodecnt || !svccnt ||
        (nodecnt > 1 && !ipv4) || nodecnt > 65536 || svccnt > 65536) {
        return -FI_EINVAL;
    }
    struct rf_av *av = (struct rf_av *)fid;
    int event;
    int bad = av_flags(av, flags, &event);
    if (bad) {
        return bad;
    }
    if (av->ip && !ipv4) {
        /* A host name: its IPv4 address. */
        struct addrinfo want = { .ai_family = AF_INET, .ai_socktype = SOCK_DGRAM }, *got = NULL;
        if (getaddrinfo(node, NULL, &want, &got) != 0 || !got) {
            return -FI_EINVAL;
        }
        ip = ((struct sockaddr_in *)got->ai_addr)->sin_addr;
        freeaddrinfo(got);
        ipv4 = 1;
    }
    int *errs = flags & FI_SYNC_ERR ? context : NULL;
    int done = 0;
    for (size_t n = 0; n < nodecnt; n++) {
        char host[INET_ADDRSTRLEN];
        const char *h = node;
        struct in_addr a = { htonl(ntohl(ip.s_addr) + (uint32_t)n) };
        if (ipv4) {
            h = inet_ntop(AF_INET, &a, host, sizeof host);
        }
        for (size_t k = 0; k < svccnt; k++) {
            size_t i = n * svccnt + k;
            char svc[8];
            snprintf(svc, sizeof svc, "%lu", port + k);
            uint8_t name[RF_ADDR_LEN];
            struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)(port + k)), .sin_addr = a };
            int32_t why = av->ip ? RDM4_SUCCESS : rf_resolve(h, svc, 0, name);
            int r = why == RDM4_SUCCESS ? 0 : -FI_EINVAL;
            fi_addr_t out = FI_ADDR_NOTAVAIL;
            if (r == 0) {
                r = av_insert_some(av, av->ip ? (const void *)&sin : name, 1, &out, NULL, 0, NULL) == 1 ? 0
                                                                                                   : -FI_EINVAL;
            }
            done += r == 0;
            if (r && event) {
                av_event_error(av, context, i, why != RDM4_SUCCESS ? rf_errno(why) : FI_EINVAL);
            }
            if (fi_addr) {
                fi_addr[i] = r == 0 ? out : FI_ADDR_NOTAVAIL;
            }
            if (errs) {
                errs[i] = r == 0 ? 0 : why != RDM4_SUCCESS ? rf_errno(why) : FI_EINVAL;
            }
        }
    }
    return event ? av_event_done(av, context, (size_t)done) : done;
}

/* Inserts the endpoint bound at `node` and `service`: its name is asked
 * of the port (rdm4_resolve), then inserted as fi_av_insert does. */
static int av_insertsvc(struct fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr,
                        uint64_t flags, void *context)
{
    return av_insertsym(av, node, 1, service, 1, fi_addr, flags, context);
}

/* Removes entry `k` from the handles `h` of rdm4 endpoint `rep` (the
 * domain's, or a view's): the same address inserted twice has one handle,
 * removed from rdm4 with its last entry. FI_AV_MAP (without IP
 * addressing) moves the last entry into the hole (the caller then drops
 * the last). */
static void av_remove_entry(struct rf_av *av, rdm4_addr *h, rdm4_ep *rep, size_t k)
{
    rdm4_addr gone = h[k];
    h[k] = RDM4_ADDR_UNSPEC;
    int last = gone != RDM4_ADDR_UNSPEC;
    for (size_t j = 0; j < av->n && last; j++) {
        last = h[j] != gone;
    }
    if (last) {
        rdm4_av_remove(rep, &gone, 1);
    }
    if (!by_index(av)) {
        h[k] = h[av->n - 1];
    }
}

static int av_remove(struct fid_av *fid, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
    struct rf_av *av = (struct rf_av *)fid;
    if (flags) {
        return -FI_EBADFLAGS;
    }
    if (!fi_addr && count) {
        return -FI_EINVAL;
    }
    rf_lock(av->domain->locked, &av->lock);
    int r = 0;
    for (size_t i = 0; i < count; i++) {
        if (av_entry(av, fi_addr[i]) < 0) {
            r = -FI_EINVAL;
        }
    }
    for (size_t i = 0; i < count && r == 0; i++) {
        ssize_t k = av_entry(av, fi_addr[i]);
        if (k < 0) {
            continue; /* named twice in the list */
        }
        av_remove_entry(av, av->handle, av->domain->ep, (size_t)k);
        for (size_t v = 0; v < av->nviews; v++) {
            av_remove_entry(av, av->views[v]->handle, av->views[v]->ep->rep, (size_t)k);
        }
        av->unresolved -= av->state[k] == RF_ENTRY_UNRESOLVED;
        av->state[k] = RF_ENTRY_FREE;
        if (!by_index(av)) {
            memcpy(av->raw[k], av->raw[av->n - 1], RF_ADDR_LEN);
            av->state[k] = av->state[av->n - 1];
            av->n--;
            /* FI_AV_MAP finds entries by the index: rebuilt before the next. */
            av_rehash(av);
        }
    }
    if (r == 0 && count && by_index(av)) {
        av_rehash(av);
    }
    rf_unlock(av->domain->locked, &av->lock);
    return r;
}

static int av_lookup(struct fid_av *fid, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
    struct rf_av *av = (struct rf_av *)fid;
    if (!addrlen) {
        return -FI_EINVAL;
    }
    rf_lock(av->domain->locked, &av->lock);
    ssize_t k = av_entry(av, fi_addr);
    int r = 0;
    if (k < 0) {
        r = -FI_EINVAL;
    } else {
        const void *a = av->ip ? (const void *)&av->sin[k] : av->raw[k];
        size_t len = av->ip ? sizeof av->sin[k] : RF_ADDR_LEN;
        if (addr) {
            memcpy(addr, a, *addrlen < len ? *addrlen : len);
        }
        r = addr && *addrlen >= len ? 0 : -FI_ETOOSMALL;
        *addrlen = len;
    }
    rf_unlock(av->domain->locked, &av->lock);
    return r;
}

static const char *av_straddr(struct fid_av *fid, const void *addr, char *buf, size_t *len)
{
    struct rf_av *av = (struct rf_av *)fid;
    if (!addr || !buf || !len) {
        return NULL;
    }
    char tmp[256];
    size_t n = sizeof tmp;
    if (av && av->ip) {
        rf_sin_str(addr, tmp, sizeof tmp);
        n = strlen(tmp) + 1;
    } else if (rdm4_av_straddr(addr, tmp, &n) != RDM4_SUCCESS) {
        return NULL;
    }
    if (*len) {
        snprintf(buf, *len, "%s", tmp);
    }
    *len = n;
    return buf;
}

static int av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    struct rf_av *av = (struct rf_av *)fid;
    if (!bfid || bfid->fclass != FI_CLASS_EQ || flags) {
        return -FI_EINVAL;
    }
    av->eq = (struct rf_eq *)bfid;
    atomic_fetch_add(&av->eq->ref, 1);
    return 0;
}

static int av_close(struct fid *fid)
{
    struct rf_av *av = (struct rf_av *)fid;
    if (atomic_load(&av->ref) > 0) {
        return -FI_EBUSY;
    }
    if (av->eq) {
        atomic_fetch_sub(&av->eq->ref, 1);
    }
    atomic_fetch_sub(&av->domain->ref, 1);
    pthread_mutex_destroy(&av->lock);
    free(av->handle);
    free(av->raw);
    free(av->state);
    free(av->sin);
    free(av->failed_ms);
    free(av->idx.slot);
    free(av->views);
    free(av);
    return 0;
}

static struct fi_ops av_fi_ops = RF_FI_OPS(av_close, av_bind, rf_nosys_control);

static struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av),
    .insert = av_insert,
    .insertsvc = av_insertsvc,
    .insertsym = av_insertsym,
    .remove = av_remove,
    .lookup = av_lookup,
    .straddr = av_straddr,
    .av_set = (void *)rf_nosys_int,
};

int rf_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **avp, void *context)
{
    if (!domain || !attr || !avp) {
        return -FI_EINVAL;
    }
    struct rf_domain *d = (struct rf_domain *)domain;
    enum fi_av_type type = attr->type == FI_AV_UNSPEC ? (d->av_type ? d->av_type : FI_AV_MAP) : attr->type;
    if ((type != FI_AV_MAP && type != FI_AV_TABLE) || attr->rx_ctx_bits || attr->name ||
        (attr->flags & ~(uint64_t)(FI_EVENT | FI_SYMMETRIC))) {
        return attr->flags & ~(uint64_t)(FI_EVENT | FI_SYMMETRIC) ? -FI_EBADFLAGS : -FI_EINVAL;
    }
    struct rf_av *av = calloc(1, sizeof *av);
    if (!av) {
        return -FI_ENOMEM;
    }
    av->domain = d;
    av->type = type;
    av->ip = d->ip;
    av->event = (attr->flags & FI_EVENT) != 0;
    pthread_mutex_init(&av->lock, NULL);
    if (attr->count && av_grow(av, attr->count) != 0) {
        av->fid.fid.fclass = FI_CLASS_AV;
        atomic_fetch_add(&d->ref, 1);
        av_close(&av->fid.fid);
        return -FI_ENOMEM;
    }
    attr->type = type;
    av->fid.fid.fclass = FI_CLASS_AV;
    av->fid.fid.context = context;
    av->fid.fid.ops = &av_fi_ops;
    av->fid.ops = &av_ops;
    atomic_fetch_add(&d->ref, 1);
    *avp = &av->fid;
    return 0;
}

/* Completion queues. */

void rf_cq_push(struct rf_cq *cq, const struct rf_cqe *e)
{
    rf_lock(cq->domain->locked, &cq->lock);
    if (cq->count == cq->cap) {
        size_t cap = cq->cap * 2;
        struct rf_cqe *ring = malloc(cap * sizeof *ring);
        if (!ring) {
            /* Never drop a completion: wait for memory. */
            rf_unlock(cq->domain->locked, &cq->lock);
            FI_WARN(&rf_prov, FI_LOG_CQ, "no memory for a completion queue of %zu entries\n", cap);
            abort();
        }
        for (size_t i = 0; i < cq->count; i++) {
            ring[i] = cq->ring[(cq->head + i) % cq->cap];
        }
        free(cq->ring);
        cq->ring = ring;
        cq->cap = cap;
        cq->head = 0;
    }
    cq->ring[(cq->head + cq->count) % cq->cap] = *e;
    cq->count++;
    rf_unlock(cq->domain->locked, &cq->lock);
}

static uint64_t fi_flags_of(uint64_t f)
{
    uint64_t o = 0;
    o |= f & RDM4_CQ_SEND ? FI_SEND : 0;
    o |= f & RDM4_CQ_RECV ? FI_RECV : 0;
    o |= f & RDM4_CQ_MSG ? FI_MSG : 0;
    o |= f & RDM4_CQ_TAGGED ? FI_TAGGED : 0;
    o |= f & RDM4_CQ_RMA ? FI_RMA : 0;
    o |= f & RDM4_CQ_READ ? FI_READ : 0;
    o |= f & RDM4_CQ_WRITE ? FI_WRITE : 0;
    o |= f & RDM4_CQ_ATOMIC ? FI_ATOMIC : 0;
    o |= f & RDM4_CQ_REMOTE_CQ_DATA ? FI_REMOTE_CQ_DATA : 0;
    o |= f & RDM4_CQ_REMOTE_WRITE ? FI_REMOTE_WRITE | FI_RMA : 0;
    return o;
}

/* Where a reader of a completion queue takes entries straight from rdm4:
 * successes for `cq` go to `buf` (up to `count`, sources to `src`) rather
 * than through its ring. */
struct direct {
    struct rf_cq *cq;
    void *buf;
    size_t count, n;
    fi_addr_t *src;
};

/* One rdm4 completion: to its queue and counter. */
static void dispatch(struct rf_domain *d, struct rf_ep *ep, const rdm4_cqe *c, struct direct *to)
{
    int report = 1;
    void *context = c->context;
    int32_t status = c->status;
    uint64_t len = c->len;
    void *buf = c->buf;
    uint64_t more_flags = 0;
    struct rf_op *op = NULL;
    if (context == &d->silent) {
        report = 0;
        context = NULL;
    } else if (!rf_is_op(d, context)) {
        /* the application's context */
    } else if (((struct rf_op *)context)->kind == RF_OP_MULTI) {
        rf_mrecv_done(ep, context, c, &buf, &more_flags, &context);
        report = context != &d->silent;
        context = report ? context : NULL;
    } else {
        op = context;
        report = op->report;
        context = op->context;
        if (op->kind == RF_OP_SCATTER && status == RDM4_SUCCESS) {
            const char *from = (const char *)op->bounce + op->scatter_off;
            for (size_t i = 0; i < op->iov_count; i++) {
                memcpy(op->iov[i].iov_base, from, op->iov[i].iov_len);
                from += op->iov[i].iov_len;
            }
        }
        rf_op_put(d, op);
    }
    if (atomic_load(&ep->ndiscarding) && (status == RDM4_ETRUNC || (status == RDM4_SUCCESS && len == 0)) &&
        rf_discard_done(ep, context)) {
        status = RDM4_SUCCESS; /* a claimed message received into nothing */
        len = 0;
    }
    int rx = (c->flags & (RDM4_CQ_RECV | RDM4_CQ_REMOTE_WRITE)) != 0;
    enum rf_cntr_slot slot = rx ? RF_CNTR_RECV
                             : c->flags & RDM4_CQ_SEND ? RF_CNTR_SEND
                             : (c->flags & RDM4_CQ_READ) ? RF_CNTR_READ
                                                         : RF_CNTR_WRITE;
    if (c->flags & RDM4_CQ_REMOTE_WRITE) {
        slot = RF_CNTR_SLOTS; /* no remote counters (FI_RMA_EVENT) */
    }
    if (slot < RF_CNTR_SLOTS && ep->cntr[slot]) {
        atomic_fetch_add(status == RDM4_SUCCESS ? &ep->cntr[slot]->value : &ep->cntr[slot]->err, 1);
    }
    struct rf_cq *cq = rx ? ep->rx_cq : ep->tx_cq;
    if (!cq || (!report && status == RDM4_SUCCESS)) {
        return;
    }
    if (to && cq == to->cq && status == RDM4_SUCCESS && to->n < to->count) {
        struct fi_cq_tagged_entry t = { context, fi_flags_of(c->flags) | more_flags, len, buf, c->data, c->tag };
        memcpy((char *)to->buf + to->n * cq->entry_size, &t, cq->entry_size);
        if (to->src) {
            to->src[to->n] = rx ? rf_ep_fi_addr(ep, c->src) : FI_ADDR_NOTAVAIL;
        }
        to->n++;
        return;
    }
    struct rf_cqe e = { 0 };
    e.e.op_context = report ? context : NULL;
    e.e.flags = fi_flags_of(c->flags) | more_flags;
    e.e.len = len;
    e.e.buf = buf;
    e.e.data = c->data;
    e.e.tag = c->tag;
    e.src = rx ? c->src : RDM4_ADDR_UNSPEC;
    e.ep = ep;
    e.src_fi = FI_ADDR_NOTAVAIL;
    if (status != RDM4_SUCCESS) {
        if (status != RDM4_ECANCELED && status != RDM4_ETRUNC) {
            FI_WARN(&rf_prov, FI_LOG_CQ, "operation failed: %s (flags %#llx, detail %u)\n", rdm4_strerror(status),
                    (unsigned long long)c->flags, c->detail);
        }
        e.err = rf_errno(status);
        e.prov_errno = status;
        e.olen = c->status == RDM4_ETRUNC ? c->olen - len : 0;
    }
    rf_cq_push(cq, &e);
}

/* Takes the completions of one endpoint. */
static int progress_ep(struct rf_domain *d, struct rf_ep *ep, struct direct *to)
{
    rdm4_cqe c[32];
    int total = 0;
    for (;;) {
        int32_t n = rdm4_poll(ep->rep, c, 32);
        if (n < 0) {
            return -rf_errno(n);
        }
        for (int32_t i = 0; i < n; i++) {
            dispatch(d, ep, &c[i], to);
        }
        total += n;
        if (n < 32 || (to && to->n == to->count)) {
            return total;
        }
    }
}

static int progress(struct rf_domain *d, struct direct *to)
{
    int total = 0;
    for (struct rf_ep *ep = atomic_load_explicit(&d->endpoints, memory_order_acquire); ep; ep = ep->next) {
        if (!ep->enabled) {
            continue;
        }
        int n = progress_ep(d, ep, to);
        if (n < 0) {
            return n;
        }
        total += n;
        if (to && to->n == to->count) {
            break;
        }
    }
    return total;
}

int rf_progress(struct rf_domain *d)
{
    return progress(d, NULL);
}

/* Whether the domain has endpoints with rdm4 endpoints of their own. */
static int has_later(struct rf_domain *d)
{
    for (struct rf_ep *ep = atomic_load_explicit(&d->endpoints, memory_order_acquire); ep; ep = ep->next) {
        if (ep->own) {
            return 1;
        }
    }
    return 0;
}

/* Sleeps up to `ms` until one of the domain's rdm4 endpoints has work. */
static void domain_wait(struct rf_domain *d, int ms)
{
    if (!has_later(d)) {
        rdm4_wait(d->ep, ms);
        return;
    }
    struct pollfd fds[RF_EP_CNT + 1];
    nfds_t n = 0;
    pthread_mutex_lock(&d->ep_lock);
    rdm4_ep *reps[RF_EP_CNT + 1];
    reps[n++] = d->ep;
    for (struct rf_ep *ep = d->endpoints; ep && n < RF_EP_CNT + 1; ep = ep->next) {
        if (ep->own) {
            reps[n++] = ep->rep;
        }
    }
    int ready = 1;
    for (nfds_t i = 0; i < n && ready; i++) {
        ready = rdm4_trywait(reps[i]) == RDM4_SUCCESS;
        fds[i] = (struct pollfd){ .fd = rdm4_ep_fd(reps[i]), .events = POLLIN };
    }
    pthread_mutex_unlock(&d->ep_lock);
    if (ready) {
        (void)poll(fds, n, ms);
    }
}

/* The domain's wait descriptor: an epoll set of its rdm4 endpoints'
 * descriptors (readable while one of them is), made at the first call. */
static int domain_fd(struct rf_domain *d)
{
    pthread_mutex_lock(&d->ep_lock);
    if (d->epfd < 0) {
        int fd = epoll_create1(EPOLL_CLOEXEC);
        int r = fd >= 0 ? rf_epoll_add(fd, d->ep) : -FI_EMFILE;
        for (struct rf_ep *ep = d->endpoints; ep && r == 0; ep = ep->next) {
            r = ep->own ? rf_epoll_add(fd, ep->rep) : 0;
        }
        if (r == 0) {
            d->epfd = fd;
        } else if (fd >= 0) {
            close(fd);
        }
    }
    int fd = d->epfd;
    pthread_mutex_unlock(&d->ep_lock);
    return fd < 0 ? -FI_EMFILE : fd;
}

int rf_epoll_add(int epfd, rdm4_ep *rep)
{
    int32_t fd = rdm4_ep_fd(rep);
    if (fd < 0) {
        return -rf_errno(fd);
    }
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -FI_EMFILE;
}

/* Copies up to `count` successes from the head of `cq`; -FI_EAVAIL when
 * an error is first; -FI_EAGAIN when empty. */
static ssize_t cq_take(struct rf_cq *cq, void *buf, size_t count, fi_addr_t *src)
{
    ssize_t n = 0;
    rf_lock(cq->domain->locked, &cq->lock);
    while ((size_t)n < count && cq->count) {
        struct rf_cqe *e = &cq->ring[cq->head];
        if (e->err) {
            break;
        }
        memcpy((char *)buf + (size_t)n * cq->entry_size, &e->e, cq->entry_size);
        if (src) {
            src[n] = e->ep ? rf_ep_fi_addr(e->ep, e->src) : e->src_fi;
        }
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
        n++;
    }
    int err_first = n == 0 && cq->count && cq->ring[cq->head].err;
    rf_unlock(cq->domain->locked, &cq->lock);
    return n ? n : err_first ? -FI_EAVAIL : -FI_EAGAIN;
}

void rf_cq_forget(struct rf_cq *cq, struct rf_ep *ep)
{
    rf_lock(cq->domain->locked, &cq->lock);
    for (size_t i = 0; i < cq->count; i++) {
        struct rf_cqe *e = &cq->ring[(cq->head + i) % cq->cap];
        if (e->ep == ep) {
            e->src_fi = rf_ep_fi_addr(ep, e->src);
            e->ep = NULL;
        }
    }
    rf_unlock(cq->domain->locked, &cq->lock);
}

static ssize_t cq_readfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src)
{
    struct rf_cq *cq = (struct rf_cq *)fid;
    if (!buf && count) {
        return -FI_EINVAL;
    }
    if (!cq->count && count) {
        /* Nothing waits in the ring: entries go straight to the caller. */
        struct direct to = { cq, buf, count, 0, src };
        int r = progress(cq->domain, &to);
        if (to.n) {
            return (ssize_t)to.n;
        }
        if (r < 0) {
            return r;
        }
        if (!cq->count) {
            return -FI_EAGAIN;
        }
    }
    return cq_take(cq, buf, count, src);
}

static ssize_t cq_read(struct fid_cq *fid, void *buf, size_t count)
{
    return cq_readfrom(fid, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *fid, struct fi_cq_err_entry *buf, uint64_t flags)
{
    struct rf_cq *cq = (struct rf_cq *)fid;
    if (!buf || flags) {
        return flags ? -FI_EBADFLAGS : -FI_EINVAL;
    }
    if (!cq->count) {
        rf_progress(cq->domain);
    }
    ssize_t r = -FI_EAGAIN;
    rf_lock(cq->domain->locked, &cq->lock);
    if (cq->count && cq->ring[cq->head].err) {
        struct rf_cqe *e = &cq->ring[cq->head];
        buf->op_context = e->e.op_context;
        buf->flags = e->e.flags;
        buf->len = e->e.len;
        buf->buf = e->e.buf;
        buf->data = e->e.data;
        buf->tag = e->e.tag;
        buf->olen = e->olen;
        buf->err = e->err;
        buf->prov_errno = e->prov_errno;
        buf->err_data = NULL;
        buf->err_data_size = 0;
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
        r = 1;
    }
    rf_unlock(cq->domain->locked, &cq->lock);
    return r;
}

static ssize_t cq_sreadfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src, const void *cond,
                            int timeout)
{
    struct rf_cq *cq = (struct rf_cq *)fid;
    (void)cond;
    if (cq->wait_obj == FI_WAIT_NONE) {
        return -FI_EINVAL;
    }
    double end = timeout < 0 ? 0 : now_ms() + timeout;
    for (;;) {
        ssize_t r = cq_readfrom(fid, buf, count, src);
        if (r != -FI_EAGAIN) {
            return r;
        }
        if (atomic_exchange(&cq->signaled, 0)) {
            return -FI_EAGAIN;
        }
        double left = timeout < 0 ? 100 : end - now_ms();
        if (left <= 0) {
            return -FI_EAGAIN;
        }
        /* Sleep in slices, so that fi_cq_signal is noticed. */
        domain_wait(cq->domain, left < 100 ? (int)left + 1 : 100);
    }
}

static ssize_t cq_sread(struct fid_cq *fid, void *buf, size_t count, const void *cond, int timeout)
{
    return cq_sreadfrom(fid, buf, count, NULL, cond, timeout);
}

static int cq_signal(struct fid_cq *fid)
{
    atomic_store(&((struct rf_cq *)fid)->signaled, 1);
    return 0;
}

static const char *cq_strerror(struct fid_cq *fid, int prov_errno, const void *err_data, char *buf, size_t len)
{
    (void)fid, (void)err_data;
    return rf_strerror(prov_errno, buf, len);
}

static int cq_control(struct fid *fid, int command, void *arg)
{
    struct rf_cq *cq = (struct rf_cq *)fid;
    if (command != FI_GETWAIT) {
        return -FI_ENOSYS;
    }
    if (cq->wait_obj != FI_WAIT_FD || !arg) {
        return -FI_EINVAL;
    }
    int fd = domain_fd(cq->domain);
    if (fd < 0) {
        return fd;
    }
    *(int *)arg = fd;
    return 0;
}

static int cq_close(struct fid *fid)
{
    struct rf_cq *cq = (struct rf_cq *)fid;
    if (atomic_load(&cq->ref) > 0) {
        return -FI_EBUSY;
    }
    atomic_fetch_sub(&cq->domain->ref, 1);
    pthread_mutex_destroy(&cq->lock);
    free(cq->ring);
    free(cq);
    return 0;
}

static struct fi_ops cq_fi_ops = RF_FI_OPS(cq_close, rf_nosys_bind, cq_control);

static struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

int rf_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cqp, void *context)
{
    if (!domain || !attr || !cqp) {
        return -FI_EINVAL;
    }
    static const size_t sizes[] = {
        [FI_CQ_FORMAT_UNSPEC] = sizeof(struct fi_cq_entry),
        [FI_CQ_FORMAT_CONTEXT] = sizeof(struct fi_cq_entry),
        [FI_CQ_FORMAT_MSG] = sizeof(struct fi_cq_msg_entry),
        [FI_CQ_FORMAT_DATA] = sizeof(struct fi_cq_data_entry),
        [FI_CQ_FORMAT_TAGGED] = sizeof(struct fi_cq_tagged_entry),
    };
    if ((size_t)attr->format >= sizeof sizes / sizeof sizes[0]) {
        return -FI_EINVAL;
    }
    switch (attr->wait_obj) {
    case FI_WAIT_NONE:
    case FI_WAIT_UNSPEC:
    case FI_WAIT_FD:
        break;
    default:
        return -FI_EINVAL;
    }
    if (attr->flags & ~(uint64_t)FI_AFFINITY || attr->wait_cond != FI_CQ_COND_NONE) {
        return -FI_EINVAL;
    }
    struct rf_cq *cq = calloc(1, sizeof *cq);
    if (!cq) {
        return -FI_ENOMEM;
    }
    cq->cap = attr->size ? attr->size : 1024;
    cq->ring = malloc(cq->cap * sizeof *cq->ring);
    if (!cq->ring) {
        free(cq);
        return -FI_ENOMEM;
    }
    cq->domain = (struct rf_domain *)domain;
    cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
    attr->format = cq->format;
    cq->entry_size = sizes[cq->format];
    cq->wait_obj = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
    pthread_mutex_init(&cq->lock, NULL);
    cq->fid.fid.fclass = FI_CLASS_CQ;
    cq->fid.fid.context = context;
    cq->fid.fid.ops = &cq_fi_ops;
    cq->fid.ops = &cq_ops;
    atomic_fetch_add(&cq->domain->ref, 1);
    *cqp = &cq->fid;
    return 0;
}

/* Counters. */

static uint64_t cntr_read(struct fid_cntr *fid)
{
    struct rf_cntr *c = (struct rf_cntr *)fid;
    rf_progress(c->domain);
    return atomic_load(&c->value);
}

static uint64_t cntr_readerr(struct fid_cntr *fid)
{
    struct rf_cntr *c = (struct rf_cntr *)fid;
    rf_progress(c->domain);
    return atomic_load(&c->err);
}

static int cntr_add(struct fid_cntr *fid, uint64_t value)
{
    atomic_fetch_add(&((struct rf_cntr *)fid)->value, value);
    return 0;
}

static int cntr_set(struct fid_cntr *fid, uint64_t value)
{
    atomic_store(&((struct rf_cntr *)fid)->value, value);
    return 0;
}

static int cntr_adderr(struct fid_cntr *fid, uint64_t value)
{
    atomic_fetch_add(&((struct rf_cntr *)fid)->err, value);
    return 0;
}

static int cntr_seterr(struct fid_cntr *fid, uint64_t value)
{
    atomic_store(&((struct rf_cntr *)fid)->err, value);
    return 0;
}

static int cntr_wait(struct fid_cntr *fid, uint64_t threshold, int timeout)
{
    struct rf_cntr *c = (struct rf_cntr *)fid;
    double end = now_ms() + timeout;
    uint64_t errs = atomic_load(&c->err);
    for (;;) {
        if (cntr_read(fid) >= threshold) {
            return 0;
        }
        if (atomic_load(&c->err) != errs) {
            return -FI_EAVAIL;
        }
        double left = timeout < 0 ? 100 : end - now_ms();
        if (left <= 0) {
            return -FI_ETIMEDOUT;
        }
        domain_wait(c->domain, left < 100 ? (int)left + 1 : 100);
    }
}

static int cntr_control(struct fid *fid, int command, void *arg)
{
    struct rf_cntr *c = (struct rf_cntr *)fid;
    if (command != FI_GETWAIT || !arg) {
        return command != FI_GETWAIT ? -FI_ENOSYS : -FI_EINVAL;
    }
    int fd = domain_fd(c->domain);
    if (fd < 0) {
        return fd;
    }
    *(int *)arg = fd;
    return 0;
}

static int cntr_close(struct fid *fid)
{
    struct rf_cntr *c = (struct rf_cntr *)fid;
    if (atomic_load(&c->ref) > 0) {
        return -FI_EBUSY;
    }
    atomic_fetch_sub(&c->domain->ref, 1);
    free(c);
    return 0;
}

static struct fi_ops cntr_fi_ops = RF_FI_OPS(cntr_close, rf_nosys_bind, cntr_control);

static struct fi_ops_cntr cntr_ops = {
    .size = sizeof(struct fi_ops_cntr),
    .read = cntr_read,
    .readerr = cntr_readerr,
    .add = cntr_add,
    .set = cntr_set,
    .wait = cntr_wait,
    .adderr = cntr_adderr,
    .seterr = cntr_seterr,
};

int rf_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntrp, void *context)
{
    if (!domain || !cntrp) {
        return -FI_EINVAL;
    }
    if (attr && ((attr->events != FI_CNTR_EVENTS_COMP) || attr->flags ||
                 (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
                  attr->wait_obj != FI_WAIT_FD))) {
        return attr->flags ? -FI_EBADFLAGS : -FI_EINVAL;
    }
    struct rf_cntr *c = calloc(1, sizeof *c);
    if (!c) {
        return -FI_ENOMEM;
    }
    c->domain = (struct rf_domain *)domain;
    c->fid.fid.fclass = FI_CLASS_CNTR;
    c->fid.fid.context = context;
    c->fid.fid.ops = &cntr_fi_ops;
    c->fid.ops = &cntr_ops;
    atomic_fetch_add(&c->domain->ref, 1);
    *cntrp = &c->fid;
    return 0;
}

/* Event queues: events an application or the provider writes (AV
 * inserts with FI_EVENT); an RDM endpoint has no connection events. */

int rf_eq_post(struct rf_eq *eq, uint32_t event, const void *buf, size_t len, int is_err)
{
    if (len > sizeof(((struct rf_eq_event *)0)->u)) {
        return -FI_EINVAL;
    }
    pthread_mutex_lock(&eq->lock);
    if (eq->count == eq->cap) {
        size_t cap = eq->cap ? eq->cap * 2 : 16;
        struct rf_eq_event *q = malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&eq->lock);
            return -FI_ENOMEM;
        }
        for (size_t i = 0; i < eq->count; i++) {
            q[i] = eq->q[(eq->head + i) % eq->cap];
        }
        free(eq->q);
        eq->q = q;
        eq->cap = cap;
        eq->head = 0;
    }
    struct rf_eq_event *e = &eq->q[(eq->head + eq->count) % eq->cap];
    e->event = event;
    e->is_err = is_err;
    e->len = len;
    memcpy(e->u.bytes, buf, len);
    eq->count++;
    pthread_cond_broadcast(&eq->cond);
    if (eq->fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(eq->fd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&eq->lock);
    return 0;
}

/* Drops the head event (its descriptor unsignalled once none is left);
 * called locked. */
static void eq_pop(struct rf_eq *eq)
{
    eq->head = (eq->head + 1) % eq->cap;
    eq->count--;
    if (eq->fd >= 0 && !eq->count) {
        uint64_t v;
        ssize_t r = read(eq->fd, &v, sizeof v);
        (void)r;
    }
}

/* Takes the head event into `buf` (unless FI_PEEK); called locked. */
static ssize_t eq_take(struct rf_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    if (!eq->count) {
        return -FI_EAGAIN;
    }
    struct rf_eq_event *e = &eq->q[eq->head];
    if (e->is_err) {
        return -FI_EAVAIL;
    }
    if (len < e->len) {
        return -FI_ETOOSMALL;
    }
    if (event) {
        *event = e->event;
    }
    memcpy(buf, e->u.bytes, e->len);
    ssize_t n = (ssize_t)e->len;
    if (!(flags & FI_PEEK)) {
        eq_pop(eq);
    }
    return n;
}

static ssize_t eq_read(struct fid_eq *fid, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    struct rf_eq *eq = (struct rf_eq *)fid;
    if (!buf && len) {
        return -FI_EINVAL;
    }
    pthread_mutex_lock(&eq->lock);
    ssize_t r = eq_take(eq, event, buf, len, flags);
    pthread_mutex_unlock(&eq->lock);
    return r;
}

static ssize_t eq_sread(struct fid_eq *fid, uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags)
{
    struct rf_eq *eq = (struct rf_eq *)fid;
    if (eq->wait_obj == FI_WAIT_NONE) {
        return -FI_EINVAL;
    }
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += timeout / 1000;
    end.tv_nsec += (long)(timeout % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&eq->lock);
    while (!eq->count) {
        int r = timeout < 0 ? pthread_cond_wait(&eq->cond, &eq->lock)
                            : pthread_cond_timedwait(&eq->cond, &eq->lock, &end);
        if (r == ETIMEDOUT) {
            break;
        }
    }
    ssize_t r = eq_take(eq, event, buf, len, flags);
    pthread_mutex_unlock(&eq->lock);
    return r;
}

static ssize_t eq_readerr(struct fid_eq *fid, struct fi_eq_err_entry *buf, uint64_t flags)
{
    struct rf_eq *eq = (struct rf_eq *)fid;
    if (!buf) {
        return -FI_EINVAL;
    }
    pthread_mutex_lock(&eq->lock);
    ssize_t r = -FI_EAGAIN;
    if (eq->count && eq->q[eq->head].is_err) {
        memcpy(buf, &eq->q[eq->head].u.err, sizeof *buf);
        if (!(flags & FI_PEEK)) {
            eq_pop(eq);
        }
        r = sizeof *buf;
    }
    pthread_mutex_unlock(&eq->lock);
    return r;
}

static ssize_t eq_write(struct fid_eq *fid, uint32_t event, const void *buf, size_t len, uint64_t flags)
{
    if (!buf && len) {
        return -FI_EINVAL;
    }
    (void)flags;
    int r = rf_eq_post((struct rf_eq *)fid, event, buf, len, 0);
    return r ? r : (ssize_t)len;
}

static const char *eq_strerror(struct fid_eq *fid, int prov_errno, const void *err_data, char *buf, size_t len)
{
    (void)fid, (void)err_data;
    return rf_strerror(prov_errno, buf, len);
}

static int eq_control(struct fid *fid, int command, void *arg)
{
    struct rf_eq *eq = (struct rf_eq *)fid;
    if (command != FI_GETWAIT) {
        return -FI_ENOSYS;
    }
    if (eq->fd < 0 || !arg) {
        return -FI_EINVAL;
    }
    *(int *)arg = eq->fd;
    return 0;
}

static int eq_close(struct fid *fid)
{
    struct rf_eq *eq = (struct rf_eq *)fid;
    if (atomic_load(&eq->ref) > 0) {
        return -FI_EBUSY;
    }
    if (eq->fd >= 0) {
        close(eq->fd);
    }
    pthread_mutex_destroy(&eq->lock);
    pthread_cond_destroy(&eq->cond);
    atomic_fetch_sub(&eq->fabric->ref, 1);
    free(eq->q);
    free(eq);
    return 0;
}

static struct fi_ops eq_fi_ops = RF_FI_OPS(eq_close, rf_nosys_bind, eq_control);

static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq),
    .read = eq_read,
    .readerr = eq_readerr,
    .write = eq_write,
    .sread = eq_sread,
    .strerror = eq_strerror,
};

int rf_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eqp, void *context)
{
    if (!fabric || !attr || !eqp) {
        return -FI_EINVAL;
    }
    if (attr->flags & ~(uint64_t)FI_WRITE) {
        return -FI_EBADFLAGS;
    }
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_FD) {
        return -FI_EINVAL;
    }
    struct rf_eq *eq = calloc(1, sizeof *eq);
    if (!eq) {
        return -FI_ENOMEM;
    }
    eq->wait_obj = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
    eq->fd = -1;
    if (eq->wait_obj == FI_WAIT_FD) {
        eq->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (eq->fd < 0) {
            free(eq);
            return -FI_ENOMEM;
        }
    }
    pthread_mutex_init(&eq->lock, NULL);
    pthread_cond_init(&eq->cond, NULL);
    eq->fabric = (struct rf_fabric *)fabric;
    atomic_fetch_add(&eq->fabric->ref, 1);
    eq->fid.fid.fclass = FI_CLASS_EQ;
    eq->fid.fid.context = context;
    eq->fid.fid.ops = &eq_fi_ops;
    eq->fid.ops = &eq_ops;
    *eqp = &eq->fid;
    return 0;
}

/* fi_trywait: nothing waits in a queue and rdm4 may sleep. */
int rf_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
    (void)fabric;
    for (int i = 0; i < count; i++) {
        struct rf_domain *d;
        switch (fids[i]->fclass) {
        case FI_CLASS_CQ: {
            struct rf_cq *cq = (struct rf_cq *)fids[i];
            if (cq->count) {
                return -FI_EAGAIN;
            }
            d = cq->domain;
            break;
        }
        case FI_CLASS_CNTR:
            d = ((struct rf_cntr *)fids[i])->domain;
            break;
        case FI_CLASS_EQ:
            if (((struct rf_eq *)fids[i])->count) {
                return -FI_EAGAIN;
            }
            continue;
        default:
            return -FI_EINVAL;
        }
        int32_t r = rdm4_trywait(d->ep);
        pthread_mutex_lock(&d->ep_lock);
        for (struct rf_ep *ep = d->endpoints; ep && r == RDM4_SUCCESS; ep = ep->next) {
            r = ep->own ? rdm4_trywait(ep->rep) : r;
        }
        pthread_mutex_unlock(&d->ep_lock);
        if (r != RDM4_SUCCESS) {
            return -rf_errno(r);
        }
    }
    return 0;
}

/* Poll sets: completion queues and counters polled together. A member
 * is reported (its fid's context) when its queue holds entries, or when
 * its counter's value or error count changed since the last report. */

struct rf_poll_member {
    struct fid *fid;
    uint64_t seen, seen_err;
};

struct rf_poll {
    struct fid_poll fid;
    struct rf_domain *domain;
    pthread_mutex_t lock;
    struct rf_poll_member *m;
    size_t n, cap;
};

static int poll_poll(struct fid_poll *fid, void **context, int count)
{
    struct rf_poll *ps = (struct rf_poll *)fid;
    if (count < 0 || (!context && count)) {
        return -FI_EINVAL;
    }
    pthread_mutex_lock(&ps->lock);
    rf_progress(ps->domain);
    int found = 0;
    for (size_t i = 0; i < ps->n && found < count; i++) {
        struct rf_poll_member *m = &ps->m[i];
        int ready;
        if (m->fid->fclass == FI_CLASS_CQ) {
            ready = ((struct rf_cq *)m->fid)->count != 0;
        } else {
            struct rf_cntr *c = (struct rf_cntr *)m->fid;
            uint64_t v = atomic_load(&c->value), e = atomic_load(&c->err);
            ready = v != m->seen || e != m->seen_err;
            m->seen = v;
            m->seen_err = e;
        }
        if (ready) {
            context[found++] = m->fid->context;
        }
    }
    pthread_mutex_unlock(&ps->lock);
    return found;
}

static int poll_add(struct fid_poll *fid, struct fid *event_fid, uint64_t flags)
{
    struct rf_poll *ps = (struct rf_poll *)fid;
    if (!event_fid || flags) {
        return flags ? -FI_EBADFLAGS : -FI_EINVAL;
    }
    struct rf_domain *d = event_fid->fclass == FI_CLASS_CQ     ? ((struct rf_cq *)event_fid)->domain
                          : event_fid->fclass == FI_CLASS_CNTR ? ((struct rf_cntr *)event_fid)->domain
                                                               : NULL;
    if (d != ps->domain) {
        return -FI_EINVAL;
    }
    pthread_mutex_lock(&ps->lock);
    int r = 0;
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 8;
        struct rf_poll_member *m = realloc(ps->m, cap * sizeof *m);
        if (!m) {
            r = -FI_ENOMEM;
        } else {
            ps->m = m;
            ps->cap = cap;
        }
    }
    if (!r) {
        struct rf_poll_member *m = &ps->m[ps->n++];
        m->fid = event_fid;
        m->seen = m->seen_err = 0;
        if (event_fid->fclass == FI_CLASS_CNTR) {
            struct rf_cntr *c = (struct rf_cntr *)event_fid;
            m->seen = atomic_load(&c->value);
            m->seen_err = atomic_load(&c->err);
            atomic_fetch_add(&c->ref, 1);
        } else {
            atomic_fetch_add(&((struct rf_cq *)event_fid)->ref, 1);
        }
    }
    pthread_mutex_unlock(&ps->lock);
    return r;
}

/* Drops the reference a member holds. */
static void poll_unref(struct fid *f)
{
    if (f->fclass == FI_CLASS_CNTR) {
        atomic_fetch_sub(&((struct rf_cntr *)f)->ref, 1);
    } else {
        atomic_fetch_sub(&((struct rf_cq *)f)->ref, 1);
    }
}

static int poll_del(struct fid_poll *fid, struct fid *event_fid, uint64_t flags)
{
    struct rf_poll *ps = (struct rf_poll *)fid;
    if (flags) {
        return -FI_EBADFLAGS;
    }
    int r = -FI_EINVAL;
    pthread_mutex_lock(&ps->lock);
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->m[i].fid == event_fid) {
            poll_unref(event_fid);
            ps->m[i] = ps->m[--ps->n];
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&ps->lock);
    return r;
}

static int poll_close(struct fid *fid)
{
    struct rf_poll *ps = (struct rf_poll *)fid;
    for (size_t i = 0; i < ps->n; i++) {
        poll_unref(ps->m[i].fid);
    }
    atomic_fetch_sub(&ps->domain->ref, 1);
    pthread_mutex_destroy(&ps->lock);
    free(ps->m);
    free(ps);
    return 0;
}

static struct fi_ops poll_fi_ops = RF_FI_OPS(poll_close, rf_nosys_bind, rf_nosys_control);

static struct fi_ops_poll poll_ops = {
    .size = sizeof(struct fi_ops_poll),
    .poll = poll_poll,
    .poll_add = poll_add,
    .poll_del = poll_del,
};

int rf_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset)
{
    if (!domain || !pollset || (attr && attr->flags)) {
        return attr && attr->flags ? -FI_EBADFLAGS : -FI_EINVAL;
    }
    struct rf_poll *ps = calloc(1, sizeof *ps);
    if (!ps) {
        return -FI_ENOMEM;
    }
    ps->domain = (struct rf_domain *)domain;
    pthread_mutex_init(&ps->lock, NULL);
    ps->fid.fid.fclass = FI_CLASS_POLL;
    ps->fid.fid.ops = &poll_fi_ops;
    ps->fid.ops = &poll_ops;
    atomic_fetch_add(&ps->domain->ref, 1);
    *pollset = &ps->fid;
    return 0;
}
