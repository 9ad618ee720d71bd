// The send path: eager messages over RC or UD, queues for sends that must wait, match-acks, and
// the UD reliability timers.
//
// A standard send completes as soon as its bytes are on their way: inlined into the WR, or
// copied into a registered bounce buffer (the caller's buffer is free again). A sync send
// (RDMX_SEND_SYNC) completes when the receiver's kMatchAck arrives. A send that cannot be posted
// now (connection not ready, no send-queue credit, no descriptor or bounce buffer, UD window or
// RC order window full) waits in its peer's FIFO, inside the caller's request: no allocation,
// and later sends never overtake it.
//
// Coalescing: the first send to a peer after a progress call goes at once (a ping-pong never
// waits). A small standard send that follows it before the next progress call (the application
// is posting a burst, e.g. a window of MPI_Isends), or that waited in the peer's FIFO, is
// copied into the peer's batch and completes; the batch leaves as one kBatch message at the
// next progress call, or when it is full, or before any other message to that peer, so order
// holds. Per packet rxe spends tens of microseconds on each side; per record a memcpy. A burst
// thus leaves with the weak progress a rendezvous send already has: by the process's next call
// into rdmx. RDMX_SEND_FLUSH (a blocking send) is never held; rdmx_config_t.coalesce = 0 turns
// coalescing off.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

// UD resend slots: bounce buffer index, its class, and the destination class (which UD QP).
constexpr std::uint32_t ud_slot(std::uint8_t buf_class, std::uint32_t buf, int dst_class) {
  return buf | (std::uint32_t{buf_class} << 24) | (static_cast<std::uint32_t>(dst_class) << 25);
}
constexpr std::uint32_t ud_slot_buf(std::uint32_t slot) {
  return slot & 0xffffff;
}
constexpr std::uint8_t ud_slot_buf_class(std::uint32_t slot) {
  return (slot >> 24) & 1;
}
constexpr int ud_slot_dst_class(std::uint32_t slot) {
  return static_cast<int>((slot >> 25) & 1);
}

}  // namespace

bool Worker::header_only_wr(eager::SendPool& pool, const protocol::MsgHeader& h,
                            eager::SendQueue::Post* post, ibv_sge* sge, ibv_send_wr* wr) const {
  // Inline when the device allows (the provider copies `h` at post time), else from a bounce
  // buffer whose completion frees it (signalled).
  *sge = ibv_sge{.addr = reinterpret_cast<std::uintptr_t>(&h),
                 .length = static_cast<std::uint32_t>(protocol::kHeaderSize),
                 .lkey = 0};
  *wr = ibv_send_wr{};
  wr->opcode = IBV_WR_SEND;
  wr->sg_list = sge;
  wr->num_sge = 1;
  if (protocol::kHeaderSize <= max_inline_) {
    wr->send_flags = IBV_SEND_INLINE;
    return true;
  }
  if (!pool.alloc_buffer(0, &post->buf)) {
    return false;
  }
  post->buf_class = 0;
  post->want_signal = true;
  std::byte* data = pool.buffer(0, post->buf);
  protocol::store_wire(data, h);
  sge->addr = reinterpret_cast<std::uintptr_t>(data);
  sge->lkey = pool.lkey();
  return true;
}

std::uint64_t Worker::now_us() noexcept {
  return clock_.now_us();
}

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
  if (protocol::seq_gt(limit, peer.rc_granted)) {
    peer.rc_granted = limit;
  }
  return peer.rc_granted;
}

void Worker::maybe_grant(Peer& peer) {
  // Once the peer has used half of its credits a grant falls due. It goes out only after this
  // progress call has refilled the SRQs (a grant sent before the buffers of the messages just
  // consumed are reposted could let the peer's next messages meet an empty SRQ), and preferably
  // on our next message to the peer (post_rc): flush_peer holds it back for one progress call
  // before it sends a stand-alone kAck, so in two-way traffic the reply carries it.
  const auto left = protocol::seq_diff(peer.rc_granted, peer.rx->expected());
  if (left <= static_cast<std::int32_t>(rc_credit_window_ / 2) && !peer.rc_grant_due) {
    peer.rc_grant_due = true;
    peer.rc_grant_held = false;
    list_for_flush(peer);
  }
}

