#include "verbs/qp.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "verbs/error.h"

namespace rdmx::verbs {

namespace {

const char* state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERR";
    default:
      return "UNKNOWN";
  }
}

void check_limit(std::uint64_t value, std::uint64_t limit, const char* what,
                 const char* limit_name) {
  if (value > limit) {
    throw Error("ibv_create_qp", EINVAL,
                std::string(what) + " " + std::to_string(value) + " exceeds device " + limit_name +
                    " " + std::to_string(limit));
  }
}

}  // namespace

QueuePair QueuePair::create(const ProtectionDomain& pd, const QpConfig& config) {
  if (config.type != IBV_QPT_RC && config.type != IBV_QPT_UD) {
    throw Error("ibv_create_qp", EINVAL, "only RC and UD QPs are supported");
  }
  if (config.send_cq == nullptr || config.recv_cq == nullptr || config.send_cq->get() == nullptr ||
      config.recv_cq->get() == nullptr) {
    throw Error("ibv_create_qp", EINVAL, "send_cq and recv_cq are required");
  }
  const bool with_srq = config.srq != nullptr;
  if (with_srq && config.srq->get() == nullptr) {
    throw Error("ibv_create_qp", EINVAL, "the SRQ was destroyed");
  }

  ibv_device_attr dev{};
  check_rc(ibv_query_device(pd.context(), &dev), "ibv_query_device");
  // One extra WR per queue for the teardown marker.
  const std::uint64_t send_wr = std::uint64_t{config.caps.max_send_wr} + 1;
  const std::uint64_t recv_wr = with_srq ? 0 : std::uint64_t{config.caps.max_recv_wr} + 1;
  check_limit(send_wr, static_cast<std::uint64_t>(dev.max_qp_wr), "max_send_wr (+1 reserved)",
              "max_qp_wr");
  check_limit(recv_wr, static_cast<std::uint64_t>(dev.max_qp_wr), "max_recv_wr (+1 reserved)",
              "max_qp_wr");
  check_limit(config.caps.max_send_sge, static_cast<std::uint64_t>(dev.max_sge), "max_send_sge",
              "max_sge");
  if (!with_srq) {
    check_limit(config.caps.max_recv_sge, static_cast<std::uint64_t>(dev.max_sge), "max_recv_sge",
                "max_sge");
  }

  QueuePair qp;
  // Registered before the verb so that the order of release is the reverse of creation.
  qp.send_cq_use_ = config.send_cq->register_user();
  qp.recv_cq_use_ = config.recv_cq->register_user();
  if (with_srq) {
    qp.srq_use_ = config.srq->register_qp();
  }

  ibv_qp_init_attr init{};
  init.send_cq = config.send_cq->get();
  init.recv_cq = config.recv_cq->get();
  init.srq = with_srq ? config.srq->get() : nullptr;
  init.qp_type = config.type;
  init.sq_sig_all = config.sq_sig_all ? 1 : 0;
  init.cap.max_send_wr = static_cast<std::uint32_t>(send_wr);
  init.cap.max_recv_wr = static_cast<std::uint32_t>(recv_wr);
  init.cap.max_send_sge = config.caps.max_send_sge;
  init.cap.max_recv_sge = with_srq ? 0 : config.caps.max_recv_sge;
  init.cap.max_inline_data = config.caps.max_inline_data;
  errno = 0;
  qp.qp_ = check_created(ibv_create_qp(pd.get(), &init), "ibv_create_qp",
                         std::string(config.type == IBV_QPT_RC ? "RC" : "UD") + " send_wr " +
                             std::to_string(send_wr) + " recv_wr " + std::to_string(recv_wr) +
                             " inline " + std::to_string(config.caps.max_inline_data) +
                             (with_srq ? " with SRQ" : ""));
  // ibv_create_qp wrote back what was granted (>= requested).
  qp.caps_.max_send_wr = init.cap.max_send_wr - 1;
  qp.caps_.max_recv_wr = with_srq ? 0 : init.cap.max_recv_wr - 1;
  qp.caps_.max_send_sge = init.cap.max_send_sge;
  qp.caps_.max_recv_sge = with_srq ? config.srq->attr().max_sge : init.cap.max_recv_sge;
  qp.caps_.max_inline_data = init.cap.max_inline_data;
  return qp;
}

QueuePair::QueuePair(QueuePair&& other) noexcept
    : send_cq_use_(std::move(other.send_cq_use_)),
      recv_cq_use_(std::move(other.recv_cq_use_)),
      srq_use_(std::move(other.srq_use_)),
      qp_(std::exchange(other.qp_, nullptr)),
      caps_(other.caps_),
      state_(other.state_),
      closing_(other.closing_),
      mcast_(std::move(other.mcast_)) {}

