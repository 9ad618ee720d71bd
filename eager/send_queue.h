// Send-queue accounting for one QP: credits, selective signalling, and the FIFO of posted send
// descriptors that lets one signalled completion retire every unsignalled WR before it.
//
// Credits: at most `depth` WRs outstanding on the QP (its usable max_send_wr). A WR leaves the
// queue when its own completion arrives or when a later one on the same QP does (send
// completions of one QP arrive in posting order). Flushed WRs complete individually, unsignalled
// ones included (a WR completed in error always generates a completion), which retires them too.
//
// Signalling: a WR is signalled when the caller needs its completion (it holds a bounce buffer
// or a request waits on it), and otherwise every `signal_every`-th WR, so that at most
// signal_every - 1 WRs wait for a later completion and the queue never fills with WRs that
// nothing will retire.
//
// Threads: the descriptors of several posting threads' pools (one per thread, eager/send_pool.h)
// may share a QP, so a FIFO link names the pool (the thread index of the wr_id) and the slot,
// and retiring takes the table of every thread's pool. The caller serializes a queue's posts
// and completions (the worker lock in MULTI mode).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>

#include "eager/send_pool.h"
#include "protocol/wr_id.h"

namespace rdmx::eager {

// Every posting thread's pool, by thread index (SendPool::thread()).
using PoolTable = std::span<SendPool* const>;

class SendQueue {
 public:
  SendQueue() = default;
  SendQueue(ibv_qp* qp, std::uint32_t depth, std::uint32_t signal_every,
            std::uint32_t reserve = 0) noexcept
      : qp_(qp), depth_(depth), reserve_(reserve), signal_every_(signal_every) {}

  ibv_qp* qp() const noexcept { return qp_; }
  // Unsignalled WRs posted since the last signalled one: nothing will retire them until the
  // next signalled WR on this QP completes.
  std::uint32_t unsignaled_tail() const noexcept { return unsignaled_run_; }
  std::uint32_t depth() const noexcept { return depth_; }
  std::uint32_t outstanding() const noexcept { return outstanding_; }
  bool has_room() const noexcept { return outstanding_ < depth_; }
  // Stops posting (teardown, or the QP went to ERR); outstanding WRs still retire.
  void close() noexcept { closed_ = true; }
  bool closed() const noexcept { return closed_; }

  struct Post {
    protocol::WrKind kind = protocol::WrKind::kSend;
    std::uint8_t buf_class = kNoBuffer;
    std::uint32_t buf = 0;
    bool want_signal = false;
    bool sequenced = false;
    std::uint16_t seq = 0;
    void* peer = nullptr;
    std::uint64_t cookie = 0;  // SendDesc::cookie
    // May use the reserve above `depth` (the QP was created with depth + reserve WRs): for the
    // rare control WR that must go out when the queue is full (a flush or a doorbell kick).
    bool use_reserve = false;
  };

  // Posts one WR (wr.next must be null). Takes a descriptor and a credit, sets wr_id and the
  // signalled flag. 0 on success; EAGAIN when the queue or the thread's descriptors are full
  // (nothing posted); ESHUTDOWN once closed; otherwise the errno of ibv_post_send.
  // Inline in every caller: it is most of an eager send's own work.
  [[gnu::always_inline]] int post(SendPool& pool, ibv_send_wr& wr, const Post& p) noexcept {
    if (closed_) [[unlikely]] {
      return ESHUTDOWN;
    }
    std::uint32_t d = 0;
    const std::uint32_t limit = p.use_reserve ? depth_ + reserve_ : depth_;
    if (outstanding_ >= limit || !pool.alloc_desc(&d)) [[unlikely]] {
      return EAGAIN;
    }
    // Bitwise, not short-circuit: four compares, one branch (5 instructions fewer, callgrind).
    const bool signal = p.want_signal | (unsignaled_run_ + 1 >= signal_every_) |
                        (outstanding_ + 1 >= depth_) | (pool.free_descs() < signal_every_);
    const protocol::WrKind kind =
        signal ? (p.kind == protocol::WrKind::kSendInline ? protocol::WrKind::kSend : p.kind)
               : protocol::WrKind::kSendInline;
    wr.wr_id = pool.wr_id(kind, d);
    wr.send_flags = signal ? (wr.send_flags | IBV_SEND_SIGNALED)
                           : (wr.send_flags & ~static_cast<unsigned>(IBV_SEND_SIGNALED));
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp_, &wr, &bad);
    if (rc != 0) [[unlikely]] {
      pool.free_desc(d);
      return rc;
    }
    if (signal) {
      pool.mark_signaled(d);
    }
    SendDesc& desc = pool.desc(d);
    desc.buf_class = p.buf_class;
    desc.buf = p.buf;
    desc.queue = this;
    desc.sequenced = p.sequenced;
    desc.seq = p.seq;
    desc.peer = p.peer;
    desc.cookie = p.cookie;
    desc.next = kNil;
    const std::uint32_t link = link_of(pool.thread(), d);
    if (tail_desc_ == nullptr) {
      head_ = link;
    } else {
      tail_desc_->next = link;
    }
    tail_desc_ = &desc;
    tail_ = link;
    ++outstanding_;
    unsignaled_run_ = signal ? 0 : unsignaled_run_ + 1;
    if (p.buf_class != kNoBuffer) {
      pool.ref(p.buf_class, p.buf);
    }
    return 0;
  }

