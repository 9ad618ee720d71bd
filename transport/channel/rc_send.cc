// The RC send side: receiver-driven credits (the window each peer may send into our SRQs, and
// the grants we owe), posting a message on a peer's RC QP of its size class or into its eager
// ring, flushes, and the watchdog that finds a dead RC peer. transport/README.md ("Flow control
// and failure detection") explains the credits and the watchdog.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "protocol/copy.h"
#include "transport/channel/rc_channel.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

void Worker::update_rc_credit_window() noexcept {
  // Every peer that may send to us shares the SRQ: count the endpoints we know (rdmx_ep_create
  // makes them before any connection completes), the connected ones and the application's
  // hint. Half of the refilled depth goes to data credits, the rest absorbs the uncredited
  // kAcks and the refill lag, so a credited sender never meets an empty SRQ (no RNR NAK).
  // Kept up to date here (peers added, connected, failed) rather than computed per message.
  const std::uint32_t peers =
      std::max({rc_connected_peers_, static_cast<std::uint32_t>(peers_.size()),
                config_.expected_peers, std::uint32_t{1}});
  const std::uint32_t usable = res_.srq_depth - std::min(res_.srq_depth, res_.refill_batch);
  rc_credit_window_ = std::clamp<std::uint32_t>(usable / (2 * peers), kRcMinCredits, kRcMaxCredits);
}

protocol::Seq Worker::grant_credits(Peer& peer) noexcept {
  // The peer may send until rx->expected() + window; never take back what was granted.
  const protocol::Seq limit = protocol::seq_add(peer.rx->expected(), rc_credit_window_);
  if (protocol::seq_gt(limit, peer.rc.granted)) {
    peer.rc.granted = limit;
  }
  return peer.rc.granted;
}

void Worker::maybe_grant(Peer& peer) {
  // Once the peer has used half of its credits a grant falls due. It goes out only after this
  // progress call has refilled the SRQs (a grant sent before the buffers of the messages just
  // consumed are reposted could let the peer's next messages meet an empty SRQ), and preferably
  // on our next message to the peer (post_rc): flush_peer holds it back for one progress call
  // before it sends a stand-alone kAck, so in two-way traffic the reply carries it.
  const auto left = protocol::seq_diff(peer.rc.granted, peer.rx->expected());
  if (left <= static_cast<std::int32_t>(rc_credit_window_ / 2) && !peer.rc.grant_due) {
    peer.rc.grant_due = true;
    peer.rc.grant_held = false;
    list_for_flush(peer);
  }
}

bool Worker::post_rc_ack(Peer& peer) {
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kAck);
  h.src_ep = peer.remote_index;
  h.flags = protocol::kFlagAckValid;
  h.ack = grant_credits(peer);
  stamp_ring_ack(peer, h);
  eager::SendPool& pool = *tx_->send;
  // The reserve: a grant must go out even when data fills the send queue, or both sides could
  // wait for each other's credits.
  eager::SendQueue::Post post{
      .kind = protocol::WrKind::kControl, .peer = &peer, .use_reserve = true};
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (!header_only_wr(pool, h, &post, &sge, &wr)) {
    return false;
  }
  const int rc = peer.rc.sq[0].post(pool, wr, post);
  if (rc != 0 && post.buf_class != eager::kNoBuffer) {
    pool.release_unused(0, post.buf);
  }
  if (rc == 0) {
    ring_ack_posted(peer, h);
  }
  return rc == 0;
}

void Worker::on_rc_credits(Peer& peer, protocol::Seq limit) {
  if (protocol::seq_gt(limit, peer.rc.credit_limit)) {
    peer.rc.credit_limit = limit;
    if (peer.has_waiting()) {
      list_for_flush(peer);
    }
  }
}

bool Worker::post_rc_flush(eager::SendPool& pool, Peer& peer, int cls) {
  // A zero-length RDMA write (no memory touched, no rkey checked: IBTA C9-88) that is signalled
  // and consumes no receive buffer at the peer: its completion retires the unsignalled sends
  // before it on this QP.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.num_sge = 0;
  const int rc = peer.rc.sq[cls].post(
      pool, wr,
      eager::SendQueue::Post{.kind = protocol::WrKind::kControl,
                             .want_signal = true,
                             .peer = &peer,  // its completion is progress for the watchdog
                             .use_reserve = true});
  return rc == 0;
}

