/*
 * The libfabric provider `rdm4`: libfabric's objects mapped onto rdm4's C API.
 *
 * One domain is one rdm4 endpoint (`rdm4_ep`) on one device: the domain's
 * memory registrations and address vectors live in it, and its first
 * libfabric endpoint sends and receives through it. A domain's later
 * endpoints (while the first is open; up to RF_EP_CNT in all) each open an
 * rdm4 endpoint of their own on the device: an address vector bound to
 * one keeps that endpoint's handles of its entries beside the domain's
 * (`struct rf_avview`); memory registrations stay the domain's, so a
 * later endpoint is no target of RMA or atomics (their keys are the first
 * endpoint's). Completion queues and counters hold what the endpoints'
 * completions become; reading them makes progress on the domains of the
 * endpoints bound to them.
 *
 * Locking: under FI_THREAD_DOMAIN the application serialises every call on
 * a domain and its objects, and the provider takes no lock of its own (the
 * rdm4 endpoint runs with RDM4_THREAD_SINGLE). Under the other levels each
 * completion queue, counter, address vector and event queue has a mutex,
 * and the rdm4 endpoint is thread safe.
 */
#ifndef RDM4_FI_H
#define RDM4_FI_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include "rdm4.h"

#define RF_NAME "rdm4"
#define RF_FI_VERSION FI_VERSION(1, 17)
#define RF_ADDR_LEN RDM4_ADDR_LEN

/* What every domain offers. */
#define RF_PRIMARY_CAPS (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_DIRECTED_RECV)
#define RF_SECONDARY_CAPS                                                                                      \
    (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SOURCE | FI_LOCAL_COMM | \
     FI_REMOTE_COMM | FI_MULTI_RECV)
#define RF_CAPS (RF_PRIMARY_CAPS | RF_SECONDARY_CAPS)
/* The capabilities that belong to the transmit and the receive side. */
#define RF_TX_CAPS (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND | FI_READ | FI_WRITE)
#define RF_RX_CAPS                                                                                        \
    (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_DIRECTED_RECV | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE | \
     FI_SOURCE | FI_MULTI_RECV)
/* Memory registration modes rdm4 needs for remote access: its keys are
 * its own and remote addresses are virtual addresses. */
#define RF_MR_REMOTE_MODES (FI_MR_PROV_KEY | FI_MR_VIRT_ADDR)
#define RF_TX_OP_FLAGS                                                                                   \
    (FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_INJECT | \
     FI_MORE | FI_REMOTE_CQ_DATA)
#define RF_RX_OP_FLAGS (FI_COMPLETION | FI_MULTI_RECV)
/* The default of FI_OPT_MIN_MULTI_RECV. */
#define RF_MIN_MULTI_RECV 16384
#define RF_IOV_LIMIT 1024
#define RF_QUEUE_SIZE 8192
#define RF_INJECT_SIZE 65536
#define RF_CQ_DATA_SIZE 8
#define RF_TAG_FORMAT 0xAAAAAAAAAAAAAAAAull
/* Provider-side records of operations that need work at completion (a
 * copy to free, a result to scatter): so many per domain at once. */
#define RF_OPS 1024
/* Endpoints of one domain at most (`domain_attr->ep_cnt`). */
#define RF_EP_CNT 256

extern struct fi_provider rf_prov;

/* The src_addr of an fi_info that fi_getinfo with FI_SOURCE, a node or
 * a service answered: where the domain's udp device is to bind. */
#define RF_SRC_MAGIC "rdm4src"
struct rf_src_request {
    char magic[8];   /* RF_SRC_MAGIC */
    char node[46];   /* an IP address, NUL-terminated; empty: any */
    uint16_t port;   /* 0: any */
};

/* The name of the endpoint bound at `node` and `service`, asked of its
 * port for `ms` (0: FI_RDM4_RESOLVE_MS) (`rdm4_resolve`; logged when none
 * came): its rdm4 status. */
int32_t rf_resolve(const char *node, const char *service, int ms, uint8_t name[RF_ADDR_LEN]);

/* IP addressing (addr_format FI_SOCKADDR_IN): the IPv4 address and port
 * of a udp or auto name (its gid and qpn: rdm4(7)) into `sin`; -1 when the
 * name holds none (a shm address, an IPv6 one). */