bool Worker::post_rc_ack(Peer& peer) {
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kAck);
  h.src_ep = peer.remote_index;
  h.flags = protocol::kFlagAckValid;
  h.ack = grant_credits(peer);
  stamp_ring_ack(peer, h);
  eager::SendPool& pool = *threads_[0].send;
  // The reserve: a grant must go out even when data fills the send queue, or both sides could
  // wait for each other's credits.
  eager::SendQueue::Post post{
      .kind = protocol::WrKind::kControl, .peer = &peer, .use_reserve = true};
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (!header_only_wr(pool, h, &post, &sge, &wr)) {
    return false;
  }
  const int rc = peer.rc_sq[0].post(pool, wr, post);
  if (rc != 0 && post.buf_class != eager::kNoBuffer) {
    pool.release_unused(0, post.buf);
  }
  if (rc == 0) {
    ring_ack_posted(peer, h);
  }
  return rc == 0;
}

void Worker::on_rc_credits(Peer& peer, protocol::Seq limit) {
  if (protocol::seq_gt(limit, peer.rc_credit_limit)) {
    peer.rc_credit_limit = limit;
    if (peer.pending_head != nullptr || !peer.pending_match_acks.empty()) {
      list_for_flush(peer);
    }
  }
}

bool Worker::post_rc_flush(Peer& peer, int cls) {
  // A zero-length RDMA write (no memory touched, no rkey checked: IBTA C9-88) that is signalled
  // and consumes no receive buffer at the peer: its completion retires the unsignalled sends
  // before it on this QP.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.num_sge = 0;
  const int rc = peer.rc_sq[cls].post(
      *threads_[0].send, wr,
      eager::SendQueue::Post{.kind = protocol::WrKind::kControl,
                             .want_signal = true,
                             .peer = &peer,  // its completion is progress for the watchdog
                             .use_reserve = true});
  return rc == 0;
}

