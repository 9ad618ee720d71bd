// A microsecond clock for the hot path's timers (UD acks and retransmissions, wire-up, the RC
// watchdog) that does not make a system call per read.
//
// Why: where the kernel does not trust the TSC (every emulated guest we run on: "TSCs
// unsynchronized", clocksource hpet), clock_gettime(CLOCK_MONOTONIC) is a real system call plus
// an emulated HPET read, ~1 us each. A progress loop that read it on every call spent two
// thirds of its time there (perf, UD ping-pong in the Soft-RoCE guest). UCX and eRPC read the
// TSC instead; we cannot trust its rate or its synchronisation across CPUs here, so we use it
// only to decide whether the last CLOCK_MONOTONIC reading is still fresh: at most kFreshCycles
// old. A TSC that went backwards (another CPU) or jumped reads as stale, so the worst a bad
// TSC can do is cost a system call. Readings are therefore late by at most kFreshCycles
// (26-131 us at 1-5 GHz), below the timers' granularity (ack delay 200 us, RTO 2 ms) and
// long enough that a UD progress loop, which looks at its timers on every call, asks the
// kernel only every ~50 us.
#pragma once

#include <cstdint>
#include <ctime>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace rdmx::transport {

class CachedClock {
 public:
  static constexpr std::uint64_t kFreshCycles = 131'072;

  std::uint64_t now_us() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    const std::uint64_t tsc = __rdtsc();
    if (tsc - tsc_at_read_ < kFreshCycles) {
      return us_at_read_;
    }
    tsc_at_read_ = tsc;
#endif
    us_at_read_ = read_monotonic_us();
    return us_at_read_;
  }

  static std::uint64_t read_monotonic_us() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
  }

 private:
  // Starts stale: the first read always asks the kernel.
  std::uint64_t tsc_at_read_ = ~std::uint64_t{0} - kFreshCycles;
  std::uint64_t us_at_read_ = 0;
};

}  // namespace rdmx::transport
