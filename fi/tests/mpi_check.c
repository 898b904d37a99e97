/*
 * mpi_check: checks that an MPI library moves data correctly (written for
 * Open MPI over the rdm4 libfabric provider; Open MPI's own ob1/vader/tcp
 * paths pass it too). Every result is verified; each group prints one line
 * from rank 0, "ok <group> ..." or "FAIL <group> ...", and rank 0 ends with
 * "mpi_check: all N checks passed". The exit status is 0 only if every check
 * passed. Runs with any number of ranks >= 2.
 *
 *   pingpong     every pair of ranks, 0 B, 1 B and powers of 4 up to 4 MiB
 *   probe        Probe, Iprobe, Mprobe+Mrecv, Improbe+Imrecv, ANY_SOURCE/TAG
 *   ssend        Ssend; Issend not completing before its receive is posted
 *   cancel       cancelling receives that never match
 *   collectives  Allreduce (int, double), Alltoall, Bcast 1 B .. 4 MiB
 *   osc          Win_create/Win_allocate, Put/Get with fences, Accumulate,
 *                Fetch_and_op, Compare_and_swap, passive target locks
 *                (left out with --no-osc)
 *
 * No wait can hang: a wait that does not complete within TIMEOUT seconds
 * prints "FAIL <group> ..." and aborts the job (requests left pending would
 * make every later check meaningless). Blocking calls are used only where the
 * peer is certain to come (collectives, Probe of a message already sent...).
 *
 * --pingpong only measures: ranks 0 and 1 ping-pong (the others sleep) and
 * rank 0 prints "pp <bytes> <one-way latency us> <MB/s>" per size, latency
 * being the median of REPS repetitions and MB/s = bytes / latency; only the
 * data of one last round trip per size is checked. On one host the figures
 * are steadier with the ranks bound: --bind-to core:overload-allowed.
 *
 *   mpicc -O2 -o /tmp/mpi_check fi/tests/mpi_check.c
 *   mpirun -np 4 /tmp/mpi_check [--no-osc]
 *   mpirun -np 2 /tmp/mpi_check --pingpong
 *   scripts/mpi_netns.sh [mpirun options] -- /tmp/mpi_check   (two "hosts")
 *
 * Open MPI 4.1.4 itself passes the osc group only with --mca osc pt2pt: its
 * osc/rdma crashes in Compare_and_swap to self over vader (fixed in 4.1.5),
 * fails MPI_Win_create over btl tcp, and its osc/ucx returns zeros to a Get
 * from Win_create memory left untouched before the call (see osc_create).
 * --no-self-cas leaves rank 0 out of the Compare_and_swap checks on its
 * own window, for osc/rdma over btl ofi, whose 4.1.4 Compare_and_swap to
 * self crashes the same way (a NULL endpoint in mca_btl_ofi_acswap).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TIMEOUT 30.0          /* seconds a single wait may take */
#define MAX_SIZE (4 << 20)    /* largest message */
#define GUARD 64              /* bytes after a received message that must stay untouched */
#define GUARD_BYTE 0x5a
#define MAX_REPORTS 10        /* failure messages printed per rank and group */
#define REPS 5                /* timed repetitions per size in --pingpong */

static int me, np, left, right;
static const char *group;
static long checks, fails;    /* this rank, current group */
static double group_start;
static long total_checks, total_fails;
static unsigned char *sbuf, *rbuf;   /* MAX_SIZE + GUARD bytes each */

/* ---- checks and bounded waits ---- */

static int check(int ok, const char *fmt, ...)
{
    checks++;
    if (!ok && fails++ < MAX_REPORTS) {
        va_list ap;
        printf("  rank %d %s: ", me, group);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
    }
    return ok;
}

static void begin_group(const char *name)
{
    group = name;
    checks = fails = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    group_start = MPI_Wtime();
}

