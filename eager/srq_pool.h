// A pool of registered receive buffers behind one SRQ (one size class).
//
// - One slab per pool, registered once; every buffer has a prebuilt ibv_recv_wr and ibv_sge, so
//   a refill only links the WRs of free buffers and makes ONE chained ibv_post_srq_recv.
// - The pool owns depth + spare buffers. At most `depth` are posted; the spares let the
//   transport keep a buffer whose message cannot be delivered yet (unexpected, or early in
//   sequence) without the SRQ running short: hold() takes it out of circulation and the next
//   refill posts a spare in its place. Holding is allowed only while can_hold() is true: the
//   buffers still in circulation (posted + free) must cover the full depth, so held buffers
//   never shrink the SRQ (receive credits granted against `depth` stay backed); after that the
//   caller copies out and release()s.
// - Low watermark: the SRQ limit is armed at `watermark`; IBV_EVENT_SRQ_LIMIT_REACHED (one-shot)
//   forces a refill of every free buffer and re-arms. Ordinary refills happen from progress as
//   soon as a batch of buffers is free, so the event is the safety net, not the mechanism.
// - Receives still posted when the SRQ is destroyed get no completion (ibv_destroy_srq(3)): the
//   pool accounts for them as reclaimed (posted() at destroy), so every wr_id is accounted for.
//
// Receive buffer layout: [grh_bytes (40 on UD, else 0)][32-byte header][payload capacity].
// UD buffers are payload capacity + 40 bytes and the message is read at offset 40.
//
// wr_id: kind (kSrqRecv, or kUdRecv for UD pools), thread, generation = pool generation,
// slot = pool id << kPoolShift | buffer index. Not thread-safe (one progress thread).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "protocol/wr_id.h"
#include "verbs/mr.h"
#include "verbs/pd.h"
#include "verbs/srq.h"

namespace rdmx::eager {

inline constexpr std::size_t kGrhBytes = 40;  // every UD receive starts with the GRH
inline constexpr unsigned kPoolShift = 24;    // slot = pool id << 24 | buffer index
inline constexpr std::uint32_t kMaxPoolBuffers = 1u << kPoolShift;
inline constexpr std::size_t kBufferAlign = 64;

struct PoolCounters {
  std::uint64_t posted = 0;        // receive WRs posted
  std::uint64_t consumed = 0;      // receive completions taken (success or error)
  std::uint64_t refills = 0;       // chained posts
  std::uint64_t limit_events = 0;  // IBV_EVENT_SRQ_LIMIT_REACHED handled
  std::uint64_t held = 0;          // buffers kept for unexpected / early messages
  std::uint64_t reclaimed = 0;     // WRs still posted when the SRQ was destroyed
};

class SrqPool {
 public:
  struct Params {
    std::uint8_t pool_id = 0;  // < 2^(32 - kPoolShift); routes the completion
    protocol::WrKind kind = protocol::WrKind::kSrqRecv;
    std::uint16_t thread = 0;
    std::uint16_t generation = 0;
    std::uint32_t capacity = 0;   // payload bytes after the header
    std::uint32_t grh_bytes = 0;  // 0 (RC) or kGrhBytes (UD)
    std::uint32_t depth = 0;      // posted buffers at most (the SRQ's max_wr)
    std::uint32_t spare = 0;      // extra buffers that can stand in for held ones
    std::uint32_t watermark = 0;  // srq_limit
    std::uint32_t batch = 0;      // refill batch
  };

  // Allocates and registers the slab, creates the SRQ, posts `depth` buffers and arms the limit.
  // Throws verbs::Error.
  SrqPool(const verbs::ProtectionDomain& pd, const Params& params);
  // The bytes a pool of these parameters registers (pins), before it is made.
  static std::size_t registered_bytes_for(const Params& params) noexcept;
  SrqPool(const SrqPool&) = delete;
  SrqPool& operator=(const SrqPool&) = delete;
  ~SrqPool();

  ibv_srq* srq() const noexcept { return srq_.get(); }
  verbs::SharedReceiveQueue& srq_object() noexcept { return srq_; }
  const Params& params() const noexcept { return params_; }
  std::uint32_t capacity() const noexcept { return params_.capacity; }
  std::size_t buffer_bytes() const noexcept { return stride_; }
  std::size_t registered_bytes() const noexcept { return slab_bytes_; }

