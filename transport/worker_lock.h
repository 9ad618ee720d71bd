// The worker lock of RDMX_THREAD_MODE_MULTI (threads.cc, transport/README.md "Threads"): a
// readers-writer lock. Every call takes it exclusively (as a std::mutex: lock, try_lock, unlock),
// except an eager send that leaves at once (or joins its peer's open batch), a receive that
// nothing unexpected matches and a probe, which take it shared beside a narrower lock, so that
// threads posting to different peers do not wait for each other. Writers are preferred: a
// call waiting for the whole worker is not starved by a stream of sends.
#pragma once

#include <pthread.h>

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

}  // namespace rdmx::transport
