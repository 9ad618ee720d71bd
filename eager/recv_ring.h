// The receive side of the RDMA-write eager rings (protocol/ring.h).
//
// RingSlab: the registered memory of every ring a worker gives, `rings` rings of `slots` slots of
// `slot_size` bytes, allocated and registered once (on the first offer) with remote write, so
// the memory is a constant of the configuration, not of the number of peers. It owns the memory
// and the MR over it, declared in that order so the MR is deregistered first. Every QP a peer
// could write through must be gone (or in ERR) before the slab is destroyed.
//
// RecvRing: one ring of the slab, that one RC peer writes into, read strictly in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "protocol/ring.h"
#include "verbs/mr.h"
#include "verbs/pd.h"

namespace rdmx::eager {

class RingSlab {
 public:
  // Geometry as protocol::ring_geometry_ok() accepts, rings >= 1. Throws verbs::Error
  // (allocation or registration refused: usually the locked-memory limit).
  RingSlab(const verbs::ProtectionDomain& pd, std::uint32_t rings, std::uint32_t slots,
           std::uint32_t slot_size);

  std::uint32_t rings() const noexcept { return rings_; }
  std::byte* ring(std::uint32_t i) const noexcept {
    return mem_.get() + std::size_t{i} * ring_bytes_;
  }
  std::uint32_t rkey() const noexcept { return mr_.rkey(); }
  std::size_t registered_bytes() const noexcept { return bytes_; }
  [[nodiscard]] int destroy() noexcept { return mr_.destroy(); }  // ibv_dereg_mr now

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::uint32_t rings_;
  std::size_t ring_bytes_;
  std::size_t bytes_;
  std::unique_ptr<std::byte, Free> mem_;
  verbs::MemoryRegion mr_;
};

class RecvRing {
 public:
  // `base`: slots x slot_size bytes of a RingSlab, zeroed (every footer reads empty).
  RecvRing(std::byte* base, std::uint32_t slots, std::uint32_t slot_size) noexcept
      : base_(base), slots_(slots), slot_size_(slot_size) {}

  std::uint64_t addr() const noexcept { return reinterpret_cast<std::uintptr_t>(base_); }
  std::uint32_t slots() const noexcept { return slots_; }
  std::uint32_t slot_size() const noexcept { return slot_size_; }

  // What the next slot in order holds.
  protocol::RingPeek peek() const noexcept { return protocol::ring_peek(head_slot(), slot_size_); }
  // Whether the next slot shows a footer: one load, for a poller's look at every ring before it
  // peek()s (which checks the message) the few that are written.
  bool written() const noexcept {
    return __atomic_load_n(protocol::ring_footer_word(head_slot(), slot_size_), __ATOMIC_RELAXED) !=
           0;
  }
  // The head slot's message was taken: clear it and move on.
  void pop() noexcept {
    protocol::ring_clear(head_slot(), slot_size_);
    head_ = head_ + 1 == slots_ ? 0 : head_ + 1;
    ++taken_;
  }

  // Messages taken in all (mod 2^32), and those not yet reported to the sender (ring_ack).
  std::uint32_t taken() const noexcept { return taken_; }
  std::uint32_t unreported() const noexcept { return taken_ - reported_; }
  // A ring_ack carrying `taken` (an earlier taken()) left for the sender.
  void reported(std::uint32_t taken) noexcept {
    reported_ = protocol::ring_newer(reported_, taken);
  }

 private:
  std::byte* head_slot() const noexcept { return base_ + std::size_t{head_} * slot_size_; }

  std::byte* base_;
  std::uint32_t slots_;
  std::uint32_t slot_size_;
  std::uint32_t head_ = 0;
  std::uint32_t taken_ = 0;
  std::uint32_t reported_ = 0;
};

}  // namespace rdmx::eager
