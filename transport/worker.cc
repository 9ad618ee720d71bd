// Worker construction, statistics and test hooks. Bring-up is in setup.cc, teardown in
// teardown.cc.
#include "transport/worker.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "transport/debug.h"

namespace rdmx::transport {

namespace {

std::uint64_t read_u64_file(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  in >> v;
  return in ? v : 0;
}

}  // namespace

std::string_view to_string(PeerState state) noexcept {
  switch (state) {
    case PeerState::kIdle:
      return "idle";
    case PeerState::kConnecting:
      return "connecting";
    case PeerState::kConnected:
      return "connected";
    case PeerState::kFailed:
      return "failed";
  }
  return "?";
}

Worker::Worker(const rdmx_config_t& config) : config_(config), matcher_(64) {
  if (config_.device != nullptr) {
    device_name_ = config_.device;
  }
  config_.device = nullptr;  // the caller's string need not outlive the call
}

std::uint64_t Worker::node_rnr_count() const {
  return read_u64_file(node_rnr_path_);
}

WrAccount Worker::wqp_account() const {
  WrAccount a;
  for (const auto& pool : pools_) {
    if (pool) {
      a.recv_posted += pool->counters().posted;
      a.recv_reclaimed += pool->counters().reclaimed;
    }
  }
  a.recv_completed = recv_completed_;
  for (const ThreadCtx& t : threads_) {
    a.send_outstanding += t.send->descs_in_use();
  }
  return a;
}

void Worker::stats(rdmx_stats_t* out) const {
  rdmx_stats_t s{};
  for (int c = 0; c < kNumClasses; ++c) {
    const eager::PoolCounters& k = pools_[c]->counters();
    s.srq_posted += k.posted;
    s.srq_consumed += k.consumed;
    s.srq_refills += k.refills;
    s.srq_limit_events += k.limit_events;
    s.recv_mem_bytes += pools_[c]->registered_bytes();
  }
  const std::uint64_t rnr = node_rnr_count();
  s.node_rnr_naks = rnr >= node_rnr_baseline_ ? rnr - node_rnr_baseline_ : 0;
  s.rnr_retry_exceeded = stat_rnr_exceeded_;
  s.ud_retransmits = stat_ud_retransmits_;
  s.ud_duplicates = stat_ud_duplicates_;
  s.ud_dropped_test = stat_ud_dropped_test_;
  s.unexpected = stat_unexpected_;
  s.dropped_malformed = stat_dropped_malformed_;
  s.dropped_foreign = stat_dropped_foreign_;
  s.rc_kicks = stat_rc_kicks_;
  s.ud_qp_resets = stat_ud_qp_resets_;
  s.out_of_window = stat_out_of_window_;
  std::uint64_t qps = ctrl_qp_ ? 1 : 0;
  for (const auto& q : ud_qp_) {
    qps += q ? 1 : 0;
  }
  for (const auto& p : peers_) {
    for (const auto& q : p->rc.qp) {
      qps += q ? 1 : 0;
    }
  }
  s.num_qps = qps;
  s.transport = ud_mode_ ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC;
  if (rndv_) {
    const rendezvous::EngineStats& e = rndv_->stats();
    s.rndv_sends = e.sends;
    s.rndv_recvs = e.recvs;
    s.rndv_zero_copy_bytes = e.zero_copy_bytes;
    s.rndv_copied_bytes = e.copied_bytes;
    s.rndv_read_bytes = e.read_bytes;
    s.rndv_reg_failures = e.reg_failures;
    s.rndv_stale = e.stale;
  }
  if (rcache_) {
    const rendezvous::RegCacheStats r = rcache_->stats();
    s.rndv_reg_hits = r.hits;
    s.rndv_reg_misses = r.misses;
  }
  for (const auto& p : peers_) {
    s.ring_sends += p->rc.ring_sends;
    s.shm_sends += p->shm.sends;
    s.shm_peers += p->shm.on() ? 1 : 0;
    s.rc_connections += p->ud.wqp_state != WriteQpState::kNone ? 1 : 0;
    s.num_qps += p->ud.write_qp ? 1 : 0;
  }
  s.rc_connects = stat_rc_connects_;
  s.rc_retired = stat_rc_retired_;
  s.coalesced_msgs = stat_coalesced_msgs_;
  s.coalesced_batches = stat_coalesced_batches_;
  s.ring_recvs = stat_ring_recvs_;
  s.zcopy_sends = stat_zcopy_sends_;
  s.shm_recvs = stat_shm_recvs_;
  s.shm_cma_bytes = stat_cma_bytes_;
  s.idle_yields = stat_idle_yields_.load(std::memory_order_relaxed);
  s.idle_naps = stat_idle_naps_.load(std::memory_order_relaxed);
  s.spin_polls = stat_spin_polls_;
  s.ring_peers = ring_peers_.size();
  s.send_contexts = threads_.size();
  for (const ThreadCtx& tc : threads_) {
    s.mt_shared_sends += tc.shared_sends;
  }
  s.mt_locked_sends = stat_mt_locked_sends_;
  s.mt_progress_takes = stat_mt_progress_takes_;
  s.mt_whole_takes = stat_mt_whole_takes_;
  s.mt_lock_waits = stat_mt_lock_waits_.load(std::memory_order_relaxed);
  s.mt_post_lock_waits = ud_post_mu_.waits();
  for (const auto& p : peers_) {
    s.mt_post_lock_waits += p->post_mu.waits();
  }
  s.mt_match_lock_waits = match_mu_.waits();
  s.ring_mem_bytes = ring_slab_ ? ring_slab_->registered_bytes() : 0;
  *out = s;
}

void Worker::dump() const {
  std::fprintf(stderr,
               "rdmx dump %016llx (%s): active requests %s, completions %s; matcher: %zu posted, "
               "%zu unexpected; heap bytes %llu\n",
               static_cast<unsigned long long>(uid_), ud_mode_ ? "ud" : "rc",
               active_head_ != nullptr ? "yes" : "no",
               done_head_ != nullptr || shared_done_.load(std::memory_order_relaxed) != nullptr
                   ? "yes"
                   : "no",
               matcher_.posted_count(), matcher_.unexpected_count(),
               static_cast<unsigned long long>(heap_bytes_));
  for (int c = 0; c < kNumPools; ++c) {
    const eager::SrqPool& p = *pools_[c];
    std::fprintf(stderr,
                 "  pool %d: posted %u free %u total %u held %llu consumed %llu refills %llu "
                 "limit %llu\n",
                 c, p.posted(), p.free_count(), p.total(),
                 static_cast<unsigned long long>(p.counters().held),
                 static_cast<unsigned long long>(p.counters().consumed),
                 static_cast<unsigned long long>(p.counters().refills),
                 static_cast<unsigned long long>(p.counters().limit_events));
  }
  const eager::SendPool& sp = *threads_[0].send;
  std::fprintf(stderr,
               "  send: descs in use %u, free buffers %u/%u; dropped: malformed %llu foreign %llu "
               "duplicates %llu test %llu; rc kicks %llu\n",
               sp.descs_in_use(), sp.free_buffers(0), sp.free_buffers(1),
               static_cast<unsigned long long>(stat_dropped_malformed_),
               static_cast<unsigned long long>(stat_dropped_foreign_),
               static_cast<unsigned long long>(stat_ud_duplicates_),
               static_cast<unsigned long long>(stat_ud_dropped_test_),
               static_cast<unsigned long long>(stat_rc_kicks_));
  for (int c = 0; c < kNumClasses; ++c) {
    if (ud_qp_[c]) {
      std::fprintf(stderr, "  ud sq %d: outstanding %u tail %u\n", c, ud_sq_[c].outstanding(),
                   ud_sq_[c].unsignaled_tail());
    }
  }
  std::fprintf(stderr, "  timers: ud next %llu (now %llu), %zu listed; flush list %zu\n",
               static_cast<unsigned long long>(next_ud_timer_us_),
               static_cast<unsigned long long>(CachedClock::read_monotonic_us()),
               ud_timer_list_.size(), flush_list_.size());
  for (const auto& p : peers_) {
    std::fprintf(stderr,
                 "  peer %u uid %016llx %s remote index %u: pending %u acks %zu rx expected %u "
                 "held %zu",
                 p->index, static_cast<unsigned long long>(p->uid), to_string(p->state).data(),
                 p->remote_index, p->pending_count, p->pending_match_acks.size(),
                 p->rx ? p->rx->expected() : 0, p->rx ? p->rx->held() : 0);
    if (p->ud.tx) {
      std::fprintf(stderr, " tx next %u in flight %zu rto %llu deadline %llu ack unacked %zu",
                   p->ud.tx->next_seq(), p->ud.tx->in_flight(),
                   static_cast<unsigned long long>(p->ud.tx->rto_us()),
                   static_cast<unsigned long long>(p->ud.tx->deadline_us()), p->ud.ack->unacked());
    }
    if (p->rc.guard) {
      std::fprintf(stderr, " guard next %u oldest %u sq %u/%u completions %llu",
                   p->rc.guard->next(), p->rc.guard->oldest(), p->rc.sq[0].outstanding(),
                   p->rc.sq[1].outstanding(), static_cast<unsigned long long>(p->rc.completions));
    }
    if (p->shm.on()) {
      std::fprintf(stderr, " shared memory next %u%s", p->shm.next_seq,
                   p->shm.tx.full() ? " (ring full)" : "");
    }
    if (p->rc.tx_ring.slots != 0) {
      std::fprintf(stderr, " ring out %u/%u taken", p->rc.tx_ring.sent, p->rc.tx_ring.taken);
    }
    if (p->rc.rx_ring) {
      std::fprintf(stderr, " ring in %u taken %u unreported%s", p->rc.rx_ring->taken(),
                   p->rc.rx_ring->unreported(),
                   p->rc.rx_ring_open ? (rings_withdrawn_ ? " (withdrawing)" : "") : " (closed)");
    }
    std::fprintf(stderr, "\n");
  }
}

void Worker::hold_refills_for_test(bool hold) noexcept {
  hold_refills_for_test_ = hold;
  if (!hold) {
    for (int c = 0; c < kNumClasses; ++c) {
      (void)pools_[c]->refill(true);  // everything free; re-arms a limit a held event disarmed
    }
  }
}

std::vector<debug::RcReadLimits> Worker::rc_read_limits(std::uint64_t peer_uid) const {
  std::vector<debug::RcReadLimits> out;
  for (const auto& p : peers_) {
    if (p->uid != peer_uid) {
      continue;
    }
    for (const auto& qp : p->rc.qp) {
      if (qp) {
        const ibv_qp_attr a = qp->query(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC);
        out.push_back(
            {.max_rd_atomic = a.max_rd_atomic, .max_dest_rd_atomic = a.max_dest_rd_atomic});
      }
    }
  }
  return out;
}

std::vector<debug::RcPath> Worker::rc_paths(std::uint64_t peer_uid) const {
  std::vector<debug::RcPath> out;
  const Peer* p = nullptr;
  for (const auto& q : peers_) {
    if (q->uid == peer_uid) {
      p = q.get();
    }
  }
  if (p == nullptr) {
    return out;
  }
  // UD mode: the peer's rendezvous write QP, if it has one.
  std::vector<const verbs::QueuePair*> qps;
  for (const auto& qp : p->rc.qp) {
    if (qp) {
      qps.push_back(qp.get());
    }
  }
  if (p->ud.write_qp) {
    qps.push_back(p->ud.write_qp.get());
  }
  for (const verbs::QueuePair* qp : qps) {
    const ibv_qp_attr a = qp->query(IBV_QP_AV | IBV_QP_PKEY_INDEX | IBV_QP_PATH_MTU |
                                    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT);
    out.push_back({.traffic_class = a.ah_attr.grh.traffic_class,
                   .sl = a.ah_attr.sl,
                   .is_global = a.ah_attr.is_global != 0,
                   .sgid_index = a.ah_attr.grh.sgid_index,
                   .pkey_index = a.pkey_index,
                   .path_mtu = 128 << static_cast<int>(a.path_mtu),
                   .timeout = a.timeout,
                   .retry_cnt = a.retry_cnt});
  }
  return out;
}

namespace debug {

std::vector<RcPath> rc_paths(const rdmx_worker_t* worker, std::uint64_t peer_uid) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  return worker->impl->rc_paths(peer_uid);
}

void dump(const rdmx_worker_t* worker) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  worker->impl->dump();
}