  // A completion for descriptor `d` of thread `thread`'s pool on this queue: retires it and every
  // WR posted before it. on_retired(SendDesc&) runs for each, oldest first, before the
  // descriptor is freed. Returns the number retired (0 if d is not outstanding here: a stale
  // completion).
  template <class F>
  std::uint32_t complete(PoolTable pools, std::uint16_t thread, std::uint32_t d,
                         F&& on_retired) noexcept {
    const SendDesc& last = pools[thread]->desc(d);
    if (!last.in_use || last.queue != this) {
      return 0;
    }
    const std::uint32_t end = link_of(thread, d);
    std::uint32_t n = 0;
    for (;;) {
      const std::uint32_t cur = head_;
      SendPool& pool = *pools[cur >> kSlotBits];
      const std::uint32_t slot = cur & kSlotMask;
      SendDesc& desc = pool.desc(slot);
      head_ = desc.next;
      if (head_ == kNil) {
        tail_ = kNil;
        tail_desc_ = nullptr;
      }
      --outstanding_;
      ++n;
      on_retired(desc);
      if (desc.buf_class != kNoBuffer) {
        pool.unref(desc.buf_class, desc.buf);
      }
      pool.free_desc(slot);
      if (cur == end || head_ == kNil) {
        break;
      }
    }
    return n;
  }

  // After the QP's teardown drain (whose flushed marker completed behind every WR): retires
  // what is still listed, i.e. unsignalled WRs that completed successfully and so never
  // produced a completion of their own.
  template <class F>
  std::uint32_t retire_all(PoolTable pools, F&& on_retired) noexcept {
    return tail_ == kNil ? 0
                         : complete(pools, static_cast<std::uint16_t>(tail_ >> kSlotBits),
                                    tail_ & kSlotMask, on_retired);
  }

  static constexpr std::uint32_t kNil = 0xffffffff;

 private:
  // A FIFO link: the thread (the pool) above the slot.
  static constexpr std::uint32_t kSlotBits = 20;
  static constexpr std::uint32_t kSlotMask = (1u << kSlotBits) - 1;
  static_assert(protocol::kWrThreadBits + kSlotBits <= 32);

 public:
  // Descriptors a pool may have for its slots to fit a link (below kNil's).
  static constexpr std::uint32_t kMaxDescs = kSlotMask;

 private:
  static constexpr std::uint32_t link_of(std::uint16_t thread, std::uint32_t slot) noexcept {
    return (std::uint32_t{thread} << kSlotBits) | slot;
  }

  ibv_qp* qp_ = nullptr;
  std::uint32_t depth_ = 0;
  std::uint32_t reserve_ = 0;
  std::uint32_t signal_every_ = 16;
  std::uint32_t outstanding_ = 0;
  std::uint32_t unsignaled_run_ = 0;
  std::uint32_t head_ = kNil;  // links (link_of)
  std::uint32_t tail_ = kNil;
  SendDesc* tail_desc_ = nullptr;  // tail_'s descriptor, whose link the next post sets
  bool closed_ = false;
};

}  // namespace rdmx::eager
