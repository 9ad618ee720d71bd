// protocol/copy.h: every size around the inline cases, at every alignment, copies exactly the
// bytes asked for and touches nothing around them.
#include "protocol/copy.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace rdmx::protocol {
namespace {

TEST(CopyPayload, CopiesExactlyTheBytesAskedForAtEverySizeAndAlignment) {
  std::array<std::uint8_t, 64> src{};
  for (std::size_t i = 0; i < src.size(); ++i) {
    src[i] = static_cast<std::uint8_t>(i * 7 + 1);
  }
  for (std::size_t n = 0; n <= 40; ++n) {
    for (std::size_t so = 0; so < 8; ++so) {
      for (std::size_t doff = 0; doff < 8; ++doff) {
        std::array<std::uint8_t, 64> dst;
        dst.fill(0xee);
        copy_payload(dst.data() + doff, src.data() + so, n);
        for (std::size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= doff && i < doff + n;
          const std::uint8_t want = inside ? src[so + i - doff] : 0xee;
          ASSERT_EQ(dst[i], want) << "n " << n << " src offset " << so << " dst offset " << doff
                                  << " byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rdmx::protocol
