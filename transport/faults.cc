// Faults the device reports (asynchronous events), each ending in a defined state:
//   - an RC QP of one peer in error (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR): that peer fails, its
//     requests with RDMX_ERR_UNREACHABLE; UD mode's on-demand write QP is only retired (the
//     peer's messages go over UD, its rendezvous falls back to copies);
//   - what every peer depends on (a UD data or control QP in error, CQ_ERR, SRQ_ERR,
//     DEVICE_FATAL): the worker fails (fail_worker): every peer and every posted receive fails
//     with RDMX_ERR_IO, the message naming the event, and new requests and endpoints are
//     refused with it; the application destroys the worker, which still follows the verbs rules;
//   - PORT_ERR (the link went down): traffic waits, as RC retries and UD resends ride through a
//     flap; a port not back (PORT_ACTIVE) within peer_timeout_ms fails the worker.
// Everything else (LAST_WQE_REACHED outside teardown, COMM_EST, GID_CHANGE, ...) is only said at
// verbose 2. Events arrive from handle_async_events (progress, every kAsyncEventPeriodUs, and
// rdmx_worker_arm, since the async fd is in the sleeper's epoll set: wake_set.h).
#include <cstdio>
#include <string>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

void Worker::handle_async_events() {
  try {
    while (auto e = events_->poll(std::chrono::milliseconds(0))) {
      on_async_event(*e);  // SRQ limit events went to the pools' handlers inside poll()
    }
  } catch (const verbs::Error& e) {
    verbs::log_verb_failure(e.verb(), e.errnum(), "reading async events");
    if (wake_) {
      wake_->drop_async_fd();  // else it would wake a sleeper at once, every time
    }
  }
}

void Worker::on_async_event(const ibv_async_event& e) {
  const ibv_event_type t = e.event_type;
  const std::string name = verbs::event_name(t);
  switch (t) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
      const ibv_qp* qp = e.element.qp;
      for (auto& p : peers_) {
        for (auto& q : p->rc.qp) {
          if (q && q->get() == qp) {
            for (auto& sq : p->rc.sq) {
              sq.close();  // as for a failed send: nothing more is posted to the dead QPs
            }
            fail_peer(*p, RDMX_ERR_UNREACHABLE, (name + " on its RC QP").c_str());
            return;
          }
        }
        if (p->ud.write_qp && p->ud.write_qp->get() == qp) {
          if (p->ud.wqp_state == WriteQpState::kReady) {
            p->ud.wqp_sq.close();
            (void)retire_wqp(*p, true);
          }
          return;
        }
      }
      bool shared = ctrl_qp_ && ctrl_qp_->get() == qp;
      for (auto& q : ud_qp_) {
        shared |= q && q->get() == qp;
      }
      if (shared) {
        fail_worker(RDMX_ERR_IO, name + " on a UD QP that every peer uses");
      }
      return;
    }
    case IBV_EVENT_CQ_ERR:
      fail_worker(RDMX_ERR_IO, name + ": a completion queue overflowed");
      return;
    case IBV_EVENT_SRQ_ERR:
      fail_worker(RDMX_ERR_IO, name + ": a shared receive queue failed");
      return;
    case IBV_EVENT_DEVICE_FATAL:
      fail_worker(RDMX_ERR_IO, name + ": the device failed");
      return;
    case IBV_EVENT_PORT_ERR:
      if (e.element.port_num == port_ && port_down_us_ == 0) {
        port_down_us_ = now_us();
        std::fprintf(stderr,
                     "rdmx: %s port %u went down (%s): traffic waits for it; the worker fails "
                     "if it is not back within %u ms (peer_timeout_ms)\n",
                     device_name_.c_str(), port_, name.c_str(), config_.peer_timeout_ms);
      }
      return;
    case IBV_EVENT_PORT_ACTIVE:
      if (e.element.port_num == port_ && port_down_us_ != 0) {
        std::fprintf(stderr, "rdmx: %s port %u is back after %llu ms\n", device_name_.c_str(),
                     port_, static_cast<unsigned long long>((now_us() - port_down_us_) / 1000));
        port_down_us_ = 0;
      }
      return;
    default:
      if (config_.verbose >= 2) {
        std::fprintf(stderr, "rdmx: async event %s\n", name.c_str());
      }
      return;
  }
}

