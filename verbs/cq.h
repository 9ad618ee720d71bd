// Completion queues (ibv_create_cq / ibv_destroy_cq) and completion channels
// (ibv_create_comp_channel / ibv_destroy_comp_channel).
//
// Lifecycle rules enforced here (ibv_create_cq(3), ibv_get_cq_event(3)):
//   - ibv_destroy_cq fails while a QP uses the CQ: QueuePair registers itself as a user and
//     destroy() returns EBUSY without calling the verb while users remain;
//   - ibv_destroy_cq waits until every event read with ibv_get_cq_event is acknowledged: the
//     channel counts un-acked events per CQ and destroy() acks them first, so it never blocks;
//   - ibv_destroy_comp_channel fails while CQs use the channel: counted the same way.
// Unpolled completions do not prevent destruction.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "verbs/context.h"
#include "verbs/use_count.h"

namespace rdmx::verbs {

namespace detail {
struct CqState;
}

class CompletionChannel {
 public:
  // The channel fd is made non-blocking so that wait_event can time out.
  static CompletionChannel create(const Context& ctx);

  CompletionChannel(CompletionChannel&& other) noexcept;
  CompletionChannel& operator=(CompletionChannel&& other) noexcept;
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;
  ~CompletionChannel();

  ibv_comp_channel* get() const noexcept { return channel_; }
  int fd() const noexcept { return channel_->fd; }

  // Waits up to `timeout` for one completion event (poll(2), then ibv_get_cq_event). Returns the
  // CQ that got it, nullptr on timeout. The event is counted as un-acked on that CQ; it is acked
  // in batch by CompletionQueue::ack_events() or, at the latest, before ibv_destroy_cq.
  // Throws Error if reading fails.
  ibv_cq* wait_event(std::chrono::milliseconds timeout);

  // Events read through this channel and not yet acknowledged, over all its CQs.
  unsigned unacked_events() const noexcept;
  int cq_count() const noexcept { return cqs_.count(); }

  // ibv_destroy_comp_channel now; EBUSY (without calling it) while CQs use the channel.
  [[nodiscard]] int destroy() noexcept;

 private:
  friend class CompletionQueue;
  explicit CompletionChannel(ibv_comp_channel* channel) noexcept;

  ibv_comp_channel* channel_ = nullptr;
  std::shared_ptr<std::atomic<unsigned>> unacked_;
  UseCounter cqs_;
};

class CompletionQueue {
 public:
  // min_cqe: entries wanted; the CQ may be bigger (cqe()). Refuses (EINVAL) a size above the
  // device's max_cqe before calling the verb, so the message names the limit.
  // With a channel, completion events are delivered there after request_notify().
  static CompletionQueue create(const Context& ctx, int min_cqe,
                                CompletionChannel* channel = nullptr, int comp_vector = 0);

  CompletionQueue(CompletionQueue&& other) noexcept;
  CompletionQueue& operator=(CompletionQueue&& other) noexcept;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ~CompletionQueue();

  // The raw CQ for ibv_poll_cq on the hot path. Its cq_context belongs to this wrapper (it routes
  // channel events back to the right CompletionQueue): do not overwrite it. Inline (a copy of
  // state_->cq): progress polls twice per call, and a call into cq.cc per poll was measurable.
  ibv_cq* get() const noexcept { return cq_; }
  int cqe() const noexcept;  // the size actually granted

  // ibv_req_notify_cq: arm the CQ for the next completion event (requires a channel).
  void request_notify(bool solicited_only = false);

  // Acknowledges (ibv_ack_cq_events, one call) every event read for this CQ so far.
  // Returns how many were acked.
  unsigned ack_events() noexcept;
  unsigned unacked_events() const noexcept;

  // QPs using this CQ (as send or receive CQ; a QP using it for both counts twice).
  int users() const noexcept { return users_.count(); }
  // Registers a user; QueuePair holds the returned reference for as long as it exists.
  UseRef register_user() const { return users_.acquire(); }

  // Acks outstanding events, then ibv_destroy_cq. EBUSY (without calling the verb) while QPs
  // use the CQ. 0 on success; on failure the CQ stays owned and usable.
  [[nodiscard]] int destroy() noexcept;

 private:
  explicit CompletionQueue(std::unique_ptr<detail::CqState> state) noexcept;

  std::unique_ptr<detail::CqState> state_;
  ibv_cq* cq_ = nullptr;  // state_->cq while state_ lives
  UseCounter users_;
};

}  // namespace rdmx::verbs