int rf_name_sin(const uint8_t name[RF_ADDR_LEN], struct sockaddr_in *sin);
/* Whether `a` of `len` bytes is an IPv4 socket address. */
int rf_is_sin(const void *a, size_t len);
/* "fi_sockaddr_in://a.b.c.d:port" into `buf` of `len` bytes. */
void rf_sin_str(const struct sockaddr_in *sin, char *buf, size_t len);

/* Returned by operations on objects that do not offer them. */
int rf_nosys_int(void);

/* What objects without a bind or a control operation answer. */
int rf_nosys_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int rf_nosys_control(struct fid *fid, int command, void *arg);

/* The fi_ops of an object: its close, bind and control; the other
 * operations are not offered. */
#define RF_FI_OPS(close_, bind_, control_)                                                             \
    {                                                                                                   \
        .size = sizeof(struct fi_ops), .close = (close_), .bind = (bind_), .control = (control_),      \
        .ops_open = (void *)rf_nosys_int, .tostr = (void *)rf_nosys_int, .ops_set = (void *)rf_nosys_int, \
    }

/* rdm4's text of a provider error number, into `buf` when given (the
 * strerror of completion and event queues). */
const char *rf_strerror(int prov_errno, char *buf, size_t len);

/* The -FI_E* code of an rdm4 status returned by a call, and the positive
 * FI_E* error number of one in a completion. */
int rf_errno(int32_t status);

/* A name of the device (`RDM4_DEVICE_*`), or NULL. */
const char *rf_device_name(uint32_t device);
/* The device a domain name names, or -1. */
int rf_device_of(const char *name);

/* Allocation of records for operations: see `struct rf_op`. */
enum rf_op_kind {
    RF_OP_BOUNCE,  /* free `bounce` at completion (an inject with a completion) */
    RF_OP_SCATTER, /* copy `bounce` into `iov` at completion, then free both */
    RF_OP_MULTI,   /* a multi-receive buffer (FI_MULTI_RECV): see ep.c */
};

struct rf_op {
    enum rf_op_kind kind;
    int report;        /* write a completion */
    void *context;     /* the application's */
    void *bounce;      /* malloc'd */
    struct iovec *iov; /* malloc'd (RF_OP_SCATTER) */
    size_t iov_count;
    size_t scatter_off; /* where in `bounce` the bytes for `iov` start */
    struct rf_ep *owner; /* the endpoint that posted it */
    int used;            /* not in the free list */
    /* RF_OP_MULTI: the buffer, its length, the bytes filled, the source
     * its messages come from, whether a receive into it is posted to
     * rdm4, and the next buffer of the endpoint's queue. */
    char *mbase;
    size_t mlen, moff;
    rdm4_addr msrc;
    int mposted;
    struct rf_op *mnext;
    struct rf_op *next_free;
};

struct rf_fabric {
    struct fid_fabric fid;
    atomic_int ref;
};

struct rf_ep;

struct rf_domain {
    struct fid_domain fid;
    struct rf_fabric *fabric;
    rdm4_ep *ep;
    rdm4_ep_attr attr; /* what later endpoints open their own with */
    rdm4_ep_info info;
    enum fi_threading threading;
    int locked; /* the provider's objects take their mutexes */
    enum fi_av_type av_type;
    int ip; /* addr_format FI_SOCKADDR_IN: see "IP addressing" in domain.c */
    atomic_int ref;
    /* Its endpoints, newest first; one of them (`own` 0) uses `ep`. The
     * list changes under `ep_lock`; progress reads it without (an
     * endpoint must not close while another thread reads its queues). */
    struct rf_ep *_Atomic endpoints;
    pthread_mutex_t ep_lock;
    int ep_count;
    int epfd; /* the wait descriptor (`FI_GETWAIT`), -1 until asked for */
    pthread_mutex_t op_lock;
    struct rf_op ops[RF_OPS];
    struct rf_op *free_ops;
    char silent; /* its address: the context of operations without a completion */
};

/* An entry of a completion queue: the tagged format (the others are its
 * prefixes) and the source; or an error. */
