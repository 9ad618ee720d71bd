// Fuzzes an eager-ring slot (protocol/ring.h) as poll_ring reads it: ring_peek, then validate()
// on the message it reports. Input: one mode byte, then
//   even: the slot's last bytes (its footer last), written as they are: what a peer's RDMA
//         write, whole or half placed, can leave there;
//   odd:  a message, sealed with ring_seal into a slot of stale bytes as the sender does: the
//         peek must report exactly that message, and the message reaches validate() (the
//         fuzzer cannot forge a check by mutation, so this is how hostile contents get there).
#include <algorithm>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "protocol/ring.h"
#include "protocol/wire.h"

namespace {

using namespace rdmx::protocol;

// What poll_ring relies on from a slot's peek, and the receive path's validate() after it.
void check_peek(const RingPeek& peek, const std::byte* slot, std::size_t slot_size) {
  if (peek.status != RingPeek::kReady) {
    FUZZ_CHECK(peek.message == nullptr && peek.length == 0);
    return;
  }
  FUZZ_CHECK(peek.length >= kHeaderSize);
  FUZZ_CHECK(peek.message >= slot);
  FUZZ_CHECK(peek.message + ring_image_size(peek.length) == slot + slot_size);
  MsgHeader h{};
  if (validate(std::span(peek.message, peek.length), &h) == WireError::kOk) {
    FUZZ_CHECK(wire_size(static_cast<MsgKind>(h.kind), h.payload_length) == peek.length);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) {
    return 0;
  }
  const bool seal = (data[0] & 1) != 0;
  const auto rest = rdmx::fuzz::as_bytes(data + 1, size - 1);
  // A geometry ring_geometry_ok allows; slots are 8-aligned, as a registered ring's are.
  const std::size_t want = seal ? ring_image_size(rest.size()) : ring_align8(rest.size());
  if (want > kRingMaxSlot) {
    return 0;
  }
  const std::size_t slot_size = std::max(want, kRingMinSlot);
  FUZZ_CHECK(ring_geometry_ok(kRingMinSlots, slot_size));
  std::vector<std::uint64_t> words(slot_size / 8, 0xeeeeeeeeeeeeeeeeull);
  auto* slot = reinterpret_cast<std::byte*>(words.data());
  if (seal) {
    std::byte* image = slot + slot_size - ring_image_size(rest.size());
    std::memcpy(image, rest.data(), rest.size());
    ring_seal(image, rest.size());
    const RingPeek peek = ring_peek(slot, slot_size);
    if (rest.size() < kHeaderSize) {
      FUZZ_CHECK(peek.status == RingPeek::kNotReady);  // too short to be a message
    } else {
      FUZZ_CHECK(peek.status == RingPeek::kReady && peek.message == image);
      FUZZ_CHECK(peek.length == rest.size());
      FUZZ_CHECK(std::memcmp(peek.message, rest.data(), rest.size()) == 0);
    }
    check_peek(peek, slot, slot_size);
  } else {
    std::memcpy(slot + slot_size - rest.size(), rest.data(), rest.size());
    check_peek(ring_peek(slot, slot_size), slot, slot_size);
  }
  ring_clear(slot, slot_size);
  FUZZ_CHECK(ring_peek(slot, slot_size).status == RingPeek::kEmpty);
  return 0;
}