static void end_group(const char *what)
{
    long mine[2] = {checks, fails}, sum[2];
    MPI_Allreduce(mine, sum, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    total_checks += sum[0];
    total_fails += sum[1];
    if (me == 0) {
        printf("%s %s: %ld checks, %ld failed, %.2f s; %s\n", sum[1] ? "FAIL" : "ok", group,
               sum[0], sum[1], MPI_Wtime() - group_start, what);
        fflush(stdout);
    }
}

static void vtimed_out(double limit, const char *fmt, va_list ap)
{
    printf("FAIL %s rank %d: not done after %.0f s: ", group, me, limit);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void timed_out(double limit, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vtimed_out(limit, fmt, ap);
    va_end(ap);
}

/* MPI_Waitall bounded by TIMEOUT; fmt describes what is waited for. */
static void wait_all(int n, MPI_Request *req, MPI_Status *st, const char *fmt, ...)
{
    double start = MPI_Wtime();
    int done = 0;
    for (;;) {
        MPI_Testall(n, req, &done, st ? st : MPI_STATUSES_IGNORE);
        if (done)
            return;
        if (MPI_Wtime() - start > TIMEOUT) {
            va_list ap;
            va_start(ap, fmt);
            vtimed_out(TIMEOUT, fmt, ap);
            va_end(ap);
        }
    }
}

static void compute(double seconds)
{
    double start = MPI_Wtime();
    volatile double x = 1;
    while (MPI_Wtime() - start < seconds)
        x = x * 1.0000001 + 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- data patterns ---- */

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* The seed of a message's pattern: who sends it to whom, its size, and a
   number telling it from the others (iteration, test). */
static uint32_t seed_of(int src, int dst, size_t size, int iter)
{
    return mix(mix(mix((uint32_t)src * 0x9e3779b1U + (uint32_t)dst) + (uint32_t)size) +
               (uint32_t)iter);
}

static unsigned char pat(size_t k, uint32_t seed)
{
    return (unsigned char)mix((uint32_t)k + seed);
}

static void fill(unsigned char *buf, size_t n, uint32_t seed)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = pat(k, seed);
}

/* Every byte differs from what is expected; GUARD bytes follow. */
static void prep_recv(unsigned char *buf, size_t n, uint32_t seed)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = (unsigned char)~pat(k, seed);
    memset(buf + n, GUARD_BYTE, GUARD);
}

/* Byte-by-byte check of buf against the pattern, and of the GUARD bytes
   after it when guard is set; one check. */
static void verify(const unsigned char *buf, size_t n, uint32_t seed, int guard,
                   const char *fmt, ...)
{
    size_t bad = 0, first = 0, guard_bad = 0;
    char what[160];
    va_list ap;

    for (size_t k = 0; k < n; k++)
        if (buf[k] != pat(k, seed) && bad++ == 0)
            first = k;
    for (size_t k = 0; guard && k < GUARD; k++)
        guard_bad += buf[n + k] != GUARD_BYTE;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (bad)
        check(0, "%s: %zu of %zu bytes wrong, first at %zu (0x%02x, want 0x%02x)", what, bad, n,
              first, buf[first], pat(first, seed));
    else
        check(!guard_bad, "%s: %zu of the %d bytes after the message overwritten", what,
              guard_bad, GUARD);
}

static void check_status(const MPI_Status *st, int src, int tag, int count, const char *what)
{
    int n;
    MPI_Get_count(st, MPI_BYTE, &n);
    check(st->MPI_SOURCE == src && st->MPI_TAG == tag && n == count,
          "%s: status source %d tag %d count %d, want %d %d %d", what, st->MPI_SOURCE, st->MPI_TAG,
          n, src, tag, count);
}

/* A count taken from a status, made safe to receive with. */
static int probed_count(const MPI_Status *st)
{
    int n;
    MPI_Get_count(st, MPI_BYTE, &n);
    return n >= 0 && n <= MAX_SIZE ? n : MAX_SIZE;
}

/* Partner of this rank in round r of a round-robin tournament over np ranks
   (np - 1 rounds, or np when np is odd), -1 when it sits the round out.
   Every pair meets in exactly one round; pairs of a round run at once. */
static int rounds(void)
{
    return np % 2 ? np : np - 1;
}

static int partner(int r)
{
    int n = np + np % 2, p;
    if (me == n - 1)
        p = r;
    else if (me == r)
        p = n - 1;
    else
        p = ((2 * r - me) % (n - 1) + (n - 1)) % (n - 1);
    return p < np ? p : -1;
}

/* ---- point to point between every pair ---- */

#define PP_SIZES 13   /* 0, then 4^0 .. 4^11 = 4 MiB */

static size_t pp_size(int i)
{
    return i == 0 ? 0 : (size_t)1 << 2 * (i - 1);
}

/* Iteration 0 is plain; in 1 each receiver computes 2 ms before posting its
   receive (the message arrives first), in 2 each sender sleeps 2 ms before
   sending (the receive waits). Receives are posted GUARD bytes larger than
   the message. */
static void pingpong_pair(int peer, int si, int it)
{
    size_t n = pp_size(si);
    int ping = 100 + (si * 3 + it) * 2, pong = ping + 1;
    uint32_t out = seed_of(me, peer, n, it), in = seed_of(peer, me, n, it);
    MPI_Request req[2];
    MPI_Status st[2];
    char what[96];

    snprintf(what, sizeof what, "%zu B from %d, iteration %d", n, peer, it);
    fill(sbuf, n, out);
    prep_recv(rbuf, n, in);
    if (me < peer) {
        if (it == 1) {
            MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, ping, MPI_COMM_WORLD, &req[0]);
            compute(0.002);
            MPI_Irecv(rbuf, (int)n + GUARD, MPI_BYTE, peer, pong, MPI_COMM_WORLD, &req[1]);
        } else {
            MPI_Irecv(rbuf, (int)n + GUARD, MPI_BYTE, peer, pong, MPI_COMM_WORLD, &req[1]);
            if (it == 2)
                sleep_ms(2);
            MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, ping, MPI_COMM_WORLD, &req[0]);
        }
        wait_all(2, req, st, "ping-pong %s", what);
        check_status(&st[1], peer, pong, (int)n, what);
        verify(rbuf, n, in, 1, "%s", what);
    } else {
        if (it == 1)
            compute(0.002);
        MPI_Irecv(rbuf, (int)n + GUARD, MPI_BYTE, peer, ping, MPI_COMM_WORLD, &req[0]);
        wait_all(1, req, st, "ping %s", what);
        check_status(&st[0], peer, ping, (int)n, what);
        verify(rbuf, n, in, 1, "%s", what);
        if (it == 2)
            sleep_ms(2);
        MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, pong, MPI_COMM_WORLD, &req[0]);
        wait_all(1, req, NULL, "pong of %zu B to %d", n, peer);
    }
}

static void test_pingpong(void)
{
    begin_group("pingpong");
    for (int r = 0; r < rounds(); r++) {
        int peer = partner(r);
        for (int si = 0; peer >= 0 && si < PP_SIZES; si++)
            for (int it = 0; it < 3; it++)
                pingpong_pair(peer, si, it);
    }
    end_group("every pair, 0 B, 1 B .. 4 MiB by 4x, 3 iterations (plain, late receive, "
              "late send)");
}

