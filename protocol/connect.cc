#include "protocol/connect.h"

#include "rdmx/rdmx.h"

namespace rdmx::protocol {

bool decode_connect(const MsgHeader& h, std::span<const std::byte> message, ConnectBody* body,
                    WorkerAddress* from) noexcept {
  if (h.kind != static_cast<std::uint8_t>(MsgKind::kConnect) ||
      h.payload_length != sizeof(ConnectBody) ||
      message.size() != kHeaderSize + sizeof(ConnectBody)) {
    return false;
  }
  const auto b = load_wire<ConnectBody>(message.data() + kHeaderSize);
  WorkerAddress a;
  if (decode_address(b.address, kAddressSize, &a) != RDMX_OK) {
    return false;
  }
  *body = b;
  *from = a;
  return true;
}

}  // namespace rdmx::protocol
