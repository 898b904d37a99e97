/*
 * version.c: the library that is loaded is the one the header describes, and
 * rdm4_strerror() has a text for every status code.
 *
 * Prints one "ok" line per check; on any failure prints what failed to stderr
 * and exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdm4.h"

static int failures;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            printf("ok - ");                                              \
            printf(__VA_ARGS__);                                          \
            printf("\n");                                                 \
        } else {                                                          \
            fprintf(stderr, "FAIL %s:%d: `%s`: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            failures++;                                                   \
        }                                                                 \
    } while (0)

static const char UNKNOWN[] = "unknown status code";

static void check_version(void)
{
    uint32_t v = rdm4_version();
    CHECK(v == RDM4_VERSION, "rdm4_version() == RDM4_VERSION (library 0x%06x, header 0x%06x)",
          (unsigned)v, (unsigned)RDM4_VERSION);
    CHECK(RDM4_VERSION == (((uint32_t)RDM4_VERSION_MAJOR << 16) | ((uint32_t)RDM4_VERSION_MINOR << 8) |
                           (uint32_t)RDM4_VERSION_PATCH),
          "RDM4_VERSION == (major << 16) | (minor << 8) | patch");

    const char *s = rdm4_version_string();
    CHECK(s != NULL && strcmp(s, RDM4_VERSION_STRING) == 0,
          "rdm4_version_string() == RDM4_VERSION_STRING (library \"%s\", header \"%s\")",
          s ? s : "(null)", RDM4_VERSION_STRING);
}

static void check_strerror(void)
{
    /* Codes are dense from RDM4_SUCCESS (0) down to RDM4_EREMOTE. */
    enum { NCODES = RDM4_SUCCESS - RDM4_EREMOTE + 1 };
    const char *text[NCODES];
    for (int32_t code = RDM4_SUCCESS; code >= RDM4_EREMOTE; code--) {
        const char *s = rdm4_strerror(code);
        text[RDM4_SUCCESS - code] = s;
        CHECK(s != NULL && s[0] != '\0' && strcmp(s, UNKNOWN) != 0,
              "rdm4_strerror(%d) = \"%s\"", (int)code, s ? s : "(null)");
    }
    int distinct = 1;
    for (int i = 0; i < NCODES; i++) {
        for (int j = i + 1; j < NCODES; j++) {
            if (text[i] && text[j] && strcmp(text[i], text[j]) == 0) {
                fprintf(stderr, "FAIL: codes %d and %d share the text \"%s\"\n",
                        RDM4_SUCCESS - i, RDM4_SUCCESS - j, text[i]);
                distinct = 0;
            }
        }
    }
    CHECK(distinct, "the %d status texts are distinct", (int)NCODES);

    static const int32_t unknown[] = { 1, -1000 };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = rdm4_strerror(unknown[i]);
        CHECK(s != NULL && strcmp(s, UNKNOWN) == 0, "rdm4_strerror(%d) = \"%s\"",
              (int)unknown[i], s ? s : "(null)");
    }
}

int main(void)
{
    check_version();
    check_strerror();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}
