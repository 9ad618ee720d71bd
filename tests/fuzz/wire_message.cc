// Fuzzes a received message as every receive path first sees it: validate() (protocol/wire.h)
// on the whole buffer, as on_data_message, on_ctrl_message and poll_ring run it, then the parse
// deliver() gives an accepted message of each kind: its body, a kBatch's records, a kMatchAck's
// cookie, a kRingOffer's geometry, a kConnect's body and address.
#include <cstring>

#include "batch_check.h"
#include "fuzz_check.h"
#include "protocol/connect.h"
#include "protocol/ring.h"
#include "protocol/sync_cookie.h"
#include "protocol/wire.h"
#include "rendezvous/transfer_id.h"

namespace {

using namespace rdmx::protocol;
using rdmx::fuzz::check_batch;

void check_transfer_word(std::uint32_t word) {
  using namespace rdmx::rendezvous;
  FUZZ_CHECK(encode_transfer(decode_transfer(word)) == word);
  FUZZ_CHECK(is_valid_transfer(word) == (decode_transfer(word).generation != 0));
}

// What deliver() and the rendezvous engine read from an accepted message of `kind`.
void check_kind(const MsgHeader& h, std::span<const std::byte> msg) {
  const auto kind = static_cast<MsgKind>(h.kind);
  const std::byte* body = msg.data() + kHeaderSize;
  const auto payload = msg.subspan(kHeaderSize + body_size(kind));
  FUZZ_CHECK(payload.size() == h.payload_length);
  switch (kind) {
    case MsgKind::kRts:
      check_transfer_word(load_wire<RtsBody>(body).sender_slot);
      break;
    case MsgKind::kCts: {
      const auto c = load_wire<CtsBody>(body);
      check_transfer_word(c.sender_slot);
      check_transfer_word(c.receiver_slot);
      break;
    }
    case MsgKind::kFin: {
      const auto f = load_wire<FinBody>(body);
      check_transfer_word(f.sender_slot);
      check_transfer_word(f.receiver_slot);
      break;
    }
    case MsgKind::kRndvData:
      check_transfer_word(load_wire<DataBody>(body).receiver_slot);
      break;
    case MsgKind::kRingOffer: {
      const auto r = load_wire<RingBody>(body);
      if (ring_geometry_ok(r.slots, r.slot_size)) {
        // What the sender then writes must fit a slot it may use.
        FUZZ_CHECK(ring_image_size(kHeaderSize) <= r.slot_size);
        FUZZ_CHECK(std::uint64_t{r.slots} * r.slot_size <= kRingMaxSlots * kRingMaxSlot);
      }
      break;
    }
    case MsgKind::kBatch:
      (void)check_batch(payload, h.aux);
      break;
    case MsgKind::kMatchAck: {
      const SyncCookie c = decode_sync_cookie(h.aux);
      FUZZ_CHECK(c.thread < kSyncCookieThreads && c.slot < kSyncCookieSlots);
      FUZZ_CHECK(encode_sync_cookie(c) == h.aux);
      break;
    }
    case MsgKind::kConnect: {
      ConnectBody b{};
      WorkerAddress a;
      if (decode_connect(h, msg, &b, &a)) {
        FUZZ_CHECK(std::memcmp(&b, body, sizeof(b)) == 0);
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto msg = rdmx::fuzz::as_bytes(data, size);
  MsgHeader h;
  std::memset(&h, 0x5a, sizeof(h));
  const MsgHeader untouched = h;
  const WireError e = validate(msg, &h);
  if (size < kHeaderSize) {
    FUZZ_CHECK(e == WireError::kTruncated);
    FUZZ_CHECK(std::memcmp(&h, &untouched, sizeof(h)) == 0);
    return 0;
  }
  FUZZ_CHECK(std::memcmp(&h, data, kHeaderSize) == 0);
  FUZZ_CHECK(validate(h, size) == e);
  if (e != WireError::kOk) {
    return 0;
  }
  // Accepted: a known kind, version and flags, and lengths that add up to exactly the bytes
  // received, so no reader of header, body or payload leaves the buffer.
  FUZZ_CHECK(h.version == kWireVersion);
  FUZZ_CHECK(h.kind != 0 && h.kind < kMsgKindCount);
  FUZZ_CHECK((h.flags & ~kKnownFlags) == 0);
  const auto kind = static_cast<MsgKind>(h.kind);
  FUZZ_CHECK(kind != MsgKind::kAck || (h.flags & kFlagAckValid) != 0);
  FUZZ_CHECK(carries_payload(kind) || h.payload_length == 0);
  FUZZ_CHECK(wire_size(kind, h.payload_length) == size);
  // The same header with any other length is rejected, also one 2^32 bytes longer (a
  // payload_length compared in 32 bits would wrap).
  FUZZ_CHECK(validate(h, size - 1) != WireError::kOk);
  FUZZ_CHECK(validate(h, size + 1) != WireError::kOk);
  FUZZ_CHECK(validate(h, size + (std::size_t{1} << 32)) != WireError::kOk);
  check_kind(h, msg);
  return 0;
}
