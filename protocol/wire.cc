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

WireError validate(const MsgHeader& header, std::size_t received_bytes) noexcept {
  if (received_bytes < kHeaderSize) {
    return WireError::kTruncated;
  }
  if (header.version != kWireVersion) {
    return WireError::kBadVersion;
  }
  if (header.kind == 0 || header.kind >= kMsgKindCount) {
    return WireError::kBadKind;
  }
  const auto kind = static_cast<MsgKind>(header.kind);
  if ((header.flags & ~kKnownFlags) != 0) {
    return WireError::kBadFlags;
  }
  // A stand-alone ack exists only to carry `ack`.
  if (kind == MsgKind::kAck && (header.flags & kFlagAckValid) == 0) {
    return WireError::kBadFlags;
  }
  const std::size_t fixed = kHeaderSize + body_size(kind);
  if (received_bytes < fixed) {
    return WireError::kTruncated;
  }
  if (!carries_payload(kind) && header.payload_length != 0) {
    return WireError::kLengthMismatch;
  }
  // Exact equality: a short message would make us read stale buffer bytes as payload, and a
  // long one means sender and receiver disagree on the layout.
  if (received_bytes - fixed != header.payload_length) {
    return WireError::kLengthMismatch;
  }
  return WireError::kOk;
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
