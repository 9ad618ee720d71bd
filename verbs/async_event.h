// Reader of a device's asynchronous events (ibv_get_async_event / ibv_ack_async_event).
//
// ibv_get_async_event(3): "All async events that ibv_get_async_event() returns must be
// acknowledged ... destroying an object (CQ, SRQ or QP) will wait for all affiliated events for
// the object to be acknowledged". An event read and forgotten makes a later destroy hang for
// ever, so this reader acknowledges every event right after copying it, before anything else
// (a handler, a throw) can intervene. The copy's object pointers are then identities only: the
// owner may already have destroyed the object when it looks at the event.
//
// The context's async fd is switched to non-blocking so reads can time out. Not thread-safe:
// one thread reads a device's events (typically the progress thread; teardown borrows it).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "verbs/context.h"

namespace rdmx::verbs {

// The object an affiliated event refers to (QP, CQ, SRQ or WQ); nullptr for port and device
// events.
const void* event_object(const ibv_async_event& event) noexcept;
// "IBV_EVENT_SRQ_LIMIT_REACHED"-style name for logs (ibv_event_type_str gives prose).
const char* event_name(ibv_event_type type) noexcept;

class AsyncEventReader {
 public:
  using Handler = std::function<void(const ibv_async_event&)>;

  // Keeps ctx.get(); declare the reader after the Context it reads. Throws Error if the fd
  // cannot be made non-blocking.
  explicit AsyncEventReader(const Context& ctx);

  AsyncEventReader(AsyncEventReader&&) noexcept = default;
  AsyncEventReader& operator=(AsyncEventReader&&) noexcept = default;
  AsyncEventReader(const AsyncEventReader&) = delete;
  AsyncEventReader& operator=(const AsyncEventReader&) = delete;
  ~AsyncEventReader() = default;

  // Calls `handler` for each event of `type` on `object` (nullptr: any object). Returns an id
  // for remove_handler. Handlers run on the reading thread, after the event was acknowledged.
  int on(ibv_event_type type, const void* object, Handler handler);
  void remove_handler(int id);

  // Returns the next event no handler took, waiting up to `timeout`: first from the backlog
  // (events wait_for passed over), then from the device. Events a handler took are dispatched
  // and not returned. std::nullopt on timeout.
  std::optional<ibv_async_event> poll(std::chrono::milliseconds timeout);

  // Waits up to `timeout` for an event of `type` on `object` (nullptr: any object) and returns
  // it without calling handlers. Other events read meanwhile go to their handlers or, if none
  // takes them, to the backlog that poll() returns later.
  std::optional<ibv_async_event> wait_for(ibv_event_type type, const void* object,
                                          std::chrono::milliseconds timeout);

  std::size_t backlog_size() const noexcept { return backlog_.size(); }
  // Events read (and acknowledged) since construction.
  std::uint64_t events_read() const noexcept { return events_read_; }

 private:
  struct Registration {
    int id;
    ibv_event_type type;
    const void* object;
    Handler handler;
  };

  // Reads and acks one event, waiting up to the deadline. nullopt on timeout.
  std::optional<ibv_async_event> read_one(std::chrono::steady_clock::time_point deadline);
  bool dispatch(const ibv_async_event& event);

  ibv_context* ctx_ = nullptr;
  std::vector<Registration> handlers_;
  std::deque<ibv_async_event> backlog_;
  int next_id_ = 1;
  std::uint64_t events_read_ = 0;
};

}  // namespace rdmx::verbs
