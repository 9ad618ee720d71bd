// RDMX_THREAD_MODE_MULTI (rdmx.h, "Threads"): the worker lock, each calling thread's send
// context, and progress, waits and destroy from any thread. SINGLE and SERIALIZED never get here
// past a test of multi_.
//
// Lock order (transport/README.md, "Threads"). rdmx has one lock per worker, held only inside an
// rdmx call: a host's own locks (the Open MPI MTL's list lock) come before it. An eager send that
// leaves at once or joins an open batch holds its shared side, then its peer's post lock
// (send_shared, send_request_shared, send.cc); a receive that nothing or an unexpected eager
// message matches, a probe or mprobe and a cancel, its shared side and the matcher's lock
// (recv_shared, probe_shared, cancel_shared, recv.cc), as does the receive of an eager message
// an mprobe took, without the matcher's (msg_recv_shared); a synchronous message's match-ack,
// after the matcher's lock is let go, its peer's post lock (post_match_ack_shared). rdmx never
// calls the host with it held: request and peer-failure callbacks run after progress_multi, wait or
// destroy released it (take_completions under the lock, run_completions after). So a callback may
// take the host's locks, and the host may hold them across rdmx calls that run no callbacks (posts,
// cancel, probes), never across progress, poll, wait or destroy.
//
// Send contexts. A thread's first call makes it a ThreadCtx (its send descriptors and bounce
// buffers, send_descs_ descriptors); its index is the thread field of every wr_id it posts and of
// its Ssend cookies. Whichever thread polls a send completion routes it by that field
// (on_send_completion), and a send queue's FIFO names each descriptor's pool (send_queue.h), so
// descriptors of several threads may share a QP. threads_ is reserved to max_threads at setup:
// a context never moves while tx_ points at it. A thread that exits frees its contexts (a
// thread_local destructor, through the registry of live MULTI workers) for the next new thread.
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "transport/send_now.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

// The context this thread used last, and in which worker (a serial: a freed worker's address may
// be reused).
struct CachedCtx {
  std::uint64_t serial = 0;
  std::uint16_t index = 0;
};
thread_local CachedCtx t_ctx;
std::atomic<std::uint64_t> g_serial{1};

pid_t self_tid() noexcept {
  static thread_local const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  return tid;
}

// Live MULTI workers by serial, so that an exiting thread can give its contexts back to those
// still there. Lock order: this mutex, then a worker lock. Never destroyed (threads may exit
// after static destructors ran).
struct Registry {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, Worker*> workers;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// The contexts this thread holds; its destructor (at thread exit) frees them.
struct HeldContexts {
  std::vector<std::pair<std::uint64_t, std::uint16_t>> held;  // (worker serial, index)
  ~HeldContexts() {
    if (held.empty()) {
      return;
    }
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [serial, index] : held) {
      if (const auto it = r.workers.find(serial); it != r.workers.end()) {
        Worker::release_thread_ctx(*it->second, index, self_tid());
      }
    }
  }
};
thread_local HeldContexts t_held;

}  // namespace

std::uint64_t Worker::next_serial() noexcept {
  return g_serial.fetch_add(1, std::memory_order_relaxed);
}

int Worker::lock_caller(bool own) noexcept {
  if (!lock_.try_lock()) {
    stat_mt_lock_waits_.fetch_add(1, std::memory_order_relaxed);
    lock_wanted_.fetch_add(1, std::memory_order_relaxed);
    lock_.lock();
    lock_wanted_.fetch_sub(1, std::memory_order_relaxed);
  }
  ++stat_mt_whole_takes_;
  const int rc = enter_caller(own);
  if (rc != RDMX_OK) [[unlikely]] {
    lock_.unlock();
  }
  return rc;
}

