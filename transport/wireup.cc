// Connection set-up over the UD control QP.
//
// An address blob is per worker, but RC needs per-peer QP numbers. So every worker has a UD
// control QP named in its blob, and rdmx_ep_create runs this handshake:
//
//   requester (ep_create)                            responder
//   creates its RC QPs (INIT)
//   kConnect{REQUEST, its index for the responder,
//            its RC QPNs/PSNs, its whole address}  ->  finds or creates the peer (an implicit
//   retransmitted with backoff until answered          endpoint), creates its RC QPs, moves them
//   or peer_timeout_ms passes (then UNREACHABLE)       to RTR/RTS against the requester's QPNs
//                                                  <-  kConnect{REPLY, its index, its QPNs/PSNs}
//   RTR/RTS against the responder's QPNs,              (then waits for the requester's REPLY,
//   kConnect{REPLY}: "my QPs are ready too"        ->  asking again if it does not come)
//   connected: queued sends go out                     connected: queued sends go out
//
// A side sends data only after the peer's REPLY, which the peer sends only once its own QPs are
// in RTR: data that reached a QP still in INIT would be dropped, and rxe (6.1) does not reliably
// retransmit it (the RC QP then stalls). Every REQUEST is answered with a REPLY, so a lost
// message only costs a retransmission.
//
// Both sides connecting at once works too: each side's REQUEST finds the other already holding
// QPs for it, so each connects its existing QPs and replies; each REPLY then completes it. In UD
// mode the same exchange only trades endpoint indices (the UD QPNs are in the blob); the data QPs
// then carry everything. A worker that is destroyed sends kDisconnect (best effort) so its peers
// fail its sends at once instead of after peer_timeout_ms.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "transport/channel/shm_channel.h"
#include "transport/reach.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

using protocol::ConnectBody;
static_assert(sizeof(ConnectBody) + protocol::kHeaderSize <= kCtrlCapacity);

constexpr std::uint64_t kConnectRtoUs = 2000;
constexpr std::uint64_t kConnectRtoMaxUs = 200000;

ibv_mtu mtu_enum(std::uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

}  // namespace

Peer* Worker::find_peer(std::uint64_t uid) noexcept {
  const auto it = peer_by_uid_.find(uid);
  return it == peer_by_uid_.end() ? nullptr : peers_[it->second].get();
}

Peer& Worker::add_peer(std::uint64_t uid) {
  auto p = std::make_unique<Peer>();
  p->ep.worker = this;
  p->index = static_cast<std::uint32_t>(peers_.size());
  p->uid = uid;
  peer_by_uid_.emplace(uid, p->index);
  peers_.push_back(std::move(p));
  update_rc_credit_window();
  return *peers_.back();
}

void Worker::set_state(Peer& peer, PeerState to) {
  const PeerState from = peer.state;
  const bool ok = (from == PeerState::kIdle && to == PeerState::kConnecting) ||
                  (from == PeerState::kIdle && to == PeerState::kConnected) ||
                  (from == PeerState::kConnecting && to == PeerState::kConnected) ||
                  (from != PeerState::kFailed && to == PeerState::kFailed);
  if (!ok) {
    std::fprintf(stderr, "rdmx: peer %016llx: refused transition %s -> %s\n",
                 static_cast<unsigned long long>(peer.uid), to_string(from).data(),
                 to_string(to).data());
    return;
  }
  if (config_.verbose >= 2) {
    std::fprintf(stderr, "rdmx: peer %016llx (index %u): %s -> %s\n",
                 static_cast<unsigned long long>(peer.uid), peer.index, to_string(from).data(),
                 to_string(to).data());
  }
  peer.state = to;
}

std::string Worker::transport_mismatch(const WorkerAddress& a) const {
  if (a.transport == (ud_mode_ ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC)) {
    return {};
  }
  char text[200];
  std::snprintf(text, sizeof(text),
                "peer %016llx uses transport %s, this worker %s: set the same RDMX_TRANSPORT "
                "everywhere (with auto, the same expected peers)",
                static_cast<unsigned long long>(a.uid),
                transport_name(static_cast<rdmx_transport_t>(a.transport)), ud_mode_ ? "ud" : "rc");
  return text;
}

