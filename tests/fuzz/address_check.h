// What a decoded worker address (protocol/address.h) must satisfy, whoever decoded it: the
// worker_address and connect_message targets share it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "protocol/address.h"
#include "rdmx/rdmx.h"

namespace rdmx::fuzz {

// `blob`: the kAddressSize bytes decode_address accepted as `a`.
inline void check_address(const std::uint8_t* blob, const protocol::WorkerAddress& a) {
  using namespace protocol;
  // The rules the transport then relies on (a QPN it can put in an address handle, a capacity
  // per class that picks the class, at least one RDMA read in flight).
  FUZZ_CHECK(a.transport == RDMX_TRANSPORT_RC || a.transport == RDMX_TRANSPORT_UD);
  FUZZ_CHECK(a.ctrl_qpn != 0 && a.ctrl_qpn < (1u << 24));
  FUZZ_CHECK(a.transport != RDMX_TRANSPORT_UD || (a.caps & kCapUd) != 0);
  FUZZ_CHECK(a.class_capacity[0] != 0 && a.class_capacity[0] < a.class_capacity[1]);
  FUZZ_CHECK(a.mtu >= 256 && a.port != 0 && a.rd_atomic != 0);
  FUZZ_CHECK(a.uid != 0 && a.uid != RDMX_ANY_SOURCE);
  // decode(encode(a)) == a, and encode(a) is the blob but for the bytes the decoder skips: the
  // pad after the link layer (byte 43) and the reserved bytes after rd atomic (73..75).
  const AddressBytes again = encode_address(a);
  for (std::size_t i = 0; i < kAddressSize; ++i) {
    FUZZ_CHECK(i == 43 || (i >= 73 && i < 76) || again[i] == blob[i]);
  }
  WorkerAddress b;
  FUZZ_CHECK(decode_address(again.data(), again.size(), &b) == RDMX_OK && b == a);
}

}  // namespace rdmx::fuzz
