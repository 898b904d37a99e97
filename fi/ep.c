/*
 * Endpoints: messages, tagged messages, RMA and atomics mapped onto an
 * rdm4 endpoint: the domain's for its first endpoint, its own for each
 * later one (`rep`, `own`).
 *
 * An operation that wants a completion passes the application's context
 * to rdm4, whose completion becomes the libfabric one. One that wants
 * none (FI_SELECTIVE_COMPLETION without FI_COMPLETION) passes the domain's
 * `silent` context: its success only counts in the counters, a failure
 * still reaches the queue (with a NULL context). Injects of messages are
 * rdm4's (no completion at all); injects of RMA and atomics, and operations
 * on several local buffers that rdm4 takes as one, go through a copy that
 * an operation record (`struct rf_op`) frees at completion.
 */
#include <stdlib.h>
#include <string.h>

#include <sys/epoll.h>

#include "rdm4_fi.h"

int rf_atomic_valid(struct rf_domain *d, enum fi_datatype t, enum fi_op op, int kind, size_t *count);

static inline struct rf_ep *EP(struct fid_ep *f)
{
    return (struct rf_ep *)f;
}

/* A record for an operation `ep` posts (NULL: none left). */
static struct rf_op *op_of(struct rf_ep *ep)
{
    struct rf_op *op = rf_op_get(ep->domain);
    if (op) {
        op->owner = ep;
    }
    return op;
}

/* -FI_E* of an rdm4 call's status. */
static inline ssize_t ret(int32_t r)
{
    return r == RDM4_SUCCESS ? 0 : -(ssize_t)rf_errno(r);
}

static inline void *tx_ctx(struct rf_ep *ep, uint64_t flags, void *context)
{
    return !ep->tx_selective || (flags & FI_COMPLETION) ? context : &ep->domain->silent;
}

static inline void *rx_ctx(struct rf_ep *ep, uint64_t flags, void *context)
{
    return !ep->rx_selective || (flags & FI_COMPLETION) ? context : &ep->domain->silent;
}

static inline int dest_of(struct rf_ep *ep, fi_addr_t a, rdm4_addr *h)
{
    if (!ep->av) {
        return -FI_ENOAV;
    }
    *h = ep->view ? rf_view_handle(ep, a) : rf_av_handle(ep->av, a);
    if (*h != RDM4_ADDR_UNSPEC) {
        return 0;
    }
    /* IP addressing: an entry whose name was asked in vain. */
    return ep->av->ip && a < ep->av->n && ep->av->state[a] == RF_ENTRY_UNRESOLVED ? -FI_EHOSTUNREACH : -FI_EINVAL;
}

static inline int src_of(struct rf_ep *ep, fi_addr_t a, rdm4_addr *h)
{
    if (a == FI_ADDR_UNSPEC || !ep->directed) {
        *h = RDM4_ADDR_UNSPEC;
        return 0;
    }
    return dest_of(ep, a, h);
}

/* An injected send without a completion counts as sent at once. */
static inline void count_inject(struct rf_ep *ep)
{
    if (ep->cntr[RF_CNTR_SEND]) {
        atomic_fetch_add(&ep->cntr[RF_CNTR_SEND]->value, 1);
    }
}

/* Whether every buffer of `iov` with bytes has an address. */
static int iov_valid(const struct iovec *iov, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (!iov[i].iov_base && iov[i].iov_len) {
            return 0;
        }
    }
    return 1;
}

/* The peer of a send, write or read and its local buffers, checked. */
static int target_of(struct rf_ep *ep, fi_addr_t dest, const struct iovec *iov, size_t count, rdm4_addr *h)
{
    int r = dest_of(ep, dest, h);
    if (r) {
        return r;
    }
    return count > RF_IOV_LIMIT || (!iov && count) || !iov_valid(iov, count) ? -FI_EINVAL : 0;
}

static size_t iov_total(const struct iovec *iov, size_t count)
{
    size_t t = 0;
    for (size_t i = 0; i < count; i++) {
        t += iov[i].iov_len;
    }
    return t;
}