int Worker::set_address(Peer& peer, const WorkerAddress& a) {
  if (const std::string why = transport_mismatch(a); !why.empty()) {
    std::fprintf(stderr, "rdmx: %s\n", why.c_str());
    return RDMX_ERR_UNSUPPORTED;
  }
  verbs::AhAttr attr{.sgid_index = gid_index_};
  attr.dgid = grh_dgid(a);
  attr.port_num = port_;
  attr.dlid = a.lid;
  attr.traffic_class = res_.traffic_class;
  attr.sl = res_.service_level;
  try {
    peer.ah = std::make_unique<verbs::AddressHandle>(verbs::AddressHandle::create(*pd_, attr));
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: cannot reach peer %016llx: %s\n",
                 static_cast<unsigned long long>(a.uid), e.what());
    return RDMX_ERR_UNREACHABLE;
  }
  // A node-local peer's segment first: a peer that cannot be reached keeps no address (a later
  // ep_create tries again, and says why again).
  const bool shm = wants_shm(a);
  if (shm) {
    if (const int rc = attach_shm(peer, a); rc != RDMX_OK) {
      return rc;
    }
  }
  peer.address = a;
  peer.have_address = true;
  peer.remote_instance = a.instance;
  const std::uint32_t mtu = std::min(a.mtu, res_.path_mtu);
  peer.path_mtu = mtu_enum(mtu);
  // A batch fills one packet at most (past the MTU rxe's cost is per packet again), in
  // whichever of the peer's classes takes it: on UD the large class is exactly one packet.
  peer.batch_capacity = std::min<std::uint32_t>(
      a.class_capacity[1], mtu - static_cast<std::uint32_t>(protocol::kHeaderSize));
  peer.pending_match_acks.reserve(64);
  if (shm) {
    peer.post = &ShmChannel::post;
    peer.stream_full = &ShmChannel::stream_full;
    // The ring is FIFO: messages come in order, the window only bounds what could be held.
    peer.rx = std::make_unique<protocol::Sequencer>(kRcOrderWindow);
    return RDMX_OK;
  }
  peer.post = ops_.post;
  peer.stream_full = ops_.stream_full;
  ++device_peers_;
  if (shm_ != nullptr && config_.verbose >= 1) {
    std::fprintf(stderr, "rdmx: %016llx: peer %016llx goes through the device (%s): %s\n",
                 static_cast<unsigned long long>(uid_), static_cast<unsigned long long>(a.uid),
                 ud_mode_ ? "ud" : "rc",
                 (a.caps & protocol::kCapShm) == 0 ? "it has no shared memory (shm=0 there)"
                                                   : "it is on another node");
  }
  if (ud_mode_) {
    peer.rx = std::make_unique<protocol::Sequencer>(kUdWindow);
    protocol::SendWindowConfig wc;
    wc.window = kUdWindow;
    wc.rto_min_us = std::max<std::uint32_t>(config_.ud_rto_us, 100);
    wc.rto_max_us = std::max<std::uint64_t>(wc.rto_min_us, 1'000'000);
    wc.peer_timeout_us = std::uint64_t{std::max<std::uint32_t>(config_.peer_timeout_ms, 1)} * 1000;
    peer.ud.tx = std::make_unique<protocol::SendWindow>(wc);
    peer.ud.ack = std::make_unique<protocol::AckPolicy>();
    peer.ud.cwnd = kUdCwndInitial;
  } else {
    peer.rx = std::make_unique<protocol::Sequencer>(kRcOrderWindow);
    peer.rc.guard = std::make_unique<OrderGuard>(kRcOrderWindow);
    peer.rc.ring_countdown = res_.ring_peers != 0 ? kRingOfferAfter : 0;
  }
  return RDMX_OK;
}

ibv_gid Worker::grh_dgid(const WorkerAddress& a) const noexcept {
  ibv_gid g{};
  if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET) {
    std::memcpy(g.raw, a.gid.data(), 16);  // RoCE: every packet has a GRH (or IP header)
  }
  return g;
}

int Worker::check_reach(const WorkerAddress& a, std::string* why) const {
  if (wants_shm(a)) {
    return RDMX_OK;  // node-local: through shared memory, not the fabric
  }
  WorkerAddress ours = local_address();
  const ReachVerdict v = classify_reach(ours, a, gid_roce_v2_, &kernel_route, nullptr);
  if (v.reach == Reach::kOk) {
    if (!v.note.empty() && config_.verbose >= 1) {
      std::fprintf(stderr, "rdmx: %016llx: peer %016llx: %s\n",
                   static_cast<unsigned long long>(uid_), static_cast<unsigned long long>(a.uid),
                   v.note.c_str());
    }
    return RDMX_OK;
  }
  char host[256] = {};
  (void)gethostname(host, sizeof(host) - 1);
  *why = "from host " + std::string(host) + ": " + v.why;
  return RDMX_ERR_UNREACHABLE;
}