/* ---- probes: each rank sends to its right neighbour and receives from its
   left one, so the only messages a rank gets come from left ---- */

enum { TAG_A = 200, TAG_B0, TAG_B, TAG_C, TAG_D, TAG_NONE, TAG_FANIN = 300, TAG_CANCEL = 500 };

static void ring_send(size_t n, int tag, MPI_Request *req)
{
    fill(sbuf, n, seed_of(me, right, n, tag));
    MPI_Isend(sbuf, (int)n, MPI_BYTE, right, tag, MPI_COMM_WORLD, req);
}

/* Iprobe until a message is found, bounded by TIMEOUT. */
static void iprobe_loop(int src, int tag, MPI_Status *st, const char *what)
{
    double start = MPI_Wtime();
    int found = 0;
    while (MPI_Iprobe(src, tag, MPI_COMM_WORLD, &found, st), !found)
        if (MPI_Wtime() - start > TIMEOUT)
            timed_out(TIMEOUT, "%s", what);
}

static int fanin_size(int r)
{
    return r % 3 == 1 ? 0 : r % 3 == 2 ? (1 << 20) + r : 1000 * r;
}

static void probe_fanin(void)
{
    MPI_Request req;
    MPI_Message msg;
    MPI_Status st;
    char *seen = calloc((size_t)np, 1);

    MPI_Barrier(MPI_COMM_WORLD);
    if (me != 0) {
        size_t n = (size_t)fanin_size(me);
        sleep_ms(np - me); /* higher ranks tend to arrive first */
        fill(sbuf, n, seed_of(me, 0, n, TAG_FANIN));
        MPI_Isend(sbuf, (int)n, MPI_BYTE, 0, TAG_FANIN + me, MPI_COMM_WORLD, &req);
        wait_all(1, &req, NULL, "fan-in send to 0");
    }
    for (int i = 1; me == 0 && i < np; i++) {
        MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
        int src = st.MPI_SOURCE, n = probed_count(&st), ok;
        ok = check(src > 0 && src < np && !seen[src], "fan-in: Mprobe(ANY, ANY) gave source %d%s",
                   src, src > 0 && src < np ? " again" : "");
        if (ok) {
            seen[src] = 1;
            check_status(&st, src, TAG_FANIN + src, fanin_size(src), "fan-in Mprobe(ANY, ANY)");
        }
        unsigned char *buf = malloc((size_t)n + GUARD);
        prep_recv(buf, (size_t)n, seed_of(src, 0, (size_t)n, TAG_FANIN));
        MPI_Mrecv(buf, n, MPI_BYTE, &msg, &st);
        verify(buf, (size_t)n, seed_of(src, 0, (size_t)n, TAG_FANIN), 1, "fan-in from %d", src);
        free(buf);
    }
    free(seen);
}

static void test_probe(void)
{
    MPI_Request req[2];
    MPI_Status st, st2;
    MPI_Message msg;
    int n, found;

    begin_group("probe");

    /* Probe for a specific source and tag, then receive what it announced. */
    ring_send(1000, TAG_A, &req[0]);
    MPI_Probe(left, TAG_A, MPI_COMM_WORLD, &st);
    check_status(&st, left, TAG_A, 1000, "Probe(left, tag)");
    n = probed_count(&st);
    prep_recv(rbuf, (size_t)n, seed_of(left, me, 1000, TAG_A));
    MPI_Recv(rbuf, n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st2);
    check_status(&st2, left, TAG_A, 1000, "Recv after Probe");
    verify(rbuf, (size_t)n, seed_of(left, me, 1000, TAG_A), 1, "Recv after Probe");
    wait_all(1, req, NULL, "send for Probe");

    /* Iprobe(ANY, ANY) while the sender sleeps: finds the 0-byte message
       sent first, then Iprobe(left, tag) finds the 64 KiB one. */
    sleep_ms(5);
    MPI_Isend(NULL, 0, MPI_BYTE, right, TAG_B0, MPI_COMM_WORLD, &req[0]);
    ring_send(65536, TAG_B, &req[1]);
    iprobe_loop(MPI_ANY_SOURCE, MPI_ANY_TAG, &st, "Iprobe(ANY, ANY) for a 0-byte message");
    check_status(&st, left, TAG_B0, 0, "Iprobe(ANY, ANY)");
    MPI_Recv(NULL, 0, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st2);
    check_status(&st2, left, TAG_B0, 0, "Recv after Iprobe(ANY, ANY)");
    iprobe_loop(left, TAG_B, &st, "Iprobe(left, tag) for 64 KiB");
    check_status(&st, left, TAG_B, 65536, "Iprobe(left, tag)");
    n = probed_count(&st);
    prep_recv(rbuf, (size_t)n, seed_of(left, me, 65536, TAG_B));
    MPI_Recv(rbuf, n, MPI_BYTE, left, TAG_B, MPI_COMM_WORLD, &st2);
    verify(rbuf, (size_t)n, seed_of(left, me, 65536, TAG_B), 1, "Recv after Iprobe(left, tag)");
    wait_all(2, req, NULL, "sends for Iprobe");
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_NONE, MPI_COMM_WORLD, &found, &st);
    check(!found, "Iprobe for a tag nobody sends found a message from %d", st.MPI_SOURCE);

    /* Mprobe(ANY, tag) of 1 MiB: once matched, a probe no longer sees it. */
    ring_send(1 << 20, TAG_C, &req[0]);
    MPI_Mprobe(MPI_ANY_SOURCE, TAG_C, MPI_COMM_WORLD, &msg, &st);
    check_status(&st, left, TAG_C, 1 << 20, "Mprobe(ANY, tag)");
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_C, MPI_COMM_WORLD, &found, &st2);
    check(!found, "Iprobe still sees the message matched by Mprobe");
    n = probed_count(&st);
    prep_recv(rbuf, (size_t)n, seed_of(left, me, 1 << 20, TAG_C));
    MPI_Mrecv(rbuf, n, MPI_BYTE, &msg, &st2);
    check(msg == MPI_MESSAGE_NULL, "Mrecv did not set the message handle to MPI_MESSAGE_NULL");
    check_status(&st2, left, TAG_C, 1 << 20, "Mrecv");
    verify(rbuf, (size_t)n, seed_of(left, me, 1 << 20, TAG_C), 1, "Mrecv");
    wait_all(1, req, NULL, "send for Mprobe");

    /* Improbe(left, ANY) of 100000 B in a loop, then Imrecv. */
    ring_send(100000, TAG_D, &req[0]);
    double start = MPI_Wtime();
    while (MPI_Improbe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &found, &msg, &st), !found)
        if (MPI_Wtime() - start > TIMEOUT)
            timed_out(TIMEOUT, "Improbe(left, ANY) for 100000 B");
    check_status(&st, left, TAG_D, 100000, "Improbe(left, ANY)");
    n = probed_count(&st);
    prep_recv(rbuf, (size_t)n, seed_of(left, me, 100000, TAG_D));
    MPI_Imrecv(rbuf, n, MPI_BYTE, &msg, &req[1]);
    wait_all(1, &req[1], &st2, "Imrecv of 100000 B");
    check_status(&st2, left, TAG_D, 100000, "Imrecv");
    verify(rbuf, (size_t)n, seed_of(left, me, 100000, TAG_D), 1, "Imrecv");
    wait_all(1, req, NULL, "send for Improbe");

    /* Every other rank sends to 0, which takes them with Mprobe(ANY, ANY). */
    probe_fanin();

    end_group("Probe; Iprobe loop, 0 B and 64 KiB; Mprobe+Mrecv 1 MiB; Improbe+Imrecv; "
              "fan-in to 0 with Mprobe(ANY, ANY)");
}

