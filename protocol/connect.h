// kConnect: the control-QP message (UD, one per worker) that sets up and watches connections.
// Its header is the common 32-byte one (wire.h, kind kConnect); this is the body after it.
//
//  byte 0      1          2               4                       8
//      +------+----------+---------------+-----------------------+
//    0 |  op  | transport|  rc_credits   |     sender_index      |
//      +------+----------+---------------+-----------------------+
//    8 |                      target_uid                         |
//   16 |                    target_instance                      |
//      +-----------------------------+---------------------------+
//   24 |        rc_qpn[0]            |        rc_qpn[1]          |
//   32 |        rc_psn[0]            |        rc_psn[1]          |
//      +-----------------------------+---------------------------+
//   40 | address: the sender's worker address blob (address.h), kAddressSize bytes
//  144 end
//
// - op: what the message is (connect_op). transport: the sender's (1 RC, 2 UD).
// - rc_credits: RC, the first credit limit the sender grants the receiver.
// - sender_index: the sender's index for the receiver (the src_ep the receiver must use).
// - target_uid / target_instance: whom it is for (instance 0: not known yet). A message for an
//   earlier incarnation of a worker is dropped.
// - rc_qpn / rc_psn: kRequest, kReply: the sender's RC QP per size class and its first PSN.
//   kWqpRequest, kWqpReply: [0] the sender's write QP and PSN (qpn 0 in a reply: refused),
//   rc_qpn[1] in a reply: the requester's QP it answers. kWqpClose: rc_qpn[0], the retired QP.
//
// Little-endian, copied with load_wire/store_wire as the other bodies are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "protocol/address.h"
#include "protocol/wire.h"

namespace rdmx::protocol {

// What a kConnect message is.
namespace connect_op {
inline constexpr std::uint8_t kRequest = 1;     // the endpoint handshake (wireup.cc)
inline constexpr std::uint8_t kReply = 2;       // its answer (sent again if the request repeats)
inline constexpr std::uint8_t kWqpRequest = 3;  // UD mode: an on-demand RC write QP, please
inline constexpr std::uint8_t kWqpReply = 4;    // its answer
inline constexpr std::uint8_t kWqpClose = 5;    // the sender retired its write QP
inline constexpr std::uint8_t kPing = 6;        // UD liveness: "are you there?" (liveness.cc)
inline constexpr std::uint8_t kPong = 7;        // its answer, from the peer's progress
}  // namespace connect_op

struct ConnectBody {
  std::uint8_t op;
  std::uint8_t transport;
  std::uint16_t rc_credits;
  std::uint32_t sender_index;
  std::uint64_t target_uid;
  std::uint64_t target_instance;
  std::uint32_t rc_qpn[kNumClasses];
  std::uint32_t rc_psn[kNumClasses];
  std::uint8_t address[kAddressSize];
};
static_assert(offsetof(ConnectBody, rc_credits) == 2 && offsetof(ConnectBody, sender_index) == 4);
static_assert(offsetof(ConnectBody, target_uid) == 8 &&
              offsetof(ConnectBody, target_instance) == 16);
static_assert(offsetof(ConnectBody, rc_qpn) == 24 && offsetof(ConnectBody, rc_psn) == 32);
static_assert(offsetof(ConnectBody, address) == 40 && sizeof(ConnectBody) == 144);
static_assert(kAddressSize % 8 == 0, "the body would end in padding");
static_assert(std::is_trivially_copyable_v<ConnectBody>);

// The body and the sender's address of a control message whose header `h` validate() accepted
// (`message`: all its bytes). False, with *body and *from untouched, unless it is a kConnect that
// carries exactly one ConnectBody whose address blob decodes. Whether it is for this worker
// (target_uid, target_instance) is the caller's to check. Apart from the transport so that
// tests/fuzz can run the receive path's parse without a device.
bool decode_connect(const MsgHeader& h, std::span<const std::byte> message, ConnectBody* body,
                    WorkerAddress* from) noexcept;

}  // namespace rdmx::protocol
