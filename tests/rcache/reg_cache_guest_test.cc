// The registration cache on a real device (rxe): reuse, invalidation by every way memory goes
// back to the OS, bounds checked against the kernel's own MR count, registration failures,
// and RDMA writes proving that a buffer freed and re-allocated at the same address is sent with
// its new contents.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/reg_cache.h"
#include "tests/guest/support/leak_check.h"
#include "tests/guest/support/verbs_fixture.h"
#include "tests/guest/support/verbs_helpers.h"
#include "tests/rcache/glibc_malloc.h"
#include "tests/rcache/other_arena.h"
#include "verbs/cq.h"
#include "verbs/error.h"
#include "verbs/mr.h"
#include "verbs/qp.h"

namespace rdmx::test {
namespace {

using rendezvous::RegCache;
using rendezvous::RegCacheConfig;
using rendezvous::Registration;
using rendezvous::RegistrationError;

constexpr std::size_t kMiB = std::size_t{1} << 20;
const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

// This process's MRs as the kernel sees them (restrack), independent of our bookkeeping.
std::size_t kernel_mrs() {
  std::size_t n = 0;
  for (const RdmaObject& o : rdma_resources({"mr"})) {
    if (const auto pid = o.pid(); pid && pid_belongs_to(*pid, getpid())) {
      ++n;
    }
  }
  return n;
}

void* map_anon(std::size_t len, void* at = nullptr, int extra_flags = 0) {
  void* p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// malloc(len) until it returns the address `want` (glibc usually reuses a just-unmapped range
// at once); nullptr when it never does.
void* malloc_at(std::uintptr_t want, std::size_t len) {
  std::vector<void*> others;
  void* p = nullptr;
  for (int i = 0; i < 64; ++i) {
    p = std::malloc(len);
    if (p == nullptr || reinterpret_cast<std::uintptr_t>(p) == want) {
      break;
    }
    others.push_back(p);
  }
  for (void* o : others) {
    std::free(o);
  }
  if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) != want) {
    std::free(p);
    p = nullptr;
  }
  return p;
}

class RegCacheGuest : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    make_cache(RegCacheConfig{});
  }
  void make_cache(const RegCacheConfig& c) {
    cache.reset();
    cache.emplace(*pd, c);
    ASSERT_TRUE(cache->stats().caching) << cache->caching_disabled_reason();
  }
  void release_resources() override {
    rig.reset();
    cache.reset();
    VerbsTest::release_resources();
  }

  // A loopback RC pair for RDMA writes into `dst`.
  struct Rig {
    verbs::CompletionQueue cq;
    verbs::QueuePair sender;
    verbs::QueuePair receiver;
    Buffer dst;

    Rig(const TestDevice& dev, const verbs::ProtectionDomain& pd, std::size_t dst_bytes)
        : cq(verbs::CompletionQueue::create(dev.ctx, 16)),
          sender(verbs::QueuePair::create(pd, config(&cq))),
          receiver(verbs::QueuePair::create(pd, config(&cq))),
          dst(pd, dst_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) {
      connect_rc_pair(dev, sender, receiver);
    }
    static verbs::QpConfig config(verbs::CompletionQueue* cq) {
      verbs::QpConfig c;
      c.type = IBV_QPT_RC;
      c.send_cq = cq;
      c.recv_cq = cq;
      c.caps.max_send_wr = 4;
      c.caps.max_recv_wr = 4;
      return c;
    }
    // RDMA-writes len bytes from src (lkey) to the start of dst; returns the completion status.
    ibv_wc_status write(const void* src, std::uint32_t len, std::uint32_t lkey) {
      ibv_sge sge{reinterpret_cast<std::uintptr_t>(src), len, lkey};
      ibv_send_wr wr{};
      wr.wr_id = 7;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(dst.at(0));
      wr.wr.rdma.rkey = dst.mr.rkey();
      const verbs::ChainPostResult r = sender.post_send(&wr);
      if (!r) {
        ADD_FAILURE() << "post_send: " << std::strerror(r.error);
        return IBV_WC_GENERAL_ERR;
      }
      const std::vector<ibv_wc> wcs = poll_n(cq.get(), 1);
      if (wcs.size() != 1) {
        ADD_FAILURE() << "no completion for the RDMA write";
        return IBV_WC_GENERAL_ERR;
      }
      return wcs[0].status;
    }
    bool dst_filled_with(char c, std::size_t len) {
      for (std::size_t i = 0; i < len; ++i) {
        if (dst.bytes[i] != static_cast<std::uint8_t>(c)) {
          ADD_FAILURE() << "dst[" << i << "] is '" << static_cast<char>(dst.bytes[i])
                        << "', expected '" << c << "'";
          return false;
        }
      }
      return true;
    }
  };

  // The cache's MRs as the kernel counts them: the rig's destination buffer is not one.
  std::size_t cache_mrs() const { return kernel_mrs() - (rig ? 1 : 0); }

  std::optional<RegCache> cache;
  std::optional<Rig> rig;
};

