#include "protocol/wire.h"

namespace rdmx::protocol {

std::string_view to_string(MsgKind kind) noexcept {
  switch (kind) {
    case MsgKind::kInvalid:
      return "invalid";
    case MsgKind::kEager:
      return "eager";
    case MsgKind::kEagerSync:
      return "eager_sync";
    case MsgKind::kAck:
      return "ack";
    case MsgKind::kMatchAck:
      return "match_ack";
    case MsgKind::kRts:
      return "rts";
    case MsgKind::kCts:
      return "cts";
    case MsgKind::kFin:
      return "fin";
    case MsgKind::kConnect:
      return "connect";
    case MsgKind::kDisconnect:
      return "disconnect";
    case MsgKind::kRndvData:
      return "rndv_data";
    case MsgKind::kBatch:
      return "batch";
    case MsgKind::kRingOffer:
      return "ring_offer";
    case MsgKind::kRndvImm:
      return "rndv_imm";
    case MsgKind::kRingWithdraw:
      return "ring_withdraw";
    case MsgKind::kRingReleased:
      return "ring_released";
  }
  return "unknown";
}

std::string_view to_string(WireError error) noexcept {
  switch (error) {
    case WireError::kOk:
      return "ok";
    case WireError::kTruncated:
      return "truncated";
    case WireError::kBadVersion:
      return "bad version";
    case WireError::kBadKind:
      return "bad kind";
    case WireError::kBadFlags:
      return "bad flags";
    case WireError::kLengthMismatch:
      return "length mismatch";
  }
  return "unknown";
}

WireError validate(std::span<const std::byte> message, MsgHeader* header_out) noexcept {
  if (message.size() < kHeaderSize) {
    return WireError::kTruncated;
  }
  const auto header = load_wire<MsgHeader>(message.data());
  if (header_out != nullptr) {
    *header_out = header;
  }
  return validate(header, message.size());
}

}  // namespace rdmx::protocol