int Worker::check_peer(const void* address, std::size_t length, std::string* why) const {
  WorkerAddress a;
  if (const int rc = decode_address(address, length, &a); rc != RDMX_OK) {
    *why = "the address blob is malformed or of another rdmx version (" + std::to_string(length) +
           " bytes; this one's are " + std::to_string(kAddressSize) + ")";
    return rc;
  }
  // A worker of the other transport cannot be talked to at all: said before any traffic too.
  if (std::string mismatch = transport_mismatch(a); !mismatch.empty()) {
    *why = std::move(mismatch);
    return RDMX_ERR_UNSUPPORTED;
  }
  return check_reach(a, why);
}

void Worker::create_rc_qps(Peer& peer) {
  std::random_device rd;
  for (int c = 0; c < kNumClasses; ++c) {
    auto qp = std::make_unique<verbs::QueuePair>(verbs::QueuePair::create(
        *pd_, verbs::QpConfig{.type = IBV_QPT_RC,
                              .send_cq = &*send_cq_,
                              .recv_cq = &*recv_cq_,
                              .srq = &pools_[c]->srq_object(),
                              .caps = {.max_send_wr = kRcSendDepth + kRcSendReserve,
                                       .max_recv_wr = 0,
                                       .max_send_sge = 2,
                                       .max_recv_sge = 1,
                                       .max_inline_data = max_inline_},
                              .sq_sig_all = false}));
    // REMOTE_WRITE: the zero-length write that flushes unsignalled sends and the rendezvous
    // writes must be accepted by the responder; REMOTE_READ: the receiver's read share.
    qp->to_init(verbs::RcInitAttr{
        .port_num = port_,
        .pkey_index = res_.pkey_index,
        .access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
    peer.rc.psn[c] = rd() & 0xffffff;
    peer.rc.sq[c] = eager::SendQueue(qp->get(), kRcSendDepth, kSignalEvery, kRcSendReserve);
    peer.rc.qp[c] = std::move(qp);
  }
}

void Worker::connect_rc(Peer& peer, const std::uint32_t* qpn, const std::uint32_t* psn) {
  verbs::RemoteQp remote;
  remote.gid = grh_dgid(peer.address);
  remote.lid = peer.address.lid;
  for (int c = 0; c < kNumClasses; ++c) {
    remote.qpn = qpn[c];
    remote.psn = psn[c];
    // min_rnr_timer 1 (0.01 ms): an empty SRQ costs senders a short wait, not 655 ms (0).
    peer.rc.qp[c]->to_rtr(verbs::RcRtrAttr{.remote = remote,
                                           .path_mtu = peer.path_mtu,
                                           .sgid_index = gid_index_,
                                           .min_rnr_timer = 1,
                                           .max_dest_rd_atomic = rd_atomic_,
                                           .port_num = port_,
                                           .traffic_class = res_.traffic_class,
                                           .sl = res_.service_level});
    // timeout and retry_cnt: rc_timeout, by default 17 (0.5 s per try), and rc_retry_cnt, by
    // default 7: on an incast the ACKs of a QP that keeps meeting an empty SRQ can be late many
    // times in a row, and an RC QP that gives up fails the whole connection. rxe even treats
    // retry_cnt 7 as "for ever"; the RC watchdog (no send completion for peer_timeout_ms) then
    // finds dead peers.
    // rnr_retry: rc_rnr_retry, by default 7, for ever: credits keep the peer's SRQ from running
    // dry, but a refill can lag (an RNR NAK then costs a wait, not the connection).
    peer.rc.qp[c]->to_rts(
        verbs::RcRtsAttr{.sq_psn = peer.rc.psn[c],
                         .timeout = res_.rc_timeout,
                         .retry_cnt = res_.rc_retry_cnt,
                         // no more reads in flight than the peer takes
                         .max_rd_atomic = std::min(rd_atomic_, peer.address.rd_atomic),
                         .rnr_retry = res_.rc_rnr_retry});
  }
  peer.rc_ready = true;
}

void Worker::start_connect(Peer& peer) {
  if (!ud_mode_ && !peer.shm.on() && !peer.rc.qp[0]) {
    create_rc_qps(peer);
  }
  arm_connect(peer, /*send_request=*/true);
}

void Worker::arm_connect(Peer& peer, bool send_request) {
  set_state(peer, PeerState::kConnecting);
  const std::uint64_t now = now_us();
  peer.conn_start_us = now;
  peer.conn_rto_us = kConnectRtoUs;
  peer.conn_next_us = now + peer.conn_rto_us;
  peer.conn_tries = send_request ? 1 : 0;
  if (send_request) {
    (void)send_connect(peer, connect_op::kRequest);
  }
  if (!peer.conn_listed) {
    peer.conn_listed = true;
    connect_list_.push_back(&peer);
  }
  next_connect_timer_us_ = std::min(next_connect_timer_us_, peer.conn_next_us);
}

void Worker::run_connect_timers(std::uint64_t now) {
  std::uint64_t next = protocol::kNoDeadline;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < connect_list_.size(); ++i) {
    Peer& p = *connect_list_[i];
    if (p.state != PeerState::kConnecting) {
      p.conn_listed = false;
      continue;
    }
    if (now - p.conn_start_us >= std::uint64_t{config_.peer_timeout_ms} * 1000) {
      p.conn_listed = false;
      fail_peer(p, RDMX_ERR_UNREACHABLE, "no answer to the connection request");
      continue;
    }
    if (now >= p.conn_next_us) {
      ++p.conn_tries;
      (void)send_connect(p, connect_op::kRequest);
      p.conn_rto_us = std::min(p.conn_rto_us * 2, kConnectRtoMaxUs);
      p.conn_next_us = now + p.conn_rto_us;
    }
    next = std::min(next, p.conn_next_us);
    connect_list_[keep++] = &p;
  }
  connect_list_.resize(keep);
  next_connect_timer_us_ = next;
}

bool Worker::post_ctrl(Peer& peer, const protocol::MsgHeader& header, const void* body,
                       std::size_t length) {
  eager::SendPool& pool = *tx_->send;
  std::uint32_t buf = 0;
  if (!peer.ah || !pool.alloc_buffer(0, &buf)) {
    return false;
  }
  std::byte* data = pool.buffer(0, buf);
  protocol::store_wire(data, header);
  if (length != 0) {
    std::memcpy(data + protocol::kHeaderSize, body, length);
  }
  ibv_sge sge{.addr = reinterpret_cast<std::uintptr_t>(data),
              .length = static_cast<std::uint32_t>(protocol::kHeaderSize + length),
              .lkey = pool.lkey()};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.ah = peer.ah->get();
  wr.wr.ud.remote_qpn = peer.address.ctrl_qpn;
  wr.wr.ud.remote_qkey = kQkey;
  const int rc = ctrl_sq_.post(
      pool, wr,
      eager::SendQueue::Post{
          .kind = protocol::WrKind::kControl, .buf_class = 0, .buf = buf, .want_signal = true});
  if (rc != 0) {
    pool.release_unused(0, buf);
    if (rc != EAGAIN && rc != ESHUTDOWN) {
      verbs::log_verb_failure("ibv_post_send", rc, "control QP");
    }
    return false;
  }
  return true;
}

bool Worker::send_connect(Peer& peer, std::uint8_t op) {
  ConnectBody body{};
  body.op = op;
  body.transport = static_cast<std::uint8_t>(ud_mode_ ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC);
  body.sender_index = peer.index;
  body.rc_credits = peer.rx ? grant_credits(peer) : 0;
  body.target_uid = peer.uid;
  body.target_instance = peer.remote_instance;
  for (int c = 0; c < kNumClasses; ++c) {
    body.rc_qpn[c] = peer.rc.qp[c] ? peer.rc.qp[c]->qp_num() : 0;
    body.rc_psn[c] = peer.rc.psn[c];
  }
  std::memcpy(body.address, address_bytes_.data(), kAddressSize);
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kConnect);
  h.src_ep = peer.remote_index;
  h.payload_length = sizeof(body);
  return post_ctrl(peer, h, &body, sizeof(body));
}

