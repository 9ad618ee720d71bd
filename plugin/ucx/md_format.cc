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

}  // namespace rdmx::ucx
