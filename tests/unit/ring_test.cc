// The RDMA-write eager ring's slot format (protocol/ring.h): a sealed image placed at the end of
// a slot reads back whole; any byte of it missing, stale or torn reads as not ready.
#include "protocol/ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace rdmx::protocol {
namespace {

constexpr std::size_t kSlot = 512;

// A message of `length` bytes (header included) with a recognisable payload.
std::vector<std::byte> message(std::size_t length, std::uint16_t seq, std::uint8_t fill) {
  std::vector<std::byte> m(ring_image_size(length));
  MsgHeader h = make_header(MsgKind::kEager);
  h.seq = seq;
  h.payload_length = static_cast<std::uint32_t>(length - kHeaderSize);
  store_wire(m.data(), h);
  for (std::size_t i = kHeaderSize; i < length; ++i) {
    m[i] = static_cast<std::byte>(fill + i);
  }
  ring_seal(m.data(), length);
  return m;
}

// The RDMA write: the image into the last bytes of the slot.
void place(std::byte* slot, const std::vector<std::byte>& image) {
  std::memcpy(slot + kSlot - image.size(), image.data(), image.size());
}

struct alignas(8) Slot {
  std::array<std::byte, kSlot> bytes{};
};

TEST(Ring, EmptySlotReadsEmpty) {
  Slot s;
  EXPECT_EQ(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kEmpty);
}

TEST(Ring, SealedMessageReadsBackAtEverySize) {
  for (std::size_t len = kHeaderSize; ring_image_size(len) <= kSlot; ++len) {
    Slot s;
    std::fill(s.bytes.begin(), s.bytes.end(), std::byte{0x5c});  // stale bytes everywhere
    ring_clear(s.bytes.data(), kSlot);
    const auto img = message(len, 7, static_cast<std::uint8_t>(len));
    place(s.bytes.data(), img);
    const RingPeek p = ring_peek(s.bytes.data(), kSlot);
    ASSERT_EQ(p.status, RingPeek::kReady) << len;
    EXPECT_EQ(p.length, len);
    EXPECT_EQ(p.message, s.bytes.data() + kSlot - ring_image_size(len));
    EXPECT_EQ(std::memcmp(p.message, img.data(), len), 0);
    EXPECT_EQ(load_wire<MsgHeader>(p.message).seq, 7);
  }
}

TEST(Ring, ClearedSlotReadsEmptyAgain) {
  Slot s;
  place(s.bytes.data(), message(40, 1, 3));
  ASSERT_EQ(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kReady);
  ring_clear(s.bytes.data(), kSlot);
  EXPECT_EQ(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kEmpty);
}

// The footer visible before the rest (a backwards or unordered copy): not ready until every
// byte in front of it is there, whichever byte is late.
TEST(Ring, FooterBeforeTheBytesReadsNotReady) {
  const std::size_t len = 100;
  const auto old_img = message(len, 3, 0x11);  // the previous lap's message, same length
  const auto img = message(len, 3 + 32, 0x22);
  for (std::size_t late = 0; late < ring_align8(len); ++late) {
    Slot s;
    place(s.bytes.data(), old_img);
    // Everything of the new image but byte `late`.
    std::byte* at = s.bytes.data() + kSlot - img.size();
    for (std::size_t i = 0; i < img.size(); ++i) {
      if (i != late) {
        at[i] = img[i];
      }
    }
    if (at[late] == img[late]) {
      continue;  // the stale byte happens to be the new one
    }
    EXPECT_EQ(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kNotReady) << "late " << late;
    at[late] = img[late];
    EXPECT_EQ(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kReady);
  }
}

// A torn footer (some of its bytes written) never reads as a message.
TEST(Ring, TornFooterReadsNotReady) {
  const auto img = message(64, 9, 1);
  for (std::size_t written = 1; written < kRingFooterSize; ++written) {
    Slot s;
    std::byte* at = s.bytes.data() + kSlot - img.size();
    std::memcpy(at, img.data(), img.size() - kRingFooterSize);
    // The footer's high bytes first (a backwards copy), then the others.
    for (std::size_t k = 0; k < written; ++k) {
      const std::size_t i = img.size() - 1 - k;
      at[i] = img[i];
    }
    EXPECT_NE(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kReady) << written;
  }
}

TEST(Ring, FooterWithImpossibleLengthReadsNotReady) {
  Slot s;
  for (const std::uint32_t len : {0u, 31u, static_cast<std::uint32_t>(kSlot)}) {
    const std::uint64_t f = ring_footer(0, len);
    std::memcpy(s.bytes.data() + kSlot - 8, &f, 8);
    EXPECT_EQ(ring_peek(s.bytes.data(), kSlot).status, RingPeek::kNotReady) << len;
  }
}

TEST(Ring, CheckCoversEveryByteAndTheLength) {
  std::vector<std::byte> m(64, std::byte{0});
  const std::uint32_t base = ring_check(m.data(), 64);
  for (std::size_t i = 0; i < 64; ++i) {
    m[i] = std::byte{1};
    EXPECT_NE(ring_check(m.data(), 64), base) << i;
    m[i] = std::byte{0};
  }
  EXPECT_NE(ring_check(m.data(), 56), ring_check(m.data(), 64));
}

// The check is the word chain the format defines, in address order, for every word count (the
// compiler's unrolled loop and its remainder included): a sender and a receiver built apart agree
// on it.
TEST(Ring, CheckIsTheWordChainInOrder) {
  constexpr std::uint64_t kMul = 0x9e3779b97f4a7c15ull;
  std::vector<std::byte> m(kSlot);
  for (std::size_t i = 0; i < m.size(); ++i) {
    m[i] = static_cast<std::byte>(i * 37 + 11);
  }
  for (std::size_t length = 0; length + 8 <= m.size(); ++length) {
    std::uint64_t h = 0x52444d58ull ^ (std::uint64_t{length} << 32);
    for (std::size_t i = 0; i < ring_align8(length); i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, m.data() + i, 8);
      h = (h ^ w) * kMul;
    }
    h ^= h >> 29;
    h *= kMul;
    EXPECT_EQ(ring_check(m.data(), length), static_cast<std::uint32_t>(h ^ (h >> 32))) << length;
  }
}