bool Worker::send_wqp_ctrl(Peer& peer, std::uint8_t op, std::uint32_t qpn, std::uint32_t psn,
                           std::uint32_t for_qpn) {
  ConnectBody body{};
  body.op = op;
  body.transport = static_cast<std::uint8_t>(RDMX_TRANSPORT_UD);
  body.sender_index = peer.index;
  body.target_uid = peer.uid;
  body.target_instance = peer.remote_instance;
  body.rc_qpn[0] = qpn;
  body.rc_psn[0] = psn;
  body.rc_qpn[1] = for_qpn;
  std::memcpy(body.address, address_bytes_.data(), kAddressSize);
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kConnect);
  h.src_ep = peer.remote_index;
  h.payload_length = sizeof(body);
  return post_ctrl(peer, h, &body, sizeof(body));
}

bool Worker::send_disconnect(Peer& peer) {
  if (peer.remote_index == kNoIndex) {
    return false;
  }
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kDisconnect);
  h.src_ep = peer.remote_index;
  return post_ctrl(peer, h, nullptr, 0);
}

void Worker::on_connected(Peer& peer) {
  if (peer.state == PeerState::kConnected) {
    return;
  }
  set_state(peer, PeerState::kConnected);
  if (!ud_mode_ && !peer.shm.on()) {
    ++rc_connected_peers_;
    update_rc_credit_window();
  }
  if (config_.verbose >= 2) {
    std::fprintf(stderr, "rdmx: connected to %016llx (its index for us %u) after %u tries\n",
                 static_cast<unsigned long long>(peer.uid), peer.remote_index, peer.conn_tries);
  }
  // A grant may have come due while data raced ahead of the peer's REPLY (flush_peer skips
  // peers that are not connected yet).
  if (peer.has_waiting() || peer.rc.grant_due) {
    list_for_flush(peer);
  }
}

