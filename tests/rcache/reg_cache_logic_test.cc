// Host tests of the registration cache's bookkeeping (lookup, LRU bounds, reference counts,
// merging and its fallback, invalidation, errors) with a fake registrar. The addresses are
// never dereferenced; invalidations are fed by hand (InvalidationSource::kExternal).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "rendezvous/reg_cache.h"
#include "tests/rcache/fake_registrar.h"

namespace rdmx::test {
namespace {

using rendezvous::InvalidationSource;
using rendezvous::RegCache;
using rendezvous::RegCacheConfig;
using rendezvous::Registration;
using rendezvous::RegistrationError;

constexpr std::uintptr_t kPage = 4096;
constexpr std::uintptr_t kBase = 0x1000'0000'0000ULL;  // never mapped, never touched

const void* page(std::size_t i, std::size_t offset = 0) {
  return reinterpret_cast<const void*>(kBase + i * kPage + offset);
}
std::uintptr_t addr(std::size_t i) {
  return kBase + i * kPage;
}

RegCacheConfig config(std::size_t max_entries = 64, std::size_t max_bytes = 1 << 30) {
  RegCacheConfig c;
  c.max_entries = max_entries;
  c.max_bytes = max_bytes;
  c.source = InvalidationSource::kExternal;
  return c;
}

class RegCacheLogic : public ::testing::Test {
 protected:
  void make(const RegCacheConfig& c) {
    cache = std::make_unique<RegCache>(std::make_unique<FakeRegistrar>(fake), c);
  }
  void SetUp() override { make(config()); }

  // Acquire and release at once: leaves the entry cached and unused.
  void touch(std::size_t first_page, std::size_t pages) {
    Registration r = cache->acquire(page(first_page), pages * kPage);
  }

  FakeState fake;
  std::unique_ptr<RegCache> cache;
};

TEST_F(RegCacheLogic, SecondAcquireOfTheSameRangeIsAHitWithTheSameKeys) {
  Registration a = cache->acquire(page(0, 100), 3000);
  const std::uint32_t lkey = a.lkey();
  const std::uint32_t rkey = a.rkey();
  a.reset();
  Registration b = cache->acquire(page(0, 100), 3000);
  EXPECT_EQ(b.lkey(), lkey);
  EXPECT_EQ(b.rkey(), rkey);
  const auto s = cache->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.registrations, 1u);
  EXPECT_EQ(fake.attempts.size(), 1u);
}

TEST_F(RegCacheLogic, RegistrationCoversWholePagesOfTheRequest) {
  Registration r = cache->acquire(page(2, 4000), 200);  // crosses into page 3
  EXPECT_EQ(r.base(), addr(2));
  EXPECT_EQ(r.length(), 2 * kPage);
  ASSERT_EQ(fake.attempts.size(), 1u);
  EXPECT_EQ(fake.attempts[0].start, addr(2));
  EXPECT_EQ(fake.attempts[0].end, addr(4));
}

TEST_F(RegCacheLogic, AnySubrangeOfACachedEntryHitsAndConcurrentUsersShareIt) {
  Registration whole = cache->acquire(page(0), 4 * kPage);
  Registration part = cache->acquire(page(1, 10), kPage);
  Registration last = cache->acquire(page(3, 4095), 1);
  EXPECT_EQ(part.lkey(), whole.lkey());
  EXPECT_EQ(last.lkey(), whole.lkey());
  EXPECT_EQ(cache->stats().hits, 2u);
  EXPECT_EQ(cache->stats().in_use_entries, 1u);
  // Past the end: not contained, so a miss.
  Registration beyond = cache->acquire(page(3, 4095), 2);
  EXPECT_EQ(cache->stats().misses, 2u);
}

TEST_F(RegCacheLogic, EmptyAndWrappingRangesAreRejectedWithEinval) {
  Registration r;
  EXPECT_EQ(cache->try_acquire(page(0), 0, r), EINVAL);
  EXPECT_FALSE(r);
  EXPECT_NE(cache->last_error().find("empty range"), std::string::npos) << cache->last_error();
  EXPECT_EQ(cache->try_acquire(reinterpret_cast<const void*>(UINTPTR_MAX - 10), 100, r), EINVAL);
  EXPECT_NE(cache->last_error().find("wraps"), std::string::npos) << cache->last_error();
  EXPECT_TRUE(fake.attempts.empty());
  EXPECT_EQ(cache->stats().failures, 2u);
}

TEST_F(RegCacheLogic, LruEvictsTheLeastRecentlyUsedEntryWhenTheCountBoundIsReached) {
  make(config(/*max_entries=*/3));
  touch(0, 1);  // A
  touch(2, 1);  // B
  touch(4, 1);  // C
  touch(0, 1);  // A again: hit, now most recent; LRU order B, C, A
  EXPECT_EQ(cache->stats().hits, 1u);
  touch(6, 1);  // D: B goes
  auto s = cache->stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(fake.live.size(), 3u);
  touch(0, 1);  // A: hit
  touch(4, 1);  // C: hit
  touch(6, 1);  // D: hit
  EXPECT_EQ(cache->stats().hits, 4u);
  touch(2, 1);  // B: evicted earlier, a miss
  EXPECT_EQ(cache->stats().misses, 5u);
  EXPECT_EQ(cache->stats().evictions, 2u);
}

TEST_F(RegCacheLogic, LruEvictsUntilTheByteBoundHolds) {
  make(config(/*max_entries=*/100, /*max_bytes=*/4 * kPage));
  touch(0, 1);
  touch(2, 1);
  touch(4, 2);
  EXPECT_EQ(cache->stats().bytes, 4 * kPage);
  touch(10, 2);  // needs 2 pages: the two oldest 1-page entries go
  const auto s = cache->stats();
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.bytes, 4 * kPage);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(fake.live_bytes(), 4 * kPage);
}

