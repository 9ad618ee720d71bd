// Turns a hang into a failure: if the guarded scope has not ended after `limit`, prints what was
// blocked and ends the process with exit code 3 (ctest reports the case as failed, with the
// message). Used around calls that block for ever when a lifecycle rule is broken, e.g.
// ibv_destroy_srq/cq waiting for an event that was never acknowledged.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace rdmx::test {

class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::string what);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();  // disarms

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string what_;
  std::thread thread_;
};

}  // namespace rdmx::test