bool Worker::inject_async_event(ibv_event_type type, debug::EventOn on, std::uint64_t peer_uid) {
  ibv_async_event e{};
  e.event_type = type;
  switch (on) {
    case debug::EventOn::kRecvCq:
      e.element.cq = recv_cq_->get();
      break;
    case debug::EventOn::kSmallSrq:
      e.element.srq = pools_[kPoolSmall]->srq();
      break;
    case debug::EventOn::kCtrlQp:
      e.element.qp = ctrl_qp_->get();
      break;
    case debug::EventOn::kPeerRcQp: {
      Peer* p = find_peer(peer_uid);
      if (p == nullptr || !p->rc.qp[0]) {
        return false;
      }
      e.element.qp = p->rc.qp[0]->get();
      break;
    }
    case debug::EventOn::kPort:
      e.element.port_num = static_cast<int>(port_);
      break;
    case debug::EventOn::kDevice:
      break;
  }
  on_async_event(e);
  return true;
}

void Worker::check_port(std::uint64_t now) {
  // `now` may predate port_down_us_ (read earlier in the same progress call): no subtraction.
  if (port_down_us_ != 0 && now >= port_down_us_ + std::uint64_t{config_.peer_timeout_ms} * 1000) {
    fail_worker(RDMX_ERR_IO, "port " + std::to_string(port_) + " down (IBV_EVENT_PORT_ERR) for " +
                                 std::to_string(config_.peer_timeout_ms) + " ms (peer_timeout_ms)");
  }
}

void Worker::note_ud_qp_error(const eager::SendQueue* queue) noexcept {
  if (queue == &ctrl_sq_) {
    ud_qps_in_error_ |= 1u << kNumClasses;
  }
  for (int c = 0; c < kNumClasses; ++c) {
    if (queue == &ud_sq_[c] && ud_qp_[c]) {
      ud_qps_in_error_ |= 1u << c;
    }
  }
}

void Worker::recover_ud_qps() {
  for (int i = 0; i <= kNumClasses; ++i) {
    const bool ctrl = i == kNumClasses;
    if ((ud_qps_in_error_ & (1u << i)) == 0) {
      continue;
    }
    eager::SendQueue& sq = ctrl ? ctrl_sq_ : ud_sq_[i];
    verbs::QueuePair* qp = ctrl ? ctrl_qp_.get() : ud_qp_[i].get();
    // Once every WR posted before the error has completed (flushed), the QP holds nothing of
    // ours: it comes back with the same number and qkey, so peers' address handles stay valid,
    // and reliability resends what the error lost.
    if (qp == nullptr || sq.outstanding() != 0) {
      continue;
    }
    try {
      if (qp->query(IBV_QP_STATE).qp_state == IBV_QPS_SQE) {
        qp->to_rts_from_sqe();  // the verbs state for a UD send error: its receives are intact
      } else {
        // ERR (rxe): through RESET, which on some providers also discards the QP's completions
        // still in the receive CQ: take them first.
        while (ops_.poll_recv(*this, recv_cq_->get()) > 0) {
        }
        qp->to_reset();
        bring_up_ud(*qp);
      }
    } catch (const verbs::Error& e) {
      fail_worker(RDMX_ERR_IO,
                  std::string("a UD QP in error could not be brought back: ") + e.what());
      return;
    }
    ud_qps_in_error_ &= ~(1u << i);
    ++stat_ud_qp_resets_;
    if (config_.verbose >= 1) {
      std::fprintf(stderr, "rdmx: UD QP %u was in error after a failed send: back to RTS\n",
                   qp->get()->qp_num);
    }
  }
}

void Worker::fail_worker(int code, const std::string& why) {
  if (failed_code_ != 0) {
    return;
  }
  failed_code_ = code;
  port_down_us_ = 0;  // said once
  std::fprintf(stderr,
               "rdmx: worker %016llx on %s failed: %s; its requests fail and new ones are "
               "refused: destroy it\n",
               static_cast<unsigned long long>(uid_), device_name_.c_str(), why.c_str());
  const std::string reason = "the worker failed: " + why;
  for (auto& p : peers_) {
    fail_peer(*p, code, reason.c_str());
  }
  (void)fail_posted_recvs(nullptr, code);  // any-source receives too
}

}  // namespace rdmx::transport
