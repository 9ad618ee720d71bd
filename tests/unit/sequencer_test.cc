#include "protocol/sequencer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "protocol/serial.h"

namespace rdmx::protocol {
namespace {

// Feeds one arrival and returns the cookies delivered in order because of it.
std::vector<std::uint64_t> feed(Sequencer& s, Seq seq, std::uint64_t cookie, Arrival* out) {
  std::vector<std::uint64_t> delivered;
  const Arrival a = s.on_arrival(seq, cookie);
  if (out != nullptr) {
    *out = a;
  }
  if (a == Arrival::kDeliver) {
    delivered.push_back(cookie);
    while (auto c = s.pop_ready()) {
      delivered.push_back(*c);
    }
  }
  return delivered;
}

TEST(Serial, Comparisons) {
  EXPECT_TRUE(seq_lt(0, 1));
  EXPECT_TRUE(seq_lt(65535, 0));
  EXPECT_TRUE(seq_lt(65000, 100));
  EXPECT_FALSE(seq_lt(100, 65000));
  EXPECT_TRUE(seq_le(7, 7));
  EXPECT_TRUE(seq_ge(7, 7));
  EXPECT_FALSE(seq_gt(7, 7));
  EXPECT_EQ(seq_diff(0, 65535), 1);
  EXPECT_EQ(seq_diff(65535, 0), -1);
  EXPECT_EQ(seq_diff(32767, 0), 32767);
  EXPECT_EQ(seq_diff(32768, 0), -32768);
  EXPECT_EQ(seq_add(65530, 10), 4);
}

TEST(Sequencer, RejectsBadWindow) {
  EXPECT_THROW(Sequencer{0}, std::invalid_argument);
  EXPECT_THROW(Sequencer{3}, std::invalid_argument);
  EXPECT_THROW(Sequencer{kMaxSeqWindow * 2}, std::invalid_argument);
  EXPECT_NO_THROW(Sequencer{kMaxSeqWindow});
  EXPECT_NO_THROW(Sequencer{1});
}

TEST(Sequencer, InOrderDeliversImmediately) {
  Sequencer s(8);
  for (Seq i = 0; i < 20; ++i) {
    Arrival a{};
    EXPECT_EQ(feed(s, i, i, &a), std::vector<std::uint64_t>{i});
    EXPECT_EQ(a, Arrival::kDeliver);
    EXPECT_EQ(s.cumulative_ack(), i);
  }
  EXPECT_EQ(s.held(), 0u);
}

TEST(Sequencer, InitialAckIsOneBeforeFirst) {
  Sequencer s(8, 100);
  EXPECT_EQ(s.expected(), 100);
  EXPECT_EQ(s.cumulative_ack(), 99);
  Sequencer z(8, 0);
  EXPECT_EQ(z.cumulative_ack(), 65535);
}

TEST(Sequencer, HoldsEarlyArrivalUntilGapFills) {
  Sequencer s(8);
  Arrival a{};
  EXPECT_TRUE(feed(s, 2, 102, &a).empty());
  EXPECT_EQ(a, Arrival::kHeld);
  EXPECT_TRUE(feed(s, 1, 101, &a).empty());
  EXPECT_EQ(a, Arrival::kHeld);
  EXPECT_EQ(s.held(), 2u);
  EXPECT_EQ(s.cumulative_ack(), 65535) << "nothing delivered yet";
  EXPECT_EQ(feed(s, 0, 100, &a), (std::vector<std::uint64_t>{100, 101, 102}));
  EXPECT_EQ(s.held(), 0u);
  EXPECT_EQ(s.expected(), 3);
  EXPECT_EQ(s.cumulative_ack(), 2);
}

TEST(Sequencer, PopReadyStopsAtNextGap) {
  Sequencer s(16);
  ASSERT_EQ(s.on_arrival(1, 1), Arrival::kHeld);
  ASSERT_EQ(s.on_arrival(3, 3), Arrival::kHeld);
  EXPECT_EQ(feed(s, 0, 0, nullptr), (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(s.expected(), 2);
  EXPECT_EQ(s.held(), 1u);
  EXPECT_FALSE(s.pop_ready().has_value());
  EXPECT_EQ(feed(s, 2, 2, nullptr), (std::vector<std::uint64_t>{2, 3}));
}

TEST(Sequencer, DuplicatesAreReported) {
  Sequencer s(8);
  ASSERT_EQ(s.on_arrival(0, 0), Arrival::kDeliver);
  EXPECT_EQ(s.on_arrival(0, 0), Arrival::kDuplicate) << "already delivered";
  ASSERT_EQ(s.on_arrival(3, 3), Arrival::kHeld);
  EXPECT_EQ(s.on_arrival(3, 99), Arrival::kDuplicate) << "already held";
  EXPECT_EQ(s.held(), 1u);
  // The held cookie is the first one, not the duplicate's.
  ASSERT_EQ(s.on_arrival(1, 1), Arrival::kDeliver);
  ASSERT_EQ(s.on_arrival(2, 2), Arrival::kDeliver);
  EXPECT_EQ(s.pop_ready(), std::optional<std::uint64_t>{3});
  // Long-past Seqs (up to half the space behind) are duplicates too.
  EXPECT_EQ(s.on_arrival(seq_add(s.expected(), 32768), 0), Arrival::kDuplicate);
}

TEST(Sequencer, HeldNextIsDuplicateUntilPopped) {
  Sequencer s(8);
  ASSERT_EQ(s.on_arrival(1, 1), Arrival::kHeld);
  ASSERT_EQ(s.on_arrival(0, 0), Arrival::kDeliver);
  // Seq 1 is now expected but still held: a retransmitted copy must not be delivered twice.
  EXPECT_EQ(s.on_arrival(1, 77), Arrival::kDuplicate);
  EXPECT_EQ(s.pop_ready(), std::optional<std::uint64_t>{1});
}

TEST(Sequencer, OutOfWindowRejectedAndNotHeld) {
  Sequencer s(8);
  EXPECT_EQ(s.on_arrival(7, 7), Arrival::kHeld) << "expected + window - 1 fits";
  EXPECT_EQ(s.on_arrival(8, 8), Arrival::kOutOfWindow);
  EXPECT_EQ(s.on_arrival(1000, 8), Arrival::kOutOfWindow);
  EXPECT_EQ(s.held(), 1u);
  // Seq 8 shares a ring slot with 0: 0 must still be deliverable.
  EXPECT_EQ(s.on_arrival(0, 0), Arrival::kDeliver);
}

TEST(Sequencer, WrapsAround) {
  Sequencer s(8, 65532);
  Arrival a{};
  EXPECT_TRUE(feed(s, 1, 1, &a).empty());
  EXPECT_EQ(a, Arrival::kHeld);
  EXPECT_TRUE(feed(s, 65535, 65535, &a).empty());
  EXPECT_TRUE(feed(s, 0, 0, &a).empty());
  EXPECT_TRUE(feed(s, 65533, 65533, &a).empty());
  EXPECT_EQ(feed(s, 65532, 65532, &a), (std::vector<std::uint64_t>{65532, 65533}));
  EXPECT_EQ(feed(s, 65534, 65534, &a), (std::vector<std::uint64_t>{65534, 65535, 0, 1}));
  EXPECT_EQ(s.expected(), 2);
  EXPECT_EQ(s.cumulative_ack(), 1);
  EXPECT_EQ(s.on_arrival(65535, 0), Arrival::kDuplicate);
}

TEST(Sequencer, DrainHeldReturnsEveryHeldCookie) {
  Sequencer s(16);
  ASSERT_EQ(s.on_arrival(5, 50), Arrival::kHeld);
  ASSERT_EQ(s.on_arrival(2, 20), Arrival::kHeld);
  ASSERT_EQ(s.on_arrival(15, 150), Arrival::kHeld);
  std::vector<std::uint64_t> drained;
  s.drain_held([&](Seq, std::uint64_t cookie) { drained.push_back(cookie); });
  EXPECT_EQ(drained, (std::vector<std::uint64_t>{20, 50, 150}));
  EXPECT_EQ(s.held(), 0u);
  s.reset(1000);
  EXPECT_EQ(s.on_arrival(1000, 0), Arrival::kDeliver);
  EXPECT_FALSE(s.pop_ready().has_value()) << "reset must not resurrect drained entries";
}

// Random permutations within the window, many rounds, starting near the wrap point: every
// message comes out exactly once and in order; a duplicate copy of each is injected too.
TEST(Sequencer, RandomPermutationsWithinWindow) {
  constexpr std::size_t kWindow = 64;
  std::mt19937 rng(7);
  Sequencer s(kWindow, 65000);
  Seq base = 65000;
  std::uint64_t next_expected = 65000;
  for (int round = 0; round < 200; ++round) {
    std::vector<Seq> batch(kWindow);
    std::iota(batch.begin(), batch.end(), Seq{0});
    std::shuffle(batch.begin(), batch.end(), rng);
    for (Seq off : batch) {
      const Seq seq = seq_add(base, off);
      const std::uint64_t cookie = 65000u + static_cast<std::uint64_t>(round) * kWindow + off;
      for (std::uint64_t c : feed(s, seq, cookie, nullptr)) {
        ASSERT_EQ(c, next_expected) << "round " << round;
        ++next_expected;
      }
      // A retransmitted copy: never delivered again.
      const Arrival dup = s.on_arrival(seq, cookie);
      ASSERT_EQ(dup, Arrival::kDuplicate);
    }
    ASSERT_EQ(s.held(), 0u);
    base = seq_add(base, kWindow);
  }
  EXPECT_EQ(next_expected, 65000u + 200u * kWindow);
}

}  // namespace
}  // namespace rdmx::protocol