QueuePair& QueuePair::operator=(QueuePair&& other) noexcept {
  if (this != &other) {
    QueuePair old(std::move(*this));
    send_cq_use_ = std::move(other.send_cq_use_);
    recv_cq_use_ = std::move(other.recv_cq_use_);
    srq_use_ = std::move(other.srq_use_);
    qp_ = std::exchange(other.qp_, nullptr);
    caps_ = other.caps_;
    state_ = other.state_;
    closing_ = other.closing_;
    mcast_ = std::move(other.mcast_);
  }
  return *this;
}

QueuePair::~QueuePair() {
  if (qp_ == nullptr) {
    return;
  }
  // The destructor cannot refuse: leave the groups first so that the QP can go.
  for (const Mcast& m : mcast_) {
    if (const int e = verb_errno(ibv_detach_mcast(qp_, &m.gid, m.lid)); e != 0) {
      log_verb_failure("ibv_detach_mcast", e, "QP " + std::to_string(qp_->qp_num));
    }
  }
  mcast_.clear();
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_destroy_qp", e, "QP " + std::to_string(qp_->qp_num) + " leaked");
  }
}

ibv_qp_state QueuePair::query_state() const {
  return query(IBV_QP_STATE).qp_state;
}

ibv_qp_attr QueuePair::query(int attr_mask) const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  check_rc(ibv_query_qp(qp_, &attr, attr_mask, &init), "ibv_query_qp");
  return attr;
}

void QueuePair::modify(ibv_qp_attr& attr, int mask, ibv_qp_state to, const char* what) {
  attr.qp_state = to;
  mask |= IBV_QP_STATE;
  const int e = verb_errno(ibv_modify_qp(qp_, &attr, mask));
  if (e != 0) {
    throw Error("ibv_modify_qp", e,
                "QP " + std::to_string(qp_->qp_num) + " " + state_name(state_) + "->" +
                    state_name(to) + (what[0] != '\0' ? " (" : "") + what +
                    (what[0] != '\0' ? ")" : ""));
  }
  state_ = to;
}

void QueuePair::to_init(const RcInitAttr& a) {
  ibv_qp_attr attr{};
  attr.qp_access_flags = a.access_flags;
  to_init(attr, IBV_QP_ACCESS_FLAGS, a.pkey_index, a.port_num);
}

void QueuePair::to_init(const UdInitAttr& a) {
  ibv_qp_attr attr{};
  attr.qkey = a.qkey;
  to_init(attr, IBV_QP_QKEY, a.pkey_index, a.port_num);
}

void QueuePair::to_init(ibv_qp_attr& attr, int mask, std::uint16_t pkey_index,
                        std::uint8_t port_num) {
  attr.pkey_index = pkey_index;
  attr.port_num = port_num;
  modify(attr, mask | IBV_QP_PKEY_INDEX | IBV_QP_PORT, IBV_QPS_INIT, "");
}

void QueuePair::to_rtr(const RcRtrAttr& a) {
  ibv_qp_attr attr{};
  attr.path_mtu = a.path_mtu;
  attr.dest_qp_num = a.remote.qpn;
  attr.rq_psn = a.remote.psn;
  attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr.min_rnr_timer = a.min_rnr_timer;
  attr.ah_attr.dlid = a.remote.lid;
  attr.ah_attr.sl = a.sl;
  attr.ah_attr.port_num = a.port_num;
  if (!is_zero(a.remote.gid)) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = a.remote.gid;
    attr.ah_attr.grh.sgid_index = a.sgid_index;
    attr.ah_attr.grh.hop_limit = a.hop_limit;
    attr.ah_attr.grh.traffic_class = a.traffic_class;
  }
  char what[160];
  std::snprintf(what, sizeof(what), "dest_qpn %u rq_psn %u mtu %d sgid_index %u dgid %s",
                a.remote.qpn, a.remote.psn, 128 << static_cast<int>(a.path_mtu.get()),
                static_cast<unsigned>(a.sgid_index.get()), to_string(a.remote.gid).c_str());
  modify(attr,
         IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER,
         IBV_QPS_RTR, what);
}

void QueuePair::to_rtr() {
  ibv_qp_attr attr{};
  modify(attr, 0, IBV_QPS_RTR, "");
}

