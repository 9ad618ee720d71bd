#include "plugin/ucx/tl_address.h"

#include "protocol/le_bytes.h"
#include "rdmx/rdmx.h"

namespace rdmx::ucx {
using protocol::LeReader;
using protocol::LeWriter;

bool split_address(const void* blob, std::size_t length, std::uint8_t* device,
                   std::uint8_t* iface) noexcept {
  protocol::WorkerAddress a;
  if (protocol::decode_address(blob, length, &a) != RDMX_OK || (a.caps & protocol::kCapShm)) {
    return false;
  }
  LeWriter d(device);
  d.bytes(a.gid.data(), a.gid.size());
  d.put(a.lid);
  d.put(a.link_layer);
  d.put(a.port);
  d.put(a.mtu);
  LeWriter i(iface);
  i.put(a.transport);
  i.put(a.caps);
  i.put(a.rd_atomic);
  i.put(a.uid);
  i.put(a.instance);
  i.put(a.ctrl_qpn);
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    i.put(a.ud_qpn[c]);
  }
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    i.put(a.class_capacity[c]);
  }
  i.put(a.max_inline);
  return true;
}

bool join_address(const std::uint8_t* device, const std::uint8_t* iface,
                  protocol::AddressBytes* blob) noexcept {
  protocol::WorkerAddress a;
  LeReader d(device);
  d.bytes(a.gid.data(), a.gid.size());
  a.lid = d.get<std::uint16_t>();
  a.link_layer = d.get<std::uint8_t>();
  a.port = d.get<std::uint8_t>();
  a.mtu = d.get<std::uint32_t>();
  LeReader i(iface);
  a.transport = i.get<std::uint8_t>();
  a.caps = i.get<std::uint8_t>();
  a.rd_atomic = i.get<std::uint8_t>();
  a.uid = i.get<std::uint64_t>();
  a.instance = i.get<std::uint64_t>();
  a.ctrl_qpn = i.get<std::uint32_t>();
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    a.ud_qpn[c] = i.get<std::uint32_t>();
  }
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    a.class_capacity[c] = i.get<std::uint32_t>();
  }
  a.max_inline = i.get<std::uint32_t>();
  *blob = protocol::encode_address(a);
  // The decoder's consistency checks are the rules for a blob: what it refuses, rdmx would.
  protocol::WorkerAddress check;
  return protocol::decode_address(blob->data(), blob->size(), &check) == RDMX_OK;
}

}  // namespace rdmx::ucx
