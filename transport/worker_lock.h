// The worker lock of RDMX_THREAD_MODE_MULTI (threads.cc, transport/README.md "Threads"): a
// readers-writer lock. Every call takes it exclusively (as a std::mutex: lock, try_lock, unlock),
// except an eager send that leaves at once (or joins its peer's open batch), a receive that
// nothing or an unexpected eager message matches, a probe or mprobe, the receive of an mprobed
// eager message and a cancel, which take it shared (most beside a narrower lock), so that
// threads posting to different peers do not wait for each other. Writers are preferred: a
// call waiting for the whole worker is not starved by a stream of sends.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace rdmx::transport {

class WorkerLock {
 public:
  WorkerLock() noexcept {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~WorkerLock() { pthread_rwlock_destroy(&lock_); }
  WorkerLock(const WorkerLock&) = delete;
  WorkerLock& operator=(const WorkerLock&) = delete;

  void lock() noexcept { pthread_rwlock_wrlock(&lock_); }
  bool try_lock() noexcept { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() noexcept { pthread_rwlock_unlock(&lock_); }
  void lock_shared() noexcept { pthread_rwlock_rdlock(&lock_); }
  bool try_lock_shared() noexcept { return pthread_rwlock_tryrdlock(&lock_) == 0; }
  void unlock_shared() noexcept { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

// The narrow locks beside the shared side (Peer::post_mu, Worker::ud_post_mu_, match_mu_): each
// held around one post or one matcher insert, take, probe or cancel, never across a call out of
// rdmx, and rarely contended (threads on different peers take different ones). A std::mutex costs
// about 60 instructions per lock and unlock there (glibc's checks and its futex-word protocol,
// callgrind of osu_mbw_mt, stop 56); this is one compare-exchange and one exchange. A waiter spins
// on a read for a while, then sleeps on the word (std::atomic::wait, a futex): the three-state lock
// of Drepper's "Futexes Are Tricky". Waiters that yielded in a loop instead (stop 57's first
// version) gave 0.84x std::mutex's 4-thread osu_mbw_mt rate on the 2-vCPU guest, where the holder
// is often preempted: they kept taking the CPU it needed (this one: 0.93x, within the noise).
class ShortLock {
 public:
  ShortLock() noexcept = default;
  ShortLock(const ShortLock&) = delete;
  ShortLock& operator=(const ShortLock&) = delete;

  void lock() noexcept {
    int seen = kFree;
    if (!state_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire,
                                        std::memory_order_relaxed)) [[unlikely]] {
      wait();
    }
  }
  // The wake follows the release: safe since a ShortLock dies only under the whole worker lock
  // (peers and the worker), which no holder of it can be inside.
  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kContended) [[unlikely]] {
      state_.notify_one();
    }
  }
  // Takes that found it held and waited (the mt_*_lock_waits counters): counted on the slow path
  // only, so an uncontended take pays nothing for it.
  std::uint64_t waits() const noexcept { return waits_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kFree = 0;
  static constexpr int kHeld = 1;
  static constexpr int kContended = 2;  // held, and a waiter may sleep: unlock wakes one
  static constexpr int kSpins = 64;     // reads before sleeping: a post takes ~1 us

  void wait() noexcept {
    waits_.fetch_add(1, std::memory_order_relaxed);
    for (int i = 0; i < kSpins; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield" ::: "memory");
#endif
      int seen = kFree;
      if (state_.load(std::memory_order_relaxed) == kFree &&
          state_.compare_exchange_weak(seen, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return;
      }
    }
    // Taken as contended from here on: whoever holds it when it is let go wakes the next.
    while (state_.exchange(kContended, std::memory_order_acquire) != kFree) {
      state_.wait(kContended, std::memory_order_relaxed);
    }
  }

  std::atomic<int> state_{kFree};
  std::atomic<std::uint64_t> waits_{0};
};

}  // namespace rdmx::transport