int Worker::enter_caller(bool own) noexcept {
  if (t_ctx.serial == serial_) [[likely]] {
    tx_ = &threads_[t_ctx.index];
    return RDMX_OK;
  }
  const pid_t me = self_tid();
  ThreadCtx* found = nullptr;
  bool taken = false;  // made or taken over now: this thread must free it at exit
  for (ThreadCtx& tc : threads_) {
    if (tc.owner == me) {
      found = &tc;
      break;
    }
  }
  if (found == nullptr && threads_.size() < res_.max_threads && !ctx_alloc_failed_) {
    try {
      add_thread_ctx(me);
      found = &threads_.back();
      taken = true;
    } catch (const verbs::Error& e) {
      // Not retried: every call of every later thread would register (and fail) again.
      ctx_alloc_failed_ = true;
      std::fprintf(stderr,
                   "rdmx: a new thread's send context could not be made: %s. Its bounce buffers "
                   "are registered memory: raise the locked-memory limit (ulimit -l). Threads "
                   "without a context of their own fail their sends with RDMX_ERR_NO_MEMORY\n",
                   e.what());
    } catch (const std::bad_alloc&) {
      ctx_alloc_failed_ = true;
    }
  }
  if (found == nullptr) {
    for (ThreadCtx& tc : threads_) {
      if (tc.owner == 0) {  // its thread has exited (release_thread_ctx)
        tc.owner = me;
        found = &tc;
        taken = true;
        break;
      }
    }
  }
  if (found == nullptr) {
    // No context of its own: its sends fail, naming the cause; anything else it calls (progress,
    // receives, cancel...) borrows context 0 for the acks and flushes it may post, which the
    // lock makes safe. Not cached: a context may be free at its next call.
    if (ctx_alloc_failed_ && threads_.size() < res_.max_threads) {
      if (own) {
        return RDMX_ERR_NO_MEMORY;
      }
    } else if (own) {
      if (!warned_threads_) {
        warned_threads_ = true;
        std::fprintf(stderr,
                     "rdmx: more than %u threads use worker %016llx at once (thread mode "
                     "multi): their sends fail with RDMX_ERR_TOO_MANY_THREADS; raise "
                     "RDMX_MAX_THREADS (Open MPI: mtl_rdmx_max_threads)\n",
                     res_.max_threads, static_cast<unsigned long long>(uid_));
      }
      return RDMX_ERR_TOO_MANY_THREADS;
    }
    tx_ = &threads_[0];
    return RDMX_OK;
  }
  t_ctx = CachedCtx{.serial = serial_, .index = found->index};
  tx_ = found;
  if (taken) {
    try {
      t_held.held.emplace_back(serial_, found->index);
    } catch (const std::bad_alloc&) {
      // Kept for the rest of the process: only a later thread past max_threads pays.
    }
  }
  return RDMX_OK;
}

int Worker::cached_ctx() const noexcept {
  // Only the thread's own context is cached: one it borrows (past max_threads) never is.
  return t_ctx.serial == serial_ ? t_ctx.index : kNoContext;
}

void Worker::lock_shared_side() noexcept {
  if (!lock_.try_lock_shared()) {
    stat_mt_lock_waits_.fetch_add(1, std::memory_order_relaxed);
    lock_wanted_.fetch_add(1, std::memory_order_relaxed);
    lock_.lock_shared();
    lock_wanted_.fetch_sub(1, std::memory_order_relaxed);
  }
}

int Worker::tag_send_multi(Peer& peer, const void* buffer, std::size_t length, std::uint64_t tag,
                           unsigned flags, Request* r, rdmx_callback_t callback, void* user_data) {
  // A standard eager send that leaves at once or joins an open batch, under the shared side.
  if (r != nullptr && (buffer != nullptr || length == 0) &&
      (flags & ~unsigned{RDMX_SEND_FLUSH}) == 0) {
    if (const int ctx = cached_ctx();
        ctx != kNoContext && send_request_shared(ctx, peer, buffer, length, tag, flags, r, callback,
                                                 user_data)) [[likely]] {
      return RDMX_OK;
    }
  }
  const Locked held(*this, /*own=*/true);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  const int rc = tag_send(peer, buffer, length, tag, flags, r, callback, user_data);
  stat_mt_locked_sends_ += rc == RDMX_OK ? 1 : 0;  // not one refused (the caller retries) or failed
  return rc;
}

int Worker::tag_inject_multi(Peer& peer, const SendBytes& bytes, std::uint64_t tag,
                             unsigned flags) {
  if (bytes.injectable(flags)) {
    if (const int ctx = cached_ctx(); ctx != kNoContext) [[likely]] {
      const int rc = send_shared(ctx, peer, bytes, tag, flags);
      if (rc != RDMX_ERR_NO_RESOURCE) {
        return rc;
      }
    }
  }
  const Locked held(*this, /*own=*/true);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  const int rc = tag_inject(peer, bytes, tag, flags);
  stat_mt_locked_sends_ += rc == RDMX_OK ? 1 : 0;  // not one refused (the caller retries) or failed
  return rc;
}

int Worker::tag_recv_multi(void* buffer, std::size_t length, std::uint64_t source,
                           std::uint64_t tag, std::uint64_t mask, Request* r,
                           rdmx_callback_t callback, void* user_data) {
  if (r != nullptr && (buffer != nullptr || length == 0)) {
    if (const int ctx = cached_ctx();
        ctx != kNoContext &&
        recv_shared(ctx, buffer, length, source, tag, mask, r, callback, user_data)) [[likely]] {
      return RDMX_OK;
    }
  }
  const Locked held(*this);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return tag_recv(buffer, length, source, tag, mask, r, callback, user_data);
}

int Worker::msg_recv_multi(MsgDesc* d, void* buffer, std::size_t length, Request* r,
                           rdmx_callback_t callback, void* user_data) {
  if (d != nullptr && r != nullptr && (buffer != nullptr || length == 0)) {
    if (const int ctx = cached_ctx();
        ctx != kNoContext && msg_recv_shared(ctx, d, buffer, length, r, callback, user_data))
        [[likely]] {
      return RDMX_OK;
    }
  }
  const Locked held(*this);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return msg_recv(d, buffer, length, r, callback, user_data);
}

