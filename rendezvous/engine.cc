#include "rendezvous/engine.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "rdmx/rdmx.h"

namespace rdmx::rendezvous {

// --- transfers and their tables -------------------------------------------------------------

struct Engine::Send {
  SendState state = SendState::kFree;
  std::uint16_t generation = 1;
  std::uint32_t slot = 0;
  bool listed = false;      // on pending_ (waits for resources)
  bool copy_any = false;    // copy path: a fragment went out (a zero-byte grant still sends one)
  bool await_read = false;  // the receiver reads [0, cts.offset) itself (kCtsFlagRead) ...
  bool read_done = false;   // ... and said it is done (FIN with kFinFlagReadDone)
  int fail_code = 0;        // kDraining: the code the request completes with
  PeerIndex peer = 0;
  void* request = nullptr;
  const std::byte* buffer = nullptr;
  std::uint64_t length = 0;  // the message
  // min(length, end of the CTS grant); the writes cover [cts.offset, granted)
  std::uint64_t granted = 0;
  std::uint64_t copy_offset = 0;
  protocol::CtsBody cts{};
  WritePipeline pipe;
  Registration reg;  // the source buffer (empty: not registered, copy path)

  std::uint32_t word() const noexcept { return encode_transfer({slot, generation}); }
};

struct Engine::Recv {
  RecvState state = RecvState::kFree;
  std::uint16_t generation = 1;
  std::uint32_t slot = 0;
  bool listed = false;
  bool copy = false;      // the CTS asked for the copy path
  bool imm_seen = false;  // the sender's writes are in; the read share may still be coming
  int fail_code = 0;      // kDraining: the code the request completes with
  PeerIndex peer = 0;
  void* request = nullptr;
  std::byte* buffer = nullptr;
  std::uint64_t capacity = 0;
  std::uint64_t length = 0;    // the message, as sent
  std::uint64_t granted = 0;   // min(capacity, length)
  std::uint64_t received = 0;  // copy path
  std::uint32_t sender = 0;    // the sender's transfer word
  Registration reg;            // the receive buffer (empty: copy path or nothing granted)
  // Read share: [0, read_length) read from the sender's buffer (source, rkey), in reads planned
  // like writes (max_write each, pipeline_depth in flight). read_length 0: none.
  std::uint64_t read_length = 0;
  std::uint64_t source = 0;
  std::uint32_t source_rkey = 0;
  WritePipeline reads;

