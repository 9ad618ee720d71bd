// Per-peer state of a worker: connection, ordering, liveness, the queue of sends that wait for
// the connection or for resources, and the channel's own state (rc_peer.h, ud_peer.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "protocol/address.h"
#include "protocol/batch.h"
#include "protocol/sequencer.h"
#include "transport/channel/channel.h"
#include "transport/channel/rc_peer.h"
#include "transport/channel/shm_peer.h"
#include "transport/channel/ud_peer.h"
#include "transport/request.h"
#include "transport/worker_lock.h"
#include "verbs/ah.h"

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

struct Peer {
  // MULTI mode: held by an eager send that leaves or joins the batch, and by a receive's
  // match-ack, under the shared side of the worker lock (Worker::send_shared,
  // send_request_shared, post_match_ack_shared, send.cc) around the peer's send state and its
  // posts. Every other path holds the worker lock exclusively and needs no more.
  ShortLock post_mu;
  std::uint32_t index = kNoIndex;  // ours: the matcher's source id, and the src_ep peers use
  std::uint64_t uid = 0;
  PeerState state = PeerState::kIdle;
  bool have_address = false;
  WorkerAddress address;
  std::uint32_t remote_index = kNoIndex;  // our index at the peer: src_ep of what we send
  rdmx_ep ep{nullptr, this};
  int ep_refs = 0;

  bool rc_ready = false;    // our side can receive: RC QPs in RTR/RTS (UD: address known)
  bool peer_ready = false;  // the peer said so too (its REPLY): data may flow
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
  // Where to send on a UD QP: the control QP in every channel, the data QPs in UD's.
  std::unique_ptr<verbs::AddressHandle> ah;
  // Ordering: rx orders the peer's stream; our next Seq comes from the channel (rc.guard,
  // ud.tx).
  std::unique_ptr<protocol::Sequencer> rx;
  // The peer's channel, chosen with its address (set_address): the worker's (RC or UD), or
  // shared memory for a peer on this node. Its entry points, and each channel's own state (all
  // three are here; only the chosen one's is used).
  decltype(ChannelOps::post) post = nullptr;
  decltype(ChannelOps::stream_full) stream_full = nullptr;
  RcPeer rc;
  UdPeer ud;
  ShmPeer shm;

  // Sends waiting for the connection or for resources (intrusive FIFO, no allocation).
  Request* pending_head = nullptr;
  Request* pending_tail = nullptr;
  std::uint32_t pending_count = 0;
  // Match-acks (sync cookies) that could not be posted yet.
  std::vector<std::uint32_t> pending_match_acks;
  // Something of ours waits to go to the peer (queued sends, match-acks): a new send goes behind.
  bool has_waiting() const noexcept {
    return pending_head != nullptr || !pending_match_acks.empty();
  }
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
  (void)checked_move(p.ud.wqp_state, to, kWriteQpMoves, "peer", p.uid);
}

}  // namespace rdmx::transport
