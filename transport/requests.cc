// The request-level API: completion callbacks (the worker's completion list), waiting for a
// request (with the idle policy of idle_backoff.h), and rdmx_worker_poll / rdmx_worker_idle.
#include "transport/worker.h"

namespace rdmx::transport {

Worker::Completions Worker::take_completions() {
  Completions c;
  c.head = done_head_;
  if (shared_done_.load(std::memory_order_relaxed) != nullptr) [[unlikely]] {
    // Sends and receives completed under the shared side, newest first: reversed, after the
    // others (MPI orders matching, not completion callbacks).
    Request* pushed = shared_done_.exchange(nullptr, std::memory_order_acquire);
    Request* oldest = nullptr;
    while (pushed != nullptr) {
      Request* next = pushed->next;
      pushed->next = oldest;
      oldest = pushed;
      pushed = next;
    }
    (done_tail_ != nullptr ? done_tail_->next : c.head) = oldest;
  }
  done_head_ = done_tail_ = nullptr;
  if (!failed_uids_.empty()) [[unlikely]] {
    c.failed_uids.swap(failed_uids_);
    if (!closing_) {
      c.failure_cb = peer_failure_cb_;
      c.failure_arg = peer_failure_arg_;
    }
  }
  return c;
}

int Worker::run_completions(Completions c) {
  // Only what was on the list: callbacks that post and complete at once wait for the next call,
  // so a callback loop cannot starve the CQs. In MULTI mode this runs with no lock held.
  if (!c.failed_uids.empty()) [[unlikely]] {
    notify_peer_failures(c);  // before the requests it failed: the host hears first
  }
  Request* r = c.head;
  int n = 0;
  while (r != nullptr) {
    Request* next = r->next;
    // Copied before the request is marked done: from then on another thread (MULTI) may reuse
    // it, so the callback gets the request only as its identity.
    const rdmx_callback_t cb = r->callback;
    void* const user_data = r->user_data;
    const rdmx_status_t status = r->status;
    move_to(r, ReqState::kDone);
    if (cb != nullptr) {
      cb(to_public(r), &status, user_data);  // may reuse r
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

void Worker::idle(int events, std::uint64_t yield_after_us, std::uint64_t nap_after_us) noexcept {
  // MULTI: each thread its own count and clock (clock_ is the lock holder's), and the yield or
  // nap with no lock held.
  thread_local IdleBackoff t_backoff{IdleBackoff::kNever, IdleBackoff::kNever};
  thread_local CachedClock t_clock;
  IdleBackoff& backoff = multi_ ? t_backoff : idle_;
  CachedClock& clock = multi_ ? t_clock : clock_;
  backoff.set_policy(yield_after_us, nap_after_us, kIdleLoopGapUs);
  const IdleBackoff::Action a = backoff.turn(events != 0, events != 0 ? 0 : clock.now_us());
  if (a == IdleBackoff::Action::kYield || a == IdleBackoff::Action::kNap) [[unlikely]] {
    (a == IdleBackoff::Action::kYield ? stat_idle_yields_ : stat_idle_naps_)
        .fetch_add(1, std::memory_order_relaxed);
    backoff.resumed(clock.now_us());
  }
}

int Worker::wait(Request* r, rdmx_status_t* status, int timeout_ms) {
  if (!multi_) [[likely]] {
    return wait_on(r, status, timeout_ms, clock_);
  }
  // MULTI: counted, so that destroy lets this thread leave before it frees the worker; with a
  // clock of its own (clock_ is the lock holder's).
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  CachedClock clock;
  const int rc = wait_on(r, status, timeout_ms, clock);
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  return rc;
}

int Worker::wait_on(Request* r, rdmx_status_t* status, int timeout_ms, CachedClock& clock) {
  // Every clock read is the cached one (clock.h): in an emulated guest a clock_gettime per wait
  // was a system call per message.
  const std::uint64_t deadline =
      timeout_ms >= 0 ? clock.now_us() + static_cast<std::uint64_t>(timeout_ms) * 1000u
                      : protocol::kNoDeadline;
  // Oversubscribed (more busy processes than CPUs), a waiter that finds nothing to do gives
  // the CPU away (idle_backoff.h); any event resets it to spinning.
  IdleBackoff backoff{kWaitYieldAfterUs, kWaitNapAfterUs};
  std::uint32_t spins = 0;
  while (state_of(r) != ReqState::kDone) {
    if (multi_ && destroying_.load(std::memory_order_acquire)) [[unlikely]] {
      return RDMX_ERR_CANCELED;  // the worker is going (its requests were failed first)
    }
    const int rc = progress_any();
    if (rc < 0) {
      return rc;
    }
    // Naps reach a millisecond: the deadline is checked before each, not 256 naps later.
    if (backoff.turn(rc != 0, rc != 0 ? 0 : clock.now_us(), deadline) ==
        IdleBackoff::Action::kDeadline) {
      return RDMX_ERR_TIMED_OUT;
    }
    if ((++spins & 255) == 0 && state_of(r) != ReqState::kDone && clock.now_us() >= deadline) {
      return RDMX_ERR_TIMED_OUT;
    }
  }
  if (status != nullptr) {
    *status = r->status;
  }
  return r->status.error;
}

}  // namespace rdmx::transport
