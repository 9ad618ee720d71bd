// The C API (include/rdmx/rdmx.h): argument checks and translation, and in MULTI thread mode
// the worker lock around each call (Worker::Locked; progress, waits and destroy lock inside).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "rdmx/rdmx.h"
#include "transport/config.h"
#include "transport/send_now.h"
#include "transport/worker.h"

using rdmx::transport::Request;
using rdmx::transport::SendBytes;
using rdmx::transport::Worker;
using Locked = rdmx::transport::Worker::Locked;

namespace {

bool valid_request(const rdmx_request_t* r) {
  return r != nullptr && rdmx::transport::to_request(r)->magic == rdmx::transport::kRequestMagic;
}

// rdmx_put and rdmx_get.
int rma(rdmx_ep_t* ep, bool get, void* buffer, size_t length, uint32_t lkey, uint64_t remote_addr,
        uint32_t rkey, rdmx_request_t* request, rdmx_callback_t callback, void* user_data) {
  if (ep == nullptr || ep->peer == nullptr || ep->worker == nullptr || request == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*ep->worker, /*own=*/true);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return ep->worker->rma(*ep->peer, get, buffer, length, lkey, remote_addr, rkey,
                         rdmx::transport::to_request(request), callback, user_data);
}

}  // namespace

extern "C" {

int rdmx_worker_create(const rdmx_config_t* config, rdmx_worker_t** worker) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  *worker = nullptr;
  rdmx_config_t c;
  if (config == nullptr) {
    rdmx_config_init(&c);
    if (const int rc = rdmx_config_from_env(&c); rc != RDMX_OK) {
      return rc;
    }
  } else {
    c = *config;
  }
  Worker* w = nullptr;
  const int rc = Worker::create(c, &w);
  if (rc == RDMX_OK) {
    *worker = w->handle();
  }
  return rc;
}

void rdmx_worker_destroy(rdmx_worker_t* worker) {
  if (worker != nullptr) {
    Worker::destroy(worker->impl);
  }
}

int rdmx_worker_address(rdmx_worker_t* worker, const void** address, size_t* length) {
  if (worker == nullptr || address == nullptr || length == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  *address = worker->impl->address();
  *length = worker->impl->address_length();
  return RDMX_OK;
}

int rdmx_worker_progress(rdmx_worker_t* worker) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  return worker->impl->progress_any();
}

int rdmx_worker_poll(rdmx_worker_t* worker, uint32_t max_polls, uint32_t spin_gap_us) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  return worker->impl->poll_any(max_polls, spin_gap_us);
}

void rdmx_worker_idle(rdmx_worker_t* worker, int events, uint32_t yield_after_us,
                      uint32_t nap_after_us) {
  if (worker != nullptr) {
    const auto policy = [](std::uint32_t us) {
      return us == RDMX_IDLE_NEVER ? rdmx::transport::IdleBackoff::kNever : std::uint64_t{us};
    };
    worker->impl->idle(events, policy(yield_after_us), policy(nap_after_us));
  }
}

int rdmx_worker_event_fd(rdmx_worker_t* worker, int* fd) {
  if (worker == nullptr || fd == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  *fd = worker->impl->event_fd();
  return RDMX_OK;
}

int rdmx_worker_arm(rdmx_worker_t* worker) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  return worker->impl->arm();
}

uint64_t rdmx_worker_uid(const rdmx_worker_t* worker) {
  return worker == nullptr ? 0 : worker->impl->uid();
}

