/*
 * The provider's entry point, `fi_getinfo`, the fabric, parameters and
 * status codes.
 *
 * `fi_getinfo` answers one entry per device (fabric and domain named
 * after it: "auto", "shm", "udp"), the default device first: the one
 * FI_RDM4_DEVICE or RDM4_DEVICE names, else auto. Only FI_EP_RDM
 * endpoints are offered, so that libfabric stacks none of its utility
 * providers on rdm4. Addresses travel as the 32-byte names `fi_getname`
 * gives (addr_format FI_FORMAT_UNSPEC): a name carries a connection id no
 * host name gives. A destination's node and service are therefore asked
 * for the name of the endpoint bound there (`rdm4_resolve`, for
 * FI_RDM4_RESOLVE_MS): the answer's dest_addr. With FI_SOURCE, node and
 * service name the udp device's own address and port (an IP address and a
 * number; 0 or none: any): the answer's src_addr carries that request
 * (`struct rf_src_request`) to the domain, which binds there; without
 * either, the src_addr binds anywhere.
 *
 * Hints with addr_format FI_SOCKADDR or FI_SOCKADDR_IN ask for IP
 * addressing: the auto and udp domains answer with FI_SOCKADDR_IN, and
 * addresses are IPv4 socket addresses (the udp device's address and port).
 * Then node and service are taken as they are: a destination becomes the
 * dest_addr without asking it for its name (the address vector asks at
 * first use: see domain.c), a source (FI_SOURCE) the src_addr.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdm4_fi.h"

int rf_nosys_int(void)
{
    return -FI_ENOSYS;
}

int rf_nosys_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    (void)fid, (void)bfid, (void)flags;
    return -FI_ENOSYS;
}

int rf_nosys_control(struct fid *fid, int command, void *arg)
{
    (void)fid, (void)command, (void)arg;
    return -FI_ENOSYS;
}

int rf_errno(int32_t status)
{
    switch (status) {
    case RDM4_SUCCESS:
        return 0;
    case RDM4_EAGAIN:
        return FI_EAGAIN;
    case RDM4_EINVAL:
    case RDM4_ENOADDR:
        return FI_EINVAL;
    case RDM4_ENOMEM:
        return FI_ENOMEM;
    case RDM4_EBADHANDLE:
        return FI_EBADF;
    case RDM4_ETRUNC:
        return FI_ETRUNC;
    case RDM4_EREMOTEACCESS:
    case RDM4_ENOREG:
        return FI_EACCES;
    case RDM4_EBUSY:
        return FI_EBUSY;
    case RDM4_ENOTSUP:
        return FI_EOPNOTSUPP;
    case RDM4_EPEER:
        return FI_EHOSTUNREACH;
    case RDM4_ETIMEDOUT:
        return FI_ETIMEDOUT;
    case RDM4_ECANCELED:
        return FI_ECANCELED;
    case RDM4_EOVERFLOW:
        return FI_EMSGSIZE;
    case RDM4_EIO:
        return FI_EIO;
    case RDM4_EREMOTE:
        return FI_EREMOTEIO;
    case RDM4_ETOOSMALL:
        return FI_ETOOSMALL;
    case RDM4_ENOENT:
        return FI_ENOENT;
    default:
        return FI_EOTHER;
    }
}

static const char *const device_names[] = {
    [RDM4_DEVICE_AUTO] = "auto",
    [RDM4_DEVICE_SHM] = "shm",
    [RDM4_DEVICE_UDP] = "udp",
};

const char *rf_device_name(uint32_t device)
{
    return device < sizeof device_names / sizeof device_names[0] ? device_names[device] : NULL;
}

int rf_device_of(const char *name)
{
    for (uint32_t d = 1; d < sizeof device_names / sizeof device_names[0]; d++) {
        if (device_names[d] && name && strcmp(name, device_names[d]) == 0) {
            return (int)d;
        }
    }
    return -1;
}

int rf_name_sin(const uint8_t name[RF_ADDR_LEN], struct sockaddr_in *sin)
{
    static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (memcmp(name, v4mapped, sizeof v4mapped) != 0) {
        return -1;
    }
    memset(sin, 0, sizeof *sin);
    sin->sin_family = AF_INET;
    memcpy(&sin->sin_addr, name + 12, 4);
    sin->sin_port = htons((uint16_t)(name[16] | name[17] << 8)); /* the qpn, little-endian */
    return 0;
}