  // Whether a wr_id is one of this pool's receives; *index is the buffer.
  bool owns(std::uint64_t wr_id, std::uint32_t* index) const noexcept {
    const protocol::WrId id = protocol::decode(wr_id);
    if (id.kind != params_.kind || id.generation != params_.generation ||
        (id.slot >> kPoolShift) != params_.pool_id) {
      return false;
    }
    *index = id.slot & (kMaxPoolBuffers - 1);
    return *index < total_;
  }
  static std::uint8_t pool_of(std::uint64_t wr_id) noexcept {
    return static_cast<std::uint8_t>(protocol::decode(wr_id).slot >> kPoolShift);
  }

  // The message (header) of buffer `index`, after the GRH when there is one.
  std::byte* message(std::uint32_t index) const noexcept {
    return slab_ + std::size_t{index} * stride_ + params_.grh_bytes;
  }
  std::byte* grh(std::uint32_t index) const noexcept {
    return slab_ + std::size_t{index} * stride_;
  }

  // A completion for buffer `index` was polled: the buffer is the caller's until release().
  void on_completion(std::uint32_t index) noexcept {
    --posted_now_;
    ++counters_.consumed;
    *moved_ = true;
    (void)index;
  }
  // The caller is done with a buffer: it goes back to the free stack (reposted by refill()).
  void release(std::uint32_t index) noexcept {
    free_[free_count_++] = index;
    *moved_ = true;
  }
  // The flag on_completion() and release() set: the only calls after which wants_refill() or
  // the watermark test can turn true, so an owner polling several pools looks at them only when
  // its flag is set, not on every call.
  void watch(bool* moved) noexcept { moved_ = moved; }
  // The caller keeps the buffer for now; counts it. Only when can_hold().
  void note_held() noexcept { ++counters_.held; }
  // Counts every buffer the caller has not released yet (this one, and the rest of a poll batch)
  // as out of circulation: holding never leaves fewer than `depth` buffers to post.
  bool can_hold() const noexcept { return posted_now_ + free_count_ >= params_.depth; }

  // Posts free buffers (one chained post) when at least a batch is free, or whenever the
  // posted level is at or below the watermark, or with force. Returns buffers posted, or
  // -errno when the post failed (the unposted buffers stay free).
  int refill(bool force = false) noexcept;
  // Whether refill() would post anything: inline, because progress asks on every call.
  bool wants_refill() const noexcept {
    const std::uint32_t n = postable();
    return n != 0 && (n >= params_.batch || posted_now_ <= params_.watermark);
  }
  // IBV_EVENT_SRQ_LIMIT_REACHED: refill everything free and re-arm the limit.
  int on_limit_event() noexcept;
  // The same event, counted, with the refill left to the caller (whose refill re-arms).
  void note_limit_event() noexcept;
  // Re-arms when a previous arm had to wait for the level to rise above the watermark.
  void maybe_rearm() noexcept;

  std::uint32_t posted() const noexcept { return posted_now_; }
  std::uint32_t free_count() const noexcept { return free_count_; }
  std::uint32_t total() const noexcept { return total_; }
  const PoolCounters& counters() const noexcept { return counters_; }

  // After every attached QP is destroyed: destroys the SRQ; the WRs still posted are reclaimed
  // (no completion will come for them). Returns 0 or the errno of ibv_destroy_srq.
  int destroy_srq() noexcept;

 private:
  struct SlabDeleter {
    void operator()(std::byte* p) const noexcept;
  };
  void arm() noexcept;
  // Free buffers the SRQ has room for.
  std::uint32_t postable() const noexcept {
    return std::min(free_count_, params_.depth - posted_now_);
  }

  Params params_;
  std::size_t stride_ = 0;
  std::size_t slab_bytes_ = 0;
  std::uint32_t total_ = 0;
  std::unique_ptr<std::byte, SlabDeleter> slab_owner_;
  std::byte* slab_ = nullptr;
  // Declared in creation order: the MR before the SRQ that receives into it; destroyed the
  // other way round (SRQ first, then MR).
  verbs::MemoryRegion mr_;
  verbs::SharedReceiveQueue srq_;
  std::vector<ibv_recv_wr> wrs_;
  std::vector<ibv_sge> sges_;
  std::vector<std::uint32_t> free_;
  std::uint32_t free_count_ = 0;
  std::uint32_t posted_now_ = 0;
  bool armed_ = false;
  bool moved_unwatched_ = false;
  bool* moved_ = &moved_unwatched_;
  PoolCounters counters_;
};

}  // namespace rdmx::eager
