// The sleeper's fd: an epoll set of the completion channel and a deadline timer (wake_set.h).
#include "transport/wake_set.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "protocol/reliability.h"
#include "verbs/error.h"

namespace rdmx::transport {

WakeSet WakeSet::create(int channel_fd, int async_fd) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    throw verbs::Error("epoll_create1", errno, "the worker's event fd");
  }
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer < 0) {
    const int err = errno;
    (void)close(ep);
    throw verbs::Error("timerfd_create", err, "the worker's deadline timer");
  }
  WakeSet set(ep, timer, async_fd);  // closes the first two from here on
  // Level-triggered members: the set stays readable while an event or an expiry is unread, and
  // an outer edge-triggered epoll (UCP's) sees each new one.
  for (const int member : {channel_fd, timer, async_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = member;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, member, &ev) != 0) {
      throw verbs::Error("epoll_ctl", errno, "adding to the worker's event fd");
    }
  }
  return set;
}

WakeSet::WakeSet(WakeSet&& other) noexcept
    : epoll_fd_(std::exchange(other.epoll_fd_, -1)),
      timer_fd_(std::exchange(other.timer_fd_, -1)),
      async_fd_(std::exchange(other.async_fd_, -1)),
      timer_set_(other.timer_set_) {}

WakeSet::~WakeSet() {
  if (timer_fd_ >= 0) {
    (void)close(timer_fd_);
  }
  if (epoll_fd_ >= 0) {
    (void)close(epoll_fd_);
  }
}

void WakeSet::drop_async_fd() noexcept {
  if (async_fd_ >= 0) {
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, async_fd_, nullptr);
    async_fd_ = -1;
  }
}

void WakeSet::set_deadline(std::uint64_t deadline_us) {
  const bool disarm = deadline_us == protocol::kNoDeadline;
  if (disarm && !timer_set_) {
    return;
  }
  itimerspec spec{};  // all zero: disarmed
  if (!disarm) {
    // 0 would disarm: a deadline at time 0 is long past anyway.
    const std::uint64_t us = deadline_us == 0 ? 1 : deadline_us;
    spec.it_value.tv_sec = static_cast<time_t>(us / 1'000'000u);
    spec.it_value.tv_nsec = static_cast<long>(us % 1'000'000u) * 1000;
  }
  if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
    throw verbs::Error("timerfd_settime", errno, "the worker's deadline timer");
  }
  timer_set_ = !disarm;
}

}  // namespace rdmx::transport
