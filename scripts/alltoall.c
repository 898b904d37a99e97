/*
 * alltoall.c: MPI_Alltoall throughput for scripts/alltoall.sh (issue 41,
 * "Scale: all-to-all"). For each size given (bytes per destination), a
 * warm-up, then timed rounds of MPI_Alltoall, each round's buffers filled
 * with a pattern of (source, destination, round) and every received byte
 * checked on the last round. Prints one line per size:
 *   alltoall np=N size=S rounds=R agg_msgs_per_s=... agg_MBps=... worst_us=... mean_us=...
 * where a message is one (source, destination) block, aggregate figures
 * count every process's blocks, and worst/mean are the per-round times of
 * the slowest process and the average process.
 * usage: alltoall SIZE[,SIZE...] [SECONDS]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pat(int src, int dst, int round, size_t i)
{
    return (unsigned char)(src * 131 + dst * 17 + round * 7 + i * 3);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int np, me;
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    const char *sizes = argc > 1 ? argv[1] : "8,65536";
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    int errors = 0;
    char *list = strdup(sizes);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t size = strtoull(tok, NULL, 10);
        unsigned char *sbuf = malloc(size * np + 1), *rbuf = malloc(size * np + 1);
        if (!sbuf || !rbuf) {
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* Rounds: as many as rank 0 finds fit in `seconds`, from a probe. */
        int rounds = 0;
        for (int r = 0; r < 10; r++) {
            MPI_Alltoall(sbuf, (int)size, MPI_BYTE, rbuf, (int)size, MPI_BYTE, MPI_COMM_WORLD);
        }
        double t0 = MPI_Wtime();
        for (int r = 0; r < 20; r++) {
            MPI_Alltoall(sbuf, (int)size, MPI_BYTE, rbuf, (int)size, MPI_BYTE, MPI_COMM_WORLD);
        }
        double per = (MPI_Wtime() - t0) / 20;
        rounds = per > 0 ? (int)(seconds / per) : 1000;
        rounds = rounds < 10 ? 10 : rounds > 1000000 ? 1000000 : rounds;
        MPI_Bcast(&rounds, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int r = 0; r < rounds; r++) {
            if (r == rounds - 1) {
                for (int d = 0; d < np; d++) {
                    for (size_t i = 0; i < size; i++) {
                        sbuf[d * size + i] = pat(me, d, r, i);
                    }
                }
            }
            MPI_Alltoall(sbuf, (int)size, MPI_BYTE, rbuf, (int)size, MPI_BYTE, MPI_COMM_WORLD);
        }
        double mine = (MPI_Wtime() - t0) / rounds;
        for (int s = 0; s < np; s++) {
            for (size_t i = 0; i < size; i++) {
                if (rbuf[s * size + i] != pat(s, me, rounds - 1, i)) {
                    errors++;
                    break;
                }
            }
        }
        double worst, sum;
        MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (me == 0) {
            double msgs = (double)np * (np - 1);
            printf("alltoall np=%d size=%zu rounds=%d agg_msgs_per_s=%.0f agg_MBps=%.1f worst_us=%.2f mean_us=%.2f\n",
                   np, size, rounds, msgs / worst, msgs * size / worst / 1e6, worst * 1e6, sum / np * 1e6);
            fflush(stdout);
        }
        free(sbuf);
        free(rbuf);
    }
    free(list);
    int all;
    MPI_Reduce(&errors, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0 && all) {
        printf("alltoall: %d blocks wrong\n", all);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
