#include "plugin/ucx/md_format.h"

#include <infiniband/verbs.h>
#include <uct/api/uct.h>

namespace rdmx::ucx {

std::optional<std::string> md_name(std::string_view ibdev, std::size_t max_len) {
  if (ibdev.empty() || kMdPrefix.size() + ibdev.size() > max_len) {
    return std::nullopt;
  }
  return std::string(kMdPrefix) + std::string(ibdev);
}

std::optional<std::string_view> device_of(std::string_view md_name) {
  if (!md_name.starts_with(kMdPrefix) || md_name.size() == kMdPrefix.size()) {
    return std::nullopt;
  }
  return md_name.substr(kMdPrefix.size());
}

int ibv_access(unsigned uct_flags) noexcept {
  unsigned f = uct_flags & UCT_MD_MEM_ACCESS_ALL;
  if (f == 0) {
    f = UCT_MD_MEM_ACCESS_ALL;
  }
  int access = 0;
  if (f & UCT_MD_MEM_ACCESS_LOCAL_WRITE) {
    access |= IBV_ACCESS_LOCAL_WRITE;
  }
  if (f & UCT_MD_MEM_ACCESS_REMOTE_PUT) {
    access |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  }
  if (f & UCT_MD_MEM_ACCESS_REMOTE_GET) {
    access |= IBV_ACCESS_REMOTE_READ;
  }
  if (f & UCT_MD_MEM_ACCESS_REMOTE_ATOMIC) {
    access |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  }
  return access;
}

void pack_rkey(std::uint32_t rkey, void* buffer) noexcept {
  auto* p = static_cast<unsigned char*>(buffer);
  for (std::size_t i = 0; i < kPackedRkeySize; ++i) {
    p[i] = static_cast<unsigned char>(rkey >> (8 * i));
  }
}

std::uint32_t unpack_rkey(const void* buffer) noexcept {
  const auto* p = static_cast<const unsigned char*>(buffer);
  std::uint32_t rkey = 0;
  for (std::size_t i = 0; i < kPackedRkeySize; ++i) {
    rkey |= std::uint32_t{p[i]} << (8 * i);
  }
  return rkey;
}

double port_data_rate(unsigned width_code, unsigned speed_code) noexcept {
  double lanes = 0;
  switch (width_code) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      return 0;
  }
  double gbit = 0;  // per lane, after encoding
  switch (speed_code) {
    case 1:
      gbit = 2.5 * 8 / 10;
      break;  // SDR
    case 2:
      gbit = 5.0 * 8 / 10;
      break;  // DDR
    case 4:
      gbit = 10.0 * 8 / 10;
      break;  // QDR
    case 8:
      gbit = 10.3125 * 64 / 66;
      break;  // FDR10
    case 16:
      gbit = 14.0625 * 64 / 66;
      break;  // FDR
    case 32:
      gbit = 25.78125 * 64 / 66;
      break;  // EDR
    case 64:
      gbit = 53.125 * 64 / 66;
      break;  // HDR
    case 128:
      gbit = 106.25 * 64 / 66;
      break;  // NDR
    default:
      return 0;
  }
  return lanes * gbit * 1e9 / 8;
}

}  // namespace rdmx::ucx
