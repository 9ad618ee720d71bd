// The progress loop, receive completions and the receive path (ordering, matching, unexpected
// messages), the receive-side API. Send completions are in send.cc, the request-level API
// (completion callbacks, wait, poll) in requests.cc.
//
// Receive path of one eager message:
//   SRQ completion -> wr_id names pool and buffer -> header checked -> peer from src_ep
//   -> UD: piggy-backed ack, test drop, duplicate suppression by the Sequencer
//   -> in order? deliver now : hold (its buffer, or a heap copy) until the gap fills
//   -> deliver: match against posted receives (copy into the user's buffer, truncating at its
//      length) or queue as unexpected. A kBatch (coalesced sends) is delivered record by record
//      the same way; its unexpected records are copied out, the buffer holds the others.
//
// Unexpected messages keep their SRQ buffer (no copy) while the pool has spare buffers to post
// in its place (SrqPool::can_hold); after that they are copied to the heap and the buffer is
// reposted at once, so the SRQ never shrinks: memory for unexpected messages grows with the
// application's backlog (as MPI requires), the receive queues do not.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "protocol/copy.h"
#include "transport/channel/rc_channel.h"
#include "transport/channel/ud_channel.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

namespace {

constexpr std::uint8_t kHeapPool = 0xff;

Request* owner_of(protocol::PostedRecv* pr) {
  return static_cast<RecvNode*>(pr)->owner;
}

// The bytes after the GRH. A completion shorter than its GRH (no conforming device makes one)
// gives 0, which validate() rejects, rather than a wrapped length it could accept.
inline std::size_t payload_bytes(const ibv_wc& wc, std::uint32_t grh_bytes) noexcept {
  return wc.byte_len >= grh_bytes ? wc.byte_len - grh_bytes : 0;
}

}  // namespace

// --- progress ------------------------------------------------------------------------------

template <class Ch>
int Worker::poll_recv(Worker& w, ibv_cq* cq) {
  return poll_batch(cq, [&w](const ibv_wc& wc) { w.on_recv_completion<Ch>(wc); });
}

template <class Ch>
void Worker::on_recv(Worker& w, const ibv_wc& wc) {
  w.on_recv_completion<Ch>(wc);
}

int Worker::poll_cqs() {
  return ops_.poll_recv(*this, recv_cq_->get()) + ops_.poll_send(*this, send_cq_->get());
}

bool Worker::send_completions_expected() const noexcept {
  for (const ThreadCtx& tc : threads_) {
    if (tc.send->signaled_outstanding() != 0) {
      return true;
    }
  }
  return false;
}

int Worker::progress() {
  ++progress_calls_;  // a new epoch for coalescing (send.cc)
  // Housekeeping first, the receive CQ last: a message this call finds goes back to the caller
  // without waiting behind the rest of the call (in a ping-pong, arrival -> reply is the
  // critical path; the housekeeping runs while the caller waits anyway).
  int events = 0;
  // The send CQ only while a signalled WR is out, or now and then for the error completions
  // of unsignalled ones (a failed QP flushes every WR).
  if (send_completions_expected() || (progress_calls_ & 63) == 0) {
    events += ops_.poll_send(*this, send_cq_->get());
  }
  const bool look_at_clock = (progress_calls_ & 255) == 0;
  if (housekeeping_due(look_at_clock)) {
    events += housekeeping(look_at_clock);
  }
  if (!ring_peers_.empty()) {
    events += poll_rings();
  }
  if (shm_ != nullptr) {
    events += poll_shm();
    if (!shm_done_.empty() || !shm_gone_.empty()) [[unlikely]] {
      events += run_shm_done();
    }
  }
  // With every peer on this node (shared memory), the receive CQ carries only the control QP's
  // connection messages: unless a connection is being made, every 16th call looks.
  if (device_peers_ != 0 || (progress_calls_ & 15) == 0 ||
      next_connect_timer_us_ != protocol::kNoDeadline) [[likely]] {
    events += ops_.poll_recv(*this, recv_cq_->get());
  }
  // MULTI: the caller (progress_multi) runs them once it has released the lock.
  if ((done_head_ != nullptr || !failed_uids_.empty()) && !multi_) {
    events += run_completions();
  }
  return events;
}

// housekeeping's conditions: every branch of it must be here. It looks at the pools (and so can
// find one low) only while pools_moved_, which it leaves set while a pool is low or wants a
// refill.
inline bool Worker::housekeeping_due(bool look_at_clock) const noexcept {
  return look_at_clock || next_ud_timer_us_ != protocol::kNoDeadline ||
         next_connect_timer_us_ != protocol::kNoDeadline || housekeeping_queued();
}

