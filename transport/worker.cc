// Worker bring-up, teardown and statistics.
#include "transport/worker.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "transport/debug.h"
#include "verbs/error.h"
#include "verbs/mr.h"

namespace rdmx::transport {

namespace {

std::mutex g_report_mutex;
debug::DestroyReport g_last_report;
std::atomic<std::uint32_t> g_worker_counter{0};

std::uint32_t mtu_bytes(ibv_mtu mtu) {
  return 128u << static_cast<unsigned>(mtu);
}

const char* link_layer_name(std::uint8_t ll) {
  return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

// Thrown for setup failures that are not a failed verb: carries the rdmx code.
struct SetupError {
  int code;
  std::string message;
};

// The rdmx code and the fix for a verbs failure during setup.
int code_for(const verbs::Error& e, std::string* fix) {
  switch (e.errnum()) {
    case ENOSYS:
      *fix = "this kernel has no RDMA support: run under ci/softroce/run or load rdma_rxe";
      return RDMX_ERR_NO_DEVICE;
    case ENODEV:
      *fix = "check `ibv_devices`; set RDMX_DEVICE to one of them";
      return RDMX_ERR_NO_DEVICE;
    case ENOENT:
      *fix = "set RDMX_GID_INDEX (see `ibv_devinfo -v` or /sys/class/infiniband/DEV/ports/N/gids)";
      return RDMX_ERR_NO_DEVICE;
    case ENOMEM:
    case EPERM:
      *fix = "raise the locked-memory limit (`ulimit -l unlimited`) or lower RDMX_SRQ_DEPTH";
      return RDMX_ERR_NO_MEMORY;
    case EINVAL:
      *fix = "a queue size exceeds a device limit: lower RDMX_SRQ_DEPTH / buffer sizes";
      return RDMX_ERR_UNSUPPORTED;
    default:
      *fix = "RDMX_VERBOSE=2 shows the configuration used";
      return RDMX_ERR_IO;
  }
}

std::string kib(std::size_t bytes) {
  return std::to_string((bytes + 1023) / 1024) + " KiB";
}

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

int Worker::create(const rdmx_config_t& config, Worker** out) {
  std::unique_ptr<Worker> w(new (std::nothrow) Worker(config));
  if (!w) {
    return RDMX_ERR_NO_MEMORY;
  }
  try {
    w->setup();
  } catch (const SetupError& e) {
    std::fprintf(stderr, "rdmx: worker creation failed: %s\n", e.message.c_str());
    return e.code;
  } catch (const verbs::Error& e) {
    std::string fix;
    const int code = code_for(e, &fix);
    std::fprintf(stderr, "rdmx: worker creation failed on %s: %s; fix: %s\n",
                 w->device_name_.empty() ? "(first active device)" : w->device_name_.c_str(),
                 e.what(), fix.c_str());
    return code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rdmx: worker creation failed: out of memory\n");
    return RDMX_ERR_NO_MEMORY;
  }
  *out = w.release();
  return RDMX_OK;
}

eager::SrqPool::Params Worker::data_pool_params(std::uint8_t c, const Resolved& r) noexcept {
  return {.pool_id = c,
          .kind = r.ud ? protocol::WrKind::kUdRecv : protocol::WrKind::kSrqRecv,
          .thread = 0,
          .generation = 1,
          .capacity = c == kPoolSmall ? r.small_buf : r.large_buf,
          .grh_bytes = r.ud ? static_cast<std::uint32_t>(eager::kGrhBytes) : 0,
          .depth = r.srq_depth,
          .spare = r.srq_depth / 2 + r.refill_batch,
          .watermark = r.low_watermark,
          .batch = r.refill_batch};
}

eager::SrqPool::Params Worker::ctrl_pool_params() noexcept {
  return {.pool_id = kPoolCtrl,
          .kind = protocol::WrKind::kUdRecv,
          .thread = 0,
          .generation = 1,
          .capacity = kCtrlCapacity,
          .grh_bytes = static_cast<std::uint32_t>(eager::kGrhBytes),
          .depth = kCtrlDepth,
          .spare = 16,
          .watermark = 8,
          .batch = 8};
}

eager::SendPool::Params Worker::send_pool_params(std::uint16_t thread, const Resolved& r) noexcept {
  const auto hdr = static_cast<std::uint32_t>(protocol::kHeaderSize);
  return {.thread = thread,
          .capacity = {std::max(hdr + r.small_buf, hdr + kCtrlCapacity), hdr + r.large_buf},
          .count = {kSendSmallBuffers, kSendLargeBuffers},
          .descs = kSendDescs};
}

std::size_t Worker::setup_pinned_bytes(const Resolved& r) noexcept {
  std::size_t bytes = eager::SrqPool::registered_bytes_for(ctrl_pool_params()) +
                      eager::SendPool::registered_bytes_for(send_pool_params(0, r));
  for (std::uint8_t c = 0; c < kNumClasses; ++c) {
    bytes += eager::SrqPool::registered_bytes_for(data_pool_params(c, r));
  }
  return bytes;
}

void Worker::fit_pinned_memory(std::uint32_t mtu) {
  const std::optional<std::size_t> limit = verbs::pinning_limit();
  if (!limit) {
    return;
  }
  // At most 3/4 of the limit: the rest is for rendezvous buffers and eager rings, which fall
  // back to copies when their registration is refused; the receive queues have no fallback.
  const std::size_t budget = *limit / 4 * 3;
  const std::size_t wanted = setup_pinned_bytes(res_);
  if (wanted <= budget) {
    return;
  }
  rdmx_config_t c = config_;
  Resolved r = res_;
  while (setup_pinned_bytes(r) > budget && r.srq_depth > kMinSrqDepth) {
    c.srq_depth = std::max(r.srq_depth / 2, kMinSrqDepth);
    c.srq_low_watermark = 0;  // the default for the new depth
    std::string why;
    if (resolve(c, mtu, &r, &why) != RDMX_OK) {
      throw SetupError{RDMX_ERR_INVALID_PARAM, why};
    }
  }
  const std::size_t least = setup_pinned_bytes(r);
  if (least > budget) {
    throw SetupError{RDMX_ERR_NO_MEMORY,
                     "the locked-memory limit (ulimit -l) is " + kib(*limit) + ", and rdmx pins " +
                         kib(wanted) + " of receive and send buffers at start (" + kib(least) +
                         " at the smallest SRQ depth, " + std::to_string(kMinSrqDepth) +
                         "), which must stay within 3/4 of the limit: raise the limit to " +
                         kib(least / 3 * 4 + 4096) +
                         " or more (`ulimit -l unlimited`, or a memlock line in "
                         "/etc/security/limits.conf), or lower RDMX_LARGE_BUF (now " +
                         std::to_string(res_.large_buf) + " bytes; the eager limit follows it)"};
  }
  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: locked-memory limit %s (ulimit -l): SRQ depth %u instead of %u, so that "
                 "the %s pinned at start stay within 3/4 of it; raise the limit for the full "
                 "depth\n",
                 kib(*limit).c_str(), r.srq_depth, res_.srq_depth, kib(least).c_str());
  }
  res_ = r;
}

void Worker::bring_up_ud(verbs::QueuePair& qp) {
  qp.to_init(verbs::UdInitAttr{.qkey = kQkey, .port_num = port_, .pkey_index = 0});
  qp.to_rtr();
  qp.to_rts(verbs::UdRtsAttr{.sq_psn = 0});
}

void Worker::setup() {
  // The verbs layer's informational lines follow the most verbose worker (MCA or RDMX_VERBOSE).
  if (config_.verbose > verbs::log_level()) {
    verbs::set_log_level(config_.verbose);
  }
  // Device and port.
  ctx_.emplace(verbs::Context::open(device_name_));
  device_name_ = ctx_->name();
  const ibv_device_attr dev = ctx_->query_device().orig_attr;
  if (config_.port == 0) {
    port_ = ctx_->first_active_port();
    if (port_ == 0) {
      throw SetupError{RDMX_ERR_NO_DEVICE,
                       "no active port on " + device_name_ + ": set RDMX_DEVICE/RDMX_PORT"};
    }
  } else {
    // Checked here: ibv_query_port's EINVAL for a missing port would read as a size problem.
    const int nports = dev.phys_port_cnt;
    if (config_.port > nports) {
      throw SetupError{RDMX_ERR_NO_DEVICE,
                       device_name_ + " has no port " + std::to_string(config_.port) +
                           " (its ports: 1.." + std::to_string(nports) +
                           "): set RDMX_PORT to one of them, or 0 for the first active port"};
    }
    port_ = static_cast<std::uint8_t>(config_.port);
  }
  port_attr_ = ctx_->query_port(port_);
  // The vendor ids the kernel's software drivers report (rxe_param.h, siw.h).
  constexpr std::uint32_t kRxeVendorId = 0xffffff;
  constexpr std::uint32_t kSiwVendorId = 0x626d74;
  software_device_ = dev.vendor_id == kRxeVendorId || dev.vendor_id == kSiwVendorId;
  if (port_attr_.state != IBV_PORT_ACTIVE) {
    throw SetupError{RDMX_ERR_NO_DEVICE, "port " + std::to_string(port_) + " of " + device_name_ +
                                             " is not active: set RDMX_DEVICE/RDMX_PORT"};
  }
  if (config_.gid_index >= port_attr_.gid_tbl_len) {
    throw SetupError{RDMX_ERR_NO_DEVICE,
                     "GID index " + std::to_string(config_.gid_index) + " is beyond the " +
                         std::to_string(port_attr_.gid_tbl_len) + " GIDs of " + device_name_ +
                         " port " + std::to_string(port_) + ": set RDMX_GID_INDEX"};
  }
  if (config_.gid_index >= 0) {
    gid_index_ = static_cast<std::uint32_t>(config_.gid_index);
  } else if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET) {
    gid_index_ = verbs::find_gid_index(*ctx_, port_);  // ENOENT: no RoCE v2 IPv4 GID
  } else {
    gid_index_ = 0;
  }
  gid_ = verbs::query_gid(*ctx_, port_, gid_index_);
  if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET && verbs::is_zero(gid_)) {
    throw SetupError{RDMX_ERR_NO_DEVICE, "GID index " + std::to_string(gid_index_) + " of " +
                                             device_name_ + " port " + std::to_string(port_) +
                                             " is empty: set RDMX_GID_INDEX"};
  }

  // Sizes.
  std::string why;
  if (resolve(config_, mtu_bytes(port_attr_.active_mtu), &res_, &why) != RDMX_OK) {
    throw SetupError{RDMX_ERR_INVALID_PARAM, why};
  }
  fit_pinned_memory(mtu_bytes(port_attr_.active_mtu));
  ud_mode_ = res_.ud;
  rd_atomic_ =
      static_cast<std::uint8_t>(std::clamp(std::min(dev.max_qp_rd_atom, dev.max_qp_init_rd_atom), 1,
                                           static_cast<int>(res_.rc_max_rd_atomic)));
  update_rc_credit_window();
  uid_ = config_.uid;
  if (uid_ == 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    uid_ = derive_uid(host, static_cast<std::uint32_t>(getpid()),
                      g_worker_counter.fetch_add(1, std::memory_order_relaxed));
  }
  std::random_device rd;
  instance_ =
      (std::uint64_t{rd()} << 32) ^ rd() ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (instance_ == 0) {
    instance_ = 1;
  }
  rng_ = instance_ | 1;
  drop_threshold_ = static_cast<std::uint32_t>(std::min(config_.ud_drop_rate, 1.0) * 4294967295.0);

  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: %s port %u (%s, mtu %u) gid[%u] %s, transport %s (%u expected peers, "
                 "UD from %u), classes %u/%u B, srq depth %u watermark %u batch %u, eager limit "
                 "%zu, uid %016llx\n",
                 device_name_.c_str(), port_, link_layer_name(port_attr_.link_layer),
                 mtu_bytes(port_attr_.active_mtu), gid_index_, verbs::to_string(gid_).c_str(),
                 ud_mode_ ? "ud" : "rc", config_.expected_peers, config_.auto_ud_peers,
                 res_.small_buf, res_.large_buf, res_.srq_depth, res_.low_watermark,
                 res_.refill_batch, res_.eager_limit, static_cast<unsigned long long>(uid_));
  }

  events_.emplace(*ctx_);
  pd_.emplace(verbs::ProtectionDomain::create(*ctx_));
  const int nthreads = 1;
  send_cq_.emplace(verbs::CompletionQueue::create(
      *ctx_, static_cast<int>(kSendDescs * nthreads + kSendCqSlack)));
  recv_cq_.emplace(verbs::CompletionQueue::create(
      *ctx_, static_cast<int>(2 * res_.srq_depth + kCtrlDepth + kSendCqSlack)));

  // Receive pools: one SRQ per size class, plus the control QP's.
  for (std::uint8_t c = 0; c < kNumClasses; ++c) {
    pools_[c] = std::make_unique<eager::SrqPool>(*pd_, data_pool_params(c, res_));
  }
  pools_[kPoolCtrl] = std::make_unique<eager::SrqPool>(*pd_, ctrl_pool_params());
  for (int c = 0; c < kNumPools; ++c) {
    eager::SrqPool* p = pools_[c].get();
    events_->on(IBV_EVENT_SRQ_LIMIT_REACHED, p->srq(), [this, p, c](const ibv_async_event&) {
      if (hold_refills_for_test_ && c < kNumClasses) {
        p->note_limit_event();  // hold_refills_for_test(false) refills, which re-arms
      } else {
        (void)p->on_limit_event();
      }
    });
  }

  // Send resources of the (single, for now) posting thread. A context joins threads_ only whole,
  // so that a setup that fails half-way tears down only what exists.
  for (int t = 0; t < nthreads; ++t) {
    ThreadCtx tc;
    tc.index = static_cast<std::uint16_t>(t);
    tc.send = std::make_unique<eager::SendPool>(*pd_, send_pool_params(tc.index, res_));
    tc.sync.resize(kSyncSlots);
    tc.sync_free.resize(kSyncSlots);
    for (std::uint32_t i = 0; i < kSyncSlots; ++i) {
      tc.sync_free[i] = kSyncSlots - 1 - i;
    }
    threads_.push_back(std::move(tc));
  }

  // UD QPs: the control QP (always) and, in UD mode, one data QP per size class. The first one
  // finds the largest inline size the device takes.
  auto make_ud = [&](verbs::SharedReceiveQueue& srq, std::uint32_t depth) {
    static constexpr std::uint32_t kInlineTry[] = {512, 256, 128, 64, 0};
    for (const std::uint32_t inl : kInlineTry) {
      if (max_inline_ != 0 && inl > max_inline_) {
        continue;
      }
      try {
        auto qp = std::make_unique<verbs::QueuePair>(
            verbs::QueuePair::create(*pd_, verbs::QpConfig{.type = IBV_QPT_UD,
                                                           .send_cq = &*send_cq_,
                                                           .recv_cq = &*recv_cq_,
                                                           .srq = &srq,
                                                           .caps = {.max_send_wr = depth,
                                                                    .max_recv_wr = 0,
                                                                    .max_send_sge = 2,
                                                                    .max_recv_sge = 1,
                                                                    .max_inline_data = inl},
                                                           .sq_sig_all = false}));
        max_inline_ = qp->caps().max_inline_data;
        bring_up_ud(*qp);
        return qp;
      } catch (const verbs::Error& e) {
        if (inl == 0 || e.verb() != "ibv_create_qp") {
          throw;
        }
      }
    }
    throw verbs::Error("ibv_create_qp", EINVAL, "UD QP");
  };
  ctrl_qp_ = make_ud(pools_[kPoolCtrl]->srq_object(), kCtrlSendDepth);
  ctrl_sq_ = eager::SendQueue(ctrl_qp_->get(), kCtrlSendDepth, kSignalEvery);
  if (ud_mode_) {
    for (int c = 0; c < kNumClasses; ++c) {
      ud_qp_[c] = make_ud(pools_[c]->srq_object(), kUdSendDepth);
      ud_sq_[c] = eager::SendQueue(ud_qp_[c]->get(), kUdSendDepth, kSignalEvery);
    }
  }

  // The port's RNR NAK counter counts every process on the node; stats() reports it as such, from
  // this baseline (rxe exposes it; other devices may not).
  node_rnr_path_ = "/sys/class/infiniband/" + device_name_ + "/ports/" + std::to_string(port_) +
                   "/hw_counters/rcvd_rnr_err";
  node_rnr_baseline_ = read_u64_file(node_rnr_path_);

  WorkerAddress a;
  a.transport = static_cast<std::uint8_t>(ud_mode_ ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC);
  a.port = port_;
  a.caps = static_cast<std::uint8_t>(kCapRc | (ud_mode_ ? kCapUd : 0));
  a.uid = uid_;
  a.instance = instance_;
  std::memcpy(a.gid.data(), gid_.raw, 16);
  a.lid = port_attr_.lid;
  a.link_layer = port_attr_.link_layer;
  a.mtu = mtu_bytes(port_attr_.active_mtu);
  a.ctrl_qpn = ctrl_qp_->qp_num();
  if (ud_mode_) {
    a.ud_qpn = {ud_qp_[0]->qp_num(), ud_qp_[1]->qp_num()};
  }
  a.class_capacity = {res_.small_buf, res_.large_buf};
  a.max_inline = max_inline_;
  a.rd_atomic = rd_atomic_;
  address_bytes_ = encode_address(a);

  setup_rendezvous();
}

