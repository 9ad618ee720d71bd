// The UD send side: rdmx's own reliability over UD. Posting a message on the UD QP of its size
// class with its bounce buffer kept for resends, the send window and congestion window, resends
// on the retransmission timeout, acks (delayed, or every ack_every messages:
// protocol/reliability.h), the timers, and a raw send for tests of hostile input.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "protocol/copy.h"
#include "transport/channel/ud_channel.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

// UD resend slots: what the send window (protocol::SendWindow) keeps per unacknowledged message
// to resend it. In memory only, never on the wire:
//
//  bit 31  30 29            18   17          16          15                 0
//      +------+----------------+-----------+-----------+--------------------+
//      |  0   |     thread     | dst class | buf class | bounce buffer index|
//      +------+----------------+-----------+-----------+--------------------+
//
// thread: the send context whose pool holds the bytes (a resend, an ack or a teardown may come
// from another thread's call); dst class: which UD QP (the receiver's size class); buf class:
// which of that pool's bounce buffer classes.
static_assert(kSendSmallBuffers <= (1u << 16) && kSendLargeBuffers <= (1u << 16) &&
              kNumClasses <= 2 && kMaxThreads <= (1u << 12));
constexpr std::uint32_t ud_slot(std::uint8_t buf_class, std::uint32_t buf, int dst_class,
                                std::uint16_t thread) {
  return buf | (std::uint32_t{buf_class} << 16) | (static_cast<std::uint32_t>(dst_class) << 17) |
         (std::uint32_t{thread} << 18);
}
constexpr std::uint32_t ud_slot_buf(std::uint32_t slot) {
  return slot & 0xffff;
}
constexpr std::uint8_t ud_slot_buf_class(std::uint32_t slot) {
  return (slot >> 16) & 1;
}
constexpr int ud_slot_dst_class(std::uint32_t slot) {
  return static_cast<int>((slot >> 17) & 1);
}
constexpr std::uint16_t ud_slot_thread(std::uint32_t slot) {
  return static_cast<std::uint16_t>((slot >> 18) & 0xfff);
}
static_assert(ud_slot_thread(ud_slot(1, 0xffff, 1, 4095)) == 4095 &&
              ud_slot_buf(ud_slot(1, 0xffff, 1, 4095)) == 0xffff &&
              ud_slot_dst_class(ud_slot(0, 0, 1, 0)) == 1 &&
              ud_slot_buf_class(ud_slot(1, 0, 0, 0)) == 1);

}  // namespace

inline int Worker::post_ud_buffer(eager::SendPool& pool, Peer& peer, int cls, std::uint8_t bcls,
                                  std::uint32_t buf, std::size_t total, bool want_signal) {
  ibv_sge& sge = ud_sge_[cls];
  sge.addr = reinterpret_cast<std::uintptr_t>(pool.buffer(bcls, buf));
  sge.length = static_cast<std::uint32_t>(total);
  sge.lkey = pool.lkey();
  ibv_send_wr& wr = ud_wr_[cls];
  wr.send_flags = total <= max_inline_ ? IBV_SEND_INLINE : 0;
  wr.wr.ud.ah = peer.ah->get();
  wr.wr.ud.remote_qpn = peer.address.ud_qpn[cls];
  return ud_sq_[cls].post(pool, wr,
                          eager::SendQueue::Post{.kind = protocol::WrKind::kSendInline,
                                                 .buf_class = bcls,
                                                 .buf = buf,
                                                 .want_signal = want_signal,
                                                 .peer = &peer});
}