int Worker::housekeeping(bool look_at_clock) {
  // A branch added here needs its condition in housekeeping_due too (in housekeeping_queued if
  // no deadline announces it, so that arming does not sleep on it), or progress runs it only at
  // its clock look, every 256th call: late, not never, so no test would fail.
  int events = 0;
  // The pools only after a buffer was taken or given back since the last look (a ring or
  // shared-memory message takes none), or while one is low or waits for its refill.
  bool low = false;
  if (pools_moved_) {
    bool again = false;
    for (int c = 0; c < kNumPools; ++c) {
      eager::SrqPool& pool = *pools_[c];
      if (pool.wants_refill() && !(hold_refills_for_test_ && c < kNumClasses)) {
        (void)pool.refill();
      }
      const bool pool_low = pool.posted() <= pool.params().watermark;
      low |= pool_low;
      again |= pool_low || pool.wants_refill();
    }
    pools_moved_ = again;
  }
  // Async events cost a read(2) (1.7 us in the guest): look every kAsyncEventPeriodUs (progress
  // checks every 256 calls), or at once when a pool is low (its limit event has probably fired
  // and must be acknowledged and re-armed).
  if (look_at_clock || low) [[unlikely]] {
    const std::uint64_t now = now_us();
    if (low || now >= next_async_us_) {
      next_async_us_ = now + kAsyncEventPeriodUs;
      handle_async_events();
    }
    if (now >= next_watchdog_us_) {
      run_watchdogs(now);  // liveness.cc: the RC watchdog and probes of quiet peers
    }
  }
  if (next_ud_timer_us_ != protocol::kNoDeadline ||
      next_connect_timer_us_ != protocol::kNoDeadline) {
    const std::uint64_t now = now_us();
    if (now >= next_connect_timer_us_) {
      run_connect_timers(now);
    }
    if (now >= next_ud_timer_us_) {
      // What has arrived first. A process back from computing for longer than the RTO finds
      // its timers expired while the peer's answers, which ack what they would resend, wait in
      // the receive CQ: without this look each such return resent the last unacked messages
      // to every peer (mpi_oneway over rdmx_ud: a resend per round trip). Their arrival is
      // delivered here as progress would a moment later.
      events += ops_.poll_recv(*this, recv_cq_->get());
      run_ud_timers(now);
    }
  }
  if (!flush_list_.empty()) {
    flush_listed_peers();
  }
  if (rndv_->has_pending()) [[unlikely]] {
    events += rndv_->progress();
  }
  if (!wqp_retired_.empty() || !wqp_connect_list_.empty()) [[unlikely]] {
    destroy_retired_qps();
    if (!wqp_connect_list_.empty()) {
      run_wqp_timers(now_us());
    }
  }
  return events;
}

bool Worker::drop_for_test() noexcept {
  if (drop_threshold_ == 0) [[likely]] {
    return false;
  }
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return static_cast<std::uint32_t>(rng_ >> 32) < drop_threshold_;
}

// --- RC eager rings (channel/rc_ring.cc): polled by progress -----------------------------------

// Most looks find no ring written: inline in progress(), they then cost no call.
inline int Worker::poll_rings() {
  int n = 0;
  // By index: a ring given while we deliver (it never is today) must not invalidate the loop.
  for (std::size_t i = 0; i < ring_peers_.size(); ++i) {
    Peer& p = *ring_peers_[i];
    if (p.rc.rx_ring->written()) {  // most rings are empty at most looks: no call for them
      n += poll_ring(p);
    }
  }
  return n;
}

int Worker::poll_ring(Peer& p) {
  eager::RecvRing& ring = *p.rc.rx_ring;
  int n = 0;
  while (n < kRingPollBatch) {
    const protocol::RingPeek m = ring.peek();
    if (m.status != protocol::RingPeek::kReady) [[likely]] {
      break;  // empty, or still being written
    }
    const auto h = protocol::load_wire<protocol::MsgHeader>(m.message);
    if (protocol::seq_gt(h.seq, p.rx->expected())) {
      break;  // its turn comes after a message still on a QP: it waits in its slot
    }
    const auto kind = static_cast<protocol::MsgKind>(h.kind);
    if (h.seq != p.rx->expected() || protocol::validate(h, m.length) != protocol::WireError::kOk ||
        h.src_ep != p.index || kind == protocol::MsgKind::kAck) [[unlikely]] {
      // Cannot happen with a peer of this version (the check passed, RC does not duplicate).
      std::fprintf(stderr,
                   "rdmx: dropped a malformed ring message from %016llx (%u bytes, seq %u, "
                   "expected %u)\n",
                   static_cast<unsigned long long>(p.uid), m.length, h.seq, p.rx->expected());
      ++stat_dropped_malformed_;
      ring.pop();
      continue;
    }
    on_rc_acks(p, h);
    const std::byte* body = m.message + protocol::kHeaderSize;
    deliver_in_order(p, h, body, body + protocol::body_size(kind), kPoolRing, 0);
    ring.pop();
    ++n;
  }
  if (n == 0) {
    return 0;
  }
  stat_ring_recvs_ += static_cast<std::uint64_t>(n);
  maybe_grant(p);
  // Half the ring waits for our ring_ack: it goes out on our next message to the peer, or
  // (flush_peer, one progress call later) in a kAck.
  if (ring.unreported() >= ring.slots() / 2 && !p.rc.grant_due) {
    p.rc.grant_due = true;
    p.rc.grant_held = false;
    list_for_flush(p);
  }
  return n;
}

