#include "protocol/wr_id.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

namespace rdmx::protocol {
namespace {

constexpr std::array kAllKinds = {WrKind::kSrqRecv,    WrKind::kUdRecv,    WrKind::kSend,
                                  WrKind::kSendInline, WrKind::kRdmaWrite, WrKind::kRdmaWriteImm,
                                  WrKind::kControl,    WrKind::kRdmaRead,  WrKind::kRma};

// The codec is constexpr: a compile-time round trip proves it can be used in constant tables.
static_assert(decode(encode(WrId{WrKind::kSend, 7, 9, 11})) == WrId{WrKind::kSend, 7, 9, 11});
static_assert(encode(WrId{WrKind::kSrqRecv, 0, 0, 0}) != 0);

TEST(WrId, RoundTripsEveryKind) {
  for (WrKind kind : kAllKinds) {
    const WrId id{kind, 123, 4567, 891011};
    ASSERT_TRUE(is_encodable(id));
    EXPECT_EQ(decode(encode(id)), id) << static_cast<int>(kind);
    EXPECT_EQ(wr_kind(encode(id)), kind);
    EXPECT_TRUE(is_valid_wr_id(encode(id)));
  }
}

// with_kind adds the kind to a kept base and gives exactly what encode gives (SendPool's posts).
TEST(WrId, WithKindEqualsEncode) {
  for (WrKind kind : kAllKinds) {
    for (std::uint16_t gen : {std::uint16_t{0}, static_cast<std::uint16_t>(kWrMaxGeneration)}) {
      for (std::uint32_t slot : {std::uint32_t{0}, 77u, kWrMaxSlot}) {
        const std::uint64_t base = encode(WrId{WrKind::kNone, 3, gen, slot});
        EXPECT_EQ(with_kind(base, kind), encode(WrId{kind, 3, gen, slot}));
        EXPECT_EQ(decode(with_kind(base, kind)), (WrId{kind, 3, gen, slot}));
      }
    }
  }
}

TEST(WrId, RoundTripsFieldExtremes) {
  for (WrKind kind : {WrKind::kSrqRecv, WrKind::kRdmaRead, static_cast<WrKind>(14)}) {
    for (std::uint16_t thread : {std::uint16_t{0}, static_cast<std::uint16_t>(kWrMaxThread)}) {
      for (std::uint16_t gen : {std::uint16_t{0}, static_cast<std::uint16_t>(kWrMaxGeneration)}) {
        for (std::uint32_t slot : {std::uint32_t{0}, kWrMaxSlot}) {
          const WrId id{kind, thread, gen, slot};
          ASSERT_TRUE(is_encodable(id));
          EXPECT_EQ(decode(encode(id)), id);
        }
      }
    }
  }
}

TEST(WrId, FieldsDoNotBleed) {
  // One field all ones, the others zero: only that field's bits may be set.
  const std::uint64_t slot_only = encode(WrId{WrKind::kSend, 0, 0, kWrMaxSlot});
  EXPECT_EQ(slot_only & ~(kWrKindMask << kWrKindShift), kWrSlotMask << kWrSlotShift);
  const std::uint64_t gen_only = encode(WrId{WrKind::kSend, 0, 0xffff, 0});
  EXPECT_EQ(gen_only & ~(kWrKindMask << kWrKindShift), kWrGenerationMask << kWrGenerationShift);
  const std::uint64_t thread_only =
      encode(WrId{WrKind::kSend, static_cast<std::uint16_t>(kWrMaxThread), 0, 0});
  EXPECT_EQ(thread_only & ~(kWrKindMask << kWrKindShift), kWrThreadMask << kWrThreadShift);

  // The field masks tile the word exactly.
  const std::uint64_t all = (kWrKindMask << kWrKindShift) | (kWrThreadMask << kWrThreadShift) |
                            (kWrGenerationMask << kWrGenerationShift) |
                            (kWrSlotMask << kWrSlotShift);
  EXPECT_EQ(all, ~std::uint64_t{0});
  EXPECT_EQ((kWrKindMask << kWrKindShift) & (kWrThreadMask << kWrThreadShift), 0u);
  EXPECT_EQ((kWrThreadMask << kWrThreadShift) & (kWrGenerationMask << kWrGenerationShift), 0u);
  EXPECT_EQ((kWrGenerationMask << kWrGenerationShift) & (kWrSlotMask << kWrSlotShift), 0u);
}

TEST(WrId, OutOfRangeThreadIsMaskedNotSpilledIntoKind) {
  const WrId id{WrKind::kSend, 0xffff, 0, 0};
  EXPECT_FALSE(is_encodable(id));
  // Even when the precondition is broken the kind survives.
  EXPECT_EQ(wr_kind(encode(id)), WrKind::kSend);
  EXPECT_EQ(decode(encode(id)).thread, kWrMaxThread);
}

TEST(WrId, SentinelIsNeverProduced) {
  for (WrKind kind : kAllKinds) {
    const WrId max{kind, static_cast<std::uint16_t>(kWrMaxThread),
                   static_cast<std::uint16_t>(kWrMaxGeneration), kWrMaxSlot};
    EXPECT_NE(encode(max), kInvalidWrId);
    EXPECT_NE(encode(WrId{kind, 0, 0, 0}), 0u) << "a zeroed wr_id must not be a valid one";
  }
  EXPECT_FALSE(is_valid_wr_id(kInvalidWrId));
  EXPECT_FALSE(is_valid_wr_id(0));
  EXPECT_EQ(decode(kInvalidWrId).kind, WrKind::kInvalid);
  EXPECT_EQ(decode(0).kind, WrKind::kNone);
  EXPECT_FALSE(is_encodable_kind(WrKind::kNone));
  EXPECT_FALSE(is_encodable_kind(WrKind::kInvalid));
}

TEST(WrId, RandomRoundTrip) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t r = rng();
    const WrId id{static_cast<WrKind>(1 + r % 14),
                  static_cast<std::uint16_t>((r >> 8) & kWrThreadMask),
                  static_cast<std::uint16_t>(r >> 20), static_cast<std::uint32_t>(r >> 32)};
    const std::uint64_t word = encode(id);
    ASSERT_NE(word, kInvalidWrId);
    ASSERT_EQ(decode(word), id);
  }
}

TEST(WrId, GenerationWrapsInsideItsField) {
  EXPECT_EQ(next_generation(0), 1);
  EXPECT_EQ(next_generation(static_cast<std::uint16_t>(kWrMaxGeneration)), 0);
  // A stale completion of the previous generation is distinguishable after a wrap.
  const WrId old_id{WrKind::kSend, 1, static_cast<std::uint16_t>(kWrMaxGeneration), 5};
  const WrId new_id{WrKind::kSend, 1, next_generation(old_id.generation), 5};
  EXPECT_NE(encode(old_id), encode(new_id));
}

}  // namespace
}  // namespace rdmx::protocol
