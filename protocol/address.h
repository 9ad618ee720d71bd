// The worker address blob: what a peer needs to reach this worker, exchanged out of band (MPI's
// modex gives one blob per process). It names the worker's UD control QP, over which RC
// connections are set up on demand, and in UD mode its UD data QPs.
//
// Layout (little-endian, kAddressSize bytes, no padding; encode/decode never memcpy a struct):
//
//   byte 0      4       5       6       7       8               16              24
//       +-------+-------+-------+-------+-------+---------------+---------------+
//     0 | magic "RDMX"  |version|transp.| port  | caps  |  uid (64)     | instance (64) |
//       +---------------+-------+-------+-------+-------+---------------+---------------+
//    24 | gid (16 bytes: RoCE v2 IPv4-mapped, or the IB port GID)                       |
//    40 | lid (16) | link layer (8) | pad (8) | mtu bytes (32) | ctrl qpn (32)           |
//    52 | ud qpn small (32) | ud qpn large (32) | small cap (32) | large cap (32)          |
//    68 | max inline (32) | rd atomic (8) | reserved (24)                                |
//    76 | node id (64)                  | pid (32)                                          |
//    88 | device name (16 bytes, NUL-padded; a longer name is cut to 16 without a NUL)     |
//   104 end
//
// - transport: the data transport of the worker (1 = RC, 2 = UD). Workers of one job must agree.
// - instance: random per worker; a restarted process with the same uid gets another one, so
//   stale connection messages are recognised.
// - small cap / large cap: payload bytes of the worker's receive buffers per size class; a
//   sender picks the class (and so the QP) by message size against these.
// - rd atomic: the RDMA reads this worker's RC QPs take in flight as responder
//   (max_dest_rd_atomic, >= 1). A peer never has more outstanding on a QP to it
//   (max_rd_atomic): devices differ, and a responder asked for more may fail the QP.
// - node id, pid: where the worker runs (transport/channel/shm_segment.h: a hash of the kernel's
//   boot id and the host name) and its process. With kCapShm, a peer of the same node id
//   reaches it through its shared-memory segment, named after the pid and the instance.
// - device name: the worker's RDMA device (ibv_get_device_name), only for messages: a peer that
//   cannot reach this worker names both devices (transport/reach.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rdmx::protocol {

inline constexpr std::uint32_t kAddressMagic = 0x584d4452;  // "RDMX" read as little-endian
// 2: rd atomic; 3: node id, pid; 4: device name
inline constexpr std::uint8_t kAddressVersion = 4;
inline constexpr std::size_t kAddressSize = 104;
inline constexpr std::size_t kDeviceNameBytes = 16;
inline constexpr int kNumClasses = 2;  // size classes: 0 small, 1 large

// Capability bits.
inline constexpr std::uint8_t kCapRc = 1u << 0;   // can take RC connection requests
inline constexpr std::uint8_t kCapUd = 1u << 1;   // UD data QPs are valid
inline constexpr std::uint8_t kCapShm = 1u << 2;  // has a shared-memory segment (node id, pid)

struct WorkerAddress {
  std::uint8_t transport = 0;  // rdmx_transport_t value, never AUTO
  std::uint8_t port = 0;
  std::uint8_t caps = 0;
  std::uint64_t uid = 0;
  std::uint64_t instance = 0;
  std::array<std::uint8_t, 16> gid{};
  std::uint16_t lid = 0;
  std::uint8_t link_layer = 0;  // IBV_LINK_LAYER_*
  std::uint32_t mtu = 0;        // active path MTU in bytes
  std::uint32_t ctrl_qpn = 0;
  std::array<std::uint32_t, kNumClasses> ud_qpn{};
  std::array<std::uint32_t, kNumClasses> class_capacity{};
  std::uint32_t max_inline = 0;
  std::uint8_t rd_atomic = 0;
  std::uint64_t node_id = 0;
  std::uint32_t pid = 0;
  std::array<char, kDeviceNameBytes> device{};  // NUL-padded; device_name() reads it

  // The device name as text (at most kDeviceNameBytes characters).
  std::string_view device_name() const noexcept {
    std::size_t n = 0;
    while (n < device.size() && device[n] != '\0') {
      ++n;
    }
    return {device.data(), n};
  }
  // Stores a device name, cut to kDeviceNameBytes.
  void set_device_name(std::string_view name) noexcept {
    device.fill('\0');
    for (std::size_t i = 0; i < name.size() && i < device.size(); ++i) {
      device[i] = name[i];
    }
  }

  friend bool operator==(const WorkerAddress&, const WorkerAddress&) = default;
};

using AddressBytes = std::array<std::uint8_t, kAddressSize>;

AddressBytes encode_address(const WorkerAddress& address) noexcept;

// RDMX_OK, RDMX_ERR_INVALID_PARAM (null data or out) or RDMX_ERR_BAD_ADDRESS (wrong length,
// magic or version, inconsistent fields). *out is written only on RDMX_OK.
int decode_address(const void* data, std::size_t length, WorkerAddress* out) noexcept;

}  // namespace rdmx::protocol