Worker::PostResult Worker::post_rc(Peer& peer, protocol::MsgHeader& h, const void* body,
                                   std::size_t body_length, const void* payload,
                                   std::size_t length) {
  // Bytes after the header: the kind's body (rendezvous messages) and the payload.
  const std::size_t wire = body_length + length;
  const std::size_t total = protocol::kHeaderSize + wire;
  // Into the peer's eager ring (ring.cc) when it gave us one, the message fits one inline write
  // and a slot is free; the write goes over QP 0, which small sends use too. Otherwise the
  // receiver's size class picks the QP (each QP feeds the SRQ of its class).
  TxRing& ring = peer.tx_ring;
  const bool to_ring = protocol::ring_image_size(total) <= ring.max_image &&
                       protocol::ring_free_slots(ring.slots, ring.sent, ring.taken) != 0;
  const int cls = to_ring || wire <= peer.address.class_capacity[0] ? 0 : 1;
  eager::SendQueue& sq = peer.rc_sq[cls];
  // The order guard advances only as sends complete. Unsignalled sends left on the other QP
  // of this peer (no traffic there since) would stall it: flush that QP early.
  if (peer.rc_guard->outstanding() >= kRcOrderWindow / 2) [[unlikely]] {
    const int other = 1 - cls;
    if (peer.rc_sq[other].unsignaled_tail() != 0) {
      (void)post_rc_flush(peer, other);
    }
  }
  if (!peer.rc_guard->can_send() ||
      !protocol::seq_lt(peer.rc_guard->next(), peer.rc_credit_limit) || !sq.has_room())
      [[unlikely]] {
    return PostResult::kNoResource;
  }
  eager::SendPool& pool = *threads_[0].send;
  h.seq = peer.rc_guard->next();
  // Every RC message repeats our credit grant for the reverse direction, and carries a grant
  // that fell due once the SRQs are refilled (maybe_grant); and how far we have read the ring
  // the peer writes into.
  if (peer.rc_grant_due && !refill_wanted()) {
    (void)grant_credits(peer);
    peer.rc_grant_due = false;
  }
  h.flags = static_cast<std::uint16_t>(h.flags | protocol::kFlagAckValid);
  h.ack = peer.rc_granted;
  stamp_ring_ack(peer, h);
  ibv_sge sge[2];
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = sge;
  eager::SendQueue::Post post{
      .kind = protocol::WrKind::kSendInline, .sequenced = true, .seq = h.seq, .peer = &peer};
  // Header and body side by side, so that inline sends need at most two SGEs; in the ring case
  // the whole slot image (message, padding, footer), written inline with one SGE.
  alignas(8) std::byte head[protocol::kRingMaxSlot];
  static_assert(protocol::kRingMaxSlot >= protocol::kHeaderSize + protocol::kMaxBodySize);
  protocol::store_wire(head, h);
  if (body_length != 0) {
    std::memcpy(head + protocol::kHeaderSize, body, body_length);
  }
  if (to_ring) {
    if (length != 0) {
      std::memcpy(head + protocol::kHeaderSize + body_length, payload, length);
    }
    protocol::ring_seal(head, total);
    const std::size_t image = protocol::ring_image_size(total);
    sge[0] = ibv_sge{.addr = reinterpret_cast<std::uintptr_t>(head),
                     .length = static_cast<std::uint32_t>(image),
                     .lkey = 0};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr =
        ring.addr + std::uint64_t{ring.head} * ring.slot_size + ring.slot_size - image;
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
  peer.rc_guard->on_send();
  ring_ack_posted(peer, h);
  if (to_ring) {
    ring.head = ring.head + 1 == ring.slots ? 0 : ring.head + 1;
    ++ring.sent;
    ++stat_ring_sends_;
  }
  return PostResult::kPosted;
}

Worker::PostResult Worker::post_ud(Peer& peer, protocol::MsgHeader& h, const void* body,
                                   std::size_t body_length, const void* payload,
                                   std::size_t length) {
  const std::size_t wire = body_length + length;
  const int cls = wire <= peer.address.class_capacity[0] ? 0 : 1;
  eager::SendQueue& sq = ud_sq_[cls];
  protocol::SendWindow& win = *peer.ud_tx;
  if (!win.can_send() || win.in_flight() >= peer.ud_cwnd || !sq.has_room()) [[unlikely]] {
    return PostResult::kNoResource;
  }
  eager::SendPool& pool = *threads_[0].send;
  const std::uint8_t bcls = wire <= res_.small_buf ? 0 : 1;
  std::uint32_t buf = 0;
  if (!pool.alloc_buffer(bcls, &buf)) [[unlikely]] {
    return PostResult::kNoResource;
  }
  h.seq = win.next_seq();
  h.flags = static_cast<std::uint16_t>(h.flags | protocol::kFlagAckValid);
  h.ack = peer.rx->cumulative_ack();
  // The message that fills the congestion window asks for an ack at once, so the sender does
  // not idle for the receiver's delayed ack.
  if (win.in_flight() + 1 >= peer.ud_cwnd) {
    h.flags = static_cast<std::uint16_t>(h.flags | protocol::kFlagAckRequest);
  }
  // UD keeps a copy for retransmission until the ack.
  std::byte* data = pool.buffer(bcls, buf);
  protocol::store_wire(data, h);
  if (body_length != 0) {
    std::memcpy(data + protocol::kHeaderSize, body, body_length);
  }
  if (length != 0) {
    std::memcpy(data + protocol::kHeaderSize + body_length, payload, length);
  }
  // Signalled when bounce buffers run low, so completions retire the unsignalled WRs before it.
  const int rc = post_ud_buffer(peer, cls, bcls, buf, protocol::kHeaderSize + wire,
                                pool.free_buffers(bcls) < pool.buffer_count(bcls) / 4);
  if (rc != 0) [[unlikely]] {
    pool.release_unused(bcls, buf);
    if (rc == EAGAIN) {
      return PostResult::kNoResource;
    }
    verbs::log_verb_failure("ibv_post_send", rc, "UD eager send");
    return PostResult::kFailed;
  }
  pool.retain(bcls, buf);
  (void)win.on_send(h.seq, ud_slot(bcls, buf, cls), now_us());
  peer.ud_ack->on_ack_sent();
  list_ud_timer(peer);
  return PostResult::kPosted;
}

int Worker::post_ud_buffer(Peer& peer, int cls, std::uint8_t bcls, std::uint32_t buf,
                           std::size_t total, bool want_signal) {
  eager::SendPool& pool = *threads_[0].send;
  ibv_sge sge{.addr = reinterpret_cast<std::uintptr_t>(pool.buffer(bcls, buf)),
              .length = static_cast<std::uint32_t>(total),
              .lkey = pool.lkey()};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = total <= max_inline_ ? IBV_SEND_INLINE : 0;
  wr.wr.ud.ah = peer.ah->get();
  wr.wr.ud.remote_qpn = peer.address.ud_qpn[cls];
  wr.wr.ud.remote_qkey = kQkey;
  return ud_sq_[cls].post(pool, wr,
                          eager::SendQueue::Post{.kind = protocol::WrKind::kSendInline,
                                                 .buf_class = bcls,
                                                 .buf = buf,
                                                 .want_signal = want_signal,
                                                 .peer = &peer});
}

bool Worker::send_raw_for_test(std::uint64_t peer_uid, const void* bytes, std::size_t length,
                               debug::Raw how) {
  Peer* p = find_peer(peer_uid);
  eager::SendPool& pool = *threads_[0].send;
  if (!ud_mode_ || p == nullptr || p->state != PeerState::kConnected || !p->ah ||
      length > pool.buffer_capacity(0) ||
      (how != debug::Raw::kAsIs && length < protocol::kHeaderSize)) {
    return false;
  }
  if (how == debug::Raw::kSequenced) {
    auto h = protocol::load_wire<protocol::MsgHeader>(static_cast<const std::byte*>(bytes));
    h.src_ep = p->remote_index;
    const auto* rest = static_cast<const std::byte*>(bytes) + protocol::kHeaderSize;
    return post_ud(*p, h, nullptr, 0, rest, length - protocol::kHeaderSize) == PostResult::kPosted;
  }
  std::uint32_t buf = 0;
  if (!ud_sq_[0].has_room() || !pool.alloc_buffer(0, &buf)) {
    return false;
  }
  std::byte* data = pool.buffer(0, buf);
  std::memcpy(data, bytes, length);
  if (how == debug::Raw::kInStream) {
    auto h = protocol::load_wire<protocol::MsgHeader>(data);
    h.src_ep = p->remote_index;
    h.seq = protocol::seq_add(p->ud_tx->next_seq(), h.seq);
    protocol::store_wire(data, h);
  }
  if (post_ud_buffer(*p, 0, 0, buf, length, /*want_signal=*/false) != 0) {
    pool.release_unused(0, buf);
    return false;
  }
  return true;
}

bool Worker::resend_ud(Peer& peer, std::uint32_t slot) {
  eager::SendPool& pool = *threads_[0].send;
  const std::uint8_t bcls = ud_slot_buf_class(slot);
  const std::uint32_t buf = ud_slot_buf(slot);
  const int cls = ud_slot_dst_class(slot);
  eager::SendQueue& sq = ud_sq_[cls];
  if (!sq.has_room()) {
    return false;
  }
  std::byte* data = pool.buffer(bcls, buf);
  auto h = protocol::load_wire<protocol::MsgHeader>(data);
  h.ack = peer.rx->cumulative_ack();
  protocol::store_wire(data, h);
  const std::size_t total = protocol::kHeaderSize +
                            protocol::body_size(static_cast<protocol::MsgKind>(h.kind)) +
                            h.payload_length;
  if (post_ud_buffer(peer, cls, bcls, buf, total, /*want_signal=*/false) != 0) {
    return false;
  }
  ++stat_ud_retransmits_;
  peer.ud_ack->on_ack_sent();
  return true;
}

bool Worker::post_ud_ack(Peer& peer) {
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kAck);
  h.src_ep = peer.remote_index;
  h.flags = protocol::kFlagAckValid;
  h.ack = peer.rx->cumulative_ack();
  eager::SendPool& pool = *threads_[0].send;
  eager::SendQueue::Post post{.kind = protocol::WrKind::kControl};
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (!header_only_wr(pool, h, &post, &sge, &wr)) {
    return false;
  }
  wr.wr.ud.ah = peer.ah->get();
  wr.wr.ud.remote_qpn = peer.address.ud_qpn[0];
  wr.wr.ud.remote_qkey = kQkey;
  const int rc = ud_sq_[0].post(pool, wr, post);
  if (rc != 0) {
    if (post.buf_class != eager::kNoBuffer) {
      pool.release_unused(0, post.buf);
    }
    return false;
  }
  peer.ud_ack->on_ack_sent();
  return true;
}