  std::uint32_t word() const noexcept { return encode_transfer({slot, generation}); }
};

// Slots in chunks (stable addresses, growth on the slow path only), a free list, and a
// generation per slot so that a word naming a freed slot is recognised as stale.
template <class T>
class Engine::Table {
 public:
  T* alloc() {
    if (free_.empty()) {
      if (count_ >= kMaxTransferSlots) {
        return nullptr;
      }
      auto chunk = std::make_unique<T[]>(kChunk);
      for (std::uint32_t i = 0; i < kChunk; ++i) {
        chunk[i].slot = count_ + i;
      }
      for (std::uint32_t i = kChunk; i > 0; --i) {
        free_.push_back(count_ + i - 1);
      }
      chunks_.push_back(std::move(chunk));
      count_ += kChunk;
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    ++live_;
    return &at(slot);
  }

  // The live transfer `word` names, or nullptr (free slot, old generation, out of range).
  T* find(std::uint32_t word) noexcept {
    if (!is_valid_transfer(word)) {
      return nullptr;
    }
    const TransferId id = decode_transfer(word);
    if (id.slot >= count_) {
      return nullptr;
    }
    T& t = at(id.slot);
    if (t.generation != id.generation || t.state == decltype(t.state)::kFree) {
      return nullptr;
    }
    return &t;
  }

  // Precondition: t's state is already kFree.
  void release(T& t) {
    t.generation = next_transfer_generation(t.generation);
    t.listed = false;
    t.request = nullptr;
    free_.push_back(t.slot);
    --live_;
  }

  template <class F>
  void for_each_live(F&& f) {
    for (std::uint32_t s = 0; s < count_; ++s) {
      T& t = at(s);
      if (t.state != decltype(t.state)::kFree) {
        f(t);
      }
    }
  }

  std::uint32_t live() const noexcept { return live_; }

 private:
  static constexpr std::uint32_t kChunk = 64;
  static_assert(kMaxTransferSlots % kChunk == 0);

  T& at(std::uint32_t slot) noexcept { return chunks_[slot / kChunk][slot % kChunk]; }

  std::vector<std::unique_ptr<T[]>> chunks_;
  std::vector<std::uint32_t> free_;
  std::uint32_t count_ = 0;
  std::uint32_t live_ = 0;
};

// --- engine -----------------------------------------------------------------------------------

Engine::Engine(Transport& transport, RegCache& cache, const EngineConfig& config)
    : transport_(transport),
      cache_(cache),
      config_(config),
      sends_(std::make_unique<Table<Send>>()),
      recvs_(std::make_unique<Table<Recv>>()) {
  config_.max_write = std::max<std::uint32_t>(config_.max_write, 1);
  config_.pipeline_depth = std::max<std::uint32_t>(config_.pipeline_depth, 1);
}

Engine::~Engine() {
  release_all();
}

void Engine::log_line(const char* fmt, ...) const {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (n > 0) {
    config_.log.write(std::string_view(
        line, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(line) - 1)));
  }
}

bool Engine::registered(int error, const char* side) {
  if (error == 0) {
    return true;
  }
  ++stats_.reg_failures;
  if (config_.log.verbose >= 1) {
    log_line("rendezvous: %s buffer not registered (%s): copy path", side,
             cache_.last_error().c_str());
  }
  return false;
}

void Engine::note_active(PeerIndex peer, int delta) {
  if (peer >= active_by_peer_.size()) {
    active_by_peer_.resize(std::size_t{peer} + 1, 0);
  }
  active_by_peer_[peer] =
      static_cast<std::uint32_t>(static_cast<int>(active_by_peer_[peer]) + delta);
}

std::uint32_t Engine::active_with(PeerIndex peer) const noexcept {
  return peer < active_by_peer_.size() ? active_by_peer_[peer] : 0;
}

void Engine::list_send(Send& t) {
  if (!t.listed) {
    t.listed = true;
    pending_.emplace_back(true, t.word());
  }
}

void Engine::list_recv(Recv& t) {
  if (!t.listed) {
    t.listed = true;
    pending_.emplace_back(false, t.word());
  }
}

void Engine::queue_fin(PeerIndex peer, const protocol::FinBody& fin) {
  if (fins_.empty() && transport_.post_fin(peer, fin) != PostResult::kNoResource) {
    return;  // posted, or the peer cannot be reached (nothing to tell then)
  }
  fins_.emplace_back(peer, fin);
}

// --- sender -----------------------------------------------------------------------------------

std::uint32_t Engine::begin_send(PeerIndex peer, void* request, const void* buffer,
                                 std::uint64_t length, protocol::RtsBody* rts) {
  Send* t = sends_->alloc();
  if (t == nullptr) {
    return kNoTransfer;
  }
  (void)transition(t->state, SendState::kWaitCts, t->word(), peer, config_.log);
  t->peer = peer;
  t->request = request;
  t->buffer = static_cast<const std::byte*>(buffer);
  t->length = length;
  t->granted = 0;
  t->copy_offset = 0;
  t->copy_any = false;
  t->await_read = false;
  t->read_done = false;
  t->fail_code = 0;
  t->cts = {};
  t->pipe = {};
  if (length != 0) {
    // The source of an RDMA write needs no access rights (local read), that of the receiver's
    // reads REMOTE_READ: read-only pages (a const buffer) register fine either way. Registered
    // now, so that it overlaps the RTS/CTS round trip.
    const int access = config_.read_percent != 0 ? IBV_ACCESS_REMOTE_READ : 0;
    (void)registered(cache_.try_acquire(buffer, length, access, t->reg), "send");
  }
  ++stats_.sends;
  ++stats_.send_active;
  note_active(peer, +1);
  const bool readable = t->reg && config_.read_percent != 0;
  *rts = protocol::RtsBody{.total_length = length,
                           .sender_slot = t->word(),
                           .rkey = readable ? t->reg.rkey() : 0,
                           .addr = readable ? reinterpret_cast<std::uintptr_t>(buffer) : 0};
  return t->word();
}

void Engine::abort_send(std::uint32_t sender) {
  Send* t = sends_->find(sender);
  if (t == nullptr || t->state != SendState::kWaitCts) {
    return;
  }
  --stats_.sends;
  release_send(*t);
}

void Engine::on_cts(PeerIndex peer, const protocol::CtsBody& cts) {
  Send* t = sends_->find(cts.sender_slot);
  if (t == nullptr || t->peer != peer) {
    ++stats_.stale;
    if (config_.log.verbose >= 1) {
      log_line("rendezvous: CTS from peer %u for no live send (%08x): FIN", peer, cts.sender_slot);
    }
    // The receiver waits for data that will not come: fail it.
    queue_fin(peer, protocol::FinBody{.sender_slot = cts.sender_slot,
                                      .receiver_slot = cts.receiver_slot,
                                      .status = RDMX_ERR_CANCELED,
                                      .flags = 0});
    return;
  }
  if (t->state != SendState::kWaitCts) {
    ++stats_.stale;
    log_line("rendezvous: second CTS for send %08x in state %s ignored", t->word(),
             to_string(t->state).data());
    return;
  }
  t->cts = cts;
  // A read share: the receiver reads [0, offset) from our registered buffer, we write the rest
  // (at least one byte, whose write-with-imm completes the receiver). Without one: offset 0.
  const bool read = (cts.flags & protocol::kCtsFlagRead) != 0;
  const bool bad_read =
      read && ((cts.flags & protocol::kCtsFlagCopy) != 0 || !t->reg || cts.offset == 0 ||
               cts.offset >= t->length || cts.granted_length == 0);
  if ((cts.flags & ~protocol::kCtsKnownFlags) != 0 || bad_read || (!read && cts.offset != 0)) {
    log_line("rendezvous: CTS for send %08x with flags %x and offset %llu breaks the protocol",
             t->word(), cts.flags, static_cast<unsigned long long>(cts.offset));
    fail_send(*t, RDMX_ERR_IO, true);
    return;
  }
  t->await_read = read;
  t->granted = cts.offset + std::min(cts.granted_length, t->length - cts.offset);
  start_data(*t);
}

void Engine::start_data(Send& t) {
  if ((t.cts.flags & protocol::kCtsFlagCopy) != 0) {
    start_copy(t, "the receive buffer is not registered");
    return;
  }
  if (!t.reg && t.granted != 0) {
    start_copy(t, "the send buffer is not registered");
    return;
  }
  const WriteConnection c = transport_.write_connection(t.peer);
  if (t.await_read && c != WriteConnection::kReady) {
    // The receiver reads its share now: no copy path can complete this transfer.
    fail_send(t, RDMX_ERR_IO, true);
    return;
  }
  switch (c) {
    case WriteConnection::kReady:
      start_writes(t);
      return;
    case WriteConnection::kConnecting:
      (void)transition(t.state, SendState::kWaitConnection, t.word(), t.peer, config_.log);
      return;
    case WriteConnection::kUnavailable:
      start_copy(t, "no RC connection for RDMA writes");
      return;
  }
}

void Engine::on_connection_ready(PeerIndex peer) {
  sends_->for_each_live([&](Send& t) {
    if (t.peer == peer && t.state == SendState::kWaitConnection) {
      start_writes(t);
    }
  });
}

void Engine::on_connection_failed(PeerIndex peer) {
  sends_->for_each_live([&](Send& t) {
    if (t.peer == peer && t.state == SendState::kWaitConnection) {
      start_copy(t, "the RC connection could not be made");
    }
  });
}

void Engine::start_writes(Send& t) {
  if (!transition(t.state, SendState::kWriting, t.word(), t.peer, config_.log)) {
    return;
  }
  t.pipe =
      WritePipeline(WritePlan(t.granted - t.cts.offset, config_.max_write, config_.pipeline_depth));
  pump_writes(t);
}

void Engine::pump_writes(Send& t) {
  while (t.state == SendState::kWriting && t.pipe.can_post()) {
    const PlannedWrite w = t.pipe.next();
    const WriteRequest req{
        .token = write_token(t.word(), w.index),
        .local_addr = t.buffer + t.cts.offset + w.offset,
        .lkey = t.reg ? t.reg.lkey() : 0,
        .length = w.length,
        .remote_addr = t.cts.remote_addr + w.offset,
        .rkey = t.cts.rkey,
        .with_imm = w.with_imm,
        .imm = t.cts.receiver_slot,
        .signaled = w.signaled,
    };
    if (!sent(t, transport_.post_write(t.peer, req))) {
      return;
    }
    t.pipe.on_posted();
    ++stats_.writes;
  }
}

bool Engine::sent(Send& t, PostResult r) {
  switch (r) {
    case PostResult::kPosted:
      return true;
    case PostResult::kNoResource:
      list_send(t);
      return false;
    case PostResult::kFailed:
      fail_send(t, RDMX_ERR_IO, true);
      return false;
  }
  return false;
}

void Engine::on_write_completion(std::uint64_t token, bool ok) {
  Send* t = sends_->find(static_cast<std::uint32_t>(token >> 32));
  if (t == nullptr || (t->state != SendState::kWriting && t->state != SendState::kDraining) ||
      !t->pipe.on_completion(static_cast<std::uint32_t>(token))) {
    ++stats_.stale;
    return;
  }
  if (t->state == SendState::kDraining) {
    if (t->pipe.in_flight() == 0) {
      finish_send(*t, t->fail_code);
    }
    return;
  }
  if (!ok) {
    fail_send(*t, RDMX_ERR_IO, true);
    return;
  }
  if (t->pipe.done()) {
    finish_send_if_read(*t);
    return;
  }
  pump_writes(*t);
}

void Engine::finish_send_if_read(Send& t) {
  // With a read share the receiver's FIN says when it has read its part of our buffer.
  if (!t.await_read || t.read_done) {
    stats_.zero_copy_bytes += t.granted;
    finish_send(t, RDMX_OK);
  }
}

void Engine::start_copy(Send& t, const char* why) {
  if (!transition(t.state, SendState::kCopying, t.word(), t.peer, config_.log)) {
    return;
  }
  ++stats_.copy_sends;
  if (config_.log.verbose >= 1) {
    log_line("rendezvous: send %08x of %llu bytes to peer %u by copy: %s", t.word(),
             static_cast<unsigned long long>(t.length), t.peer, why);
  }
  pump_copy(t);
}

void Engine::pump_copy(Send& t) {
  const std::size_t cap = std::max<std::size_t>(transport_.fragment_capacity(t.peer), 1);
  while (t.state == SendState::kCopying && (t.copy_offset < t.granted || !t.copy_any)) {
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(cap, t.granted - t.copy_offset));
    const protocol::DataBody body{
        .offset = t.copy_offset, .receiver_slot = t.cts.receiver_slot, .reserved = 0};
    if (!sent(t, transport_.post_fragment(t.peer, body, t.buffer + t.copy_offset, n))) {
      return;
    }
    t.copy_offset += n;
    t.copy_any = true;
    stats_.copied_bytes += n;
  }
  if (t.state == SendState::kCopying) {
    finish_send(t, RDMX_OK);  // every byte is copied out: the user's buffer is free again
  }
}