// --- shared-memory rings (channel/shm_send.cc): polled by progress ---------------------------

int Worker::poll_shm() {
  const std::uint32_t claimed = shm_->claimed();
  if (claimed != shm_rx_.size()) [[unlikely]] {
    for (std::uint32_t k = static_cast<std::uint32_t>(shm_rx_.size()); k < claimed; ++k) {
      shm_rx_.push_back({.ring = shm_->consumer(k), .peer = nullptr});
    }
  }
  int n = 0;
  for (std::uint32_t k = 0; k < shm_rx_.size(); ++k) {
    n += poll_shm_ring(k);
  }
  return n;
}

inline int Worker::poll_shm_ring(std::uint32_t k) {
  ShmRx& rx = shm_rx_[k];
  int n = 0;
  std::uint32_t length = 0;
  while (n < kRingPollBatch) {
    const std::byte* m = rx.ring.peek(&length);
    if (m == nullptr) [[likely]] {
      break;
    }
    protocol::MsgHeader h{};
    const bool whole = length >= protocol::kHeaderSize;
    if (whole) {
      h = protocol::load_wire<protocol::MsgHeader>(m);
    }
    if (rx.peer == nullptr && whole && h.src_ep < peers_.size()) [[unlikely]] {
      // The ring's first message: its writer is the peer it names, if that peer claimed it.
      Peer& c = *peers_[h.src_ep];
      if (c.shm.on() && c.uid == rx.ring.control().sender_uid) {
        rx.peer = &c;
      }
    }
    Peer* p = rx.peer;
    const auto kind = static_cast<protocol::MsgKind>(h.kind);
    if (p == nullptr || !whole || protocol::validate(h, length) != protocol::WireError::kOk ||
        h.src_ep != p->index || h.seq != p->rx->expected() || kind == protocol::MsgKind::kAck)
        [[unlikely]] {
      std::fprintf(stderr,
                   "rdmx: dropped a malformed shared-memory message (ring %u, %u bytes, seq %u)\n",
                   k, length, h.seq);
      ++stat_dropped_malformed_;
      rx.ring.pop();
      continue;
    }
    if (p->state != PeerState::kFailed) [[likely]] {
      const std::byte* body = m + protocol::kHeaderSize;
      deliver_in_order(*p, h, body, body + protocol::body_size(kind), kPoolRing, 0);
    }
    rx.ring.pop();
    ++n;
  }
  stat_shm_recvs_ += static_cast<std::uint64_t>(n);
  return n;
}

template <class Ch>
void Worker::on_recv_completion(const ibv_wc& wc) {
  if (wc.wr_id == verbs::kDrainSendWrId || wc.wr_id == verbs::kDrainRecvWrId) {
    return;
  }
  const std::uint8_t pid = eager::SrqPool::pool_of(wc.wr_id);
  std::uint32_t buf = 0;
  if (pid >= kNumPools || !pools_[pid]->owns(wc.wr_id, &buf)) [[unlikely]] {
    std::fprintf(stderr, "rdmx: receive completion with a foreign wr_id %016llx\n",
                 static_cast<unsigned long long>(wc.wr_id));
    return;
  }
  ++recv_completed_;
  eager::SrqPool& pool = *pools_[pid];
  pool.on_completion(buf);
  if (wc.status != IBV_WC_SUCCESS || closing_) [[unlikely]] {
    if (wc.status != IBV_WC_WR_FLUSH_ERR && !closing_ && config_.verbose >= 1) {
      std::fprintf(stderr, "rdmx: receive failed: %s\n", ibv_wc_status_str(wc.status));
    }
    pool.release(buf);
    return;
  }
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    // The last write of a rendezvous transfer: its immediate names the receive.
    rndv_->on_imm(rendezvous::from_imm(wc.imm_data));
    pool.release(buf);
    return;
  }
  if (pid == kPoolCtrl) {
    if (drop_for_test()) {
      ++stat_ud_dropped_test_;
    } else {
      on_ctrl_message(pool.message(buf), payload_bytes(wc, eager::kGrhBytes), wc);
    }
    pool.release(buf);
    return;
  }
  on_data_message<Ch>(pool, buf, wc);
}

