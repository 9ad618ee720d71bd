// The rdmx worker address as UCP carries it for a UCT interface: a device address (the port)
// and an interface address (the worker). UCP's v1 address format, the one UCX 1.13 sends, has
// 5 bits for a device address's length and 6 for an interface address's
// (UCP_ADDRESS_DEVICE_LEN_MASK, UCP_ADDRESS_IFACE_LEN_MASK in ucp/wireup/address.c): the
// 104-byte blob (protocol/address.h) fits in neither, so it is split. Left out: the node id and
// pid (the UCT interfaces do not use rdmx's shared memory, so kCapShm is never set) and the
// device name (only for messages). join_address rebuilds a blob that rdmx_ep_create takes.
// Pure logic, unit-tested on the host.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/address.h"

namespace rdmx::ucx {

// gid 16, lid 2, link layer 1, port 1, mtu 4
inline constexpr std::size_t kTlDeviceAddressSize = 24;
// transport 1, caps 1, rd atomic 1, uid 8, instance 8, ctrl qpn 4, ud qpns 2x4, class
// capacities 2x4, max inline 4
inline constexpr std::size_t kTlIfaceAddressSize = 43;
// tl_iface.c appends the interface's SEG_SIZE (4 bytes) to the interface address.
static_assert(kTlDeviceAddressSize < 31 && kTlIfaceAddressSize + 4 < 63, "UCP's v1 limits");

// Splits a worker blob; false when it is not one (decode_address refuses it) or names a
// shared-memory segment (it would be lost in the split).
bool split_address(const void* blob, std::size_t length, std::uint8_t* device,
                   std::uint8_t* iface) noexcept;

// The transport (rdmx_transport_t) of the worker whose interface address this is: its first
// byte.
inline std::uint8_t iface_address_transport(const std::uint8_t* iface) noexcept {
  return iface[0];
}

// The blob of the worker whose parts these are; false when they cannot be one (a transport
// other than RC or UD, a GID-less port).
bool join_address(const std::uint8_t* device, const std::uint8_t* iface,
                  protocol::AddressBytes* blob) noexcept;

}  // namespace rdmx::ucx
