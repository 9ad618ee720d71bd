// The eager send that leaves at once or not at all (Worker::send_now), and the C API's inject
// calls over it. In a header, not in send.cc: api.cc inlines tag_inject into rdmx_tag_inject
// and rdmx_tag_inject_header, one call level less on every eager MPI_Send and UCT am_short (a
// call and return and the saved registers: 17 instructions, callgrind). send.cc and threads.cc
// use the same definitions.
#pragma once

#include <algorithm>

#include "transport/worker.h"

namespace rdmx::transport {

inline bool Worker::wants_coalesce(const Peer& peer, std::size_t length, unsigned send_flags,
                                   bool queued) const noexcept {
  // Only inside a burst, or from the queue of sends that waited for resources anyway (as openib
  // did); standard sends only (a sync send waits for its match-ack; a rendezvous one for the
  // receiver); at least two per batch. The burst test first: a ping-pong's every send fails it
  // and skips the rest (with TxRing::next_end, 15 instructions per send over pml ucx and rdmx_rc,
  // callgrind).
  return (queued || peer.batch.count() != 0 || peer.send_epoch == progress_calls_) &&
         send_flags == 0 && config_.coalesce != 0 &&
         protocol::batch_record_size(length) <= peer.batch_capacity / 2;
}

// Above the threshold, and anything the peer's eager buffers cannot take.
inline bool Worker::rendezvous_size(const Peer& peer, std::size_t length) const noexcept {
  return length >= res_.rndv_thresh ||
         length > std::min<std::size_t>(res_.eager_limit, peer.address.class_capacity[1]);
}

// A send leaves now, in order after every earlier one to the peer, or not at all. It cannot when
// the connection is not up yet, earlier sends to the peer wait or are packed, the message is of
// rendezvous size, a send queue or the peer's credits are full, or (without RDMX_SEND_FLUSH) it
// belongs in a batch: the first send after a progress call leaves at once, the ones behind it
// before the next call are packed (a burst).
inline int Worker::send_now(eager::SendPool& pool, Peer& peer, const SendBytes& bytes,
                            std::uint64_t tag, unsigned flags) {
  const std::size_t length = bytes.total();
  if (rendezvous_size(peer, length) || peer.state != PeerState::kConnected || peer.has_waiting() ||
      peer.batch.count() != 0 || wants_coalesce(peer, length, flags, /*queued=*/false))
      [[unlikely]] {
    return RDMX_ERR_NO_RESOURCE;
  }
  // An eager message has no body (protocol::body_size): the channel's body slot carries the
  // head, which it lays down right before the data, so the receiver sees one payload.
  protocol::MsgHeader h = message_header(peer, protocol::MsgKind::kEager, tag, 0, length);
  const PostResult res =
      peer.post(*this, peer, pool, h, bytes.head, bytes.head_length, bytes.data, bytes.length);
  if (res == PostResult::kNoResource) [[unlikely]] {
    return RDMX_ERR_NO_RESOURCE;
  }
  peer.send_epoch = progress_calls_;
  return res == PostResult::kPosted ? RDMX_OK : RDMX_ERR_IO;
}

inline int Worker::inject_now(Peer& peer, const SendBytes& bytes, std::uint64_t tag,
                              unsigned flags) {
  if (!bytes.injectable(flags)) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (peer.state == PeerState::kFailed) [[unlikely]] {
    return failed_code_ != 0 ? failed_code_ : RDMX_ERR_UNREACHABLE;
  }
  return send_now(*tx_->send, peer, bytes, tag, flags);
}

inline int Worker::tag_inject(Peer& peer, const SendBytes& bytes, std::uint64_t tag,
                              unsigned flags) {
  return inject_now(peer, bytes, tag, flags);
}

inline int Worker::tag_inject(Peer& peer, const void* buffer, std::size_t length, std::uint64_t tag,
                              unsigned flags) {
  return inject_now(peer, SendBytes{nullptr, 0, buffer, length}, tag, flags);
}

}  // namespace rdmx::transport