void Worker::release_thread_ctx(Worker& w, std::uint16_t index, pid_t tid) {
  const std::lock_guard<WorkerLock> held(w.lock_);
  if (index < w.threads_.size() && w.threads_[index].owner == tid) {
    w.threads_[index].owner = 0;  // its descriptors still retire into it; the next thread posts
  }
}

void Worker::register_multi(Worker* w) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.workers[w->serial_] = w;
}

void Worker::unregister_multi(Worker* w) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.workers.erase(w->serial_);
}

void Worker::create_send_contexts() {
  // Context 0 now, for the creating thread; MULTI makes the others on first use.
  threads_.reserve(res_.max_threads);
  pool_table_.reserve(res_.max_threads);
  add_thread_ctx(self_tid());
  tx_ = &threads_[0];
  if (multi_) {
    t_ctx = CachedCtx{.serial = serial_, .index = 0};
    t_held.held.emplace_back(serial_, 0);  // freed when the creating thread exits
  }
}

void Worker::add_thread_ctx(pid_t owner) {
  // Made whole before it joins threads_, so that a failure leaves nothing half-made.
  ThreadCtx tc;
  tc.index = static_cast<std::uint16_t>(threads_.size());
  tc.owner = owner;
  tc.send = std::make_unique<eager::SendPool>(*pd_, send_pool_params(tc.index, res_, send_descs_));
  tc.sync.resize(kSyncSlots);
  tc.sync_free.resize(kSyncSlots);
  for (std::uint32_t i = 0; i < kSyncSlots; ++i) {
    tc.sync_free[i] = kSyncSlots - 1 - i;
  }
  pool_table_.push_back(tc.send.get());
  threads_.push_back(std::move(tc));
}

int Worker::progress_multi() {
  if (lock_wanted_.load(std::memory_order_relaxed) != 0) {
    progress_deferred_.fetch_add(1, std::memory_order_relaxed);
    return 0;  // a post, receive or cancel waits for the lock: it goes first
  }
  std::unique_lock<WorkerLock> held(lock_, std::try_to_lock);
  if (!held.owns_lock()) {
    return 0;  // another thread polls: its callbacks deliver what it finds
  }
  (void)enter_caller(/*own=*/false);  // never fails without `own`
  ++stat_mt_whole_takes_;
  ++stat_mt_progress_takes_;
  if (shared_taken_.load(std::memory_order_relaxed) != nullptr) {
    release_shared_taken();
  }
  const int events = progress();
  if (done_head_ == nullptr && failed_uids_.empty() &&
      shared_done_.load(std::memory_order_relaxed) == nullptr) {
    return events;
  }
  Completions done = take_completions();
  held.unlock();
  return events + run_completions(std::move(done));
}

int Worker::poll_any(std::uint32_t max_polls, std::uint64_t spin_gap_us) {
  // MULTI: one poll per call. Spinning here would hold the lock other threads' posts wait for.
  return multi_ ? progress_multi() : poll(max_polls, spin_gap_us);
}

void Worker::destroy(Worker* w) {
  if (w->multi_) {
    unregister_multi(w);  // exiting threads no longer touch it
    // Fails every request while the worker is whole, runs the callbacks with no lock held, then
    // lets threads waiting on those requests (or on anything) leave before freeing.
    Completions done;
    {
      std::lock_guard<WorkerLock> held(w->lock_);
      w->tx_ = &w->threads_[0];  // what is posted now (owed match-acks) goes through context 0
      w->failed_early_ += w->fail_active();
      w->release_shared_taken();
      done = w->take_completions();
    }
    (void)w->run_completions(std::move(done));
    w->destroying_.store(true, std::memory_order_release);
    while (w->waiters_.load(std::memory_order_acquire) != 0) {
      sched_yield();
    }
    w->tx_ = &w->threads_[0];
  }
  delete w;
}

int Worker::caller_send_context() {
  const Locked held(*this, /*own=*/true);
  return held.error() == RDMX_OK ? tx_->index : held.error();
}

ShortLock& Worker::post_lock_for_test(std::uint64_t peer_uid) {
  const Locked held(*this);
  Peer* p = find_peer(peer_uid);
  if (p == nullptr) {
    std::fprintf(stderr, "rdmx: debug::post_lock: no peer %016llx\n",
                 static_cast<unsigned long long>(peer_uid));
    std::abort();
  }
  return p->post_mu;
}

std::vector<debug::SendContextCounts> Worker::send_context_counts() {
  const Locked held(*this);
  std::vector<debug::SendContextCounts> out;
  for (const ThreadCtx& tc : threads_) {
    out.push_back({.posted = tc.send->descs_taken(),
                   .retired = tc.send->descs_taken() - tc.send->descs_in_use(),
                   .routed = tc.routed});
  }
  return out;
}

}  // namespace rdmx::transport
