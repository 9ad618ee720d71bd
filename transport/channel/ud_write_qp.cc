// The UD channel's on-demand RC connections for rendezvous writes (UdChannel::write_connection)
// and for the C API's puts and gets (rma.cc).
//
// A third kind of QP: an RC QP per peer made on demand over the control QP when the first large
// message to that peer needs it (connect_op::kWqpRequest/connect_op::kWqpReply), attached to the
// small class's SRQ. At most max_rc_peers of them (RDMX_MAX_RC_PEERS); when another is needed the
// least recently used idle one is retired (connect_op::kWqpClose, best effort). When every one is
// busy, or the peer refuses (it is at its own cap), the transfer takes the copy path. Every CTS
// carries (header aux, UdChannel::cts_aux) the QPN of the receiver's write QP (0: none yet), so a
// sender whose QP points at another QP of the receiver (it retired ours, its close was lost)
// notices and reconnects instead of writing into nothing (Worker::on_rndv_message).
#include <random>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

constexpr std::uint64_t kWrConnectRtoUs = 2000;
constexpr std::uint64_t kWrConnectRtoMaxUs = 200000;

}  // namespace

rendezvous::WriteConnection Worker::ud_write_connection(Peer& p) {
  using rendezvous::WriteConnection;
  switch (p.ud.wqp_state) {
    case WriteQpState::kReady:
      if (p.ud.wqp_sq.closed()) {
        return WriteConnection::kUnavailable;  // failed, being retired
      }
      wqp_lru_->touch(p.index);
      return WriteConnection::kReady;
    case WriteQpState::kConnecting:
      return WriteConnection::kConnecting;
    case WriteQpState::kNone:
      break;
  }
  const auto d = wqp_lru_->admit(p.index, [this](std::uint32_t i) { return wqp_busy(i); });
  switch (d.admit) {
    case rendezvous::RcLru::Admit::kFull:
      return WriteConnection::kUnavailable;
    case rendezvous::RcLru::Admit::kEvict:
      if (!retire_wqp(*peers_[d.victim], true)) {
        return WriteConnection::kUnavailable;
      }
      break;
    case rendezvous::RcLru::Admit::kRoom:
    case rendezvous::RcLru::Admit::kConnected:
      break;
  }
  start_wqp_connect(p);
  return p.ud.wqp_state == WriteQpState::kConnecting ? WriteConnection::kConnecting
                                                     : WriteConnection::kUnavailable;
}

bool Worker::wqp_busy(std::uint32_t i) const noexcept {
  const Peer& p = *peers_[i];
  return rndv_->active_with(i) != 0 || p.ud.wqp_state == WriteQpState::kConnecting ||
         p.ud.wqp_sq.outstanding() != 0;
}

bool Worker::create_wqp(Peer& p) {
  try {
    auto qp = std::make_unique<verbs::QueuePair>(
        verbs::QueuePair::create(*pd_, verbs::QpConfig{.type = IBV_QPT_RC,
                                                       .send_cq = &*send_cq_,
                                                       .recv_cq = &*recv_cq_,
                                                       .srq = &pools_[0]->srq_object(),
                                                       .caps = {.max_send_wr = kRcSendDepth,
                                                                .max_recv_wr = 0,
                                                                .max_send_sge = 1,
                                                                .max_recv_sge = 1,
                                                                .max_inline_data = 0},
                                                       .sq_sig_all = false}));
    qp->to_init(verbs::RcInitAttr{.port_num = port_,
                                  .pkey_index = res_.pkey_index,
                                  .access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                  IBV_ACCESS_REMOTE_READ});  // rdmx_get reads on it
    std::random_device rd;
    p.ud.wqp_psn = rd() & 0xffffff;
    p.ud.wqp_sq = eager::SendQueue(qp->get(), kRcSendDepth, kSignalEvery);
    p.ud.write_qp = std::move(qp);
    return true;
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: RC write connection to %016llx: %s\n",
                 static_cast<unsigned long long>(p.uid), e.what());
    return false;
  }
}