int rf_is_sin(const void *a, size_t len)
{
    return a && len == sizeof(struct sockaddr_in) && ((const struct sockaddr_in *)a)->sin_family == AF_INET;
}

void rf_sin_str(const struct sockaddr_in *sin, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
    snprintf(buf, len, "fi_sockaddr_in://%s:%u", ip, ntohs(sin->sin_port));
}

/* Whether `hints` ask for IP addressing (`rf_domain.ip`); -1 for an
 * address format rdm4 has not. */
static int ip_of(const struct fi_info *hints)
{
    if (!hints || hints->addr_format == FI_FORMAT_UNSPEC) {
        return 0;
    }
    return hints->addr_format == FI_SOCKADDR || hints->addr_format == FI_SOCKADDR_IN ? 1 : -1;
}

/* The device to list first. */
static uint32_t default_device(void)
{
    char *s = NULL;
    if (fi_param_get_str(&rf_prov, "device", &s) == FI_SUCCESS && s && rf_device_of(s) > 0) {
        return (uint32_t)rf_device_of(s);
    }
    s = getenv("RDM4_DEVICE");
    return s && rf_device_of(s) > 0 ? (uint32_t)rf_device_of(s) : RDM4_DEVICE_AUTO;
}

/* rdm4's settings that FI_RDM4_<NAME> variables give, copied to
 * RDM4_<NAME> (which wins when both are set) before an endpoint opens. */
static const struct {
    const char *name;
    const char *help;
} settings[] = {
    { "udp_addr", "Address the udp device binds (RDM4_UDP_ADDR; default: the host's primary address)" },
    { "udp_port", "UDP port the udp device binds (RDM4_UDP_PORT; default: any)" },
    { "udp_mtu", "Largest datagram of the udp device (RDM4_UDP_MTU)" },
    { "udp_giveup_ms", "Milliseconds of silence after which a udp peer is given up (RDM4_UDP_GIVEUP_MS)" },
    { "shm_mtu", "Largest packet of the shm device (RDM4_SHM_MTU)" },
    { "timeout_ms", "Timeout of RMA and atomics in milliseconds (RDM4_TIMEOUT_MS)" },
    { "log", "rdm4's log level (RDM4_LOG)" },
    { "pcap", "File that receives a capture of every packet (RDM4_PCAP)" },
};

void rf_apply_settings(void);
void rf_apply_settings(void)
{
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        char *v = NULL;
        if (fi_param_get_str(&rf_prov, settings[i].name, &v) != FI_SUCCESS || !v) {
            continue;
        }
        char env[64] = "RDM4_";
        for (size_t k = 0; settings[i].name[k] && k + 6 < sizeof env; k++) {
            char c = settings[i].name[k];
            env[5 + k] = (char)(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
            env[6 + k] = 0;
        }
        setenv(env, v, 0);
    }
}

static int subset(uint64_t want, uint64_t have)
{
    return (want & ~have) == 0;
}

/* The memory registration mode to return for `caps`, or -1 when the
 * application's hints cannot be met. */
static int64_t mr_mode_for(uint32_t version, const struct fi_info *hints, uint64_t caps)
{
    int remote = (caps & (FI_RMA | FI_ATOMIC)) != 0;
    int want = hints && hints->domain_attr ? hints->domain_attr->mr_mode : FI_MR_UNSPEC;
    if (FI_VERSION_LT(version, FI_VERSION(1, 5)) || want == FI_MR_BASIC || want == FI_MR_SCALABLE) {
        /* The modes of old: basic is rdm4's (provider keys, virtual
         * addresses); scalable (keys of the application's) is not. */
        if (want == FI_MR_SCALABLE && remote) {
            return -1;
        }
        return FI_MR_BASIC;
    }
    if (!hints) {
        return RF_MR_REMOTE_MODES;
    }
    if (remote && !subset(RF_MR_REMOTE_MODES, (uint64_t)want)) {
        return -1;
    }
    return remote ? RF_MR_REMOTE_MODES : 0;
}

/* Whether `hints` leave room for `device`; fills `out` with the answer. */
static int is_src_request(const void *a, size_t len);
static int dup_addr(const void *a, size_t len, void **out, size_t *out_len);

