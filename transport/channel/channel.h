// Channels: a channel is the per-peer reliable, ordered message path of one transport mode, with
// its RDMA operations. The worker picks one device channel type at setup (Worker::choose_channel,
// from the resolved rdmx_config_t.transport) and never tests the mode again per message:
//
//   RcChannel (rc_channel.h, rc_peer.h;    one RC QP per size class, credits, OrderGuard, eager
//              rc_send.cc, rc_ring.cc)     rings, flush, watchdog
//   UdChannel (ud_channel.h, ud_peer.h;    shared UD QPs, send window, acks, RTO and resend,
//              ud_send.cc, ud_write_qp.cc) congestion window, on-demand RC write QPs
//   ShmChannel (shm_channel.h, shm_peer.h, node-local peers, in either mode: rings in /dev/shm,
//              shm_send.cc, shm_segment.h) rendezvous by cross-memory attach
//
// Each peer's post and stream_full are set with its address (Worker::set_address): the
// shared-memory channel's for a peer on this node, the device channel's (from ChannelOps)
// otherwise. The shared-memory channel needs only those two hooks: its messages never reach a
// CQ (progress polls its rings, recv.cc poll_shm) and its rendezvous copies are routed by the
// peer in RndvHooks (rndv.cc).
//
// The generic paths (recv.cc, send.cc) are templates over the channel type: each message calls
// the channel's hooks directly, inlined, with no virtual call and no mode branch. The worker
// enters them through ChannelOps, a table of those instantiations chosen once at setup: one
// indirect call per CQ poll (a batch of completions) and one per posted message, where a UCX
// transport has its iface's ops.
//
// The hooks a channel type provides (static members; all but post inline):
//   post(w, peer, pool, header, body, body_length, payload, length) -> PostResult: from the send
//       descriptors (and bounce buffers) of `pool`, the posting thread's
//   stream_full(peer): no room for one more message in the peer's stream (window, credits)
//   dropped_for_test(w): the test drop of ud_drop_rate (UD only) took this message
//   admit(w, peer, header, wc, now): a data message from the SRQs, header valid: the channel's
//       checks and piggy-backed acks; false: consumed or dropped, the caller releases the buffer
//   before_in_order(w, peer, header, now) / after_in_order(w, peer): around an in-order delivery
//   on_held(w, peer, now): an early message is held for its turn
//   on_rejected(w, peer, header, arrival): a duplicate or a message outside the order window
//   send_error(w, desc, wc): what a failed send completion takes down (SendErrorScope)
//   on_send_done(peer): a send completion of the peer's (success or not)
//   write_connection(w, peer), write_queue(peer), kReads, cts_aux(peer): what the rendezvous
//       engine's hooks (rndv.cc, RndvHooks<Ch>) need of the channel
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>

#include "protocol/wire.h"
#include "rendezvous/engine.h"

namespace rdmx::eager {
class SendPool;
}  // namespace rdmx::eager

namespace rdmx::transport {

class Worker;
struct Peer;

// What a failed send completion takes down.
enum class SendErrorScope : std::uint8_t {
  kNothing,     // a flush, or nothing to recover
  kPeer,        // the peer's connection: it fails
  kWriteQp,     // UD mode's on-demand write QP only
  kSharedUdQp,  // a shared UD QP (control, UD data) in error: faults.cc recovers it
};

// The worker's entry points into its channel type's instantiations (Worker::choose_channel).
struct ChannelOps {
  rendezvous::PostResult (*post)(Worker& w, Peer& peer, eager::SendPool& pool,
                                 protocol::MsgHeader& header, const void* body,
                                 std::size_t body_length, const void* payload,
                                 std::size_t length) = nullptr;
  bool (*stream_full)(const Peer& peer) = nullptr;
  int (*poll_recv)(Worker& w, ibv_cq* cq) = nullptr;  // up to kPollBatch completions
  int (*poll_send)(Worker& w, ibv_cq* cq) = nullptr;
  void (*on_recv)(Worker& w, const ibv_wc& wc) = nullptr;  // one completion (drains)
  void (*on_send)(Worker& w, const ibv_wc& wc) = nullptr;
};

struct RcChannel;
struct UdChannel;

}  // namespace rdmx::transport