/* A malloc'd copy of the concatenation of `iov` (at least one byte). */
static void *gather(const struct iovec *iov, size_t count, size_t *total)
{
    *total = iov_total(iov, count);
    char *b = malloc(*total ? *total : 1);
    if (b) {
        size_t off = 0;
        for (size_t i = 0; i < count; i++) {
            memcpy(b + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
    }
    return b;
}

/* A record holding a copy of `iov` for an operation that reports its
 * completion with `context` when `report`. */
static struct rf_op *bounce_op(struct rf_ep *ep, const struct iovec *iov, size_t count, int report, void *context,
                               size_t *total)
{
    struct rf_op *op = op_of(ep);
    if (!op) {
        return NULL;
    }
    op->kind = RF_OP_BOUNCE;
    op->report = report;
    op->context = context;
    op->bounce = gather(iov, count, total);
    if (!op->bounce) {
        rf_op_put(ep->domain, op);
        return NULL;
    }
    return op;
}

/* A record with a buffer of `total` bytes that are copied into `iov` at
 * completion. */
static struct rf_op *scatter_op(struct rf_ep *ep, const struct iovec *iov, size_t count, int report, void *context)
{
    struct rf_op *op = op_of(ep);
    if (!op) {
        return NULL;
    }
    size_t total = iov_total(iov, count);
    op->kind = RF_OP_SCATTER;
    op->report = report;
    op->context = context;
    op->bounce = malloc(total ? total : 1);
    op->iov = malloc(count * sizeof *iov);
    op->iov_count = count;
    if (!op->bounce || !op->iov) {
        rf_op_put(ep->domain, op);
        return NULL;
    }
    memcpy(op->iov, iov, count * sizeof *iov);
    return op;
}

/* Messages. */

/* Every send: `flags` are libfabric's (the endpoint's defaults for the
 * calls without flags). */
static ssize_t send_any(struct rf_ep *ep, const struct iovec *iov, size_t count, fi_addr_t dest, int tagged,
                        uint64_t tag, uint64_t data, uint64_t flags, void *context)
{
    rdm4_addr h;
    int r = target_of(ep, dest, iov, count, &h);
    if (r) {
        return r;
    }
    uint64_t rf = (tagged ? RDM4_MSG_TAGGED : 0) | (flags & FI_REMOTE_CQ_DATA ? RDM4_MSG_REMOTE_CQ_DATA : 0) |
                  (flags & FI_MORE ? RDM4_MSG_MORE : 0) |
                  (flags & FI_DELIVERY_COMPLETE ? RDM4_MSG_DELIVERY_COMPLETE : 0);
    void *ctx = tx_ctx(ep, flags, context);
    rdm4_msg m = { iov, count, h, tag, 0, data, ctx };
    if (flags & FI_INJECT) {
        if (iov_total(iov, count) > RF_INJECT_SIZE) {
            return -FI_EINVAL;
        }
        if (ctx == &ep->domain->silent && !(flags & FI_DELIVERY_COMPLETE)) {
            r = (int)ret(rdm4_sendmsg(ep->rep, &m, rf | RDM4_MSG_INJECT));
            if (r == 0) {
                count_inject(ep);
            }
            return r;
        }
        /* A completion (or delivery complete) wanted: send a copy. */
        size_t total;
        struct rf_op *op = bounce_op(ep, iov, count, ctx != &ep->domain->silent, context, &total);
        if (!op) {
            return -FI_EAGAIN;
        }
        struct iovec one = { op->bounce, total };
        m.iov = &one;
        m.iov_count = 1;
        m.context = op;
        r = (int)ret(rdm4_sendmsg(ep->rep, &m, rf));
        if (r) {
            rf_op_put(ep->domain, op);
        }
        return r;
    }
    return ret(rdm4_sendmsg(ep->rep, &m, rf));
}

/* One buffer, sent or injected, untagged or tagged (the calls without
 * flags: the endpoint's default op_flags decide the completion). */
static inline ssize_t send_one(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest, int tagged,
                               uint64_t tag, void *context)
{
    struct rf_ep *ep = EP(fid);
    rdm4_addr h;
    int r = dest_of(ep, dest, &h);
    if (r) {
        return r;
    }
    void *ctx = tx_ctx(ep, ep->tx_op_flags, context);
    return ret(tagged ? rdm4_tsend(ep->rep, buf, len, h, tag, ctx) : rdm4_send(ep->rep, buf, len, h, ctx));
}

static inline ssize_t inject_one(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest, int tagged,
                                 uint64_t tag)
{
    struct rf_ep *ep = EP(fid);
    rdm4_addr h;
    int r = dest_of(ep, dest, &h);
    if (r) {
        return r;
    }
    r = (int)ret(tagged ? rdm4_tinject(ep->rep, buf, len, h, tag) : rdm4_inject(ep->rep, buf, len, h));
    if (r == 0) {
        count_inject(ep);
    }
    return r;
}

/* Multi-receive buffers (FI_MULTI_RECV, untagged receives). A buffer
 * takes messages one after another: one rdm4 receive at a time into what
 * is left of it, whose record (RF_OP_MULTI) is the receive's context. Each
 * message completes with `buf` where it landed; when what is left falls
 * below the endpoint's FI_OPT_MIN_MULTI_RECV (or a message did not fit,
 * or the receive was canceled), that completion carries FI_MULTI_RECV and
 * the buffer is the application's again. Buffers fill in the order posted:
 * only the first of the endpoint's queue has a receive posted, the next
 * one's is posted when it is released. Between two messages of a buffer
 * its receive is not posted for a moment (inside the completion's
 * processing): a plain receive posted after the buffer may then take a
 * message that arrives meanwhile. */

/* Posts the receive of buffer `op` for what is left of it (called with
 * the endpoint's `mrecv_lock`). */
static int32_t mrecv_post(struct rf_ep *ep, struct rf_op *op)
{
    int32_t r = rdm4_recv(ep->rep, op->mbase + op->moff, op->mlen - op->moff, op->msrc, op);
    op->mposted = r == RDM4_SUCCESS;
    return r;
}

/* Gives buffer `op`, out of the queue and never posted, back with error
 * `err` (its rdm4 status `prov`) and FI_MULTI_RECV, and frees its record. */
static void mrecv_gone(struct rf_ep *ep, struct rf_op *op, int err, int32_t prov)
{
    struct rf_cqe e = { 0 };
    e.e.op_context = op->context;
    e.e.flags = FI_RECV | FI_MSG | FI_MULTI_RECV;
    e.e.buf = op->mbase + op->moff;
    e.src = RDM4_ADDR_UNSPEC;
    e.src_fi = FI_ADDR_NOTAVAIL;
    e.err = err;
    e.prov_errno = prov;
    if (ep->rx_cq) {
        rf_cq_push(ep->rx_cq, &e);
    }
    rf_op_put(ep->domain, op);
}

void rf_mrecv_done(struct rf_ep *ep, struct rf_op *op, const rdm4_cqe *c, void **buf, uint64_t *flags,
                   void **context)
{
    int locked = ep->domain->locked;
    *buf = op->mbase + op->moff;
    *context = op->context;
    rf_lock(locked, &ep->mrecv_lock);
    if (op != ep->mhead) {
        /* Not this endpoint's (posted by one closed since): released. */
        *flags |= FI_MULTI_RECV;
        rf_op_put(ep->domain, op);
        rf_unlock(locked, &ep->mrecv_lock);
        return;
    }
    op->mposted = 0;
    op->moff += c->len <= op->mlen - op->moff ? c->len : op->mlen - op->moff;
    int release = c->status != RDM4_SUCCESS || op->mlen - op->moff < ep->min_multi_recv ||
                  mrecv_post(ep, op) != RDM4_SUCCESS;
    if (release) {
        *flags |= FI_MULTI_RECV;
        /* It is the queue's first: the next one takes over. */
        ep->mhead = op->mnext;
        if (!ep->mhead) {
            ep->mtail = NULL;
        }
        while (ep->mhead && mrecv_post(ep, ep->mhead) != RDM4_SUCCESS) {
            FI_WARN(&rf_prov, FI_LOG_EP_DATA, "a multi-receive buffer could not be posted: released\n");
            struct rf_op *gone = ep->mhead;
            ep->mhead = gone->mnext;
            if (!ep->mhead) {
                ep->mtail = NULL;
            }
            mrecv_gone(ep, gone, FI_EIO, RDM4_EIO);
        }
        rf_op_put(ep->domain, op);
    }
    rf_unlock(locked, &ep->mrecv_lock);
}

/* Queues a multi-receive buffer; its receive is posted when it is first. */
static ssize_t mrecv_add(struct rf_ep *ep, const struct iovec *iov, size_t count, rdm4_addr src, void *context)
{
    if (count != 1 || !iov || (!iov->iov_base && iov->iov_len)) {
        return -FI_EINVAL; /* one buffer */
    }
    struct rf_op *op = op_of(ep);
    if (!op) {
        return -FI_EAGAIN;
    }
    op->kind = RF_OP_MULTI;
    op->report = 1;
    op->context = context;
    op->mbase = iov->iov_base;
    op->mlen = iov->iov_len;
    op->msrc = src;
    int locked = ep->domain->locked;
    rf_lock(locked, &ep->mrecv_lock);
    int32_t r = ep->mhead ? RDM4_SUCCESS : mrecv_post(ep, op);
    if (r == RDM4_SUCCESS) {
        if (ep->mtail) {
            ep->mtail->mnext = op;
        } else {
            ep->mhead = op;
        }
        ep->mtail = op;
    }
    rf_unlock(locked, &ep->mrecv_lock);
    if (r != RDM4_SUCCESS) {
        rf_op_put(ep->domain, op);
    }
    return ret(r);
}

/* Cancels the multi-receive buffer posted with `context`: -FI_ENOENT when
 * there is none. Its completion (FI_ECANCELED, FI_MULTI_RECV) follows. */
static int mrecv_cancel(struct rf_ep *ep, void *context)
{
    int locked = ep->domain->locked;
    rf_lock(locked, &ep->mrecv_lock);
    struct rf_op **at = &ep->mhead, *prev = NULL;
    while (*at && (*at)->context != context) {
        prev = *at;
        at = &(*at)->mnext;
    }
    struct rf_op *op = *at;
    int r = -FI_ENOENT;
    if (op && op->mposted) {
        /* Its receive completes as canceled, which releases it. */
        r = rdm4_cancel(ep->rep, op) == RDM4_SUCCESS ? 0 : -FI_ENOENT;
    } else if (op) {
        *at = op->mnext;
        if (ep->mtail == op) {
            ep->mtail = prev;
        }
        mrecv_gone(ep, op, FI_ECANCELED, RDM4_ECANCELED);
        r = 0;
    }
    rf_unlock(locked, &ep->mrecv_lock);
    return r;
}

/* One buffer received, untagged or tagged. */
static inline ssize_t recv_one(struct fid_ep *fid, void *buf, size_t len, fi_addr_t src, int tagged, uint64_t tag,
                               uint64_t ignore, void *context)
{
    struct rf_ep *ep = EP(fid);
    rdm4_addr h;
    int r = src_of(ep, src, &h);
    if (r) {
        return r;
    }
    void *ctx = rx_ctx(ep, ep->rx_op_flags, context);
    if (!tagged && (ep->rx_op_flags & FI_MULTI_RECV)) {
        struct iovec one = { buf, len };
        return mrecv_add(ep, &one, 1, h, ctx);
    }
    return ret(tagged ? rdm4_trecv(ep->rep, buf, len, h, tag, ignore, ctx)
                      : rdm4_recv(ep->rep, buf, len, h, ctx));
}

static ssize_t ep_send(struct fid_ep *fid, const void *buf, size_t len, void *desc, fi_addr_t dest, void *context)
{
    (void)desc;
    return send_one(fid, buf, len, dest, 0, 0, context);
}

static ssize_t ep_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
                        void *context)
{
    (void)desc;
    return send_any(EP(fid), iov, count, dest, 0, 0, 0, EP(fid)->tx_op_flags, context);
}

static ssize_t ep_sendmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
    if (!msg) {
        return -FI_EINVAL;
    }
    return send_any(EP(fid), msg->msg_iov, msg->iov_count, msg->addr, 0, 0, msg->data, flags, msg->context);
}

