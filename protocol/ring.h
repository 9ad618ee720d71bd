// The RDMA-write eager ring: the slot layout, its footer and the check that tells a receiver a
// slot holds a whole message.
//
// Over RC a receiver gives a peer that sends to it often a ring of its own registered memory
// (kRingOffer, wire.h). The peer then RDMA-writes each small message into the next slot instead
// of sending it: no receive WR is consumed and no completion is made at the receiver, which finds
// the message by polling the slot's last 8 bytes (as openib's eager RDMA and MVAPICH2's RDMA fast
// path did). On rxe this is ib_write_lat against ib_send_lat: ~10 % less per message.
//
//  one slot, slot_size bytes (a multiple of 8)
//  +--------------------------+-----------------------------------------+------------+
//  | unused (stale bytes)     | message: header, body, payload, zeros   |   footer   |
//  |                          | up to a multiple of 8 (align8(length))  |  8 bytes   |
//  +--------------------------+-----------------------------------------+------------+
//  0                          slot_size - 8 - align8(length)            slot_size - 8
//
//  footer, one little-endian 64-bit word:
//   63       56 55      48 47                 32 31                                 0
//  +-----------+----------+---------------------+------------------------------------+
//  |   magic   |   zero   |       length        |               check                |
//  +-----------+----------+---------------------+------------------------------------+
//
// The message sits at the END of the slot so that the footer's position does not depend on the
// length. The receiver zeroes the footer when it takes the message; the sender writes a slot
// again only after the receiver said it took it (MsgHeader.ring_ack).
//
// Why a check and not the footer alone: the bytes of one RDMA write need not become visible in
// address order. rxe places them with the kernel's memcpy, which copies backwards in some cases
// and uses fast-string stores that are not ordered among themselves (Intel SDM 8.2.4), so a
// poller can see the footer before the payload. A slot is complete only when the footer's magic
// is there, its length fits the slot and `check` equals ring_check() of the bytes in front of
// it; otherwise it is polled again later. The transport also requires the header's sequence
// number to be the one it expects next, so a stale message of an earlier lap with the same
// length never passes.
//
// Pure logic (unit-tested on the host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "protocol/wire.h"

