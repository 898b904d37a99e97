/*
 * resolve.c: a client that knows only where its server listens (host and
 * UDP port) finds the server's name with rdm4_resolve.
 *
 * The server, a child process, opens its endpoint at a fixed port
 * (RDM4_UDP_PORT) and then waits in rdm4_wait, not polling: its progress
 * thread answers the question. Checked:
 *  - the name rdm4_resolve gives is byte for byte what the server's
 *    rdm4_ep_getname gives (an auto endpoint's with its shm locator);
 *  - a message to the resolved name reaches the server; the server inserts
 *    the client's name (the message), which gives the handle its completion
 *    named, and its answer comes back;
 *  - a port where a plain UDP socket (no rdm4 endpoint) listens gives
 *    RDM4_ETIMEDOUT, a closed port RDM4_EPEER, each within its timeout;
 *  - bad arguments: RDM4_EINVAL, and RDM4_ETOOSMALL with the length needed.
 * Over shm (no udp device) the server's port stays closed: RDM4_EPEER.
 * Prints "ok - ..." per check, failures to stderr, exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdm4.h"
#include "test_util.h"

#define CTX(n) ((void *)(uintptr_t)(n))
enum { LEN = 64 };

static char prefix[64];
static pid_t server_pid = -1;

static void cleanup(void)
{
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
    }
    tu_shm_files(prefix, 1, 0);
}

/* A UDP socket bound at 127.0.0.1 and a free port (written to *port). */
static int udp_socket(uint16_t *port)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        FATAL("udp socket: %s", strerror(errno));
    }
    *port = ntohs(a.sin_port);
    return s;
}

/* The server: opens at `port`, tells its name on `out`, then answers one
 * message, asleep in rdm4_wait meanwhile. */
static int server_main(const char *port, int out)
{
    /* Where the client asks (whatever address the environment gave). */
    tu_setenv("RDM4_UDP_ADDR", "127.0.0.1");
    tu_setenv("RDM4_UDP_PORT", port);
    uint8_t name[RDM4_ADDR_LEN];
    rdm4_ep *ep = tu_open(name);
    tu_write_all(out, name, sizeof name);
    close(out);
    if (tu_device(ep) == RDM4_DEVICE_SHM) {
        rdm4_ep_close(ep);
        return tu_failures ? 1 : 0;
    }
    static uint8_t in[LEN], back[LEN];
    struct tu_cq q = { .ep = ep };
    struct tu_cq *qs[1] = { &q };
    EXPECT(rdm4_recv(ep, in, LEN, RDM4_ADDR_UNSPEC, CTX(1)), RDM4_SUCCESS);
    rdm4_cqe r = tu_cq_expect(&q, CTX(1), qs, 1, 20000 * tu_slow(), "the client's message");
    CHECK(r.status == RDM4_SUCCESS && r.len == LEN && r.src != RDM4_ADDR_UNSPEC,
          "server: the client's message arrived (%s)", tu_status(r.status));
    tu_fill(back, LEN, 8);
    /* Not inserted yet: no sends to it (rdm4_cqe.src). */
    EXPECT(rdm4_send(ep, back, LEN, r.src, CTX(2)), RDM4_ENOADDR);
    /* The client's message is its name. */
    rdm4_addr client = tu_insert(ep, in);
    CHECK(client == r.src, "server: inserting the client's name gives the source handle (%llu, %llu)",
          (unsigned long long)client, (unsigned long long)r.src);
    EXPECT(rdm4_send(ep, back, LEN, client, CTX(2)), RDM4_SUCCESS);
    rdm4_cqe s = tu_cq_expect(&q, CTX(2), qs, 1, 20000 * tu_slow(), "the answer");
    CHECK(s.status == RDM4_SUCCESS, "server: the answer was sent (%s)", tu_status(s.status));
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    return tu_failures ? 1 : 0;
}

static void bad_arguments(void)
{
    uint8_t name[RDM4_ADDR_LEN];
    size_t len = sizeof name;
    EXPECT(rdm4_resolve(NULL, "1", 100, name, &len), RDM4_EINVAL);
    EXPECT(rdm4_resolve("127.0.0.1", NULL, 100, name, &len), RDM4_EINVAL);
    EXPECT(rdm4_resolve("127.0.0.1", "1", 100, name, NULL), RDM4_EINVAL);
    const char *bad_services[] = { "", "0", "65536", "port", "12x", "-1" };
    for (size_t i = 0; i < sizeof bad_services / sizeof bad_services[0]; i++) {
        EXPECT(rdm4_resolve("127.0.0.1", bad_services[i], 100, name, &len), RDM4_EINVAL);
    }
    EXPECT(rdm4_resolve("127.0.0.1", "1", 0, name, &len), RDM4_EINVAL);
    EXPECT(rdm4_resolve("127.0.0.1", "1", -5, name, &len), RDM4_EINVAL);
    len = RDM4_ADDR_LEN - 1;
    EXPECT(rdm4_resolve("127.0.0.1", "1", 100, name, &len), RDM4_ETOOSMALL);
    CHECK(len == RDM4_ADDR_LEN, "ETOOSMALL gives the length needed (%zu)", len);
    len = 0;
    EXPECT(rdm4_resolve("127.0.0.1", "1", 100, NULL, &len), RDM4_ETOOSMALL);
    CHECK(len == RDM4_ADDR_LEN, "a NULL buffer asks for the length (%zu)", len);
}