static ssize_t ep_inject(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest)
{
    return inject_one(fid, buf, len, dest, 0, 0);
}

static ssize_t ep_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
                           void *context)
{
    struct iovec one = { (void *)buf, len };
    (void)desc;
    return send_any(EP(fid), &one, 1, dest, 0, 0, data, EP(fid)->tx_op_flags | FI_REMOTE_CQ_DATA, context);
}

static ssize_t ep_injectdata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
    struct iovec one = { (void *)buf, len };
    return send_any(EP(fid), &one, 1, dest, 0, 0, data, FI_INJECT | FI_REMOTE_CQ_DATA, &EP(fid)->domain->silent);
}

/* Every receive. */
static ssize_t recv_any(struct rf_ep *ep, const struct iovec *iov, size_t count, fi_addr_t src, int tagged,
                        uint64_t tag, uint64_t ignore, uint64_t flags, void *context)
{
    rdm4_addr h;
    int r = src_of(ep, src, &h);
    if (r) {
        return r;
    }
    if (count > RF_IOV_LIMIT || (!iov && count)) {
        return -FI_EINVAL;
    }
    if (!tagged && (flags & FI_MULTI_RECV)) {
        return mrecv_add(ep, iov, count, h, rx_ctx(ep, flags, context));
    }
    rdm4_msg m = { iov, count, h, tag, ignore, 0, rx_ctx(ep, flags, context) };
    return ret(rdm4_recvmsg(ep->rep, &m, tagged ? RDM4_MSG_TAGGED : 0));
}

static ssize_t ep_recv(struct fid_ep *fid, void *buf, size_t len, void *desc, fi_addr_t src, void *context)
{
    (void)desc;
    return recv_one(fid, buf, len, src, 0, 0, 0, context);
}

static ssize_t ep_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
                        void *context)
{
    (void)desc;
    return recv_any(EP(fid), iov, count, src, 0, 0, 0, EP(fid)->rx_op_flags, context);
}

static ssize_t ep_recvmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
    if (!msg) {
        return -FI_EINVAL;
    }
    if (flags & ~(uint64_t)(FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_MULTI_RECV)) {
        return -FI_EBADFLAGS;
    }
    return recv_any(EP(fid), msg->msg_iov, msg->iov_count, msg->addr, 0, 0, 0, flags, msg->context);
}

static struct fi_ops_msg msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = ep_recv,
    .recvv = ep_recvv,
    .recvmsg = ep_recvmsg,
    .send = ep_send,
    .sendv = ep_sendv,
    .sendmsg = ep_sendmsg,
    .inject = ep_inject,
    .senddata = ep_senddata,
    .injectdata = ep_injectdata,
};

/* Tagged messages. */

static ssize_t ep_tsend(struct fid_ep *fid, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t tag,
                        void *context)
{
    (void)desc;
    return send_one(fid, buf, len, dest, 1, tag, context);
}

static ssize_t ep_tsendv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
                         uint64_t tag, void *context)
{
    (void)desc;
    return send_any(EP(fid), iov, count, dest, 1, tag, 0, EP(fid)->tx_op_flags, context);
}

static ssize_t ep_tsendmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg, uint64_t flags)
{
    if (!msg) {
        return -FI_EINVAL;
    }
    return send_any(EP(fid), msg->msg_iov, msg->iov_count, msg->addr, 1, msg->tag, msg->data, flags, msg->context);
}

static ssize_t ep_tinject(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
    return inject_one(fid, buf, len, dest, 1, tag);
}

static ssize_t ep_tsenddata(struct fid_ep *fid, const void *buf, size_t len, void *desc, uint64_t data,
                            fi_addr_t dest, uint64_t tag, void *context)
{
    struct iovec one = { (void *)buf, len };
    (void)desc;
    return send_any(EP(fid), &one, 1, dest, 1, tag, data, EP(fid)->tx_op_flags | FI_REMOTE_CQ_DATA, context);
}

static ssize_t ep_tinjectdata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
                              uint64_t tag)
{
    struct iovec one = { (void *)buf, len };
    return send_any(EP(fid), &one, 1, dest, 1, tag, data, FI_INJECT | FI_REMOTE_CQ_DATA, &EP(fid)->domain->silent);
}

static ssize_t ep_trecv(struct fid_ep *fid, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
                        uint64_t ignore, void *context)
{
    (void)desc;
    return recv_one(fid, buf, len, src, 1, tag, ignore, context);
}

static ssize_t ep_trecvv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
                         uint64_t tag, uint64_t ignore, void *context)
{
    (void)desc;
    return recv_any(EP(fid), iov, count, src, 1, tag, ignore, EP(fid)->rx_op_flags, context);
}

int rf_discard_done(struct rf_ep *ep, void *context)
{
    int found = 0;
    rf_lock(ep->domain->locked, &ep->discard_lock);
    for (size_t i = 0; i < sizeof ep->discarding / sizeof ep->discarding[0] && !found; i++) {
        if (ep->discarding[i] && ep->discarding[i] == context) {
            ep->discarding[i] = NULL;
            atomic_fetch_sub(&ep->ndiscarding, 1);
            found = 1;
        }
    }
    rf_unlock(ep->domain->locked, &ep->discard_lock);
    return found;
}

static int discard_add(struct rf_ep *ep, void *context)
{
    int added = 0;
    rf_lock(ep->domain->locked, &ep->discard_lock);
    for (size_t i = 0; i < sizeof ep->discarding / sizeof ep->discarding[0] && !added; i++) {
        if (!ep->discarding[i]) {
            ep->discarding[i] = context;
            atomic_fetch_add(&ep->ndiscarding, 1);
            added = 1;
        }
    }
    rf_unlock(ep->domain->locked, &ep->discard_lock);
    return added;
}