void Worker::list_ud_timer(Peer& peer) {
  if (!peer.ud_timer_listed) {
    peer.ud_timer_listed = true;
    ud_timer_list_.push_back(&peer);
  }
  next_ud_timer_us_ =
      std::min({next_ud_timer_us_, peer.ud_tx->deadline_us(), peer.ud_ack->deadline_us()});
}

void Worker::run_ud_timers(std::uint64_t now) {
  std::uint64_t next = protocol::kNoDeadline;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < ud_timer_list_.size(); ++i) {
    Peer& p = *ud_timer_list_[i];
    if (p.state == PeerState::kFailed) {
      p.ud_timer_listed = false;
      continue;
    }
    if (p.ud_tx->peer_dead(now)) {
      p.ud_timer_listed = false;
      fail_peer(p, RDMX_ERR_UNREACHABLE, "no acknowledgement within peer_timeout_ms");
      continue;
    }
    // Go-back-N, but at most a burst per expiry, oldest first: the receiver holds what came
    // after a gap, so once the gap is filled its cumulative ack covers the rest, which then
    // never needs resending. A larger loss takes a few more expiries.
    std::uint32_t burst = 0;
    const bool expired = now >= p.ud_tx->deadline_us();
    (void)p.ud_tx->due_for_retransmit(now, [&](protocol::Seq, std::uint32_t slot) {
      return burst++ < kUdResendBurst && resend_ud(p, slot);
    });
    // Congestion is loss while the receiver keeps acknowledging. A receiver that acknowledged
    // nothing since the last expiry is not progressing (or is gone): shrinking the window then
    // would only make more standard sends wait for it; the RTO backoff handles that case.
    if (expired && p.ud_acked_since_rto) {
      p.ud_cwnd = std::max(kUdCwndMin, p.ud_cwnd / 2);
      p.ud_cwnd_acked = 0;
    }
    if (expired) {
      p.ud_acked_since_rto = false;
    }
    if (p.ud_ack->ack_due(now)) {
      (void)post_ud_ack(p);
    }
    if (p.ud_tx->in_flight() == 0 && p.ud_ack->unacked() == 0) {
      p.ud_timer_listed = false;
      continue;
    }
    next = std::min({next, p.ud_tx->deadline_us(), p.ud_ack->deadline_us()});
    ud_timer_list_[keep++] = &p;
  }
  ud_timer_list_.resize(keep);
  next_ud_timer_us_ = next;
}

