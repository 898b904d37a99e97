// header_cxx.cpp: rdm4.h is clean C++17 (built with -Wall -Wextra -Werror),
// its include guard works, and its functions have C linkage (this links).
#include "rdm4.h"
#include "rdm4.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(std::is_same<decltype(&rdm4_version), std::uint32_t (*)()>::value,
              "rdm4_version takes nothing and returns uint32_t");
static_assert(std::is_same<decltype(&rdm4_strerror), const char *(*)(std::int32_t)>::value,
              "rdm4_strerror takes an int32_t code and returns a C string");
static_assert(RDM4_VERSION == ((static_cast<std::uint32_t>(RDM4_VERSION_MAJOR) << 16) |
                               (static_cast<std::uint32_t>(RDM4_VERSION_MINOR) << 8) |
                               static_cast<std::uint32_t>(RDM4_VERSION_PATCH)),
              "RDM4_VERSION is (major << 16) | (minor << 8) | patch");
static_assert(RDM4_SUCCESS == 0 && RDM4_EINVAL < 0, "status codes: 0 success, failures negative");

int main()
{
    if (rdm4_version() != RDM4_VERSION) {
        std::fprintf(stderr, "FAIL: rdm4_version() 0x%06x != RDM4_VERSION 0x%06x\n",
                     static_cast<unsigned>(rdm4_version()), static_cast<unsigned>(RDM4_VERSION));
        return 1;
    }
    std::printf("ok - rdm4_version() == RDM4_VERSION from C++\n");
    const char *s = rdm4_strerror(RDM4_EINVAL);
    if (s == nullptr || std::strlen(s) == 0) {
        std::fprintf(stderr, "FAIL: rdm4_strerror(RDM4_EINVAL) is empty\n");
        return 1;
    }
    std::printf("ok - rdm4_strerror(RDM4_EINVAL) = \"%s\" from C++\n", s);
    return 0;
}