struct rf_cqe {
    struct fi_cq_tagged_entry e;
    rdm4_addr src; /* rdm4's handle of the source (RDM4_ADDR_UNSPEC: none) */
    struct rf_ep *ep; /* whose handle (NULL once it closed: `src_fi` then) */
    fi_addr_t src_fi;
    int err;          /* positive FI_E*, 0 for a success */
    int prov_errno;   /* the rdm4 status */
    uint64_t olen;
};

struct rf_cq {
    struct fid_cq fid;
    struct rf_domain *domain;
    enum fi_cq_format format;
    size_t entry_size;
    enum fi_wait_obj wait_obj;
    atomic_int ref; /* endpoints bound */
    atomic_int signaled;
    pthread_mutex_t lock;
    struct rf_cqe *ring;
    size_t cap, head, count;
};

struct rf_cntr {
    struct fid_cntr fid;
    struct rf_domain *domain;
    atomic_uint_least64_t value, err;
    atomic_int ref;
};

/* Open addressing from rdm4 handles to the entries of an array of them
 * (index + 1; 0: free): `cap` slots, a power of two, at most half full. */
struct rf_hidx {
    size_t *slot;
    size_t cap;
};

/* A later endpoint's handles of an address vector's entries (the same
 * indices as the vector's; RDM4_ADDR_UNSPEC where it has none). */
struct rf_avview {
    struct rf_ep *ep;
    rdm4_addr *handle;
    struct rf_hidx idx;
};

/* The state of an address vector's entry. */
enum rf_entry {
    RF_ENTRY_FREE,       /* removed (FI_AV_TABLE), or never inserted */
    RF_ENTRY_UNRESOLVED, /* IP addressing: its name not asked yet */
    RF_ENTRY_LIVE,       /* inserted into the rdm4 endpoint */
};

struct rf_av {
    struct fid_av fid;
    struct rf_domain *domain;
    enum fi_av_type type;
    atomic_int ref;
    struct rf_eq *eq;
    int event; /* opened with FI_EVENT: inserts report by `eq` */
    pthread_mutex_t lock;
    /* Every address inserted: its state (`enum rf_entry`), rdm4 handle
     * and raw address; under IP addressing also its IP address and port.
     * For FI_AV_TABLE, and FI_AV_MAP under IP addressing, the index is the
     * fi_addr; removed entries (and unresolved ones) have handle
     * RDM4_ADDR_UNSPEC. */
    int ip;
    size_t n, cap, unresolved;
    uint8_t *state;
    rdm4_addr *handle;
    uint8_t (*raw)[RF_ADDR_LEN];
    struct sockaddr_in *sin;
    double *failed_ms; /* when its name was last asked in vain (now_ms) */
    /* IP addressing: entries inserted so far, and senders whose entry was
     * looked for in vain among all of them then, and when (see domain.c). */
    uint64_t gen;
    struct {
        struct rf_ep *ep;
        rdm4_addr handle;
        uint64_t gen;
        double at_ms;
    } misses[16];
    /* Handles to entries, for the sources of completions. */
    struct rf_hidx idx;
    /* The handles of the entries in each later endpoint bound to it. */
    struct rf_avview **views;
    size_t nviews;
};

struct rf_eq_event {
    uint32_t event;
    int is_err;
    size_t len;
    union {
        struct fi_eq_entry entry;
        struct fi_eq_err_entry err;
        uint8_t bytes[256];
    } u;
};

struct rf_eq {
    struct fid_eq fid;
    struct rf_fabric *fabric;
    enum fi_wait_obj wait_obj;
    int fd; /* eventfd, -1 without a wait object */
    atomic_int ref;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct rf_eq_event *q;
    size_t cap, head, count;
};

enum rf_cntr_slot { RF_CNTR_SEND, RF_CNTR_RECV, RF_CNTR_READ, RF_CNTR_WRITE, RF_CNTR_SLOTS };