void Worker::run_rc_watchdog(std::uint64_t now) {
  next_watchdog_us_ = now + kWatchdogPeriodUs;
  const std::uint64_t timeout_us = std::uint64_t{config_.peer_timeout_ms} * 1000;
  for (auto& p : peers_) {
    if (p->state != PeerState::kConnected || !p->rc_ready) {
      continue;
    }
    if (p->rc_watch_since_us == 0) {  // first look at this peer: the wait starts now
      p->rc_watch_since_us = now;
      p->rc_watch_completions = p->rc_completions;
      continue;
    }
    // Only a signalled WR is sure to complete: a QP whose outstanding WRs are all unsignalled
    // (an idle connection's tail) gets a flush write, and the wait starts now.
    bool busy = false;
    bool kicked = false;
    for (int c = 0; c < kNumClasses; ++c) {
      const eager::SendQueue& sq = p->rc_sq[c];
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
        p->pending_head != nullptr && !protocol::seq_lt(p->rc_guard->next(), p->rc_credit_limit);
    if (!busy && !kicked && (starved || p->sync_waiting != 0) && p->rc_sq[0].outstanding() == 0) {
      busy = post_rc_flush(*p, 0);
    }
    if (!busy || kicked || p->rc_completions != p->rc_watch_completions) {
      p->rc_watch_completions = p->rc_completions;
      p->rc_watch_since_us = now;
      p->rc_kicked = false;
      continue;
    }
    // rxe (6.1) can leave an RC requester stalled after RNR NAKs although the peer has
    // receive buffers again; a new WR rings its doorbell and sets it going. Harmless elsewhere.
    if (now - p->rc_watch_since_us >= kStallKickUs && !p->rc_kicked) {
      for (int c = 0; c < kNumClasses; ++c) {
        if (p->rc_sq[c].outstanding() != 0) {
          p->rc_kicked |= post_rc_flush(*p, c);
        }
      }
      ++stat_rc_kicks_;
    }
    if (now - p->rc_watch_since_us >= timeout_us) {
      // Flush what is stuck so every wr_id comes back, then fail the peer's requests.
      for (int c = 0; c < kNumClasses; ++c) {
        p->rc_sq[c].close();
        try {
          p->rc_qp[c]->to_error();
        } catch (const verbs::Error& e) {
          verbs::log_verb_failure(e.verb(), e.errnum(), "watchdog: QP to ERR");
        }
      }
      fail_peer(*p, RDMX_ERR_UNREACHABLE, "no RC send completed within peer_timeout_ms");
    }
  }
}

void Worker::on_ud_ack(Peer& peer, protocol::Seq ack, std::uint64_t now) {
  eager::SendPool& pool = *threads_[0].send;
  std::uint32_t freed = 0;
  (void)peer.ud_tx->on_ack(ack, now, [&](protocol::Seq, std::uint32_t slot) {
    pool.unretain(ud_slot_buf_class(slot), ud_slot_buf(slot));
    ++freed;
  });
  if (freed != 0) {
    peer.ud_acked_since_rto = true;
    peer.ud_cwnd_acked += freed;
    if (peer.ud_cwnd_acked >= peer.ud_cwnd && peer.ud_cwnd < kUdWindow) {
      peer.ud_cwnd_acked -= peer.ud_cwnd;
      ++peer.ud_cwnd;
    }
  }
  if (peer.pending_head != nullptr || !peer.pending_match_acks.empty()) {
    list_for_flush(peer);
  }
}

inline bool Worker::coalesce(Peer& peer, Request* r, bool queued) {
  // Standard sends only (a sync send waits for its match-ack; a rendezvous one for the
  // receiver); at least two per batch; and only inside a burst, or from the queue of sends that
  // waited for resources anyway (as openib did).
  const std::size_t capacity = peer.batch_capacity;
  if (r->send_flags != 0 || config_.coalesce == 0 ||
      protocol::batch_record_size(r->status.length) > capacity / 2 ||
      (!queued && peer.batch.count() == 0 && peer.send_epoch != progress_calls_)) {
    return false;
  }
  if (peer.batch_buf.empty()) [[unlikely]] {
    peer.batch_buf.resize(capacity);  // once per peer
    peer.batch = protocol::BatchWriter(peer.batch_buf);
  }
  if (!peer.batch.fits(r->status.length) && !flush_batch(peer)) {
    return false;  // start_send cannot post either: the request queues behind the batch
  }
  if (peer.batch.count() == 0) {
    list_for_flush(peer);  // the next progress call sends it
  }
  (void)peer.batch.append(r->status.tag, r->send_buffer, r->status.length);
  complete(r, RDMX_OK);
  return true;
}

bool Worker::flush_batch(Peer& peer) {
  const std::uint32_t count = peer.batch.count();
  const PostResult res = post_message(peer, protocol::MsgKind::kBatch, 0, count,
                                      peer.batch_buf.data(), peer.batch.bytes());
  if (res == PostResult::kNoResource) {
    return false;
  }
  if (res == PostResult::kFailed) [[unlikely]] {
    // The QP is broken (logged by the post): the peer fails with it, as it would for the same
    // sends posted one by one after their requests completed.
    std::fprintf(stderr, "rdmx: %u coalesced messages to %016llx lost with its connection\n", count,
                 static_cast<unsigned long long>(peer.uid));
  } else {
    stat_coalesced_msgs_ += count;
    ++stat_coalesced_batches_;
  }
  peer.batch.clear();
  return true;
}

inline bool Worker::start_send(Peer& peer, Request* r) {
  // Whatever is packed for the peer goes first: it was sent before this.
  if (peer.batch.count() != 0 && !flush_batch(peer)) {
    return false;
  }
  if ((r->send_flags & kSendRendezvous) != 0) {
    return start_rndv_send(peer, r);
  }
  const bool sync = (r->send_flags & RDMX_SEND_SYNC) != 0;
  std::uint32_t aux = 0;
  if (sync) {
    const SyncSlot& s = threads_[r->thread].sync[r->sync_slot];
    aux = protocol::encode_sync_cookie(
        {.thread = r->thread, .generation = s.generation, .slot = r->sync_slot});
  }
  const PostResult res =
      post_message(peer, sync ? protocol::MsgKind::kEagerSync : protocol::MsgKind::kEager,
                   r->status.tag, aux, r->send_buffer, r->status.length);
  switch (res) {
    case PostResult::kPosted:
      if (sync) {
        r->state = ReqState::kActive;
        activate(r);
        ++peer.sync_waiting;
      } else {
        complete(r, RDMX_OK);
      }
      return true;
    case PostResult::kNoResource:
      return false;
    case PostResult::kFailed:
      break;
  }
  if (sync) {
    ThreadCtx& tc = threads_[r->thread];
    tc.sync[r->sync_slot].request = nullptr;
    tc.sync_free.push_back(r->sync_slot);
    r->sync_slot = kNoIndex;
  }
  complete(r, RDMX_ERR_IO);
  return true;
}

void Worker::queue_send(Peer& peer, Request* r) {
  r->state = ReqState::kQueued;
  r->next = nullptr;
  if (peer.pending_tail == nullptr) {
    peer.pending_head = r;
  } else {
    peer.pending_tail->next = r;
  }
  peer.pending_tail = r;
  ++peer.pending_count;
  activate(r);
  if (peer.state == PeerState::kConnected) {
    list_for_flush(peer);
  }
}

void Worker::list_for_flush(Peer& peer) {
  if (!peer.flush_listed) {
    peer.flush_listed = true;
    flush_list_.push_back(&peer);
  }
}

void Worker::flush_peer(Peer& peer) {
  if (peer.state != PeerState::kConnected) {
    return;
  }
  if (peer.rc_grant_due) {
    if (!peer.rc_grant_held) {
      peer.rc_grant_held = true;  // the next progress call sends it if nothing carried it
    } else if (post_rc_ack(peer)) {
      peer.rc_grant_due = false;
    }
  }
  if (peer.ring_offer_due && !post_ring_offer(peer)) {
    return;  // what follows needs the same resources
  }
  std::size_t done = 0;
  for (; done < peer.pending_match_acks.size(); ++done) {
    const PostResult r = post_message(peer, protocol::MsgKind::kMatchAck, 0,
                                      peer.pending_match_acks[done], nullptr, 0);
    if (r == PostResult::kNoResource) {
      break;
    }
  }
  peer.pending_match_acks.erase(
      peer.pending_match_acks.begin(),
      peer.pending_match_acks.begin() + static_cast<std::ptrdiff_t>(done));
  if (!peer.pending_match_acks.empty()) {
    return;
  }
  while (peer.pending_head != nullptr) {
    Request* r = peer.pending_head;
    Request* next = r->next;
    if (!coalesce(peer, r, /*queued=*/true) && !start_send(peer, r)) {
      return;  // still first in line
    }
    // start_send completed it (its `next` now links the completion list) or made it wait for a
    // match-ack: either way it left the queue.
    peer.pending_head = next;
    if (next == nullptr) {
      peer.pending_tail = nullptr;
    }
    --peer.pending_count;
  }
  if (peer.batch.count() != 0) {
    (void)flush_batch(peer);  // else it stays listed for the next call
  }
}

void Worker::flush_listed_peers() {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < flush_list_.size(); ++i) {
    Peer& p = *flush_list_[i];
    flush_peer(p);
    if (p.state == PeerState::kConnected &&
        (p.pending_head != nullptr || !p.pending_match_acks.empty() || p.rc_grant_due ||
         p.ring_offer_due || p.batch.count() != 0)) {
      flush_list_[keep++] = &p;
    } else {
      p.flush_listed = false;
    }
  }
  flush_list_.resize(keep);
}

