// The send path: requests, coalescing, queues for sends that must wait, match-acks, a failed
// peer's sends. Posting is in channel/rc_send.cc (RC: credits, QPs, eager rings, watchdog) and
// channel/ud_send.cc (UD: window, resends, acks, timers). Send completions route through the wr_id
// (protocol/wr_id.h) to the descriptor, its queue and its peer.
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
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "transport/channel/rc_channel.h"
#include "transport/channel/ud_channel.h"
#include "transport/send_now.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

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

inline bool Worker::coalesce(Peer& peer, Request* r, bool queued) {
  const std::size_t capacity = peer.batch_capacity;
  if (!wants_coalesce(peer, r->status.length, r->send_flags, queued)) {
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
        if (r->state == ReqState::kQueued) {
          move_to(r, ReqState::kActive);  // its turn came (posted at once, it is active already)
        }
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
  move_to(r, ReqState::kQueued);
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
  if (peer.rc.grant_due) {
    if (!peer.rc.grant_held) {
      peer.rc.grant_held = true;  // the next progress call sends it if nothing carried it
    } else if (post_rc_ack(peer)) {
      peer.rc.grant_due = false;
    }
  }
  if (peer.rc.ring_messages_due() && !post_ring_messages(peer)) {
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
        (p.has_waiting() || p.rc.grant_due || p.rc.ring_messages_due() || p.batch.count() != 0)) {
      flush_list_[keep++] = &p;
    } else {
      p.flush_listed = false;
    }
  }
  flush_list_.resize(keep);
}

bool Worker::try_match_ack(eager::SendPool& pool, Peer& peer, std::uint32_t cookie) {
  if (peer.state == PeerState::kFailed) {
    return true;  // nobody to tell
  }
  return peer.state == PeerState::kConnected && peer.pending_match_acks.empty() &&
         post_message(pool, peer, protocol::MsgKind::kMatchAck, 0, cookie, nullptr, 0, nullptr,
                      0) == PostResult::kPosted;
}

