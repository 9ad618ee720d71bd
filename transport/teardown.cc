// Worker teardown, one step per resource, in the order the verbs man pages require: requests
// fail first, buffered sends get a bounded time to leave, peers hear we are going, then QPs go
// to ERR, drain and are destroyed before the SRQs they use, memory regions before the PD, CQs
// after every QP, the PD and the device last. Each step copes with a setup that stopped
// half-way (setup.cc), and what it finds goes into the destroy report tests read.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "transport/debug.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

std::mutex g_report_mutex;
debug::DestroyReport g_last_report;

}  // namespace

Worker::~Worker() {
  teardown();
}

void Worker::teardown() noexcept {
  const auto t0 = std::chrono::steady_clock::now();
  debug::DestroyReport report;
  report.valid = true;
  fail_all_requests(report);
  flush_before_close(report);
  if (multi_) {
    (void)run_completions();  // what the flush's progress found (MULTI progress leaves it listed)
  }
  closing_ = true;
  say_goodbye();
  shut_down_qps(report);
  release_remote_access(report);
  release_held_messages();
  destroy_queues(report);
  close_segment();

  report.teardown_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: worker %016llx destroyed in %llu us: %u QPs (%u with LAST_WQE_REACHED), "
                 "%llu wr_ids outstanding, %u requests failed\n",
                 static_cast<unsigned long long>(uid_),
                 static_cast<unsigned long long>(report.teardown_us), report.qps,
                 report.qps_last_wqe, static_cast<unsigned long long>(report.wr_ids.outstanding()),
                 report.requests_failed);
  }
  report.refused_moves = refused_moves();
  std::lock_guard<std::mutex> lock(g_report_mutex);
  g_last_report = report;
}

// 1. Fail every active request and run every pending callback. Rendezvous transfers first: the
//    engine completes their requests (registrations of writes still in flight are kept until the
//    QPs are drained, step 4).
void Worker::fail_all_requests(debug::DestroyReport& report) {
  report.requests_failed = failed_early_ + fail_active();
  (void)run_completions();
}

std::uint32_t Worker::fail_active() {
  if (rndv_) {
    rndv_->cancel_all(RDMX_ERR_CANCELED);
  }
  std::uint32_t failed = 0;
  while (active_head_ != nullptr) {
    Request* r = active_head_;
    ++failed;
    if (r->type == ReqType::kRma) {
      cancel_rma(r);  // deactivates it
      continue;
    }
    if (r->type == ReqType::kRecv && r->recv.posted()) {
      (void)matcher_.cancel(r->recv);
    }
    if (r->type == ReqType::kSend && r->sync_slot != kNoIndex) {
      ThreadCtx& tc = threads_[r->thread];
      SyncSlot& s = tc.sync[r->sync_slot];
      s.request = nullptr;
      s.generation = static_cast<std::uint8_t>(s.generation + 1);
      tc.sync_free.push_back(r->sync_slot);
      r->sync_slot = kNoIndex;
    }
    complete(r, RDMX_ERR_CANCELED);  // deactivates it
  }
  for (auto& p : peers_) {
    p->pending_head = p->pending_tail = nullptr;
    p->pending_count = 0;
  }
  return failed;
}

// 2. Standard sends are complete for the caller once buffered, so give what is still
//    unacknowledged (UD) or incomplete (RC) a bounded time to reach live peers before the QPs go
//    to ERR, and send the acks we owe.
void Worker::flush_before_close(debug::DestroyReport& report) {
  if (!send_cq_ || threads_.empty()) {
    return;
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::min<std::uint32_t>(config_.peer_timeout_ms, 2000));
  for (;;) {
    bool busy = false;
    for (auto& p : peers_) {
      if (p->state != PeerState::kConnected) {
        continue;
      }
      busy |= p->ud.tx && p->ud.tx->in_flight() > 0;
      busy |= !p->pending_match_acks.empty() || p->batch.count() != 0;
      for (int c = 0; c < kNumClasses; ++c) {
        if (p->rc.qp[c] && p->rc.sq[c].outstanding() > 0) {
          busy = true;
          if (p->rc.sq[c].unsignaled_tail() != 0) {
            (void)post_rc_flush(*p, c);
          }
        }
      }
    }
    if (!busy || std::chrono::steady_clock::now() >= deadline) {
      report.flush_complete = !busy;
      break;
    }
    (void)progress();
  }
  for (auto& p : peers_) {
    if (p->state == PeerState::kConnected && p->ud.ack && p->ud.ack->unacked() > 0) {
      (void)post_ud_ack(*p);
    }
  }
}

