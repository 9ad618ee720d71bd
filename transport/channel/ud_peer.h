// What a UD channel (ud_channel.h) keeps per peer: its send window, ack policy and congestion
// window, and the on-demand RC connection for rendezvous writes. Inside Peer as peer.ud.
#pragma once

#include <cstdint>
#include <memory>

#include "eager/send_queue.h"
#include "protocol/reliability.h"
#include "transport/state_moves.h"
#include "verbs/qp.h"

namespace rdmx::transport {

// The on-demand RC connection for rendezvous writes. Every change goes through move_to()
// (peer.h), checked against kWriteQpMoves.
//   kNone ──first write needed (room under the cap)──> kConnecting ──their reply──> kReady
//     │ ^                                                   │                          │ ^
//     │ ├───── refused, no answer, cannot connect ──────────┘                          │ │
//     │ └───── retired (LRU eviction, teardown, the peer closed it) ───────────────────┘ │
//     └─────── the peer asked first: we accept and connect ──────────────────────────────┘
enum class WriteQpState : std::uint8_t { kNone, kConnecting, kReady };

inline constexpr StateMoves<WriteQpState, 3> kWriteQpMoves = {
    .machine = "write connection",
    .names = {"none", "connecting", "ready"},
    .next = {
        /* none */ state_bit(WriteQpState::kConnecting) | state_bit(WriteQpState::kReady),
        /* connecting */ state_bit(WriteQpState::kNone) | state_bit(WriteQpState::kReady),
        /* ready */ state_bit(WriteQpState::kNone),
    }};

struct UdPeer {
  // Reliability: our next Seq and what is unacknowledged; when our acks go out.
  std::unique_ptr<protocol::SendWindow> tx;
  std::unique_ptr<protocol::AckPolicy> ack;
  bool timer_listed = false;
  // Congestion window (AIMD, below the reliability window): halved on a retransmission timeout,
  // +1 per window of acknowledged messages. Keeps an incast from overflowing the receiver's SRQs
  // with packets that are then dropped and resent.
  std::uint32_t cwnd = 0;
  std::uint32_t cwnd_acked = 0;
  bool acked_since_rto = false;  // only then does an RTO expiry halve the window
  // The RC connection rendezvous writes go over, made on demand over the control QP and capped
  // per worker (rendezvous/rc_lru.h); RC channels write over their own QPs. The wqp_ prefix,
  // here and in the worker, means this write QP (wr_ means a work request).
  std::unique_ptr<verbs::QueuePair> write_qp;
  eager::SendQueue wqp_sq;
  WriteQpState wqp_state = WriteQpState::kNone;
  std::uint32_t wqp_psn = 0;
  std::uint32_t wqp_remote_qpn = 0;  // the peer's QP ours is connected to (kReady)
  std::uint64_t wqp_start_us = 0;
  std::uint64_t wqp_next_us = 0;
  std::uint64_t wqp_rto_us = 0;
  bool wqp_listed = false;
};

}  // namespace rdmx::transport