void Engine::fail_send(Send& t, int code, bool tell_receiver) {
  const bool granted = t.state == SendState::kWaitConnection || t.state == SendState::kWriting ||
                       t.state == SendState::kCopying;
  if (tell_receiver && granted) {
    queue_fin(t.peer, protocol::FinBody{.sender_slot = t.word(),
                                        .receiver_slot = t.cts.receiver_slot,
                                        .status = code,
                                        .flags = 0});
  }
  if (t.state == SendState::kWriting && t.pipe.in_flight() != 0) {
    // The device may still read the buffer: keep the registration and the request until every
    // posted write has come back (flushed or not).
    t.fail_code = code;
    (void)transition(t.state, SendState::kDraining, t.word(), t.peer, config_.log);
    return;
  }
  if (t.state == SendState::kDraining) {
    return;
  }
  finish_send(t, code);
}

void Engine::finish_send(Send& t, int code) {
  if (!transition(t.state, code == RDMX_OK ? SendState::kDone : SendState::kFailed, t.word(),
                  t.peer, config_.log)) {
    return;
  }
  if (code != RDMX_OK) {
    ++stats_.failed;
  }
  if (t.request != nullptr) {
    void* request = t.request;
    t.request = nullptr;
    transport_.complete_send(request, code);
  }
  release_send(t);
}

