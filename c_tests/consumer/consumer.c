/*
 * consumer.c: a program built against an *installed* rdm4, the way a user
 * builds one: with `pkg-config --cflags --libs rdm4`, or with CMake's
 * find_package(rdm4) (CMakeLists.txt here). Built and run by
 * tests/consumer.rs after `scripts/install.sh`; tests/c_programs.rs does not
 * look into this directory.
 *
 * Checks that the loaded library is the version of the header, that
 * rdm4_strerror() works, and that an endpoint opens, has an address and
 * closes. Prints one "ok" line per check and the file librdm4 was loaded
 * from (or that it is linked in statically), which the test checks; on any
 * failure prints what failed to stderr and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdm4.h>

static int failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) {                                                           \
            printf("ok - ");                                                  \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
        } else {                                                              \
            fprintf(stderr, "FAIL %s:%d: `%s`: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            failures++;                                                       \
        }                                                                     \
    } while (0)

/* Prints "librdm4: <file>" for the mapped file whose name contains
 * "librdm4", or "librdm4: static" when there is none. */
static void print_library_file(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) {
        printf("librdm4: unknown (no /proc/self/maps)\n");
        return;
    }
    char line[4096];
    const char *found = NULL;
    while (!found && fgets(line, sizeof line, maps)) {
        line[strcspn(line, "\n")] = '\0';
        char *path = strchr(line, '/');
        if (path && strstr(path, "librdm4")) {
            found = path;
        }
    }
    printf("librdm4: %s\n", found ? found : "static");
    fclose(maps);
}

int main(void)
{
    /* A segment name of our own, so concurrent runs do not meet. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "rdm4-consumer-%ld", (long)getpid());
    if (setenv("RDM4_SHM_PREFIX", prefix, 1) != 0) {
        perror("setenv");
        return EXIT_FAILURE;
    }

    print_library_file();

    uint32_t v = rdm4_version();
    CHECK(v == RDM4_VERSION, "rdm4_version() == RDM4_VERSION (library 0x%06x, header 0x%06x, %s)",
          (unsigned)v, (unsigned)RDM4_VERSION, RDM4_VERSION_STRING);

    const char *unknown = rdm4_strerror(-1000);
    const char *inval = rdm4_strerror(RDM4_EINVAL);
    CHECK(unknown && inval && inval[0] != '\0' && strcmp(inval, unknown) != 0,
          "rdm4_strerror(RDM4_EINVAL) = \"%s\", rdm4_strerror(-1000) = \"%s\"", inval ? inval : "(null)",
          unknown ? unknown : "(null)");

    rdm4_ep *ep = NULL;
    int32_t rc = rdm4_ep_open(NULL, &ep);
    CHECK(rc == RDM4_SUCCESS && ep != NULL, "rdm4_ep_open(NULL, &ep) = %d (%s)", (int)rc, rdm4_strerror(rc));
    if (rc == RDM4_SUCCESS && ep) {
        unsigned char addr[RDM4_ADDR_LEN];
        size_t len = sizeof addr;
        rc = rdm4_ep_getname(ep, addr, &len);
        CHECK(rc == RDM4_SUCCESS && len == RDM4_ADDR_LEN, "rdm4_ep_getname = %d (%s), len %zu", (int)rc,
              rdm4_strerror(rc), len);
        rc = rdm4_ep_close(ep);
        CHECK(rc == RDM4_SUCCESS, "rdm4_ep_close = %d (%s)", (int)rc, rdm4_strerror(rc));
    }

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}