void Worker::on_ctrl_message(const std::byte* msg, std::size_t length, const ibv_wc& wc) {
  if (length < protocol::kHeaderSize || failed_code_ != 0) {
    return;  // a failed worker takes no new peer and answers nobody (faults.cc)
  }
  const auto h = protocol::load_wire<protocol::MsgHeader>(msg);
  if (protocol::validate(h, length) != protocol::WireError::kOk) {
    if (config_.verbose >= 2) {
      std::fprintf(stderr, "rdmx: dropped a malformed control message (%zu bytes)\n", length);
    }
    return;
  }
  const auto kind = static_cast<protocol::MsgKind>(h.kind);
  if (kind == protocol::MsgKind::kDisconnect) {
    on_disconnect(h, wc);
    return;
  }
  ConnectBody body;
  WorkerAddress from;
  if (!protocol::decode_connect(h, std::span(msg, length), &body, &from) ||
      body.target_uid != uid_ || (body.target_instance != 0 && body.target_instance != instance_)) {
    return;  // not for this worker (or for an earlier incarnation of it)
  }
  if (body.op == connect_op::kPing || body.op == connect_op::kPong) {
    Peer* p = find_peer(from.uid);
    if (p != nullptr && p->state == PeerState::kConnected && p->address.instance == from.instance) {
      on_ping(*p, body.op);  // liveness.cc
    }
    return;
  }
  if (body.op == connect_op::kWqpRequest || body.op == connect_op::kWqpReply ||
      body.op == connect_op::kWqpClose) {
    Peer* p = find_peer(from.uid);
    if (ud_mode_ && p != nullptr && p->state == PeerState::kConnected &&
        p->address.instance == from.instance) {
      on_wqp_ctrl(*p, body.op, body.rc_qpn[0], body.rc_psn[0], body.rc_qpn[1]);
    }
    return;
  }
  if (body.op == connect_op::kRequest || body.op == connect_op::kReply) {
    on_handshake(body, from);
  }
}

void Worker::on_disconnect(const protocol::MsgHeader& h, const ibv_wc& wc) {
  if (h.src_ep >= peers_.size()) {
    return;
  }
  Peer& p = *peers_[h.src_ep];
  if (p.have_address && p.address.ctrl_qpn == wc.src_qp) {
    // What it wrote into our eager ring before leaving (a match-ack, say) was placed before
    // this message came: take it first, as the receive CQ orders its SRQ messages.
    if (p.rc.rx_ring) {
      (void)poll_ring(p);
    }
    if (p.shm.on()) {
      (void)poll_shm();  // the same for our shared-memory rings
    }
    fail_peer(p, RDMX_ERR_UNREACHABLE, "the peer worker was destroyed", /*dead=*/false);
  }
}

