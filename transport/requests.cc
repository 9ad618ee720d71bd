// The request-level API: completion callbacks (the worker's completion list), waiting for a
// request (with the idle policy of idle_backoff.h), and rdmx_worker_poll / rdmx_worker_idle.
#include "transport/worker.h"

namespace rdmx::transport {

int Worker::run_completions() {
  // Only what is on the list now: callbacks that post and complete at once wait for the next
  // call, so a callback loop cannot starve the CQs.
  if (!failed_uids_.empty()) [[unlikely]] {
    notify_peer_failures();  // before the requests it failed: the host hears the cause first
  }
  Request* r = done_head_;
  done_head_ = done_tail_ = nullptr;
  int n = 0;
  while (r != nullptr) {
    Request* next = r->next;
    move_to(r, ReqState::kDone);
    if (r->callback != nullptr) {
      r->callback(to_public(r), &r->status, r->user_data);  // may reuse r
    }
    r = next;
    ++n;
  }
  return n;
}

int Worker::poll(std::uint32_t max_polls, std::uint64_t spin_gap_us) {
  // The clock only around idle calls: while messages flow a call reads none (two reads were
  // ~120 instructions per call, a fifth of a shared-memory ping-pong's progress).
  const std::uint32_t budget =
      spin_.after_idle() ? spin_.budget(now_us(), max_polls, spin_gap_us) : 1;
  int events = progress();
  std::uint32_t polls = 1;
  for (; events == 0 && polls < budget; ++polls) {
    events = progress();
  }
  stat_spin_polls_ += polls - 1;
  spin_.end(events == 0, events == 0 ? now_us() : 0);
  return events;
}

void Worker::idle(int events, std::uint64_t yield_after_us) noexcept {
  idle_.set_policy(yield_after_us, IdleBackoff::kNever);
  if (idle_.turn(events != 0, events != 0 ? 0 : now_us()) == IdleBackoff::Action::kYield) {
    ++stat_idle_yields_;
  }
}

int Worker::wait(Request* r, rdmx_status_t* status, int timeout_ms) {
  // Every clock read is the cached one (clock.h): in an emulated guest a clock_gettime per wait
  // was a system call per message.
  const std::uint64_t deadline = timeout_ms >= 0
                                     ? now_us() + static_cast<std::uint64_t>(timeout_ms) * 1000u
                                     : protocol::kNoDeadline;
  // Oversubscribed (more busy processes than CPUs), a waiter that finds nothing to do gives
  // the CPU away (idle_backoff.h); any event resets it to spinning.
  IdleBackoff backoff{kWaitYieldAfterUs, kWaitNapAfterUs};
  std::uint32_t spins = 0;
  while (r->state != ReqState::kDone) {
    const int rc = progress();
    if (rc < 0) {
      return rc;
    }
    // Naps reach a millisecond: the deadline is checked before each, not 256 naps later.
    if (backoff.turn(rc != 0, rc != 0 ? 0 : now_us(), deadline) == IdleBackoff::Action::kDeadline) {
      return RDMX_ERR_TIMED_OUT;
    }
    if ((++spins & 255) == 0 && r->state != ReqState::kDone && now_us() >= deadline) {
      return RDMX_ERR_TIMED_OUT;
    }
  }
  if (status != nullptr) {
    *status = r->status;
  }
  return r->status.error;
}

}  // namespace rdmx::transport