TEST_F(RegCacheLogic, EntriesInUseAreNeverEvicted) {
  make(config(/*max_entries=*/2, /*max_bytes=*/3 * kPage));
  Registration a = cache->acquire(page(0), kPage);
  Registration b = cache->acquire(page(2), kPage);
  Registration c = cache->acquire(page(4), 2 * kPage);  // over both bounds: nothing to evict
  auto s = cache->stats();
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.in_use_entries, 3u);
  EXPECT_EQ(fake.live.count(a.lkey()), 1u);
  EXPECT_EQ(fake.live.count(b.lkey()), 1u);
  c.reset();  // the only unused entry, and the cache is over its bounds: it goes
  s = cache->stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 2u);
  // a and b still cached and valid.
  Registration a2 = cache->acquire(page(0), kPage);
  EXPECT_EQ(a2.lkey(), a.lkey());
  EXPECT_EQ(fake.live.count(a.lkey()), 1u);
}

TEST_F(RegCacheLogic, ARequestLargerThanTheByteBoundIsServedThenEvictedOnRelease) {
  make(config(/*max_entries=*/10, /*max_bytes=*/2 * kPage));
  Registration big = cache->acquire(page(0), 8 * kPage);
  EXPECT_TRUE(big);
  EXPECT_EQ(cache->stats().bytes, 8 * kPage);
  big.reset();
  EXPECT_EQ(cache->stats().bytes, 0u);
  EXPECT_EQ(cache->stats().evictions, 1u);
  EXPECT_TRUE(fake.live.empty());
}

TEST_F(RegCacheLogic, ZeroMaxEntriesMeansNothingIsKept) {
  make(config(/*max_entries=*/0));
  touch(0, 1);
  touch(0, 1);
  EXPECT_EQ(cache->stats().hits, 0u);
  EXPECT_EQ(cache->stats().misses, 2u);
  EXPECT_TRUE(fake.live.empty());
}

TEST_F(RegCacheLogic, InvalidatedUnusedEntryIsDeregisteredAndTheNextAcquireRegistersAgain) {
  Registration r = cache->acquire(page(0), 2 * kPage);
  const std::uint32_t old_key = r.lkey();
  r.reset();
  cache->invalidate(page(1, 17), 1);  // one byte of the second page
  EXPECT_EQ(cache->flush_invalidations(), 1u);
  EXPECT_EQ(fake.live.count(old_key), 0u);
  EXPECT_EQ(cache->stats().invalidations, 1u);
  EXPECT_EQ(cache->stats().entries, 0u);
  Registration again = cache->acquire(page(0), 2 * kPage);
  EXPECT_NE(again.lkey(), old_key);
  EXPECT_EQ(cache->stats().misses, 2u);
}