bool Worker::connect_wqp(Peer& p, std::uint32_t remote_qpn, std::uint32_t remote_psn) {
  verbs::RemoteQp remote;
  remote.gid = grh_dgid(p.address);
  remote.lid = p.address.lid;
  remote.qpn = remote_qpn;
  remote.psn = remote_psn;
  try {
    p.ud.write_qp->to_rtr(verbs::RcRtrAttr{.remote = remote,
                                           .path_mtu = p.path_mtu,
                                           .sgid_index = gid_index_,
                                           .min_rnr_timer = 1,
                                           .max_dest_rd_atomic = 1,
                                           .port_num = port_,
                                           .traffic_class = res_.traffic_class,
                                           .sl = res_.service_level});
    // The same timeout and retries as RC mode's connections (rc_timeout, rc_retry_cnt): these
    // carry rendezvous writes, whose loss fails the transfer as surely.
    p.ud.write_qp->to_rts(verbs::RcRtsAttr{.sq_psn = p.ud.wqp_psn,
                                           .timeout = res_.rc_timeout,
                                           .retry_cnt = res_.rc_retry_cnt,
                                           .max_rd_atomic = 1,
                                           .rnr_retry = res_.rc_rnr_retry});
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: RC write connection to %016llx: %s\n",
                 static_cast<unsigned long long>(p.uid), e.what());
    return false;
  }
  p.ud.wqp_remote_qpn = remote_qpn;
  move_to(p, WriteQpState::kReady);
  ++stat_rc_connects_;
  if (config_.verbose >= 2) {
    std::fprintf(stderr, "rdmx: RC write connection to %016llx up (QP %u -> %u)\n",
                 static_cast<unsigned long long>(p.uid), p.ud.write_qp->qp_num(), remote_qpn);
  }
  return true;
}

void Worker::start_wqp_connect(Peer& p) {
  if (!create_wqp(p)) {
    return;
  }
  move_to(p, WriteQpState::kConnecting);
  wqp_lru_->insert(p.index);
  const std::uint64_t now = now_us();
  p.ud.wqp_start_us = now;
  p.ud.wqp_rto_us = kWrConnectRtoUs;
  p.ud.wqp_next_us = now + p.ud.wqp_rto_us;
  (void)send_wqp_ctrl(p, connect_op::kWqpRequest, p.ud.write_qp->qp_num(), p.ud.wqp_psn);
  if (!p.ud.wqp_listed) {
    p.ud.wqp_listed = true;
    wqp_connect_list_.push_back(&p);
  }
  if (next_wqp_timer_us_ == 0 || p.ud.wqp_next_us < next_wqp_timer_us_) {
    next_wqp_timer_us_ = p.ud.wqp_next_us;
  }
}

void Worker::wqp_connect_failed(Peer& p, const char* why) {
  if (config_.verbose >= 1) {
    std::fprintf(stderr, "rdmx: no RC write connection to %016llx (%s): copy path\n",
                 static_cast<unsigned long long>(p.uid), why);
  }
  if (p.ud.write_qp) {
    p.ud.wqp_sq.close();
    wqp_retired_.push_back(std::move(p.ud.write_qp));
  }
  p.ud.wqp_sq = eager::SendQueue();
  move_to(p, WriteQpState::kNone);
  p.ud.wqp_remote_qpn = 0;
  wqp_lru_->remove(p.index);
  rndv_->on_connection_failed(p.index);
}

bool Worker::retire_wqp(Peer& p, bool tell_peer) {
  if (p.ud.write_qp && p.ud.wqp_sq.outstanding() != 0) {
    return false;  // writes still to come back; retried by the last of them
  }
  if (p.ud.write_qp) {
    if (tell_peer && p.ud.wqp_state == WriteQpState::kReady) {
      (void)send_wqp_ctrl(p, connect_op::kWqpClose, p.ud.write_qp->qp_num(), 0);
    }
    p.ud.wqp_sq.close();
    wqp_retired_.push_back(std::move(p.ud.write_qp));
    ++stat_rc_retired_;
    if (config_.verbose >= 2) {
      std::fprintf(stderr, "rdmx: RC write connection to %016llx retired\n",
                   static_cast<unsigned long long>(p.uid));
    }
  }
  p.ud.wqp_sq = eager::SendQueue();
  if (p.ud.wqp_state != WriteQpState::kNone) {
    move_to(p, WriteQpState::kNone);
  }
  p.ud.wqp_remote_qpn = 0;
  if (wqp_lru_) {
    wqp_lru_->remove(p.index);
  }
  return true;
}