static int fill_info(uint32_t version, uint32_t device, const struct fi_info *hints, struct fi_info *out)
{
    const char *dev = rf_device_name(device);
    uint64_t caps = RF_CAPS;
    if (device == RDM4_DEVICE_SHM) {
        caps &= ~FI_REMOTE_COMM;
    }
    if (hints) {
        if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM) {
            return 0;
        }
        if (hints->ep_attr && hints->ep_attr->protocol != FI_PROTO_UNSPEC &&
            hints->ep_attr->protocol != FI_PROTO_EFA) {
            return 0;
        }
        if (!subset(hints->caps, caps)) {
            return 0;
        }
        int ip = ip_of(hints);
        if (ip < 0 || (ip && device == RDM4_DEVICE_SHM)) {
            return 0; /* a shm endpoint has no IP address */
        }
        if (ip ? (hints->src_addr && !rf_is_sin(hints->src_addr, hints->src_addrlen)) ||
                     (hints->dest_addr && !rf_is_sin(hints->dest_addr, hints->dest_addrlen))
               : (hints->src_addr && hints->src_addrlen != RF_ADDR_LEN &&
                  !is_src_request(hints->src_addr, hints->src_addrlen)) ||
                     (hints->dest_addr && hints->dest_addrlen != RF_ADDR_LEN)) {
            return 0;
        }
        if (hints->fabric_attr && hints->fabric_attr->name && strcmp(hints->fabric_attr->name, dev) != 0) {
            return 0;
        }
        if (hints->fabric_attr && hints->fabric_attr->prov_name &&
            strcmp(hints->fabric_attr->prov_name, RF_NAME) != 0) {
            return 0;
        }
        if (hints->domain_attr && hints->domain_attr->name && strcmp(hints->domain_attr->name, dev) != 0) {
            return 0;
        }
        if (hints->domain_attr && !subset(hints->domain_attr->caps, caps & (FI_LOCAL_COMM | FI_REMOTE_COMM))) {
            return 0;
        }
        if (hints->domain_attr && hints->domain_attr->cq_data_size > RF_CQ_DATA_SIZE) {
            return 0;
        }
        if (hints->domain_attr && hints->domain_attr->mr_key_size > sizeof(uint64_t)) {
            return 0;
        }
        if (hints->domain_attr && hints->domain_attr->av_type != FI_AV_UNSPEC &&
            hints->domain_attr->av_type != FI_AV_MAP && hints->domain_attr->av_type != FI_AV_TABLE) {
            return 0;
        }
        if (hints->tx_attr) {
            const struct fi_tx_attr *t = hints->tx_attr;
            if (!subset(t->op_flags, RF_TX_OP_FLAGS) || !subset(t->msg_order, FI_ORDER_SAS) ||
                t->inject_size > RF_INJECT_SIZE || t->iov_limit > RF_IOV_LIMIT || t->rma_iov_limit > 1 ||
                t->size > RF_QUEUE_SIZE) {
                return 0;
            }
        }
        if (hints->rx_attr) {
            const struct fi_rx_attr *r = hints->rx_attr;
            if (!subset(r->op_flags, RF_RX_OP_FLAGS) || !subset(r->msg_order, FI_ORDER_SAS) ||
                r->iov_limit > RF_IOV_LIMIT || r->size > RF_QUEUE_SIZE || r->total_buffered_recv > 0) {
                return 0;
            }
        }
        /* Return only the primary capabilities asked for, and the
         * secondary ones that come with them. */
        if (hints->caps) {
            uint64_t primary = hints->caps & RF_PRIMARY_CAPS;
            if (!primary) {
                primary = RF_PRIMARY_CAPS;
            }
            caps = primary | (caps & RF_SECONDARY_CAPS);
        }
    }
    int64_t mr_mode = mr_mode_for(version, hints, caps);
    if (mr_mode < 0 && hints && !hints->caps) {
        /* Memory the application cannot register rdm4's way: no RMA. */
        caps &= ~(FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
        mr_mode = mr_mode_for(version, hints, caps);
    }
    if (mr_mode < 0) {
        return 0;
    }

    out->caps = caps;
    out->mode = 0;
    out->addr_format = ip_of(hints) ? FI_SOCKADDR_IN : FI_FORMAT_UNSPEC;
    if (hints && hints->dest_addr && dup_addr(hints->dest_addr, hints->dest_addrlen, &out->dest_addr,
                                              &out->dest_addrlen) != 0) {
        return -FI_ENOMEM;
    }
    if (hints && hints->src_addr && ip_of(hints) &&
        dup_addr(hints->src_addr, hints->src_addrlen, &out->src_addr, &out->src_addrlen) != 0) {
        return -FI_ENOMEM;
    }

    struct fi_tx_attr *tx = out->tx_attr;
    tx->caps = caps & RF_TX_CAPS;
    tx->mode = 0;
    tx->op_flags = FI_COMPLETION | (hints && hints->tx_attr ? hints->tx_attr->op_flags : 0);
    tx->msg_order = FI_ORDER_SAS;
    tx->comp_order = FI_ORDER_NONE;
    tx->inject_size = RF_INJECT_SIZE;
    tx->size = RF_QUEUE_SIZE;
    tx->iov_limit = RF_IOV_LIMIT;
    tx->rma_iov_limit = 1;

    struct fi_rx_attr *rx = out->rx_attr;
    rx->caps = caps & RF_RX_CAPS;
    rx->mode = 0;
    rx->op_flags = FI_COMPLETION | (hints && hints->rx_attr ? hints->rx_attr->op_flags : 0);
    rx->msg_order = FI_ORDER_SAS;
    rx->comp_order = FI_ORDER_NONE;
    rx->total_buffered_recv = 0;
    rx->size = RF_QUEUE_SIZE;
    rx->iov_limit = RF_IOV_LIMIT;

    struct fi_ep_attr *ep = out->ep_attr;
    ep->type = FI_EP_RDM;
    ep->protocol = FI_PROTO_EFA;
    ep->protocol_version = 4;
    ep->max_msg_size = RDM4_MSG_MAX;
    ep->msg_prefix_size = 0;
    ep->max_order_raw_size = 0;
    ep->max_order_war_size = 0;
    ep->max_order_waw_size = 0;
    ep->mem_tag_format = hints && hints->ep_attr && hints->ep_attr->mem_tag_format
                             ? hints->ep_attr->mem_tag_format
                             : RF_TAG_FORMAT;
    ep->tx_ctx_cnt = 1;
    ep->rx_ctx_cnt = 1;

    struct fi_domain_attr *dom = out->domain_attr;
    const struct fi_domain_attr *hd = hints ? hints->domain_attr : NULL;
    dom->name = strdup(dev);
    dom->threading = hd && hd->threading != FI_THREAD_UNSPEC ? hd->threading : FI_THREAD_SAFE;
    dom->control_progress = hd && hd->control_progress != FI_PROGRESS_UNSPEC ? hd->control_progress
                                                                              : FI_PROGRESS_MANUAL;
    dom->data_progress = hd && hd->data_progress != FI_PROGRESS_UNSPEC ? hd->data_progress : FI_PROGRESS_MANUAL;
    dom->resource_mgmt = FI_RM_ENABLED;
    dom->av_type = hd && hd->av_type != FI_AV_UNSPEC ? hd->av_type : FI_AV_MAP;
    dom->mr_mode = (int)mr_mode;
    dom->mr_key_size = sizeof(uint64_t);
    dom->cq_data_size = RF_CQ_DATA_SIZE;
    dom->cq_cnt = 1024;
    dom->ep_cnt = RF_EP_CNT;
    dom->tx_ctx_cnt = 1;
    dom->rx_ctx_cnt = 1;
    dom->max_ep_tx_ctx = 1;
    dom->max_ep_rx_ctx = 1;
    dom->max_ep_stx_ctx = 0;
    dom->max_ep_srx_ctx = 0;
    dom->cntr_cnt = 1024;
    dom->mr_iov_limit = 1;
    dom->caps = caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
    dom->mode = 0;
    dom->mr_cnt = 65536;

    struct fi_fabric_attr *fab = out->fabric_attr;
    fab->name = strdup(dev);
    fab->prov_version = FI_VERSION(RDM4_VERSION_MAJOR, RDM4_VERSION_MINOR);
    fab->api_version = RF_FI_VERSION;
    if (!dom->name || !fab->name) {
        return -FI_ENOMEM;
    }
    (void)version;
    return 1;
}

