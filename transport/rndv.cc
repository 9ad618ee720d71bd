// The glue between the worker and the rendezvous engine (rendezvous/engine.h): the engine's
// Transport hooks, the RTS of large sends, matched RTSs, the rendezvous messages, RDMA writes,
// and UD mode's on-demand RC connections for those writes.
//
// Which QP carries the writes:
//   RC: the peer's large-class QP (rc_qp[1]), so that small messages on rc_qp[0] never queue
//       behind megabytes of writes; the write-with-imm consumes one receive of the large SRQ.
//   UD: a third kind of QP, an RC QP per peer made on demand over the control QP when the first
//       large message to that peer needs it (connect_op::kWqpRequest/connect_op::kWqpReply),
//       attached to the small class's SRQ. At most max_rc_peers of them (RDMX_MAX_RC_PEERS); when
//       another is needed the least recently used idle one is retired (connect_op::kWqpClose, best
//       effort). When every one is busy, or the peer refuses (it is at its own cap), the transfer
//       takes the copy path. Every CTS carries (header aux) the QPN of the receiver's write QP (0:
//       none yet), so a sender whose QP points at another QP of the receiver (it retired ours, its
//       close was lost) notices and reconnects instead of writing into nothing.
#include <random>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

constexpr std::uint64_t kWrConnectRtoUs = 2000;
constexpr std::uint64_t kWrConnectRtoMaxUs = 200000;

// SendQueue::post's result for an RDMA write or read, in the engine's terms.
rendezvous::PostResult rdma_posted(int rc, const char* what) {
  if (rc == 0) [[likely]] {
    return rendezvous::PostResult::kPosted;
  }
  if (rc == EAGAIN) {
    return rendezvous::PostResult::kNoResource;
  }
  if (rc != ESHUTDOWN) {
    verbs::log_verb_failure("ibv_post_send", rc, what);
  }
  return rendezvous::PostResult::kFailed;
}

}  // namespace

// --- the engine's view of the worker -----------------------------------------------------------

class Worker::RndvHooks final : public rendezvous::Transport {
 public:
  explicit RndvHooks(Worker& w) : w_(w) {}

  rendezvous::PostResult post_cts(rendezvous::PeerIndex peer,
                                  const protocol::CtsBody& body) override {
    Peer& p = *w_.peers_[peer];
    // UD: our write QP for this peer (connecting or connected), so that a sender whose QP
    // points at another one of ours knows it is stale.
    const std::uint32_t aux = w_.ud_mode_ && p.write_qp ? p.write_qp->qp_num() : 0;
    return post(p, protocol::MsgKind::kCts, aux, &body, sizeof(body), nullptr, 0);
  }
  rendezvous::PostResult post_fin(rendezvous::PeerIndex peer,
                                  const protocol::FinBody& body) override {
    return post(*w_.peers_[peer], protocol::MsgKind::kFin, 0, &body, sizeof(body), nullptr, 0);
  }
  rendezvous::PostResult post_fragment(rendezvous::PeerIndex peer, const protocol::DataBody& body,
                                       const void* data, std::size_t length) override {
    return post(*w_.peers_[peer], protocol::MsgKind::kRndvData, 0, &body, sizeof(body), data,
                length);
  }
  std::size_t fragment_capacity(rendezvous::PeerIndex peer) override {
    const Peer& p = *w_.peers_[peer];
    // Body and payload must fit our large bounce buffers and the peer's large receive buffers.
    return std::min<std::size_t>(w_.res_.large_buf, p.address.class_capacity[1]) -
           sizeof(protocol::DataBody);
  }
  rendezvous::WriteConnection write_connection(rendezvous::PeerIndex peer) override {
    return w_.write_connection(*w_.peers_[peer]);
  }
  rendezvous::PostResult post_write(rendezvous::PeerIndex peer,
                                    const rendezvous::WriteRequest& write) override {
    return w_.post_write(*w_.peers_[peer], write);
  }
  rendezvous::PostResult post_read(rendezvous::PeerIndex peer,
                                   const rendezvous::ReadRequest& read) override {
    return w_.post_read(*w_.peers_[peer], read);
  }
  void complete_send(void* request, int code) override {
    Request* r = static_cast<Request*>(request);
    r->rndv = 0;
    w_.complete(r, code);
  }
  void complete_recv(void* request, int code, std::uint64_t length) override {
    Request* r = static_cast<Request*>(request);
    r->status.length = length;
    w_.complete(r, code);
  }