inline Worker::PostResult Worker::post_ud(eager::SendPool& pool, Peer& peer, protocol::MsgHeader& h,
                                          const void* body, std::size_t body_length,
                                          const void* payload, std::size_t length) {
  const std::size_t wire = body_length + length;
  const int cls = wire <= peer.address.class_capacity[0] ? 0 : 1;
  eager::SendQueue& sq = ud_sq_[cls];
  protocol::SendWindow& win = *peer.ud.tx;
  if (UdChannel::stream_full(peer) || !sq.has_room()) [[unlikely]] {
    return PostResult::kNoResource;
  }
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
  if (win.in_flight() + 1 >= peer.ud.cwnd) {
    h.flags = static_cast<std::uint16_t>(h.flags | protocol::kFlagAckRequest);
  }
  // UD keeps a copy for retransmission until the ack.
  std::byte* data = pool.buffer(bcls, buf);
  protocol::store_wire(data, h);
  if (body_length != 0) {
    protocol::copy_payload(data + protocol::kHeaderSize, body, body_length);
  }
  if (length != 0) {
    protocol::copy_payload(data + protocol::kHeaderSize + body_length, payload, length);
  }
  // Signalled when bounce buffers run low, so completions retire the unsignalled WRs before it.
  const int rc = post_ud_buffer(pool, peer, cls, bcls, buf, protocol::kHeaderSize + wire,
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
  (void)win.on_send(h.seq, ud_slot(bcls, buf, cls, pool.thread()), now_us());
  peer.ud.ack->on_ack_sent();
  list_ud_timer(peer);
  return PostResult::kPosted;
}

bool Worker::send_raw_for_test(std::uint64_t peer_uid, const void* bytes, std::size_t length,
                               debug::Raw how) {
  Peer* p = find_peer(peer_uid);
  eager::SendPool& pool = *tx_->send;
  if (!ud_mode_ || p == nullptr || p->state != PeerState::kConnected || !p->ah ||
      length > pool.buffer_capacity(0) ||
      (how != debug::Raw::kAsIs && length < protocol::kHeaderSize)) {
    return false;
  }
  if (how == debug::Raw::kSequenced) {
    auto h = protocol::load_wire<protocol::MsgHeader>(static_cast<const std::byte*>(bytes));
    h.src_ep = p->remote_index;
    const auto* rest = static_cast<const std::byte*>(bytes) + protocol::kHeaderSize;
    return post_ud(pool, *p, h, nullptr, 0, rest, length - protocol::kHeaderSize) ==
           PostResult::kPosted;
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
    h.seq = protocol::seq_add(p->ud.tx->next_seq(), h.seq);
    protocol::store_wire(data, h);
  }
  if (post_ud_buffer(pool, *p, 0, 0, buf, length, /*want_signal=*/false) != 0) {
    pool.release_unused(0, buf);
    return false;
  }
  return true;
}

bool Worker::resend_ud(Peer& peer, std::uint32_t slot) {
  eager::SendPool& pool = *threads_[ud_slot_thread(slot)].send;  // the bytes' pool
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
  if (post_ud_buffer(pool, peer, cls, bcls, buf, total, /*want_signal=*/false) != 0) {
    return false;
  }
  ++stat_ud_retransmits_;
  peer.ud.ack->on_ack_sent();
  return true;
}

bool Worker::post_ud_ack(Peer& peer) {
  protocol::MsgHeader h = protocol::make_header(protocol::MsgKind::kAck);
  h.src_ep = peer.remote_index;
  h.flags = protocol::kFlagAckValid;
  h.ack = peer.rx->cumulative_ack();
  eager::SendPool& pool = *tx_->send;
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
  peer.ud.ack->on_ack_sent();
  return true;
}

void Worker::enlist_ud_timer(Peer& peer) {
  peer.ud.timer_listed = true;
  ud_timer_list_.push_back(&peer);
}

void Worker::run_ud_timers(std::uint64_t now, bool acks_now) {
  std::uint64_t next = protocol::kNoDeadline;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < ud_timer_list_.size(); ++i) {
    Peer& p = *ud_timer_list_[i];
    if (p.state == PeerState::kFailed) {
      p.ud.timer_listed = false;
      continue;
    }
    if (p.ud.tx->peer_dead(now)) {
      p.ud.timer_listed = false;
      fail_peer(p, RDMX_ERR_UNREACHABLE, "no acknowledgement within peer_timeout_ms");
      continue;
    }
    // Go-back-N, but at most a burst per expiry, oldest first: the receiver holds what came
    // after a gap, so once the gap is filled its cumulative ack covers the rest, which then
    // never needs resending. A larger loss takes a few more expiries.
    std::uint32_t burst = 0;
    const bool expired = now >= p.ud.tx->deadline_us();
    (void)p.ud.tx->due_for_retransmit(now, [&](protocol::Seq, std::uint32_t slot) {
      return burst++ < kUdResendBurst && resend_ud(p, slot);
    });
    // Congestion is loss while the receiver keeps acknowledging. A receiver that acknowledged
    // nothing since the last expiry is not progressing (or is gone): shrinking the window then
    // would only make more standard sends wait for it; the RTO backoff handles that case.
    if (expired && p.ud.acked_since_rto) {
      p.ud.cwnd = std::max(kUdCwndMin, p.ud.cwnd / 2);
      p.ud.cwnd_acked = 0;
    }
    if (expired) {
      p.ud.acked_since_rto = false;
    }
    if (p.ud.ack->ack_due(now) || (acks_now && p.ud.ack->unacked() != 0)) {
      (void)post_ud_ack(p);
    }
    if (p.ud.tx->in_flight() == 0 && p.ud.ack->unacked() == 0) {
      p.ud.timer_listed = false;
      continue;
    }
    next = std::min({next, p.ud.tx->deadline_us(), p.ud.ack->deadline_us()});
    ud_timer_list_[keep++] = &p;
  }
  ud_timer_list_.resize(keep);
  next_ud_timer_us_ = next;
}

void Worker::on_ud_ack(Peer& peer, protocol::Seq ack, std::uint64_t now) {
  std::uint32_t freed = 0;
  (void)peer.ud.tx->on_ack(ack, now, [&](protocol::Seq, std::uint32_t slot) {
    threads_[ud_slot_thread(slot)].send->unretain(ud_slot_buf_class(slot), ud_slot_buf(slot));
    ++freed;
  });
  if (freed != 0) {
    peer.ud.acked_since_rto = true;
    peer.ud.cwnd_acked += freed;
    if (peer.ud.cwnd_acked >= peer.ud.cwnd && peer.ud.cwnd < kUdWindow) {
      peer.ud.cwnd_acked -= peer.ud.cwnd;
      ++peer.ud.cwnd;
    }
  }
  if (peer.has_waiting()) {
    list_for_flush(peer);
  }
}

void Worker::release_ud_window(Peer& peer) {
  peer.ud.tx->drain([&](protocol::Seq, std::uint32_t slot) {
    threads_[ud_slot_thread(slot)].send->unretain(ud_slot_buf_class(slot), ud_slot_buf(slot));
  });
}

// The channel's post (ChannelOps::post), with Worker::post_ud inlined.
rendezvous::PostResult UdChannel::post(Worker& w, Peer& peer, eager::SendPool& pool,
                                       protocol::MsgHeader& h, const void* body,
                                       std::size_t body_length, const void* payload,
                                       std::size_t length) {
  return w.post_ud(pool, peer, h, body, body_length, payload, length);
}

}  // namespace rdmx::transport