TEST(Ring, MaxLengthIsTheLongestMessageWhoseImageFits) {
  for (std::size_t max_image = kRingFooterSize; max_image <= 300; ++max_image) {
    for (std::size_t length = 0; length <= 320; ++length) {
      EXPECT_EQ(ring_image_size(length) <= max_image, length <= ring_max_length(max_image))
          << max_image << " " << length;
    }
  }
}

TEST(Ring, SealPadsWithZeros) {
  // Every padding length (0 to 7 bytes), over stale bytes, in an image of exactly
  // ring_image_size: the padding store must stay inside it.
  for (std::size_t length = 32; length <= 40; ++length) {
    std::vector<std::byte> m(ring_image_size(length), std::byte{0xff});
    ring_seal(m.data(), length);
    const std::size_t padded = ring_align8(length);
    for (std::size_t i = length; i < padded; ++i) {
      EXPECT_EQ(m[i], std::byte{0}) << length << " " << i;
    }
    for (std::size_t i = 0; i < length; ++i) {
      EXPECT_EQ(m[i], std::byte{0xff}) << length << " " << i;
    }
    std::uint64_t f = 0;
    std::memcpy(&f, m.data() + padded, 8);
    EXPECT_EQ(f, ring_footer(ring_check(m.data(), length), length)) << length;
    EXPECT_EQ(f >> 56, kRingMagic);
    EXPECT_EQ((f >> 32) & 0xffff, length);
  }
}

TEST(Ring, GeometryBounds) {
  EXPECT_TRUE(ring_geometry_ok(32, 512));
  EXPECT_TRUE(ring_geometry_ok(kRingMinSlots, kRingMinSlot));
  EXPECT_TRUE(ring_geometry_ok(kRingMaxSlots, kRingMaxSlot));
  EXPECT_FALSE(ring_geometry_ok(1, 512));
  EXPECT_FALSE(ring_geometry_ok(kRingMaxSlots + 1, 512));
  EXPECT_FALSE(ring_geometry_ok(32, 60));
  EXPECT_FALSE(ring_geometry_ok(32, 516));
  EXPECT_FALSE(ring_geometry_ok(32, kRingMaxSlot + 8));
}

TEST(Ring, CreditsAcrossTheWrap) {
  EXPECT_EQ(ring_free_slots(32, 0, 0), 32u);
  EXPECT_EQ(ring_free_slots(32, 32, 0), 0u);
  EXPECT_EQ(ring_free_slots(32, 40, 10), 2u);
  EXPECT_EQ(ring_free_slots(32, 5, 0xfffffff0u), 11u);  // sent wrapped, taken not yet
  EXPECT_EQ(ring_newer(10, 12), 12u);
  EXPECT_EQ(ring_newer(12, 10), 12u);  // an older report changes nothing
  EXPECT_EQ(ring_newer(0xfffffffeu, 3), 3u);
}

}  // namespace
}  // namespace rdmx::protocol
