// The cap on RC connections a UD-mode worker keeps for rendezvous writes, and which one to
// retire when a new one is needed (MVAPICH2 keeps at most 64 per process the same way, so memory
// stays constant as a job grows).
//
// Only idle connections are retired, least recently used first. "Busy" is the caller's
// predicate (the transport asks the rendezvous engine: any transfer in flight with that peer,
// on either side), so there is one source of truth and no count to keep in step. When the cap is
// reached and every connection is busy, admit() says kFull: the caller then sends that transfer
// through the copy path (or waits); the cap is never exceeded.
//
// Pure bookkeeping by peer index (dense, as the transport numbers its peers); no verbs calls.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace rdmx::rendezvous {

inline constexpr std::uint32_t kDefaultMaxRcPeers = 64;

class RcLru {
 public:
  // capacity 0 is taken as 1.
  explicit RcLru(std::uint32_t capacity) noexcept : capacity_(capacity == 0 ? 1 : capacity) {}

  enum class Admit : std::uint8_t {
    kConnected,  // already has a connection (now most recently used)
    kRoom,       // below the cap: connect, then insert()
    kEvict,      // at the cap: retire `victim` (remove()), then connect and insert()
    kFull,       // at the cap and every connection is busy
  };
  struct Decision {
    Admit admit = Admit::kFull;
    std::uint32_t victim = 0;  // kEvict only
  };

  // What to do for a peer that wants a connection. Touches it when it is connected.
  // busy(peer) -> bool: the connection to peer must not be retired now.
  template <class Busy>
  Decision admit(std::uint32_t peer, Busy&& busy) {
    if (contains(peer)) {
      touch(peer);
      return {Admit::kConnected, 0};
    }
    if (size_ < capacity_) {
      return {Admit::kRoom, 0};
    }
    if (const auto victim = lru_idle(busy)) {
      return {Admit::kEvict, *victim};
    }
    return {Admit::kFull, 0};
  }

  // The least recently used connection that is not busy, if any.
  template <class Busy>
  std::optional<std::uint32_t> lru_idle(Busy&& busy) const {
    for (std::uint32_t p = head_; p != kNil; p = nodes_[p].next) {
      if (!busy(p)) {
        return p;
      }
    }
    return std::nullopt;
  }

  // A connection to `peer` now exists (or is being made): counts toward the cap, most recently
  // used. Inserting a peer that is present only touches it.
  void insert(std::uint32_t peer);
  // The connection is gone (retired, failed, torn down).
  void remove(std::uint32_t peer) noexcept;
  // Used now: most recently used.
  void touch(std::uint32_t peer) noexcept;

  bool contains(std::uint32_t peer) const noexcept {
    return peer < nodes_.size() && nodes_[peer].present;
  }
  std::uint32_t size() const noexcept { return size_; }
  std::uint32_t capacity() const noexcept { return capacity_; }
  // Peers from least to most recently used (tests, logs).
  std::vector<std::uint32_t> order() const;

 private:
  static constexpr std::uint32_t kNil = 0xffffffff;
  struct Node {
    std::uint32_t prev = kNil;
    std::uint32_t next = kNil;
    bool present = false;
  };
  void unlink(std::uint32_t peer) noexcept;
  void push_back(std::uint32_t peer) noexcept;  // most recently used end

  std::uint32_t capacity_;
  std::uint32_t size_ = 0;
  std::uint32_t head_ = kNil;  // least recently used
  std::uint32_t tail_ = kNil;  // most recently used
  std::vector<Node> nodes_;
};

}  // namespace rdmx::rendezvous
