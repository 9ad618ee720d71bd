// 16-bit sequence numbers with serial-number arithmetic (RFC 1982).
//
// Why 16 bits: the number rides in every 32-byte header next to a 16-bit piggy-backed ack (UCX UD
// does the same), and rdmx never has more than a window of messages in flight per peer. Serial
// comparison is only meaningful between numbers less than 2^15 apart, so every window (send
// window, reorder window) is capped at kMaxSeqWindow.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmx::protocol {

using Seq = std::uint16_t;

// Windows must stay below half the sequence space for a < b to be unambiguous.
inline constexpr std::size_t kMaxSeqWindow = std::size_t{1} << 15;

// a - b as a signed distance in [-32768, 32767] (modular conversion is defined in C++20).
constexpr std::int32_t seq_diff(Seq a, Seq b) noexcept {
  return static_cast<std::int16_t>(static_cast<std::uint16_t>(a - b));
}

constexpr bool seq_lt(Seq a, Seq b) noexcept {
  return seq_diff(a, b) < 0;
}
constexpr bool seq_le(Seq a, Seq b) noexcept {
  return seq_diff(a, b) <= 0;
}
constexpr bool seq_gt(Seq a, Seq b) noexcept {
  return seq_diff(a, b) > 0;
}
constexpr bool seq_ge(Seq a, Seq b) noexcept {
  return seq_diff(a, b) >= 0;
}

constexpr Seq seq_add(Seq a, std::size_t n) noexcept {
  return static_cast<Seq>(a + n);
}

static_assert(seq_lt(65535, 0) && seq_gt(0, 65535), "wrap-around compares by distance");
static_assert(seq_diff(3, 65533) == 6 && seq_diff(65533, 3) == -6);
static_assert(seq_add(65535, 1) == 0);

}  // namespace rdmx::protocol
