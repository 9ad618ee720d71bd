// Per-peer state of a worker: connection, ordering, reliability and the queue of sends that
// wait for the connection or for resources.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "eager/recv_ring.h"
#include "eager/send_queue.h"
#include "protocol/address.h"
#include "protocol/batch.h"
#include "protocol/reliability.h"
#include "protocol/sequencer.h"
#include "transport/order_guard.h"
#include "transport/request.h"
#include "verbs/ah.h"
#include "verbs/qp.h"

namespace rdmx::transport {

// The worker address blob (protocol/address.h), used throughout the transport.
using protocol::AddressBytes;
using protocol::decode_address;
using protocol::encode_address;
using protocol::kAddressMagic;
using protocol::kAddressSize;
using protocol::kAddressVersion;
using protocol::kCapRc;
using protocol::kCapUd;
using protocol::kNumClasses;
using protocol::WorkerAddress;
class Worker;
struct Peer;
}  // namespace rdmx::transport

// The public endpoint handle: one per peer, inside the peer (ep_create on a peer that already
// has one returns it again and counts the reference).
struct rdmx_ep {
  rdmx::transport::Worker* worker;
  rdmx::transport::Peer* peer;
};

namespace rdmx::transport {

inline constexpr std::uint32_t kNoIndex = 0xffffffff;

// The connection state machine; every change goes through Worker::set_state, which checks the
// transition and logs it at verbose >= 2.
//
//   kIdle ──ep_create──> kConnecting ──reply──> kConnected
//     │                      │                      │
//     └──request from peer───┴──────────────────────┤ (idempotent: re-reply)
//                            └─timeout─> kFailed <──┘ (QP error, peer timeout, disconnect)
enum class PeerState : std::uint8_t { kIdle, kConnecting, kConnected, kFailed };
std::string_view to_string(PeerState state) noexcept;

// RC: the peer's RDMA-write eager ring that we write our small messages into (transport/ring.cc,
// protocol/ring.h), as its kRingOffer described it. slots == 0: none offered.
struct TxRing {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t slots = 0;
  std::uint32_t slot_size = 0;
  std::uint32_t max_image = 0;  // min(slot_size, our max inline size): what one write may carry
  std::uint32_t head = 0;       // next slot to write
  std::uint32_t sent = 0;       // messages written, in all (mod 2^32)
  std::uint32_t taken = 0;      // messages the peer took out again (its ring_ack)
};

// UD mode: the on-demand RC connection for rendezvous writes. Every change goes through
// move_to() below, checked against kWriteQpMoves.
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

struct Peer {
  std::uint32_t index = kNoIndex;  // ours: the matcher's source id, and the src_ep peers use
  std::uint64_t uid = 0;
  PeerState state = PeerState::kIdle;
  bool have_address = false;
  WorkerAddress address;
  std::uint32_t remote_index = kNoIndex;  // our index at the peer: src_ep of what we send
  rdmx_ep ep{nullptr, this};
  int ep_refs = 0;

  // RC eager rings (transport/ring.cc): the peer's that we write into, and ours that it writes
  // into (polled by progress, in sequence order only). We offer ours once the peer has sent us
  // kRingOfferAfter messages in order (ring_countdown reaches 0; 0 from the start: never).
  TxRing tx_ring;
  std::optional<eager::RecvRing> rx_ring;  // a ring of Worker::ring_slab_
  std::uint32_t ring_countdown = 0;
  bool ring_offer_due = false;  // our kRingOffer waits for a send resource (flush_peer)