/* A source that `fi_getinfo` with FI_SOURCE was given as node and
 * service: parsed into the request `out` (node NULL: any address; service
 * NULL or 0: any port). -FI_ENODATA when it is no address and port. */
static int parse_source(const char *node, const char *service, struct rf_src_request *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->magic, RF_SRC_MAGIC, sizeof out->magic);
    if (service) {
        char *end;
        unsigned long port = strtoul(service, &end, 10);
        if (!*service || *end || port > 65535) {
            return -FI_ENODATA;
        }
        out->port = (uint16_t)port;
    }
    if (node) {
        uint8_t ip[16];
        if (strlen(node) >= sizeof out->node ||
            (inet_pton(AF_INET, node, ip) != 1 && inet_pton(AF_INET6, node, ip) != 1)) {
            return -FI_ENODATA;
        }
        memcpy(out->node, node, strlen(node));
    }
    return 0;
}

/* Whether `a` (of `len` bytes) is a source request (`rf_src_request`). */
static int is_src_request(const void *a, size_t len)
{
    return a && len == sizeof(struct rf_src_request) && memcmp(a, RF_SRC_MAGIC, sizeof RF_SRC_MAGIC) == 0;
}

/* How long a destination's node and service are asked (FI_RDM4_RESOLVE_MS). */
static int resolve_ms(void)
{
    int ms = 0;
    if (fi_param_get_int(&rf_prov, "resolve_ms", &ms) != FI_SUCCESS || ms <= 0) {
        ms = 2000;
    }
    return ms;
}

