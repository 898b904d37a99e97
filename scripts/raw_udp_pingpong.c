/* raw_udp_pingpong.c: the floor for the udp device's latency: two processes
 * ping-pong one UDP datagram over loopback, busy-polling non-blocking
 * sockets, each pinned to its own CPU. Prints the one-way latency (half the
 * round trip) in microseconds.
 * Build and run: cc -O2 -o /tmp/raw_udp_pingpong scripts/raw_udp_pingpong.c
 *                /tmp/raw_udp_pingpong [SIZE] [ITERS]                      */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int sock_on(int port)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("bind");
        exit(1);
    }
    fcntl(s, F_SETFL, O_NONBLOCK);
    return s;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv)
{
    int size = argc > 1 ? atoi(argv[1]) : 8, iters = argc > 2 ? atoi(argv[2]) : 200000;
    int pa = 40000 + getpid() % 10000, pb = pa + 1;
    char buf[65536] = { 0 };
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    pid_t child = fork();
    int me = child == 0 ? pb : pa, other = child == 0 ? pa : pb;
    pin(child == 0 ? 1 : 0);
    int s = sock_on(me);
    to.sin_port = htons(other);
    usleep(100000);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++) {
        if (child != 0) {
            while (sendto(s, buf, size, 0, (struct sockaddr *)&to, sizeof to) < 0) {
            }
        }
        while (recv(s, buf, sizeof buf, 0) < 0) {
        }
        if (child == 0) {
            while (sendto(s, buf, size, 0, (struct sockaddr *)&to, sizeof to) < 0) {
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (child == 0) {
        return 0;
    }
    waitpid(child, NULL, 0);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3;
    printf("raw UDP ping-pong, %d B: %.3f us one way\n", size, us / iters / 2);
    return 0;
}
