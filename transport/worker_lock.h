// The worker lock of RDMX_THREAD_MODE_MULTI (threads.cc, transport/README.md "Threads"): a
// readers-writer lock. Every call takes it exclusively (as a std::mutex: lock, try_lock, unlock),
// except an eager send that leaves at once (or joins its peer's open batch), a receive that
// nothing unexpected matches and a probe, which take it shared beside a narrower lock, so that
// threads posting to different peers do not wait for each other. Writers are preferred: a
// call waiting for the whole worker is not starved by a stream of sends.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>

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
// held around one post or one matcher insert, never across a call out of rdmx, and rarely
// contended (threads on different peers take different ones). A std::mutex costs about 60
// instructions per lock and unlock there (glibc's checks and its futex-word protocol, callgrind
// of osu_mbw_mt, stop 56); this is one exchange and one store. A waiter spins on a read for a
// while, then yields its CPU each round: with more threads than cores (the 2-vCPU guest) the
// holder may be preempted, and spinning through whole time slices (UCX's ucs_spinlock) would
// keep it off the CPU.
class ShortLock {
 public:
  ShortLock() noexcept = default;
  ShortLock(const ShortLock&) = delete;
  ShortLock& operator=(const ShortLock&) = delete;

  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire)) [[unlikely]] {
        wait();
      }
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpins = 128;  // reads before the first yield: a post takes ~1 us

  void wait() noexcept {
    for (int i = 0; held_.load(std::memory_order_relaxed); ++i) {
      if (i < kSpins) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield" ::: "memory");
#endif
      } else {
        sched_yield();
      }
    }
  }

  std::atomic<bool> held_{false};
};

}  // namespace rdmx::transport