void Worker::send_match_ack(Peer& peer, std::uint32_t cookie) {
  if (!try_match_ack(*tx_->send, peer, cookie)) {
    peer.pending_match_acks.push_back(cookie);
    list_for_flush(peer);
  }
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
  if (peer.state == PeerState::kConnected && !ud_mode_ && !peer.shm.on() &&
      rc_connected_peers_ > 0) {
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
  close_rx_ring(peer);  // it writes no more (a sleeper no longer waits for its kRingReleased)
  if (peer.ud.tx) {
    release_ud_window(peer);
  }
}

// The locks of a send under the shared side. While the shared side is held only other such
// sends, receives and probes run: nothing changes threads_ or the state that exclusive holders
// alone write (progress, wire-up, failures, the flush list). The context is the thread's own; the
// peer's send state (batch included) is post_mu's, UD's shared send state ud_post_mu_'s.
class Worker::SharedPost {
 public:
  SharedPost(Worker& w, Peer& peer) : post_(peer.post_mu), ud_(w.ud_post_mu_, std::defer_lock) {
    if (w.ud_mode_) {
      ud_.lock();
    }
  }

 private:
  const std::lock_guard<ShortLock> post_;
  std::unique_lock<ShortLock> ud_;
};

int Worker::send_shared(int ctx, Peer& peer, const SendBytes& bytes, std::uint64_t tag,
                        unsigned flags) {
  lock_shared_side();
  const SharedSide shared(lock_);
  const SharedPost post(*this, peer);
  ThreadCtx& tc = threads_[static_cast<std::size_t>(ctx)];
  const int rc = send_now(*tc.send, peer, bytes, tag, flags);
  tc.shared_sends += rc == RDMX_OK ? 1 : 0;  // refused: the caller takes the whole lock
  return rc;
}

bool Worker::post_match_ack_shared(int ctx, Peer& peer, std::uint32_t cookie) {
  // try_match_ack reads pending_match_acks and the peer's state, the exclusive holders' (never
  // written here), and posts under the peer's locks.
  const SharedPost post(*this, peer);
  return try_match_ack(*threads_[static_cast<std::size_t>(ctx)].send, peer, cookie);
}

bool Worker::send_request_shared(int ctx, Peer& peer, const void* buffer, std::size_t length,
                                 std::uint64_t tag, unsigned flags, Request* r,
                                 rdmx_callback_t callback, void* user_data) {
  lock_shared_side();
  const SharedSide shared(lock_);
  const SharedPost post(*this, peer);
  int rc = send_now(*threads_[static_cast<std::size_t>(ctx)].send, peer,
                    SendBytes{nullptr, 0, buffer, length}, tag, flags);
  if (rc == RDMX_ERR_NO_RESOURCE) {
    // A burst (a window of MPI_Isends): join the peer's batch as coalesce() would. Only one that
    // is open: opening it lists the peer for the next progress call (flush_list_, the exclusive
    // holders'), and a full one is flushed under the whole lock too.
    if (peer.state != PeerState::kConnected || peer.has_waiting() || peer.batch.count() == 0 ||
        rendezvous_size(peer, length) || !wants_coalesce(peer, length, flags, /*queued=*/false) ||
        !peer.batch.fits(length)) {
      return false;
    }
    (void)peer.batch.append(tag, buffer, length);
    rc = RDMX_OK;
  }
  const auto thread = static_cast<std::uint16_t>(ctx);
  threads_[static_cast<std::size_t>(ctx)].shared_sends += rc == RDMX_OK ? 1 : 0;
  if (callback == nullptr) {
    init_done_send(r, length, tag, flags, rc, thread);
    return true;
  }
  // Completed now, called back by the next progress call (posting calls run no callbacks).
  init_request(r, ReqType::kSend, callback, user_data, thread);
  r->status = rdmx_status_t{.error = rc, .tag = tag, .source = 0, .length = length};
  r->send_flags = static_cast<std::uint16_t>(flags);
  complete_shared(r);
  return true;
}

int Worker::tag_send_zcopy(Peer& peer, const SendBytes& bytes, std::uint32_t lkey,
                           std::uint64_t tag, Request* r, rdmx_callback_t callback,
                           void* user_data) {
  if (r == nullptr || !bytes.injectable(0) || (bytes.head == nullptr && bytes.head_length != 0) ||
      bytes.head_length > RDMX_ZCOPY_MAX_HEAD) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (ud_mode_ || peer.shm.on()) {
    // UD keeps a copy of every message for its resends; shared memory copies anyway.
    return RDMX_ERR_UNSUPPORTED;
  }
  if (peer.state == PeerState::kFailed) [[unlikely]] {
    return failed_code_ != 0 ? failed_code_ : RDMX_ERR_UNREACHABLE;
  }
  // send_now's conditions, but for coalescing: a message the caller did not copy is not packed;
  // what is packed for the peer goes first, as in start_send (in a burst of AMs from UCP, the
  // sends between two zero-copy ones are packed).
  const std::size_t length = bytes.total();
  if (rendezvous_size(peer, length) || peer.state != PeerState::kConnected || !peer.rc_ready ||
      peer.has_waiting() || (peer.batch.count() != 0 && !flush_batch(peer))) {
    return RDMX_ERR_NO_RESOURCE;
  }
  init_request(r, ReqType::kRma, callback, user_data);
  protocol::MsgHeader h = message_header(peer, protocol::MsgKind::kEager, tag, 0, length);
  const PostResult res = post_rc_gather(*tx_->send, peer, h, bytes, lkey, r);
  if (res != PostResult::kPosted) {
    move_to(r, ReqState::kIdle);
    return res == PostResult::kNoResource ? RDMX_ERR_NO_RESOURCE : RDMX_ERR_IO;
  }
  r->peer = &peer;
  r->status.length = length;
  r->status.tag = tag;
  r->status.source = peer.uid;
  activate(r);  // teardown fails it (cancel_rma), as a put
  peer.send_epoch = progress_calls_;
  ++stat_zcopy_sends_;
  return RDMX_OK;
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
  // An eager send without callback that leaves at once (the MTL's MPI_Send, UCT's am_short) is
  // done on return: the request is written once, as done, rather than initialised, posted and
  // completed: 72 instructions less per 8-byte MPI_Send (1,244 -> 1,172, bench-mpi --instr).
  if (callback == nullptr && (flags & RDMX_SEND_SYNC) == 0) [[likely]] {
    const int rc = send_now(*tx_->send, peer, SendBytes{nullptr, 0, buffer, length}, tag, flags);
    if (rc != RDMX_ERR_NO_RESOURCE) [[likely]] {
      init_done_send(r, length, tag, flags, rc, tx_->index);
      return RDMX_OK;
    }
  }
  const bool rndv = rendezvous_size(peer, length);
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
      move_to(r, ReqState::kIdle);
      return RDMX_ERR_NO_RESOURCE;
    }
    r->sync_slot = tc.sync_free.back();
    tc.sync_free.pop_back();
    SyncSlot& s = tc.sync[r->sync_slot];
    s.request = r;
    s.peer = &peer;
  }
  if (peer.state == PeerState::kConnected && !peer.has_waiting()) [[likely]] {
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
    move_to(r, ReqState::kIdle);
    return RDMX_ERR_NO_RESOURCE;
  }
  queue_send(peer, r);
  return RDMX_OK;
}

