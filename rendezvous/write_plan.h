// How one rendezvous transfer is cut into RDMA writes and how many of them are in flight.
//
// The granted bytes [0, length) go out as count() writes of max_write bytes (the last one
// shorter): max_write is the port's max_msg_sz (8 MiB on rxe), the largest message a single
// work request may carry. The last write is an RDMA_WRITE_WITH_IMM: RC executes one QP's writes
// in order, so its completion at the receiver (the only one the receiver sees) means every byte
// before it has landed. A zero-byte grant (a zero-length receive buffer) is still one
// zero-length write-with-imm, so the receiver always completes the same way.
//
// Pipelining: up to `depth` writes are posted at once; a write is signalled every
// signal_period() writes (and always the last one), so completions come back at least twice per
// window and refill it before it runs dry, while the unsignalled writes in between are retired
// by the next signalled completion on the same QP (send completions of a QP arrive in order).
//
// Pure: no verbs calls, no allocation (plan_writes() excepted, a helper for tests and logs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmx::rendezvous {

// Writes in flight per transfer unless configured: enough to keep the wire busy while one
// completion travels back, few enough to leave most of an RC send queue (128 WRs) to eager
// traffic.
inline constexpr std::uint32_t kDefaultPipelineDepth = 4;

struct PlannedWrite {
  std::uint32_t index = 0;   // 0 .. count() - 1
  std::uint64_t offset = 0;  // into the sender's and the receiver's buffer alike
  std::uint32_t length = 0;  // <= max_write
  bool with_imm = false;     // the last write: RDMA_WRITE_WITH_IMM naming the receiver's transfer
  bool signaled = false;     // request a completion for it

  friend bool operator==(const PlannedWrite&, const PlannedWrite&) = default;
};

class WritePlan {
 public:
  WritePlan() = default;
  // max_write 0 is taken as 1, depth 0 as 1. If `length` would need more than 2^32 - 1 writes,
  // max_write is raised until it does not (a write index must fit the 32 bits it travels in).
  WritePlan(std::uint64_t length, std::uint32_t max_write, std::uint32_t depth) noexcept;

  std::uint64_t length() const noexcept { return length_; }
  std::uint64_t max_write() const noexcept { return max_write_; }
  std::uint32_t depth() const noexcept { return depth_; }
  std::uint32_t count() const noexcept { return count_; }
  // Writes between two signalled ones: max(1, depth / 2).
  std::uint32_t signal_period() const noexcept { return signal_period_; }

  // Precondition: index < count().
  PlannedWrite at(std::uint32_t index) const noexcept;

 private:
  std::uint64_t length_ = 0;
  std::uint64_t max_write_ = 1;
  std::uint32_t depth_ = 1;
  std::uint32_t count_ = 1;
  std::uint32_t signal_period_ = 1;
};

// The whole plan as a list (tests, logs). The engine walks a WritePipeline instead.
std::vector<PlannedWrite> plan_writes(std::uint64_t length, std::uint32_t max_write,
                                      std::uint32_t depth);

// Progress of one transfer through its plan: which write is next, how many are in flight.
//
//   acked         posted
//     v             v
//   [done ... done | in flight (<= depth) | not posted yet ...]
class WritePipeline {
 public:
  WritePipeline() = default;
  explicit WritePipeline(const WritePlan& plan) noexcept : plan_(plan) {}

  const WritePlan& plan() const noexcept { return plan_; }
  std::uint32_t posted() const noexcept { return posted_; }
  std::uint32_t acked() const noexcept { return acked_; }
  std::uint32_t in_flight() const noexcept { return posted_ - acked_; }
  bool all_posted() const noexcept { return posted_ == plan_.count(); }
  bool done() const noexcept { return acked_ == plan_.count(); }
  // Bytes of the writes known to be complete.
  std::uint64_t acked_bytes() const noexcept;

  // True when the next write may be posted now (one is left and the window has room).
  bool can_post() const noexcept { return !all_posted() && in_flight() < plan_.depth(); }
  // Precondition: !all_posted().
  PlannedWrite next() const noexcept { return plan_.at(posted_); }
  void on_posted() noexcept { ++posted_; }

  // A completion (successful or not) of write `index`: it and every write posted before it on
  // the QP are finished. Returns false for an index that was never posted (ignored); a stale
  // index (already covered by a later completion) is accepted and changes nothing.
  bool on_completion(std::uint32_t index) noexcept;

 private:
  WritePlan plan_;
  std::uint32_t posted_ = 0;
  std::uint32_t acked_ = 0;
};

}  // namespace rdmx::rendezvous