int rdmx_worker_check_peer(rdmx_worker_t* worker, const void* address, size_t length, char* why,
                           size_t why_length) {
  if (worker == nullptr || address == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  std::string text;
  const int rc = worker->impl->check_peer(address, length, &text);
  if (why != nullptr && why_length != 0) {
    const std::size_t n = std::min(text.size(), why_length - 1);
    std::memcpy(why, text.data(), n);
    why[n] = '\0';
  }
  return rc;
}

int rdmx_ep_create(rdmx_worker_t* worker, const void* address, size_t length, rdmx_ep_t** ep) {
  if (worker == nullptr || address == nullptr || ep == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return worker->impl->ep_create(address, length, ep);
}

void rdmx_ep_destroy(rdmx_ep_t* ep) {
  if (ep != nullptr && ep->peer != nullptr && ep->worker != nullptr) {
    Worker& w = *ep->worker;
    const Locked held(w);
    if (held.error() == RDMX_OK) {
      w.ep_destroy(*ep->peer);
    }
  }
}

int rdmx_worker_set_peer_failure_callback(rdmx_worker_t* worker, rdmx_peer_failure_cb_t callback,
                                          void* arg) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  worker->impl->set_peer_failure_callback(callback, arg);
  return RDMX_OK;
}

int rdmx_worker_set_recv_sink(rdmx_worker_t* worker, rdmx_recv_sink_t sink, void* arg) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  worker->impl->set_recv_sink(sink, arg);
  return RDMX_OK;
}