Worker::~Worker() {
  teardown();
}

void Worker::teardown() noexcept {
  const auto t0 = std::chrono::steady_clock::now();
  debug::DestroyReport report;
  report.valid = true;

  // 1. Fail every active request and run every pending callback. Rendezvous transfers first:
  //    the engine completes their requests (registrations of writes still in flight are kept
  //    until the QPs are drained, step 3).
  if (rndv_) {
    rndv_->cancel_all(RDMX_ERR_CANCELED);
  }
  while (active_head_ != nullptr) {
    Request* r = active_head_;
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
    ++report.requests_failed;
    complete(r, RDMX_ERR_CANCELED);  // deactivates it
  }
  for (auto& p : peers_) {
    p->pending_head = p->pending_tail = nullptr;
    p->pending_count = 0;
  }
  (void)run_completions();

  // 2. Flush: standard sends are complete for the caller once buffered, so give what is still
  //    unacknowledged (UD) or incomplete (RC) a bounded time to reach live peers before the QPs
  //    go to ERR, and send the acks we owe.
  if (send_cq_ && !threads_.empty()) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(std::min<std::uint32_t>(config_.peer_timeout_ms, 2000));
    for (;;) {
      bool busy = false;
      for (auto& p : peers_) {
        if (p->state != PeerState::kConnected) {
          continue;
        }
        busy |= p->ud_tx && p->ud_tx->in_flight() > 0;
        busy |= !p->pending_match_acks.empty() || p->batch.count() != 0;
        for (int c = 0; c < kNumClasses; ++c) {
          if (p->rc_qp[c] && p->rc_sq[c].outstanding() > 0) {
            busy = true;
            if (p->rc_sq[c].unsignaled_tail() != 0) {
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
      if (p->state == PeerState::kConnected && p->ud_ack && p->ud_ack->unacked() > 0) {
        (void)post_ud_ack(*p);
      }
    }
  }
  closing_ = true;

  // 3. Tell connected peers we are going (best effort, unacknowledged), and let those sends
  //    leave before the QPs go to ERR.
  if (ctrl_qp_ && send_cq_) {
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

  // 4. QPs, in the verbs/ teardown sequence: ERR, LAST_WQE_REACHED (bounded), drain, destroy.
  //    All QPs go to ERR first so that their flushes and events overlap.
  destroy_retired_qps();
  std::vector<std::pair<verbs::QueuePair*, eager::SendQueue*>> qps;
  for (auto& p : peers_) {
    for (int c = 0; c < kNumClasses; ++c) {
      if (p->rc_qp[c]) {
        qps.emplace_back(p->rc_qp[c].get(), &p->rc_sq[c]);
      }
    }
    if (p->write_qp) {
      qps.emplace_back(p->write_qp.get(), &p->wqp_sq);
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
    if (r.last_wqe_reached) {
      ++report.qps_last_wqe;
    } else if (r.last_wqe_awaited) {
      wait_last_wqe = false;
    }
    if (r.drain_timed_out) {
      ++report.drain_timeouts;
    }
    if (r.destroy_error != 0) {
      ++report.destroy_errors;
    }
    // Unsignalled WRs that had completed before ERR never produce a completion: the drain
    // marker, flushed behind them, retires them.
    if (!threads_.empty()) {
      (void)sq->retire_all(*threads_[0].send, [](eager::SendDesc&) {});
    }
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
    p->rc_qp = {};
    p->write_qp.reset();
  }
  ud_qp_ = {};
  ctrl_qp_.reset();
  // No peer can write into our eager rings any more.
  for (auto& p : peers_) {
    p->rx_ring.reset();
  }
  ring_peers_.clear();
  if (ring_slab_ && ring_slab_->destroy() != 0) {
    ++report.destroy_errors;
  }
  ring_slab_.reset();
  // No write can read or land any more: drop the rendezvous registrations, then the cache's
  // MRs (before the PD).
  if (rndv_) {
    rndv_->release_all();
  }
  rndv_.reset();
  rndv_hooks_.reset();
  rcache_.reset();

  // Held and unexpected messages give their buffers back.
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

  // 5. SRQs (no QP uses them any more), then everything else in reverse creation order.
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
  events_.reset();
  if (pd_ && pd_->destroy() != 0) {
    ++report.destroy_errors;
  }
  pd_.reset();
  ctx_.reset();

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
  std::lock_guard<std::mutex> lock(g_report_mutex);
  g_last_report = report;
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
  const std::uint64_t rnr = read_u64_file(node_rnr_path_);
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
    for (const auto& q : p->rc_qp) {
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
    s.rc_connections += p->wqp_state != WriteQpState::kNone ? 1 : 0;
    s.num_qps += p->write_qp ? 1 : 0;
  }
  s.rc_connects = stat_rc_connects_;
  s.rc_retired = stat_rc_retired_;
  s.coalesced_msgs = stat_coalesced_msgs_;
  s.coalesced_batches = stat_coalesced_batches_;
  s.ring_sends = stat_ring_sends_;
  s.ring_recvs = stat_ring_recvs_;
  s.idle_yields = stat_idle_yields_;
  s.spin_polls = stat_spin_polls_;
  s.ring_peers = ring_peers_.size();
  s.ring_mem_bytes = ring_slab_ ? ring_slab_->registered_bytes() : 0;
  *out = s;
}

void Worker::dump() const {
  std::fprintf(stderr,
               "rdmx dump %016llx (%s): active requests %s, completions %s; matcher: %zu posted, "
               "%zu unexpected; heap bytes %llu\n",
               static_cast<unsigned long long>(uid_), ud_mode_ ? "ud" : "rc",
               active_head_ != nullptr ? "yes" : "no", done_head_ != nullptr ? "yes" : "no",
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
    if (p->ud_tx) {
      std::fprintf(stderr, " tx next %u in flight %zu rto %llu deadline %llu ack unacked %zu",
                   p->ud_tx->next_seq(), p->ud_tx->in_flight(),
                   static_cast<unsigned long long>(p->ud_tx->rto_us()),
                   static_cast<unsigned long long>(p->ud_tx->deadline_us()), p->ud_ack->unacked());
    }
    if (p->rc_guard) {
      std::fprintf(stderr, " guard next %u oldest %u sq %u/%u completions %llu",
                   p->rc_guard->next(), p->rc_guard->oldest(), p->rc_sq[0].outstanding(),
                   p->rc_sq[1].outstanding(), static_cast<unsigned long long>(p->rc_completions));
    }
    if (p->tx_ring.slots != 0) {
      std::fprintf(stderr, " ring out %u/%u taken", p->tx_ring.sent, p->tx_ring.taken);
    }
    if (p->rx_ring) {
      std::fprintf(stderr, " ring in %u taken %u unreported", p->rx_ring->taken(),
                   p->rx_ring->unreported());
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
    for (const auto& qp : p->rc_qp) {
      if (qp) {
        const ibv_qp_attr a = qp->query(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC);
        out.push_back(
            {.max_rd_atomic = a.max_rd_atomic, .max_dest_rd_atomic = a.max_dest_rd_atomic});
      }
    }
  }
  return out;
}

namespace debug {

void dump(const rdmx_worker_t* worker) {
  worker->impl->dump();
}

WrIds wr_ids(const rdmx_worker_t* worker) {
  const WrAccount a = worker->impl->wqp_account();
  return WrIds{.recv_posted = a.recv_posted,
               .recv_completed = a.recv_completed,
               .recv_reclaimed = a.recv_reclaimed,
               .send_outstanding = a.send_outstanding};
}

std::vector<RcReadLimits> rc_read_limits(const rdmx_worker_t* worker, std::uint64_t peer_uid) {
  return worker->impl->rc_read_limits(peer_uid);
}

std::uint32_t srq_posted(const rdmx_worker_t* worker, int size_class) {
  return worker->impl->srq_posted(size_class);
}

void hold_srq_refills(rdmx_worker_t* worker, bool hold) {
  worker->impl->hold_refills_for_test(hold);
}

bool send_raw(rdmx_worker_t* worker, std::uint64_t peer_uid, const void* bytes, std::size_t length,
              Raw how) {
  return worker->impl->send_raw_for_test(peer_uid, bytes, length, how);
}

bool inject_async_event(rdmx_worker_t* worker, ibv_event_type type, EventOn on,
                        std::uint64_t peer_uid) {
  return worker->impl->inject_async_event(type, on, peer_uid);
}

DestroyReport last_destroy_report() {
  std::lock_guard<std::mutex> lock(g_report_mutex);
  return g_last_report;
}

}  // namespace debug

}  // namespace rdmx::transport
