#include "verbs/context.h"

#include <endian.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

#include "verbs/error.h"

namespace rdmx::verbs {

DeviceList DeviceList::get() {
  int n = 0;
  errno = 0;
  ibv_device** list = check_created(ibv_get_device_list(&n), "ibv_get_device_list");
  return DeviceList(list, static_cast<std::size_t>(n));
}

DeviceList::DeviceList(DeviceList&& other) noexcept
    : list_(std::exchange(other.list_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceList& DeviceList::operator=(DeviceList&& other) noexcept {
  if (this != &other) {
    if (list_ != nullptr) {
      ibv_free_device_list(list_);
    }
    list_ = std::exchange(other.list_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceList::~DeviceList() {
  if (list_ != nullptr) {
    ibv_free_device_list(list_);  // returns void: nothing to check
  }
}

ibv_device* DeviceList::find(std::string_view name) const noexcept {
  for (ibv_device* dev : devices()) {
    if (name == ibv_get_device_name(dev)) {
      return dev;
    }
  }
  return nullptr;
}

namespace {

ibv_context* open_device(ibv_device* dev) {
  errno = 0;
  return check_created(ibv_open_device(dev), "ibv_open_device", ibv_get_device_name(dev));
}

}  // namespace

Context Context::open(std::string_view device_name) {
  const DeviceList list = DeviceList::get();
  if (!device_name.empty()) {
    ibv_device* dev = list.find(device_name);
    if (dev == nullptr) {
      throw Error("ibv_get_device_list", ENODEV,
                  "no RDMA device named '" + std::string(device_name) + "'");
    }
    return Context(open_device(dev));
  }
  for (ibv_device* dev : list.devices()) {
    Context ctx(open_device(dev));
    if (ctx.first_active_port() != 0) {
      return ctx;
    }
  }
  throw Error(
      "ibv_get_device_list", ENODEV,
      "no RDMA device with an active port (" + std::to_string(list.devices().size()) + " devices)");
}

Context::Context(Context&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}

Context& Context::operator=(Context&& other) noexcept {
  if (this != &other) {
    Context old(std::move(*this));
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}

Context::~Context() {
  if (ctx_ != nullptr) {
    // Fails with EBUSY-like errors only if child objects leaked; log so the leak is visible.
    if (const int e = verb_errno(ibv_close_device(ctx_)); e != 0) {
      log_verb_failure("ibv_close_device", e, ibv_get_device_name(ctx_->device));
    }
  }
}

std::string Context::name() const {
  return ibv_get_device_name(ctx_->device);
}

ibv_device_attr_ex Context::query_device() const {
  ibv_device_attr_ex attr{};
  check_rc(ibv_query_device_ex(ctx_, nullptr, &attr), "ibv_query_device_ex", name());
  return attr;
}

ibv_port_attr Context::query_port(std::uint8_t port_num) const {
  ibv_port_attr attr{};
  check_rc(ibv_query_port(ctx_, port_num, &attr), "ibv_query_port",
           name() + " port " + std::to_string(port_num));
  return attr;
}

std::uint8_t Context::first_active_port() const {
  const ibv_device_attr_ex dev = query_device();
  for (int port = 1; port <= dev.orig_attr.phys_port_cnt; ++port) {
    if (query_port(static_cast<std::uint8_t>(port)).state == IBV_PORT_ACTIVE) {
      return static_cast<std::uint8_t>(port);
    }
  }
  return 0;
}

bool is_ipv4_mapped(const ibv_gid& gid) noexcept {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) == 0;
}

bool is_zero(const ibv_gid& gid) noexcept {
  return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](std::uint8_t b) { return b == 0; });
}

std::string to_string(const ibv_gid& gid) {
  std::string out;
  out.reserve(39);
  for (std::size_t i = 0; i < 8; ++i) {
    char group[6];
    std::snprintf(group, sizeof(group), "%02x%02x", gid.raw[2 * i], gid.raw[2 * i + 1]);
    out += group;
    if (i < 7) {
      out += ':';
    }
  }
  return out;
}

ibv_gid query_gid(const Context& ctx, std::uint8_t port_num, std::uint32_t index) {
  ibv_gid gid{};
  check_rc(ibv_query_gid(ctx.get(), port_num, static_cast<int>(index), &gid), "ibv_query_gid",
           ctx.name() + " port " + std::to_string(port_num) + " index " + std::to_string(index));
  return gid;
}

std::uint16_t query_pkey(const Context& ctx, std::uint8_t port_num, std::uint16_t index) {
  __be16 pkey = 0;
  check_rc(ibv_query_pkey(ctx.get(), port_num, index, &pkey), "ibv_query_pkey",
           ctx.name() + " port " + std::to_string(port_num) + " index " + std::to_string(index));
  return be16toh(pkey);
}

namespace {

// sysfs gid_attrs/types/N reads "IB/RoCE v1", "RoCE v2" or fails (EINVAL) for an empty entry.
ibv_gid_type sysfs_gid_type(const Context& ctx, std::uint8_t port_num, std::uint32_t index) {
  const std::string path = "/sys/class/infiniband/" + ctx.name() + "/ports/" +
                           std::to_string(port_num) + "/gid_attrs/types/" + std::to_string(index);
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    throw Error("ibv_query_gid_ex", ENODATA, "no GID type in " + path);
  }
  if (line.find("RoCE v2") != std::string::npos) {
    return IBV_GID_TYPE_ROCE_V2;
  }
  if (line.find("RoCE") != std::string::npos) {
    return IBV_GID_TYPE_ROCE_V1;
  }
  return IBV_GID_TYPE_IB;
}

}  // namespace

ibv_gid_type query_gid_type(const Context& ctx, std::uint8_t port_num, std::uint32_t index) {
  ibv_gid_entry entry{};
  const int e = verb_errno(ibv_query_gid_ex(ctx.get(), port_num, index, &entry, 0));
  if (e == EOPNOTSUPP || e == ENOSYS) {
    return sysfs_gid_type(ctx, port_num, index);
  }
  if (e != 0) {
    throw Error(
        "ibv_query_gid_ex", e,
        ctx.name() + " port " + std::to_string(port_num) + " index " + std::to_string(index));
  }
  return static_cast<ibv_gid_type>(entry.gid_type);
}

std::uint32_t find_gid_index(const Context& ctx, std::uint8_t port_num) {
  const ibv_port_attr port = ctx.query_port(port_num);
  if (port.link_layer != IBV_LINK_LAYER_ETHERNET) {
    return 0;  // InfiniBand: the port GID (subnet prefix + GUID) sits at index 0.
  }
  // Only indices an address handle can carry (ibv_global_route.sgid_index is 8 bits).
  const std::uint32_t n = std::min(
      {kGidScanLimit, static_cast<std::uint32_t>(port.gid_tbl_len), kMaxUsableGidIndex + 1});
  for (std::uint32_t i = 0; i < n; ++i) {
    ibv_gid_entry entry{};
    const int e = verb_errno(ibv_query_gid_ex(ctx.get(), port_num, i, &entry, 0));
    if (e == ENODATA || e == EINVAL) {
      continue;  // empty slot: RoCE tables have holes where addresses were removed
    }
    ibv_gid_type type{};
    if (e == EOPNOTSUPP || e == ENOSYS) {
      entry.gid = query_gid(ctx, port_num, i);
      if (is_zero(entry.gid)) {
        continue;
      }
      type = sysfs_gid_type(ctx, port_num, i);
    } else if (e != 0) {
      throw Error("ibv_query_gid_ex", e, ctx.name() + " index " + std::to_string(i));
    } else {
      type = static_cast<ibv_gid_type>(entry.gid_type);
    }
    if (type == IBV_GID_TYPE_ROCE_V2 && is_ipv4_mapped(entry.gid)) {
      return i;
    }
  }
  throw Error("ibv_query_gid_ex", ENOENT,
              ctx.name() + " port " + std::to_string(port_num) +
                  ": no RoCE v2 IPv4-mapped GID among the first " + std::to_string(n) +
                  " entries (is an IPv4 address configured on the netdev?)");
}

}  // namespace rdmx::verbs
