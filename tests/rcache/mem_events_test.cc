// Host tests of the libucm hooks: every way memory goes back to the OS reaches the queue, from
// any thread, and the cache built on them never hands out a registration for memory that was
// released and mapped again at the same address. No RDMA device: registrations are faked.
#include "rendezvous/mem_events.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "rendezvous/invalidation_queue.h"
#include "rendezvous/reg_cache.h"
#include "tests/rcache/fake_registrar.h"
#include "tests/rcache/glibc_malloc.h"
#include "tests/rcache/other_arena.h"

namespace rdmx::test {
namespace {

using rendezvous::AddrRange;
using rendezvous::InvalidationQueue;
using rendezvous::MemEventSubscription;

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::vector<AddrRange> drain_all(InvalidationQueue& q) {
  std::vector<AddrRange> out;
  q.drain([] {}, [&](std::span<const AddrRange> b) { out.insert(out.end(), b.begin(), b.end()); });
  return out;
}

// True when some delivered range overlaps [p, p+len).
bool reported(const std::vector<AddrRange>& got, std::uintptr_t a, std::size_t len) {
  for (const AddrRange& r : got) {
    if (r.start < a + len && r.end > a) {
      return true;
    }
  }
  return false;
}
bool reported(const std::vector<AddrRange>& got, const void* p, std::size_t len) {
  return reported(got, reinterpret_cast<std::uintptr_t>(p), len);
}

void* map_anon(std::size_t len, void* at = nullptr, int extra_flags = 0) {
  void* p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
  return p;
}

class MemEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sub.active()) << sub.error();
    drain_all(q);  // whatever the hook installation itself did
  }
  InvalidationQueue q{4096};
  MemEventSubscription sub{q};
};

TEST_F(MemEvents, MunmapIsReportedBeforeTheMemoryGoes) {
  void* p = map_anon(kMiB);
  ASSERT_EQ(munmap(p, kMiB), 0);
  const auto got = drain_all(q);
  ASSERT_TRUE(reported(got, p, kMiB));
  // Exactly the unmapped range.
  bool exact = false;
  for (const AddrRange& r : got) {
    exact |= r.start == reinterpret_cast<std::uintptr_t>(p) &&
             r.end == reinterpret_cast<std::uintptr_t>(p) + kMiB;
  }
  EXPECT_TRUE(exact);
}

TEST_F(MemEvents, PartialMunmapIsReported) {
  auto* p = static_cast<char*>(map_anon(4 * 4096));
  ASSERT_EQ(munmap(p + 4096, 4096), 0);
  const auto got = drain_all(q);
  EXPECT_TRUE(reported(got, p + 4096, 4096));
  EXPECT_FALSE(reported(got, p, 4096));
  munmap(p, 4 * 4096);
}

TEST_F(MemEvents, FreeOfALargeMallocBlockIsReported) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  // Blocks above M_MMAP_THRESHOLD are mmap'ed; a fixed threshold stops glibc from raising it
  // after the first free (its "dynamic threshold").
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  auto* p = static_cast<char*>(std::malloc(4 * kMiB));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 4 * kMiB);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  drain_all(q);
  std::free(p);
  EXPECT_TRUE(reported(drain_all(q), a, 4 * kMiB));
}

TEST_F(MemEvents, HeapTrimmingIsReported) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  // Served from the brk heap, and given back by trimming the top when freed.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 64 * kMiB), 1);
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
  void* const top_before = sbrk(0);
  auto* p = static_cast<char*>(std::malloc(8 * kMiB));
  ASSERT_NE(p, nullptr);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  ASSERT_GT(a + 8 * kMiB, reinterpret_cast<std::uintptr_t>(top_before)) << "heap did not grow";
  std::memset(p, 1, 8 * kMiB);
  drain_all(q);
  std::free(p);
  const auto top_after = reinterpret_cast<std::uintptr_t>(sbrk(0));
  ASSERT_LT(top_after, a + 8 * kMiB) << "glibc did not trim the heap";
  EXPECT_TRUE(reported(drain_all(q), a, 8 * kMiB));
}

TEST_F(MemEvents, MallocTrimIsReported) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 64 * kMiB), 1);
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 512 * kMiB), 1);  // free() alone does not trim
  auto* p = static_cast<char*>(std::malloc(8 * kMiB));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 8 * kMiB);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::free(p);
  drain_all(q);
  malloc_trim(0);
  EXPECT_TRUE(reported(drain_all(q), a + 4 * kMiB, 4096));
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
}

TEST_F(MemEvents, MadviseDontneedIsReported) {
  // After MADV_DONTNEED the range reads as fresh zero pages: a registration pinning the old
  // pages would be stale.
  void* p = map_anon(16 * 4096);
  ASSERT_EQ(madvise(p, 16 * 4096, MADV_DONTNEED), 0);
  EXPECT_TRUE(reported(drain_all(q), p, 16 * 4096));
  munmap(p, 16 * 4096);
}

TEST_F(MemEvents, MapFixedOverAMappingIsReported) {
  void* p = map_anon(kMiB);
  drain_all(q);
  void* again = map_anon(kMiB, p, MAP_FIXED);
  ASSERT_EQ(again, p);
  EXPECT_TRUE(reported(drain_all(q), p, kMiB));
  munmap(p, kMiB);
}