void Worker::on_handshake(const ConnectBody& body, const WorkerAddress& from) {
  Peer* p = find_peer(from.uid);
  if (p == nullptr) {
    if (body.op == connect_op::kReply) {
      return;  // a reply for a connection this worker does not know
    }
    p = &add_peer(from.uid);  // an implicit endpoint for the requester
  }
  if (p->state == PeerState::kFailed || p->state == PeerState::kConnected) {
    if (p->state == PeerState::kConnected && body.op == connect_op::kRequest &&
        p->address.instance == from.instance) {
      (void)send_connect(*p, connect_op::kReply);  // our reply was lost: answer again (idempotent)
    }
    return;
  }
  if (!p->have_address) {
    if (set_address(*p, from) != RDMX_OK) {
      return;
    }
  } else if (p->address.instance != from.instance) {
    if (config_.verbose >= 1) {
      std::fprintf(stderr,
                   "rdmx: ignoring a connection message from a new incarnation of %016llx\n",
                   static_cast<unsigned long long>(from.uid));
    }
    return;
  }
  // Both messages carry the sender's QPNs: connect ours to them (once), then tell the peer that
  // ours are ready to receive. Data flows only after the peer's REPLY, which it sends only once
  // its QPs are ready: a packet that reached a QP still in INIT would be lost, and rxe does not
  // always retransmit it.
  bool just_connected = false;
  try {
    if (p->shm.on() || ud_mode_) {
      // Nothing to connect: shared memory (our ring in the peer's segment is attached), UD.
      if (!p->rc_ready) {
        p->rc_ready = true;
        just_connected = true;
      }
    } else {
      if (!p->rc.qp[0]) {
        create_rc_qps(*p);
      }
      if (!p->rc_ready) {
        connect_rc(*p, body.rc_qpn, body.rc_psn);
        just_connected = true;
      }
    }
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: connecting to %016llx failed: %s\n",
                 static_cast<unsigned long long>(from.uid), e.what());
    fail_peer(*p, RDMX_ERR_UNREACHABLE, "RC connection failed");
    return;
  }
  p->remote_index = body.sender_index;
  on_rc_credits(*p, body.rc_credits);
  if (body.op == connect_op::kRequest || just_connected) {
    (void)send_connect(*p, connect_op::kReply);
  }
  if (body.op == connect_op::kReply) {
    p->peer_ready = true;
  }
  if (p->peer_ready) {
    on_connected(*p);
  } else if (p->state == PeerState::kIdle) {
    // Created by the peer's request: wait for its reply, asking again if it is lost.
    arm_connect(*p, /*send_request=*/false);
  }
}

int Worker::ep_create(const void* address, std::size_t length, rdmx_ep** ep) {
  if (address == nullptr || ep == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (failed_code_ != 0) [[unlikely]] {
    return failed_code_;  // fail_worker said why
  }
  WorkerAddress a;
  if (const int rc = decode_address(address, length, &a); rc != RDMX_OK) {
    return rc;
  }
  if (const std::string why = transport_mismatch(a); !why.empty()) {
    std::fprintf(stderr, "rdmx: rdmx_ep_create: %s\n", why.c_str());
    return RDMX_ERR_UNSUPPORTED;
  }
  try {
    Peer* p = find_peer(a.uid);
    if (p == nullptr) {
      p = &add_peer(a.uid);
    }
    if (p->state == PeerState::kFailed) {
      return RDMX_ERR_UNREACHABLE;
    }
    if (!p->have_address) {
      // Checked here, not in set_address: an implicit endpoint's peer has reached us already,
      // and a refusal there would be printed again at each of its retransmitted requests.
      if (std::string why; check_reach(a, &why) != RDMX_OK) {
        std::fprintf(stderr, "rdmx: rdmx_ep_create: cannot reach peer %016llx %s\n",
                     static_cast<unsigned long long>(a.uid), why.c_str());
        return RDMX_ERR_UNREACHABLE;
      }
      if (const int rc = set_address(*p, a); rc != RDMX_OK) {
        return rc;
      }
    } else if (p->address.instance != a.instance) {
      return RDMX_ERR_UNREACHABLE;  // the peer restarted under the same uid
    }
    if (p->state == PeerState::kIdle) {
      start_connect(*p);
    }
    ++p->ep_refs;
    *ep = &p->ep;
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: rdmx_ep_create: %s\n", e.what());
    return e.errnum() == ENOMEM ? RDMX_ERR_NO_MEMORY : RDMX_ERR_IO;
  } catch (const std::bad_alloc&) {
    return RDMX_ERR_NO_MEMORY;
  }
  return RDMX_OK;
}

void Worker::ep_destroy(Peer& peer) {
  if (peer.ep_refs > 0 && --peer.ep_refs == 0) {
    fail_pending(peer, RDMX_ERR_UNREACHABLE);
  }
}

}  // namespace rdmx::transport