void Worker::on_wqp_ctrl(Peer& p, std::uint8_t op, std::uint32_t qpn, std::uint32_t psn,
                         std::uint32_t for_qpn) {
  auto refuse = [&] { (void)send_wqp_ctrl(p, connect_op::kWqpReply, 0, 0, qpn); };
  auto accept = [&] {
    (void)send_wqp_ctrl(p, connect_op::kWqpReply, p.ud.write_qp->qp_num(), p.ud.wqp_psn, qpn);
  };
  switch (op) {
    case connect_op::kWqpRequest: {
      if (qpn == 0) {
        return;
      }
      if (p.ud.wqp_state == WriteQpState::kReady) {
        if (p.ud.wqp_remote_qpn == qpn) {
          accept();  // a repeat
          return;
        }
        // Ours points at a QP of theirs that they have retired.
        if (!retire_wqp(p, false)) {
          refuse();
          return;
        }
      }
      if (p.ud.wqp_state == WriteQpState::kConnecting) {
        // Both sides connect at once: connect ours to theirs; they do the same with ours.
        if (!connect_wqp(p, qpn, psn)) {
          refuse();
          wqp_connect_failed(p, "cannot connect the QP");
          return;
        }
        accept();
        rndv_->on_connection_ready(p.index);
        return;
      }
      const auto d = wqp_lru_->admit(p.index, [this](std::uint32_t i) { return wqp_busy(i); });
      if (d.admit == rendezvous::RcLru::Admit::kFull ||
          (d.admit == rendezvous::RcLru::Admit::kEvict && !retire_wqp(*peers_[d.victim], true))) {
        refuse();  // the requester copies instead
        return;
      }
      if (!create_wqp(p)) {
        refuse();
        return;
      }
      if (!connect_wqp(p, qpn, psn)) {
        p.ud.wqp_sq.close();
        wqp_retired_.push_back(std::move(p.ud.write_qp));
        p.ud.wqp_sq = eager::SendQueue();
        refuse();
        return;
      }
      wqp_lru_->insert(p.index);
      accept();
      return;
    }
    case connect_op::kWqpReply:
      if (p.ud.wqp_state != WriteQpState::kConnecting || p.ud.write_qp->qp_num() != for_qpn) {
        return;  // a repeat, or an answer to a request (a QP) given up since
      }
      if (qpn == 0) {
        wqp_connect_failed(p, "the peer refused: it is at its RC connection cap");
        return;
      }
      if (!connect_wqp(p, qpn, psn)) {
        wqp_connect_failed(p, "cannot connect the QP");
        return;
      }
      rndv_->on_connection_ready(p.index);
      return;
    case connect_op::kWqpClose:
      if (p.ud.wqp_state == WriteQpState::kReady && p.ud.wqp_remote_qpn == qpn) {
        (void)retire_wqp(p, false);
      }
      return;
    default:
      return;
  }
}

void Worker::run_wqp_timers(std::uint64_t now) {
  if (next_wqp_timer_us_ != 0 && now < next_wqp_timer_us_) {
    return;
  }
  std::uint64_t next = 0;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < wqp_connect_list_.size(); ++i) {
    Peer& p = *wqp_connect_list_[i];
    if (p.ud.wqp_state != WriteQpState::kConnecting) {
      p.ud.wqp_listed = false;
      continue;
    }
    if (now - p.ud.wqp_start_us >= std::uint64_t{config_.peer_timeout_ms} * 1000) {
      p.ud.wqp_listed = false;
      wqp_connect_failed(p, "no answer");
      continue;
    }
    if (now >= p.ud.wqp_next_us) {
      (void)send_wqp_ctrl(p, connect_op::kWqpRequest, p.ud.write_qp->qp_num(), p.ud.wqp_psn);
      p.ud.wqp_rto_us = std::min(p.ud.wqp_rto_us * 2, kWrConnectRtoMaxUs);
      p.ud.wqp_next_us = now + p.ud.wqp_rto_us;
    }
    next = next == 0 ? p.ud.wqp_next_us : std::min(next, p.ud.wqp_next_us);
    wqp_connect_list_[keep++] = &p;
  }
  wqp_connect_list_.resize(keep);
  next_wqp_timer_us_ = next;
}

void Worker::destroy_retired_qps() {
  // The teardown sequence of verbs/qp.h with short waits: these QPs are idle (nothing posted
  // on them is outstanding), and rxe never raises LAST_WQE_REACHED. Completions of other QPs
  // seen while draining go their normal way.
  const auto on_wc = [this](const ibv_wc& wc) { on_drain_completion(wc); };
  while (!wqp_retired_.empty()) {
    std::vector<std::unique_ptr<verbs::QueuePair>> batch;
    batch.swap(wqp_retired_);
    for (auto& qp : batch) {
      verbs::TeardownOptions opt;
      opt.events = &*events_;
      opt.last_wqe_timeout = std::chrono::milliseconds(1);
      opt.drain_timeout = std::chrono::milliseconds(200);
      opt.quiet_period = std::chrono::milliseconds(1);
      try {
        (void)qp->shutdown(on_wc, opt);
      } catch (...) {
        std::fprintf(stderr, "rdmx: retiring an RC write connection failed\n");
      }
      qp.reset();
    }
  }
}

}  // namespace rdmx::transport
