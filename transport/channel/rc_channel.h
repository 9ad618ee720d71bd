// The RC channel's hooks (channel.h): the hardware keeps each QP reliable and ordered; rdmx adds
// receiver-driven credits, eager rings and the OrderGuard across a peer's per-class QPs. Its
// posting is in rc_send.cc, its rings in rc_ring.cc.
#pragma once

#include <cstdio>

#include "transport/channel/channel.h"
#include "transport/worker.h"

namespace rdmx::transport {

struct RcChannel {
  static rendezvous::PostResult post(Worker& w, Peer& peer, eager::SendPool& pool,
                                     protocol::MsgHeader& h, const void* body,
                                     std::size_t body_length, const void* payload,
                                     std::size_t length);  // rc_send.cc
  static bool stream_full(const Peer& p) noexcept {
    return !p.rc.guard->can_send() || !protocol::seq_lt(p.rc.guard->next(), p.rc.credit_limit);
  }
  static bool dropped_for_test(Worker&) noexcept { return false; }  // ud_drop_rate is UD's
  [[gnu::always_inline]] static bool admit(Worker& w, Peer& p, const protocol::MsgHeader& h,
                                           const ibv_wc&, std::uint64_t&) {
    w.on_rc_acks(p, h);
    if (static_cast<protocol::MsgKind>(h.kind) == protocol::MsgKind::kAck) {
      return false;
    }
    if (h.seq != p.rx->expected() && p.rc.rx_ring) [[unlikely]] {
      // The messages before it may be in the peer's ring, placed but not polled yet: take them
      // first (without this, one placed long enough ago could even be outside the order window).
      (void)w.poll_ring(p);
    }
    return true;
  }
  static void before_in_order(Worker&, Peer&, const protocol::MsgHeader&, std::uint64_t) noexcept {}
  [[gnu::always_inline]] static void after_in_order(Worker& w, Peer& p) {
    w.maybe_grant(p);
    w.count_for_ring(p);
  }
  static void on_held(Worker&, Peer&, std::uint64_t) noexcept {}
  static void on_rejected(Worker&, Peer& p, const protocol::MsgHeader& h,
                          protocol::Arrival a) noexcept {
    if (a != protocol::Arrival::kDuplicate) {
      std::fprintf(stderr, "rdmx: RC message seq %u from %016llx outside the order window\n", h.seq,
                   static_cast<unsigned long long>(p.uid));
    }
  }
  static SendErrorScope send_error(const Worker& w, const eager::SendDesc& desc,
                                   const ibv_wc& wc) noexcept {
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      return SendErrorScope::kNothing;
    }
    // An RC error (retry exceeded: the peer is gone) moves the QP to ERR; flushes follow. The
    // control QP is UD in both modes.
    return desc.queue != &w.ctrl_sq_ && desc.peer != nullptr ? SendErrorScope::kPeer
                                                             : SendErrorScope::kSharedUdQp;
  }
  static void on_send_done(Peer* p) noexcept {
    if (p != nullptr) {
      ++p->rc.completions;  // the RC watchdog's sign of progress
    }
  }
  // Rendezvous writes and reads go over the large class's QP, connected with the peer.
  static rendezvous::WriteConnection write_connection(Worker&, Peer& p) noexcept {
    return p.rc_ready ? rendezvous::WriteConnection::kReady
                      : rendezvous::WriteConnection::kUnavailable;
  }
  static eager::SendQueue* write_queue(Peer& p) noexcept { return &p.rc.sq[1]; }
  static constexpr bool kReads = true;
  static std::uint32_t cts_aux(const Peer&) noexcept { return 0; }
};

}  // namespace rdmx::transport