int32_t rf_resolve(const char *node, const char *service, int ms, uint8_t name[RF_ADDR_LEN])
{
    size_t len = RF_ADDR_LEN;
    int32_t r = rdm4_resolve(node, service, ms > 0 ? ms : resolve_ms(), name, &len);
    if (r != RDM4_SUCCESS) {
        FI_INFO(&rf_prov, FI_LOG_CORE, "no rdm4 endpoint's name from %s port %s: %s\n", node ? node : "-",
                service ? service : "-", rdm4_strerror(r));
    }
    return r;
}

/* Copies `len` bytes of `a` into a new allocation at *out (*out_len set). */
static int dup_addr(const void *a, size_t len, void **out, size_t *out_len)
{
    *out = malloc(len);
    if (!*out) {
        return -FI_ENOMEM;
    }
    memcpy(*out, a, len);
    *out_len = len;
    return 0;
}

static int rf_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                      const struct fi_info *hints, struct fi_info **info)
{
    *info = NULL;
    /* Where the domain binds: FI_SOURCE's node and service, the hints'
     * request, or anywhere (an empty request). */
    struct rf_src_request src;
    parse_source(NULL, NULL, &src);
    /* A destination's node and service: its name, asked of the udp port
     * there (rdm4_resolve), as a name carries a connection id no host
     * name gives. */
    uint8_t dest[RF_ADDR_LEN];
    size_t dest_len = 0;
    /* IP addressing: the source and the destination as socket addresses. */
    int ip = ip_of(hints);
    struct sockaddr_in src_in = { .sin_family = AF_INET };
    if ((node || service) && (flags & FI_SOURCE)) {
        if (parse_source(node, service, &src) != 0 || (hints && hints->src_addr)) {
            return -FI_ENODATA;
        }
        if (src.node[0] && inet_pton(AF_INET, src.node, &src_in.sin_addr) != 1) {
            ip = ip ? -1 : 0; /* an IPv6 source has no FI_SOCKADDR_IN */
        }
        src_in.sin_port = htons(src.port);
    } else if (node || service) {
        if (!node || !service) {
            return -FI_ENODATA;
        }
        if (ip) {
            struct addrinfo want = { .ai_family = AF_INET, .ai_socktype = SOCK_DGRAM }, *got = NULL;
            if (getaddrinfo(node, service, &want, &got) != 0 || !got) {
                return -FI_ENODATA;
            }
            memcpy(dest, got->ai_addr, sizeof(struct sockaddr_in));
            freeaddrinfo(got);
            dest_len = sizeof(struct sockaddr_in);
        } else if (rf_resolve(node, service, 0, dest) == RDM4_SUCCESS) {
            dest_len = RF_ADDR_LEN;
        } else {
            return -FI_ENODATA;
        }
    }
    if (ip < 0) {
        return -FI_ENODATA;
    }
    if (hints && is_src_request(hints->src_addr, hints->src_addrlen)) {
        memcpy(&src, hints->src_addr, sizeof src);
    }
    uint32_t first = default_device();
    uint32_t order[3] = { first, 0, 0 };
    size_t n = 1;
    for (uint32_t d = RDM4_DEVICE_SHM; d <= RDM4_DEVICE_AUTO; d++) {
        const uint32_t pref[] = { RDM4_DEVICE_AUTO, RDM4_DEVICE_SHM, RDM4_DEVICE_UDP };
        if (pref[d - 1] != first) {
            order[n++] = pref[d - 1];
        }
    }
    struct fi_info *head = NULL, **tail = &head;
    for (size_t i = 0; i < n; i++) {
        if (dest_len && order[i] == RDM4_DEVICE_SHM) {
            continue; /* the name came by udp: a shm domain has none */
        }
        struct fi_info *one = fi_allocinfo();
        if (!one) {
            fi_freeinfo(head);
            return -FI_ENOMEM;
        }
        int r = fill_info(version, order[i], hints, one);
        if (r > 0 && !one->src_addr) {
            r = (ip ? dup_addr(&src_in, sizeof src_in, &one->src_addr, &one->src_addrlen)
                    : dup_addr(&src, sizeof src, &one->src_addr, &one->src_addrlen))
                    ? -FI_ENOMEM
                    : r;
        }
        if (r > 0 && dest_len) {
            free(one->dest_addr);
            one->dest_addr = NULL;
            r = dup_addr(dest, dest_len, &one->dest_addr, &one->dest_addrlen) ? -FI_ENOMEM : r;
        }
        if (r <= 0) {
            fi_freeinfo(one);
            if (r < 0) {
                fi_freeinfo(head);
                return r;
            }
            continue;
        }
        *tail = one;
        tail = &one->next;
    }
    if (!head) {
        return -FI_ENODATA;
    }
    *info = head;
    return 0;
}