template <class Ch>
inline void Worker::on_data_message(eager::SrqPool& pool, std::uint32_t buf, const ibv_wc& wc) {
  const std::uint8_t pid = pool.params().pool_id;
  const std::byte* msg = pool.message(buf);
  const std::size_t length = payload_bytes(wc, pool.params().grh_bytes);
  if (Ch::dropped_for_test(*this)) {
    pool.release(buf);
    return;
  }
  const auto h = protocol::load_wire<protocol::MsgHeader>(msg);
  if (protocol::validate(h, length) != protocol::WireError::kOk || h.src_ep >= peers_.size())
      [[unlikely]] {
    if (config_.verbose >= 1) {
      std::fprintf(stderr, "rdmx: dropped a malformed message (%zu bytes, src_ep %u)\n", length,
                   h.src_ep);
    }
    ++stat_dropped_malformed_;
    pool.release(buf);
    return;
  }
  Peer& p = *peers_[h.src_ep];
  if (!p.rx) [[unlikely]] {
    ++stat_dropped_foreign_;
    pool.release(buf);
    return;
  }
  std::uint64_t now = 0;
  if (!Ch::admit(*this, p, h, wc, now)) {
    pool.release(buf);  // an ack (taken), or not from the peer's QPs (counted)
    return;
  }
  const auto kind = static_cast<protocol::MsgKind>(h.kind);
  const std::byte* payload = msg + protocol::kHeaderSize + protocol::body_size(kind);
  if (h.seq == p.rx->expected()) [[likely]] {
    Ch::before_in_order(*this, p, h, now);
    deliver_in_order(p, h, msg + protocol::kHeaderSize, payload, pid, buf);
    Ch::after_in_order(*this, p);
    return;
  }
  // Out of order: hold it (or drop a duplicate).
  MsgDesc* d = keep_message(p, h, payload, pid, buf);
  const protocol::Arrival a = p.rx->on_arrival(h.seq, reinterpret_cast<std::uintptr_t>(d));
  if (a == protocol::Arrival::kHeld) {
    Ch::on_held(*this, p, now);
    return;
  }
  release_message(d);
  if (a == protocol::Arrival::kDuplicate) {
    ++stat_ud_duplicates_;
  } else {
    ++stat_out_of_window_;
  }
  Ch::on_rejected(*this, p, h, a);
}

inline void Worker::deliver_in_order(Peer& p, const protocol::MsgHeader& h, const std::byte* body,
                                     const std::byte* payload, std::uint8_t pool,
                                     std::uint32_t buf) {
  (void)p.rx->on_arrival(h.seq, 0);
  // One deliver() call site, so that it is inlined once.
  MsgDesc* held = nullptr;
  protocol::MsgHeader dh = h;
  for (;;) {
    deliver(p, held, dh, body, payload, pool, buf);
    const auto cookie = p.rx->pop_ready();
    if (!cookie) [[likely]] {
      break;
    }
    held = reinterpret_cast<MsgDesc*>(*cookie);
    dh = protocol::make_header(held->kind);
    dh.tag = held->tag;
    dh.aux = held->aux;
    dh.payload_length = held->length;
    body = held->body.data();
    payload = held->data;
    pool = held->pool;
    buf = held->buf;
  }
}

inline Request* Worker::match_recv(const Peer& peer, std::uint64_t tag) {
  // With a sink and nothing posted, no matching at all (UCX's AMs take this way).
  if (recv_sink_ == nullptr || matcher_.posted_count() != 0) [[likely]] {
    if (protocol::PostedRecv* pr = matcher_.match_message(peer.index, tag)) {
      return owner_of(pr);
    }
    if (recv_sink_ == nullptr) [[likely]] {
      return nullptr;  // unexpected
    }
  }
  // The sink's only when no message waits unexpected: it would be received before them.
  return matcher_.unexpected_count() == 0 ? take_sink_recv() : nullptr;
}

// A receive from the sink, set up as rdmx_tag_recv sets up one that matches at once.
Request* Worker::take_sink_recv() {
  void* buffer = nullptr;
  std::size_t capacity = 0;
  rdmx_request_t* storage = recv_sink_(recv_sink_arg_, &buffer, &capacity);
  if (storage == nullptr) {
    return nullptr;
  }
  Request* r = to_request(storage);
  init_request(r, ReqType::kRecv, nullptr, nullptr);
  r->buffer = buffer;
  r->capacity = buffer != nullptr ? capacity : 0;
  r->recv.spec = protocol::RecvSpec{.source = protocol::kAnySource, .tag = 0, .mask = 0};
  return r;
}