// 3. Tell connected peers we are going (best effort, unacknowledged), and let those sends leave
//    before the QPs go to ERR.
void Worker::say_goodbye() {
  if (!ctrl_qp_ || !send_cq_) {
    return;
  }
  bool any = false;
  for (auto& p : peers_) {
    if (p->state == PeerState::kConnected && p->ah) {
      any |= send_disconnect(*p);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (any && ctrl_sq_.outstanding() > 0 && std::chrono::steady_clock::now() < deadline) {
    (void)poll_cqs();
  }
}

// Every QP the worker owns with its send queue: RC (per peer and class), write QPs, UD, control.
std::vector<std::pair<verbs::QueuePair*, eager::SendQueue*>> Worker::all_qps() {
  std::vector<std::pair<verbs::QueuePair*, eager::SendQueue*>> qps;
  for (auto& p : peers_) {
    for (int c = 0; c < kNumClasses; ++c) {
      if (p->rc.qp[c]) {
        qps.emplace_back(p->rc.qp[c].get(), &p->rc.sq[c]);
      }
    }
    if (p->ud.write_qp) {
      qps.emplace_back(p->ud.write_qp.get(), &p->ud.wqp_sq);
    }
  }
  for (int c = 0; c < kNumClasses; ++c) {
    if (ud_qp_[c]) {
      qps.emplace_back(ud_qp_[c].get(), &ud_sq_[c]);
    }
  }
  if (ctrl_qp_) {
    qps.emplace_back(ctrl_qp_.get(), &ctrl_sq_);
  }
  return qps;
}

// 4. QPs, in the verbs/ teardown sequence: ERR, LAST_WQE_REACHED (bounded), drain, destroy. All
//    QPs go to ERR first so that their flushes and events overlap.
void Worker::shut_down_qps(debug::DestroyReport& report) {
  destroy_retired_qps();
  const auto qps = all_qps();
  for (auto [qp, sq] : qps) {
    sq->close();
    if (qp->state() != IBV_QPS_RESET) {
      try {
        qp->to_error();
      } catch (const verbs::Error& e) {
        verbs::log_verb_failure(e.verb(), e.errnum(), "QP to ERR at teardown");
      }
    }
  }
  const auto on_wc = [this](const ibv_wc& wc) { on_drain_completion(wc); };
  // rxe never raises LAST_WQE_REACHED (kernel 6.1): once one QP has waited for it in vain, the
  // others (moved to ERR together, so their events would be here by now) do not wait.
  bool wait_last_wqe = true;
  ibv_ah* marker_ah = nullptr;
  for (auto& p : peers_) {
    if (p->ah) {
      marker_ah = p->ah->get();
      break;
    }
  }
  for (auto [qp, sq] : qps) {
    verbs::TeardownOptions opt;
    opt.events = wait_last_wqe ? &*events_ : nullptr;
    opt.last_wqe_timeout = std::chrono::milliseconds(50);
    opt.drain_timeout = std::chrono::milliseconds(1000);
    opt.quiet_period = std::chrono::milliseconds(2);
    opt.ud_marker_ah = marker_ah;
    verbs::TeardownReport r;
    try {
      r = qp->shutdown(on_wc, opt);
    } catch (...) {
      r.destroy_error = EIO;
    }
    ++report.qps;
    report.qps_last_wqe += r.last_wqe_reached ? 1 : 0;
    wait_last_wqe = wait_last_wqe && (r.last_wqe_reached || !r.last_wqe_awaited);
    report.drain_timeouts += r.drain_timed_out ? 1 : 0;
    report.destroy_errors += r.destroy_error != 0 ? 1 : 0;
    // Unsignalled WRs that had completed before ERR never produce a completion: the drain
    // marker, flushed behind them, retires them.
    (void)sq->retire_all(pool_table_, [](eager::SendDesc&) {});
  }
  // Anything left on the CQs (other QPs' completions seen after their own drain).
  if (send_cq_ && recv_cq_) {
    std::array<ibv_wc, kPollBatch> wcs{};
    for (ibv_cq* cq : {send_cq_->get(), recv_cq_->get()}) {
      for (int n; (n = ibv_poll_cq(cq, kPollBatch, wcs.data())) > 0;) {
        for (int i = 0; i < n; ++i) {
          on_wc(wcs[static_cast<std::size_t>(i)]);
        }
      }
    }
  }
  for (auto& p : peers_) {
    p->rc.qp = {};
    p->ud.write_qp.reset();
  }
  ud_qp_ = {};
  ctrl_qp_.reset();
}

// No peer can write into our eager rings or read or write our rendezvous buffers any more: the
// rings' memory, then the rendezvous registrations, then the cache's MRs (before the PD).
void Worker::release_remote_access(debug::DestroyReport& report) {
  for (auto& p : peers_) {
    p->rc.rx_ring.reset();
  }
  ring_peers_.clear();
  if (ring_slab_ && ring_slab_->destroy() != 0) {
    ++report.destroy_errors;
  }
  ring_slab_.reset();
  if (rndv_) {
    rndv_->release_all();
  }
  rndv_.reset();
  rndv_hooks_.reset();
  rcache_.reset();
}

// Held and unexpected messages give their buffers back.
void Worker::release_held_messages() {
  for (auto& p : peers_) {
    if (p->rx) {
      p->rx->drain_held([this](protocol::Seq, std::uint64_t cookie) {
        release_message(reinterpret_cast<MsgDesc*>(cookie));
      });
    }
  }
  for (auto& chunk : desc_chunks_) {
    for (std::size_t i = 0; i < kDescChunk; ++i) {
      MsgDesc& d = chunk[i];
      if (d.queued()) {
        (void)matcher_.remove_unexpected(d);
      }
      if (d.heap != nullptr) {
        std::free(d.heap);
        d.heap = nullptr;
      }
    }
  }
}

// 5. SRQs (no QP uses them any more), then everything else in reverse creation order.
void Worker::destroy_queues(debug::DestroyReport& report) {
  for (auto& pool : pools_) {
    if (pool && pool->destroy_srq() != 0) {
      ++report.destroy_errors;
    }
  }
  const WrAccount acc = wqp_account();
  report.wr_ids = debug::WrIds{.recv_posted = acc.recv_posted,
                               .recv_completed = acc.recv_completed,
                               .recv_reclaimed = acc.recv_reclaimed,
                               .send_outstanding = acc.send_outstanding};
  for (auto& p : peers_) {
    p->ah.reset();
  }
  pool_table_.clear();
  threads_.clear();
  for (auto& pool : pools_) {
    pool.reset();
  }
  if (send_cq_ && send_cq_->destroy() != 0) {
    ++report.destroy_errors;
  }
  if (recv_cq_ && recv_cq_->destroy() != 0) {
    ++report.destroy_errors;
  }
  send_cq_.reset();
  recv_cq_.reset();
  wake_.reset();  // made after the channel, closed before it (and the context: its async fd)
  if (cq_channel_ && cq_channel_->destroy() != 0) {  // after its CQs (ibv_destroy_comp_channel)
    ++report.destroy_errors;
  }
  cq_channel_.reset();
  events_.reset();
  if (pd_ && pd_->destroy() != 0) {
    ++report.destroy_errors;
  }
  pd_.reset();
  ctx_.reset();
}

namespace debug {

DestroyReport last_destroy_report() {
  std::lock_guard<std::mutex> lock(g_report_mutex);
  return g_last_report;
}

}  // namespace debug

}  // namespace rdmx::transport