void Engine::release_send(Send& t) {
  t.reg.reset();
  --stats_.send_active;
  note_active(t.peer, -1);
  (void)transition(t.state, SendState::kFree, t.word(), t.peer, config_.log);
  sends_->release(t);
}

// --- receiver ---------------------------------------------------------------------------------

void Engine::on_rts_matched(PeerIndex peer, void* request, void* buffer, std::size_t capacity,
                            const protocol::RtsBody& rts) {
  Recv* t = recvs_->alloc();
  if (t == nullptr) {
    ++stats_.failed;
    transport_.complete_recv(request, RDMX_ERR_NO_RESOURCE, rts.total_length);
    queue_fin(peer, protocol::FinBody{.sender_slot = rts.sender_slot,
                                      .receiver_slot = kNoTransfer,
                                      .status = RDMX_ERR_NO_RESOURCE,
                                      .flags = protocol::kFinFlagToSender});
    return;
  }
  t->peer = peer;
  t->request = request;
  t->buffer = static_cast<std::byte*>(buffer);
  t->capacity = capacity;
  t->length = rts.total_length;
  t->granted = std::min<std::uint64_t>(capacity, rts.total_length);
  t->received = 0;
  t->sender = rts.sender_slot;
  t->imm_seen = false;
  t->fail_code = 0;
  // LOCAL_WRITE | REMOTE_WRITE may be refused (pinning limit, read-only or unmapped memory).
  t->copy =
      t->granted != 0 && !registered(cache_.try_acquire(buffer, t->granted, t->reg), "receive");
  // The read share: a multiple of 64 bytes, leaving the sender at least one byte to write.
  t->read_length = 0;
  t->reads = {};
  if (config_.read_percent != 0 && rts.rkey != 0 && !t->copy && t->reg &&
      t->granted >= config_.min_read_split) {
    t->read_length =
        (t->granted / 100 * std::min<std::uint32_t>(config_.read_percent, 99)) & ~std::uint64_t{63};
    t->source = rts.addr;
    t->source_rkey = rts.rkey;
    t->reads = WritePipeline(WritePlan(t->read_length, config_.max_write, config_.pipeline_depth));
  }
  ++stats_.recvs;
  ++stats_.recv_active;
  note_active(peer, +1);
  (void)post_cts(*t);
}

