// Send-side resources of one posting thread: registered bounce buffers by size class and the
// descriptors of posted send work requests.
//
// Bounce buffers: one registered slab split into a small and a large class. A buffer is busy
// while a posted WR reads it (refs) or while the UD reliability window may still resend it
// (retained); it returns to its free stack only when both are clear.
//
// Send descriptors: every posted send WR takes one; its index is the wr_id slot and its
// generation the wr_id generation, so a completion is routed without a lookup. The number of
// descriptors bounds the thread's outstanding send WRs, and the send CQ is sized to it: the CQ
// cannot overflow even if every WR (signalled or not) completes with an error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "protocol/wr_id.h"
#include "verbs/mr.h"
#include "verbs/pd.h"

namespace rdmx::eager {

class SendQueue;

inline constexpr std::uint8_t kNoBuffer = 0xff;

struct SendDesc {
  // Its wr_id but the kind (thread, generation, slot), kept whole so that a post only adds the
  // kind: encoding the fields per post was 14 instructions of every send, adding the kind is 5
  // (callgrind).
  std::uint64_t wr_id_base = 0;
  std::uint8_t buf_class = kNoBuffer;  // class of the bounce buffer, or kNoBuffer (inline)
  bool in_use = false;
  bool signaled = false;   // posted with IBV_SEND_SIGNALED: a completion of its own will come
  bool sequenced = false;  // the message consumed a per-peer Seq (RC order window)
  std::uint16_t seq = 0;
  std::uint32_t buf = 0;
  std::uint32_t next = 0;  // FIFO link inside the owning SendQueue
  SendQueue* queue = nullptr;
  void* peer = nullptr;  // transport's peer, for the RC order window
  // Rendezvous RDMA writes: the engine's token for the write (never 0); 0 for everything else.
  std::uint64_t cookie = 0;
};

class SendPool {
 public:
  struct Params {
    std::uint16_t thread = 0;
    std::array<std::uint32_t, 2> capacity{};  // bytes per buffer (header included)
    std::array<std::uint32_t, 2> count{};     // buffers per class
    std::uint32_t descs = 0;                  // send descriptors
  };

  SendPool(const verbs::ProtectionDomain& pd, const Params& params);
  // The bytes a pool of these parameters registers (pins), before it is made.
  static std::size_t registered_bytes_for(const Params& params) noexcept;
  SendPool(const SendPool&) = delete;
  SendPool& operator=(const SendPool&) = delete;
  ~SendPool();

  std::uint16_t thread() const noexcept { return params_.thread; }
  std::uint32_t lkey() const noexcept { return mr_.lkey(); }
  std::uint32_t buffer_capacity(std::uint8_t cls) const noexcept { return params_.capacity[cls]; }
  std::size_t registered_bytes() const noexcept { return slab_bytes_; }

  // --- bounce buffers
  bool alloc_buffer(std::uint8_t cls, std::uint32_t* index) noexcept {
    Class& c = classes_[cls];
    if (c.free_count == 0) [[unlikely]] {
      return false;
    }
    *index = c.free[--c.free_count];
    c.state[*index] = BufState{};
    return true;
  }
  std::byte* buffer(std::uint8_t cls, std::uint32_t index) const noexcept {
    return classes_[cls].base + std::size_t{index} * classes_[cls].stride;
  }
  void ref(std::uint8_t cls, std::uint32_t index) noexcept { ++classes_[cls].state[index].refs; }
  void unref(std::uint8_t cls, std::uint32_t index) noexcept {
    BufState& s = classes_[cls].state[index];
    --s.refs;
    maybe_free(cls, index);
  }
  void retain(std::uint8_t cls, std::uint32_t index) noexcept {
    classes_[cls].state[index].retained = true;
  }
  void unretain(std::uint8_t cls, std::uint32_t index) noexcept {
    classes_[cls].state[index].retained = false;
    maybe_free(cls, index);
  }
  // A freshly allocated buffer that was never posted nor retained goes straight back.
  void release_unused(std::uint8_t cls, std::uint32_t index) noexcept { maybe_free(cls, index); }
  std::uint32_t free_buffers(std::uint8_t cls) const noexcept { return classes_[cls].free_count; }
  std::uint32_t buffer_count(std::uint8_t cls) const noexcept { return params_.count[cls]; }