/* FI_PEEK: the probe's answer is a completion, or an FI_ENOMSG error. */
static ssize_t peek(struct rf_ep *ep, const struct fi_msg_tagged *msg, rdm4_addr h, uint64_t flags)
{
    if (!ep->rx_cq) {
        return -FI_ENOCQ;
    }
    uint64_t pf = RDM4_MSG_TAGGED | (flags & FI_CLAIM ? RDM4_PROBE_CLAIM : 0) |
                  (flags & FI_DISCARD ? RDM4_PROBE_DISCARD : 0);
    rdm4_cqe c;
    int32_t r = rdm4_probe(ep->rep, h, msg->tag, msg->ignore, pf, msg->context, &c);
    if (r < 0) {
        return ret(r);
    }
    struct rf_cqe e = { 0 };
    e.e.op_context = msg->context;
    e.e.flags = FI_RECV | FI_TAGGED;
    e.ep = ep; /* the source is this endpoint's handle */
    e.src_fi = FI_ADDR_NOTAVAIL;
    if (r == 1) {
        e.e.len = c.len;
        e.e.tag = c.tag;
        if (c.flags & RDM4_CQ_REMOTE_CQ_DATA) {
            e.e.flags |= FI_REMOTE_CQ_DATA;
            e.e.data = c.data;
        }
        e.src = c.src;
    } else {
        e.e.tag = msg->tag;
        e.src = RDM4_ADDR_UNSPEC;
        e.err = FI_ENOMSG;
        e.prov_errno = RDM4_ENOENT;
    }
    rf_cq_push(ep->rx_cq, &e);
    return 0;
}

static ssize_t ep_trecvmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg, uint64_t flags)
{
    struct rf_ep *ep = EP(fid);
    if (!msg) {
        return -FI_EINVAL;
    }
    if (flags & ~(uint64_t)(FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_PEEK | FI_CLAIM | FI_DISCARD)) {
        return -FI_EBADFLAGS;
    }
    rdm4_addr h;
    int r = src_of(ep, msg->addr, &h);
    if (r) {
        return r;
    }
    if (flags & FI_PEEK) {
        return peek(ep, msg, h, flags);
    }
    if (flags & FI_CLAIM) {
        /* The message claimed by a peek with this context. */
        if (msg->iov_count > 1 || (!msg->msg_iov && msg->iov_count)) {
            return -FI_EINVAL;
        }
        void *buf = msg->iov_count ? msg->msg_iov[0].iov_base : NULL;
        size_t len = msg->iov_count ? msg->msg_iov[0].iov_len : 0;
        if (flags & FI_DISCARD) {
            if (!discard_add(ep, msg->context)) {
                return -FI_EAGAIN;
            }
            buf = NULL;
            len = 0;
        }
        int32_t s = rdm4_recv_claimed(ep->rep, msg->context, buf, len);
        if (s != RDM4_SUCCESS && (flags & FI_DISCARD)) {
            rf_discard_done(ep, msg->context);
        }
        return ret(s);
    }
    if (flags & FI_DISCARD) {
        return -FI_EINVAL; /* FI_DISCARD goes with FI_PEEK or FI_CLAIM */
    }
    return recv_any(ep, msg->msg_iov, msg->iov_count, msg->addr, 1, msg->tag, msg->ignore, flags, msg->context);
}

static struct fi_ops_tagged tagged_ops = {
    .size = sizeof(struct fi_ops_tagged),
    .recv = ep_trecv,
    .recvv = ep_trecvv,
    .recvmsg = ep_trecvmsg,
    .send = ep_tsend,
    .sendv = ep_tsendv,
    .sendmsg = ep_tsendmsg,
    .inject = ep_tinject,
    .senddata = ep_tsenddata,
    .injectdata = ep_tinjectdata,
};

/* RMA. */

static ssize_t read_any(struct rf_ep *ep, const struct iovec *iov, size_t count, fi_addr_t src, uint64_t addr,
                        uint64_t key, uint64_t flags, void *context)
{
    rdm4_addr h;
    int r = target_of(ep, src, iov, count, &h);
    if (r) {
        return r;
    }
    void *ctx = tx_ctx(ep, flags, context);
    if (count <= 1) {
        return ret(rdm4_read(ep->rep, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, h, addr,
                             key, ctx));
    }
    struct rf_op *op = scatter_op(ep, iov, count, ctx != &ep->domain->silent, context);
    if (!op) {
        return -FI_EAGAIN;
    }
    r = (int)ret(rdm4_read(ep->rep, op->bounce, iov_total(iov, count), h, addr, key, op));
    if (r) {
        rf_op_put(ep->domain, op);
    }
    return r;
}

static ssize_t write_any(struct rf_ep *ep, const struct iovec *iov, size_t count, fi_addr_t dest, uint64_t addr,
                         uint64_t key, uint64_t data, uint64_t flags, void *context)
{
    rdm4_addr h;
    int r = target_of(ep, dest, iov, count, &h);
    if (r) {
        return r;
    }
    void *ctx = tx_ctx(ep, flags, context);
    const void *buf = count ? iov[0].iov_base : NULL;
    size_t len = count ? iov[0].iov_len : 0;
    struct rf_op *op = NULL;
    if (count > 1 || (flags & FI_INJECT)) {
        if ((flags & FI_INJECT) && iov_total(iov, count) > RF_INJECT_SIZE) {
            return -FI_EINVAL;
        }
        op = bounce_op(ep, iov, count, ctx != &ep->domain->silent, context, &len);
        if (!op) {
            return -FI_EAGAIN;
        }
        buf = op->bounce;
        ctx = op;
    }
    int32_t s = flags & FI_REMOTE_CQ_DATA ? rdm4_writedata(ep->rep, buf, len, data, h, addr, key, ctx)
                                          : rdm4_write(ep->rep, buf, len, h, addr, key, ctx);
    if (s != RDM4_SUCCESS && op) {
        rf_op_put(ep->domain, op);
    }
    return ret(s);
}

static ssize_t ep_read(struct fid_ep *fid, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr,
                       uint64_t key, void *context)
{
    struct iovec one = { buf, len };
    (void)desc;
    return read_any(EP(fid), &one, 1, src, addr, key, EP(fid)->tx_op_flags, context);
}

static ssize_t ep_readv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
                        uint64_t addr, uint64_t key, void *context)
{
    (void)desc;
    return read_any(EP(fid), iov, count, src, addr, key, EP(fid)->tx_op_flags, context);
}

static ssize_t ep_readmsg(struct fid_ep *fid, const struct fi_msg_rma *msg, uint64_t flags)
{
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        return -FI_EINVAL;
    }
    if (iov_total(msg->msg_iov, msg->iov_count) > msg->rma_iov[0].len) {
        return -FI_EINVAL;
    }
    return read_any(EP(fid), msg->msg_iov, msg->iov_count, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key,
                    flags, msg->context);
}

static ssize_t ep_write(struct fid_ep *fid, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr,
                        uint64_t key, void *context)
{
    struct rf_ep *ep = EP(fid);
    (void)desc;
    rdm4_addr h;
    int r = dest_of(ep, dest, &h);
    if (r) {
        return r;
    }
    return ret(rdm4_write(ep->rep, buf, len, h, addr, key, tx_ctx(ep, ep->tx_op_flags, context)));
}

static ssize_t ep_writev(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
                         uint64_t addr, uint64_t key, void *context)
{
    (void)desc;
    return write_any(EP(fid), iov, count, dest, addr, key, 0, EP(fid)->tx_op_flags, context);
}

static ssize_t ep_writemsg(struct fid_ep *fid, const struct fi_msg_rma *msg, uint64_t flags)
{
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        return -FI_EINVAL;
    }
    if (iov_total(msg->msg_iov, msg->iov_count) > msg->rma_iov[0].len) {
        return -FI_EINVAL;
    }
    return write_any(EP(fid), msg->msg_iov, msg->iov_count, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key,
                     msg->data, flags, msg->context);
}

