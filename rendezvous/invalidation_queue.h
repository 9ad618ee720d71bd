// The hand-off between memory-release notifications (any thread, inside munmap/free/brk) and
// the registration cache's owner thread.
//
// A memory hook may run in any thread, in the middle of free() or munmap(), with the allocator's
// and UCM's locks held. It must not allocate, block on anything the owner might hold while
// allocating, or touch the cache's map (the owner changes it without locks). So push() only
// appends [start, end) to a fixed-size ring under a spinlock; the owner drains the ring from
// its own thread (RegCache::flush_invalidations) and deregisters there.
//
// Rules that keep this deadlock-free:
//   - the ring is allocated once, up front; push() never allocates;
//   - the spinlock is never held across anything that can allocate, free or unmap (drain()
//     copies a batch out under the lock and hands it to the callback after unlocking), so a
//     hook fired by the owner's own free() cannot spin on a lock its own thread holds;
//   - a full ring does not lose information: it degrades to "invalidate everything"
//     (overflowed()), which is always safe, only slower.
//
// Filtering: the owner publishes the span [lo, hi) that its cached entries cover (watch()).
// Ranges entirely outside it are dropped in push(), so the process's unrelated munmaps do not
// fill the ring. The two bounds are separate atomics; a reader racing with an update sees a span
// that contains either the old or the new one, which is conservative for every range that is
// not being registered at that very moment (and unmapping memory while registering it is a bug
// in the caller).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rdmx::rendezvous {

// A byte range [start, end).
struct AddrRange {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
};

class InvalidationQueue {
 public:
  // Ranges drained per batch (a stack buffer in drain()).
  static constexpr std::size_t kDrainBatch = 64;

  // capacity: ranges the ring holds before it degrades to "everything" (at least 1).
  explicit InvalidationQueue(std::size_t capacity);
  InvalidationQueue(const InvalidationQueue&) = delete;
  InvalidationQueue& operator=(const InvalidationQueue&) = delete;

  // Any thread, including inside a memory hook. Async-signal-unsafe only in that it spins.
  // Empty ranges, wrapped ranges and ranges outside the watched span are ignored.
  void push(std::uintptr_t start, std::uintptr_t end) noexcept;

  // Owner thread. True when push() stored something since the last drain: one relaxed-cost
  // atomic load, the check on the hot path.
  bool pending() const noexcept { return pending_.load(std::memory_order_acquire); }

  // Owner thread. Calls on_batch(std::span<const AddrRange>) with everything queued, in
  // batches, outside the lock. When the ring overflowed since the last drain, calls
  // on_overflow() first (the owner must then invalidate everything it caches); the ranges
  // still queued are delivered too. Returns the number of ranges delivered.
  template <typename OnOverflow, typename OnBatch>
  std::size_t drain(OnOverflow&& on_overflow, OnBatch&& on_batch);

  // Owner thread: the span of addresses worth queueing. watch_nothing() when nothing is cached.
  void watch(std::uintptr_t lo, std::uintptr_t hi) noexcept {
    lo_.store(lo, std::memory_order_seq_cst);
    hi_.store(hi, std::memory_order_seq_cst);
  }
  void watch_nothing() noexcept { watch(0, 0); }
  void watch_everything() noexcept { watch(0, UINTPTR_MAX); }

  // Counters (any thread may read; they are monotonic).
  std::uint64_t pushed() const noexcept { return pushed_.load(std::memory_order_relaxed); }
  std::uint64_t filtered() const noexcept { return filtered_.load(std::memory_order_relaxed); }
  std::uint64_t overflows() const noexcept { return overflows_.load(std::memory_order_relaxed); }
  std::size_t capacity() const noexcept { return ring_.size(); }

 private:
  void lock() noexcept;
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }
  // Under the lock: moves up to out.size() ranges into out; sets *overflowed and clears the
  // flag when the ring had overflowed. Returns how many were moved.
  std::size_t take(std::span<AddrRange> out, bool* overflowed) noexcept;

  std::vector<AddrRange> ring_;
  std::size_t head_ = 0;  // next to take
  std::size_t size_ = 0;  // queued ranges
  bool overflow_ = false;
  std::atomic<bool> locked_{false};
  std::atomic<bool> pending_{false};
  std::atomic<std::uintptr_t> lo_{0};
  std::atomic<std::uintptr_t> hi_{UINTPTR_MAX};
  std::atomic<std::uint64_t> pushed_{0};
  std::atomic<std::uint64_t> filtered_{0};
  std::atomic<std::uint64_t> overflows_{0};
};

template <typename OnOverflow, typename OnBatch>
std::size_t InvalidationQueue::drain(OnOverflow&& on_overflow, OnBatch&& on_batch) {
  std::size_t delivered = 0;
  AddrRange batch[kDrainBatch];
  while (pending()) {
    bool overflowed = false;
    lock();
    const std::size_t n = take(std::span<AddrRange>(batch, kDrainBatch), &overflowed);
    unlock();
    if (overflowed) {
      on_overflow();
    }
    if (n > 0) {
      on_batch(std::span<const AddrRange>(batch, n));
      delivered += n;
    }
  }
  return delivered;
}

}  // namespace rdmx::rendezvous
