// The file descriptor a sleeper polls (rdmx_worker_event_fd): an epoll set holding the CQs'
// completion channel, a timer for the worker's next deadline (UD's resends and delayed acks,
// connection timers, the watchdog while signalled sends are out or the port is down) and the
// device's async event fd (a port going down, a fatal QP or device error: found while asleep, not
// at the next progress). Without the timer, a worker with a timer running had to answer busy to
// every arming, and a UCP program in UCP_FEATURE_WAKEUP mode spun through every UD exchange's
// ack and resend window (wakeup.cc). Owns the epoll set and the timer; the async fd is the
// device context's, which outlives this set. Nothing here runs per message, only when a caller
// arms.
#pragma once

#include <cstdint>

namespace rdmx::transport {

class WakeSet {
 public:
  // Throws verbs::Error naming the system call (epoll_create1, timerfd_create, epoll_ctl).
  // async_fd: ibv_context's, non-blocking (verbs::AsyncEventReader makes it so).
  static WakeSet create(int channel_fd, int async_fd);

  WakeSet(WakeSet&& other) noexcept;
  WakeSet& operator=(WakeSet&&) = delete;
  WakeSet(const WakeSet&) = delete;
  WakeSet& operator=(const WakeSet&) = delete;
  ~WakeSet();

  int fd() const noexcept { return epoll_fd_; }

  // The async fd leaves the set, for good: reading it failed with an error that a level-
  // triggered member would report at every sleep (a device gone). Faults are then found by
  // progress only.
  void drop_async_fd() noexcept;

  // Makes the fd readable at `deadline_us` (CLOCK_MONOTONIC microseconds, the worker clock's
  // base; one in the past fires at once); protocol::kNoDeadline disarms. Either way an expiry
  // from the last setting is cleared (timerfd_settime resets it), so a readable fd means a
  // completion event, an async event or this deadline. One system call, none while it stays
  // disarmed. Throws verbs::Error (timerfd_settime).
  void set_deadline(std::uint64_t deadline_us);

 private:
  WakeSet(int epoll_fd, int timer_fd, int async_fd) noexcept
      : epoll_fd_(epoll_fd), timer_fd_(timer_fd), async_fd_(async_fd) {}

  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  int async_fd_ = -1;       // not ours; -1 once dropped
  bool timer_set_ = false;  // since the last disarming: it may have fired
};

}  // namespace rdmx::transport