void QueuePair::to_rts(const RcRtsAttr& a) {
  ibv_qp_attr attr{};
  attr.sq_psn = a.sq_psn;
  attr.timeout = a.timeout;
  attr.retry_cnt = a.retry_cnt;
  attr.rnr_retry = a.rnr_retry;
  attr.max_rd_atomic = a.max_rd_atomic;
  modify(attr,
         IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC,
         IBV_QPS_RTS, "");
}

void QueuePair::to_rts(const UdRtsAttr& a) {
  ibv_qp_attr attr{};
  attr.sq_psn = a.sq_psn;
  modify(attr, IBV_QP_SQ_PSN, IBV_QPS_RTS, "");
}

void QueuePair::to_error() {
  ibv_qp_attr attr{};
  modify(attr, 0, IBV_QPS_ERR, "");
}

void QueuePair::to_rts_from_sqe() {
  ibv_qp_attr attr{};
  attr.cur_qp_state = IBV_QPS_SQE;
  modify(attr, IBV_QP_CUR_STATE, IBV_QPS_RTS, "");
}

void QueuePair::to_reset() {
  ibv_qp_attr attr{};
  modify(attr, 0, IBV_QPS_RESET, "");
}

ChainPostResult QueuePair::post_send(ibv_send_wr* chain) noexcept {
  if (closing_) [[unlikely]] {
    return ChainPostResult{.error = ESHUTDOWN, .posted = 0, .bad_wr = chain};
  }
  return post_send_checked(qp_, chain, caps_.max_send_sge);
}

ChainPostResult QueuePair::post_recv(ibv_recv_wr* chain) noexcept {
  if (closing_) [[unlikely]] {
    return ChainPostResult{.error = ESHUTDOWN, .posted = 0, .bad_wr = chain};
  }
  return post_recv_checked(qp_, chain, caps_.max_recv_sge);
}

void QueuePair::attach_mcast(const ibv_gid& gid, std::uint16_t lid) {
  check_rc(ibv_attach_mcast(qp_, &gid, lid), "ibv_attach_mcast",
           "QP " + std::to_string(qp_->qp_num) + " group " + to_string(gid));
  mcast_.push_back(Mcast{gid, lid});
}

void QueuePair::detach_mcast(const ibv_gid& gid, std::uint16_t lid) {
  check_rc(ibv_detach_mcast(qp_, &gid, lid), "ibv_detach_mcast",
           "QP " + std::to_string(qp_->qp_num) + " group " + to_string(gid));
  std::erase_if(mcast_, [&](const Mcast& m) {
    return m.lid == lid && std::memcmp(m.gid.raw, gid.raw, sizeof(gid.raw)) == 0;
  });
}

int QueuePair::destroy() noexcept {
  if (qp_ == nullptr) {
    return 0;
  }
  if (!mcast_.empty()) {
    return EBUSY;  // ibv_destroy_qp(3): fails while attached to a multicast group
  }
  const int e = verb_errno(ibv_destroy_qp(qp_));
  if (e == 0) {
    qp_ = nullptr;
    srq_use_.reset();
    recv_cq_use_.reset();
    send_cq_use_.reset();
  }
  return e;
}