bool Engine::post_cts(Recv& t) {
  const protocol::CtsBody cts{
      .remote_addr =
          t.copy || !t.reg ? 0 : reinterpret_cast<std::uintptr_t>(t.buffer + t.read_length),
      .offset = t.read_length,
      .granted_length = t.granted - t.read_length,
      .rkey = t.copy || !t.reg ? 0 : t.reg.rkey(),
      .sender_slot = t.sender,
      .receiver_slot = t.word(),
      .flags = t.copy               ? protocol::kCtsFlagCopy
               : t.read_length != 0 ? protocol::kCtsFlagRead
                                    : 0,
  };
  switch (transport_.post_cts(t.peer, cts)) {
    case PostResult::kPosted:
      (void)transition(t.state, RecvState::kWaitData, t.word(), t.peer, config_.log);
      pump_reads(t);  // after the CTS: the sender's writes and our reads go at once
      return true;
    case PostResult::kNoResource:
      if (t.state == RecvState::kFree) {
        (void)transition(t.state, RecvState::kCtsPending, t.word(), t.peer, config_.log);
      }
      list_recv(t);
      return false;
    case PostResult::kFailed:
      break;
  }
  if (t.state == RecvState::kFree) {
    (void)transition(t.state, RecvState::kCtsPending, t.word(), t.peer, config_.log);
  }
  fail_recv(t, RDMX_ERR_IO, false);
  return false;
}

void Engine::pump_reads(Recv& t) {
  while (t.read_length != 0 && t.state == RecvState::kWaitData && t.reads.can_post()) {
    const PlannedWrite r = t.reads.next();
    const ReadRequest req{
        .token = write_token(t.word(), r.index),
        .local_addr = t.buffer + r.offset,
        .lkey = t.reg.lkey(),
        .length = r.length,
        .remote_addr = t.source + r.offset,
        .rkey = t.source_rkey,
        .signaled = r.signaled,
    };
    switch (transport_.post_read(t.peer, req)) {
      case PostResult::kPosted:
        t.reads.on_posted();
        ++stats_.reads;
        break;
      case PostResult::kNoResource:
        list_recv(t);
        return;
      case PostResult::kFailed:
        fail_recv(t, RDMX_ERR_IO, true);
        return;
    }
  }
}