inline void Worker::deliver(Peer& peer, MsgDesc* held, const protocol::MsgHeader& h,
                            const std::byte* body, const std::byte* payload, std::uint8_t pool,
                            std::uint32_t buf) {
  const auto kind = static_cast<protocol::MsgKind>(h.kind);
  auto release = [&] {
    if (held != nullptr) {
      release_message(held);
    } else if (pool < kNumPools) {  // a ring slot is cleared by poll_ring
      pools_[pool]->release(buf);
    }
  };
  switch (kind) {
    case protocol::MsgKind::kEager:
    case protocol::MsgKind::kEagerSync:
    case protocol::MsgKind::kRts: {
      if (Request* r = match_recv(peer, h.tag)) {
        if (kind == protocol::MsgKind::kRts) {
          start_rndv_recv(r, peer, h.tag, protocol::load_wire<protocol::RtsBody>(body));
        } else {
          finish_recv(r, peer, h.tag, kind, h.aux, payload, h.payload_length);
        }
        release();
        return;
      }
      MsgDesc* d = held != nullptr ? held : keep_message(peer, h, payload, pool, buf);
      d->source = peer.index;
      d->tag = h.tag;
      matcher_.add_unexpected(*d);
      ++stat_unexpected_;
      return;
    }
    case protocol::MsgKind::kCts:
    case protocol::MsgKind::kFin:
    case protocol::MsgKind::kRndvData:
      on_rndv_message(peer, h, body, payload);
      release();
      return;
    case protocol::MsgKind::kBatch:
      deliver_batch(peer, h, payload);
      release();
      return;
    case protocol::MsgKind::kRingOffer:
      on_ring_offer(peer, protocol::load_wire<protocol::RingBody>(body));
      release();
      return;
    case protocol::MsgKind::kRingWithdraw:
      on_ring_withdraw(peer);
      release();
      return;
    case protocol::MsgKind::kRingReleased:
      on_ring_released(peer);
      release();
      return;
    case protocol::MsgKind::kRndvImm:
      if (peer.shm.on()) {  // over the device the immediate comes with the write itself
        rndv_->on_imm(h.aux);
      } else {
        ++stat_dropped_malformed_;
      }
      release();
      return;
    case protocol::MsgKind::kMatchAck: {
      const protocol::SyncCookie c = protocol::decode_sync_cookie(h.aux);
      const std::uint32_t thread = c.thread;
      const std::uint32_t slot = c.slot;
      const std::uint8_t gen = c.generation;
      if (thread < threads_.size() && slot < threads_[thread].sync.size()) {
        ThreadCtx& tc = threads_[thread];
        SyncSlot& s = tc.sync[slot];
        if (s.request != nullptr && s.generation == gen && s.peer == &peer) {
          Request* r = s.request;
          s.request = nullptr;
          s.generation = static_cast<std::uint8_t>(s.generation + 1);
          tc.sync_free.push_back(slot);
          r->sync_slot = kNoIndex;
          if (peer.sync_waiting > 0) {
            --peer.sync_waiting;
          }
          complete(r, RDMX_OK);
        }
      }
      release();
      return;
    }
    default:
      release();
      return;
  }
}

// A kBatch: its records, in order, as if each had come alone. An unexpected one is copied out
// (the buffer holds the others, which match now or later).
void Worker::deliver_batch(Peer& peer, const protocol::MsgHeader& h, const std::byte* payload) {
  protocol::BatchReader reader(std::span(payload, h.payload_length), h.aux);
  protocol::BatchReader::Message m{};
  while (reader.next(&m)) {
    if (Request* r = match_recv(peer, m.tag)) {
      finish_recv(r, peer, m.tag, protocol::MsgKind::kEager, 0, m.data, m.length);
      continue;
    }
    protocol::MsgHeader one = protocol::make_header(protocol::MsgKind::kEager);
    one.seq = h.seq;
    one.tag = m.tag;
    one.payload_length = m.length;
    MsgDesc* d = keep_message(peer, one, m.data, kHeapPool, 0);
    matcher_.add_unexpected(*d);
    ++stat_unexpected_;
  }
  if (reader.malformed()) [[unlikely]] {
    ++stat_dropped_malformed_;
    std::fprintf(stderr,
                 "rdmx: a batch from %016llx ends in a malformed record: the rest of it "
                 "is lost\n",
                 static_cast<unsigned long long>(peer.uid));
  }
}

MsgDesc* Worker::alloc_desc() {
  if (desc_free_ == nullptr) [[unlikely]] {
    auto chunk = std::make_unique<MsgDesc[]>(kDescChunk);
    for (std::size_t i = 0; i < kDescChunk; ++i) {
      chunk[i].next_free = desc_free_;
      desc_free_ = &chunk[i];
    }
    desc_chunks_.push_back(std::move(chunk));
  }
  MsgDesc* d = desc_free_;
  desc_free_ = d->next_free;
  d->next_free = nullptr;
  return d;
}

