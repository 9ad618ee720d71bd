#include "verbs/async_event.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "verbs/error.h"

namespace rdmx::verbs {
namespace {

// read_one's deadline. time_point::min() for a look without waiting, which reads no clock: in an
// emulated guest each clock_gettime is a system call, and the progress loop looks often.
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() <= 0 ? std::chrono::steady_clock::time_point::min()
                              : std::chrono::steady_clock::now() + timeout;
}

}  // namespace

const void* event_object(const ibv_async_event& event) noexcept {
  switch (event.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return event.element.qp;
    case IBV_EVENT_CQ_ERR:
      return event.element.cq;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return event.element.srq;
    case IBV_EVENT_WQ_FATAL:
      return event.element.wq;
    default:
      return nullptr;  // port and device events carry a port number or nothing
  }
}

const char* event_name(ibv_event_type type) noexcept {
  switch (type) {
#define RDMX_EVENT_NAME(x) \
  case x:                  \
    return #x;
    RDMX_EVENT_NAME(IBV_EVENT_CQ_ERR)
    RDMX_EVENT_NAME(IBV_EVENT_QP_FATAL)
    RDMX_EVENT_NAME(IBV_EVENT_QP_REQ_ERR)
    RDMX_EVENT_NAME(IBV_EVENT_QP_ACCESS_ERR)
    RDMX_EVENT_NAME(IBV_EVENT_COMM_EST)
    RDMX_EVENT_NAME(IBV_EVENT_SQ_DRAINED)
    RDMX_EVENT_NAME(IBV_EVENT_PATH_MIG)
    RDMX_EVENT_NAME(IBV_EVENT_PATH_MIG_ERR)
    RDMX_EVENT_NAME(IBV_EVENT_DEVICE_FATAL)
    RDMX_EVENT_NAME(IBV_EVENT_PORT_ACTIVE)
    RDMX_EVENT_NAME(IBV_EVENT_PORT_ERR)
    RDMX_EVENT_NAME(IBV_EVENT_LID_CHANGE)
    RDMX_EVENT_NAME(IBV_EVENT_PKEY_CHANGE)
    RDMX_EVENT_NAME(IBV_EVENT_SM_CHANGE)
    RDMX_EVENT_NAME(IBV_EVENT_SRQ_ERR)
    RDMX_EVENT_NAME(IBV_EVENT_SRQ_LIMIT_REACHED)
    RDMX_EVENT_NAME(IBV_EVENT_QP_LAST_WQE_REACHED)
    RDMX_EVENT_NAME(IBV_EVENT_CLIENT_REREGISTER)
    RDMX_EVENT_NAME(IBV_EVENT_GID_CHANGE)
    RDMX_EVENT_NAME(IBV_EVENT_WQ_FATAL)
#undef RDMX_EVENT_NAME
  }
  return "IBV_EVENT_(unknown)";
}

AsyncEventReader::AsyncEventReader(const Context& ctx) : ctx_(ctx.get()) {
  const int flags = fcntl(ctx_->async_fd, F_GETFL);
  if (flags == -1 || fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK) == -1) {
    throw Error("ibv_get_async_event", errno, "fcntl(O_NONBLOCK) on the async event fd");
  }
}

int AsyncEventReader::on(ibv_event_type type, const void* object, Handler handler) {
  const int id = next_id_++;
  handlers_.push_back(Registration{id, type, object, std::move(handler)});
  return id;
}

void AsyncEventReader::remove_handler(int id) {
  std::erase_if(handlers_, [id](const Registration& r) { return r.id == id; });
}

std::optional<ibv_async_event> AsyncEventReader::read_one(
    std::chrono::steady_clock::time_point deadline) {
  pollfd pfd{.fd = ctx_->async_fd, .events = POLLIN, .revents = 0};
  for (;;) {
    ibv_async_event raw{};
    errno = 0;
    if (ibv_get_async_event(ctx_, &raw) == 0) {
      const ibv_async_event copy = raw;
      ibv_ack_async_event(&raw);  // at once: an un-acked event makes the object's destroy hang
      ++events_read_;
      return copy;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw Error("ibv_get_async_event", errno != 0 ? errno : EIO);
    }
    if (deadline == std::chrono::steady_clock::time_point::min()) {
      return std::nullopt;  // deadline_after(0): no waiting
    }
    // Rounded up: poll(2) takes whole milliseconds, and a truncated remainder ended waits up to
    // 1 ms before their deadline (a 500 ms LAST_WQE_REACHED wait returned after 499.6 ms).
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return std::nullopt;
    }
    if (::poll(&pfd, 1, static_cast<int>(left.count())) == -1 && errno != EINTR) {
      throw Error("ibv_get_async_event", errno, "poll on the async event fd");
    }
  }
}

bool AsyncEventReader::dispatch(const ibv_async_event& event) {
  const void* object = event_object(event);
  bool taken = false;
  // Handlers may register or remove handlers: iterate over a snapshot of the ids.
  std::vector<int> ids;
  for (const Registration& r : handlers_) {
    if (r.type == event.event_type && (r.object == nullptr || r.object == object)) {
      ids.push_back(r.id);
    }
  }
  for (int id : ids) {
    auto it = std::find_if(handlers_.begin(), handlers_.end(),
                           [id](const Registration& r) { return r.id == id; });
    if (it != handlers_.end()) {
      Handler h = it->handler;
      h(event);
      taken = true;
    }
  }
  return taken;
}

std::optional<ibv_async_event> AsyncEventReader::poll(std::chrono::milliseconds timeout) {
  if (!backlog_.empty()) {
    const ibv_async_event e = backlog_.front();
    backlog_.pop_front();
    return e;
  }
  const auto deadline = deadline_after(timeout);
  for (;;) {
    std::optional<ibv_async_event> e = read_one(deadline);
    if (!e) {
      return std::nullopt;
    }
    if (!dispatch(*e)) {
      return e;
    }
  }
}

std::optional<ibv_async_event> AsyncEventReader::wait_for(ibv_event_type type, const void* object,
                                                          std::chrono::milliseconds timeout) {
  const auto matches = [&](const ibv_async_event& e) {
    return e.event_type == type && (object == nullptr || event_object(e) == object);
  };
  if (auto it = std::find_if(backlog_.begin(), backlog_.end(), matches); it != backlog_.end()) {
    const ibv_async_event e = *it;
    backlog_.erase(it);
    return e;
  }
  const auto deadline = deadline_after(timeout);
  for (;;) {
    std::optional<ibv_async_event> e = read_one(deadline);
    if (!e) {
      return std::nullopt;
    }
    if (matches(*e)) {
      return e;
    }
    if (!dispatch(*e)) {
      backlog_.push_back(*e);
    }
  }
}

}  // namespace rdmx::verbs
