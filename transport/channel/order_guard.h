// RC sender-side bound on reordering: the receiver's Sequencer can hold `window` early arrivals
// per peer, and over RC a peer's two QPs (one per size class) are not ordered with respect to
// each other. A message with Seq s is posted only while every message up to s - window has
// completed at the sender: its completion means the receiver placed it, so the receiver has seen
// it (its receive CQ is ordered) before s can arrive, and s is at most window - 1 ahead. A
// message placed in the receiver's eager ring is not in that CQ: the receiver drains the peer's
// ring before it holds an early SRQ message (recv.cc), which restores the argument.
//
// Pure logic (unit-tested). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/serial.h"

namespace rdmx::transport {

class OrderGuard {
 public:
  // window: a power of two, <= protocol::kMaxSeqWindow.
  explicit OrderGuard(std::size_t window, protocol::Seq first = 0)
      : busy_(window, 0), mask_(window - 1), next_(first), oldest_(first) {}

  // Whether the message with Seq next() may be posted now.
  bool can_send() const noexcept {
    return static_cast<std::size_t>(protocol::seq_diff(next_, oldest_)) < busy_.size();
  }
  protocol::Seq next() const noexcept { return next_; }
  protocol::Seq oldest() const noexcept { return oldest_; }
  std::size_t outstanding() const noexcept {
    return static_cast<std::size_t>(protocol::seq_diff(next_, oldest_));
  }

  // The message with Seq next() was posted.
  void on_send() noexcept {
    busy_[next_ & mask_] = 1;
    next_ = protocol::seq_add(next_, 1);
  }
  // The message with this Seq completed (in any order).
  void on_complete(protocol::Seq seq) noexcept {
    if (protocol::seq_lt(seq, oldest_) || protocol::seq_ge(seq, next_)) {
      return;  // not outstanding
    }
    busy_[seq & mask_] = 0;
    while (oldest_ != next_ && !busy_[oldest_ & mask_]) {
      oldest_ = protocol::seq_add(oldest_, 1);
    }
  }

 private:
  // A byte per slot, not std::vector<bool>: its bit arithmetic cost ~25 instructions per RC
  // message (callgrind, on_send and on_complete).
  std::vector<std::uint8_t> busy_;
  std::size_t mask_;
  protocol::Seq next_;
  protocol::Seq oldest_;
};

}  // namespace rdmx::transport