static ssize_t ep_inject_write(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
                               uint64_t key)
{
    struct iovec one = { (void *)buf, len };
    return write_any(EP(fid), &one, 1, dest, addr, key, 0, FI_INJECT, &EP(fid)->domain->silent);
}

static ssize_t ep_writedata(struct fid_ep *fid, const void *buf, size_t len, void *desc, uint64_t data,
                            fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
    struct iovec one = { (void *)buf, len };
    (void)desc;
    return write_any(EP(fid), &one, 1, dest, addr, key, data, EP(fid)->tx_op_flags | FI_REMOTE_CQ_DATA, context);
}

static ssize_t ep_inject_writedata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
                                   uint64_t addr, uint64_t key)
{
    struct iovec one = { (void *)buf, len };
    return write_any(EP(fid), &one, 1, dest, addr, key, data, FI_INJECT | FI_REMOTE_CQ_DATA, &EP(fid)->domain->silent);
}

static struct fi_ops_rma rma_ops = {
    .size = sizeof(struct fi_ops_rma),
    .read = ep_read,
    .readv = ep_readv,
    .readmsg = ep_readmsg,
    .write = ep_write,
    .writev = ep_writev,
    .writemsg = ep_writemsg,
    .inject = ep_inject_write,
    .writedata = ep_writedata,
    .injectdata = ep_inject_writedata,
};

/* Atomics. */

static size_t dt_size(enum fi_datatype t)
{
    switch (t) {
    case FI_INT8:
    case FI_UINT8:
        return 1;
    case FI_INT16:
    case FI_UINT16:
        return 2;
    case FI_INT32:
    case FI_UINT32:
    case FI_FLOAT:
        return 4;
    case FI_INT64:
    case FI_UINT64:
    case FI_DOUBLE:
    case FI_FLOAT_COMPLEX:
        return 8;
    case FI_DOUBLE_COMPLEX:
    case FI_INT128:
    case FI_UINT128:
        return 16;
    default:
        return 0;
    }
}

/* The iovecs of `count` fi_iocs of `size`-byte elements (at most
 * RF_IOV_LIMIT), and their element count. */
static int iocs(const struct fi_ioc *ioc, size_t count, size_t size, struct iovec *out, size_t *elems)
{
    if (count > RF_IOV_LIMIT || (!ioc && count) || !size) {
        return -FI_EINVAL;
    }
    *elems = 0;
    for (size_t i = 0; i < count; i++) {
        out[i].iov_base = ioc[i].addr;
        out[i].iov_len = ioc[i].count * size;
        *elems += ioc[i].count;
    }
    return 0;
}

/* Every atomic: `kind` 0 write, 1 fetch, 2 compare. */
static ssize_t atomic_any(struct rf_ep *ep, int kind, const struct fi_ioc *iov, size_t count,
                          const struct fi_ioc *comparev, size_t compare_count, struct fi_ioc *resultv,
                          size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                          enum fi_op op, uint64_t flags, void *context)
{
    rdm4_addr h;
    int r = dest_of(ep, dest, &h);
    if (r) {
        return r;
    }
    if (rf_atomic_valid(ep->domain, dt, op, kind, NULL) != 0) {
        return -FI_EOPNOTSUPP;
    }
    size_t size = dt_size(dt), n, nc = 0, nr = 0;
    struct iovec *v = malloc(3 * RF_IOV_LIMIT * sizeof *v);
    if (!v) {
        return -FI_ENOMEM;
    }
    struct iovec *cv = v + RF_IOV_LIMIT, *rv = v + 2 * RF_IOV_LIMIT;
    r = iocs(iov, count, size, v, &n);
    if (!r && kind == 2) {
        r = iocs(comparev, compare_count, size, cv, &nc);
    }
    if (!r && kind >= 1) {
        r = iocs(resultv, result_count, size, rv, &nr);
    }
    if (!r && (n == 0 || (kind == 2 && nc != n) || (kind >= 1 && nr != n))) {
        r = -FI_EINVAL;
    }
    if (!r && ((!(kind == 1 && op == FI_ATOMIC_READ) && !iov_valid(v, count)) ||
               (kind == 2 && !iov_valid(cv, compare_count)) || (kind >= 1 && !iov_valid(rv, result_count)))) {
        r = -FI_EINVAL;
    }
    if (r) {
        free(v);
        return r;
    }
    void *ctx = tx_ctx(ep, flags, context);
    const void *buf = v[0].iov_base;
    const void *cmp = kind == 2 ? cv[0].iov_base : NULL;
    void *res = kind >= 1 ? rv[0].iov_base : NULL;
    struct rf_op *rec = NULL;
    if (count > 1 || (flags & FI_INJECT) || (kind == 2 && compare_count > 1) || (kind >= 1 && result_count > 1)) {
        /* One block for rdm4: operands, compare values, results (copied
         * out into `resultv` at completion). */
        size_t ob = n * size, cb = kind == 2 ? n * size : 0, rb = kind >= 1 ? n * size : 0;
        rec = op_of(ep);
        char *block = rec ? malloc(ob + cb + rb + 1) : NULL;
        struct iovec *riov = rec && kind >= 1 ? malloc(result_count * sizeof *riov) : NULL;
        if (!rec || !block || (kind >= 1 && !riov)) {
            free(block);
            free(riov);
            if (rec) {
                rf_op_put(ep->domain, rec);
            }
            free(v);
            return -FI_EAGAIN;
        }
        size_t off = 0;
        for (size_t i = 0; i < count && !(kind == 1 && op == FI_ATOMIC_READ); i++) {
            memcpy(block + off, v[i].iov_base, v[i].iov_len);
            off += v[i].iov_len;
        }
        off = ob;
        for (size_t i = 0; i < compare_count && kind == 2; i++) {
            memcpy(block + off, cv[i].iov_base, cv[i].iov_len);
            off += cv[i].iov_len;
        }
        rec->kind = kind >= 1 ? RF_OP_SCATTER : RF_OP_BOUNCE;
        rec->report = ctx != &ep->domain->silent;
        rec->context = context;
        rec->bounce = block;
        rec->scatter_off = ob + cb;
        if (kind >= 1) {
            memcpy(riov, rv, result_count * sizeof *riov);
            rec->iov = riov;
            rec->iov_count = result_count;
        }
        buf = block;
        cmp = block + ob;
        res = block + ob + cb;
        ctx = rec;
    }
    int32_t s;
    rdm4_ep *e = ep->rep;
    switch (kind) {
    case 0:
        s = rdm4_atomic(e, buf, n, dt, op, h, addr, key, ctx);
        break;
    case 1:
        s = rdm4_fetch_atomic(e, op == FI_ATOMIC_READ && !count ? NULL : buf, n, res, dt, op, h, addr, key, ctx);
        break;
    default:
        s = rdm4_compare_atomic(e, buf, n, cmp, res, dt, op, h, addr, key, ctx);
        break;
    }
    if (s != RDM4_SUCCESS && rec) {
        rf_op_put(ep->domain, rec);
    }
    free(v);
    return ret(s);
}

static ssize_t at_write(struct fid_ep *fid, const void *buf, size_t count, void *desc, fi_addr_t dest, uint64_t addr,
                        uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
    struct fi_ioc one = { (void *)buf, count };
    (void)desc;
    return atomic_any(EP(fid), 0, &one, 1, NULL, 0, NULL, 0, dest, addr, key, dt, op, EP(fid)->tx_op_flags,
                      context);
}

static ssize_t at_writev(struct fid_ep *fid, const struct fi_ioc *iov, void **desc, size_t count, fi_addr_t dest,
                         uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
    (void)desc;
    return atomic_any(EP(fid), 0, iov, count, NULL, 0, NULL, 0, dest, addr, key, dt, op, EP(fid)->tx_op_flags,
                      context);
}