void Worker::send_match_ack(Peer& peer, std::uint32_t cookie) {
  if (peer.state == PeerState::kFailed) {
    return;
  }
  if (peer.state == PeerState::kConnected && peer.pending_match_acks.empty() &&
      post_message(peer, protocol::MsgKind::kMatchAck, 0, cookie, nullptr, 0) ==
          PostResult::kPosted) {
    return;
  }
  peer.pending_match_acks.push_back(cookie);
  list_for_flush(peer);
}

void Worker::fail_pending(Peer& peer, int code) {
  while (peer.pending_head != nullptr) {
    Request* r = peer.pending_head;
    peer.pending_head = r->next;
    if (r->sync_slot != kNoIndex) {
      ThreadCtx& tc = threads_[r->thread];
      tc.sync[r->sync_slot].request = nullptr;
      tc.sync_free.push_back(r->sync_slot);
      r->sync_slot = kNoIndex;
    }
    complete(r, code);
  }
  peer.pending_tail = nullptr;
  peer.pending_count = 0;
  // Sync sends that wait for this peer's match-ack.
  if (peer.sync_waiting != 0) {
    for (ThreadCtx& tc : threads_) {
      for (std::uint32_t i = 0; i < tc.sync.size(); ++i) {
        SyncSlot& s = tc.sync[i];
        if (s.request != nullptr && s.peer == &peer && s.request->state == ReqState::kActive) {
          Request* r = s.request;
          s.request = nullptr;
          s.generation = static_cast<std::uint8_t>(s.generation + 1);
          tc.sync_free.push_back(i);
          r->sync_slot = kNoIndex;
          complete(r, code);
        }
      }
    }
    peer.sync_waiting = 0;
  }
}

