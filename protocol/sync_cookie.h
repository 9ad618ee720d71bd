// The synchronous-send cookie: which send a receiver's kMatchAck completes. The sender puts it
// in the aux field of the message (wire.h); the receiver echoes it, unchanged, in its kMatchAck.
//
//  bit 31          20 19        12 11            0
//      +-------------+------------+---------------+
//      |   thread    | generation |     slot      |
//      +-------------+------------+---------------+
//
// - thread: the sending thread's context (12 bits, as the wr_id's thread field).
// - slot: the sync slot in that context waiting for the ack.
// - generation: the slot's reuse count, so that an ack for an earlier use (a peer that answers
//   late, or twice) is recognised and dropped.
#pragma once

#include <cstdint>

namespace rdmx::protocol {

struct SyncCookie {
  std::uint32_t thread = 0;     // < kSyncCookieThreads
  std::uint8_t generation = 0;  // wraps
  std::uint32_t slot = 0;       // < kSyncCookieSlots
};

inline constexpr std::uint32_t kSyncCookieThreads = 1u << 12;
inline constexpr std::uint32_t kSyncCookieSlots = 1u << 12;

constexpr std::uint32_t encode_sync_cookie(const SyncCookie& c) noexcept {
  return ((c.thread & 0xfffu) << 20) | (std::uint32_t{c.generation} << 12) | (c.slot & 0xfffu);
}

constexpr SyncCookie decode_sync_cookie(std::uint32_t v) noexcept {
  return SyncCookie{.thread = v >> 20,
                    .generation = static_cast<std::uint8_t>((v >> 12) & 0xffu),
                    .slot = v & 0xfffu};
}

static_assert(decode_sync_cookie(encode_sync_cookie({.thread = 3, .generation = 250, .slot = 4095}))
                  .slot == 4095);
static_assert(decode_sync_cookie(encode_sync_cookie({.thread = 4095, .generation = 7, .slot = 1}))
                  .thread == 4095);
static_assert(decode_sync_cookie(encode_sync_cookie({.thread = 1, .generation = 200, .slot = 2}))
                  .generation == 200);

}  // namespace rdmx::protocol