  // --- send descriptors
  bool alloc_desc(std::uint32_t* index) noexcept {
    if (desc_free_count_ == 0) [[unlikely]] {
      return false;
    }
    *index = desc_free_[--desc_free_count_];
    descs_[*index].in_use = true;
    ++taken_;
    return true;
  }
  void free_desc(std::uint32_t index) noexcept {
    SendDesc& d = descs_[index];
    d.in_use = false;
    if (d.signaled) {
      d.signaled = false;
      --signaled_outstanding_;
    }
    d.wr_id_base = id_base(index, protocol::next_generation(generation(index)));
    d.queue = nullptr;
    d.peer = nullptr;
    d.sequenced = false;
    d.buf_class = kNoBuffer;
    d.cookie = 0;
    desc_free_[desc_free_count_++] = index;
  }
  // The WR of descriptor `index` was posted signalled; free_desc undoes the count.
  void mark_signaled(std::uint32_t index) noexcept {
    descs_[index].signaled = true;
    ++signaled_outstanding_;
  }
  SendDesc& desc(std::uint32_t index) noexcept { return descs_[index]; }
  std::uint16_t generation(std::uint32_t index) const noexcept {
    return protocol::decode(descs_[index].wr_id_base).generation;
  }
  std::uint32_t desc_count() const noexcept { return params_.descs; }
  std::uint32_t free_descs() const noexcept { return desc_free_count_; }
  std::uint32_t descs_in_use() const noexcept { return params_.descs - desc_free_count_; }
  // Descriptors taken since the pool was made (posted, or refused by ibv_post_send and freed).
  std::uint64_t descs_taken() const noexcept { return taken_; }
  // Signalled WRs posted and not yet retired: while there are none, only an error (which
  // completes unsignalled WRs too) can put anything on the send CQ, so the progress loop
  // polls it rarely.
  std::uint32_t signaled_outstanding() const noexcept { return signaled_outstanding_; }

  std::uint64_t wr_id(protocol::WrKind kind, std::uint32_t index) const noexcept {
    return protocol::with_kind(descs_[index].wr_id_base, kind);
  }

 private:
  struct BufState {
    std::uint16_t refs = 0;
    bool retained = false;
    bool free = false;
  };
  struct Class {
    std::byte* base = nullptr;
    std::size_t stride = 0;
    std::vector<BufState> state;
    std::vector<std::uint32_t> free;
    std::uint32_t free_count = 0;
  };
  struct SlabDeleter {
    void operator()(std::byte* p) const noexcept;
  };

  std::uint64_t id_base(std::uint32_t index, std::uint16_t generation) const noexcept {
    return protocol::encode(protocol::WrId{.kind = protocol::WrKind::kNone,
                                           .thread = params_.thread,
                                           .generation = generation,
                                           .slot = index});
  }

  void maybe_free(std::uint8_t cls, std::uint32_t index) noexcept {
    Class& c = classes_[cls];
    BufState& s = c.state[index];
    if (s.refs == 0 && !s.retained && !s.free) {
      s.free = true;
      c.free[c.free_count++] = index;
    }
  }

  Params params_;
  std::size_t slab_bytes_ = 0;
  std::unique_ptr<std::byte, SlabDeleter> slab_;
  verbs::MemoryRegion mr_;
  std::array<Class, 2> classes_;
  std::vector<SendDesc> descs_;
  std::vector<std::uint32_t> desc_free_;
  std::uint32_t desc_free_count_ = 0;
  std::uint32_t signaled_outstanding_ = 0;
  std::uint64_t taken_ = 0;
};

}  // namespace rdmx::eager