void Worker::fail_peer(Peer& peer, int code, const char* why, bool dead) {
  if (peer.state == PeerState::kFailed) {
    return;
  }
  // A dead peer also fails the receives naming it (liveness.cc) and is reported once; one that
  // left cleanly does not: messages it sent before leaving may still be on their way (UD's
  // control QP is not ordered with its data QPs).
  std::size_t recvs = 0;
  if (dead && !closing_) {
    peer.dead = true;
    recvs = fail_posted_recvs(&peer, code);
    failed_uids_.push_back(peer.uid);
  }
  // Quiet unless it costs the user something: a peer leaving (kDisconnect at its finalize) with
  // nothing pending is the normal end of a job. Failed requests carry the error either way.
  const bool pending = peer.pending_head != nullptr || peer.sync_waiting != 0 || recvs != 0;
  if (config_.verbose >= 1 || (!closing_ && pending)) {
    std::fprintf(stderr, "rdmx: peer %016llx unreachable: %s\n",
                 static_cast<unsigned long long>(peer.uid), why);
  }
  if (peer.state == PeerState::kConnected && !ud_mode_ && rc_connected_peers_ > 0) {
    --rc_connected_peers_;
    update_rc_credit_window();
  }
  set_state(peer, PeerState::kFailed);
  fail_pending(peer, code);
  if (rndv_) {
    rndv_->on_peer_failed(peer.index, code);
  }
  peer.pending_match_acks.clear();
  peer.batch.clear();
  if (peer.ud_tx) {
    eager::SendPool& pool = *threads_[0].send;
    peer.ud_tx->drain([&](protocol::Seq, std::uint32_t slot) {
      pool.unretain(ud_slot_buf_class(slot), ud_slot_buf(slot));
    });
  }
}

