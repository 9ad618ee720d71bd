// The shared-memory channel's memory: one segment per worker, in /dev/shm, that node-local
// senders write into. Each sender claims a ring of its own (single producer, single consumer),
// so no two processes ever write the same cache line but the ring's two counters.
//
//  segment (a sparse file: a ring takes pages only once its sender writes)
//  +-----------------+---------------------------------------------------------------+
//  | SegmentHeader   | ring 0: RingControl (2 cache lines) | slots x slot_size bytes | ring 1 ...
//  | (one line)      |                                                                |
//  +-----------------+---------------------------------------------------------------+
//
//  one slot: u32 length | u32 zero | message (length bytes: header, body, payload)
//
// The producer copies a message into slot tail % slots and then publishes it by storing tail + 1
// (release); the consumer loads tail (acquire), reads the slot in place, delivers it and stores
// head + 1 (release), which gives the slot back. Both keep their own copy of the other's counter
// and reload it only when the ring looks full (producer) or empty (consumer): while messages
// flow, each side touches the other's line once per lap, not once per message.
//
// Memory: the file is sparse; whoever claims a ring allocates its pages at once (posix_fallocate),
// so that a full /dev/shm is an error at connection time, naming the cause, and never a SIGBUS
// at a later write.
//
// Lifecycle: the owner creates the file (O_EXCL, mode 0600) under a name made of its pid and
// worker instance. Every other process that attaches counts itself in the header; the one that
// makes the count reach `expected` (the local processes the owner was told of) removes the
// name, so that from then on nothing is left in /dev/shm whatever happens to the processes. The
// owner removes it at destroy if that never happened, and a new segment removes the files of
// owners that are gone (a job killed before every peer attached).
//
// No verbs here: unit-tested on the host (tests/transport/shm_segment_test.cc).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rdmx::transport::shm {

inline constexpr std::uint64_t kSegmentMagic = 0x31474553584d4452ull;  // "RDMXSEG1"
inline constexpr std::uint32_t kSegmentVersion = 1;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kSlotPrefix = 8;  // u32 length, u32 zero

// This node's identity: a hash of the kernel's boot id and the host name, never 0. Processes
// with the same one share /dev/shm and can attach each other's segments.
std::uint64_t node_identity() noexcept;

// "/rdmx-<pid>-<instance, hex>": the shm_open name of a worker's segment.
std::string segment_name(std::uint32_t pid, std::uint64_t instance);

struct SegmentHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t rings;
  std::uint32_t slots;
  std::uint32_t slot_size;
  std::uint32_t owner_pid;
  std::uint32_t expected;  // other processes that will attach; 0: not known
  std::uint64_t owner_instance;
  std::uint64_t owner_addr;            // the owner's address of this header (a peer's CMA probe)
  std::atomic<std::uint32_t> claimed;  // rings handed out
  std::atomic<std::uint32_t> attached;
};
static_assert(sizeof(SegmentHeader) <= kCacheLine);

struct RingControl {
  alignas(kCacheLine) std::atomic<std::uint32_t> tail;  // the producer's line
  std::uint64_t sender_uid;
  alignas(kCacheLine) std::atomic<std::uint32_t> head;  // the consumer's line
};
static_assert(sizeof(RingControl) == 2 * kCacheLine);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

struct Geometry {
  std::uint32_t rings = 0;
  std::uint32_t slots = 0;
  std::uint32_t slot_size = 0;  // a multiple of kCacheLine, > kSlotPrefix
  std::size_t ring_bytes() const noexcept {
    return sizeof(RingControl) + std::size_t{slots} * slot_size;
  }
  std::size_t bytes() const noexcept { return kCacheLine + rings * ring_bytes(); }
};

// The slot size that holds messages of up to `max_message` bytes.
constexpr std::uint32_t slot_size_for(std::size_t max_message) noexcept {
  return static_cast<std::uint32_t>((kSlotPrefix + max_message + kCacheLine - 1) &
                                    ~(kCacheLine - 1));
}

// Where one ring lies in a mapping: what both of its sides need.
struct RingLayout {
  RingControl* control = nullptr;
  std::byte* slots = nullptr;  // right after the control lines
  std::uint32_t nslots = 0;
  std::uint32_t slot_size = 0;
  // The slot of the n-th message: both sides index by the same counter, so they agree on every
  // slot, across its wrap at 2^32 too.
  std::byte* slot(std::uint32_t n) const noexcept {
    return slots + std::size_t{n % nslots} * slot_size;
  }
};

// One sender's side of a ring.
class Producer {
 public:
  Producer() = default;
  explicit Producer(const RingLayout& r) noexcept
      : r_(r),
        tail_(r.control->tail.load(std::memory_order_relaxed)),
        head_(r.control->head.load(std::memory_order_acquire)) {}