TEST_F(MemEvents, MremapReportsTheOldRange) {
  void* p = map_anon(kMiB);
  drain_all(q);
  void* moved = mremap(p, kMiB, 4 * kMiB, MREMAP_MAYMOVE);
  ASSERT_NE(moved, MAP_FAILED);
  EXPECT_TRUE(reported(drain_all(q), p, kMiB));
  munmap(moved, 4 * kMiB);
}

TEST_F(MemEvents, ReleaseInAnotherThreadIsReported) {
  void* p = map_anon(kMiB);
  std::thread([p] { munmap(p, kMiB); }).join();
  EXPECT_TRUE(reported(drain_all(q), p, kMiB));
}

TEST_F(MemEvents, NothingArrivesAfterTheSubscriptionEnds) {
  InvalidationQueue other(16);
  {
    MemEventSubscription s2(other);
    ASSERT_TRUE(s2.active());
  }
  drain_all(other);
  void* p = map_anon(kMiB);
  munmap(p, kMiB);
  EXPECT_FALSE(other.pending());
  EXPECT_TRUE(reported(drain_all(q), p, kMiB));  // the fixture's subscription still gets it
}

TEST_F(MemEvents, ReportUnmappedReachesSubscribers) {
  int x = 0;
  rendezvous::report_unmapped(&x, sizeof(x));
  EXPECT_TRUE(reported(drain_all(q), &x, sizeof(x)));
}

// ---- the cache on top of the hooks (fake registrations, real memory events) -----------------

class CacheOnHooks : public ::testing::Test {
 protected:
  void SetUp() override {
    rendezvous::RegCacheConfig c;
    c.source = rendezvous::InvalidationSource::kUcm;
    cache.emplace(std::make_unique<FakeRegistrar>(fake), c);
    ASSERT_TRUE(cache->stats().caching) << cache->caching_disabled_reason();
  }
  FakeState fake;
  std::optional<rendezvous::RegCache> cache;
};

TEST_F(CacheOnHooks, LargeBlockFreedAndMallocedAgainAtTheSameAddressIsRegisteredAfresh) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  constexpr std::size_t kLen = 4 * kMiB;
  void* p = std::malloc(kLen);
  ASSERT_NE(p, nullptr);
  std::uint32_t first_key = 0;
  {
    rendezvous::Registration r = cache->acquire(p, kLen);
    first_key = r.lkey();
  }
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::free(p);
  // munmap then mmap of the same size usually lands at the same address; insist on it.
  void* q = nullptr;
  std::vector<void*> misses;
  for (int i = 0; i < 64 && reinterpret_cast<std::uintptr_t>(q) != a; ++i) {
    q = std::malloc(kLen);
    if (reinterpret_cast<std::uintptr_t>(q) != a) {
      misses.push_back(q);
    }
  }
  for (void* m : misses) {
    std::free(m);
  }
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(q), a) << "malloc never returned the old address";
  rendezvous::Registration r = cache->acquire(q, kLen);
  EXPECT_NE(r.lkey(), first_key);
  const auto s = cache->stats();
  EXPECT_GE(s.invalidations, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(fake.live.count(first_key), 0u);
  r.reset();
  std::free(q);
}

TEST_F(CacheOnHooks, TrimmedHeapMemoryIsInvalidated) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 64 * kMiB), 1);
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
  fake.attempts.reserve(16);
  constexpr std::size_t kLen = 8 * kMiB;
  std::uintptr_t end = 0;
  {
    OtherArena helper;  // see other_arena.h: keeps the cache's allocations off the heap top
    auto* p = static_cast<char*>(std::malloc(kLen));
    ASSERT_NE(p, nullptr);
    auto reg = [&] { rendezvous::Registration r = cache->acquire(p + kLen - 4096, 4096); };
    helper.run(reg);
    end = reinterpret_cast<std::uintptr_t>(p) + kLen;
    std::free(p);
  }
  ASSERT_LT(reinterpret_cast<std::uintptr_t>(sbrk(0)), end) << "glibc did not trim the heap";
  EXPECT_EQ(cache->flush_invalidations(), 1u);
  EXPECT_EQ(cache->stats().cached_entries, 0u);
}

TEST_F(CacheOnHooks, MunmapInvalidatesAndAFreshMappingIsRegisteredAgain) {
  void* p = map_anon(kMiB);
  { rendezvous::Registration r = cache->acquire(p, kMiB); }
  ASSERT_EQ(munmap(p, kMiB), 0);
  void* again = map_anon(kMiB, p, MAP_FIXED_NOREPLACE);
  ASSERT_EQ(again, p);
  { rendezvous::Registration r = cache->acquire(p, kMiB); }
  const auto s = cache->stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.invalidations, 1u);
  munmap(p, kMiB);
}

TEST_F(CacheOnHooks, UnrelatedUnmapsDoNotInvalidateOrFillTheQueue) {
  void* p = map_anon(kMiB);
  { rendezvous::Registration r = cache->acquire(p, kMiB); }
  for (int i = 0; i < 5000; ++i) {  // more than the queue holds
    void* other = map_anon(4096);
    munmap(other, 4096);
  }
  cache->flush_invalidations();
  const auto s = cache->stats();
  EXPECT_EQ(s.invalidations, 0u);
  EXPECT_EQ(s.cached_entries, 1u);
  EXPECT_GE(s.unmap_events_filtered, 5000u);
  EXPECT_EQ(s.queue_overflows, 0u);
  munmap(p, kMiB);
}

}  // namespace
}  // namespace rdmx::test