// --- completions ---------------------------------------------------------------------------

template <class Ch>
int Worker::poll_send(Worker& w, ibv_cq* cq) {
  return poll_batch(cq, [&w](const ibv_wc& wc) { w.on_send_completion<Ch>(wc); });
}

template <class Ch>
void Worker::on_send(Worker& w, const ibv_wc& wc) {
  w.on_send_completion<Ch>(wc);
}

template <class Ch>
void Worker::on_send_completion(const ibv_wc& wc) {
  if (wc.wr_id == verbs::kDrainSendWrId || wc.wr_id == verbs::kDrainRecvWrId) {
    return;
  }
  const protocol::WrId id = protocol::decode(wc.wr_id);
  if ((id.kind != protocol::WrKind::kSend && id.kind != protocol::WrKind::kSendInline &&
       id.kind != protocol::WrKind::kControl && id.kind != protocol::WrKind::kRdmaWrite &&
       id.kind != protocol::WrKind::kRdmaWriteImm && id.kind != protocol::WrKind::kRdmaRead &&
       id.kind != protocol::WrKind::kRma) ||
      id.thread >= threads_.size()) [[unlikely]] {
    std::fprintf(stderr, "rdmx: send completion with a foreign wr_id %016llx\n",
                 static_cast<unsigned long long>(wc.wr_id));
    return;
  }
  ThreadCtx& owner = threads_[id.thread];
  eager::SendPool& pool = *owner.send;
  if (id.slot >= pool.desc_count() || !pool.desc(id.slot).in_use ||
      pool.generation(id.slot) != id.generation) [[unlikely]] {
    std::fprintf(stderr, "rdmx: stale send completion (slot %u generation %u)\n", id.slot,
                 id.generation);
    return;
  }
  ++owner.routed;
  eager::SendDesc& desc = pool.desc(id.slot);
  Peer* failed = nullptr;
  Peer* write_qp_failed = nullptr;
  // A rendezvous write or read: the engine's token; a put or get: its request (0: cancelled).
  const std::uint64_t cookie = desc.cookie;
  if (wc.status != IBV_WC_SUCCESS) [[unlikely]] {
    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) {
      ++stat_rnr_exceeded_;
    }
    const bool flushed = wc.status == IBV_WC_WR_FLUSH_ERR;
    switch (Ch::send_error(*this, desc, wc)) {
      case SendErrorScope::kWriteQp:
        write_qp_failed = static_cast<Peer*>(desc.peer);
        if (!flushed && config_.verbose >= 1) {
          std::fprintf(stderr, "rdmx: RDMA write to %016llx failed: %s\n",
                       static_cast<unsigned long long>(write_qp_failed->uid),
                       ibv_wc_status_str(wc.status));
        }
        break;
      case SendErrorScope::kPeer:
        failed = static_cast<Peer*>(desc.peer);
        if (config_.verbose >= 1 || !closing_) {
          std::fprintf(stderr, "rdmx: RC send to %016llx failed: %s\n",
                       static_cast<unsigned long long>(failed->uid), ibv_wc_status_str(wc.status));
        }
        break;
      case SendErrorScope::kSharedUdQp:
        // faults.cc brings the QP back: reliability cannot ride through an error state itself.
        note_ud_qp_error(desc.queue);
        if (config_.verbose >= 1) {
          std::fprintf(stderr, "rdmx: send failed: %s\n", ibv_wc_status_str(wc.status));
        }
        break;
      case SendErrorScope::kNothing:
        break;
    }
  }
  Ch::on_send_done(static_cast<Peer*>(desc.peer));
  (void)desc.queue->complete(pool_table_, id.thread, id.slot, [](eager::SendDesc& d) {
    if (d.sequenced && d.peer != nullptr) {
      Peer* p = static_cast<Peer*>(d.peer);
      if (p->rc.guard) {
        p->rc.guard->on_complete(d.seq);
      }
    }
  });
  if (cookie != 0) {
    if (id.kind == protocol::WrKind::kRdmaRead) {
      rndv_->on_read_completion(cookie, wc.status == IBV_WC_SUCCESS);
    } else if (id.kind == protocol::WrKind::kRma) {
      on_rma_completion(reinterpret_cast<Request*>(cookie), wc);
    } else {
      rndv_->on_write_completion(cookie, wc.status == IBV_WC_SUCCESS);
    }
  }
  if (write_qp_failed != nullptr && write_qp_failed->ud.wqp_state == WriteQpState::kReady) {
    write_qp_failed->ud.wqp_sq.close();
    (void)retire_wqp(*write_qp_failed, true);
  }
  if (failed != nullptr) {
    for (auto& sq : failed->rc.sq) {
      sq.close();
    }
    // Cold path: the reason names the device's status, and what to do about an RNR failure.
    const std::string why =
        std::string("RC send failed: ") + ibv_wc_status_str(wc.status) +
        (wc.status == IBV_WC_RNR_RETRY_EXC_ERR
             ? " (the peer had no receive buffer for every retry; RDMX_RC_RNR_RETRY 7 retries "
               "for ever)"
             : "");
    fail_peer(*failed, RDMX_ERR_UNREACHABLE, why.c_str());
  }
}

// A completion polled while a QP drains (teardown, retired write QPs): the drain markers are
// the drain's own; everything else goes its normal way.
void Worker::on_drain_completion(const ibv_wc& wc) {
  if (wc.wr_id == verbs::kDrainSendWrId || wc.wr_id == verbs::kDrainRecvWrId) {
    return;
  }
  const protocol::WrKind kind = protocol::wr_kind(wc.wr_id);
  if (kind == protocol::WrKind::kSrqRecv || kind == protocol::WrKind::kUdRecv) {
    ops_.on_recv(*this, wc);
  } else {
    ops_.on_send(*this, wc);
  }
}

// The channel types' send completion paths (channel.h), entered through ops_.
template int Worker::poll_send<RcChannel>(Worker&, ibv_cq*);
template int Worker::poll_send<UdChannel>(Worker&, ibv_cq*);
template void Worker::on_send<RcChannel>(Worker&, const ibv_wc&);
template void Worker::on_send<UdChannel>(Worker&, const ibv_wc&);

}  // namespace rdmx::transport