 private:
  rendezvous::PostResult post(Peer& p, protocol::MsgKind kind, std::uint32_t aux, const void* body,
                              std::size_t body_length, const void* payload, std::size_t length) {
    if (p.state == PeerState::kFailed) {
      return rendezvous::PostResult::kFailed;
    }
    if (p.state != PeerState::kConnected) {
      return rendezvous::PostResult::kNoResource;
    }
    return w_.post_message(p, kind, 0, aux, body, body_length, payload, length);
  }

  Worker& w_;
};

void Worker::setup_rendezvous() {
  rcache_ = std::make_unique<rendezvous::RegCache>(*pd_, rendezvous::RegCacheConfig{});
  rndv_hooks_ = std::make_unique<RndvHooks>(*this);
  rendezvous::EngineConfig ec;
  // The largest message one work request may carry (rxe: 8 MiB): no write is larger.
  ec.max_write = port_attr_.max_msg_sz != 0 ? port_attr_.max_msg_sz : (1u << 31);
  ec.pipeline_depth = rendezvous::kDefaultPipelineDepth;
  // The read share (-1: by device). On a software device the sender's writes run in its own
  // system calls and the receiver's reads in the receiver's, so the two CPUs move one message
  // together; a hardware NIC moves it at link speed either way, and reads only add a FIN.
  const int share = res_.rndv_read_share >= 0 ? res_.rndv_read_share
                    : software_device_        ? kSoftwareReadShare
                                              : 0;
  ec.read_percent = static_cast<std::uint32_t>(share);
  ec.log.verbose = config_.verbose;
  rndv_ = std::make_unique<rendezvous::Engine>(*rndv_hooks_, *rcache_, ec);
  if (ud_mode_) {
    wqp_lru_ = std::make_unique<rendezvous::RcLru>(res_.max_rc_peers);
  }
  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: rendezvous from %zu bytes: RDMA writes of up to %u bytes, %u in flight, "
                 "%s%s; the receiver reads %d%% of messages from %llu bytes (%s)\n",
                 res_.rndv_thresh, ec.max_write, ec.pipeline_depth,
                 ud_mode_ ? "on-demand RC connections, at most " : "over the RC QPs",
                 ud_mode_ ? std::to_string(res_.max_rc_peers).c_str() : "", share,
                 static_cast<unsigned long long>(ec.min_read_split),
                 ud_mode_                    ? "UD mode writes only"
                 : res_.rndv_read_share >= 0 ? "rndv_read_share as configured"
                 : software_device_          ? "software RDMA device"
                                             : "hardware device");
  }
}

// --- sender ------------------------------------------------------------------------------------

bool Worker::start_rndv_send(Peer& peer, Request* r) {
  // No room for the RTS in the peer's stream (UD window/congestion window, RC order guard and
  // credits): wait in the queue without touching the engine and the registration cache (a
  // queued send is retried on every flush of the peer).
  const bool stream_full = ud_mode_
                               ? !peer.ud_tx->can_send() || peer.ud_tx->in_flight() >= peer.ud_cwnd
                               : !peer.rc_guard->can_send() ||
                                     !protocol::seq_lt(peer.rc_guard->next(), peer.rc_credit_limit);
  if (stream_full) [[unlikely]] {
    return false;
  }
  protocol::RtsBody rts{};
  const std::uint32_t word =
      rndv_->begin_send(peer.index, r, r->send_buffer, r->status.length, &rts);
  if (word == rendezvous::kNoTransfer) [[unlikely]] {
    return false;  // a million transfers in flight: wait in the queue
  }
  switch (post_message(peer, protocol::MsgKind::kRts, r->status.tag, 0, &rts, sizeof(rts), nullptr,
                       0)) {
    case PostResult::kPosted:
      r->rndv = word;
      if (r->state == ReqState::kQueued) {
        move_to(r, ReqState::kActive);  // its turn came (posted at once, it is active already)
      }
      activate(r);
      return true;
    case PostResult::kNoResource:
      rndv_->abort_send(word);
      return false;
    case PostResult::kFailed:
      break;
  }
  rndv_->abort_send(word);
  complete(r, RDMX_ERR_IO);
  return true;
}

