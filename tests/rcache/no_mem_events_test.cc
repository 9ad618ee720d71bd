// Without memory events (UCX_MEM_EVENTS=no) nothing would tell the cache that memory went
// away, so it must not keep registrations: every acquire registers and the last release
// deregisters. UCX reads the variable when its libraries load, so the test re-runs itself with
// it set.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "rendezvous/reg_cache.h"
#include "tests/rcache/fake_registrar.h"

namespace rdmx::test {
namespace {

constexpr char kChildFlag[] = "RDMX_RCACHE_NO_EVENTS_CHILD";

void check_in_child() {
  FakeState fake;
  rendezvous::RegCache cache(std::make_unique<FakeRegistrar>(fake), rendezvous::RegCacheConfig{});
  const auto before = cache.stats();
  EXPECT_FALSE(before.caching);
  EXPECT_NE(cache.caching_disabled_reason().find("ucm_set_event_handler"), std::string::npos)
      << cache.caching_disabled_reason();
  std::vector<char> buf(64 * 1024);
  for (int i = 0; i < 2; ++i) {
    rendezvous::Registration r = cache.acquire(buf.data(), buf.size());
    EXPECT_TRUE(r);
    EXPECT_EQ(fake.live.size(), 1u);
  }
  const auto s = cache.stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_TRUE(fake.live.empty());
}

TEST(NoMemoryEvents, CachingIsSwitchedOff) {
  if (std::getenv(kChildFlag) != nullptr) {
    check_in_child();
    return;
  }
  const std::string filter =
      std::string("--gtest_filter=") +
      ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "." +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    setenv("UCX_MEM_EVENTS", "no", 1);
    setenv(kChildFlag, "1", 1);
    execl("/proc/self/exe", "no_mem_events_test", filter.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's failures are printed above";
}

}  // namespace
}  // namespace rdmx::test