inline bool Worker::rc_admit(eager::SendPool& pool, Peer& peer, int cls) {
  // The order guard advances only as sends complete. Unsignalled sends left on the other QP
  // of this peer (no traffic there since) would stall it: flush that QP early.
  if (peer.rc.guard->outstanding() >= kRcOrderWindow / 2) [[unlikely]] {
    const int other = 1 - cls;
    if (peer.rc.sq[other].unsignaled_tail() != 0) {
      (void)post_rc_flush(pool, peer, other);
    }
  }
  return !RcChannel::stream_full(peer) && peer.rc.sq[cls].has_room();
}

inline bool Worker::rc_stamp(Peer& peer, protocol::MsgHeader& h) {
  h.seq = peer.rc.guard->next();
  // Every RC message repeats our credit grant for the reverse direction, and carries a grant
  // that fell due once the SRQs are refilled (maybe_grant); and how far we have read the ring
  // the peer writes into. The caller clears grant_due only once the message is posted: a post
  // refused after this leaves the grant to flush_peer's stand-alone kAck.
  const bool grants = peer.rc.grant_due && !refill_wanted();
  if (grants) {
    (void)grant_credits(peer);
  }
  h.flags = static_cast<std::uint16_t>(h.flags | protocol::kFlagAckValid);
  h.ack = peer.rc.granted;
  stamp_ring_ack(peer, h);
  return grants;
}

inline Worker::PostResult Worker::post_rc(eager::SendPool& pool, Peer& peer, protocol::MsgHeader& h,
                                          const void* body, std::size_t body_length,
                                          const void* payload, std::size_t length) {
  // Bytes after the header: the kind's body (rendezvous messages) and the payload.
  const std::size_t wire = body_length + length;
  const std::size_t total = protocol::kHeaderSize + wire;
  // Into the peer's eager ring (rc_ring.cc) when it gave us one, the message fits one inline write
  // and a slot is free; the write goes over QP 0, which small sends use too. Otherwise the
  // receiver's size class picks the QP (each QP feeds the SRQ of its class).
  TxRing& ring = peer.rc.tx_ring;
  const bool to_ring =
      total <= ring.max_length && protocol::ring_free_slots(ring.slots, ring.sent, ring.taken) != 0;
  const int cls = to_ring || wire <= peer.address.class_capacity[0] ? 0 : 1;
  eager::SendQueue& sq = peer.rc.sq[cls];
  if (!rc_admit(pool, peer, cls)) [[unlikely]] {
    return PostResult::kNoResource;
  }
  const bool grants = rc_stamp(peer, h);
  ibv_sge sge[2];
  // Not value-initialized: zeroing all of it was 21 instructions of every RC send (callgrind).
  // Set here and below is every field a provider reads for a send or an RDMA write (the
  // opcode's union member; imm_data only for the WITH_IMM opcodes, zeroed anyway).
  ibv_send_wr wr;
  wr.next = nullptr;
  wr.sg_list = sge;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = 0;
  wr.imm_data = 0;
  eager::SendQueue::Post post{
      .kind = protocol::WrKind::kSendInline, .sequenced = true, .seq = h.seq, .peer = &peer};
  // Header and body side by side, so that inline sends need at most two SGEs; in the ring case
  // the whole slot image (message, padding, footer), written inline with one SGE.
  alignas(8) std::byte head[protocol::kRingMaxSlot];
  static_assert(protocol::kRingMaxSlot >= protocol::kHeaderSize + protocol::kMaxBodySize);
  protocol::store_wire(head, h);
  if (body_length != 0) {
    protocol::copy_payload(head + protocol::kHeaderSize, body, body_length);
  }
  if (to_ring) {
    if (length != 0) {
      protocol::copy_payload(head + protocol::kHeaderSize + body_length, payload, length);
    }
    protocol::ring_seal(head, total);
    const std::size_t image = protocol::ring_image_size(total);
    sge[0] = ibv_sge{.addr = reinterpret_cast<std::uintptr_t>(head),
                     .length = static_cast<std::uint32_t>(image),
                     .lkey = 0};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = ring.next_end - image;
    wr.wr.rdma.rkey = ring.rkey;
  } else if (total <= max_inline_) {
    // The provider copies header and payload into the WQE: no bounce buffer, no completion
    // needed (selective signalling retires it later).
    sge[0] = ibv_sge{.addr = reinterpret_cast<std::uintptr_t>(head),
                     .length = static_cast<std::uint32_t>(protocol::kHeaderSize + body_length),
                     .lkey = 0};
    sge[1] = ibv_sge{.addr = reinterpret_cast<std::uintptr_t>(payload),
                     .length = static_cast<std::uint32_t>(length),
                     .lkey = 0};
    wr.num_sge = length != 0 ? 2 : 1;
    wr.send_flags = IBV_SEND_INLINE;
  } else {
    const std::uint8_t bcls = wire <= res_.small_buf ? 0 : 1;
    if (!pool.alloc_buffer(bcls, &post.buf)) [[unlikely]] {
      return PostResult::kNoResource;
    }
    post.buf_class = bcls;
    post.want_signal = true;  // the completion frees the bounce buffer
    std::byte* data = pool.buffer(bcls, post.buf);
    std::memcpy(data, head, protocol::kHeaderSize + body_length);
    if (length != 0) {
      std::memcpy(data + protocol::kHeaderSize + body_length, payload, length);
    }
    sge[0] = ibv_sge{.addr = reinterpret_cast<std::uintptr_t>(data),
                     .length = static_cast<std::uint32_t>(total),
                     .lkey = pool.lkey()};
    wr.num_sge = 1;
  }
  const int rc = sq.post(pool, wr, post);
  if (rc != 0) [[unlikely]] {
    if (post.buf_class != eager::kNoBuffer) {
      pool.release_unused(post.buf_class, post.buf);
    }
    if (rc == EAGAIN) {
      return PostResult::kNoResource;
    }
    verbs::log_verb_failure("ibv_post_send", rc, to_ring ? "RC eager ring write" : "RC eager send");
    return PostResult::kFailed;
  }
  peer.rc.guard->on_send();
  ring_ack_posted(peer, h);
  if (grants) {
    peer.rc.grant_due = false;
  }
  if (to_ring) {
    ring.next_end = ring.next_end == ring.last_end ? ring.addr + ring.slot_size
                                                   : ring.next_end + ring.slot_size;
    ++ring.sent;
    ++peer.rc.ring_sends;
  }
  return PostResult::kPosted;
}

