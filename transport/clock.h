// A microsecond clock for the hot path's timers (UD acks and retransmissions, wire-up, the RC
// watchdog) and for the idle thresholds of rdmx_request_wait, that makes no system call per
// read.
//
// Why: where the kernel does not trust the TSC (every emulated guest we run on: "TSCs
// unsynchronized", clocksource hpet), clock_gettime(CLOCK_MONOTONIC) is a real system call plus
// an emulated HPET read, ~1.4 us each. A progress loop that read it on every call spent two
// thirds of its time there (perf, UD ping-pong in the Soft-RoCE guest). UCX and eRPC read the
// TSC instead; we cannot trust its synchronisation across CPUs here, so the kernel's clock
// stays the reference: it is read again once the last reading is kFreshCycles old, and in
// between the TSC interpolates at the rate it showed between the last two readings.
//
// The window (2^20 cycles, 0.2-1 ms at 1-5 GHz) keeps the system calls rare: with a window of
// 2^17 cycles and no interpolation a UD ping-pong in the guest still made three clock_gettime
// per round trip (perf), and a reading could be 50 us stale, too coarse for the 100-us idle
// threshold of rdmx_request_wait. A TSC that went backwards (another CPU) or ran past the
// window reads as stale; a wrong rate (the process moved to a CPU whose TSC is offset) errs by
// less than one window and never makes time go backwards.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace rdmx::transport {

class CachedClock {
 public:
  static constexpr std::uint64_t kFreshCycles = std::uint64_t{1} << 20;
  // Plausible TSC rates, in microseconds per cycle as a 32.32 fixed-point fraction: 10 GHz to
  // 100 MHz. A measurement outside (a migration between the two readings) is not used.
  static constexpr std::uint64_t kMinUsPerCycleQ32 = (std::uint64_t{1} << 32) / 10'000;
  static constexpr std::uint64_t kMaxUsPerCycleQ32 = (std::uint64_t{1} << 32) / 100;

  // Inline in every caller (progress reads it on each call while a timer is armed): the TSC
  // read and the interpolation; the kernel's clock, once a window, out of line (on every read
  // where there is no TSC).
  std::uint64_t now_us() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    const std::uint64_t tsc = read_tsc();
    const std::uint64_t cycles = tsc - tsc_at_read_;
    if (cycles < kFreshCycles) [[likely]] {
      // < 2^20 cycles times < 2^26: no overflow.
      last_us_ = std::max(last_us_, us_at_read_ + ((cycles * us_per_cycle_q32_) >> 32));
      return last_us_;
    }
    return reread(tsc);
#else
    return reread(0);
#endif
  }

  // The kernel's clock now, and the interpolation starts again from it: for a caller that hands
  // a deadline to the kernel (rdmx_worker_arm's timer), where a reading up to a window late
  // would set a timer the kernel finds passed while this clock does not.
  std::uint64_t refresh_us() noexcept {
    return reread(read_tsc());
  }

  static std::uint64_t read_monotonic_us() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
  }

 private:
  // The time-stamp counter; 0 where there is none (reread then uses only the kernel's clock).
  static std::uint64_t read_tsc() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return 0;
#endif
  }

  // The window has passed (or the first read): the kernel's clock, and the TSC's rate measured
  // against it.
  [[gnu::noinline]] std::uint64_t reread([[maybe_unused]] std::uint64_t tsc) noexcept {
    const std::uint64_t us = read_monotonic_us();
#if defined(__x86_64__) || defined(__i386__)
    // (A gap of 2^30 us or more, ~18 minutes, would overflow the shift: keep the old rate.)
    if (read_before_ && tsc > tsc_at_read_ && us > us_at_read_ && us - us_at_read_ < (1u << 30)) {
      const std::uint64_t rate = ((us - us_at_read_) << 32) / (tsc - tsc_at_read_);
      if (rate >= kMinUsPerCycleQ32 && rate <= kMaxUsPerCycleQ32) {
        us_per_cycle_q32_ = rate;
      }
    }
    read_before_ = true;
    tsc_at_read_ = tsc;
#endif
    us_at_read_ = us;
    last_us_ = std::max(last_us_, us_at_read_);
    return last_us_;
  }

  // Starts stale: the first read always asks the kernel.
  std::uint64_t tsc_at_read_ = ~std::uint64_t{0} - kFreshCycles;
  std::uint64_t us_at_read_ = 0;
  std::uint64_t last_us_ = 0;  // never go backwards
  // 0 until two readings have measured the rate: the last reading is returned as it is.
  std::uint64_t us_per_cycle_q32_ = 0;
  bool read_before_ = false;
};

}  // namespace rdmx::transport