TEST_F(RegCacheGuest, SecondAcquireIsAHitWithTheSameKeys) {
  std::vector<char> buf(256 * 1024);
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  {
    Registration r = cache->acquire(buf.data(), buf.size());
    lkey = r.lkey();
    rkey = r.rkey();
  }
  Registration again = cache->acquire(buf.data() + 100, 1000);
  EXPECT_EQ(again.lkey(), lkey);
  EXPECT_EQ(again.rkey(), rkey);
  const auto s = cache->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.registrations, 1u);
  EXPECT_EQ(cache_mrs(), 1u);
}

TEST_F(RegCacheGuest, LargeBlockFreedAndMallocedAgainAtTheSameAddressIsRegisteredAfresh) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);  // mmap'ed, and no dynamic threshold
  constexpr std::size_t kLen = 4 * kMiB;
  void* p = std::malloc(kLen);
  ASSERT_NE(p, nullptr);
  { Registration r = cache->acquire(p, kLen); }
  EXPECT_EQ(cache_mrs(), 1u);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::free(p);
  void* q = malloc_at(a, kLen);
  ASSERT_NE(q, nullptr) << "malloc never returned the freed address again";
  Registration r = cache->acquire(q, kLen);
  const auto s = cache->stats();
  EXPECT_GE(s.invalidations, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.registrations, 2u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(cache_mrs(), 1u);  // the stale one was deregistered
  r.reset();
  std::free(q);
}

TEST_F(RegCacheGuest, HeapTrimmingInvalidates) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 64 * kMiB), 1);  // from the brk heap
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
  constexpr std::size_t kLen = 8 * kMiB;
  std::uintptr_t end = 0;
  {
    OtherArena helper;  // before the block, so that its own bookkeeping sits below it
    auto* p = static_cast<char*>(std::malloc(kLen));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0, kLen);
    auto reg = [&] { Registration r = cache->acquire(p + kLen - kMiB, kMiB); };
    helper.run(reg);
    end = reinterpret_cast<std::uintptr_t>(p) + kLen;
    std::free(p);
  }
  ASSERT_LT(reinterpret_cast<std::uintptr_t>(sbrk(0)), end) << "glibc did not trim the heap";
  EXPECT_EQ(cache->flush_invalidations(), 1u);
  EXPECT_EQ(cache->stats().entries, 0u);
  EXPECT_EQ(cache_mrs(), 0u);
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
}

TEST_F(RegCacheGuest, MunmapThenMmapOfTheSameRangeIsRegisteredAfresh) {
  void* p = map_anon(kMiB);
  ASSERT_NE(p, nullptr);
  { Registration r = cache->acquire(p, kMiB); }
  ASSERT_EQ(munmap(p, kMiB), 0);
  ASSERT_EQ(map_anon(kMiB, p, MAP_FIXED_NOREPLACE), p);
  { Registration r = cache->acquire(p, kMiB); }
  // And a MAP_FIXED over the live mapping (no munmap at all) as well.
  ASSERT_EQ(map_anon(kMiB, p, MAP_FIXED), p);
  { Registration r = cache->acquire(p, kMiB); }
  const auto s = cache->stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.invalidations, 2u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(cache_mrs(), 1u);
  munmap(p, kMiB);
  cache->flush_invalidations();
  EXPECT_EQ(cache_mrs(), 0u);
}