void Worker::free_desc(MsgDesc* d) {
  d->peer = nullptr;
  d->heap = nullptr;
  d->pool = kHeapPool;
  d->next_free = desc_free_;
  desc_free_ = d;
}

MsgDesc* Worker::keep_message(Peer& peer, const protocol::MsgHeader& h, const std::byte* payload,
                              std::uint8_t pool, std::uint32_t buf) {
  MsgDesc* d = alloc_desc();
  d->peer = &peer;
  d->kind = static_cast<protocol::MsgKind>(h.kind);
  d->seq = h.seq;
  d->aux = h.aux;
  d->length = h.payload_length;
  d->tag = h.tag;
  d->source = peer.index;
  const std::size_t body_bytes = protocol::body_size(d->kind);
  if (body_bytes != 0) {
    std::memcpy(d->body.data(), payload - body_bytes, body_bytes);
  }
  // kHeapPool: bytes in no receive buffer of their own (a batch record), kPoolRing: in a ring
  // slot that must be cleared for the next message; both always copied.
  if (pool < kNumPools && pools_[pool]->can_hold()) {
    // Zero copy: the bytes stay in the receive buffer, a spare buffer is posted in its place.
    d->pool = pool;
    d->buf = buf;
    d->data = payload;
    pools_[pool]->note_held();
    return d;
  }
  // The pool has no spare left: copy out, so the SRQ is refilled at once.
  d->heap = static_cast<std::byte*>(std::malloc(std::max<std::size_t>(h.payload_length, 1)));
  if (d->heap == nullptr) {
    std::fprintf(stderr, "rdmx: out of memory for an unexpected message of %u bytes\n",
                 h.payload_length);
    std::abort();
  }
  std::memcpy(d->heap, payload, h.payload_length);
  heap_bytes_ += h.payload_length;
  d->data = d->heap;
  d->pool = kHeapPool;
  if (pool < kNumPools) {
    pools_[pool]->release(buf);
  }
  return d;
}

void Worker::release_message(MsgDesc* d) {
  if (d->pool != kHeapPool) {
    pools_[d->pool]->release(d->buf);
  } else if (d->heap != nullptr) {
    heap_bytes_ -= d->length;
    std::free(d->heap);
  }
  free_desc(d);
}

inline int Worker::copy_out(Request* r, const Peer& peer, std::uint64_t tag,
                            const std::byte* payload, std::size_t length) noexcept {
  r->status.tag = tag;
  r->status.source = peer.uid;
  r->status.length = length;
  std::size_t n = length;
  int code = RDMX_OK;
  if (length > r->capacity) [[unlikely]] {
    n = r->capacity;  // nothing is written past the caller's buffer
    code = RDMX_ERR_TRUNCATED;
  }
  if (n != 0) {
    protocol::copy_payload(r->buffer, payload, n);
  }
  return code;
}

inline void Worker::finish_recv(Request* r, Peer& peer, std::uint64_t tag, protocol::MsgKind kind,
                                std::uint32_t aux, const std::byte* payload, std::size_t length) {
  const int code = copy_out(r, peer, tag, payload, length);
  if (kind == protocol::MsgKind::kEagerSync) {
    send_match_ack(peer, aux);
  }
  complete(r, code);
}

// --- receive-side API ----------------------------------------------------------------------

int Worker::tag_recv(void* buffer, std::size_t length, std::uint64_t source, std::uint64_t tag,
                     std::uint64_t mask, Request* r, rdmx_callback_t callback, void* user_data) {
  if (r == nullptr || (buffer == nullptr && length != 0)) {
    return RDMX_ERR_INVALID_PARAM;
  }
  std::uint32_t src = protocol::kAnySource;
  Peer* p = nullptr;
  if (source != RDMX_ANY_SOURCE) {
    p = find_peer(source);
    if (p == nullptr) {
      // A receive from a peer not heard of yet: a placeholder, connected if it ever connects.
      try {
        p = &add_peer(source);
      } catch (const std::bad_alloc&) {
        return RDMX_ERR_NO_MEMORY;
      }
    }
    src = p->index;
  }
  init_recv(r, buffer, length, protocol::RecvSpec{.source = src, .tag = tag, .mask = mask},
            callback, user_data, tx_->index);
  if (protocol::UnexpectedMsg* u = matcher_.post_receive(r->recv)) {
    MsgDesc* d = static_cast<MsgDesc*>(u);
    if (d->kind == protocol::MsgKind::kRts) {
      start_rndv_recv(r, *d->peer, d->tag, protocol::load_wire<protocol::RtsBody>(d->body.data()));
    } else {
      finish_recv(r, *d->peer, d->tag, d->kind, d->aux, d->data, d->length);
    }
    release_message(d);
    return RDMX_OK;
  }
  if ((p != nullptr && p->dead) || failed_code_ != 0) [[unlikely]] {
    // Nothing it sent before dying (or the worker failing) matches, and nothing more will come.
    (void)matcher_.cancel(r->recv);
    move_to(r, ReqState::kIdle);
    return failed_code_ != 0 ? failed_code_ : RDMX_ERR_UNREACHABLE;
  }
  activate(r);
  return RDMX_OK;
}

