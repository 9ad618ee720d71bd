#include "rendezvous/mem_events.h"

#include <ucm/api/ucm.h>
#include <ucs/type/status.h>

#include <cstdint>

namespace rdmx::rendezvous {

namespace {

constexpr int kEvents = UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MEM_TYPE_FREE;

// Runs inside munmap/free/brk of any thread: no allocation, no logging, no cache access.
void on_unmapped(ucm_event_type_t type, ucm_event_t* event, void* arg) {
  auto* queue = static_cast<InvalidationQueue*>(arg);
  std::uintptr_t start = 0;
  std::size_t size = 0;
  if (type == UCM_EVENT_VM_UNMAPPED) {
    start = reinterpret_cast<std::uintptr_t>(event->vm_unmapped.address);
    size = event->vm_unmapped.size;
  } else if (type == UCM_EVENT_MEM_TYPE_FREE) {
    start = reinterpret_cast<std::uintptr_t>(event->mem_type.address);
    size = event->mem_type.size;
  } else {
    return;
  }
  if (size == 0) {
    // GPU frees report size 0 ("the allocation at this address"): invalidate the page.
    size = 1;
  }
  const std::uintptr_t end = start + size < start ? UINTPTR_MAX : start + size;
  queue->push(start, end);
}

}  // namespace

MemEventSubscription::MemEventSubscription(InvalidationQueue& queue) noexcept : queue_(&queue) {
  const ucs_status_t status = ucm_set_event_handler(kEvents, kPriority, &on_unmapped, queue_);
  if (status == UCS_OK) {
    active_ = true;
    return;
  }
  try {
    error_ = std::string("ucm_set_event_handler(VM_UNMAPPED|MEM_TYPE_FREE): ") +
             ucs_status_string(status);
    if (status == UCS_ERR_UNSUPPORTED) {
      error_ += " (memory events disabled, e.g. UCX_MEM_EVENTS=no)";
    }
  } catch (...) {
    // Out of memory while describing the failure: active() still says it.
  }
}

MemEventSubscription::~MemEventSubscription() {
  if (active_) {
    ucm_unset_event_handler(kEvents, &on_unmapped, queue_);
  }
}

void report_unmapped(const void* addr, std::size_t len) noexcept {
  ucm_vm_munmap(const_cast<void*>(addr), len);
}

}  // namespace rdmx::rendezvous