static ssize_t at_writemsg(struct fid_ep *fid, const struct fi_msg_atomic *msg, uint64_t flags)
{
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        return -FI_EINVAL;
    }
    return atomic_any(EP(fid), 0, msg->msg_iov, msg->iov_count, NULL, 0, NULL, 0, msg->addr, msg->rma_iov[0].addr,
                      msg->rma_iov[0].key, msg->datatype, msg->op, flags, msg->context);
}

static ssize_t at_inject(struct fid_ep *fid, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
                         uint64_t key, enum fi_datatype dt, enum fi_op op)
{
    struct fi_ioc one = { (void *)buf, count };
    return atomic_any(EP(fid), 0, &one, 1, NULL, 0, NULL, 0, dest, addr, key, dt, op, FI_INJECT, &EP(fid)->domain->silent);
}

static ssize_t at_readwrite(struct fid_ep *fid, const void *buf, size_t count, void *desc, void *result,
                            void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                            enum fi_op op, void *context)
{
    struct fi_ioc one = { (void *)buf, count }, res = { result, count };
    (void)desc, (void)result_desc;
    return atomic_any(EP(fid), 1, &one, 1, NULL, 0, &res, 1, dest, addr, key, dt, op, EP(fid)->tx_op_flags,
                      context);
}

static ssize_t at_readwritev(struct fid_ep *fid, const struct fi_ioc *iov, void **desc, size_t count,
                             struct fi_ioc *resultv, void **result_desc, size_t result_count, fi_addr_t dest,
                             uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
    (void)desc, (void)result_desc;
    return atomic_any(EP(fid), 1, iov, count, NULL, 0, resultv, result_count, dest, addr, key, dt, op,
                      EP(fid)->tx_op_flags, context);
}

static ssize_t at_readwritemsg(struct fid_ep *fid, const struct fi_msg_atomic *msg, struct fi_ioc *resultv,
                               void **result_desc, size_t result_count, uint64_t flags)
{
    (void)result_desc;
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        return -FI_EINVAL;
    }
    return atomic_any(EP(fid), 1, msg->msg_iov, msg->iov_count, NULL, 0, resultv, result_count, msg->addr,
                      msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op, flags, msg->context);
}

static ssize_t at_compwrite(struct fid_ep *fid, const void *buf, size_t count, void *desc, const void *compare,
                            void *compare_desc, void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
                            uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
    struct fi_ioc one = { (void *)buf, count }, cmp = { (void *)compare, count }, res = { result, count };
    (void)desc, (void)compare_desc, (void)result_desc;
    return atomic_any(EP(fid), 2, &one, 1, &cmp, 1, &res, 1, dest, addr, key, dt, op, EP(fid)->tx_op_flags,
                      context);
}

static ssize_t at_compwritev(struct fid_ep *fid, const struct fi_ioc *iov, void **desc, size_t count,
                             const struct fi_ioc *comparev, void **compare_desc, size_t compare_count,
                             struct fi_ioc *resultv, void **result_desc, size_t result_count, fi_addr_t dest,
                             uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
    (void)desc, (void)compare_desc, (void)result_desc;
    return atomic_any(EP(fid), 2, iov, count, comparev, compare_count, resultv, result_count, dest, addr, key, dt, op,
                      EP(fid)->tx_op_flags, context);
}

static ssize_t at_compwritemsg(struct fid_ep *fid, const struct fi_msg_atomic *msg, const struct fi_ioc *comparev,
                               void **compare_desc, size_t compare_count, struct fi_ioc *resultv, void **result_desc,
                               size_t result_count, uint64_t flags)
{
    (void)compare_desc, (void)result_desc;
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        return -FI_EINVAL;
    }
    return atomic_any(EP(fid), 2, msg->msg_iov, msg->iov_count, comparev, compare_count, resultv, result_count,
                      msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op, flags,
                      msg->context);
}

static int at_writevalid(struct fid_ep *fid, enum fi_datatype dt, enum fi_op op, size_t *count)
{
    return rf_atomic_valid(EP(fid)->domain, dt, op, 0, count);
}

static int at_readwritevalid(struct fid_ep *fid, enum fi_datatype dt, enum fi_op op, size_t *count)
{
    return rf_atomic_valid(EP(fid)->domain, dt, op, 1, count);
}

static int at_compwritevalid(struct fid_ep *fid, enum fi_datatype dt, enum fi_op op, size_t *count)
{
    return rf_atomic_valid(EP(fid)->domain, dt, op, 2, count);
}

static struct fi_ops_atomic atomic_ops = {
    .size = sizeof(struct fi_ops_atomic),
    .write = at_write,
    .writev = at_writev,
    .writemsg = at_writemsg,
    .inject = at_inject,
    .readwrite = at_readwrite,
    .readwritev = at_readwritev,
    .readwritemsg = at_readwritemsg,
    .compwrite = at_compwrite,
    .compwritev = at_compwritev,
    .compwritemsg = at_compwritemsg,
    .writevalid = at_writevalid,
    .readwritevalid = at_readwritevalid,
    .compwritevalid = at_compwritevalid,
};

/* Collectives: not offered (no FI_COLLECTIVE). */

static ssize_t coll_barrier(struct fid_ep *ep, fi_addr_t coll_addr, void *context)
{
    (void)ep, (void)coll_addr, (void)context;
    return -FI_ENOSYS;
}

static ssize_t coll_broadcast(struct fid_ep *ep, void *buf, size_t count, void *desc, fi_addr_t coll_addr,
                              fi_addr_t root_addr, enum fi_datatype datatype, uint64_t flags, void *context)
{
    (void)ep, (void)buf, (void)count, (void)desc, (void)coll_addr, (void)root_addr, (void)datatype, (void)flags,
        (void)context;
    return -FI_ENOSYS;
}

static ssize_t coll_gather_like(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,
                                void *result_desc, fi_addr_t coll_addr, enum fi_datatype datatype, uint64_t flags,
                                void *context)
{
    (void)ep, (void)buf, (void)count, (void)desc, (void)result, (void)result_desc, (void)coll_addr, (void)datatype,
        (void)flags, (void)context;
    return -FI_ENOSYS;
}

static ssize_t coll_reduce_like(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,
                                void *result_desc, fi_addr_t coll_addr, enum fi_datatype datatype, enum fi_op op,
                                uint64_t flags, void *context)
{
    (void)ep, (void)buf, (void)count, (void)desc, (void)result, (void)result_desc, (void)coll_addr, (void)datatype,
        (void)op, (void)flags, (void)context;
    return -FI_ENOSYS;
}

static ssize_t coll_rooted(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,
                           void *result_desc, fi_addr_t coll_addr, fi_addr_t root_addr, enum fi_datatype datatype,
                           enum fi_op op, uint64_t flags, void *context)
{
    (void)ep, (void)buf, (void)count, (void)desc, (void)result, (void)result_desc, (void)coll_addr, (void)root_addr,
        (void)datatype, (void)op, (void)flags, (void)context;
    return -FI_ENOSYS;
}

static ssize_t coll_rooted_noop(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,
                                void *result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,
                                enum fi_datatype datatype, uint64_t flags, void *context)
{
    (void)ep, (void)buf, (void)count, (void)desc, (void)result, (void)result_desc, (void)coll_addr, (void)root_addr,
        (void)datatype, (void)flags, (void)context;
    return -FI_ENOSYS;
}

