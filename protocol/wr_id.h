// The one definition of the 64-bit ibv_send_wr/ibv_recv_wr wr_id used by every rdmx work request.
//
// Any thread that polls a CQ must be able to route a completion from wr_id alone: no lookup by
// qp_num, no pointer chasing into memory that may already be recycled. So the wr_id carries
// what kind of work request it was, which thread posted it (its per-thread resources own the
// slot), a generation and the slot index.
//
//    63    60 59          48 47                          32 31                                  0
//   +--------+--------------+------------------------------+------------------------------------+
//   |  kind  |    thread    |          generation          |                slot                |
//   | 4 bits |   12 bits    |           16 bits            |              32 bits               |
//   +--------+--------------+------------------------------+------------------------------------+
//
// - kind:       WrKind below. 0 (kNone) and 15 (kInvalid) are never encoded, so a zeroed wr_id
//               and the all-ones sentinel kInvalidWrId both decode as "not ours".
// - thread:     index of the posting thread's resources (up to 4096 threads).
// - generation: bumped by the owner each time the QP (or slot) behind the wr_id is destroyed or
//               reused. Completions of a destroyed QP can still be polled after a new QP reuses
//               its number; the poller compares the generation and drops stale ones.
// - slot:       buffer index (receives) or request/bounce-buffer index (sends, RDMA writes).
//               The low 32 bits, so extracting it is a plain truncation.
#pragma once

#include <cstdint>

namespace rdmx::protocol {

// What a completion belongs to. Values are stable: they are compared in CQ pollers.
enum class WrKind : std::uint8_t {
  kNone = 0,          // reserved: a zero-initialised wr_id must never look valid
  kSrqRecv = 1,       // receive buffer posted to an RC shared receive queue
  kUdRecv = 2,        // receive buffer posted for a UD QP; payload starts after the 40-byte GRH
  kSend = 3,          // signalled send from a request or bounce slot
  kSendInline = 4,    // unsignalled/inline send: completes only with an error (e.g. flush)
  kRdmaWrite = 5,     // rendezvous RDMA write fragment
  kRdmaWriteImm = 6,  // last rendezvous fragment, write-with-immediate
  kControl = 7,       // control message send (ack, CTS, match-ack, FIN, connect)
  kRdmaRead = 8,      // rendezvous RDMA read (the receiver's read share)
  kRma = 9,           // a C API request's own WR: rdmx_put, rdmx_get, rdmx_tag_send_zcopy
  // 10..14: room for new kinds.
  kInvalid = 15,  // reserved: the kind field of kInvalidWrId
};

inline constexpr unsigned kWrKindBits = 4;
inline constexpr unsigned kWrThreadBits = 12;
inline constexpr unsigned kWrGenerationBits = 16;
inline constexpr unsigned kWrSlotBits = 32;

inline constexpr unsigned kWrSlotShift = 0;
inline constexpr unsigned kWrGenerationShift = kWrSlotShift + kWrSlotBits;
inline constexpr unsigned kWrThreadShift = kWrGenerationShift + kWrGenerationBits;
inline constexpr unsigned kWrKindShift = kWrThreadShift + kWrThreadBits;

// Right-aligned masks (apply after shifting the field down).
inline constexpr std::uint64_t kWrKindMask = (std::uint64_t{1} << kWrKindBits) - 1;
inline constexpr std::uint64_t kWrThreadMask = (std::uint64_t{1} << kWrThreadBits) - 1;
inline constexpr std::uint64_t kWrGenerationMask = (std::uint64_t{1} << kWrGenerationBits) - 1;
inline constexpr std::uint64_t kWrSlotMask = (std::uint64_t{1} << kWrSlotBits) - 1;

inline constexpr std::uint32_t kWrMaxThread = static_cast<std::uint32_t>(kWrThreadMask);
inline constexpr std::uint32_t kWrMaxGeneration = static_cast<std::uint32_t>(kWrGenerationMask);
inline constexpr std::uint32_t kWrMaxSlot = static_cast<std::uint32_t>(kWrSlotMask);

// Never produced by encode(): it has kind kInvalid. Use it to mark "no work request".
inline constexpr std::uint64_t kInvalidWrId = ~std::uint64_t{0};

static_assert(kWrKindBits + kWrThreadBits + kWrGenerationBits + kWrSlotBits == 64,
              "wr_id fields must use exactly the 64 bits of wr_id");
static_assert(kWrKindShift + kWrKindBits == 64, "kind must occupy the top bits");
static_assert(static_cast<std::uint64_t>(WrKind::kInvalid) == kWrKindMask,
              "kInvalid must be the all-ones kind so that kInvalidWrId decodes as invalid");
static_assert(kWrMaxThread + 1 >= 256, "at least 256 posting threads must be addressable");
static_assert(kWrSlotBits == 32, "slot is a full uint32_t: WrId::slot needs no range check");

struct WrId {
  WrKind kind = WrKind::kNone;
  std::uint16_t thread = 0;      // < 2^kWrThreadBits
  std::uint16_t generation = 0;  // exactly kWrGenerationBits wide
  std::uint32_t slot = 0;