Worker::PostResult Worker::post_rc_gather(eager::SendPool& pool, Peer& peer, protocol::MsgHeader& h,
                                          const SendBytes& bytes, std::uint32_t lkey, Request* r) {
  // Never into the ring: its slot image (padding, footer) is written inline, a copy. The
  // receiver's size class picks the QP as in post_rc.
  const std::size_t wire = bytes.total();
  const int cls = wire <= peer.address.class_capacity[0] ? 0 : 1;
  if (!rc_admit(pool, peer, cls)) {
    return PostResult::kNoResource;
  }
  // The header and the head from a small bounce buffer, the data from the caller's memory: one
  // SEND of two SGEs (the QPs take two: post_rc's inline sends use them), which the receiver
  // finds in its SRQ buffer as one message, as if it had been copied.
  eager::SendQueue::Post post{.kind = protocol::WrKind::kRma,
                              .want_signal = true,  // completes the request, frees the buffer
                              .sequenced = true,
                              .peer = &peer,
                              .cookie = reinterpret_cast<std::uintptr_t>(r)};
  if (!pool.alloc_buffer(0, &post.buf)) {
    return PostResult::kNoResource;
  }
  post.buf_class = 0;
  const bool grants = rc_stamp(peer, h);
  post.seq = h.seq;
  std::byte* data = pool.buffer(0, post.buf);
  protocol::store_wire(data, h);
  if (bytes.head_length != 0) {
    std::memcpy(data + protocol::kHeaderSize, bytes.head, bytes.head_length);
  }
  ibv_sge sge[2] = {
      {.addr = reinterpret_cast<std::uintptr_t>(data),
       .length = static_cast<std::uint32_t>(protocol::kHeaderSize + bytes.head_length),
       .lkey = pool.lkey()},
      {.addr = reinterpret_cast<std::uintptr_t>(bytes.data),
       .length = static_cast<std::uint32_t>(bytes.length),
       .lkey = lkey}};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = sge;
  wr.num_sge = bytes.length != 0 ? 2 : 1;
  const int rc = peer.rc.sq[cls].post(pool, wr, post);
  if (rc != 0) {
    // Nothing to undo but the buffer: the order guard advances at on_send, below.
    pool.release_unused(0, post.buf);
    if (rc == EAGAIN) {
      return PostResult::kNoResource;
    }
    verbs::log_verb_failure("ibv_post_send", rc, "RC zero-copy send (rdmx_tag_send_zcopy)");
    return PostResult::kFailed;
  }
  r->rma_desc = protocol::decode(wr.wr_id).slot;
  peer.rc.guard->on_send();
  ring_ack_posted(peer, h);
  if (grants) {
    peer.rc.grant_due = false;
  }
  return PostResult::kPosted;
}

