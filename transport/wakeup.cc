// Sleeping until a completion arrives (rdmx_worker_event_fd, rdmx_worker_arm; UCX's
// uct_iface_event_arm): both CQs report to one completion channel, armed on request. The rule
// is UCT's: arming refuses (RDMX_ERR_BUSY) while anything is left for progress, so that a caller
// who sleeps after RDMX_OK can only miss nothing.
#include <chrono>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

// Everything progress() does that no completion announces: what it hands over, its timers, the
// channels it polls in memory (shared memory, eager rings), a UD QP in error (the watchdog
// recovers it: until then it receives nothing) and signalled sends in flight (the watchdog kicks
// one that rxe stalled after RNR NAKs; they complete soon otherwise). Keep in step with
// progress().
bool Worker::needs_progress() const noexcept {
  return done_head_ != nullptr || shared_done_.load(std::memory_order_relaxed) != nullptr ||
         ud_qps_in_error_ != 0 || send_completions_expected() || !failed_uids_.empty() ||
         !flush_list_.empty() || pools_moved_ || next_ud_timer_us_ != protocol::kNoDeadline ||
         next_connect_timer_us_ != protocol::kNoDeadline || rndv_->has_pending() ||
         !wqp_retired_.empty() || !wqp_connect_list_.empty() || !ring_peers_.empty() ||
         shm_ != nullptr;
}

int Worker::arm() {
  const Locked held(*this);
  try {
    // An event read here means a completion since the last arming: progress has work.
    bool evented = false;
    while (cq_channel_->wait_event(std::chrono::milliseconds(0)) != nullptr) {
      evented = true;
    }
    (void)send_cq_->ack_events();
    (void)recv_cq_->ack_events();
    if (evented || needs_progress()) {
      return RDMX_ERR_BUSY;
    }
    send_cq_->request_notify();
    recv_cq_->request_notify();
  } catch (const verbs::Error& e) {
    verbs::log_verb_failure(e.verb(), e.errnum(), "arming the completion queues");
    return RDMX_ERR_IO;
  }
  // A completion that came after the caller's last progress and before the arming made no
  // event: look once. What this finds, the next progress call hands over.
  return poll_cqs() == 0 ? RDMX_OK : RDMX_ERR_BUSY;
}

}  // namespace rdmx::transport