int Worker::tag_send(Peer& peer, const void* buffer, std::size_t length, std::uint64_t tag,
                     unsigned flags, Request* r, rdmx_callback_t callback, void* user_data) {
  if (r == nullptr || (buffer == nullptr && length != 0) ||
      (flags & ~unsigned{RDMX_SEND_SYNC | RDMX_SEND_FLUSH}) != 0) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (peer.state == PeerState::kFailed) [[unlikely]] {
    return failed_code_ != 0 ? failed_code_ : RDMX_ERR_UNREACHABLE;
  }
  // Above the threshold (and anything the peer's eager buffers cannot take): rendezvous.
  const std::size_t limit = std::min<std::size_t>(res_.eager_limit, peer.address.class_capacity[1]);
  const bool rndv = length >= res_.rndv_thresh || length > limit;
  init_request(r, ReqType::kSend, callback, user_data);
  r->peer = &peer;
  r->send_buffer = buffer;
  r->status.length = length;
  r->status.tag = tag;
  r->send_flags = static_cast<std::uint16_t>(flags | (rndv ? kSendRendezvous : 0));
  // A rendezvous send completes only after the receiver matched it (its CTS), which is what
  // RDMX_SEND_SYNC asks for: it needs no sync slot.
  if ((flags & RDMX_SEND_SYNC) != 0 && !rndv) {
    ThreadCtx& tc = threads_[r->thread];
    if (tc.sync_free.empty()) {
      r->state = ReqState::kIdle;
      return RDMX_ERR_NO_RESOURCE;
    }
    r->sync_slot = tc.sync_free.back();
    tc.sync_free.pop_back();
    SyncSlot& s = tc.sync[r->sync_slot];
    s.request = r;
    s.peer = &peer;
  }
  if (peer.state == PeerState::kConnected && peer.pending_head == nullptr &&
      peer.pending_match_acks.empty()) [[likely]] {
    if (coalesce(peer, r, /*queued=*/false)) {
      return RDMX_OK;
    }
    if (start_send(peer, r)) {
      peer.send_epoch = progress_calls_;
      return RDMX_OK;
    }
  }
  if (peer.pending_count >= kMaxPendingPerPeer) {
    if (r->sync_slot != kNoIndex) {
      ThreadCtx& tc = threads_[r->thread];
      tc.sync[r->sync_slot].request = nullptr;
      tc.sync_free.push_back(r->sync_slot);
    }
    r->state = ReqState::kIdle;
    return RDMX_ERR_NO_RESOURCE;
  }
  queue_send(peer, r);
  return RDMX_OK;
}

}  // namespace rdmx::transport