static ssize_t coll_msg(struct fid_ep *ep, const struct fi_msg_collective *msg, struct fi_ioc *resultv,
                        void **result_desc, size_t result_count, uint64_t flags)
{
    (void)ep, (void)msg, (void)resultv, (void)result_desc, (void)result_count, (void)flags;
    return -FI_ENOSYS;
}

static ssize_t coll_barrier2(struct fid_ep *ep, fi_addr_t coll_addr, uint64_t flags, void *context)
{
    (void)ep, (void)coll_addr, (void)flags, (void)context;
    return -FI_ENOSYS;
}

static struct fi_ops_collective coll_ops = {
    .size = sizeof(struct fi_ops_collective),
    .barrier = coll_barrier,
    .broadcast = coll_broadcast,
    .alltoall = coll_gather_like,
    .allreduce = coll_reduce_like,
    .allgather = coll_gather_like,
    .reduce_scatter = coll_reduce_like,
    .reduce = coll_rooted,
    .scatter = coll_rooted_noop,
    .gather = coll_rooted_noop,
    .msg = coll_msg,
    .barrier2 = coll_barrier2,
};

/* Names. */

/* The endpoint's name; under IP addressing its udp device's IPv4 address
 * and port (-FI_EADDRNOTAVAIL when it has none: bound to IPv6). */
static int cm_getname(fid_t fid, void *addr, size_t *addrlen)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    if (!addrlen) {
        return -FI_EINVAL;
    }
    if (!ep->domain->ip) {
        int32_t r = rdm4_ep_getname(ep->rep, addr, addrlen);
        return r == RDM4_SUCCESS ? 0 : -rf_errno(r);
    }
    uint8_t name[RF_ADDR_LEN];
    size_t len = sizeof name;
    struct sockaddr_in sin;
    if (rdm4_ep_getname(ep->rep, name, &len) != RDM4_SUCCESS || rf_name_sin(name, &sin) != 0) {
        return -FI_EADDRNOTAVAIL;
    }
    size_t have = *addrlen;
    *addrlen = sizeof sin;
    if (!addr || have < sizeof sin) {
        return -FI_ETOOSMALL;
    }
    memcpy(addr, &sin, sizeof sin);
    return 0;
}

/* rdm4 chooses its endpoints' names (a name carries a connection id):
 * only the endpoint's own name can be set. */
static int cm_setname(fid_t fid, void *addr, size_t addrlen)
{
    uint8_t own[RF_ADDR_LEN];
    size_t len = sizeof own;
    int r = cm_getname(fid, own, &len);
    if (r) {
        return r;
    }
    return addr && addrlen == len && memcmp(addr, own, len) == 0 ? 0 : -FI_EINVAL;
}

static int cm_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
    (void)ep, (void)addr, (void)addrlen;
    return -FI_ENOSYS; /* connectionless */
}

static struct fi_ops_cm cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = cm_setname,
    .getname = cm_getname,
    .getpeer = cm_getpeer,
    .connect = (void *)rf_nosys_int,
    .listen = (void *)rf_nosys_int,
    .accept = (void *)rf_nosys_int,
    .reject = (void *)rf_nosys_int,
    .shutdown = (void *)rf_nosys_int,
    .join = (void *)rf_nosys_int,
};

/* The endpoint object. */

static ssize_t ep_cancel(fid_t fid, void *context)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    if (ep->mhead && mrecv_cancel(ep, context) == 0) {
        return 0;
    }
    int32_t r = rdm4_cancel(ep->rep, context);
    return r == RDM4_SUCCESS ? 0 : r == RDM4_ENOENT ? -FI_ENOENT : ret(r);
}

/* FI_OPT_MIN_MULTI_RECV (a size_t) is the one option. */
static int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV) {
        return -FI_ENOPROTOOPT;
    }
    if (!optval || !optlen || *optlen < sizeof(size_t)) {
        return -FI_EINVAL;
    }
    *(size_t *)optval = ep->min_multi_recv;
    *optlen = sizeof(size_t);
    return 0;
}

static int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV) {
        return -FI_ENOPROTOOPT;
    }
    if (!optval || optlen != sizeof(size_t)) {
        return -FI_EINVAL;
    }
    ep->min_multi_recv = *(const size_t *)optval;
    return 0;
}

static ssize_t ep_size_left(struct fid_ep *ep)
{
    (void)ep;
    return -FI_ENOSYS;
}

static struct fi_ops_ep ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = ep_cancel,
    .getopt = ep_getopt,
    .setopt = ep_setopt,
    .tx_ctx = (void *)rf_nosys_int,
    .rx_ctx = (void *)rf_nosys_int,
    .rx_size_left = ep_size_left,
    .tx_size_left = ep_size_left,
};

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    if (!bfid) {
        return -FI_EINVAL;
    }
    if (ep->enabled) {
        return -FI_EOPBADSTATE;
    }
    switch (bfid->fclass) {
    case FI_CLASS_AV: {
        struct rf_av *av = (struct rf_av *)bfid;
        if (av->domain != ep->domain || flags) {
            return flags ? -FI_EBADFLAGS : -FI_EINVAL;
        }
        if (ep->av) {
            return -FI_EINVAL;
        }
        if (ep->own) {
            int r = rf_av_view_add(av, ep);
            if (r) {
                return r;
            }
        }
        ep->av = av;
        atomic_fetch_add(&av->ref, 1);
        return 0;
    }
    case FI_CLASS_CQ: {
        struct rf_cq *cq = (struct rf_cq *)bfid;
        if (cq->domain != ep->domain) {
            return -FI_EINVAL;
        }
        if (flags & ~(uint64_t)(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) {
            return -FI_EBADFLAGS;
        }
        if (!(flags & (FI_TRANSMIT | FI_RECV)) || ((flags & FI_TRANSMIT) && ep->tx_cq) ||
            ((flags & FI_RECV) && ep->rx_cq)) {
            return -FI_EINVAL;
        }
        if (flags & FI_TRANSMIT) {
            ep->tx_cq = cq;
            ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
            atomic_fetch_add(&cq->ref, 1);
        }
        if (flags & FI_RECV) {
            ep->rx_cq = cq;
            ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
            atomic_fetch_add(&cq->ref, 1);
        }
        return 0;
    }
    case FI_CLASS_CNTR: {
        struct rf_cntr *c = (struct rf_cntr *)bfid;
        static const uint64_t slot_flag[RF_CNTR_SLOTS] = { FI_SEND, FI_RECV, FI_READ, FI_WRITE };
        if (c->domain != ep->domain) {
            return -FI_EINVAL;
        }
        if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) {
            return -FI_EOPNOTSUPP; /* no FI_RMA_EVENT */
        }
        if (!flags || (flags & ~(uint64_t)(FI_SEND | FI_RECV | FI_READ | FI_WRITE))) {
            return flags ? -FI_EBADFLAGS : -FI_EINVAL;
        }
        for (int s = 0; s < RF_CNTR_SLOTS; s++) {
            if ((flags & slot_flag[s]) && ep->cntr[s]) {
                return -FI_EINVAL;
            }
        }
        for (int s = 0; s < RF_CNTR_SLOTS; s++) {
            if (flags & slot_flag[s]) {
                ep->cntr[s] = c;
                atomic_fetch_add(&c->ref, 1);
            }
        }
        return 0;
    }
    case FI_CLASS_EQ: {
        struct rf_eq *eq = (struct rf_eq *)bfid;
        if (ep->eq) {
            return -FI_EINVAL;
        }
        ep->eq = eq;
        atomic_fetch_add(&eq->ref, 1);
        return 0;
    }
    default:
        return -FI_EINVAL;
    }
}