  bool valid() const noexcept { return r_.control != nullptr; }
  std::size_t max_message() const noexcept { return r_.slot_size - kSlotPrefix; }
  bool full() const noexcept {
    if (tail_ - head_ < r_.nslots) [[likely]] {
      return false;
    }
    head_ = r_.control->head.load(std::memory_order_acquire);
    return tail_ - head_ >= r_.nslots;
  }
  // Copies the three parts in, in order, and publishes them as one message. The caller checked
  // !full() and that the parts fit max_message().
  void push(const void* a, std::size_t alen, const void* b, std::size_t blen, const void* p,
            std::size_t plen) noexcept {
    std::byte* slot = r_.slot(tail_);
    const auto length = static_cast<std::uint32_t>(alen + blen + plen);
    std::memcpy(slot, &length, sizeof(length));
    std::byte* m = slot + kSlotPrefix;
    std::memcpy(m, a, alen);
    if (blen != 0) {
      std::memcpy(m + alen, b, blen);
    }
    if (plen != 0) {
      std::memcpy(m + alen + blen, p, plen);
    }
    r_.control->tail.store(++tail_, std::memory_order_release);
  }

 private:
  RingLayout r_;
  std::uint32_t tail_ = 0;
  mutable std::uint32_t head_ = 0;  // the consumer's, as last seen (a cache full() refreshes)
};

// The receiver's side of a ring.
class Consumer {
 public:
  Consumer() = default;
  explicit Consumer(const RingLayout& r) noexcept
      : r_(r), head_(r.control->head.load(std::memory_order_relaxed)), tail_(head_) {}

  RingControl& control() const noexcept { return *r_.control; }
  // The next message in place, or nullptr when the ring is empty. *length: its bytes, within
  // the slot (a producer that wrote more is malformed: the caller drops what is not whole).
  const std::byte* peek(std::uint32_t* length) noexcept {
    if (head_ == tail_) {
      tail_ = r_.control->tail.load(std::memory_order_acquire);
      if (head_ == tail_) [[likely]] {
        return nullptr;
      }
    }
    const std::byte* slot = r_.slot(head_);
    std::uint32_t n = 0;
    std::memcpy(&n, slot, sizeof(n));
    *length = n <= r_.slot_size - kSlotPrefix ? n : 0;
    return slot + kSlotPrefix;
  }
  // The message peek() returned was taken: its slot goes back to the producer.
  void pop() noexcept { r_.control->head.store(++head_, std::memory_order_release); }

 private:
  RingLayout r_;
  std::uint32_t head_ = 0;
  std::uint32_t tail_ = 0;  // the producer's, as last seen
};

// A segment mapped into this process: the owner's (create) or a peer's (attach).
class Segment {
 public:
  // The owner's: creates, sizes and maps the file, removing stale ones of dead owners first.
  // On failure returns false with *error naming the cause and the fix.
  bool create(const Geometry& g, std::uint32_t pid, std::uint64_t instance, std::uint32_t expected,
              std::string* error);
  // A peer's: maps the segment of `pid`/`instance`, claims a ring for `sender_uid` and counts
  // this process as attached (the last expected one removes the name). False: *error says why.
  bool attach(std::uint32_t pid, std::uint64_t instance, std::uint64_t sender_uid,
              std::string* error);
  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  const SegmentHeader& header() const noexcept { return *hdr_; }
  // Rings handed out. A ring counted here may still be being set up by its claimer: its
  // sender_uid is certain only once its first message is (the producer's release store).
  std::uint32_t claimed() const noexcept {
    return std::min(hdr_->claimed.load(std::memory_order_acquire), hdr_->rings);
  }
  // Claims a ring of this segment (the owner's own, for sends to itself) and allocates its
  // pages. kNoRing, *error saying why: all taken, or no room in /dev/shm.
  static constexpr std::uint32_t kNoRing = ~0u;
  std::uint32_t claim(std::uint64_t sender_uid, std::string* error) noexcept;
  std::uint32_t ring() const noexcept { return ring_; }  // attach()'s ring
  Producer producer(std::uint32_t ring) const noexcept { return Producer(layout(ring)); }
  Consumer consumer(std::uint32_t ring) const noexcept { return Consumer(layout(ring)); }
  // Whether `pid` lets this process read its memory: reads the owner's header through
  // process_vm_readv (false when the kernel refuses: ptrace scope, containers, seccomp).
  bool cma_works(pid_t pid) const noexcept;
  // Removes the name now (idempotent; the mapping stays).
  void unlink() noexcept;
  bool named() const noexcept { return !name_.empty(); }

 private:
  Geometry geometry() const noexcept { return {hdr_->rings, hdr_->slots, hdr_->slot_size}; }
  RingLayout layout(std::uint32_t ring) const noexcept;
  bool map(int fd, std::size_t bytes, std::string* error);

  SegmentHeader* hdr_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;       // kept for posix_fallocate of the rings claimed through this mapping
  std::string name_;  // while the name exists and this process removes it
  std::uint32_t ring_ = kNoRing;
};

// Removes /dev/shm/rdmx-<pid>-* files of this user whose process is gone. Returns how many.
int remove_stale_segments() noexcept;

}  // namespace rdmx::transport::shm