/* The fabric. */

static int fabric_close(struct fid *fid)
{
    struct rf_fabric *f = (struct rf_fabric *)fid;
    if (atomic_load(&f->ref) > 0) {
        return -FI_EBUSY;
    }
    free(f);
    return 0;
}

static struct fi_ops fabric_fi_ops = RF_FI_OPS(fabric_close, rf_nosys_bind, rf_nosys_control);

static int fabric_domain2(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, uint64_t flags,
                          void *context)
{
    return flags ? -FI_EBADFLAGS : rf_domain_open(fabric, info, dom, context);
}

static struct fi_ops_fabric fabric_ops = {
    .size = sizeof(struct fi_ops_fabric),
    .domain = rf_domain_open,
    .passive_ep = (void *)rf_nosys_int,
    .eq_open = rf_eq_open,
    .wait_open = (void *)rf_nosys_int,
    .trywait = rf_trywait,
    .domain2 = fabric_domain2,
};

int rf_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    if (!attr || !fabric) {
        return -FI_EINVAL;
    }
    if (attr->name && rf_device_of(attr->name) < 0) {
        return -FI_ENODATA;
    }
    struct rf_fabric *f = calloc(1, sizeof *f);
    if (!f) {
        return -FI_ENOMEM;
    }
    f->fid.fid.fclass = FI_CLASS_FABRIC;
    f->fid.fid.context = context;
    f->fid.fid.ops = &fabric_fi_ops;
    f->fid.ops = &fabric_ops;
    f->fid.api_version = attr->api_version;
    *fabric = &f->fid;
    return 0;
}

static void rf_cleanup(void)
{
}

struct fi_provider rf_prov = {
    .version = FI_VERSION(RDM4_VERSION_MAJOR, RDM4_VERSION_MINOR),
    .fi_version = RF_FI_VERSION,
    .name = RF_NAME,
    .getinfo = rf_getinfo,
    .fabric = rf_fabric_open,
    .cleanup = rf_cleanup,
};

FI_EXT_INI
{
    fi_param_define(&rf_prov, "device", FI_PARAM_STRING,
                    "Device listed first and opened by default: auto, shm or udp (RDM4_DEVICE; default auto)");
    fi_param_define(&rf_prov, "resolve_ms", FI_PARAM_INT,
                    "Milliseconds fi_getinfo asks a destination node and service for its endpoint's name, "
                    "and the first use of an FI_SOCKADDR_IN entry waits for it (rdm4_resolve; default 2000)");
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        fi_param_define(&rf_prov, settings[i].name, FI_PARAM_STRING, settings[i].help);
    }
    return &rf_prov;
}
