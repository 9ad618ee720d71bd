// Counting who still uses a verbs object, so that our layer refuses a destroy the man page
// forbids (ibv_destroy_srq while QPs are associated, ibv_destroy_cq while QPs use it,
// ibv_destroy_comp_channel while CQs use it) instead of trusting every provider to refuse it.
//
// The counter lives on the heap and is shared with every UseRef: the owning wrapper may be moved,
// and a user (a QP) may outlive a wrapper whose destroy was refused, without either side
// touching freed memory.
#pragma once

#include <atomic>
#include <memory>

namespace rdmx::verbs {

class UseRef;

class UseCounter {
 public:
  UseCounter() : count_(std::make_shared<std::atomic<int>>(0)) {}

  int count() const noexcept { return count_ ? count_->load(std::memory_order_acquire) : 0; }
  UseRef acquire() const;

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

// One registered use. Releases it when destroyed or reset().
class UseRef {
 public:
  UseRef() = default;
  explicit UseRef(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) {
    if (count_) {
      count_->fetch_add(1, std::memory_order_acq_rel);
    }
  }
  UseRef(UseRef&& other) noexcept = default;
  UseRef& operator=(UseRef&& other) noexcept {
    if (this != &other) {
      reset();
      count_ = std::move(other.count_);
    }
    return *this;
  }
  UseRef(const UseRef&) = delete;
  UseRef& operator=(const UseRef&) = delete;
  ~UseRef() { reset(); }

  void reset() noexcept {
    if (count_) {
      count_->fetch_sub(1, std::memory_order_acq_rel);
      count_.reset();
    }
  }
  explicit operator bool() const noexcept { return static_cast<bool>(count_); }

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

inline UseRef UseCounter::acquire() const {
  return UseRef(count_);
}

}  // namespace rdmx::verbs
