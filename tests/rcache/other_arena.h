// Runs code on a helper thread whose allocations come from a malloc arena of its own (mmap'ed),
// never from the brk heap.
//
// Heap-trimming tests register through it: glibc trims only above the last live chunk of the
// heap, and a registration allocates small objects (the cache entry, a map node, the provider's
// MR struct - calloc, which bypasses the thread cache) that, made on the main thread, would land
// above the block at the heap top and keep it from being trimmed. run() hands the work over and
// waits for it, so whatever the work touches is still used by one thread at a time. Nothing
// here allocates after construction.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace rdmx::test {

class OtherArena {
 public:
  OtherArena() : thread_([this] { loop(); }) {}
  OtherArena(const OtherArena&) = delete;
  OtherArena& operator=(const OtherArena&) = delete;
  ~OtherArena() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Runs f() on the helper thread and waits for it. f must not throw.
  template <typename F>
  void run(F& f) {
    std::unique_lock<std::mutex> lock(mu_);
    fn_ = [](void* arg) { (*static_cast<F*>(arg))(); };
    arg_ = &f;
    cv_.notify_all();
    cv_.wait(lock, [this] { return fn_ == nullptr; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return fn_ != nullptr || quit_; });
      if (fn_ == nullptr) {
        return;
      }
      fn_(arg_);
      fn_ = nullptr;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  void (*fn_)(void*) = nullptr;
  void* arg_ = nullptr;
  bool quit_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace rdmx::test