bool Worker::recv_shared(int ctx, void* buffer, std::size_t length, std::uint64_t source,
                         std::uint64_t tag, std::uint64_t mask, Request* r,
                         rdmx_callback_t callback, void* user_data) {
  lock_shared_side();
  const SharedSide shared(lock_);
  // Only exclusive holders add unexpected messages and peers, or fail them: what is read here
  // about peers holds until the receive is posted. match_mu_ covers what shared holders change:
  // the posted receives, the active list, and the taking of an unexpected message (probes read
  // the queue under it too). An eager message taken here is this call's alone once out of the
  // matcher: its bytes are copied with match_mu_ released, and its buffer goes back to its pool
  // (the exclusive holders') through shared_taken_. A synchronous one's match-ack is posted here
  // too (take_eager_shared). A rendezvous (its clear-to-send is progress's) is left to the locked
  // path.
  std::uint32_t src = protocol::kAnySource;
  if (source != RDMX_ANY_SOURCE) {
    const Peer* p = find_peer(source);
    if (p == nullptr || p->dead) {
      return false;
    }
    src = p->index;
  }
  if (failed_code_ != 0) {
    return false;
  }
  const protocol::RecvSpec spec{.source = src, .tag = tag, .mask = mask};
  const auto thread = static_cast<std::uint16_t>(ctx);
  MsgDesc* d = nullptr;
  {
    const std::lock_guard<ShortLock> match(match_mu_);
    d = static_cast<MsgDesc*>(matcher_.probe(spec));  // the oldest that matches
    if (d == nullptr) {
      init_recv(r, buffer, length, spec, callback, user_data, thread);
      matcher_.post_unmatched(r->recv);
      activate(r);
      return true;
    }
    if (d->kind == protocol::MsgKind::kRts) {
      return false;
    }
    (void)matcher_.remove_unexpected(*d);
  }
  init_recv(r, buffer, length, spec, callback, user_data, thread);
  take_eager_shared(ctx, d, r);
  return true;
}

bool Worker::msg_recv_shared(int ctx, MsgDesc* d, void* buffer, std::size_t length, Request* r,
                             rdmx_callback_t callback, void* user_data) {
  lock_shared_side();
  const SharedSide shared(lock_);
  // The mprobe took the message out of the matcher: it is this call's alone, and needs no
  // match_mu_. The shared side keeps its peer (read for the status) in place. queued() is read
  // here, not before the lock, after the rule of lock_shared_side (worker.h); the mprobe's write
  // of it reaches this thread through the caller's hand-over of the message.
  if (d->queued() || d->kind == protocol::MsgKind::kRts) {
    return false;
  }
  init_request(r, ReqType::kRecv, callback, user_data, static_cast<std::uint16_t>(ctx));
  r->buffer = buffer;
  r->capacity = length;
  take_eager_shared(ctx, d, r);
  return true;
}

void Worker::take_eager_shared(int ctx, MsgDesc* d, Request* r) {
  r->status.error = copy_out(r, *d->peer, d->tag, d->data, d->length);
  // As finish_recv: the match-ack before the receive completes.
  d->ack_owed =
      d->kind == protocol::MsgKind::kEagerSync && !post_match_ack_shared(ctx, *d->peer, d->aux);
  complete_shared(r);
  MsgDesc* head = shared_taken_.load(std::memory_order_relaxed);
  do {
    d->next_free = head;
  } while (!shared_taken_.compare_exchange_weak(head, d, std::memory_order_release,
                                                std::memory_order_relaxed));
}

void Worker::release_shared_taken() {
  MsgDesc* d = shared_taken_.exchange(nullptr, std::memory_order_acquire);
  while (d != nullptr) {
    MsgDesc* const next = d->next_free;
    if (d->ack_owed) [[unlikely]] {
      d->ack_owed = false;
      send_match_ack(*d->peer, d->aux);  // posted now or queued for the flush
    }
    release_message(d);
    d = next;
  }
}

int Worker::owed_match_acks() const noexcept {
  // The caller holds a side of the lock, and only the whole lock's holder unlinks or reuses these
  // descriptors (release_shared_taken). The acquire pairs with every push's release
  // compare-exchange (earlier pushes through the release sequence): ack_owed and next_free are
  // written before.
  int n = 0;
  for (const MsgDesc* d = shared_taken_.load(std::memory_order_acquire); d != nullptr;
       d = d->next_free) {
    n += d->ack_owed ? 1 : 0;
  }
  return n;
}

