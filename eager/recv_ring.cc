#include "eager/recv_ring.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs/error.h"

namespace rdmx::eager {

namespace {

std::size_t ring_bytes(std::uint32_t rings, std::uint32_t slots, std::uint32_t slot_size) {
  if (rings == 0 || !protocol::ring_geometry_ok(slots, slot_size)) {
    throw verbs::Error("RingSlab", EINVAL,
                       "bad ring geometry: " + std::to_string(rings) + " rings of " +
                           std::to_string(slots) + " slots of " + std::to_string(slot_size) +
                           " bytes");
  }
  return std::size_t{slots} * slot_size;
}

std::byte* allocate(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0 || p == nullptr) {
    throw verbs::Error("posix_memalign", ENOMEM, "rings of " + std::to_string(bytes) + " bytes");
  }
  std::memset(p, 0, bytes);  // every footer reads "empty"
  return static_cast<std::byte*>(p);
}

}  // namespace

void RingSlab::Free::operator()(std::byte* p) const noexcept {
  std::free(p);
}

RingSlab::RingSlab(const verbs::ProtectionDomain& pd, std::uint32_t rings, std::uint32_t slots,
                   std::uint32_t slot_size)
    : rings_(rings),
      ring_bytes_(ring_bytes(rings, slots, slot_size)),
      bytes_((ring_bytes_ * rings + 4095) / 4096 * 4096),
      mem_(allocate(bytes_)),
      mr_(verbs::MemoryRegion::create(pd, mem_.get(), bytes_,
                                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {}

}  // namespace rdmx::eager