void Engine::on_read_completion(std::uint64_t token, bool ok) {
  Recv* t = recvs_->find(static_cast<std::uint32_t>(token >> 32));
  if (t == nullptr || (t->state != RecvState::kWaitData && t->state != RecvState::kDraining) ||
      t->read_length == 0 || !t->reads.on_completion(static_cast<std::uint32_t>(token))) {
    ++stats_.stale;
    return;
  }
  if (t->state == RecvState::kDraining) {
    if (t->reads.in_flight() == 0) {
      finish_recv(*t, t->fail_code);
    }
    return;
  }
  if (!ok) {
    fail_recv(*t, RDMX_ERR_IO, true);
    return;
  }
  if (t->reads.done()) {
    reads_done(*t);
    return;
  }
  pump_reads(*t);
}

void Engine::reads_done(Recv& t) {
  // The sender may complete (its buffer is no longer read) once its own writes are done too.
  stats_.read_bytes += t.read_length;
  queue_fin(t.peer,
            protocol::FinBody{.sender_slot = t.sender,
                              .receiver_slot = t.word(),
                              .status = RDMX_OK,
                              .flags = protocol::kFinFlagToSender | protocol::kFinFlagReadDone});
  if (t.imm_seen) {
    finish_recv(t, t.length > t.capacity ? RDMX_ERR_TRUNCATED : RDMX_OK);
  }
}

void Engine::on_imm(std::uint32_t imm) {
  Recv* t = recvs_->find(imm);
  if (t == nullptr || t->state != RecvState::kWaitData || t->imm_seen) {
    ++stats_.stale;
    log_line("rendezvous: write-with-imm %08x for no receive waiting for data", imm);
    return;
  }
  if (t->read_length != 0 && !t->reads.done()) {
    t->imm_seen = true;  // our reads complete it (reads_done)
    return;
  }
  finish_recv(*t, t->length > t->capacity ? RDMX_ERR_TRUNCATED : RDMX_OK);
}

void Engine::on_fragment(PeerIndex peer, const protocol::DataBody& body, const void* data,
                         std::size_t length) {
  Recv* t = recvs_->find(body.receiver_slot);
  if (t == nullptr || t->peer != peer ||
      (t->state != RecvState::kWaitData && t->state != RecvState::kCopying)) {
    ++stats_.stale;
    return;
  }
  if (body.offset > t->granted || length > t->granted - body.offset) {
    log_line("rendezvous: fragment [%llu, +%zu) outside the %llu granted bytes of %08x",
             static_cast<unsigned long long>(body.offset), length,
             static_cast<unsigned long long>(t->granted), t->word());
    fail_recv(*t, RDMX_ERR_IO, true);
    return;
  }
  if (length != 0) {
    std::memcpy(t->buffer + body.offset, data, length);
  }
  t->received += length;
  if (t->received >= t->granted) {
    finish_recv(*t, t->length > t->capacity ? RDMX_ERR_TRUNCATED : RDMX_OK);
  } else if (t->state == RecvState::kWaitData) {
    (void)transition(t->state, RecvState::kCopying, t->word(), t->peer, config_.log);
  }
}

void Engine::fail_recv(Recv& t, int code, bool tell_sender) {
  if (t.state == RecvState::kDraining) {
    return;
  }
  if (tell_sender) {
    queue_fin(t.peer, protocol::FinBody{.sender_slot = t.sender,
                                        .receiver_slot = t.word(),
                                        .status = code,
                                        .flags = protocol::kFinFlagToSender});
  }
  if (t.state == RecvState::kWaitData && t.reads.in_flight() != 0) {
    // The device may still write into the buffer: keep the registration and the request until
    // every posted read has come back (flushed or not).
    t.fail_code = code;
    (void)transition(t.state, RecvState::kDraining, t.word(), t.peer, config_.log);
    return;
  }
  finish_recv(t, code);
}

void Engine::finish_recv(Recv& t, int code) {
  const bool ok = code == RDMX_OK || code == RDMX_ERR_TRUNCATED;
  if (!transition(t.state, ok ? RecvState::kDone : RecvState::kFailed, t.word(), t.peer,
                  config_.log)) {
    return;
  }
  if (code == RDMX_ERR_TRUNCATED) {
    ++stats_.truncated;
  } else if (!ok) {
    ++stats_.failed;
  }
  if (t.request != nullptr) {
    void* request = t.request;
    t.request = nullptr;
    transport_.complete_recv(request, code, t.length);
  }
  t.reg.reset();
  --stats_.recv_active;
  note_active(t.peer, -1);
  (void)transition(t.state, RecvState::kFree, t.word(), t.peer, config_.log);
  recvs_->release(t);
}