namespace rdmx::protocol {

inline constexpr std::size_t kRingFooterSize = 8;
inline constexpr std::uint8_t kRingMagic = 0xa5;
// Slot sizes a ring may use: a header and a little payload at least, one page at most (the
// sender stages a message on its stack before the inline write).
inline constexpr std::size_t kRingMinSlot = 64;
inline constexpr std::size_t kRingMaxSlot = 4096;
inline constexpr std::uint32_t kRingMinSlots = 2;
inline constexpr std::uint32_t kRingMaxSlots = 1024;

constexpr std::size_t ring_align8(std::size_t n) noexcept {
  return (n + 7) & ~std::size_t{7};
}

// Bytes written into a slot for a message of `length` bytes (header included).
constexpr std::size_t ring_image_size(std::size_t length) noexcept {
  return ring_align8(length) + kRingFooterSize;
}

// The longest message (header included) whose image fits in `max_image` bytes (>= the footer):
// ring_image_size(length) <= max_image exactly when length <= ring_max_length(max_image). A
// sender keeps it so that its per-message test is one compare.
constexpr std::size_t ring_max_length(std::size_t max_image) noexcept {
  return (max_image - kRingFooterSize) & ~std::size_t{7};
}

// A ring geometry a receiver may offer and a sender may accept.
constexpr bool ring_geometry_ok(std::uint32_t slots, std::size_t slot_size) noexcept {
  return slots >= kRingMinSlots && slots <= kRingMaxSlots && slot_size >= kRingMinSlot &&
         slot_size <= kRingMaxSlot && slot_size % 8 == 0;
}

// The check of a message: its 8-byte words (the zero padding included) and its length, chained
// through h -> (h ^ word) * odd and finished by one xorshift-multiply, folded to 32 bits. Each
// step is a bijection of h, so two messages of the same length that differ in one word differ
// in the 64-bit result; only the fold can make them collide (2^-32). One xor and one multiply
// per word: a per-word xorshift cost 2 more per word, on both sides of every ring message.
inline std::uint32_t ring_check(const std::byte* message, std::size_t length) noexcept {
  constexpr std::uint64_t kMul = 0x9e3779b97f4a7c15ull;
  std::uint64_t h = 0x52444d58ull ^ (std::uint64_t{length} << 32);
  const std::size_t padded = ring_align8(length);
  // Unrolled: a small message's loop control costs as much as its words (callgrind).
#pragma GCC unroll 4
  for (std::size_t i = 0; i < padded; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, message + i, 8);
    h = (h ^ w) * kMul;
  }
  h ^= h >> 29;
  h *= kMul;
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

constexpr std::uint64_t ring_footer(std::uint32_t check, std::size_t length) noexcept {
  return (std::uint64_t{kRingMagic} << 56) | ((std::uint64_t{length} & 0xffff) << 32) | check;
}

// Sender: `image` holds the message in its first `length` bytes and has room for
// ring_image_size(length); pads the message with zeros and appends the footer. The image is
// written to the last ring_image_size(length) bytes of a slot.
inline void ring_seal(std::byte* image, std::size_t length) noexcept {
  const std::size_t padded = ring_align8(length);
  // Zero the padding (at most 7 bytes) with one 8-byte store rather than a memset call: it ends
  // inside the footer's room (length + 8 <= padded + kRingFooterSize), written just below.
  constexpr std::uint64_t kZero = 0;
  std::memcpy(image + length, &kZero, sizeof(kZero));
  const std::uint64_t footer = ring_footer(ring_check(image, length), length);
  std::memcpy(image + padded, &footer, sizeof(footer));
}

// The footer word of the slot at `slot` (slot_size bytes, 8-aligned).
inline std::uint64_t* ring_footer_word(std::byte* slot, std::size_t slot_size) noexcept {
  return reinterpret_cast<std::uint64_t*>(slot + slot_size - kRingFooterSize);
}
inline const std::uint64_t* ring_footer_word(const std::byte* slot,
                                             std::size_t slot_size) noexcept {
  return reinterpret_cast<const std::uint64_t*>(slot + slot_size - kRingFooterSize);
}

struct RingPeek {
  enum Status : std::uint8_t {
    kEmpty,     // no footer: nothing written since the slot was cleared
    kNotReady,  // a footer, but the bytes in front of it do not match it yet
    kReady,     // a whole message
  };
  Status status = kEmpty;
  const std::byte* message = nullptr;  // kReady: the message's first byte
  std::uint32_t length = 0;            // kReady: its length (header included)
};

// Receiver: what the slot at `slot` (slot_size bytes, 8-aligned) holds now.
inline RingPeek ring_peek(const std::byte* slot, std::size_t slot_size) noexcept {
  // One 8-byte load, acquire: the check below reads the bytes in front of the footer after it.
  const std::uint64_t footer = __atomic_load_n(ring_footer_word(slot, slot_size), __ATOMIC_ACQUIRE);
  if (footer == 0) [[likely]] {
    return {};
  }
  const auto length = static_cast<std::uint32_t>((footer >> 32) & 0xffff);
  if ((footer >> 56) != kRingMagic || ((footer >> 48) & 0xff) != 0 || length < kHeaderSize ||
      ring_image_size(length) > slot_size) {
    return {.status = RingPeek::kNotReady};  // a footer still being written
  }
  const std::byte* message = slot + slot_size - ring_image_size(length);
  if (ring_check(message, length) != static_cast<std::uint32_t>(footer)) {
    return {.status = RingPeek::kNotReady};
  }
  return {.status = RingPeek::kReady, .message = message, .length = length};
}

// Receiver: the message was taken; the slot reads empty until the sender fills it again.
inline void ring_clear(std::byte* slot, std::size_t slot_size) noexcept {
  __atomic_store_n(ring_footer_word(slot, slot_size), std::uint64_t{0}, __ATOMIC_RELEASE);
}

// Sender-side credit arithmetic on the cumulative counts (both wrap mod 2^32).
constexpr std::uint32_t ring_free_slots(std::uint32_t slots, std::uint32_t sent,
                                        std::uint32_t taken) noexcept {
  const std::uint32_t used = sent - taken;
  return used >= slots ? 0 : slots - used;
}
// A later cumulative count replaces an earlier one; an older (reordered) one is ignored.
constexpr std::uint32_t ring_newer(std::uint32_t have, std::uint32_t got) noexcept {
  return static_cast<std::int32_t>(got - have) > 0 ? got : have;
}

}  // namespace rdmx::protocol
