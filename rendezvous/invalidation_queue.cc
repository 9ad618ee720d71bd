#include "rendezvous/invalidation_queue.h"

#include <sched.h>

#include <algorithm>

namespace rdmx::rendezvous {

InvalidationQueue::InvalidationQueue(std::size_t capacity)
    : ring_(std::max<std::size_t>(capacity, 1)) {}

void InvalidationQueue::lock() noexcept {
  // Test-and-test-and-set. The critical sections are a few stores, so contention is brief; a
  // holder preempted mid-section is waited out with sched_yield rather than burning a core.
  for (unsigned spins = 0;; ++spins) {
    if (!locked_.load(std::memory_order_relaxed) &&
        !locked_.exchange(true, std::memory_order_acquire)) {
      return;
    }
    if (spins >= 64) {
      sched_yield();
    }
  }
}

void InvalidationQueue::push(std::uintptr_t start, std::uintptr_t end) noexcept {
  if (end <= start) {
    return;
  }
  const std::uintptr_t lo = lo_.load(std::memory_order_seq_cst);
  const std::uintptr_t hi = hi_.load(std::memory_order_seq_cst);
  if (start >= hi || end <= lo) {
    filtered_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  lock();
  if (size_ < ring_.size()) {
    ring_[(head_ + size_) % ring_.size()] = AddrRange{start, end};
    ++size_;
  } else if (!overflow_) {
    overflow_ = true;
    overflows_.fetch_add(1, std::memory_order_relaxed);
  }
  pending_.store(true, std::memory_order_release);
  unlock();
  pushed_.fetch_add(1, std::memory_order_relaxed);
}

std::size_t InvalidationQueue::take(std::span<AddrRange> out, bool* overflowed) noexcept {
  *overflowed = overflow_;
  overflow_ = false;
  const std::size_t n = std::min(out.size(), size_);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
  }
  size_ -= n;
  if (size_ == 0) {
    head_ = 0;
    pending_.store(false, std::memory_order_release);
  }
  return n;
}

}  // namespace rdmx::rendezvous
