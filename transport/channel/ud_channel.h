// The UD channel's hooks (channel.h): shared UD QPs, with rdmx's own reliability (send window,
// acks, RTO and resend, congestion window) and on-demand RC connections for rendezvous writes.
// Its posting, acks and timers are in ud_send.cc, the write connections in ud_write_qp.cc.
#pragma once

#include <algorithm>

#include "transport/channel/channel.h"
#include "transport/worker.h"

namespace rdmx::transport {

struct UdChannel {
  static rendezvous::PostResult post(Worker& w, Peer& peer, eager::SendPool& pool,
                                     protocol::MsgHeader& h, const void* body,
                                     std::size_t body_length, const void* payload,
                                     std::size_t length);  // ud_send.cc
  static bool stream_full(const Peer& p) noexcept {
    return !p.ud.tx->can_send() || p.ud.tx->in_flight() >= p.ud.cwnd;
  }
  static bool dropped_for_test(Worker& w) noexcept {
    if (w.drop_for_test()) [[unlikely]] {
      ++w.stat_ud_dropped_test_;
      return true;
    }
    return false;
  }
  [[gnu::always_inline]] static bool admit(Worker& w, Peer& p, const protocol::MsgHeader& h,
                                           const ibv_wc& wc, std::uint64_t& now) {
    if (wc.src_qp != p.address.ud_qpn[0] && wc.src_qp != p.address.ud_qpn[1]) [[unlikely]] {
      ++w.stat_dropped_foreign_;
      return false;
    }
    now = w.now_us();
    if ((h.flags & protocol::kFlagAckValid) != 0) {
      w.on_ud_ack(p, h.ack, now);
    }
    return static_cast<protocol::MsgKind>(h.kind) != protocol::MsgKind::kAck;
  }
  [[gnu::always_inline]] static void before_in_order(Worker& w, Peer& p,
                                                     const protocol::MsgHeader& h,
                                                     std::uint64_t now) {
    p.ud.ack->on_received(now);
    if ((h.flags & protocol::kFlagAckRequest) != 0) {
      p.ud.ack->on_ack_requested();
    }
    w.list_ud_timer(p);
  }
  static void after_in_order(Worker&, Peer&) noexcept {}
  static void on_held(Worker& w, Peer& p, std::uint64_t now) {
    p.ud.ack->on_received(now);
    w.list_ud_timer(p);
  }
  static void on_rejected(Worker& w, Peer& p, const protocol::MsgHeader&, protocol::Arrival) {
    p.ud.ack->on_duplicate();  // the sender resends: our ack is lost or late
    w.list_ud_timer(p);
  }
  static SendErrorScope send_error(const Worker&, const eager::SendDesc& desc,
                                   const ibv_wc& wc) noexcept {
    const Peer* owner = static_cast<const Peer*>(desc.peer);
    if (owner != nullptr && desc.queue == &owner->ud.wqp_sq) {
      return SendErrorScope::kWriteQp;  // only that connection is lost, not the peer
    }
    // A shared UD QP: the send error moved it to an error state (rxe: when the link is down).
    return wc.status == IBV_WC_WR_FLUSH_ERR ? SendErrorScope::kNothing
                                            : SendErrorScope::kSharedUdQp;
  }
  static void on_send_done(Peer*) noexcept {}
  // Rendezvous writes go over an on-demand RC connection (rndv.cc); no reads.
  static rendezvous::WriteConnection write_connection(Worker& w, Peer& p) {
    return w.ud_write_connection(p);
  }
  static eager::SendQueue* write_queue(Peer& p) noexcept {
    return p.ud.wqp_state == WriteQpState::kReady ? &p.ud.wqp_sq : nullptr;
  }
  static constexpr bool kReads = false;
  // Our write QP for this peer (connecting or connected), so that a sender whose QP points at
  // another one of ours knows it is stale.
  static std::uint32_t cts_aux(const Peer& p) noexcept {
    return p.ud.write_qp ? p.ud.write_qp->qp_num() : 0;
  }
};

// A peer with messages unacked either way waits in the timer list; inline in the paths of every
// message sent and received.
inline void Worker::list_ud_timer(Peer& peer) {
  if (!peer.ud.timer_listed) [[unlikely]] {
    enlist_ud_timer(peer);
  }
  const std::uint64_t due = std::min(peer.ud.tx->deadline_us(), peer.ud.ack->deadline_us());
  if (due < next_ud_timer_us_) {
    next_ud_timer_us_ = due;
  }
}

}  // namespace rdmx::transport
