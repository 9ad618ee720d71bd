#include "tests/guest/support/watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace rdmx::test {

Watchdog::Watchdog(std::chrono::milliseconds limit, std::string what) : what_(std::move(what)) {
  thread_ = std::thread([this, limit] {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
      std::fprintf(stderr, "WATCHDOG: '%s' still blocked after %lld ms: failing the test\n",
                   what_.c_str(), static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::_Exit(3);  // the blocked thread cannot be unwound; gtest output so far is flushed
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace rdmx::test
