// Host tests of the hand-off between memory hooks (any thread) and the cache's owner.
#include "rendezvous/invalidation_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace rdmx::rendezvous {
namespace {

std::vector<AddrRange> drain_all(InvalidationQueue& q, int* overflows = nullptr) {
  std::vector<AddrRange> out;
  q.drain(
      [&] {
        if (overflows != nullptr) {
          ++*overflows;
        }
      },
      [&](std::span<const AddrRange> batch) { out.insert(out.end(), batch.begin(), batch.end()); });
  return out;
}

TEST(InvalidationQueue, DeliversRangesInOrderAndClearsPending) {
  InvalidationQueue q(8);
  EXPECT_FALSE(q.pending());
  q.push(0x1000, 0x2000);
  q.push(0x5000, 0x5001);
  EXPECT_TRUE(q.pending());
  const auto got = drain_all(q);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].start, 0x1000u);
  EXPECT_EQ(got[0].end, 0x2000u);
  EXPECT_EQ(got[1].start, 0x5000u);
  EXPECT_FALSE(q.pending());
  EXPECT_TRUE(drain_all(q).empty());
}

TEST(InvalidationQueue, EmptyAndInvertedRangesAreIgnored) {
  InvalidationQueue q(8);
  q.push(0x1000, 0x1000);
  q.push(0x2000, 0x1000);
  EXPECT_FALSE(q.pending());
  EXPECT_EQ(q.pushed(), 0u);
}

TEST(InvalidationQueue, RangesOutsideTheWatchedSpanAreFiltered) {
  InvalidationQueue q(8);
  q.watch(0x10000, 0x20000);
  q.push(0x0, 0x10000);      // ends where the span begins
  q.push(0x20000, 0x30000);  // starts where it ends
  EXPECT_FALSE(q.pending());
  EXPECT_EQ(q.filtered(), 2u);
  q.push(0xf000, 0x10001);  // one byte inside
  q.push(0x1ffff, 0x30000);
  EXPECT_EQ(drain_all(q).size(), 2u);
  q.watch_nothing();
  q.push(0, UINTPTR_MAX);
  EXPECT_FALSE(q.pending());
  q.watch_everything();
  q.push(1, 2);
  EXPECT_TRUE(q.pending());
}

TEST(InvalidationQueue, OverflowIsReportedOnceAndQueuedRangesStillArrive) {
  InvalidationQueue q(2);
  for (std::uintptr_t i = 1; i <= 5; ++i) {
    q.push(i * 0x1000, i * 0x1000 + 1);
  }
  EXPECT_EQ(q.overflows(), 1u);
  int overflows = 0;
  const auto got = drain_all(q, &overflows);
  EXPECT_EQ(overflows, 1);
  EXPECT_EQ(got.size(), 2u);
  // The flag is cleared by the drain.
  q.push(0x9000, 0x9001);
  overflows = 0;
  EXPECT_EQ(drain_all(q, &overflows).size(), 1u);
  EXPECT_EQ(overflows, 0);
}

TEST(InvalidationQueue, DrainsMoreThanOneBatch) {
  InvalidationQueue q(3 * InvalidationQueue::kDrainBatch);
  for (std::uintptr_t i = 0; i < 2 * InvalidationQueue::kDrainBatch + 5; ++i) {
    q.push(i, i + 1);
  }
  const auto got = drain_all(q);
  ASSERT_EQ(got.size(), 2 * InvalidationQueue::kDrainBatch + 5);
  for (std::uintptr_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].start, i);
  }
}

TEST(InvalidationQueue, RangesPushedWhileDrainingAreDeliveredInTheSameDrain) {
  InvalidationQueue q(8);
  q.push(1, 2);
  std::vector<AddrRange> got;
  bool pushed = false;
  q.drain([] {},
          [&](std::span<const AddrRange> batch) {
            got.insert(got.end(), batch.begin(), batch.end());
            if (!pushed) {  // as if deregistering freed memory and the hook fired
              pushed = true;
              q.push(3, 4);
            }
          });
  EXPECT_EQ(got.size(), 2u);
  EXPECT_FALSE(q.pending());
}

// Producers in several threads, the owner draining concurrently: nothing is lost or
// duplicated, and each producer's ranges arrive in its order.
TEST(InvalidationQueue, ConcurrentProducersLoseNothing) {
  constexpr int kThreads = 4;
  constexpr std::uintptr_t kPerThread = 20000;
  InvalidationQueue q(kThreads * kPerThread);
  std::atomic<int> done{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (std::uintptr_t i = 0; i < kPerThread; ++i) {
        const std::uintptr_t start = (static_cast<std::uintptr_t>(t) << 40) | (i << 4);
        q.push(start, start + 1);
      }
      done.fetch_add(1);
    });
  }
  std::vector<std::uintptr_t> next(kThreads, 0);
  std::size_t total = 0;
  int overflows = 0;
  auto consume = [&](std::span<const AddrRange> batch) {
    for (const AddrRange& r : batch) {
      const auto t = static_cast<std::size_t>(r.start >> 40);
      ASSERT_LT(t, next.size());
      ASSERT_EQ((r.start & ((std::uintptr_t{1} << 40) - 1)) >> 4, next[t]) << "thread " << t;
      ++next[t];
      ++total;
    }
  };
  while (done.load() < kThreads) {
    q.drain([&] { ++overflows; }, consume);
  }
  q.drain([&] { ++overflows; }, consume);
  for (auto& p : producers) {
    p.join();
  }
  EXPECT_EQ(overflows, 0);
  EXPECT_EQ(total, kThreads * kPerThread);
}

}  // namespace
}  // namespace rdmx::rendezvous