  // RC: one QP per size class, attached to our SRQ of that class.
  std::array<std::unique_ptr<verbs::QueuePair>, kNumClasses> rc_qp;
  std::array<eager::SendQueue, kNumClasses> rc_sq;
  std::array<std::uint32_t, kNumClasses> rc_psn{};
  // RC credits (receiver-driven flow control, so that senders do not flood a shared SRQ into
  // RNR storms): we may send Seq s while seq_lt(s, rc_credit_limit); the peer raises the limit
  // in the ack field of its messages and in stand-alone kAcks. rc_granted is the limit we last
  // gave the peer.
  protocol::Seq rc_credit_limit = 0;
  protocol::Seq rc_granted = 0;
  bool rc_grant_due = false;   // a new grant goes out (Worker::maybe_grant)
  bool rc_grant_held = false;  // ... held back one progress call, for a message to carry it
  bool rc_ready = false;       // our side can receive: RC QPs in RTR/RTS (UD: address known)
  bool peer_ready = false;     // the peer said so too (its REPLY): data may flow
  // RC watchdog: send completions seen, and the snapshot the watchdog last compared with. A
  // peer whose sends make no progress for peer_timeout_ms is declared dead even if the device
  // never reports the retry exhaustion (rxe on 6.1 did not, for a killed peer).
  std::uint64_t rc_completions = 0;
  std::uint64_t rc_watch_completions = 0;
  std::uint64_t rc_watch_since_us = 0;
  bool rc_kicked = false;
  // Liveness of a quiet peer (liveness.cc): what we last saw of it (messages in order,
  // RC send completions, UD pongs) and since when it has not changed; UD pings in flight.
  std::uint64_t live_mark = 0;
  std::uint64_t live_since_us = 0;
  std::uint64_t ping_first_us = 0;  // 0: no ping unanswered
  std::uint64_t ping_last_us = 0;
  std::uint32_t pings = 0;  // unanswered
  std::uint32_t pongs = 0;
  bool dead = false;  // failed other than by leaving cleanly: receives naming it fail too
  ibv_mtu path_mtu = IBV_MTU_1024;
  // UD: where to send.
  std::unique_ptr<verbs::AddressHandle> ah;
  // UD: the RC connection rendezvous writes go over, made on demand over the control QP and
  // capped per worker (rendezvous/rc_lru.h). RC mode writes over rc_qp[1] instead. The wqp_
  // prefix, here and in the worker, means this write QP (wr_ means a work request).
  std::unique_ptr<verbs::QueuePair> write_qp;
  eager::SendQueue wqp_sq;
  WriteQpState wqp_state = WriteQpState::kNone;
  std::uint32_t wqp_psn = 0;
  std::uint32_t wqp_remote_qpn = 0;  // the peer's QP ours is connected to (kReady)
  std::uint64_t wqp_start_us = 0;
  std::uint64_t wqp_next_us = 0;
  std::uint64_t wqp_rto_us = 0;
  bool wqp_listed = false;

  // Ordering: our next Seq comes from rc_guard (RC) or ud_tx (UD); rx orders the peer's stream.
  std::unique_ptr<OrderGuard> rc_guard;  // RC: bounds how far ahead we run
  std::unique_ptr<protocol::Sequencer> rx;
  // UD reliability.
  std::unique_ptr<protocol::SendWindow> ud_tx;
  std::unique_ptr<protocol::AckPolicy> ud_ack;
  bool ud_timer_listed = false;
  // UD congestion window (AIMD, below the reliability window): halved on a retransmission
  // timeout, +1 per window of acknowledged messages. Keeps an incast from overflowing the
  // receiver's SRQs with packets that are then dropped and resent.
  std::uint32_t ud_cwnd = 0;
  std::uint32_t ud_cwnd_acked = 0;
  bool ud_acked_since_rto = false;  // only then does an RTO expiry halve the window

  // Sends waiting for the connection or for resources (intrusive FIFO, no allocation).
  Request* pending_head = nullptr;
  Request* pending_tail = nullptr;
  std::uint32_t pending_count = 0;
  // Match-acks (sync cookies) that could not be posted yet.
  std::vector<std::uint32_t> pending_match_acks;
  bool flush_listed = false;
  std::uint32_t sync_waiting = 0;  // sync sends waiting for this peer's match-ack
  // Coalescing (send.cc): small standard sends posted back to back wait here, complete for the
  // caller, and leave as one kBatch message at the next progress call (or when it is full).
  std::vector<std::byte> batch_buf;  // sized once, on first use
  std::uint32_t batch_capacity = 0;  // payload bytes: one path MTU, within the peer's classes
  protocol::BatchWriter batch{{}};
  std::uint32_t send_epoch = ~0u;  // Worker::progress_calls_ at our last send to the peer

  // Connection set-up over the control QP.
  std::uint64_t conn_start_us = 0;
  std::uint64_t conn_next_us = 0;
  std::uint64_t conn_rto_us = 0;
  std::uint32_t conn_tries = 0;
  std::uint64_t remote_instance = 0;
  bool conn_listed = false;
};

// The one way a write connection changes state (a refused move is logged and changes nothing).
inline void move_to(Peer& p, WriteQpState to) noexcept {
  (void)checked_move(p.wqp_state, to, kWriteQpMoves, "peer", p.uid);
}

}  // namespace rdmx::transport