int rdmx_tag_send(rdmx_ep_t* ep, const void* buffer, size_t length, uint64_t tag, unsigned flags,
                  rdmx_request_t* request, rdmx_callback_t callback, void* user_data) {
  if (ep == nullptr || ep->peer == nullptr || ep->worker == nullptr || request == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  Worker& w = *ep->worker;
  Request* r = rdmx::transport::to_request(request);
  if (w.multi()) [[unlikely]] {
    return w.tag_send_multi(*ep->peer, buffer, length, tag, flags, r, callback, user_data);
  }
  return w.tag_send(*ep->peer, buffer, length, tag, flags, r, callback, user_data);
}

int rdmx_tag_inject(rdmx_ep_t* ep, const void* buffer, size_t length, uint64_t tag,
                    unsigned flags) {
  if (ep == nullptr || ep->peer == nullptr || ep->worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  Worker& w = *ep->worker;
  if (w.multi()) [[unlikely]] {
    return w.tag_inject_multi(*ep->peer, SendBytes{nullptr, 0, buffer, length}, tag, flags);
  }
  return w.tag_inject(*ep->peer, buffer, length, tag, flags);
}

int rdmx_tag_inject_header(rdmx_ep_t* ep, uint64_t header, const void* buffer, size_t length,
                           uint64_t tag, unsigned flags) {
  if (ep == nullptr || ep->peer == nullptr || ep->worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  Worker& w = *ep->worker;
  const SendBytes bytes{&header, sizeof(header), buffer, length};
  if (w.multi()) [[unlikely]] {
    return w.tag_inject_multi(*ep->peer, bytes, tag, flags);
  }
  return w.tag_inject(*ep->peer, bytes, tag, flags);
}

int rdmx_tag_send_zcopy(rdmx_ep_t* ep, const void* head, size_t head_length, const void* buffer,
                        size_t length, uint32_t lkey, uint64_t tag, rdmx_request_t* request,
                        rdmx_callback_t callback, void* user_data) {
  if (ep == nullptr || ep->peer == nullptr || ep->worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*ep->worker, /*own=*/true);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return ep->worker->tag_send_zcopy(*ep->peer, SendBytes{head, head_length, buffer, length}, lkey,
                                    tag, rdmx::transport::to_request(request), callback, user_data);
}

struct ibv_pd* rdmx_worker_pd(rdmx_worker_t* worker) {
  return worker == nullptr ? nullptr : worker->impl->pd();
}

int rdmx_put(rdmx_ep_t* ep, const void* buffer, size_t length, uint32_t lkey, uint64_t remote_addr,
             uint32_t rkey, rdmx_request_t* request, rdmx_callback_t callback, void* user_data) {
  // The write only reads the buffer: the const goes where ibv_sge wants a plain address.
  return rma(ep, /*get=*/false, const_cast<void*>(buffer), length, lkey, remote_addr, rkey, request,
             callback, user_data);
}

int rdmx_get(rdmx_ep_t* ep, void* buffer, size_t length, uint32_t lkey, uint64_t remote_addr,
             uint32_t rkey, rdmx_request_t* request, rdmx_callback_t callback, void* user_data) {
  return rma(ep, /*get=*/true, buffer, length, lkey, remote_addr, rkey, request, callback,
             user_data);
}

int rdmx_tag_recv(rdmx_worker_t* worker, void* buffer, size_t length, uint64_t source, uint64_t tag,
                  uint64_t tag_mask, rdmx_request_t* request, rdmx_callback_t callback,
                  void* user_data) {
  if (worker == nullptr || request == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  Worker& w = *worker->impl;
  Request* r = rdmx::transport::to_request(request);
  if (w.multi()) [[unlikely]] {
    return w.tag_recv_multi(buffer, length, source, tag, tag_mask, r, callback, user_data);
  }
  return w.tag_recv(buffer, length, source, tag, tag_mask, r, callback, user_data);
}

int rdmx_tag_probe(rdmx_worker_t* worker, uint64_t source, uint64_t tag, uint64_t tag_mask,
                   rdmx_status_t* status, rdmx_message_t** message) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (worker->impl->multi()) [[unlikely]] {
    return worker->impl->probe_shared(source, tag, tag_mask, status, message);
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return worker->impl->probe(source, tag, tag_mask, status, message);
}

int rdmx_tag_msg_recv(rdmx_worker_t* worker, rdmx_message_t* message, void* buffer, size_t length,
                      rdmx_request_t* request, rdmx_callback_t callback, void* user_data) {
  if (worker == nullptr || message == nullptr || request == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  auto* const d = reinterpret_cast<rdmx::transport::MsgDesc*>(message);
  Request* const r = rdmx::transport::to_request(request);
  Worker& w = *worker->impl;
  if (w.multi()) [[unlikely]] {
    return w.msg_recv_multi(d, buffer, length, r, callback, user_data);
  }
  return w.msg_recv(d, buffer, length, r, callback, user_data);
}

int rdmx_request_test(const rdmx_request_t* request, rdmx_status_t* status) {
  if (!valid_request(request)) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Request* r = rdmx::transport::to_request(request);
  if (rdmx::transport::state_of(r) != rdmx::transport::ReqState::kDone) {
    return RDMX_INPROGRESS;
  }
  if (status != nullptr) {
    *status = r->status;
  }
  return r->status.error;
}

int rdmx_request_wait(rdmx_worker_t* worker, rdmx_request_t* request, rdmx_status_t* status,
                      int timeout_ms) {
  if (worker == nullptr || !valid_request(request)) {
    return RDMX_ERR_INVALID_PARAM;
  }
  return worker->impl->wait(rdmx::transport::to_request(request), status, timeout_ms);
}

int rdmx_request_cancel(rdmx_worker_t* worker, rdmx_request_t* request) {
  if (worker == nullptr || !valid_request(request)) {
    return RDMX_ERR_INVALID_PARAM;
  }
  Request* const r = rdmx::transport::to_request(request);
  if (worker->impl->multi()) [[unlikely]] {
    return worker->impl->cancel_shared(r);
  }
  return worker->impl->cancel(r);
}

int rdmx_tag_recv_fail_any_source(rdmx_worker_t* worker, uint64_t tag, uint64_t mask) {
  if (worker == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  return static_cast<int>(worker->impl->fail_any_source_recvs(tag, mask, RDMX_ERR_UNREACHABLE));
}

int rdmx_worker_stats(const rdmx_worker_t* worker, rdmx_stats_t* stats) {
  if (worker == nullptr || stats == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  const Locked held(*worker->impl);
  if (held.error() != RDMX_OK) [[unlikely]] {
    return held.error();
  }
  worker->impl->stats(stats);
  return RDMX_OK;
}

}  // extern "C"