void Worker::run_rc_watchdog(std::uint64_t now) {
  next_watchdog_us_ = now + kWatchdogPeriodUs;
  const std::uint64_t timeout_us = std::uint64_t{config_.peer_timeout_ms} * 1000;
  for (auto& p : peers_) {
    if (p->state != PeerState::kConnected || !p->rc_ready || p->shm.on()) {
      continue;
    }
    if (p->rc.watch_since_us == 0) {  // first look at this peer: the wait starts now
      p->rc.watch_since_us = now;
      p->rc.watch_completions = p->rc.completions;
      continue;
    }
    // Only a signalled WR is sure to complete: a QP whose outstanding WRs are all unsignalled
    // (an idle connection's tail) gets a flush write, and the wait starts now.
    bool busy = false;
    bool kicked = false;
    for (int c = 0; c < kNumClasses; ++c) {
      const eager::SendQueue& sq = p->rc.sq[c];
      if (sq.outstanding() > sq.unsignaled_tail()) {
        busy = true;
      } else if (sq.unsignaled_tail() != 0) {
        kicked |= post_rc_flush(*p, c);
      }
    }
    // Waiting on the peer with nothing in flight (out of credits, or sync sends waiting for
    // their match-acks): only a message from the peer can move us, and a dead peer sends none.
    // A signalled zero-length write probes it: a live peer completes it even while its
    // application is busy (an unmatched sync send may wait for hours), a dead one never does
    // (or fails it).
    const bool starved =
        p->pending_head != nullptr && !protocol::seq_lt(p->rc.guard->next(), p->rc.credit_limit);
    if (!busy && !kicked && (starved || p->sync_waiting != 0) && p->rc.sq[0].outstanding() == 0) {
      busy = post_rc_flush(*p, 0);
    }
    if (!busy || kicked || p->rc.completions != p->rc.watch_completions) {
      p->rc.watch_completions = p->rc.completions;
      p->rc.watch_since_us = now;
      p->rc.kicked = false;
      continue;
    }
    // rxe (6.1) can leave an RC requester stalled after RNR NAKs although the peer has
    // receive buffers again; a new WR rings its doorbell and sets it going. Harmless elsewhere.
    if (now - p->rc.watch_since_us >= kStallKickUs && !p->rc.kicked) {
      for (int c = 0; c < kNumClasses; ++c) {
        if (p->rc.sq[c].outstanding() != 0) {
          p->rc.kicked |= post_rc_flush(*p, c);
        }
      }
      ++stat_rc_kicks_;
    }
    if (now - p->rc.watch_since_us >= timeout_us) {
      // Flush what is stuck so every wr_id comes back, then fail the peer's requests.
      for (int c = 0; c < kNumClasses; ++c) {
        p->rc.sq[c].close();
        try {
          p->rc.qp[c]->to_error();
        } catch (const verbs::Error& e) {
          verbs::log_verb_failure(e.verb(), e.errnum(), "watchdog: QP to ERR");
        }
      }
      fail_peer(*p, RDMX_ERR_UNREACHABLE, "no RC send completed within peer_timeout_ms");
    }
  }
}

// The channel's post (ChannelOps::post), with Worker::post_rc inlined.
rendezvous::PostResult RcChannel::post(Worker& w, Peer& peer, eager::SendPool& pool,
                                       protocol::MsgHeader& h, const void* body,
                                       std::size_t body_length, const void* payload,
                                       std::size_t length) {
  return w.post_rc(pool, peer, h, body, body_length, payload, length);
}

}  // namespace rdmx::transport