// --- both sides -------------------------------------------------------------------------------

void Engine::on_fin(PeerIndex peer, const protocol::FinBody& fin) {
  const int code = fin.status < 0 ? fin.status : RDMX_ERR_IO;
  if ((fin.flags & protocol::kFinFlagToSender) != 0) {
    Send* t = sends_->find(fin.sender_slot);
    if (t == nullptr || t->peer != peer) {
      ++stats_.stale;
      return;
    }
    if ((fin.flags & protocol::kFinFlagReadDone) != 0 && fin.status == RDMX_OK) {
      if (t->state != SendState::kWriting || !t->await_read || t->read_done) {
        ++stats_.stale;
        return;
      }
      t->read_done = true;
      if (t->pipe.done()) {
        finish_send_if_read(*t);
      }
      return;
    }
    fail_send(*t, code, false);
    return;
  }
  Recv* t = recvs_->find(fin.receiver_slot);
  if (t == nullptr || t->peer != peer) {
    ++stats_.stale;
    return;
  }
  fail_recv(*t, code, false);
}

void Engine::on_peer_failed(PeerIndex peer, int code) {
  if (active_with(peer) == 0) {
    return;
  }
  sends_->for_each_live([&](Send& t) {
    if (t.peer == peer) {
      fail_send(t, code, false);
    }
  });
  recvs_->for_each_live([&](Recv& t) {
    if (t.peer == peer) {
      fail_recv(t, code, false);
    }
  });
  std::erase_if(fins_, [&](const auto& f) { return f.first == peer; });
}

int Engine::progress() {
  int work = 0;
  if (!pending_.empty()) {
    std::vector<std::pair<bool, std::uint32_t>> list;
    list.swap(pending_);
    for (const auto& [is_send, word] : list) {
      if (is_send) {
        Send* t = sends_->find(word);
        if (t == nullptr || !t->listed) {
          continue;
        }
        t->listed = false;
        ++work;
        if (t->state == SendState::kWriting) {
          pump_writes(*t);
        } else if (t->state == SendState::kCopying) {
          pump_copy(*t);
        }
      } else {
        Recv* t = recvs_->find(word);
        if (t == nullptr || !t->listed) {
          continue;
        }
        t->listed = false;
        ++work;
        if (t->state == RecvState::kCtsPending) {
          (void)post_cts(*t);
        } else if (t->state == RecvState::kWaitData) {
          pump_reads(*t);
        }
      }
    }
    // Keep the capacity for the next round.
    if (pending_.empty()) {
      list.clear();
      pending_.swap(list);
    }
  }
  std::size_t done = 0;
  for (; done < fins_.size(); ++done) {
    if (transport_.post_fin(fins_[done].first, fins_[done].second) == PostResult::kNoResource) {
      break;
    }
    ++work;
  }
  fins_.erase(fins_.begin(), fins_.begin() + static_cast<std::ptrdiff_t>(done));
  return work;
}

void Engine::cancel_all(int code) {
  sends_->for_each_live([&](Send& t) {
    if (t.request != nullptr) {
      void* request = t.request;
      t.request = nullptr;
      transport_.complete_send(request, code);
    }
    fail_send(t, code, false);
  });
  recvs_->for_each_live([&](Recv& t) {
    if (t.request != nullptr) {
      void* request = t.request;
      t.request = nullptr;
      transport_.complete_recv(request, code, t.length);
    }
    fail_recv(t, code, false);  // reads in flight: the registration stays until release_all()
  });
  pending_.clear();
  fins_.clear();
}

void Engine::release_all() noexcept {
  sends_->for_each_live([&](Send& t) {
    t.request = nullptr;
    if (t.state == SendState::kDraining || t.state == SendState::kWriting) {
      t.fail_code = t.fail_code != 0 ? t.fail_code : RDMX_ERR_CANCELED;
      if (t.state == SendState::kWriting) {
        (void)transition(t.state, SendState::kDraining, t.word(), t.peer, config_.log);
      }
      finish_send(t, t.fail_code);
    } else {
      finish_send(t, RDMX_ERR_CANCELED);
    }
  });
  recvs_->for_each_live([&](Recv& t) {
    t.request = nullptr;
    finish_recv(t, RDMX_ERR_CANCELED);
  });
  pending_.clear();
  fins_.clear();
}

}  // namespace rdmx::rendezvous