WrIds wr_ids(const rdmx_worker_t* worker) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  const WrAccount a = worker->impl->wqp_account();
  return WrIds{.recv_posted = a.recv_posted,
               .recv_completed = a.recv_completed,
               .recv_reclaimed = a.recv_reclaimed,
               .send_outstanding = a.send_outstanding};
}

std::vector<RcReadLimits> rc_read_limits(const rdmx_worker_t* worker, std::uint64_t peer_uid) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  return worker->impl->rc_read_limits(peer_uid);
}

int caller_send_context(rdmx_worker_t* worker) {
  return worker->impl->caller_send_context();
}

std::vector<SendContextCounts> send_context_counts(rdmx_worker_t* worker) {
  return worker->impl->send_context_counts();
}

std::unique_lock<WorkerLock> hold_worker_lock(rdmx_worker_t* worker) {
  return std::unique_lock<WorkerLock>(worker->impl->lock_for_test());
}

std::shared_lock<WorkerLock> hold_worker_lock_shared(rdmx_worker_t* worker) {
  return std::shared_lock<WorkerLock>(worker->impl->lock_for_test());
}

int lock_waiters(const rdmx_worker_t* worker) {
  return worker->impl->lock_waiters();
}

std::uint64_t progress_deferrals(const rdmx_worker_t* worker) {
  return worker->impl->progress_deferrals();
}

int owed_match_acks(const rdmx_worker_t* worker) {
  return worker->impl->owed_match_acks();
}

ShortLock& post_lock(rdmx_worker_t* worker, std::uint64_t peer_uid) {
  return worker->impl->post_lock_for_test(peer_uid);
}

ShortLock& match_lock(rdmx_worker_t* worker) {
  return worker->impl->match_lock_for_test();
}

std::uint32_t srq_posted(const rdmx_worker_t* worker, int size_class) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  return worker->impl->srq_posted(size_class);
}

void hold_srq_refills(rdmx_worker_t* worker, bool hold) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  worker->impl->hold_refills_for_test(hold);
}

bool send_raw(rdmx_worker_t* worker, std::uint64_t peer_uid, const void* bytes, std::size_t length,
              Raw how) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  return worker->impl->send_raw_for_test(peer_uid, bytes, length, how);
}

bool inject_async_event(rdmx_worker_t* worker, ibv_event_type type, EventOn on,
                        std::uint64_t peer_uid) {
  const Worker::Locked held(*worker->impl);  // MULTI: as any C call
  return worker->impl->inject_async_event(type, on, peer_uid);
}

}  // namespace debug

}  // namespace rdmx::transport
