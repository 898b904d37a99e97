/*
 * lifecycle.c: what a C user meets around the data path, written as a new
 * user would: settings in the environment, segments of processes that
 * died, peers that close or die, the wake-up descriptor, an idle endpoint
 * in automatic progress (issue 27).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_util.h"

static char prefix[64];

/* Runs rdm4_ep_open with stderr captured into `log` (NUL-terminated). */
static int32_t open_logged(rdm4_ep **ep, char *log, size_t loglen)
{
    char path[64];
    snprintf(path, sizeof path, "stderr-%ld.txt", (long)getpid());
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (saved < 0 || fd < 0) {
        FATAL("cannot capture stderr");
    }
    dup2(fd, 2);
    int32_t rc = rdm4_ep_open(NULL, ep);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, log, loglen - 1, 0);
    log[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    return rc;
}

/* Item 7: every RDM4_* value is parsed strictly and bounded; a bad one
 * fails the open at once with RDM4_EINVAL and a log line naming it, and
 * leaves nothing in /dev/shm. */
static void bad_settings_are_refused_by_name(void)
{
    static const char *const bad[][2] = {
        { "RDM4_SHM_SLOTS", "abc" },        { "RDM4_SHM_SLOTS", "3" },
        { "RDM4_SHM_SLOTS", "1073741824" }, { "RDM4_SHM_SLOTS", "64 " },
        { "RDM4_SHM_MTU", "100" },          { "RDM4_SHM_MTU", "65537" },
        { "RDM4_SHM_EPID", "-1" },          { "RDM4_SHM_EPID", "99999999999" },
        { "RDM4_SHM_FAR_NS", "banana" },    { "RDM4_SHM_CMA", "yes" },
        { "RDM4_SHM_LAG", "-5" },           { "RDM4_SHM_TRAIL", "1M" },
        { "RDM4_SHM_LONGREAD_MIN", "x" },   { "RDM4_SHM_PEER_CHECK_MS", "0" },
        { "RDM4_SHM_PREFIX", "a/b" },       { "RDM4_DEVICE", "tcp" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        rdm4_ep *ep = NULL;
        char log[4096];
        double t0 = tu_now_ms();
        int32_t rc = open_logged(&ep, log, sizeof log);
        double ms = tu_now_ms() - t0;
        unsetenv(bad[i][0]);
        /* Restore the test's own prefix after the prefix case. */
        setenv("RDM4_SHM_PREFIX", prefix, 1);
        CHECK(rc == RDM4_EINVAL, "%s=\"%s\": rdm4_ep_open gives RDM4_EINVAL (got %s)", bad[i][0], bad[i][1],
              tu_status(rc));
        CHECK(strstr(log, bad[i][0]) != NULL, "%s=\"%s\": the log line names the variable (\"%s\")", bad[i][0],
              bad[i][1], log);
        CHECK(ms < 1000, "%s=\"%s\": refused at once (%.0f ms)", bad[i][0], bad[i][1], ms);
        CHECK(tu_shm_files(prefix, 0, 1) == 0, "%s=\"%s\": nothing left in /dev/shm", bad[i][0], bad[i][1]);
        if (rc == 0) {
            rdm4_ep_close(ep);
        }
    }
    /* Good values of the same variables open. */
    setenv("RDM4_SHM_SLOTS", "4", 1);
    setenv("RDM4_SHM_FAR_NS", "off", 1);
    setenv("RDM4_SHM_CMA", "1", 1);
    rdm4_ep *ep = NULL;
    int32_t rc = rdm4_ep_open(NULL, &ep);
    CHECK(rc == 0, "good values open (%s)", tu_status(rc));
    if (rc == 0) {
        rdm4_ep_close(ep);
    }
    unsetenv("RDM4_SHM_SLOTS");
    unsetenv("RDM4_SHM_FAR_NS");
    unsetenv("RDM4_SHM_CMA");
}

/* Item 8: segments of processes that died (SIGKILL, or exit without
 * close) go at the next open of the prefix, all of them. */
static void dead_segments_go_at_the_next_open(void)
{
    /* All three open before any dies (an open removes dead segments). */
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0) {
        FATAL("pipe");
    }
    pid_t kids[3];
    for (int k = 0; k < 3; k++) {
        kids[k] = fork();
        if (kids[k] < 0) {
            FATAL("fork");
        }
        if (kids[k] == 0) {
            close(go[1]);
            char epid[16];
            snprintf(epid, sizeof epid, "%d", 10 + k);
            setenv("RDM4_SHM_EPID", epid, 1);
            rdm4_ep *ep;
            if (rdm4_ep_open(NULL, &ep) != 0) {
                _exit(2);
            }
            char b = 1;
            if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 0) {
                _exit(3);
            }
            if (k == 0) {
                raise(SIGKILL);
            }
            _exit(0); /* no rdm4_ep_close */
        }
    }
    close(go[0]);
    for (int k = 0; k < 3; k++) {
        char b;
        if (read(ready[0], &b, 1) != 1) {
            FATAL("a child did not open");
        }
    }
    close(go[1]); /* the children read EOF and die */
    close(ready[0]);
    close(ready[1]);
    for (int k = 0; k < 3; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        CHECK(k == 0 ? WIFSIGNALED(st) : (WIFEXITED(st) && WEXITSTATUS(st) == 0), "child %d opened and ended", k);
    }
    int left = tu_shm_files(prefix, 0, 0);
    CHECK(left == 6, "the three dead endpoints left a segment and a FIFO each (%d files)", left);
    rdm4_ep *ep = NULL;
    int32_t rc = rdm4_ep_open(NULL, &ep);
    CHECK(rc == 0, "the next open succeeds (%s)", tu_status(rc));
    left = tu_shm_files(prefix, 0, 1);
    CHECK(left == 2, "only the new endpoint's segment and FIFO remain (%d files)", left);
    if (rc == 0) {
        rdm4_ep_close(ep);
    }
}

int main(void)
{
    alarm(120);
    tu_set_prefix("life", prefix, sizeof prefix);
    bad_settings_are_refused_by_name();
    dead_segments_go_at_the_next_open();
    CHECK(tu_shm_files(prefix, 1, 1) == 0, "nothing left in /dev/shm");
    return tu_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