TEST_F(RegCacheLogic, AcquireAppliesQueuedInvalidationsWithoutAnExplicitFlush) {
  touch(0, 1);
  cache->invalidate(page(0), kPage);
  Registration r = cache->acquire(page(0), kPage);
  EXPECT_EQ(cache->stats().hits, 0u);
  EXPECT_EQ(cache->stats().misses, 2u);
  EXPECT_EQ(cache->stats().invalidations, 1u);
}

TEST_F(RegCacheLogic, EntryInvalidatedWhileInUseStaysValidUntilItsLastRelease) {
  Registration r1 = cache->acquire(page(0), kPage);
  Registration r2 = cache->acquire(page(0), kPage);
  const std::uint32_t old_key = r1.lkey();
  cache->invalidate(page(0), kPage);
  EXPECT_EQ(cache->flush_invalidations(), 1u);
  EXPECT_EQ(fake.live.count(old_key), 1u);  // still registered: in use
  EXPECT_EQ(cache->stats().cached_entries, 0u);

  // New memory at the address gets a new registration, not the invalidated one.
  Registration fresh = cache->acquire(page(0), kPage);
  EXPECT_NE(fresh.lkey(), old_key);
  EXPECT_EQ(cache->stats().entries, 2u);

  r1.reset();
  EXPECT_EQ(fake.live.count(old_key), 1u);
  r2.reset();
  EXPECT_EQ(fake.live.count(old_key), 0u);
  EXPECT_EQ(cache->stats().entries, 1u);
  EXPECT_EQ(cache->stats().deregistrations, 1u);
}

TEST_F(RegCacheLogic, InvalidationOutsideEveryEntryChangesNothing) {
  touch(0, 2);
  touch(4, 1);
  cache->invalidate(page(2), 2 * kPage);  // exactly the gap
  cache->invalidate(page(100), kPage);    // beyond everything: filtered before queueing
  EXPECT_EQ(cache->flush_invalidations(), 0u);
  EXPECT_EQ(cache->stats().cached_entries, 2u);
  EXPECT_EQ(cache->stats().unmap_events, 1u);
}

TEST_F(RegCacheLogic, OneInvalidationCoveringSeveralEntriesRemovesThemAll) {
  touch(0, 1);
  touch(2, 1);
  touch(4, 1);
  touch(8, 1);
  cache->invalidate(page(0, 5), 5 * kPage);  // pages 0..5 partly
  EXPECT_EQ(cache->flush_invalidations(), 3u);
  EXPECT_EQ(cache->stats().cached_entries, 1u);
}

TEST_F(RegCacheLogic, QueueOverflowInvalidatesEverything) {
  RegCacheConfig c = config();
  c.invalidation_queue_capacity = 2;
  make(c);
  touch(0, 1);
  touch(10, 1);
  touch(20, 1);
  cache->invalidate(page(1), 1);  // inside the watched span, overlapping nothing
  cache->invalidate(page(2), 1);
  cache->invalidate(page(3), 1);  // the ring is full: overflow
  EXPECT_EQ(cache->flush_invalidations(), 3u);
  EXPECT_EQ(cache->stats().queue_overflows, 1u);
  EXPECT_EQ(cache->stats().cached_entries, 0u);
  EXPECT_TRUE(fake.live.empty());
}

