// Per-peer in-order delivery (MPI non-overtaking).
//
// Every sequenced message (wire.h: is_sequenced) from one peer carries the next per-peer Seq.
// Messages can still arrive out of order: over RC a peer has one QP per size class and the two
// QPs are not ordered with respect to each other; over UD packets are lost and retransmitted.
// The receiver feeds every arrival to the peer's Sequencer, which says:
//   kDeliver     this is the next message: process it now, then drain pop_ready();
//   kHeld        early arrival, stored: the caller keeps its receive buffer until pop_ready()
//                hands the cookie back (or copies the message out and stores that instead);
//   kDuplicate   already delivered or already held (a UD retransmission): drop it and ack now;
//   kOutOfWindow too far ahead to hold: drop it (UD: the sender retransmits later; RC: the
//                sender broke its window, a protocol error).
// The cookie is the caller's 64-bit handle for the held message (a wr_id, buffer index or
// descriptor pointer), so the sequencer never touches payloads.
//
// The window must cover the sender's maximum distance ahead of the receiver: over UD the send
// window (reliability.h) must be <= this window; over RC the sender must bound how many
// sequenced messages it posts beyond the last one it knows was placed.
//
// Memory: one fixed ring sized at construction, no allocation per message. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "protocol/serial.h"

namespace rdmx::protocol {

enum class Arrival : std::uint8_t { kDeliver, kHeld, kDuplicate, kOutOfWindow };

class Sequencer {
 public:
  // window: a power of two in [1, kMaxSeqWindow]; first: the first Seq the peer will send.
  explicit Sequencer(std::size_t window, Seq first = 0);

  [[nodiscard]] Arrival on_arrival(Seq seq, std::uint64_t cookie) noexcept;

  // After kDeliver (and after each message it returns): the next held message that is now in
  // order, or nullopt when the next one has not arrived.
  [[nodiscard]] std::optional<std::uint64_t> pop_ready() noexcept;

  // The Seq the next delivered message must carry.
  Seq expected() const noexcept { return expected_; }
  // Cumulative ack to report: every Seq up to and including this one has been delivered.
  // Conservative until pop_ready() has been drained.
  Seq cumulative_ack() const noexcept { return static_cast<Seq>(expected_ - 1); }

  std::size_t held() const noexcept { return held_; }
  std::size_t window() const noexcept { return ring_.size(); }

  // Teardown: hands every held cookie to fn(Seq, cookie) in Seq order and forgets them, so the
  // caller can return their buffers.
  template <class F>
  void drain_held(F&& fn) {
    for (std::size_t i = 1; i < ring_.size() && held_ > 0; ++i) {
      const Seq seq = seq_add(expected_, i);
      Slot& slot = ring_[index(seq)];
      if (slot.full) {
        slot.full = false;
        --held_;
        fn(seq, slot.cookie);
      }
    }
  }

  // Restarts at `first` (e.g. after reconnecting). Precondition: held() == 0 (drain first).
  void reset(Seq first) noexcept { expected_ = first; }

 private:
  struct Slot {
    std::uint64_t cookie = 0;
    bool full = false;
  };

  std::size_t index(Seq seq) const noexcept { return seq & mask_; }

  std::vector<Slot> ring_;
  std::size_t mask_;
  std::size_t held_ = 0;
  Seq expected_;
};

// Inline: every received message passes through both.
inline Arrival Sequencer::on_arrival(Seq seq, std::uint64_t cookie) noexcept {
  const std::int32_t ahead = seq_diff(seq, expected_);
  if (ahead < 0) {
    return Arrival::kDuplicate;
  }
  if (static_cast<std::size_t>(ahead) >= ring_.size()) {
    return Arrival::kOutOfWindow;
  }
  // Within the window each Seq has its own slot, so a full slot means this very Seq is held.
  Slot& slot = ring_[index(seq)];
  if (slot.full) {
    return Arrival::kDuplicate;
  }
  if (ahead == 0) {
    expected_ = seq_add(expected_, 1);
    return Arrival::kDeliver;
  }
  slot.cookie = cookie;
  slot.full = true;
  ++held_;
  return Arrival::kHeld;
}

inline std::optional<std::uint64_t> Sequencer::pop_ready() noexcept {
  if (held_ == 0) {
    return std::nullopt;
  }
  Slot& slot = ring_[index(expected_)];
  if (!slot.full) {
    return std::nullopt;
  }
  slot.full = false;
  --held_;
  expected_ = seq_add(expected_, 1);
  return slot.cookie;
}

}  // namespace rdmx::protocol