/* A port where a plain socket listens and never answers, then the same
 * port closed: each question ends in its time with its status. */
static void no_endpoint_there(void)
{
    uint16_t p;
    int s = udp_socket(&p);
    char port[8];
    snprintf(port, sizeof port, "%u", p);
    uint8_t name[RDM4_ADDR_LEN];
    size_t len = sizeof name;
    double t0 = tu_now_ms();
    EXPECT(rdm4_resolve("127.0.0.1", port, 300, name, &len), RDM4_ETIMEDOUT);
    double took = tu_now_ms() - t0;
    CHECK(took >= 290 && took < 3000 * tu_slow(), "no answer from a plain socket: ETIMEDOUT after %.0f ms", took);
    char junk[256];
    ssize_t got = recv(s, junk, sizeof junk, MSG_DONTWAIT);
    CHECK(got >= 28 + RDM4_ADDR_LEN, "the question is at least as large as an answer (%zd bytes)", got);
    close(s);
    t0 = tu_now_ms();
    EXPECT(rdm4_resolve("127.0.0.1", port, 300, name, &len), RDM4_EPEER);
    took = tu_now_ms() - t0;
    CHECK(took >= 290 && took < 3000 * tu_slow(), "a closed port: EPEER after %.0f ms", took);
}

int main(void)
{
    tu_alarm(60);
    tu_set_prefix("resolve", prefix, sizeof prefix);
    tu_fatal_cleanup = cleanup;
    bad_arguments();
    no_endpoint_there();

    /* A free port for the server (taken and released at once). */
    uint16_t p;
    close(udp_socket(&p));
    char port[8];
    snprintf(port, sizeof port, "%u", p);
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        FATAL("pipe");
    }
    fflush(stdout);
    server_pid = fork();
    if (server_pid < 0) {
        FATAL("fork");
    }
    if (server_pid == 0) {
        tu_role = "[server] ";
        tu_fatal_cleanup = NULL;
        close(pipefd[0]);
        exit(server_main(port, pipefd[1]));
    }
    close(pipefd[1]);

    /* The client asks at once: the server may not have opened yet. */
    uint8_t name[RDM4_ADDR_LEN];
    size_t len = sizeof name;
    rdm4_ep *ep = tu_open(NULL);
    int shm = tu_device(ep) == RDM4_DEVICE_SHM;
    int32_t rc = rdm4_resolve("127.0.0.1", port, shm ? 500 : 20000, name, &len);
    uint8_t truth[RDM4_ADDR_LEN];
    tu_read_all(pipefd[0], truth, sizeof truth);
    close(pipefd[0]);
    if (shm) {
        CHECK(rc == RDM4_EPEER, "shm: no udp port to ask (%s)", tu_status(rc));
    } else {
        CHECK(rc == RDM4_SUCCESS && len == RDM4_ADDR_LEN, "the server's name resolved (%s)", tu_status(rc));
        CHECK(memcmp(name, truth, sizeof name) == 0, "it is the name the server's rdm4_ep_getname gives");
        rdm4_addr server = tu_insert(ep, name);
        static uint8_t out[LEN], in[LEN];
        struct tu_cq q = { .ep = ep };
        struct tu_cq *qs[1] = { &q };
        size_t mine = RDM4_ADDR_LEN;
        EXPECT(rdm4_ep_getname(ep, out, &mine), RDM4_SUCCESS); /* the message: the client's name */
        EXPECT(rdm4_recv(ep, in, LEN, server, CTX(3)), RDM4_SUCCESS);
        EXPECT(rdm4_send(ep, out, LEN, server, CTX(4)), RDM4_SUCCESS);
        rdm4_cqe s = tu_cq_expect(&q, CTX(4), qs, 1, 20000 * tu_slow(), "the message to the server");
        rdm4_cqe r = tu_cq_expect(&q, CTX(3), qs, 1, 20000 * tu_slow(), "the server's answer");
        CHECK(s.status == RDM4_SUCCESS && r.status == RDM4_SUCCESS && tu_verify(in, LEN, 8) < 0,
              "a message to the resolved name and its answer (%s, %s)", tu_status(s.status), tu_status(r.status));
    }
    tu_reap(server_pid, "the server");
    server_pid = -1;
    EXPECT(rdm4_ep_close(ep), RDM4_SUCCESS);
    tu_shm_files(prefix, 1, 0);
    if (tu_failures == 0) {
        printf("ok - resolve\n");
    }
    return tu_failures ? 1 : 0;
}