TeardownReport QueuePair::shutdown(const CompletionCallback& on_completion,
                                   const TeardownOptions& options) {
  TeardownReport report;
  if (qp_ == nullptr) {
    return report;
  }
  // 1. Stop posting through this wrapper.
  closing_ = true;
  const std::uint32_t qpn = qp_->qp_num;
  const bool with_srq = qp_->srq != nullptr;
  // Ask the device: the HCA may have moved the QP to ERR, or the owner may have modified it
  // through the raw handle. Fall back to our own record if the query fails.
  try {
    state_ = query_state();
  } catch (const Error& err) {
    log_verb_failure(err.verb(), err.errnum(), "QP " + std::to_string(qpn) + " teardown");
  }
  // A QP still in RESET holds no WRs (posting in RESET fails) and cannot go to ERR
  // (RESET->ERR is not a valid transition), so there is nothing to flush.
  const bool may_hold_wrs = state_ != IBV_QPS_RESET;

  // 2. Receive marker, before ERR so it queues behind every receive the owner posted.
  if (!with_srq && may_hold_wrs) {
    ibv_recv_wr marker{};
    marker.wr_id = kDrainRecvWrId;
    ibv_recv_wr* bad = nullptr;
    report.recv_marker_posted = verb_errno(ibv_post_recv(qp_, &marker, &bad)) == 0;
  }

  // 3. ERR, even if already there: on rxe the transition itself is what runs the flush.
  if (may_hold_wrs) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    report.modify_error = verb_errno(ibv_modify_qp(qp_, &attr, IBV_QP_STATE));
    if (report.modify_error != 0) {
      log_verb_failure("ibv_modify_qp", report.modify_error,
                       "QP " + std::to_string(qpn) + " ->ERR during teardown");
    } else {
      state_ = IBV_QPS_ERR;
    }
  }

  // 4. Last WQE reached, bounded.
  if (with_srq && may_hold_wrs && options.events != nullptr) {
    report.last_wqe_awaited = true;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      report.last_wqe_reached =
          options.events->wait_for(IBV_EVENT_QP_LAST_WQE_REACHED, qp_, options.last_wqe_timeout)
              .has_value();
    } catch (const Error& err) {
      log_verb_failure(err.verb(), err.errnum(), "waiting for LAST_WQE_REACHED");
    }
    report.last_wqe_wait = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - t0);
    // rxe never sends it (verbs/README.md): expected, counted in the report, quiet by default.
    if (!report.last_wqe_reached && log_level() >= 1) {
      std::fprintf(stderr,
                   "rdmx: QP %u: no IBV_EVENT_QP_LAST_WQE_REACHED within %lld ms (the device may "
                   "never send it); draining anyway\n",
                   qpn, static_cast<long long>(options.last_wqe_timeout.count()));
    }
  }

  // 5. Send marker, in ERR so it is flushed, never transmitted.
  if (may_hold_wrs && (qp_->qp_type != IBV_QPT_UD || options.ud_marker_ah != nullptr)) {
    ibv_send_wr marker{};
    marker.wr_id = kDrainSendWrId;
    marker.opcode = IBV_WR_SEND;
    marker.send_flags = IBV_SEND_SIGNALED;
    if (qp_->qp_type == IBV_QPT_UD) {
      marker.wr.ud.ah = options.ud_marker_ah;
    }
    ibv_send_wr* bad = nullptr;
    report.send_marker_posted = verb_errno(ibv_post_send(qp_, &marker, &bad)) == 0;
  }

  // 6. Drain.
  ibv_cq* cqs[2] = {qp_->send_cq, qp_->recv_cq};
  const int ncq = cqs[0] == cqs[1] ? 1 : 2;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options.drain_timeout;
  auto last_activity = start;
  std::array<ibv_wc, 16> wcs{};
  for (;;) {
    bool got_any = false;
    for (int c = 0; c < ncq; ++c) {
      const int n = ibv_poll_cq(cqs[c], static_cast<int>(wcs.size()), wcs.data());
      if (n < 0) {  // ibv_poll_cq is the exception: negative on error
        log_verb_failure("ibv_poll_cq", EIO, "QP " + std::to_string(qpn) + " drain");
        report.drain_timed_out = true;
        break;
      }
      for (int i = 0; i < n; ++i) {
        const ibv_wc& wc = wcs[static_cast<std::size_t>(i)];
        got_any = true;
        if (wc.qp_num == qpn && wc.wr_id == kDrainSendWrId) {
          report.send_marker_returned = true;
          continue;
        }
        if (wc.qp_num == qpn && wc.wr_id == kDrainRecvWrId) {
          report.recv_marker_returned = true;
          continue;
        }
        ++report.completions;
        if (wc.status == IBV_WC_WR_FLUSH_ERR) {
          ++report.flushed;
        } else if (wc.status != IBV_WC_SUCCESS) {
          ++report.failed;
        }
        on_completion(wc);
      }
    }
    if (report.drain_timed_out) {
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (got_any) {
      last_activity = now;
    }
    const bool markers_back = (report.send_marker_returned || !report.send_marker_posted) &&
                              (report.recv_marker_returned || !report.recv_marker_posted);
    if (markers_back && now - last_activity >= options.quiet_period) {
      break;
    }
    if (now >= deadline) {
      report.drain_timed_out = !markers_back;
      break;
    }
    if (!got_any) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (report.drain_timed_out) {
    std::fprintf(stderr,
                 "rdmx: QP %u: drain incomplete after %lld ms (send marker %s, receive marker "
                 "%s); destroying anyway\n",
                 qpn, static_cast<long long>(options.drain_timeout.count()),
                 report.send_marker_returned ? "back" : "missing",
                 report.recv_marker_returned ? "back" : "missing");
  }

  // 7. Destroy.
  report.destroy_error = destroy();
  if (report.destroy_error != 0) {
    log_verb_failure("ibv_destroy_qp", report.destroy_error,
                     "QP " + std::to_string(qpn) +
                         (mcast_.empty() ? "" : " still attached to a multicast group"));
  }
  return report;
}

}  // namespace rdmx::verbs
