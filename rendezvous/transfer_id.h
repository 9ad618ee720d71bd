// The 32-bit name of one rendezvous transfer: the sender's in RtsBody/CtsBody/FinBody
// (sender_slot), the receiver's in CtsBody/FinBody (receiver_slot) and in the immediate data of
// the last RDMA write (IBV_WR_RDMA_WRITE_WITH_IMM), which is all the receiver's completion
// carries to find its request.
//
//    31               20 19                                       0
//   +-------------------+------------------------------------------+
//   |    generation     |                   slot                   |
//   |      12 bits      |                 20 bits                  |
//   +-------------------+------------------------------------------+
//
// - slot:       index in the owner's transfer table (up to 2^20 transfers in flight per side).
// - generation: bumped each time the slot is freed. A late or duplicated message (a CTS for a
//               send that already failed, an immediate for a receive torn down by a peer
//               failure) names an old generation and is dropped instead of hitting the slot's
//               next user. Generation 0 is never used, so the all-zero word never names a
//               transfer (a zeroed body or immediate cannot look valid).
//
// The immediate is carried in network byte order by the verbs (ibv_send_wr.imm_data and
// ibv_wc.imm_data are __be32): to_imm/from_imm convert, so a capture shows the same value.
#pragma once

#include <arpa/inet.h>

#include <cstdint>

namespace rdmx::rendezvous {

inline constexpr unsigned kTransferSlotBits = 20;
inline constexpr unsigned kTransferGenerationBits = 12;
inline constexpr std::uint32_t kMaxTransferSlots = 1u << kTransferSlotBits;
inline constexpr std::uint32_t kTransferSlotMask = kMaxTransferSlots - 1;
inline constexpr std::uint32_t kTransferGenerationMask = (1u << kTransferGenerationBits) - 1;
static_assert(kTransferSlotBits + kTransferGenerationBits == 32, "a transfer id is 32 bits");

// Never a valid id (generation 0).
inline constexpr std::uint32_t kNoTransfer = 0;

struct TransferId {
  std::uint32_t slot = 0;
  std::uint16_t generation = 0;  // 1 .. kTransferGenerationMask

  friend constexpr bool operator==(const TransferId&, const TransferId&) = default;
};

constexpr std::uint32_t encode_transfer(TransferId id) noexcept {
  return (std::uint32_t{id.generation} & kTransferGenerationMask) << kTransferSlotBits |
         (id.slot & kTransferSlotMask);
}

constexpr TransferId decode_transfer(std::uint32_t word) noexcept {
  return TransferId{.slot = word & kTransferSlotMask,
                    .generation = static_cast<std::uint16_t>(word >> kTransferSlotBits)};
}

// A word that may name a transfer (non-zero generation).
constexpr bool is_valid_transfer(std::uint32_t word) noexcept {
  return (word >> kTransferSlotBits) != 0;
}

// The generation after `g`, skipping 0.
constexpr std::uint16_t next_transfer_generation(std::uint16_t g) noexcept {
  const auto n = static_cast<std::uint16_t>((g + 1u) & kTransferGenerationMask);
  return n == 0 ? std::uint16_t{1} : n;
}

// ibv_send_wr.imm_data / ibv_wc.imm_data are big-endian on the wire and in the structs.
inline std::uint32_t to_imm(std::uint32_t word) noexcept {
  return htonl(word);
}
inline std::uint32_t from_imm(std::uint32_t imm_data) noexcept {
  return ntohl(imm_data);
}

}  // namespace rdmx::rendezvous