static int ep_control(struct fid *fid, int command, void *arg)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    switch (command) {
    case FI_ENABLE:
        if (!ep->av) {
            return -FI_ENOAV;
        }
        ep->enabled = 1;
        return 0;
    case FI_GETOPSFLAG:
    case FI_SETOPSFLAG: {
        uint64_t *f = arg;
        if (!f || !!(*f & FI_TRANSMIT) == !!(*f & FI_RECV)) {
            return -FI_EINVAL;
        }
        uint64_t *mine = *f & FI_TRANSMIT ? &ep->tx_op_flags : &ep->rx_op_flags;
        if (command == FI_GETOPSFLAG) {
            *f = *mine;
        } else {
            uint64_t v = *f & ~(uint64_t)(FI_TRANSMIT | FI_RECV);
            if (v & ~(*f & FI_TRANSMIT ? RF_TX_OP_FLAGS : (uint64_t)RF_RX_OP_FLAGS)) {
                return -FI_EBADFLAGS;
            }
            *mine = v;
        }
        return 0;
    }
    default:
        return -FI_ENOSYS;
    }
}

static int ep_close(struct fid *fid)
{
    struct rf_ep *ep = (struct rf_ep *)fid;
    struct rf_domain *d = ep->domain;
    /* Multi-receive buffers: those behind the first are forgotten, the
     * first's receive is canceled (its completion is taken below). */
    rf_lock(d->locked, &ep->mrecv_lock);
    if (ep->mhead) {
        for (struct rf_op *op = ep->mhead->mnext, *next; op; op = next) {
            next = op->mnext;
            rf_op_put(d, op);
        }
        ep->mhead->mnext = NULL;
        ep->mtail = ep->mhead;
        if (ep->mhead->mposted) {
            (void)rdm4_cancel(ep->rep, ep->mhead);
        }
    }
    rf_unlock(d->locked, &ep->mrecv_lock);
    /* Completions due to this endpoint's queues go there first. */
    rf_progress(d);
    /* Off the domain's list: progress no longer takes its completions. */
    pthread_mutex_lock(&d->ep_lock);
    if (d->endpoints == ep) {
        atomic_store_explicit(&d->endpoints, ep->next, memory_order_release);
    } else {
        struct rf_ep *prev = d->endpoints;
        while (prev && prev->next != ep) {
            prev = prev->next;
        }
        if (prev) {
            prev->next = ep->next;
        }
    }
    d->ep_count--;
    pthread_mutex_unlock(&d->ep_lock);
    /* Queued completions get their sources now (through its view), then
     * the view goes before its rdm4 endpoint, so that the address vector
     * no longer inserts into or removes from a closed one. */
    for (int k = 0; k < 2; k++) {
        struct rf_cq *cq = k ? ep->tx_cq : ep->rx_cq;
        if (cq) {
            rf_cq_forget(cq, ep);
        }
    }
    if (ep->view) {
        rf_av_view_remove(ep->av, ep);
    }
    if (ep->own) {
        /* Its own rdm4 endpoint cancels what is in flight; the records of
         * those operations go back to the domain. */
        int32_t fd = d->epfd >= 0 ? rdm4_ep_fd(ep->rep) : -1;
        if (fd >= 0) {
            epoll_ctl(d->epfd, EPOLL_CTL_DEL, fd, NULL);
        }
        rdm4_ep_close(ep->rep);
        for (size_t i = 0; i < RF_OPS; i++) {
            if (d->ops[i].used && d->ops[i].owner == ep) {
                rf_op_put(d, &d->ops[i]);
            }
        }
    }
    if (ep->av) {
        atomic_fetch_sub(&ep->av->ref, 1);
    }
    if (ep->tx_cq) {
        atomic_fetch_sub(&ep->tx_cq->ref, 1);
    }
    if (ep->rx_cq) {
        atomic_fetch_sub(&ep->rx_cq->ref, 1);
    }
    for (int s = 0; s < RF_CNTR_SLOTS; s++) {
        if (ep->cntr[s]) {
            atomic_fetch_sub(&ep->cntr[s]->ref, 1);
        }
    }
    if (ep->eq) {
        atomic_fetch_sub(&ep->eq->ref, 1);
    }
    pthread_mutex_destroy(&ep->mrecv_lock);
    atomic_fetch_sub(&d->ref, 1);
    pthread_mutex_destroy(&ep->discard_lock);
    free(ep);
    return 0;
}

static struct fi_ops ep_fi_ops = RF_FI_OPS(ep_close, ep_bind, ep_control);

int rf_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **epp, void *context)
{
    if (!domain || !info || !epp) {
        return -FI_EINVAL;
    }
    struct rf_domain *d = (struct rf_domain *)domain;
    if (info->ep_attr && info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_UNSPEC) {
        return -FI_EINVAL;
    }
    struct rf_ep *ep = calloc(1, sizeof *ep);
    if (!ep) {
        return -FI_ENOMEM;
    }
    ep->domain = d;
    pthread_mutex_lock(&d->ep_lock);
    if (d->ep_count >= RF_EP_CNT) {
        pthread_mutex_unlock(&d->ep_lock);
        free(ep);
        return -FI_ENOSPC; /* domain_attr->ep_cnt */
    }
    /* The domain's rdm4 endpoint, unless an endpoint of it has that. */
    int taken = 0;
    for (struct rf_ep *o = d->endpoints; o; o = o->next) {
        taken |= !o->own;
    }
    ep->rep = d->ep;
    if (taken) {
        int32_t r = rdm4_ep_open(&d->attr, &ep->rep);
        if (r != RDM4_SUCCESS) {
            pthread_mutex_unlock(&d->ep_lock);
            free(ep);
            FI_WARN(&rf_prov, FI_LOG_EP_CTRL, "rdm4_ep_open of a later endpoint: %s\n", rdm4_strerror(r));
            return r == RDM4_ENOMEM ? -FI_ENOMEM : -FI_ENODEV;
        }
        ep->own = 1;
        if (d->epfd >= 0 && rf_epoll_add(d->epfd, ep->rep) != 0) {
            FI_WARN(&rf_prov, FI_LOG_EP_CTRL, "a later endpoint's descriptor is not in the domain's wait set\n");
        }
    }
    d->ep_count++;
    pthread_mutex_unlock(&d->ep_lock);
    ep->caps = info->caps ? info->caps : RF_CAPS;
    ep->directed = (ep->caps & FI_DIRECTED_RECV) != 0;
    ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : FI_COMPLETION;
    ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : FI_COMPLETION;
    pthread_mutex_init(&ep->discard_lock, NULL);
    pthread_mutex_init(&ep->mrecv_lock, NULL);
    ep->min_multi_recv = RF_MIN_MULTI_RECV;
    ep->fid.fid.fclass = FI_CLASS_EP;
    ep->fid.fid.context = context;
    ep->fid.fid.ops = &ep_fi_ops;
    ep->fid.ops = &ep_ops;
    ep->fid.cm = &cm_ops;
    ep->fid.msg = &msg_ops;
    ep->fid.rma = &rma_ops;
    ep->fid.tagged = &tagged_ops;
    ep->fid.atomic = &atomic_ops;
    ep->fid.collective = &coll_ops;
    pthread_mutex_lock(&d->ep_lock);
    ep->next = d->endpoints;
    atomic_store_explicit(&d->endpoints, ep, memory_order_release);
    pthread_mutex_unlock(&d->ep_lock);
    atomic_fetch_add(&d->ref, 1);
    *epp = &ep->fid;
    return 0;
}
