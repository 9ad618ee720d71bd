#include "protocol/address.h"

#include <cstring>

#include "protocol/le_bytes.h"
#include "rdmx/rdmx.h"

namespace rdmx::protocol {

AddressBytes encode_address(const WorkerAddress& a) noexcept {
  AddressBytes out{};
  LeWriter w(out.data());
  w.put<std::uint32_t>(kAddressMagic);
  w.put<std::uint8_t>(kAddressVersion);
  w.put<std::uint8_t>(a.transport);
  w.put<std::uint8_t>(a.port);
  w.put<std::uint8_t>(a.caps);
  w.put<std::uint64_t>(a.uid);
  w.put<std::uint64_t>(a.instance);
  w.bytes(a.gid.data(), a.gid.size());
  w.put<std::uint16_t>(a.lid);
  w.put<std::uint8_t>(a.link_layer);
  w.put<std::uint8_t>(0);
  w.put<std::uint32_t>(a.mtu);
  w.put<std::uint32_t>(a.ctrl_qpn);
  for (const auto q : a.ud_qpn) {
    w.put<std::uint32_t>(q);
  }
  for (const auto c : a.class_capacity) {
    w.put<std::uint32_t>(c);
  }
  w.put<std::uint32_t>(a.max_inline);
  w.put<std::uint8_t>(a.rd_atomic);
  w.put<std::uint16_t>(0);  // reserved (24)
  w.put<std::uint8_t>(0);
  w.put<std::uint64_t>(a.node_id);
  w.put<std::uint32_t>(a.pid);
  w.bytes(reinterpret_cast<const std::uint8_t*>(a.device.data()), a.device.size());
  return out;
}

int decode_address(const void* data, std::size_t length, WorkerAddress* out) noexcept {
  if (data == nullptr || out == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (length < 5) {
    return RDMX_ERR_BAD_ADDRESS;
  }
  LeReader r(static_cast<const std::uint8_t*>(data));
  if (r.get<std::uint32_t>() != kAddressMagic) {
    return RDMX_ERR_BAD_ADDRESS;
  }
  if (r.get<std::uint8_t>() != kAddressVersion || length != kAddressSize) {
    return RDMX_ERR_BAD_ADDRESS;
  }
  WorkerAddress a;
  a.transport = r.get<std::uint8_t>();
  a.port = r.get<std::uint8_t>();
  a.caps = r.get<std::uint8_t>();
  a.uid = r.get<std::uint64_t>();
  a.instance = r.get<std::uint64_t>();
  r.bytes(a.gid.data(), a.gid.size());
  a.lid = r.get<std::uint16_t>();
  a.link_layer = r.get<std::uint8_t>();
  (void)r.get<std::uint8_t>();
  a.mtu = r.get<std::uint32_t>();
  a.ctrl_qpn = r.get<std::uint32_t>();
  for (auto& q : a.ud_qpn) {
    q = r.get<std::uint32_t>();
  }
  for (auto& c : a.class_capacity) {
    c = r.get<std::uint32_t>();
  }
  a.max_inline = r.get<std::uint32_t>();
  a.rd_atomic = r.get<std::uint8_t>();
  (void)r.get<std::uint16_t>();  // reserved (24)
  (void)r.get<std::uint8_t>();
  a.node_id = r.get<std::uint64_t>();
  a.pid = r.get<std::uint32_t>();
  r.bytes(reinterpret_cast<std::uint8_t*>(a.device.data()), a.device.size());

  const bool transport_ok = a.transport == RDMX_TRANSPORT_RC || a.transport == RDMX_TRANSPORT_UD;
  const bool qpns_ok = a.ctrl_qpn != 0 && a.ctrl_qpn < (1u << 24) &&
                       (a.transport != RDMX_TRANSPORT_UD ||
                        (a.ud_qpn[0] != 0 && a.ud_qpn[1] != 0 && (a.caps & kCapUd) != 0));
  const bool sizes_ok = a.class_capacity[0] != 0 && a.class_capacity[1] > a.class_capacity[0] &&
                        a.mtu >= 256 && a.port != 0 && a.rd_atomic != 0;
  const bool shm_ok = (a.caps & kCapShm) == 0 || (a.node_id != 0 && a.pid != 0);
  if (!transport_ok || !qpns_ok || !sizes_ok || !shm_ok || a.uid == 0 || a.uid == RDMX_ANY_SOURCE) {
    return RDMX_ERR_BAD_ADDRESS;
  }
  *out = a;
  return RDMX_OK;
}

}  // namespace rdmx::protocol