int Worker::probe(std::uint64_t source, std::uint64_t tag, std::uint64_t mask,
                  rdmx_status_t* status, rdmx_message_t** message) {
  std::uint32_t src = protocol::kAnySource;
  const Peer* p = nullptr;
  if (source != RDMX_ANY_SOURCE) {
    p = find_peer(source);
    if (p == nullptr) {
      return 0;
    }
    src = p->index;
  }
  const protocol::RecvSpec spec{.source = src, .tag = tag, .mask = mask};
  protocol::UnexpectedMsg* u = message != nullptr ? matcher_.mprobe(spec) : matcher_.probe(spec);
  if (u == nullptr) {
    // Someone waits in a probe loop: keep quiet peers under watch. Stored only when not set
    // yet, so that threads probing side by side (probe_shared) do not take the line in turn.
    if (!probe_waiting_.load(std::memory_order_relaxed)) {
      probe_waiting_.store(true, std::memory_order_relaxed);
    }
    if (failed_code_ != 0) [[unlikely]] {
      return failed_code_;  // nothing more will come from anyone
    }
    return p != nullptr && p->dead ? RDMX_ERR_UNREACHABLE : 0;
  }
  const MsgDesc* d = static_cast<MsgDesc*>(u);
  if (status != nullptr) {
    status->error = RDMX_OK;
    status->tag = d->tag;
    status->source = d->peer->uid;
    status->length = d->kind == protocol::MsgKind::kRts
                         ? protocol::load_wire<protocol::RtsBody>(d->body.data()).total_length
                         : d->length;
  }
  if (message != nullptr) {
    *message = reinterpret_cast<rdmx_message_t*>(static_cast<MsgDesc*>(u));
  }
  return 1;
}

int Worker::probe_shared(std::uint64_t source, std::uint64_t tag, std::uint64_t mask,
                         rdmx_status_t* status, rdmx_message_t** message) {
  lock_shared_side();
  const SharedSide shared(lock_);
  // The peers and their failure change only under the whole lock; the unexpected queue under it
  // and, for shared holders, match_mu_ (recv_shared and mprobes take messages out of it). A
  // message an mprobe takes is the caller's alone from then on, whatever its kind.
  const std::lock_guard<ShortLock> match(match_mu_);
  return probe(source, tag, mask, status, message);
}

int Worker::msg_recv(MsgDesc* d, void* buffer, std::size_t length, Request* r,
                     rdmx_callback_t callback, void* user_data) {
  if (d == nullptr || r == nullptr || (buffer == nullptr && length != 0) || d->queued()) {
    return RDMX_ERR_INVALID_PARAM;
  }
  init_request(r, ReqType::kRecv, callback, user_data);
  r->buffer = buffer;
  r->capacity = length;
  if (d->kind == protocol::MsgKind::kRts) {
    start_rndv_recv(r, *d->peer, d->tag, protocol::load_wire<protocol::RtsBody>(d->body.data()));
  } else {
    finish_recv(r, *d->peer, d->tag, d->kind, d->aux, d->data, d->length);
  }
  release_message(d);
  return RDMX_OK;
}

inline bool Worker::unpost_recv(Request* r) {
  return r->type == ReqType::kRecv && state_of(r) == ReqState::kActive && matcher_.cancel(r->recv);
}

int Worker::cancel(Request* r) {
  if (unpost_recv(r)) {
    complete(r, RDMX_ERR_CANCELED);
    return RDMX_OK;
  }
  return RDMX_ERR_BUSY;
}

int Worker::cancel_shared(Request* r) {
  lock_shared_side();
  const SharedSide shared(lock_);
  {
    // A receive still in the matcher is matched or failed only by exclusive holders (which the
    // shared side keeps out), and among shared holders cancelled only here: once out, it is this
    // call's to complete.
    const std::lock_guard<ShortLock> match(match_mu_);
    if (!unpost_recv(r)) {
      return RDMX_ERR_BUSY;
    }
    deactivate(r);  // the active list: match_mu_'s among shared holders
  }
  r->status.error = RDMX_ERR_CANCELED;
  complete_shared(r);
  return RDMX_OK;
}

// The channel types' receive paths (channel.h), entered through ops_.
template int Worker::poll_recv<RcChannel>(Worker&, ibv_cq*);
template int Worker::poll_recv<UdChannel>(Worker&, ibv_cq*);
template void Worker::on_recv<RcChannel>(Worker&, const ibv_wc&);
template void Worker::on_recv<UdChannel>(Worker&, const ibv_wc&);

}  // namespace rdmx::transport
