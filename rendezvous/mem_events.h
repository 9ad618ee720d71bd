// Memory-release notifications from UCX's memory hooks (libucm), delivered to an
// InvalidationQueue.
//
// libucm patches mmap, munmap, mremap, shmdt, sbrk, brk and madvise (binary instrumentation of
// the libc functions, so glibc's own internal calls from free() and malloc_trim() are seen too)
// and reports UCM_EVENT_VM_UNMAPPED *before* the memory goes away: for munmap, for mremap's old
// range, for shmdt, for a negative sbrk/brk (malloc trimming the heap top), for
// madvise(MADV_DONTNEED) and for mmap(MAP_FIXED) over an existing mapping. malloc's
// large blocks (above M_MMAP_THRESHOLD) are mmap'ed, so freeing one is a munmap; small blocks
// live in the brk heap, returned to the OS by trimming. UCM_EVENT_MEM_TYPE_FREE covers device
// memory freed through hooked GPU runtimes (none is loaded today; subscribing costs nothing).
//
// The callback runs in whichever thread released memory, inside the libc call, with UCM's
// event lock held for reading: it only pushes the range to the queue (see
// invalidation_queue.h). ucm_unset_event_handler takes that lock for writing, so once the
// subscription is destroyed no callback is still running with its queue.
//
// Process-wide effects (UCX 1.13, measured): libucm patches those functions when it is loaded,
// before any subscription, so every process linking rdmx_rendezvous runs its mmap/munmap/brk
// through UCM's dispatch. UCX_MEM_EVENTS=no stops that; subscriptions then fail (active() is
// false) and RegCache switches caching off. A host with its own release hooks (Open MPI's
// memory patcher) can forward them with report_unmapped(); a duplicate report only costs a
// lookup.
#pragma once

#include <cstddef>
#include <string>

#include "rendezvous/invalidation_queue.h"

namespace rdmx::rendezvous {

class MemEventSubscription {
 public:
  // Installs the UCM hooks (first use in the process) and a handler feeding `queue`, which
  // must outlive the subscription. Never throws for UCM failures: check active().
  explicit MemEventSubscription(InvalidationQueue& queue) noexcept;
  MemEventSubscription(const MemEventSubscription&) = delete;
  MemEventSubscription& operator=(const MemEventSubscription&) = delete;
  ~MemEventSubscription();

  // False when UCM refused (events disabled with UCX_MEM_EVENTS=no, hooks could not be
  // installed); error() then says why.
  bool active() const noexcept { return active_; }
  const std::string& error() const noexcept { return error_; }

  // The UCM handler priority (order among handlers only: VM_UNMAPPED handlers always run
  // before the memory is released). The value UCX's own registration caches use.
  static constexpr int kPriority = 1000;

 private:
  InvalidationQueue* queue_;
  bool active_ = false;
  std::string error_;
};

// Delivers "[addr, addr+len) is about to be unmapped" to every subscription (ucm_vm_munmap).
void report_unmapped(const void* addr, std::size_t len) noexcept;

}  // namespace rdmx::rendezvous