rendezvous::WriteConnection Worker::write_connection(Peer& p) {
  using rendezvous::WriteConnection;
  if (p.state != PeerState::kConnected) {
    return WriteConnection::kUnavailable;
  }
  if (!ud_mode_) {
    return p.rc_ready ? WriteConnection::kReady : WriteConnection::kUnavailable;
  }
  switch (p.wqp_state) {
    case WriteQpState::kReady:
      if (p.wqp_sq.closed()) {
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
  return p.wqp_state == WriteQpState::kConnecting ? WriteConnection::kConnecting
                                                  : WriteConnection::kUnavailable;
}

rendezvous::PostResult Worker::post_write(Peer& p, const rendezvous::WriteRequest& w) {
  if (p.state == PeerState::kFailed) {
    return rendezvous::PostResult::kFailed;
  }
  eager::SendQueue* sq = &p.rc_sq[1];
  if (ud_mode_) {
    if (p.wqp_state != WriteQpState::kReady) {
      return rendezvous::PostResult::kFailed;
    }
    sq = &p.wqp_sq;
  }
  ibv_sge sge{
      .addr = reinterpret_cast<std::uintptr_t>(w.local_addr), .length = w.length, .lkey = w.lkey};
  ibv_send_wr wr{};
  wr.opcode = w.with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = w.length != 0 ? 1 : 0;
  if (w.with_imm) {
    wr.imm_data = rendezvous::to_imm(w.imm);
  }
  wr.wr.rdma.remote_addr = w.remote_addr;
  wr.wr.rdma.rkey = w.rkey;
  const int rc =
      sq->post(*threads_[0].send, wr,
               eager::SendQueue::Post{.kind = w.with_imm ? protocol::WrKind::kRdmaWriteImm
                                                         : protocol::WrKind::kRdmaWrite,
                                      .want_signal = w.signaled,
                                      .peer = &p,
                                      .cookie = w.token});
  return rdma_posted(rc, "rendezvous RDMA write");
}

rendezvous::PostResult Worker::post_read(Peer& p, const rendezvous::ReadRequest& r) {
  // RC mode only (the engine is configured without reads in UD mode): the large-class QP, the
  // one the sender's writes of the other share arrive on.
  if (p.state == PeerState::kFailed || ud_mode_) {
    return rendezvous::PostResult::kFailed;
  }
  ibv_sge sge{
      .addr = reinterpret_cast<std::uintptr_t>(r.local_addr), .length = r.length, .lkey = r.lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = r.remote_addr;
  wr.wr.rdma.rkey = r.rkey;
  const int rc = p.rc_sq[1].post(*threads_[0].send, wr,
                                 eager::SendQueue::Post{.kind = protocol::WrKind::kRdmaRead,
                                                        .want_signal = r.signaled,
                                                        .peer = &p,
                                                        .cookie = r.token});
  return rdma_posted(rc, "rendezvous RDMA read");
}

// --- receiver ----------------------------------------------------------------------------------

void Worker::start_rndv_recv(Request* r, Peer& peer, std::uint64_t tag,
                             const protocol::RtsBody& rts) {
  r->status.tag = tag;
  r->status.source = peer.uid;
  r->status.length = rts.total_length;
  activate(r);  // it leaves the matcher but stays rdmx's until the data is in
  rndv_->on_rts_matched(peer.index, r, r->buffer, r->capacity, rts);
}

void Worker::on_rndv_message(Peer& peer, const protocol::MsgHeader& h, const std::byte* body,
                             const std::byte* payload) {
  switch (static_cast<protocol::MsgKind>(h.kind)) {
    case protocol::MsgKind::kCts:
      if (ud_mode_ && peer.wqp_state == WriteQpState::kReady && h.aux != 0 &&
          peer.wqp_remote_qpn != h.aux) {
        // The receiver's write QP for us is not the one ours is connected to: it retired that
        // connection (and its close was lost or is still on its way). Reconnect rather than
        // write into nothing. aux 0 says nothing: the receiver had no write QP for us when it
        // posted the CTS, and may have made the one we are connected to since (its request
        // travels on the control QP and can overtake the CTS): retiring ours then would break
        // the peer's writes in flight (seen with transfers both ways at once).
        if (config_.verbose >= 1) {
          std::fprintf(stderr, "rdmx: RC write connection to %016llx is stale: reconnecting\n",
                       static_cast<unsigned long long>(peer.uid));
        }
        (void)retire_wqp(peer, false);
      }
      rndv_->on_cts(peer.index, protocol::load_wire<protocol::CtsBody>(body));
      return;
    case protocol::MsgKind::kFin:
      rndv_->on_fin(peer.index, protocol::load_wire<protocol::FinBody>(body));
      return;
    case protocol::MsgKind::kRndvData:
      rndv_->on_fragment(peer.index, protocol::load_wire<protocol::DataBody>(body), payload,
                         h.payload_length);
      return;
    default:
      return;
  }
}

// --- UD: on-demand RC connections for writes ---------------------------------------------------

bool Worker::wqp_busy(std::uint32_t i) const noexcept {
  const Peer& p = *peers_[i];
  return rndv_->active_with(i) != 0 || p.wqp_state == WriteQpState::kConnecting ||
         p.wqp_sq.outstanding() != 0;
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
    qp->to_init(
        verbs::RcInitAttr{.port_num = port_,
                          .pkey_index = 0,
                          .access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE});
    std::random_device rd;
    p.wqp_psn = rd() & 0xffffff;
    p.wqp_sq = eager::SendQueue(qp->get(), kRcSendDepth, kSignalEvery);
    p.write_qp = std::move(qp);
    return true;
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: RC write connection to %016llx: %s\n",
                 static_cast<unsigned long long>(p.uid), e.what());
    return false;
  }
}

bool Worker::connect_wqp(Peer& p, std::uint32_t remote_qpn, std::uint32_t remote_psn) {
  verbs::RemoteQp remote;
  std::memcpy(remote.gid.raw, p.address.gid.data(), 16);
  remote.lid = p.address.lid;
  remote.qpn = remote_qpn;
  remote.psn = remote_psn;
  try {
    p.write_qp->to_rtr(verbs::RcRtrAttr{.remote = remote,
                                        .path_mtu = p.path_mtu,
                                        .sgid_index = static_cast<std::uint8_t>(gid_index_),
                                        .min_rnr_timer = 1,
                                        .max_dest_rd_atomic = 1,
                                        .port_num = port_});
    p.write_qp->to_rts(verbs::RcRtsAttr{.sq_psn = p.wqp_psn,
                                        .timeout = 15,
                                        .retry_cnt = 7,
                                        .max_rd_atomic = 1,
                                        .rnr_retry = res_.rc_rnr_retry});
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: RC write connection to %016llx: %s\n",
                 static_cast<unsigned long long>(p.uid), e.what());
    return false;
  }
  p.wqp_remote_qpn = remote_qpn;
  move_to(p, WriteQpState::kReady);
  ++stat_rc_connects_;
  if (config_.verbose >= 2) {
    std::fprintf(stderr, "rdmx: RC write connection to %016llx up (QP %u -> %u)\n",
                 static_cast<unsigned long long>(p.uid), p.write_qp->qp_num(), remote_qpn);
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
  p.wqp_start_us = now;
  p.wqp_rto_us = kWrConnectRtoUs;
  p.wqp_next_us = now + p.wqp_rto_us;
  (void)send_wqp_ctrl(p, connect_op::kWqpRequest, p.write_qp->qp_num(), p.wqp_psn);
  if (!p.wqp_listed) {
    p.wqp_listed = true;
    wqp_connect_list_.push_back(&p);
  }
  if (next_wqp_timer_us_ == 0 || p.wqp_next_us < next_wqp_timer_us_) {
    next_wqp_timer_us_ = p.wqp_next_us;
  }
}

void Worker::wqp_connect_failed(Peer& p, const char* why) {
  if (config_.verbose >= 1) {
    std::fprintf(stderr, "rdmx: no RC write connection to %016llx (%s): copy path\n",
                 static_cast<unsigned long long>(p.uid), why);
  }
  if (p.write_qp) {
    p.wqp_sq.close();
    wqp_retired_.push_back(std::move(p.write_qp));
  }
  p.wqp_sq = eager::SendQueue();
  move_to(p, WriteQpState::kNone);
  p.wqp_remote_qpn = 0;
  wqp_lru_->remove(p.index);
  rndv_->on_connection_failed(p.index);
}

bool Worker::retire_wqp(Peer& p, bool tell_peer) {
  if (p.write_qp && p.wqp_sq.outstanding() != 0) {
    return false;  // writes still to come back; retried by the last of them
  }
  if (p.write_qp) {
    if (tell_peer && p.wqp_state == WriteQpState::kReady) {
      (void)send_wqp_ctrl(p, connect_op::kWqpClose, p.write_qp->qp_num(), 0);
    }
    p.wqp_sq.close();
    wqp_retired_.push_back(std::move(p.write_qp));
    ++stat_rc_retired_;
    if (config_.verbose >= 2) {
      std::fprintf(stderr, "rdmx: RC write connection to %016llx retired\n",
                   static_cast<unsigned long long>(p.uid));
    }
  }
  p.wqp_sq = eager::SendQueue();
  if (p.wqp_state != WriteQpState::kNone) {
    move_to(p, WriteQpState::kNone);
  }
  p.wqp_remote_qpn = 0;
  if (wqp_lru_) {
    wqp_lru_->remove(p.index);
  }
  return true;
}

void Worker::on_wqp_ctrl(Peer& p, std::uint8_t op, std::uint32_t qpn, std::uint32_t psn,
                         std::uint32_t for_qpn) {
  auto refuse = [&] { (void)send_wqp_ctrl(p, connect_op::kWqpReply, 0, 0, qpn); };
  auto accept = [&] {
    (void)send_wqp_ctrl(p, connect_op::kWqpReply, p.write_qp->qp_num(), p.wqp_psn, qpn);
  };
  switch (op) {
    case connect_op::kWqpRequest: {
      if (qpn == 0) {
        return;
      }
      if (p.wqp_state == WriteQpState::kReady) {
        if (p.wqp_remote_qpn == qpn) {
          accept();  // a repeat
          return;
        }
        // Ours points at a QP of theirs that they have retired.
        if (!retire_wqp(p, false)) {
          refuse();
          return;
        }
      }
      if (p.wqp_state == WriteQpState::kConnecting) {
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
        p.wqp_sq.close();
        wqp_retired_.push_back(std::move(p.write_qp));
        p.wqp_sq = eager::SendQueue();
        refuse();
        return;
      }
      wqp_lru_->insert(p.index);
      accept();
      return;
    }
    case connect_op::kWqpReply:
      if (p.wqp_state != WriteQpState::kConnecting || p.write_qp->qp_num() != for_qpn) {
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
      if (p.wqp_state == WriteQpState::kReady && p.wqp_remote_qpn == qpn) {
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
    if (p.wqp_state != WriteQpState::kConnecting) {
      p.wqp_listed = false;
      continue;
    }
    if (now - p.wqp_start_us >= std::uint64_t{config_.peer_timeout_ms} * 1000) {
      p.wqp_listed = false;
      wqp_connect_failed(p, "no answer");
      continue;
    }
    if (now >= p.wqp_next_us) {
      (void)send_wqp_ctrl(p, connect_op::kWqpRequest, p.write_qp->qp_num(), p.wqp_psn);
      p.wqp_rto_us = std::min(p.wqp_rto_us * 2, kWrConnectRtoMaxUs);
      p.wqp_next_us = now + p.wqp_rto_us;
    }
    next = next == 0 ? p.wqp_next_us : std::min(next, p.wqp_next_us);
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