  friend constexpr bool operator==(const WrId&, const WrId&) = default;
};
static_assert(kWrGenerationBits == 16, "WrId::generation is a uint16_t");

// A kind that encode() accepts: everything except the two reserved values.
constexpr bool is_encodable_kind(WrKind kind) noexcept {
  const auto k = static_cast<std::uint64_t>(kind);
  return k > static_cast<std::uint64_t>(WrKind::kNone) &&
         k < static_cast<std::uint64_t>(WrKind::kInvalid);
}

// True when encode(id) round-trips exactly; check it where ids are built from runtime values
// (thread registration, slot pool creation), not per message.
constexpr bool is_encodable(const WrId& id) noexcept {
  return is_encodable_kind(id.kind) && id.thread <= kWrMaxThread;
}

// Precondition: is_encodable(id). Each field is masked to its width so an out-of-range value
// can never bleed into a neighbour; with a valid kind the result can never equal kInvalidWrId
// (kind bits != 1111) nor look like a zeroed wr_id (kind bits != 0000).
constexpr std::uint64_t encode(const WrId& id) noexcept {
  return ((static_cast<std::uint64_t>(id.kind) & kWrKindMask) << kWrKindShift) |
         ((std::uint64_t{id.thread} & kWrThreadMask) << kWrThreadShift) |
         ((std::uint64_t{id.generation} & kWrGenerationMask) << kWrGenerationShift) |
         ((std::uint64_t{id.slot} & kWrSlotMask) << kWrSlotShift);
}

// encode() of a WrId whose kind is kNone, given its kind: for owners that keep the rest of a
// slot's wr_id from one use to the next (eager/send_pool.h). Precondition: is_encodable_kind.
constexpr std::uint64_t with_kind(std::uint64_t base, WrKind kind) noexcept {
  return base | ((static_cast<std::uint64_t>(kind) & kWrKindMask) << kWrKindShift);
}

constexpr WrId decode(std::uint64_t wr_id) noexcept {
  return WrId{
      .kind = static_cast<WrKind>((wr_id >> kWrKindShift) & kWrKindMask),
      .thread = static_cast<std::uint16_t>((wr_id >> kWrThreadShift) & kWrThreadMask),
      .generation = static_cast<std::uint16_t>((wr_id >> kWrGenerationShift) & kWrGenerationMask),
      .slot = static_cast<std::uint32_t>((wr_id >> kWrSlotShift) & kWrSlotMask),
  };
}

// Cheap pre-dispatch check for pollers: rejects kInvalidWrId, zero and reserved kinds.
constexpr bool is_valid_wr_id(std::uint64_t wr_id) noexcept {
  return is_encodable_kind(static_cast<WrKind>((wr_id >> kWrKindShift) & kWrKindMask));
}

// The kind alone, without decoding the other fields (the first switch in a CQ poller).
constexpr WrKind wr_kind(std::uint64_t wr_id) noexcept {
  return static_cast<WrKind>((wr_id >> kWrKindShift) & kWrKindMask);
}

// Generations wrap inside their field; owners use this so the wrap is the same everywhere.
constexpr std::uint16_t next_generation(std::uint16_t generation) noexcept {
  return static_cast<std::uint16_t>((generation + 1u) & kWrGenerationMask);
}

}  // namespace rdmx::protocol
