// What an RC channel (rc_channel.h) keeps per peer: its QPs, credits, eager rings, order guard
// and watchdog snapshot. Inside Peer as peer.rc.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "eager/recv_ring.h"
#include "eager/send_queue.h"
#include "protocol/address.h"
#include "protocol/sequencer.h"
#include "transport/channel/order_guard.h"
#include "verbs/qp.h"

namespace rdmx::transport {

// The peer's RDMA-write eager ring that we write our small messages into (rc_ring.cc,
// protocol/ring.h), as its kRingOffer described it. slots == 0: none offered.
struct TxRing {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t slots = 0;
  std::uint32_t slot_size = 0;
  // The longest message whose slot image one write may carry (protocol::ring_max_length of
  // min(slot_size, our max inline size)).
  std::uint32_t max_length = 0;
  // Where the next slot to write ends, and where the last slot ends: a message goes at the end
  // of its slot, so its address is one subtraction (no multiply on the send).
  std::uint64_t next_end = 0;
  std::uint64_t last_end = 0;
  std::uint32_t sent = 0;   // messages written, in all (mod 2^32)
  std::uint32_t taken = 0;  // messages the peer took out again (its ring_ack)
};

struct RcPeer {
  // One QP per size class, attached to our SRQ of that class.
  std::array<std::unique_ptr<verbs::QueuePair>, protocol::kNumClasses> qp;
  std::array<eager::SendQueue, protocol::kNumClasses> sq;
  std::array<std::uint32_t, protocol::kNumClasses> psn{};
  // Our next Seq: bounds how far ahead of the oldest uncompleted send we run.
  std::unique_ptr<OrderGuard> guard;
  // Credits (receiver-driven flow control, so that senders do not flood a shared SRQ into RNR
  // storms): we may send Seq s while seq_lt(s, credit_limit); the peer raises the limit in the
  // ack field of its messages and in stand-alone kAcks. granted is the limit we last gave the
  // peer.
  protocol::Seq credit_limit = 0;
  protocol::Seq granted = 0;
  bool grant_due = false;   // a new grant goes out (Worker::maybe_grant)
  bool grant_held = false;  // ... held back one progress call, for a message to carry it
  // Eager rings (rc_ring.cc): the peer's that we write into, and ours that it writes
  // into (polled by progress, in sequence order only). We offer ours once the peer has sent us
  // kRingOfferAfter messages in order (ring_countdown reaches 0; 0 from the start: never).
  TxRing tx_ring;
  std::uint64_t ring_sends = 0;  // Worker::stats sums them (counted under the peer's post lock)
  std::optional<eager::RecvRing> rx_ring;  // a ring of Worker::ring_slab_
  std::uint32_t ring_countdown = 0;
  bool ring_offer_due = false;  // our kRingOffer waits for a send resource (flush_peer)
  // Taking our ring back (a worker that sleeps: rc_ring.cc). rx_ring_open until the peer's
  // kRingReleased has been delivered (a ring still open once the worker withdrew its rings is
  // being withdrawn: none opens after). The kRingWithdraw we owe, or the kRingReleased we owe
  // the peer for its ring, wait for a resource as the offer.
  bool rx_ring_open = false;
  bool ring_withdraw_due = false;
  bool ring_release_due = false;
  bool ring_messages_due() const noexcept {
    return ring_offer_due || ring_withdraw_due || ring_release_due;
  }
  // Watchdog: send completions seen, and the snapshot the watchdog last compared with. A peer
  // whose sends make no progress for peer_timeout_ms is declared dead even if the device never
  // reports the retry exhaustion (rxe on 6.1 did not, for a killed peer).
  std::uint64_t completions = 0;
  std::uint64_t watch_completions = 0;
  std::uint64_t watch_since_us = 0;
  bool kicked = false;
};

}  // namespace rdmx::transport