TEST_F(RegCacheLogic, OverlappingRequestIsMergedWithTheCachedEntry) {
  touch(0, 2);                                          // [0, 2)
  Registration r = cache->acquire(page(1), 2 * kPage);  // [1, 3): merged into [0, 3)
  EXPECT_EQ(r.base(), addr(0));
  EXPECT_EQ(r.length(), 3 * kPage);
  auto s = cache->stats();
  EXPECT_EQ(s.merges, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(fake.live.size(), 1u);  // the old [0, 2) was deregistered
  r.reset();
  Registration hit = cache->acquire(page(0), 3 * kPage);
  EXPECT_EQ(cache->stats().hits, 1u);
}

TEST_F(RegCacheLogic, MergeSpansEveryOverlappedEntry) {
  touch(0, 1);
  touch(2, 1);
  touch(4, 1);
  Registration r = cache->acquire(page(0, 100), 4 * kPage);  // pages 0..4
  EXPECT_EQ(r.base(), addr(0));
  EXPECT_EQ(r.length(), 5 * kPage);
  EXPECT_EQ(cache->stats().cached_entries, 1u);
  EXPECT_EQ(fake.live.size(), 1u);
}

TEST_F(RegCacheLogic, FailedMergedRegistrationIsRetriedOnExactlyTheRequestedRange) {
  touch(0, 2);                          // [0, 2) cached
  fake.poisoned_pages.insert(addr(0));  // page 0 can no longer be registered (e.g. read-only)
  Registration r;
  ASSERT_EQ(cache->try_acquire(page(1), 2 * kPage, r), 0) << cache->last_error();
  EXPECT_EQ(r.base(), addr(1));
  EXPECT_EQ(r.length(), 2 * kPage);
  ASSERT_EQ(fake.attempts.size(), 3u);
  EXPECT_EQ(fake.attempts[1].start, addr(0));  // the merged try
  EXPECT_EQ(fake.attempts[1].end, addr(3));
  EXPECT_EQ(fake.attempts[2].start, addr(1));  // exactly the request
  EXPECT_EQ(fake.attempts[2].end, addr(3));
  const auto s = cache->stats();
  EXPECT_EQ(s.merge_fallbacks, 1u);
  EXPECT_EQ(s.merges, 0u);
  EXPECT_EQ(s.failures, 0u);
  // Cached entries never overlap: the old [0, 2) left the map (and, unused, was deregistered).
  EXPECT_EQ(s.cached_entries, 1u);
  EXPECT_EQ(fake.live.size(), 1u);
}

TEST_F(RegCacheLogic, MergeFallbackKeepsAnOverlappedEntryThatIsInUse) {
  Registration old = cache->acquire(page(0), 2 * kPage);
  fake.poisoned_pages.insert(addr(0));
  Registration r = cache->acquire(page(1), 2 * kPage);
  EXPECT_NE(r.lkey(), old.lkey());
  EXPECT_EQ(fake.live.count(old.lkey()), 1u);
  EXPECT_EQ(cache->stats().entries, 2u);
  const std::uint32_t old_key = old.lkey();
  old.reset();
  EXPECT_EQ(fake.live.count(old_key), 0u);
}

TEST_F(RegCacheLogic, AnEntryServesRequestsForTheSameOrFewerRightsOnly) {
  constexpr int kRead = 0;
  constexpr int kWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  { Registration r = cache->acquire(page(0), kPage, kRead); }
  // More rights: a miss; the new entry (write, which includes reading) replaces the old...
  Registration w = cache->acquire(page(0), kPage, kWrite);
  EXPECT_EQ(cache->stats().misses, 2u);
  EXPECT_EQ(fake.attempts.back().access, kWrite);
  EXPECT_EQ(cache->stats().cached_entries, 1u);
  EXPECT_EQ(fake.live.size(), 1u);
  // ...which then serves both kinds of request.
  Registration r = cache->acquire(page(0), kPage, kRead);
  EXPECT_EQ(r.lkey(), w.lkey());
  EXPECT_EQ(cache->stats().hits, 1u);
}

TEST_F(RegCacheLogic, WritableRequestOnReadOnlyMemoryFailsButReadOnlyRequestsWork) {
  constexpr int kWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  fake.readonly_pages.insert(addr(0));
  Registration r;
  EXPECT_EQ(cache->try_acquire(page(0), kPage, kWrite, r), EFAULT);
  EXPECT_EQ(cache->try_acquire(page(0), kPage, 0, r), 0) << cache->last_error();
}

TEST_F(RegCacheLogic, MergedRightsFallBackToTheRequestedRightsOnReadOnlyPages) {
  constexpr int kWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  { Registration r = cache->acquire(page(1), kPage, kWrite); }  // page 1 writable, cached
  fake.readonly_pages.insert(addr(0));                          // page 0 read-only
  // Pages 0-1 for reading: the union (pages 0-1, write) is refused; pages 0-1 read-only work.
  Registration r;
  ASSERT_EQ(cache->try_acquire(page(0), 2 * kPage, 0, r), 0) << cache->last_error();
  EXPECT_EQ(r.base(), addr(0));
  EXPECT_EQ(r.length(), 2 * kPage);
  EXPECT_EQ(fake.attempts.back().access, 0);
  EXPECT_EQ(cache->stats().merge_fallbacks, 1u);
}

TEST_F(RegCacheLogic, WithMergeOffAnOverlappingRequestRegistersExactlyItsPages) {
  RegCacheConfig c = config();
  c.merge = false;
  make(c);
  touch(0, 2);
  Registration r = cache->acquire(page(1), 2 * kPage);
  EXPECT_EQ(r.base(), addr(1));
  EXPECT_EQ(r.length(), 2 * kPage);
  EXPECT_EQ(fake.attempts.size(), 2u);
  EXPECT_EQ(cache->stats().cached_entries, 1u);
}

TEST_F(RegCacheLogic, RegistrationFailureIsAClearErrorAndLeavesTheCacheUnchanged) {
  touch(10, 1);
  fake.poisoned_pages.insert(addr(0));
  Registration r;
  EXPECT_EQ(cache->try_acquire(page(0, 8), 100, r), EFAULT);
  EXPECT_FALSE(r);
  const std::string& e = cache->last_error();
  EXPECT_NE(e.find("cannot register 100 bytes at 0x100000000008"), std::string::npos) << e;
  EXPECT_NE(e.find("EFAULT"), std::string::npos) << e;
  try {
    (void)cache->acquire(page(0), 1);
    ADD_FAILURE() << "acquire did not throw";
  } catch (const RegistrationError& err) {
    EXPECT_EQ(err.errnum(), EFAULT);
    EXPECT_NE(std::string(err.what()).find("poisoned page"), std::string::npos) << err.what();
  }
  const auto s = cache->stats();
  EXPECT_EQ(s.failures, 2u);
  EXPECT_EQ(s.entries, 1u);
  touch(10, 1);
  EXPECT_EQ(cache->stats().hits, 1u);
}

TEST_F(RegCacheLogic, PinningLimitEvictsUnusedEntriesAndRetriesOnce) {
  fake.budget_bytes = 4 * kPage;
  touch(0, 3);  // 3 pages pinned, unused
  Registration r;
  ASSERT_EQ(cache->try_acquire(page(10), 2 * kPage, r), 0) << cache->last_error();
  const auto s = cache->stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(fake.attempts.size(), 3u);  // [0,3), the refused [10,12), the retry
}

TEST_F(RegCacheLogic, PinningLimitWithEverythingInUseFailsWithEnomem) {
  fake.budget_bytes = 4 * kPage;
  Registration held = cache->acquire(page(0), 3 * kPage);
  Registration r;
  EXPECT_EQ(cache->try_acquire(page(10), 2 * kPage, r), ENOMEM);
  EXPECT_NE(cache->last_error().find("pinning budget"), std::string::npos) << cache->last_error();
  EXPECT_TRUE(held);
  EXPECT_EQ(fake.live.size(), 1u);
}

TEST_F(RegCacheLogic, TryAcquireReleasesWhatTheHandleHeldBefore) {
  make(config(/*max_entries=*/0));
  Registration r = cache->acquire(page(0), kPage);
  ASSERT_EQ(cache->try_acquire(page(5), kPage, r), 0);
  EXPECT_EQ(r.base(), addr(5));
  EXPECT_EQ(fake.live.size(), 1u);
  cache->release(r);
  EXPECT_FALSE(r);
  EXPECT_TRUE(fake.live.empty());
}

TEST_F(RegCacheLogic, MovedRegistrationReleasesOnce) {
  Registration a = cache->acquire(page(0), kPage);
  Registration b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(b);
  a = std::move(b);
  EXPECT_EQ(cache->stats().in_use_entries, 1u);
  a.reset();
  EXPECT_EQ(cache->stats().in_use_entries, 0u);
  EXPECT_EQ(cache->stats().cached_entries, 1u);
}

TEST_F(RegCacheLogic, DestructionDeregistersEverything) {
  touch(0, 1);
  touch(4, 2);
  cache->invalidate(page(4), 1);  // queued, never flushed
  cache.reset();
  EXPECT_TRUE(fake.live.empty());
}

// Random operations against invariants:
//   - a registration contains the pages asked for, and its fake region is live and covers them;
//   - no registration handed out was made before the latest invalidation of any of its pages
//     (the cache never returns a stale registration);
//   - live registrations and bytes match the registrar's view;
//   - after a release, unused entries respect the bounds (in-use ones may exceed them);
//   - everything is deregistered at the end.
TEST_F(RegCacheLogic, RandomOperationsKeepTheInvariants) {
  constexpr std::size_t kPages = 64;
  constexpr std::size_t kMaxEntries = 8;
  constexpr std::size_t kMaxBytes = 24 * kPage;
  for (const bool merge : {true, false}) {
    fake = FakeState{};
    RegCacheConfig c = config(kMaxEntries, kMaxBytes);
    c.merge = merge;
    c.invalidation_queue_capacity = 4;
    make(c);
    std::mt19937 rng(merge ? 1234 : 99);
    constexpr int kWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    for (std::size_t p = 40; p < 43; ++p) {  // read-only memory: writable registrations fail
      fake.readonly_pages.insert(addr(p));
    }
    std::vector<std::uint64_t> invalidated_at(kPages, 0);
    std::vector<Registration> held;
    for (int step = 0; step < 20000; ++step) {
      ++fake.clock;
      const auto op = rng() % 10;
      if (op < 5) {
        const std::size_t first = rng() % kPages;
        const std::size_t offset = rng() % kPage;
        const std::size_t max_len = (kPages - first) * kPage - offset;
        const std::size_t len = 1 + rng() % std::min<std::size_t>(max_len, 6 * kPage);
        const int access = rng() % 2 == 0 ? 0 : kWrite;
        const bool poisoned = rng() % 8 == 0;
        if (poisoned) {
          fake.poisoned_pages.insert(addr(first));
        }
        bool touches_readonly = false;
        for (std::size_t p = first; p <= first + (offset + len - 1) / kPage; ++p) {
          touches_readonly |= fake.readonly_pages.count(addr(p)) != 0;
        }
        Registration r;
        const int err = cache->try_acquire(page(first, offset), len, access, r);
        fake.poisoned_pages.clear();
        if (err != 0) {
          ASSERT_EQ(err, EFAULT) << cache->last_error();
          ASSERT_TRUE(poisoned || (access != 0 && touches_readonly)) << cache->last_error();
          continue;
        }
        const std::uintptr_t lo = addr(first) + offset;
        ASSERT_LE(r.base(), lo);
        ASSERT_GE(r.base() + r.length(), lo + len);
        ASSERT_EQ(fake.live.count(r.lkey()), 1u);
        const FakeRegion& region = fake.live[r.lkey()];
        ASSERT_EQ(region.start, r.base());
        ASSERT_EQ(region.end, r.base() + r.length());
        ASSERT_EQ(region.access & access, access) << "registration lacks the requested rights";
        for (std::uintptr_t p = lo & ~(kPage - 1); p < lo + len; p += kPage) {
          ASSERT_GT(region.created, invalidated_at[(p - kBase) / kPage])
              << "stale registration handed out at step " << step;
        }
        held.push_back(std::move(r));
      } else if (op < 8) {
        if (!held.empty()) {
          const std::size_t i = rng() % held.size();
          held[i].reset();
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
          const auto s = cache->stats();
          ASSERT_LE(s.entries - s.in_use_entries, kMaxEntries);
          if (s.entries > kMaxEntries || s.bytes > kMaxBytes) {
            // Over a bound only when nothing unused is left to evict.
            ASSERT_EQ(s.entries, s.in_use_entries) << "step " << step;
          }
        }
      } else {
        const std::size_t first = rng() % kPages;
        const std::size_t n = 1 + rng() % 4;
        for (std::size_t p = first; p < std::min(kPages, first + n); ++p) {
          invalidated_at[p] = fake.clock;
        }
        cache->invalidate(page(first), n * kPage);
        if (rng() % 3 == 0) {
          cache->flush_invalidations();
        }
      }
      const auto s = cache->stats();
      ASSERT_EQ(s.entries, fake.live.size());
      ASSERT_EQ(s.bytes, fake.live_bytes());
    }
    const auto s = cache->stats();
    EXPECT_GT(s.hits, 1000u);
    EXPECT_GT(s.invalidations, 100u);
    EXPECT_GT(s.evictions, 20u);
    if (merge) {
      EXPECT_GT(s.merges, 10u);
      EXPECT_GT(s.merge_fallbacks, 10u);
    }
    held.clear();
    cache.reset();
    EXPECT_TRUE(fake.live.empty());
  }
}

}  // namespace
}  // namespace rdmx::test
