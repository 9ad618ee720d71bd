// Sleeping until a completion arrives or a deadline passes (rdmx_worker_event_fd,
// rdmx_worker_arm; UCX's uct_iface_event_arm). Both CQs report to one completion channel, armed
// on request; the fd a sleeper polls is an epoll set of that channel, a timer and the device's
// async event fd (wake_set.h).
// The rule is UCT's: arming refuses (RDMX_ERR_BUSY) while anything is left for progress, so that
// a caller who sleeps after RDMX_OK can only miss nothing. Arming first does the progress work
// that is due (housekeeping: queued sends, due timers and watchdogs, refills) and sends every
// owed UD ack, so that only what truly waits makes it busy; work that waits for a time sets the
// timer instead.
#include <algorithm>
#include <chrono>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

// What housekeeping left that no completion or deadline would announce: what progress hands
// over, sends waiting in the flush list, pools to refill, rendezvous steps, write-QP work, and
// the channels progress polls in memory (shared memory, eager rings not being taken back: with
// no segment, arming has taken them back before it asks, so this holds only beside shm_).
bool Worker::needs_progress() const noexcept {
  return done_head_ != nullptr || shared_done_.load(std::memory_order_relaxed) != nullptr ||
         !failed_uids_.empty() || housekeeping_queued() ||
         (open_rings_ != 0 && !rings_withdrawn_) || shm_ != nullptr;
}

bool Worker::rings_written() const noexcept {
  return std::any_of(ring_peers_.begin(), ring_peers_.end(),
                     [](const Peer* p) { return p->rc.rx_ring_open && p->rc.rx_ring->written(); });
}

// UD's resends and acks and the connection timers; the watchdogs while signalled sends are out
// (they complete, with an event, unless rxe stalled one after RNR NAKs: the RC watchdog kicks
// it), a UD QP is in error (the watchdog recovers it; until then it receives nothing) or the
// port is down (the watchdog fails the worker if it stays down for peer_timeout_ms). And while
// requests wait (or a probe found nothing), the liveness probes of quiet peers (liveness.cc): a
// peer silent for T / kLiveProbeDiv is probed, so a sleeper wakes that long after arming and
// the watchdog looks. Without it, a sleeper whose receive or flush waits on a peer that died
// slept for ever: nothing of a dead peer makes a completion. An RC probe is a signalled write,
// which the watchdog then follows; UD pings one per T / kLiveProbeDiv, as this deadline wakes
// it. Rings being taken back (a writer has not answered yet) are looked at every
// kRingWithdrawPollUs. While nothing waits, a sleeper wakes for nothing but completions and async
// events.
std::uint64_t Worker::next_deadline_us(std::uint64_t now) const noexcept {
  std::uint64_t next = std::min(next_ud_timer_us_, next_connect_timer_us_);
  if (open_rings_ != 0) {
    next = std::min(next, now + kRingWithdrawPollUs);
  }
  if (ud_qps_in_error_ != 0 || port_down_us_ != 0 || send_completions_expected()) {
    next = std::min(next, next_watchdog_us_);
  } else if (active_head_ != nullptr || probe_waiting_.load(std::memory_order_relaxed)) {
    const std::uint64_t quiet_us = std::uint64_t{config_.peer_timeout_ms} * 1000 / kLiveProbeDiv;
    next = std::min(next, std::max(next_watchdog_us_, now + quiet_us));
  }
  return next;
}

int Worker::arm() {
  const Locked held(*this);
  if (shared_taken_.load(std::memory_order_relaxed) != nullptr) [[unlikely]] {
    release_shared_taken();  // MULTI: their buffers and copies are not held through a sleep
  }
  try {
    // Events of the last arming are read and acknowledged, which makes the fd quiet again. They
    // do not make the worker busy: the caller has progressed since it woke, and a completion it
    // did not take is found by the poll at the end. (Answering busy on them made every wake
    // cost a second turn. A timer expiry needs no reading: setting the timer clears it.)
    while (cq_channel_->wait_event(std::chrono::milliseconds(0)) != nullptr) {
    }
    (void)send_cq_->ack_events();
    (void)recv_cq_->ack_events();
    // The timer is the kernel's: from here on this worker's clock starts from the kernel's, so
    // that what housekeeping finds not yet due is not passed for the kernel.
    (void)clock_.refresh_us();
    // A worker failing from here on (a fatal async event, a port down for too long) ends its
    // requests at once, and a request without a callback shows that only to the caller's test:
    // the caller looks before it sleeps.
    const int failed_before = failed_code_;
    // Every async event is read now (housekeeping's read made due), not when progress next
    // looks (every kAsyncEventPeriodUs): the async fd is in the set, and one left unread would
    // wake the sleeper at once. What one starts (a failed peer, the port's timer) is seen below.
    next_async_us_ = 0;
    // Queued sends that the flush posts may complete requests without a callback, which only
    // the caller's next test sees: after a flush, the caller looks before it sleeps.
    const bool flushed = !flush_list_.empty();
    const int events = housekeeping(/*look_at_clock=*/true);
    // A sleeper has nothing to carry its owed UD acks: they go now rather than wake it when
    // their delay runs out. (This may also find a peer dead: needs_progress sees it.)
    if (next_ud_timer_us_ != protocol::kNoDeadline) {
      run_ud_timers(now_us(), /*acks_now=*/true);
    }
    // Ring writes make no completion: the worker takes its rings back. Until every writer has
    // answered it sleeps on a short timer, and busy while a ring holds a message. Not with a
    // shared-memory segment, which never lets it sleep.
    if (open_rings_ != 0 && !rings_withdrawn_ && shm_ == nullptr) {
      withdraw_rings();
    }
    if (events > 0 || flushed || failed_code_ != failed_before || needs_progress() ||
        rings_written()) {
      return RDMX_ERR_BUSY;
    }
    const std::uint64_t now = now_us();
    const std::uint64_t deadline = next_deadline_us(now);
    if (deadline <= now) {
      return RDMX_ERR_BUSY;  // due since housekeeping looked
    }
    wake_->set_deadline(deadline);
    send_cq_->request_notify();
    recv_cq_->request_notify();
  } catch (const verbs::Error& e) {
    verbs::log_verb_failure(e.verb(), e.errnum(), "arming the worker's event fd");
    return RDMX_ERR_IO;
  }
  // A completion that came after the caller's last progress and before the arming made no
  // event: look once. What this finds, the next progress call hands over. (A ring message written
  // from here on waits for the timer.)
  return poll_cqs() == 0 ? RDMX_OK : RDMX_ERR_BUSY;
}

}  // namespace rdmx::transport