struct rf_ep {
    struct fid_ep fid;
    struct rf_domain *domain;
    rdm4_ep *rep;          /* the domain's, or its own (`own`) */
    int own;
    struct rf_ep *next;    /* the domain's list */
    struct rf_avview *view; /* `own`: its view of the bound address vector */
    struct rf_av *av;
    struct rf_cq *tx_cq, *rx_cq;
    struct rf_eq *eq;
    struct rf_cntr *cntr[RF_CNTR_SLOTS];
    uint64_t caps;
    uint64_t tx_op_flags, rx_op_flags;
    int tx_selective, rx_selective; /* bound with FI_SELECTIVE_COMPLETION */
    int directed;                   /* FI_DIRECTED_RECV */
    int enabled;
    /* Contexts of claimed messages being discarded (FI_CLAIM | FI_DISCARD):
     * their truncation is the success they report. */
    pthread_mutex_t discard_lock;
    void *discarding[64];
    atomic_int ndiscarding;
    /* Multi-receive buffers in the order posted (RF_OP_MULTI records):
     * only the first has a receive posted to rdm4, so that they fill in
     * order. */
    pthread_mutex_t mrecv_lock;
    struct rf_op *mhead, *mtail;
    size_t min_multi_recv;
};

/* A completion of a multi-receive buffer's receive (`op`): fills `buf`
 * (where the message is), `flags` (FI_MULTI_RECV when the buffer is
 * released) and the application's context; posts the next receive into
 * it, or releases it and posts the next buffer's. */
void rf_mrecv_done(struct rf_ep *ep, struct rf_op *op, const rdm4_cqe *c, void **buf, uint64_t *flags,
                   void **context);

/* Whether `context` was being discarded (and forgets it). */
int rf_discard_done(struct rf_ep *ep, void *context);

/* Objects. */
int rf_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int rf_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, void *context);
int rf_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context);
int rf_eq_post(struct rf_eq *eq, uint32_t event, const void *buf, size_t len, int is_err);
int rf_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
int rf_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
int rf_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context);
int rf_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset);
int rf_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
int rf_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key,
              uint64_t flags, struct fid_mr **mr, void *context);
int rf_mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
               uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
int rf_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr);
int rf_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op, struct fi_atomic_attr *attr,
                    uint64_t flags);
int rf_trywait(struct fid_fabric *fabric, struct fid **fids, int count);

/* The rdm4 handle of `fi_addr` through the endpoint's address vector, or
 * RDM4_ADDR_UNSPEC when it names none (or, under IP addressing, its name
 * was asked in vain): the domain's (first endpoint), or a later
 * endpoint's (`rf_view_handle`). */
rdm4_addr rf_av_handle(struct rf_av *av, fi_addr_t fi_addr);
rdm4_addr rf_view_handle(struct rf_ep *ep, fi_addr_t fi_addr);
/* The fi_addr of endpoint `ep`'s rdm4 handle (the source of a
 * completion), or FI_ADDR_NOTAVAIL. */
fi_addr_t rf_ep_fi_addr(struct rf_ep *ep, rdm4_addr handle);
/* A view of `av` for later endpoint `ep` (every entry inserted into its
 * rdm4 endpoint), and its removal. */
int rf_av_view_add(struct rf_av *av, struct rf_ep *ep);
void rf_av_view_remove(struct rf_av *av, struct rf_ep *ep);
/* Adds rdm4 endpoint `rep`'s descriptor to epoll set `epfd`. */
int rf_epoll_add(int epfd, rdm4_ep *rep);
/* Entries of `cq` that name `ep` for their source get it resolved now
 * (`ep` closes). */
void rf_cq_forget(struct rf_cq *cq, struct rf_ep *ep);

/* Makes progress on the domain's endpoint: its completions go to the
 * completion queues and counters bound to it. Returns how many it moved
 * or a -FI_E* code. */
int rf_progress(struct rf_domain *domain);
/* Appends an entry to `cq` (the caller holds no lock). */
void rf_cq_push(struct rf_cq *cq, const struct rf_cqe *e);

/* Operation records. */
struct rf_op *rf_op_get(struct rf_domain *d);
void rf_op_put(struct rf_domain *d, struct rf_op *op);
static inline int rf_is_op(const struct rf_domain *d, const void *ctx)
{
    return (const char *)ctx >= (const char *)d->ops && (const char *)ctx < (const char *)(d->ops + RF_OPS);
}

static inline void rf_lock(int locked, pthread_mutex_t *m)
{
    if (locked) {
        pthread_mutex_lock(m);
    }
}

static inline void rf_unlock(int locked, pthread_mutex_t *m)
{
    if (locked) {
        pthread_mutex_unlock(m);
    }
}

#endif /* RDM4_FI_H */
