// Device discovery and the device context (ibv_context): the root of every other verbs object.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rdmx::verbs {

// ibv_get_device_list / ibv_free_device_list. Devices opened from the list stay valid after the
// list is freed; unopened ibv_device pointers do not (ibv_get_device_list(3)).
class DeviceList {
 public:
  // Throws Error("ibv_get_device_list", ...): ENOSYS on a kernel without RDMA support.
  static DeviceList get();

  DeviceList(DeviceList&& other) noexcept;
  DeviceList& operator=(DeviceList&& other) noexcept;
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
  ~DeviceList();

  std::span<ibv_device* const> devices() const noexcept { return {list_, size_}; }
  // nullptr when no device has that name.
  ibv_device* find(std::string_view name) const noexcept;

 private:
  DeviceList(ibv_device** list, std::size_t size) noexcept : list_(list), size_(size) {}
  ibv_device** list_ = nullptr;
  std::size_t size_ = 0;
};

// An open device (ibv_open_device / ibv_close_device).
class Context {
 public:
  // Opens the named device; with an empty name, the first device that has an ACTIVE port.
  // Throws Error (ENODEV when no such device exists).
  static Context open(std::string_view device_name = {});

  Context(Context&& other) noexcept;
  Context& operator=(Context&& other) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  ibv_context* get() const noexcept { return ctx_; }
  std::string name() const;
  int async_fd() const noexcept { return ctx_->async_fd; }

  // ibv_query_device_ex; .orig_attr is the classic ibv_device_attr.
  ibv_device_attr_ex query_device() const;
  ibv_port_attr query_port(std::uint8_t port_num) const;
  // First port (1-based) whose state is IBV_PORT_ACTIVE; 0 when there is none.
  std::uint8_t first_active_port() const;

 private:
  explicit Context(ibv_context* ctx) noexcept : ctx_(ctx) {}
  ibv_context* ctx_ = nullptr;
};

// Only the first entries of the GID table are examined: the addresses that matter are at the
// front, and on rxe every sysfs GID read is slow (all 1024 entries took 36 s under emulation).
inline constexpr std::uint32_t kGidScanLimit = 16;
// The largest GID index libibverbs can put on the wire: ibv_global_route.sgid_index (in
// ibv_ah_attr, for ibv_create_ah and ibv_modify_qp) is a uint8_t, so an entry above 255 of a
// larger table (rxe has 1024) cannot be the source of an address handle or an RC connection.
inline constexpr std::uint32_t kMaxUsableGidIndex = 255;
static_assert(kGidScanLimit <= kMaxUsableGidIndex + 1);

// The GID index to use on a port: 0 on an InfiniBand link layer; on Ethernet (RoCE) the first
// RoCE v2 entry holding an IPv4-mapped address (::ffff:a.b.c.d), which routes over UDP/IPv4.
// Throws Error(ENOENT) when no such entry exists among the first kGidScanLimit.
std::uint32_t find_gid_index(const Context& ctx, std::uint8_t port_num);

// The GID at an index (ibv_query_gid).
ibv_gid query_gid(const Context& ctx, std::uint8_t port_num, std::uint32_t index);

// The P_Key at an index of the port's table (ibv_query_pkey), in host byte order; 0 (or 0x8000)
// marks an empty entry.
std::uint16_t query_pkey(const Context& ctx, std::uint8_t port_num, std::uint16_t index);

// The GID type of an entry (ibv_query_gid_ex, falling back to sysfs gid_attrs/types when the
// kernel cannot answer the ioctl). Throws Error(ENODATA) for an empty entry.
ibv_gid_type query_gid_type(const Context& ctx, std::uint8_t port_num, std::uint32_t index);

// True for ::ffff:a.b.c.d (IPv4-mapped IPv6), the form RoCE v2 uses for IPv4 addresses.
bool is_ipv4_mapped(const ibv_gid& gid) noexcept;
bool is_zero(const ibv_gid& gid) noexcept;
// "fe80:0000:...", for logs and test output.
std::string to_string(const ibv_gid& gid);

}  // namespace rdmx::verbs
