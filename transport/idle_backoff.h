// How a loop that polls rdmx and finds nothing gives the CPU away: rdmx_request_wait's loop
// (Worker::wait), and, through rdmx_worker_idle, wait loops outside rdmx (the MPI library's);
// and how often rdmx_worker_poll polls for such a loop (SpinPolls, at the end).
//
// Why: when busy processes outnumber CPUs (an emulated guest, an incast test) the process a
// waiter waits for needs the CPU, and on a software device (rxe, siw) so does the kernel's RDMA
// work: a large transfer over rxe is CPU-bound in the kernel (softirq, ksoftirqd). Once the
// loop has found nothing for `yield_after_us` it yields on every turn; after `nap_after_us` it
// sleeps, each nap 1/kNapIdleDiv of the time already idle, between kNapMinUs and kNapMaxUs, so
// that a long wait ends at most 1/kNapIdleDiv of its length late. With a loop gap
// (rdmx_worker_idle's), a turn that comes long after the last one ended starts the count again: the
// caller was not waiting in between. The thresholds are times, not
// turn counts, so that a round trip (microseconds on hardware, tens of microseconds in the
// guest) never meets a system call: counted in turns, 64 empty polls were 22 us in the guest, a
// yield inside nearly every round trip (8-byte RC latency 25.8 us instead of 15). Naps grow
// because every wake-up costs the CPU the kernel's work needs: a waiter napping a fixed 50 us
// cost 16 MiB rendezvous ~5 % of ib_write_bw at MTU 1024.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <ctime>

#include "protocol/reliability.h"  // kNoDeadline

namespace rdmx::transport {

class IdleBackoff {
 public:
  static constexpr std::uint64_t kNever = protocol::kNoDeadline;
  static constexpr std::uint64_t kNapIdleDiv = 32;
  static constexpr std::uint64_t kNapMinUs = 50;
  static constexpr std::uint64_t kNapMaxUs = 1000;

  enum class Action : std::uint8_t { kSpin, kYield, kNap, kDeadline };

  IdleBackoff(std::uint64_t yield_after_us, std::uint64_t nap_after_us,
              std::uint64_t loop_gap_us = kNever) noexcept
      : yield_after_us_(yield_after_us), nap_after_us_(nap_after_us), loop_gap_us_(loop_gap_us) {}

  // One turn of the loop, which found something (busy) or nothing, at `now` (microseconds).
  // Yields or naps as the idle time says; a nap never runs past `deadline`, and when a nap is
  // due after the deadline the turn returns kDeadline without one.
  Action turn(bool busy, std::uint64_t now, std::uint64_t deadline = kNever) noexcept {
    if (busy) {
      idle_since_ = 0;
      return Action::kSpin;
    }
    // A turn more than loop_gap_us after the end of the last idle turn is not the next turn of a
    // wait loop: the caller did something else between (an MPI_Test between compute steps), so
    // the count starts again, and nobody sleeps through their compute.
    if (idle_since_ == 0 || now - ended_ > loop_gap_us_) {
      idle_since_ = now;
      ended_ = now;
      return Action::kSpin;
    }
    const std::uint64_t idle = now - idle_since_;
    ended_ = now;  // a yield or nap ends later: resumed() says when
    if (idle < yield_after_us_) [[likely]] {
      return Action::kSpin;
    }
    if (idle < nap_after_us_) {
      sched_yield();
      return Action::kYield;
    }
    if (now >= deadline) {
      return Action::kDeadline;
    }
    const timespec nap{.tv_sec = 0,
                       .tv_nsec = static_cast<long>(nap_us(idle, now, deadline) * 1000)};
    nanosleep(&nap, nullptr);
    return Action::kNap;
  }

  // With a loop gap: when a turn that yielded or napped returned (the time it gave away is not
  // a gap in the caller's loop).
  void resumed(std::uint64_t now) noexcept { ended_ = now; }

  void set_policy(std::uint64_t yield_after_us, std::uint64_t nap_after_us,
                  std::uint64_t loop_gap_us) noexcept {
    yield_after_us_ = yield_after_us;
    nap_after_us_ = nap_after_us;
    loop_gap_us_ = loop_gap_us;
  }

  static constexpr std::uint64_t nap_us(std::uint64_t idle, std::uint64_t now,
                                        std::uint64_t deadline) noexcept {
    return std::min(std::clamp(idle / kNapIdleDiv, kNapMinUs, kNapMaxUs), deadline - now);
  }

 private:
  std::uint64_t yield_after_us_;
  std::uint64_t nap_after_us_;
  std::uint64_t loop_gap_us_;
  std::uint64_t idle_since_ = 0;  // 0: the last turn was busy (or none yet)
  std::uint64_t ended_ = 0;       // when the last idle turn ended (loop_gap_us)
};

// rdmx_worker_poll: how many times one call may poll while it finds nothing. A caller spinning
// in a wait loop of its own calls again within microseconds of an idle return: then each further
// poll inside the call saves a turn of that loop, which costs more than a poll (pml cm's waits
// spin on opal_progress: its other callbacks, and every 8th call a clock read, a system call
// where the clocksource is hpet). A caller that tests between compute steps comes back later and
// gets one poll, so its idle test costs what rdmx_worker_progress costs.
class SpinPolls {
 public:
  // At the start of a call at `now` (microseconds): the polls it may make, at least 1.
  std::uint32_t budget(std::uint64_t now, std::uint32_t max_polls,
                       std::uint64_t gap_us) const noexcept {
    return idle_end_ != 0 && now - idle_end_ < gap_us ? std::max(max_polls, 1u) : 1u;
  }
  // At the end of a call at `now`: whether it found nothing (`now` is read only then).
  void end(bool idle, std::uint64_t now) noexcept { idle_end_ = idle ? now : 0; }
  // The last call found nothing: budget() needs the time.
  bool after_idle() const noexcept { return idle_end_ != 0; }

 private:
  std::uint64_t idle_end_ = 0;  // when the last call returned having found nothing; 0: it found
};

}  // namespace rdmx::transport
