// The glue between the worker and the rendezvous engine (rendezvous/engine.h): the engine's
// Transport hooks over the channel type (RndvHooks<Ch>), the RTS of large sends, matched RTSs,
// the rendezvous messages, RDMA writes and reads.
//
// Which QP carries the writes is the channel's (Ch::write_connection, Ch::write_queue):
//   RC: the peer's large-class QP (rc.qp[1]), so that small messages on rc.qp[0] never queue
//       behind megabytes of writes; the write-with-imm consumes one receive of the large SRQ.
//   UD: an RC QP per peer made on demand (channel/ud_write_qp.cc).
#include <random>

#include "transport/channel/rc_channel.h"
#include "transport/channel/ud_channel.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

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

template <class Ch>
class Worker::RndvHooks final : public rendezvous::Transport {
 public:
  explicit RndvHooks(Worker& w) : w_(w) {}

  rendezvous::PostResult post_cts(rendezvous::PeerIndex peer,
                                  const protocol::CtsBody& body) override {
    Peer& p = *w_.peers_[peer];
    return post(p, protocol::MsgKind::kCts, p.shm.on() ? 0 : Ch::cts_aux(p), &body, sizeof(body),
                nullptr, 0);
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
    Peer& p = *w_.peers_[peer];
    if (p.state != PeerState::kConnected) {
      return rendezvous::WriteConnection::kUnavailable;
    }
    if (p.shm.on()) {  // copies by cross-memory attach, or the copy path through the ring
      return p.shm.cma ? rendezvous::WriteConnection::kReady
                       : rendezvous::WriteConnection::kUnavailable;
    }
    return Ch::write_connection(w_, p);
  }
  rendezvous::PostResult post_write(rendezvous::PeerIndex peer,
                                    const rendezvous::WriteRequest& write) override {
    Peer& p = *w_.peers_[peer];
    if (p.shm.on()) {
      return w_.shm_write(p, write);
    }
    return w_.post_write(p, Ch::write_queue(p), write);
  }
  rendezvous::PostResult post_read(rendezvous::PeerIndex peer,
                                   const rendezvous::ReadRequest& read) override {
    Peer& p = *w_.peers_[peer];
    if (p.shm.on()) {
      return w_.shm_read(p, read);
    }
    if constexpr (Ch::kReads) {
      return w_.post_read(p, read);
    } else {
      return rendezvous::PostResult::kFailed;  // the engine is configured without reads
    }
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
  if (ud_mode_) {
    rndv_hooks_ = std::make_unique<RndvHooks<UdChannel>>(*this);
  } else {
    rndv_hooks_ = std::make_unique<RndvHooks<RcChannel>>(*this);
  }
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
  if (peer.stream_full(peer)) [[unlikely]] {
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

rendezvous::PostResult Worker::post_write(Peer& p, eager::SendQueue* sq,
                                          const rendezvous::WriteRequest& w) {
  if (p.state == PeerState::kFailed || sq == nullptr) {
    return rendezvous::PostResult::kFailed;
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
      sq->post(*tx_->send, wr,
               eager::SendQueue::Post{.kind = w.with_imm ? protocol::WrKind::kRdmaWriteImm
                                                         : protocol::WrKind::kRdmaWrite,
                                      .want_signal = w.signaled,
                                      .peer = &p,
                                      .cookie = w.token});
  return rdma_posted(rc, "rendezvous RDMA write");
}

rendezvous::PostResult Worker::post_read(Peer& p, const rendezvous::ReadRequest& r) {
  // RC channels only (RcChannel::kReads): the large-class QP, the one the sender's writes of
  // the other share arrive on.
  if (p.state == PeerState::kFailed) {
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
  const int rc = p.rc.sq[1].post(*tx_->send, wr,
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
  protocol::RtsBody body = rts;
  if (peer.shm.on() && !peer.shm.cma) {
    // A node-local sender whose memory we cannot reach (shm_cma=0, or the kernel refuses
    // cross-memory attach): no read share, the sender copies it all through the ring.
    body.rkey = 0;
    body.addr = 0;
  }
  rndv_->on_rts_matched(peer.index, r, r->buffer, r->capacity, body);
}

void Worker::on_rndv_message(Peer& peer, const protocol::MsgHeader& h, const std::byte* body,
                             const std::byte* payload) {
  switch (static_cast<protocol::MsgKind>(h.kind)) {
    case protocol::MsgKind::kCts:
      if (peer.ud.wqp_state == WriteQpState::kReady && h.aux != 0 &&  // UD's write QPs only
          peer.ud.wqp_remote_qpn != h.aux) {
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

}  // namespace rdmx::transport