/* ---- synchronous sends ---- */

static void test_ssend(void)
{
    static const int sizes[] = {0, 8, 65536, 1 << 20};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    MPI_Request req[3];
    MPI_Status st;

    begin_group("ssend");

    /* Ssend between every pair; the receiver computes before receiving. */
    for (int r = 0; r < rounds(); r++) {
        int peer = partner(r);
        for (int i = 0; peer >= 0 && i < ns; i++) {
            size_t n = (size_t)sizes[i];
            uint32_t out = seed_of(me, peer, n, 400), in = seed_of(peer, me, n, 400);
            fill(sbuf, n, out);
            prep_recv(rbuf, n, in);
            if (me < peer)
                MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, 400 + i, MPI_COMM_WORLD);
            compute(0.002);
            MPI_Irecv(rbuf, (int)n + GUARD, MPI_BYTE, peer, 400 + i, MPI_COMM_WORLD, &req[0]);
            wait_all(1, req, &st, "Ssend of %zu B from %d", n, peer);
            check_status(&st, peer, 400 + i, (int)n, "Ssend");
            verify(rbuf, n, in, 1, "Ssend of %zu B from %d", n, peer);
            if (me > peer)
                MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, 400 + i, MPI_COMM_WORLD);
        }
    }

    /* Issend to right, whose receive is posted only after our "go" message:
       until then the Issend must not complete. */
    for (int i = 0; i < ns; i++) {
        size_t n = (size_t)sizes[i];
        int tag = 410 + i, done = 0;
        uint32_t in = seed_of(left, me, n, tag);
        double start;

        fill(sbuf, n, seed_of(me, right, n, tag));
        MPI_Issend(sbuf, (int)n, MPI_BYTE, right, tag, MPI_COMM_WORLD, &req[0]);
        start = MPI_Wtime();
        while (!done && MPI_Wtime() - start < 0.02)
            MPI_Test(&req[0], &done, MPI_STATUS_IGNORE);
        check(!done, "Issend of %zu B to %d completed before its receive was posted", n, right);
        MPI_Isend(NULL, 0, MPI_BYTE, right, 420, MPI_COMM_WORLD, &req[1]);
        MPI_Irecv(NULL, 0, MPI_BYTE, left, 420, MPI_COMM_WORLD, &req[2]);
        wait_all(1, &req[2], NULL, "go from %d", left);
        prep_recv(rbuf, n, in);
        MPI_Irecv(rbuf, (int)n + GUARD, MPI_BYTE, left, tag, MPI_COMM_WORLD, &req[2]);
        wait_all(1, &req[2], &st, "Issend of %zu B from %d", n, left);
        check_status(&st, left, tag, (int)n, "Issend");
        verify(rbuf, n, in, 1, "Issend of %zu B from %d", n, left);
        wait_all(2, req, NULL, "Issend of %zu B to %d and go", n, right);
    }

    end_group("Ssend between every pair, 0 B .. 1 MiB; Issend incomplete until its receive is "
              "posted");
}

/* ---- cancel ---- */

