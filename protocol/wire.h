// The rdmx wire format: a fixed 32-byte header in front of every message, then a kind-specific
// body (rendezvous and FIN messages only), then payload.
//
//  byte 0        1        2                 4                                   8
//      +--------+--------+-----------------+-----------------------------------+
//    0 | version|  kind  |      flags      |              src_ep               |
//      +--------+--------+-----------------+-----------------------------------+
//    8 |       seq       |       ack       |          payload_length           |
//      +-----------------+-----------------+-----------------------------------+
//   16 |                                  tag                                  |
//      +-----------------------------------+-----------------------------------+
//   24 |                aux                |             ring_ack              |
//      +-----------------------------------+-----------------------------------+
//   32   body (sizeof RtsBody / CtsBody / FinBody / DataBody, or nothing), then payload_length
//        bytes
//
// Byte order: little-endian. rdmx targets x86-64 (and little-endian aarch64) hosts only, so the
// structs below are memcpy'd to and from the wire as they are; a static_assert stops a
// big-endian build, which would need byte swaps in load/store.
//
// Alignment: 32 bytes keeps the payload 8-byte aligned after the header, and also on UD where
// the header starts after the 40-byte GRH.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

namespace rdmx::protocol {

static_assert(std::endian::native == std::endian::little,
              "rdmx wire structs are little-endian and copied as-is: add byte swaps to port");

// Bumped on any incompatible change to a header, a body or the meaning of a field.
// 2: kRndvData, CtsBody.flags, FinBody.flags (rendezvous). 3: kBatch (coalesced eager sends).
// 4: kRingOffer and ring_ack (the RDMA-write eager ring, ring.h). 5: RtsBody.rkey/addr,
// kCtsFlagRead, kFinFlagReadDone (the receiver reads a share of a rendezvous message).
// 6: kRndvImm (the shared-memory channel's write-with-immediate). 7: kRingWithdraw,
// kRingReleased (a worker that sleeps takes its eager rings back). 8: the ring footer's check
// (ring_check, ring.h): a peer of 7 would never see our ring messages complete.
inline constexpr std::uint8_t kWireVersion = 8;

enum class MsgKind : std::uint8_t {
  kInvalid = 0,        // a zeroed buffer must never validate
  kEager = 1,          // tagged data, payload follows the header
  kEagerSync = 2,      // tagged data for MPI_Ssend: the receiver answers kMatchAck once matched
  kAck = 3,            // stand-alone cumulative ack (UD), not sequenced, never retransmitted
  kMatchAck = 4,       // "your kEagerSync was matched": aux = sender's request slot (echoed)
  kRts = 5,            // rendezvous request-to-send, tagged; body RtsBody
  kCts = 6,            // rendezvous clear-to-send; body CtsBody
  kFin = 7,            // rendezvous finished or failed; body FinBody
  kConnect = 8,        // connection set-up (UD -> RC wire-up); payload is transport-defined
  kDisconnect = 9,     // the sender is tearing the connection down; nothing follows
  kRndvData = 10,      // rendezvous copy path: bytes of a granted message; body DataBody
  kBatch = 11,         // several kEager messages in one (batch.h): aux = their count
  kRingOffer = 12,     // RC: "write your small messages into this ring of mine"; body RingBody
  kRndvImm = 13,       // shared memory: the last rendezvous write is in place; aux = its imm (host
                       // order), what IBV_WC_RECV_RDMA_WITH_IMM carries over the device
  kRingWithdraw = 14,  // RC: "write no more into the ring I gave you"; answered by kRingReleased
  kRingReleased = 15,  // RC: "I write no more into your ring": every message I wrote there has
                       // a Seq before this one's
};
inline constexpr std::uint8_t kMsgKindCount = 16;  // one past the last valid kind

std::string_view to_string(MsgKind kind) noexcept;

// Header flags. Unknown bits are rejected by validate(): new flags need a new version.
inline constexpr std::uint16_t kFlagAckValid = 1u << 0;    // `ack` holds a cumulative ack
inline constexpr std::uint16_t kFlagAckRequest = 1u << 1;  // please ack now (e.g. last in window)
inline constexpr std::uint16_t kFlagRingAck = 1u << 2;     // `ring_ack` is valid
inline constexpr std::uint16_t kKnownFlags = kFlagAckValid | kFlagAckRequest | kFlagRingAck;

struct MsgHeader {
  // kWireVersion of the sender; a receiver rejects any other (see validate()).
  std::uint8_t version;
  // A MsgKind value.
  std::uint8_t kind;
  // kFlag* bits.
  std::uint16_t flags;
  // Sender's job-wide endpoint id (its index in the address exchange, e.g. the world rank).
  // UD completions carry no connection, and SRQ completions are shared by all peers, so the
  // receiver finds the peer from this field.
  std::uint32_t src_ep;
  // Per-peer, per-direction sequence number (16-bit serial arithmetic, see serial.h). Every kind
  // except kAck consumes one: it orders matching (MPI non-overtaking, also across the two RC QPs
  // of a peer) and is the UD reliability PSN. Ignored for kAck.
  std::uint16_t seq;
  // Cumulative ack for the reverse direction: every seq up to and including `ack` has been
  // received. Valid only with kFlagAckValid (UD piggy-backs it on every message).
  std::uint16_t ack;
  // Bytes of payload after the header and the kind's body. 0 for kinds without payload.
  std::uint32_t payload_length;
  // 64-bit match bits (context id and MPI tag, laid out by the MTL). kEager, kEagerSync, kRts.
  std::uint64_t tag;
  // Kind-specific 32-bit word. kEagerSync: sender's request slot, echoed in kMatchAck. kCts (UD
  // mode): the QPN of the receiver's RC QP for rendezvous writes from this sender, 0 if none
  // (a sender connected to another QP of the receiver knows its connection is stale).
  std::uint32_t aux;
  // With kFlagRingAck (RC): how many messages the sender of this header has taken, in all, from
  // the ring it gave the receiver (kRingOffer), mod 2^32: the receiver may fill that many slots
  // again. Zero otherwise.
  std::uint32_t ring_ack;
};

// kRts: the sender has total_length bytes for the tag in the header. With a non-zero rkey the
// sender's buffer is registered for remote reads at `addr`, so the receiver may read a share of
// the message itself (kCtsFlagRead).
struct RtsBody {
  std::uint64_t total_length;  // whole message size in bytes
  std::uint32_t sender_slot;   // sender's request slot, echoed in CTS and FIN
  std::uint32_t rkey;          // remote-read key of the sender's buffer, 0: no reads
  std::uint64_t addr;          // the sender's buffer (byte 0 of the message)
};

// kCts: the receiver grants [offset, offset + granted_length) of the message to be written at
// remote_addr with rkey. One CTS per fragment lets a later version pipeline large messages.
// granted_length < the message's length means the receive buffer is shorter (truncation).
struct CtsBody {
  std::uint64_t remote_addr;     // receiver's buffer address for byte `offset`
  std::uint64_t offset;          // first message byte this grant covers
  std::uint64_t granted_length;  // bytes the sender may write
  std::uint32_t rkey;            // memory key of the receiver's registered buffer
  std::uint32_t sender_slot;     // from RtsBody
  std::uint32_t receiver_slot;   // receiver's request slot (e.g. the write-with-imm immediate)
  std::uint32_t flags;           // kCtsFlag* bits; unknown bits: the CTS is dropped
};

// The receiver could not register its buffer (remote_addr and rkey are 0): send the granted bytes
// as kRndvData messages instead of RDMA writes.
inline constexpr std::uint32_t kCtsFlagCopy = 1u << 0;
// The receiver reads [0, offset) itself from the RTS's addr and rkey, and tells the sender with
// a FIN (status 0, kFinFlagReadDone) once those reads are done; the sender writes the rest.
inline constexpr std::uint32_t kCtsFlagRead = 1u << 1;
inline constexpr std::uint32_t kCtsKnownFlags = kCtsFlagCopy | kCtsFlagRead;

// kFin: rendezvous outcome, sent by whichever side fails (a successful transfer needs none: the
// write-with-imm or the last kRndvData completes the receiver), and the receiver's "my reads
// of your buffer are done" (status 0, kFinFlagToSender | kFinFlagReadDone).
struct FinBody {
  std::uint32_t sender_slot;
  std::uint32_t receiver_slot;
  std::int32_t status;  // 0 = success, otherwise a negative rdmx_code_t
  std::uint32_t flags;  // kFinFlag* bits
};

// Set: the FIN is for the sender's transfer (sender_slot); clear: for the receiver's.
inline constexpr std::uint32_t kFinFlagToSender = 1u << 0;
// With status 0: the receiver's reads of the sender's buffer (kCtsFlagRead) have completed.
inline constexpr std::uint32_t kFinFlagReadDone = 1u << 1;

// kRingOffer: the sender of the offer has registered `slots` slots of `slot_size` bytes at
// `addr` (rkey `rkey`) for the receiver's small messages to it (ring.h has the slot layout).
struct RingBody {
  std::uint64_t addr;       // first slot
  std::uint32_t rkey;       // memory key of the ring, remote write
  std::uint32_t slots;      // >= 2
  std::uint32_t slot_size;  // bytes per slot, a multiple of 8
  std::uint32_t reserved;   // zero
};

// kRndvData: payload_length bytes of the message at `offset`, for the receiver's transfer
// `receiver_slot` (the copy path, used when a buffer cannot be registered or no RC connection
// is available for RDMA writes).
struct DataBody {
  std::uint64_t offset;         // first message byte carried
  std::uint32_t receiver_slot;  // from CtsBody
  std::uint32_t reserved;       // zero
};

inline constexpr std::size_t kHeaderSize = 32;
inline constexpr std::size_t kMaxBodySize = sizeof(CtsBody);

// Every struct is copied byte-for-byte: no padding, no pointers, no constructors.
static_assert(sizeof(MsgHeader) == kHeaderSize, "header is 32 bytes: it prefixes every message");
static_assert(alignof(MsgHeader) == 8);
static_assert(offsetof(MsgHeader, version) == 0);
static_assert(offsetof(MsgHeader, kind) == 1);
static_assert(offsetof(MsgHeader, flags) == 2);
static_assert(offsetof(MsgHeader, src_ep) == 4);
static_assert(offsetof(MsgHeader, seq) == 8);
static_assert(offsetof(MsgHeader, ack) == 10);
static_assert(offsetof(MsgHeader, payload_length) == 12);
static_assert(offsetof(MsgHeader, tag) == 16);
static_assert(offsetof(MsgHeader, aux) == 24);
static_assert(offsetof(MsgHeader, ring_ack) == 28);

static_assert(sizeof(RtsBody) == 24);
static_assert(offsetof(RtsBody, total_length) == 0);
static_assert(offsetof(RtsBody, sender_slot) == 8);
static_assert(offsetof(RtsBody, rkey) == 12);
static_assert(offsetof(RtsBody, addr) == 16);

static_assert(sizeof(CtsBody) == 40);
static_assert(offsetof(CtsBody, remote_addr) == 0);
static_assert(offsetof(CtsBody, offset) == 8);
static_assert(offsetof(CtsBody, granted_length) == 16);
static_assert(offsetof(CtsBody, rkey) == 24);
static_assert(offsetof(CtsBody, sender_slot) == 28);
static_assert(offsetof(CtsBody, receiver_slot) == 32);

static_assert(sizeof(FinBody) == 16);
static_assert(offsetof(FinBody, status) == 8);
static_assert(offsetof(FinBody, flags) == 12);

static_assert(sizeof(DataBody) == 16);
static_assert(offsetof(DataBody, offset) == 0);
static_assert(offsetof(DataBody, receiver_slot) == 8);

static_assert(sizeof(RingBody) == 24 && sizeof(RingBody) <= kMaxBodySize);
static_assert(offsetof(RingBody, rkey) == 8);
static_assert(offsetof(RingBody, slots) == 12);
static_assert(offsetof(RingBody, slot_size) == 16);

static_assert(std::is_trivially_copyable_v<MsgHeader> && std::is_standard_layout_v<MsgHeader>);
static_assert(std::is_trivially_copyable_v<RtsBody> && std::is_standard_layout_v<RtsBody>);
static_assert(std::is_trivially_copyable_v<CtsBody> && std::is_standard_layout_v<CtsBody>);
static_assert(std::is_trivially_copyable_v<FinBody> && std::is_standard_layout_v<FinBody>);
static_assert(std::is_trivially_copyable_v<DataBody> && std::is_standard_layout_v<DataBody>);
static_assert(std::is_trivially_copyable_v<RingBody> && std::is_standard_layout_v<RingBody>);
static_assert(kHeaderSize % 8 == 0 && (40 + kHeaderSize) % 8 == 0,
              "payload stays 8-byte aligned on RC and after the UD GRH");

// Bytes of kind-specific body between the header and the payload (0 for unknown kinds).
constexpr std::size_t body_size(MsgKind kind) noexcept {
  switch (kind) {
    case MsgKind::kRts:
      return sizeof(RtsBody);
    case MsgKind::kCts:
      return sizeof(CtsBody);
    case MsgKind::kFin:
      return sizeof(FinBody);
    case MsgKind::kRndvData:
      return sizeof(DataBody);
    case MsgKind::kRingOffer:
      return sizeof(RingBody);
    default:
      return 0;
  }
}

// Kinds that may carry payload bytes; all others must have payload_length == 0.
constexpr bool carries_payload(MsgKind kind) noexcept {
  return kind == MsgKind::kEager || kind == MsgKind::kEagerSync || kind == MsgKind::kConnect ||
         kind == MsgKind::kRndvData || kind == MsgKind::kBatch;
}

// Kinds that consume a per-peer sequence number (and so are ordered and, on UD, retransmitted).
constexpr bool is_sequenced(MsgKind kind) noexcept {
  const auto k = static_cast<std::uint8_t>(kind);
  return k != 0 && k < kMsgKindCount && kind != MsgKind::kAck;
}

// Kinds that go through tag matching.
constexpr bool is_tagged(MsgKind kind) noexcept {
  return kind == MsgKind::kEager || kind == MsgKind::kEagerSync || kind == MsgKind::kRts;
}

// Total on-wire bytes for a message of this kind with payload_length bytes of payload.
constexpr std::size_t wire_size(MsgKind kind, std::size_t payload_length) noexcept {
  return kHeaderSize + body_size(kind) + payload_length;
}

// A header with version, kind and everything else zeroed; callers fill the rest.
constexpr MsgHeader make_header(MsgKind kind) noexcept {
  return MsgHeader{.version = kWireVersion,
                   .kind = static_cast<std::uint8_t>(kind),
                   .flags = 0,
                   .src_ep = 0,
                   .seq = 0,
                   .ack = 0,
                   .payload_length = 0,
                   .tag = 0,
                   .aux = 0,
                   .ring_ack = 0};
}

enum class WireError : std::uint8_t {
  kOk = 0,
  kTruncated,       // fewer bytes than a header, or than header + body
  kBadVersion,      // version != kWireVersion
  kBadKind,         // kind outside MsgKind
  kBadFlags,        // unknown flag bits, or kAck without kFlagAckValid
  kLengthMismatch,  // header + body + payload_length != received bytes, or payload on a kind
                    // that has none
};

std::string_view to_string(WireError error) noexcept;

// Checks a received message of `received_bytes` bytes (UD: wc.byte_len minus the 40-byte GRH)
// whose header has already been copied out. The checks run in the order of the enum so a
// header from a newer version is reported as kBadVersion, not as a bad kind. Inline: every
// received message passes through it.
inline WireError validate(const MsgHeader& header, std::size_t received_bytes) noexcept {
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

// Same, straight from the receive buffer; copies the header out into *header_out when the
// buffer holds at least a header (so the caller can log what it rejected).
WireError validate(std::span<const std::byte> message, MsgHeader* header_out) noexcept;

// Reads a header or body from a receive buffer of any alignment (memcpy compiles to plain loads).
template <class T>
T load_wire(const std::byte* src) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  T value{};
  std::memcpy(&value, src, sizeof(T));
  return value;
}

template <class T>
void store_wire(std::byte* dst, const T& value) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(dst, &value, sizeof(T));
}

}  // namespace rdmx::protocol
