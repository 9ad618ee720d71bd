// The synchronous-send cookie: which send a receiver's kMatchAck completes. The sender puts it
// in the aux field of the message (wire.h); the receiver echoes it, unchanged, in its kMatchAck.
//
//  bit 31        24 23        16 15                      0
//      +-----------+------------+------------------------+
//      |  thread   | generation |          slot          |
//      +-----------+------------+------------------------+
//
// - thread: the sending thread's context (8 bits here; the wr_id's thread field has 12).
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

inline constexpr std::uint32_t kSyncCookieThreads = 1u << 8;
inline constexpr std::uint32_t kSyncCookieSlots = 1u << 16;

constexpr std::uint32_t encode_sync_cookie(const SyncCookie& c) noexcept {
  return ((c.thread & 0xffu) << 24) | (std::uint32_t{c.generation} << 16) | (c.slot & 0xffffu);
}

constexpr SyncCookie decode_sync_cookie(std::uint32_t v) noexcept {
  return SyncCookie{.thread = v >> 24,
                    .generation = static_cast<std::uint8_t>((v >> 16) & 0xffu),
                    .slot = v & 0xffffu};
}

static_assert(
    decode_sync_cookie(encode_sync_cookie({.thread = 3, .generation = 250, .slot = 65535})).slot ==
    65535);
static_assert(decode_sync_cookie(encode_sync_cookie({.thread = 255, .generation = 7, .slot = 1}))
                  .thread == 255);
static_assert(decode_sync_cookie(encode_sync_cookie({.thread = 1, .generation = 200, .slot = 2}))
                  .generation == 200);

}  // namespace rdmx::protocol