TEST_F(RegCacheGuest, EntryUnmappedWhileInUseIsDeregisteredAtItsLastRelease) {
  void* p = map_anon(kMiB);
  ASSERT_NE(p, nullptr);
  Registration r = cache->acquire(p, kMiB);
  ASSERT_EQ(munmap(p, kMiB), 0);
  EXPECT_EQ(cache->flush_invalidations(), 1u);
  EXPECT_EQ(cache->stats().entries, 1u);  // still in use
  EXPECT_EQ(cache_mrs(), 1u);
  r.reset();
  EXPECT_EQ(cache->stats().entries, 0u);
  EXPECT_EQ(cache_mrs(), 0u);
}

TEST_F(RegCacheGuest, LruBoundByCountMatchesTheKernelsMrCount) {
  RegCacheConfig c;
  c.max_entries = 3;
  make_cache(c);
  std::vector<char> buf(16 * kPage);
  char* base = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(buf.data()) + kPage - 1) &
                                       ~(kPage - 1));
  for (int i = 0; i < 6; ++i) {  // six separate pages (gaps between them: no merging)
    Registration r = cache->acquire(base + 2 * i * kPage, kPage);
  }
  const auto s = cache->stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(cache_mrs(), 3u);
  { Registration r = cache->acquire(base + 10 * kPage, kPage); }  // recent: hit
  { Registration r = cache->acquire(base, kPage); }               // evicted: miss
  EXPECT_EQ(cache->stats().hits, 1u);
  EXPECT_EQ(cache->stats().misses, 7u);
}

TEST_F(RegCacheGuest, LruBoundByBytesMatchesTheKernelsMrCount) {
  RegCacheConfig c;
  c.max_bytes = 2 * kMiB;
  make_cache(c);
  void* p = map_anon(8 * kMiB);
  ASSERT_NE(p, nullptr);
  auto* base = static_cast<char*>(p);
  for (int i = 0; i < 4; ++i) {  // 1 MiB each, with 1 MiB gaps
    Registration r = cache->acquire(base + 2 * i * kMiB, kMiB);
  }
  const auto s = cache->stats();
  EXPECT_LE(s.bytes, 2 * kMiB);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(cache_mrs(), 2u);
  munmap(p, 8 * kMiB);
}

TEST_F(RegCacheGuest, EntriesInUseSurviveEvictionPressureAndStillWork) {
  RegCacheConfig c;
  c.max_entries = 2;
  make_cache(c);
  rig.emplace(*dev, *pd, 4096);
  void* p = map_anon(64 * kPage);
  ASSERT_NE(p, nullptr);
  auto* base = static_cast<char*>(p);
  std::memset(base, 'K', kPage);
  Registration kept = cache->acquire(base, kPage);
  for (int i = 1; i < 20; ++i) {
    Registration r = cache->acquire(base + 2 * i * kPage, kPage);
  }
  EXPECT_GE(cache->stats().evictions, 18u);
  EXPECT_EQ(cache->stats().entries, 2u);
  EXPECT_EQ(cache_mrs(), 2u);
  // The pinned entry is still registered and usable.
  EXPECT_EQ(rig->write(base, 1024, kept.lkey()), IBV_WC_SUCCESS);
  EXPECT_TRUE(rig->dst_filled_with('K', 1024));
  Registration hit = cache->acquire(base, kPage);
  EXPECT_EQ(hit.lkey(), kept.lkey());
  kept.reset();
  hit.reset();
  munmap(p, 64 * kPage);
}

