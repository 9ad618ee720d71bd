#include "plugin/ucx/md_format.h"

#include <infiniband/verbs.h>
#include <uct/api/uct.h>

#include "protocol/le_bytes.h"

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

std::optional<std::uint32_t> RemoteKey::rkey_for(std::uint64_t uid) const noexcept {
  for (const WorkerRkey& w : workers) {
    if (w.uid == uid && uid != 0) {
      return w.rkey;
    }
  }
  return std::nullopt;
}

void pack_rkey(const RemoteKey& key, void* buffer) noexcept {
  protocol::LeWriter w(static_cast<std::uint8_t*>(buffer));
  w.put(key.md_rkey);
  for (const WorkerRkey& k : key.workers) {
    w.put(k.uid);
    w.put(k.rkey);
  }
}

RemoteKey unpack_rkey(const void* buffer) noexcept {
  protocol::LeReader r(static_cast<const std::uint8_t*>(buffer));
  RemoteKey key;
  key.md_rkey = r.get<std::uint32_t>();
  for (WorkerRkey& k : key.workers) {
    k.uid = r.get<std::uint64_t>();
    k.rkey = r.get<std::uint32_t>();
  }
  return key;
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
