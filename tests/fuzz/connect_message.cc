// Fuzzes a control-QP message as on_ctrl_message (transport/wireup.cc) parses it: validate(),
// then decode_connect (protocol/connect.h), which takes the ConnectBody and decodes the
// sender's address blob inside it. A rejected message leaves the outputs untouched; an accepted
// one is exactly a header and a ConnectBody, and its address is what decode_address makes of
// the blob.
#include <cstring>

#include "address_check.h"
#include "fuzz_check.h"
#include "protocol/connect.h"
#include "protocol/wire.h"

using namespace rdmx::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kHeaderSize) {
    return 0;  // on_ctrl_message drops it before reading a header
  }
  const auto msg = rdmx::fuzz::as_bytes(data, size);
  const auto h = load_wire<MsgHeader>(msg.data());
  if (validate(h, size) != WireError::kOk) {
    return 0;
  }
  ConnectBody body;
  std::memset(&body, 0x5a, sizeof(body));
  const ConnectBody body_before = body;
  WorkerAddress from;
  from.uid = 0x5a5a5a5a5a5a5a5aull;
  const WorkerAddress from_before = from;
  if (!decode_connect(h, msg, &body, &from)) {
    FUZZ_CHECK(std::memcmp(&body, &body_before, sizeof(body)) == 0);
    FUZZ_CHECK(from == from_before);
    return 0;
  }
  FUZZ_CHECK(h.kind == static_cast<std::uint8_t>(MsgKind::kConnect));
  FUZZ_CHECK(h.payload_length == sizeof(ConnectBody));
  FUZZ_CHECK(size == kHeaderSize + sizeof(ConnectBody));
  FUZZ_CHECK(std::memcmp(&body, data + kHeaderSize, sizeof(body)) == 0);
  WorkerAddress a;
  FUZZ_CHECK(decode_address(body.address, kAddressSize, &a) == RDMX_OK && a == from);
  rdmx::fuzz::check_address(body.address, from);
  return 0;
}