TEST_F(RegCacheGuest, RegistrationFailuresAreClearErrors) {
  // Unmapped memory.
  void* p = map_anon(kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(munmap(p, kMiB), 0);
  cache->flush_invalidations();
  Registration r;
  const int err = cache->try_acquire(p, kMiB, r);
  EXPECT_NE(err, 0);
  EXPECT_FALSE(r);
  EXPECT_NE(cache->last_error().find("cannot register 1048576 bytes"), std::string::npos)
      << cache->last_error();
  EXPECT_NE(cache->last_error().find("ibv_reg_mr"), std::string::npos) << cache->last_error();
  // A huge range starting in valid memory.
  std::vector<char> small(4096);
  try {
    (void)cache->acquire(small.data(), std::size_t{1} << 46);
    ADD_FAILURE() << "registering 64 TiB succeeded";
  } catch (const RegistrationError& e) {
    EXPECT_NE(e.errnum(), 0);
    EXPECT_NE(std::string(e.what()).find("ibv_reg_mr"), std::string::npos) << e.what();
  }
  const auto s = cache->stats();
  EXPECT_EQ(s.failures, 2u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(cache_mrs(), 0u);
}

TEST_F(RegCacheGuest, FailedMergedRegistrationFallsBackToTheRequestedRange) {
  void* p = map_anon(3 * kPage);
  ASSERT_NE(p, nullptr);
  auto* base = static_cast<char*>(p);
  { Registration r = cache->acquire(base, 2 * kPage); }  // pages 0-1 cached
  // Page 0 becomes read-only: a writable registration including it is refused by the kernel
  // (mprotect is not a release, so the cached entry stays).
  ASSERT_EQ(mprotect(base, kPage, PROT_READ), 0);
  EXPECT_THROW((void)verbs::MemoryRegion::create(*pd, base, 3 * kPage, cache->config().access),
               verbs::Error)
      << "the kernel accepted a writable registration of a read-only page: this test proves "
         "nothing";
  Registration r;
  ASSERT_EQ(cache->try_acquire(base + kPage, 2 * kPage, r), 0) << cache->last_error();
  EXPECT_EQ(r.base(), reinterpret_cast<std::uintptr_t>(base + kPage));
  EXPECT_EQ(r.length(), 2 * kPage);
  const auto s = cache->stats();
  EXPECT_EQ(s.merge_fallbacks, 1u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(cache_mrs(), 1u);
  r.reset();
  munmap(p, 3 * kPage);
}

// A const send buffer is legal MPI: the source of an RDMA write needs no rights, and the
// kernel refuses write rights on read-only pages.
TEST_F(RegCacheGuest, ReadOnlyBufferIsRegisteredForReadingAndSent) {
  rig.emplace(*dev, *pd, 4096);
  void* p = map_anon(kPage);
  ASSERT_NE(p, nullptr);
  std::memset(p, 'R', kPage);
  ASSERT_EQ(mprotect(p, kPage, PROT_READ), 0);
  Registration r;
  EXPECT_NE(cache->try_acquire(p, kPage, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, r), 0);
  EXPECT_NE(cache->last_error().find("ibv_reg_mr"), std::string::npos) << cache->last_error();
  ASSERT_EQ(cache->try_acquire(p, kPage, 0, r), 0) << cache->last_error();
  EXPECT_EQ(rig->write(p, 1024, r.lkey()), IBV_WC_SUCCESS);
  EXPECT_TRUE(rig->dst_filled_with('R', 1024));
  r.reset();
  munmap(p, kPage);
}

TEST_F(RegCacheGuest, OverlappingRequestsMergeIntoOneRegistration) {
  void* p = map_anon(4 * kPage);
  ASSERT_NE(p, nullptr);
  auto* base = static_cast<char*>(p);
  { Registration r = cache->acquire(base, 2 * kPage); }
  { Registration r = cache->acquire(base + kPage, 2 * kPage); }
  { Registration r = cache->acquire(base, 3 * kPage); }
  const auto s = cache->stats();
  EXPECT_EQ(s.merges, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(cache_mrs(), 1u);
  munmap(p, 4 * kPage);
}

// The point of invalidation: a stale registration pins the OLD pages, so the HCA would send
// what the buffer held before it was freed.
TEST_F(RegCacheGuest, RdmaWriteAfterReallocationAtTheSameAddressCarriesTheNewContents) {
  constexpr std::size_t kLen = 64 * 1024;
  rig.emplace(*dev, *pd, kLen);
  void* p = map_anon(kLen);
  ASSERT_NE(p, nullptr);
  std::memset(p, 'A', kLen);
  // Control: a plain MR kept across the reallocation.
  std::optional<verbs::MemoryRegion> stale =
      verbs::MemoryRegion::create(*pd, p, kLen, IBV_ACCESS_LOCAL_WRITE);
  {
    Registration r = cache->acquire(p, kLen);
    ASSERT_EQ(rig->write(p, kLen, r.lkey()), IBV_WC_SUCCESS);
    EXPECT_TRUE(rig->dst_filled_with('A', kLen));
  }
  ASSERT_EQ(munmap(p, kLen), 0);
  ASSERT_EQ(map_anon(kLen, p, MAP_FIXED_NOREPLACE), p);
  std::memset(p, 'B', kLen);

  ASSERT_EQ(rig->write(p, kLen, stale->lkey()), IBV_WC_SUCCESS);
  EXPECT_TRUE(rig->dst_filled_with('A', kLen)) << "the control did not see stale data: the "
                                                  "device does not pin pages as assumed";
  stale.reset();

  Registration r = cache->acquire(p, kLen);
  ASSERT_EQ(rig->write(p, kLen, r.lkey()), IBV_WC_SUCCESS);
  EXPECT_TRUE(rig->dst_filled_with('B', kLen));
  EXPECT_EQ(cache->stats().invalidations, 1u);
  r.reset();
  munmap(p, kLen);
}

TEST_F(RegCacheGuest, RdmaWriteAfterFreeAndMallocAtTheSameAddressCarriesTheNewContents) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  constexpr std::size_t kLen = 1 * kMiB;
  constexpr std::uint32_t kWrite = 64 * 1024;
  rig.emplace(*dev, *pd, kWrite);
  auto* p = static_cast<char*>(std::malloc(kLen));
  ASSERT_NE(p, nullptr);
  std::memset(p, 'x', kLen);
  {
    Registration r = cache->acquire(p, kLen);
    ASSERT_EQ(rig->write(p, kWrite, r.lkey()), IBV_WC_SUCCESS);
    EXPECT_TRUE(rig->dst_filled_with('x', kWrite));
  }
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::free(p);
  auto* q = static_cast<char*>(malloc_at(a, kLen));
  ASSERT_NE(q, nullptr) << "malloc never returned the freed address again";
  std::memset(q, 'y', kLen);
  Registration r = cache->acquire(q, kLen);
  ASSERT_EQ(rig->write(q, kWrite, r.lkey()), IBV_WC_SUCCESS);
  EXPECT_TRUE(rig->dst_filled_with('y', kWrite));
  r.reset();
  std::free(q);
}

// Another thread allocates and frees large blocks (munmap events from a foreign thread) while
// the owner registers, releases and reallocates its own: the owner never gets a stale
// registration and the cache's count matches the kernel's at the end.
TEST_F(RegCacheGuest, ForeignThreadReleasesDuringOwnerActivity) {
  RDMX_REQUIRE_GLIBC_MALLOC();
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  rig.emplace(*dev, *pd, 4096);
  struct Churn {  // stopped and joined however the test body ends
    std::atomic<bool> stop{false};
    std::thread thread{[this] {
      while (!stop.load()) {
        void* x = std::malloc(512 * 1024);
        static_cast<char*>(x)[0] = 1;
        std::free(x);
      }
    }};
    ~Churn() {
      stop.store(true);
      thread.join();
    }
  };
  std::optional<Churn> churn(std::in_place);
  for (int i = 0; i < 40; ++i) {
    auto* b = static_cast<char*>(std::malloc(256 * 1024));
    ASSERT_NE(b, nullptr);
    std::memset(b, 'a' + (i % 26), 4096);
    {
      Registration r = cache->acquire(b, 256 * 1024);
      ASSERT_EQ(rig->write(b, 4096, r.lkey()), IBV_WC_SUCCESS);
      ASSERT_TRUE(rig->dst_filled_with(static_cast<char>('a' + (i % 26)), 4096)) << "round " << i;
    }
    std::free(b);
  }
  churn.reset();
  cache->flush_invalidations();
  EXPECT_EQ(cache_mrs(), cache->stats().entries);
  EXPECT_GE(cache->stats().invalidations, 30u);
}

// ---- the locked-memory limit ---------------------------------------------------------------

// Drops CAP_IPC_LOCK from the effective set, so that RLIMIT_MEMLOCK applies even to root.
bool drop_ipc_lock() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) {
    return false;
  }
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  return syscall(SYS_capset, &hdr, data) == 0;
}

// Child process: its own device and cache under a 256 KiB locked-memory limit. Exit codes:
// 0 all checks passed, 10+ the failed check; the message goes to stderr.
int memlock_child(const std::string& device) {
  const rlimit lim{256 * 1024, 256 * 1024};
  if (!drop_ipc_lock() || setrlimit(RLIMIT_MEMLOCK, &lim) != 0) {
    std::fprintf(stderr, "cannot drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK: %s\n",
                 std::strerror(errno));
    return 10;
  }
  auto ctx = verbs::Context::open(device);
  auto pd = verbs::ProtectionDomain::create(ctx);
  void* p = mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* base = static_cast<char*>(p);
  int rc = 0;
  {
    RegCache cache(pd, RegCacheConfig{});
    Registration r;
    // 1 MiB is over the limit: a clear ENOMEM-style error naming ulimit -l, not a crash.
    const int err = cache.try_acquire(base, kMiB, r);
    if (err == 0 || cache.last_error().find("ulimit -l") == std::string::npos) {
      std::fprintf(stderr, "1 MiB under a 256 KiB limit: err %d, error '%s'\n", err,
                   cache.last_error().c_str());
      rc = 11;
    }
    // 160 KiB fits; a second 160 KiB only fits once the idle first one is evicted.
    if (rc == 0 && cache.try_acquire(base + 2 * kMiB, 160 * 1024, r) != 0) {
      std::fprintf(stderr, "160 KiB: %s\n", cache.last_error().c_str());
      rc = 12;
    }
    r.reset();
    if (rc == 0 && cache.try_acquire(base + 3 * kMiB, 160 * 1024, r) != 0) {
      std::fprintf(stderr, "second 160 KiB: %s\n", cache.last_error().c_str());
      rc = 13;
    }
    if (rc == 0 && cache.stats().evictions != 1) {
      std::fprintf(stderr, "expected 1 eviction, got %llu\n",
                   static_cast<unsigned long long>(cache.stats().evictions));
      rc = 14;
    }
    // With that one in use, another is refused cleanly.
    Registration r2;
    if (rc == 0 && cache.try_acquire(base + 2 * kMiB, 160 * 1024, r2) == 0) {
      std::fprintf(stderr, "a third 160 KiB registration succeeded under the limit\n");
      rc = 15;
    }
  }
  munmap(p, 4 * kMiB);
  return rc;
}

TEST_F(RegCacheGuest, LockedMemoryLimitGivesAClearErrorAndEvictsIdleEntries) {
  const std::string device = dev->ctx.name();
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 20;
    try {
      rc = memlock_child(device);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child crashed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
  EXPECT_TRUE(no_rdma_objects_of(child));
}

}  // namespace
}  // namespace rdmx::test
