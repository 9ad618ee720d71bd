// Tests about glibc malloc's own behaviour (blocks above M_MMAP_THRESHOLD are mmap'ed and
// unmapped on free; the brk heap is trimmed) cannot run when AddressSanitizer replaces malloc:
// its allocator ignores mallopt and quarantines freed memory instead of returning it.
#pragma once

#include <gtest/gtest.h>

namespace rdmx::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kGlibcMalloc = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kGlibcMalloc = false;
#else
inline constexpr bool kGlibcMalloc = true;
#endif
#else
inline constexpr bool kGlibcMalloc = true;
#endif

}  // namespace rdmx::test

#define RDMX_REQUIRE_GLIBC_MALLOC()                                                             \
  do {                                                                                          \
    if (!::rdmx::test::kGlibcMalloc) {                                                          \
      GTEST_SKIP() << "AddressSanitizer replaces malloc: glibc's mmap threshold and heap trim " \
                      "do not apply";                                                           \
    }                                                                                           \
  } while (0)