static void test_cancel(void)
{
    static unsigned char never[2][100];
    MPI_Request req[2];
    MPI_Status st[2];
    int cancelled;

    begin_group("cancel");
    MPI_Irecv(never[0], 100, MPI_BYTE, left, TAG_CANCEL, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(never[1], 100, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req[1]);
    compute(0.002);
    MPI_Cancel(&req[0]);
    MPI_Cancel(&req[1]);
    wait_all(2, req, st, "completion of cancelled receives");
    MPI_Test_cancelled(&st[0], &cancelled);
    check(cancelled, "Irecv(left, tag) not cancelled");
    MPI_Test_cancelled(&st[1], &cancelled);
    check(cancelled, "Irecv(ANY, ANY) not cancelled");

    /* Nothing is sent before every rank has cancelled; a message with the
       tag of the cancelled receive then arrives whole. */
    MPI_Barrier(MPI_COMM_WORLD);
    ring_send(100, TAG_CANCEL, &req[0]);
    prep_recv(rbuf, 100, seed_of(left, me, 100, TAG_CANCEL));
    MPI_Irecv(rbuf, 100 + GUARD, MPI_BYTE, left, TAG_CANCEL, MPI_COMM_WORLD, &req[1]);
    wait_all(2, req, st, "message with the tag of the cancelled receive");
    check_status(&st[1], left, TAG_CANCEL, 100, "receive after cancel");
    verify(rbuf, 100, seed_of(left, me, 100, TAG_CANCEL), 1, "receive after cancel");
    end_group("Irecv(left, tag) and Irecv(ANY, ANY) cancelled, then a receive with the same tag");
}

/* ---- collectives ---- */

static uint32_t a2a_word(int src, int dst, int blk, int k)
{
    return mix(seed_of(src, dst, (size_t)blk, 600) + (uint32_t)k);
}

static void test_collectives(void)
{
    static const int counts[] = {1, 1000, 1 << 18}, blocks[] = {1, 256, 65536};
    int max = 1 << 18;
    int *iin = malloc(sizeof(int) * max), *iout = malloc(sizeof(int) * max);
    double *din = malloc(sizeof(double) * max), *dout = malloc(sizeof(double) * max);
    uint32_t *a = malloc(sizeof(uint32_t) * 65536 * np), *b = malloc(sizeof(uint32_t) * 65536 * np);
    long bad;

    begin_group("collectives");
    for (int i = 0; i < 3; i++) {
        int c = counts[i];
        for (int k = 0; k < c; k++) {
            iin[k] = 7 * me + k % 1000;
            din[k] = 0.25 * (me + 1) + k % 4096;
        }
        MPI_Allreduce(iin, iout, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(din, dout, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        bad = 0;
        for (int k = 0; k < c; k++)
            bad += iout[k] != 7 * np * (np - 1) / 2 + np * (k % 1000);
        check(!bad, "Allreduce sum of %d ints: %ld wrong", c, bad);
        bad = 0;
        for (int k = 0; k < c; k++)
            bad += dout[k] != 0.125 * np * (np + 1) + (double)np * (k % 4096);
        check(!bad, "Allreduce sum of %d doubles: %ld wrong", c, bad);
    }
    for (int k = 0; k < 1000; k++)
        iout[k] = 7 * me + k % 1000;
    MPI_Allreduce(MPI_IN_PLACE, iout, 1000, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad = 0;
    for (int k = 0; k < 1000; k++)
        bad += iout[k] != 7 * np * (np - 1) / 2 + np * k;
    check(!bad, "Allreduce in place of 1000 ints: %ld wrong", bad);

    for (int i = 0; i < 3; i++) {
        int blk = blocks[i];
        for (int j = 0; j < np; j++)
            for (int k = 0; k < blk; k++) {
                a[j * blk + k] = a2a_word(me, j, blk, k);
                b[j * blk + k] = ~a2a_word(j, me, blk, k);
            }
        MPI_Alltoall(a, blk, MPI_UINT32_T, b, blk, MPI_UINT32_T, MPI_COMM_WORLD);
        bad = 0;
        for (int j = 0; j < np; j++)
            for (int k = 0; k < blk; k++)
                bad += b[j * blk + k] != a2a_word(j, me, blk, k);
        check(!bad, "Alltoall of %d words per rank: %ld wrong", blk, bad);
    }

    for (int i = 0; i < 12; i++) {
        size_t n = (size_t)1 << 2 * i;
        int root = i % np;
        uint32_t seed = seed_of(root, np, n, 620);
        if (me == root) {
            fill(sbuf, n, seed);
            MPI_Bcast(sbuf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        } else {
            prep_recv(rbuf, n, seed);
            MPI_Bcast(rbuf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
            verify(rbuf, n, seed, 1, "Bcast of %zu B from %d", n, root);
        }
    }
    end_group("Allreduce sum of 1, 1000, 2^18 ints and doubles (and in place), Alltoall of "
              "4 B .. 256 KiB blocks, Bcast 1 B .. 4 MiB by 4x");
    free(iin);
    free(iout);
    free(din);
    free(dout);
    free(a);
    free(b);
}

/* ---- one-sided ---- */

#define SLOT_C 100000     /* bytes per rank in the Win_create window */
#define SLOT_W (1 << 17)  /* 8-byte words per rank in the Win_allocate window (1 MiB) */
#define ACC_LEN 1000
static int no_self_cas; /* --no-self-cas */
#define OSC_N 100         /* Accumulates and Fetch_and_ops per rank */
#define LOCK_N 20         /* critical sections per rank */

/* Win_create, disp_unit 1: every rank puts 100000 B into its slot at every
   rank, then gets a neighbour's whole window and 7 bytes at an odd offset.
   The window memory comes from calloc and is not touched before
   Win_create, as in many programs: its pages may not exist yet. */
static void osc_create(void)
{
    size_t len = (size_t)np * SLOT_C;
    unsigned char *mem = calloc(len, 1), *out = malloc(len), *got = malloc(len), small[7];
    uint32_t seed = seed_of(left, right, SLOT_C, 700);
    MPI_Win win;
    long bad = 0;

    MPI_Win_create(mem, (MPI_Aint)len, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    for (int t = 0; t < np; t++) {
        fill(out + t * SLOT_C, SLOT_C, seed_of(me, t, SLOT_C, 700));
        MPI_Put(out + t * SLOT_C, SLOT_C, MPI_BYTE, t, (MPI_Aint)me * SLOT_C, SLOT_C, MPI_BYTE,
                win);
    }
    MPI_Win_fence(0, win);
    for (int s = 0; s < np; s++)
        verify(mem + s * SLOT_C, SLOT_C, seed_of(s, me, SLOT_C, 700), 0,
               "Win_create: Put from %d", s);
    MPI_Get(got, (int)len, MPI_BYTE, right, 0, (int)len, MPI_BYTE, win);
    MPI_Get(small, 7, MPI_BYTE, right, (MPI_Aint)left * SLOT_C + 1, 7, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    for (int s = 0; s < np; s++)
        verify(got + s * SLOT_C, SLOT_C, seed_of(s, right, SLOT_C, 700), 0,
               "Win_create: Get from %d of what %d put", right, s);
    for (int k = 0; k < 7; k++)
        bad += small[k] != pat((size_t)k + 1, seed);
    check(!bad, "Win_create: Get of 7 B at an odd offset: %ld wrong", bad);
    MPI_Win_free(&win);
    free(mem);
    free(out);
    free(got);
}

static int cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Win_allocate, disp_unit 8. Words: counters for Accumulate, Fetch_and_op,
   the Compare_and_swap lock and what it protects, the exclusive lock
   counter; np words for plain Compare_and_swap; ACC_LEN words for
   Accumulate; np slots of SLOT_W words for Put/Get. */
static void osc_allocate(void)
{
    enum { ACC, FAO, LOCK, LOCKED_COUNT, EXCL_COUNT, CAS = 8 };
    const MPI_Aint arr = CAS + np, slots = arr + ACC_LEN, words = slots + (MPI_Aint)np * SLOT_W;
    const size_t slot_bytes = (size_t)SLOT_W * 8;
    int64_t *w, *arr_out = malloc(sizeof(int64_t) * ACC_LEN), *all = malloc(sizeof(int64_t) * OSC_N * np);
    int64_t one = 1, mine = me + 1, zero = 0, res, c, old[OSC_N];
    unsigned char *out = malloc(slot_bytes * np), *got = malloc(slot_bytes + GUARD);
    MPI_Win win;
    long bad;

    MPI_Win_allocate(words * 8, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &w, &win);
    memset(w, 0, (size_t)words * 8);
    for (int r = 0; r < np; r++)
        w[CAS + r] = r;
    MPI_Win_fence(0, win);

    /* Put 1 MiB to every rank, Get from left what right put there. */
    for (int t = 0; t < np; t++) {
        fill(out + t * slot_bytes, slot_bytes, seed_of(me, t, SLOT_W, 710));
        MPI_Put(out + t * slot_bytes, SLOT_W, MPI_UINT64_T, t, slots + (MPI_Aint)me * SLOT_W,
                SLOT_W, MPI_UINT64_T, win);
    }
    MPI_Win_fence(0, win);
    for (int s = 0; s < np; s++)
        verify((unsigned char *)(w + slots + (MPI_Aint)s * SLOT_W), slot_bytes,
               seed_of(s, me, SLOT_W, 710), 0, "Win_allocate: Put from %d", s);
    prep_recv(got, slot_bytes, seed_of(right, left, SLOT_W, 710));
    MPI_Get(got, SLOT_W, MPI_UINT64_T, left, slots + (MPI_Aint)right * SLOT_W, SLOT_W,
            MPI_UINT64_T, win);
    MPI_Win_fence(0, win);
    verify(got, slot_bytes, seed_of(right, left, SLOT_W, 710), 1,
           "Win_allocate: Get from %d of what %d put", left, right);

    /* Accumulate: OSC_N times rank+1 onto rank 0's counter, and an array
       onto every rank. */
    for (int k = 0; k < ACC_LEN; k++)
        arr_out[k] = me * 1000 + k;
    for (int i = 0; i < OSC_N; i++)
        MPI_Accumulate(&mine, 1, MPI_INT64_T, 0, ACC, 1, MPI_INT64_T, MPI_SUM, win);
    for (int t = 0; t < np; t++)
        MPI_Accumulate(arr_out, ACC_LEN, MPI_INT64_T, t, arr, ACC_LEN, MPI_INT64_T, MPI_SUM, win);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    if (me == 0)
        check(w[ACC] == (int64_t)OSC_N * np * (np + 1) / 2, "Accumulate: counter %lld, want %lld",
              (long long)w[ACC], (long long)OSC_N * np * (np + 1) / 2);
    bad = 0;
    for (int k = 0; k < ACC_LEN; k++)
        bad += w[arr + k] != (int64_t)1000 * np * (np - 1) / 2 + (int64_t)np * k;
    check(!bad, "Accumulate of %d words from every rank: %ld wrong", ACC_LEN, bad);

    /* Fetch_and_op: OSC_N times +1 on rank 0's counter under a shared lock;
       every value fetched is new, together they are 0 .. np*OSC_N-1. */
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    for (int i = 0; i < OSC_N; i++) {
        MPI_Fetch_and_op(&one, &old[i], MPI_INT64_T, 0, FAO, MPI_SUM, win);
        MPI_Win_flush(0, win);
    }
    MPI_Win_unlock(0, win);
    bad = 0;
    for (int i = 1; i < OSC_N; i++)
        bad += old[i] <= old[i - 1];
    check(!bad, "Fetch_and_op: values fetched by one rank not increasing (%ld times)", bad);
    MPI_Gather(old, OSC_N, MPI_INT64_T, all, OSC_N, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (me == 0) {
        qsort(all, (size_t)OSC_N * np, sizeof(int64_t), cmp_int64);
        bad = 0;
        for (int i = 0; i < OSC_N * np; i++)
            bad += all[i] != i;
        check(!bad, "Fetch_and_op: fetched values not 0 .. %d each once (%ld wrong)",
              OSC_N * np - 1, bad);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Get(&c, 1, MPI_INT64_T, 0, FAO, 1, MPI_INT64_T, win);
    MPI_Win_unlock(0, win);
    check(c == (int64_t)OSC_N * np, "Fetch_and_op: counter %lld, want %lld", (long long)c,
          (long long)OSC_N * np);

    /* Compare_and_swap as a lock on rank 0 around a Get, +1, Put (by every
       rank but 0 with --no-self-cas). */
    int cas = !(no_self_cas && me == 0), cas_ranks = no_self_cas ? np - 1 : np;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    for (int i = 0; i < LOCK_N && cas; i++) {
        double start = MPI_Wtime();
        for (;;) {
            MPI_Compare_and_swap(&mine, &zero, &res, MPI_INT64_T, 0, LOCK, win);
            MPI_Win_flush(0, win);
            if (res == 0)
                break;
            if (MPI_Wtime() - start > TIMEOUT)
                timed_out(TIMEOUT, "Compare_and_swap lock, held by rank %lld", (long long)res - 1);
        }
        MPI_Get(&c, 1, MPI_INT64_T, 0, LOCKED_COUNT, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        c++;
        MPI_Put(&c, 1, MPI_INT64_T, 0, LOCKED_COUNT, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        MPI_Compare_and_swap(&zero, &mine, &res, MPI_INT64_T, 0, LOCK, win);
        MPI_Win_flush(0, win);
        check(res == mine, "Compare_and_swap: lock word %lld while rank %d held it",
              (long long)res, me);
    }
    MPI_Win_unlock(0, win);
    MPI_Barrier(MPI_COMM_WORLD);
    {
        int64_t other = me + 100, swap = me + 1000, cur = me, first, second;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Get(&c, 1, MPI_INT64_T, 0, LOCKED_COUNT, 1, MPI_INT64_T, win);
        if (cas) {
            MPI_Compare_and_swap(&swap, &other, &first, MPI_INT64_T, 0, CAS + me, win);
            MPI_Win_flush(0, win);
            MPI_Compare_and_swap(&swap, &cur, &second, MPI_INT64_T, 0, CAS + me, win);
            MPI_Win_flush(0, win);
            MPI_Get(&res, 1, MPI_INT64_T, 0, CAS + me, 1, MPI_INT64_T, win);
        }
        MPI_Win_unlock(0, win);
        check(c == (int64_t)LOCK_N * cas_ranks, "Compare_and_swap lock: count %lld, want %lld",
              (long long)c, (long long)LOCK_N * cas_ranks);
        check(!cas || (first == me && second == me && res == swap),
              "Compare_and_swap: fetched %lld and %lld, then %lld, want %d, %d, %lld",
              (long long)first, (long long)second, (long long)res, me, me, (long long)swap);
    }

    /* Exclusive locks: Put 1 MiB to every rank and Get it back within one
       lock; then a Get, +1, Put on rank 0 that only exclusion keeps exact. */
    for (int j = 1; j <= np; j++) {
        int t = (me + j) % np;
        uint32_t seed = seed_of(me, t, SLOT_W, 720);
        fill(out, slot_bytes, seed);
        prep_recv(got, slot_bytes, seed);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win);
        MPI_Put(out, SLOT_W, MPI_UINT64_T, t, slots + (MPI_Aint)me * SLOT_W, SLOT_W,
                MPI_UINT64_T, win);
        MPI_Win_flush(t, win);
        MPI_Get(got, SLOT_W, MPI_UINT64_T, t, slots + (MPI_Aint)me * SLOT_W, SLOT_W,
                MPI_UINT64_T, win);
        MPI_Win_unlock(t, win);
        verify(got, slot_bytes, seed, 1, "exclusive lock: Get back from %d", t);
    }
    for (int i = 0; i < LOCK_N; i++) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&c, 1, MPI_INT64_T, 0, EXCL_COUNT, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        c++;
        MPI_Put(&c, 1, MPI_INT64_T, 0, EXCL_COUNT, 1, MPI_INT64_T, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Get(&c, 1, MPI_INT64_T, 0, EXCL_COUNT, 1, MPI_INT64_T, win);
    MPI_Win_unlock(0, win);
    check(c == (int64_t)LOCK_N * np, "exclusive lock: count %lld, want %lld", (long long)c,
          (long long)LOCK_N * np);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win);
    for (int s = 0; s < np; s++)
        verify((unsigned char *)(w + slots + (MPI_Aint)s * SLOT_W), slot_bytes,
               seed_of(s, me, SLOT_W, 720), 0, "exclusive lock: Put from %d", s);
    MPI_Win_unlock(me, win);

    MPI_Win_free(&win);
    free(arr_out);
    free(all);
    free(out);
    free(got);
}

static void test_osc(void)
{
    begin_group("osc");
    osc_create();
    osc_allocate();
    end_group("Win_create/Win_allocate Put/Get with fences; Accumulate; Fetch_and_op; "
              "Compare_and_swap lock; exclusive locks");
}

/* ---- --pingpong ---- */

/* Round trips per timed repetition: 1000 up to 128 KiB, then about 128
   MiB each way (128 at 1 MiB, 32 at 4 MiB), so that a repetition of a
   large size lasts some 20 ms rather than a few. */
static int pp_iters(size_t n)
{
    size_t i = ((size_t)1 << 27) / n;
    return i < 8 ? 8 : i > 1000 ? 1000 : (int)i;
}

/* Rank 0 sends sbuf, rank 1 echoes it back into rank 0's rbuf. */
static void round_trip(size_t n)
{
    MPI_Request req[2];
    if (me == 0) {
        MPI_Irecv(rbuf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[1]);
        MPI_Isend(sbuf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[0]);
        wait_all(2, req, NULL, "round trip of %zu B", n);
    } else {
        MPI_Irecv(rbuf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[0]);
        wait_all(1, req, NULL, "ping of %zu B", n);
        MPI_Isend(rbuf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[0]);
        wait_all(1, req, NULL, "pong of %zu B", n);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sizes 2^0 .. 2^22. The sweep over all sizes is repeated REPS times, so
   that a slow spell of the machine spoils one repetition of many sizes
   rather than every repetition of a few. */
#define PP_POW 23

static void measure_pingpong(void)
{
    static double lat[PP_POW][REPS];
    uint32_t seed = seed_of(0, 1, 0, 0);
    MPI_Request req;
    int done = 0;

    begin_group("pingpong-measure");
    if (me >= 2) { /* out of the way, sleeping rather than polling hard */
        double start = MPI_Wtime();
        MPI_Irecv(NULL, 0, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req);
        while (MPI_Test(&req, &done, MPI_STATUS_IGNORE), !done) {
            if (MPI_Wtime() - start > 10 * TIMEOUT)
                timed_out(10 * TIMEOUT, "end of the measurement");
            sleep_ms(1);
        }
    } else {
        fill(sbuf, MAX_SIZE, seed); /* a message of n bytes is its first n */
        for (int r = 0; r < REPS; r++)
            for (int p = 0; p < PP_POW; p++) {
                size_t n = (size_t)1 << p;
                int iters = pp_iters(n);
                for (int i = 0; r == 0 && i < iters / 4 + 2; i++) /* warm-up */
                    round_trip(n);
                double start = MPI_Wtime();
                for (int i = 0; i < iters; i++)
                    round_trip(n);
                lat[p][r] = (MPI_Wtime() - start) * 1e6 / (2.0 * iters);
            }
        if (me == 0)
            printf("# pp <bytes> <one-way latency us, median of %d> <MB/s>\n", REPS);
        for (int p = 0; p < PP_POW; p++) {
            size_t n = (size_t)1 << p;
            prep_recv(rbuf, n, seed);
            round_trip(n);
            verify(rbuf, n, seed, 1, "last round trip of %zu B", n);
            if (me == 0) {
                qsort(lat[p], REPS, sizeof lat[p][0], cmp_double);
                printf("pp %zu %.2f %.1f\n", n, lat[p][REPS / 2], (double)n / lat[p][REPS / 2]);
            }
        }
        fflush(stdout);
        for (int r = 2; me == 0 && r < np; r++) {
            MPI_Isend(NULL, 0, MPI_BYTE, r, 2, MPI_COMM_WORLD, &req);
            wait_all(1, &req, NULL, "end message to %d", r);
        }
    }
    end_group("ranks 0 and 1, 1 B .. 4 MiB by 2x; data of one last round trip per size");
}

int main(int argc, char **argv)
{
    int osc = 1, pingpong = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-osc"))
            osc = 0;
        else if (!strcmp(argv[i], "--pingpong"))
            pingpong = 1;
        else if (!strcmp(argv[i], "--no-self-cas"))
            no_self_cas = 1;
        else {
            if (me == 0)
                fprintf(stderr, "usage: mpi_check [--no-osc] [--no-self-cas] [--pingpong]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (np < 2) {
        printf("FAIL mpi_check: needs at least 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    left = (me + np - 1) % np;
    right = (me + 1) % np;
    sbuf = malloc(MAX_SIZE + GUARD);
    rbuf = malloc(MAX_SIZE + GUARD);

    if (pingpong)
        measure_pingpong();
    else {
        test_pingpong();
        test_probe();
        test_ssend();
        test_cancel();
        test_collectives();
        if (osc)
            test_osc();
    }
    if (me == 0) {
        if (total_fails)
            printf("mpi_check: FAILED, %ld of %ld checks\n", total_fails, total_checks);
        else
            printf("mpi_check: all %ld checks passed\n", total_checks);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return total_fails != 0;
}
