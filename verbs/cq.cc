#include "verbs/cq.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <string>
#include <utility>

#include "verbs/error.h"

namespace rdmx::verbs {

namespace detail {

// Heap-allocated so that its address, handed to the verb as cq_context, survives moves of the
// CompletionQueue wrapper.
struct CqState {
  ibv_cq* cq = nullptr;
  std::atomic<unsigned> unacked{0};
  // Shared with the channel so that its total stays right; null without a channel.
  std::shared_ptr<std::atomic<unsigned>> channel_unacked;
  UseRef channel_use;
};

}  // namespace detail

namespace {

void set_nonblocking(int fd, const char* verb) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1) {
    throw Error(verb, errno, "fcntl(O_NONBLOCK) on the event fd");
  }
}

}  // namespace

// ---- CompletionChannel ----------------------------------------------------------------------

CompletionChannel::CompletionChannel(ibv_comp_channel* channel) noexcept
    : channel_(channel), unacked_(std::make_shared<std::atomic<unsigned>>(0)) {}

CompletionChannel CompletionChannel::create(const Context& ctx) {
  errno = 0;
  CompletionChannel ch(
      check_created(ibv_create_comp_channel(ctx.get()), "ibv_create_comp_channel", ctx.name()));
  set_nonblocking(ch.fd(), "ibv_create_comp_channel");
  return ch;
}

CompletionChannel::CompletionChannel(CompletionChannel&& other) noexcept
    : channel_(std::exchange(other.channel_, nullptr)),
      unacked_(std::move(other.unacked_)),
      cqs_(std::move(other.cqs_)) {}

CompletionChannel& CompletionChannel::operator=(CompletionChannel&& other) noexcept {
  if (this != &other) {
    CompletionChannel old(std::move(*this));
    channel_ = std::exchange(other.channel_, nullptr);
    unacked_ = std::move(other.unacked_);
    cqs_ = std::move(other.cqs_);
  }
  return *this;
}

CompletionChannel::~CompletionChannel() {
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_destroy_comp_channel", e,
                     std::to_string(cqs_.count()) + " CQs still use it; channel leaked");
  }
}

unsigned CompletionChannel::unacked_events() const noexcept {
  return unacked_ ? unacked_->load(std::memory_order_acquire) : 0;
}

ibv_cq* CompletionChannel::wait_event(std::chrono::milliseconds timeout) {
  pollfd pfd{.fd = channel_->fd, .events = POLLIN, .revents = 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    errno = 0;
    if (ibv_get_cq_event(channel_, &cq, &cq_context) == 0) {
      auto* state = static_cast<detail::CqState*>(cq_context);
      state->unacked.fetch_add(1, std::memory_order_acq_rel);
      unacked_->fetch_add(1, std::memory_order_acq_rel);
      return cq;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw Error("ibv_get_cq_event", errno != 0 ? errno : EIO);
    }
    // Rounded up, as in AsyncEventReader: a truncated remainder ends the wait up to 1 ms early.
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return nullptr;
    }
    const int rc = poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc == -1 && errno != EINTR) {
      throw Error("ibv_get_cq_event", errno, "poll on the completion channel fd");
    }
  }
}

int CompletionChannel::destroy() noexcept {
  if (channel_ == nullptr) {
    return 0;
  }
  if (cqs_.count() > 0) {
    return EBUSY;
  }
  const int e = verb_errno(ibv_destroy_comp_channel(channel_));
  if (e == 0) {
    channel_ = nullptr;
  }
  return e;
}

// ---- CompletionQueue ------------------------------------------------------------------------

CompletionQueue::CompletionQueue(std::unique_ptr<detail::CqState> state) noexcept
    : state_(std::move(state)), cq_(state_->cq) {}

CompletionQueue CompletionQueue::create(const Context& ctx, int min_cqe, CompletionChannel* channel,
                                        int comp_vector) {
  const ibv_device_attr_ex dev = ctx.query_device();
  if (min_cqe <= 0 || min_cqe > dev.orig_attr.max_cqe) {
    throw Error("ibv_create_cq", EINVAL,
                "cqe " + std::to_string(min_cqe) + " outside 1..device max_cqe " +
                    std::to_string(dev.orig_attr.max_cqe));
  }
  auto state = std::make_unique<detail::CqState>();
  if (channel != nullptr) {
    state->channel_unacked = channel->unacked_;
    state->channel_use = channel->cqs_.acquire();
  }
  errno = 0;
  state->cq =
      check_created(ibv_create_cq(ctx.get(), min_cqe, state.get(),
                                  channel != nullptr ? channel->get() : nullptr, comp_vector),
                    "ibv_create_cq", "cqe " + std::to_string(min_cqe));
  return CompletionQueue(std::move(state));
}

CompletionQueue::CompletionQueue(CompletionQueue&& other) noexcept
    : state_(std::move(other.state_)),
      cq_(std::exchange(other.cq_, nullptr)),
      users_(std::move(other.users_)) {}

CompletionQueue& CompletionQueue::operator=(CompletionQueue&& other) noexcept {
  if (this != &other) {
    CompletionQueue old(std::move(*this));
    state_ = std::move(other.state_);
    cq_ = std::exchange(other.cq_, nullptr);
    users_ = std::move(other.users_);
  }
  return *this;
}

CompletionQueue::~CompletionQueue() {
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_destroy_cq", e,
                     std::to_string(users_.count()) + " QPs still use it; CQ leaked");
  }
}

int CompletionQueue::cqe() const noexcept {
  return state_->cq->cqe;
}

void CompletionQueue::request_notify(bool solicited_only) {
  check_rc(ibv_req_notify_cq(state_->cq, solicited_only ? 1 : 0), "ibv_req_notify_cq");
}

unsigned CompletionQueue::ack_events() noexcept {
  if (!state_) {
    return 0;
  }
  const unsigned n = state_->unacked.exchange(0, std::memory_order_acq_rel);
  if (n > 0) {
    ibv_ack_cq_events(state_->cq, n);  // one call for the batch: it takes a mutex
    if (state_->channel_unacked) {
      state_->channel_unacked->fetch_sub(n, std::memory_order_acq_rel);
    }
  }
  return n;
}

unsigned CompletionQueue::unacked_events() const noexcept {
  return state_ ? state_->unacked.load(std::memory_order_acquire) : 0;
}

int CompletionQueue::destroy() noexcept {
  if (!state_) {
    return 0;
  }
  if (users_.count() > 0) {
    return EBUSY;
  }
  // ibv_destroy_cq would block forever on an event that was read but never acknowledged.
  ack_events();
  const int e = verb_errno(ibv_destroy_cq(state_->cq));
  if (e == 0) {
    state_.reset();  // also releases the channel use
    cq_ = nullptr;
  }
  return e;
}

}  // namespace rdmx::verbs
