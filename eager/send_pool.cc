#include "eager/send_pool.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs/error.h"

namespace rdmx::eager {

namespace {

constexpr std::size_t kAlign = 64;

std::size_t stride_of(std::uint32_t capacity) {
  return (capacity + kAlign - 1) / kAlign * kAlign;
}

std::byte* allocate(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0 || p == nullptr) {
    throw verbs::Error("posix_memalign", ENOMEM,
                       "send slab of " + std::to_string(bytes) + " bytes");
  }
  std::memset(p, 0, bytes);
  return static_cast<std::byte*>(p);
}

}  // namespace

void SendPool::SlabDeleter::operator()(std::byte* p) const noexcept {
  std::free(p);
}

std::size_t SendPool::registered_bytes_for(const Params& p) noexcept {
  std::size_t bytes = 0;
  for (int c = 0; c < 2; ++c) {
    bytes += stride_of(p.capacity[c]) * p.count[c];
  }
  return (bytes + 4095) / 4096 * 4096;
}

SendPool::SendPool(const verbs::ProtectionDomain& pd, const Params& params)
    : params_(params),
      slab_bytes_(registered_bytes_for(params)),
      slab_(allocate(slab_bytes_)),
      mr_(verbs::MemoryRegion::create(pd, slab_.get(), slab_bytes_, IBV_ACCESS_LOCAL_WRITE)),
      descs_(params.descs),
      desc_free_(params.descs) {
  if (params.descs == 0 || params.descs > protocol::kWrMaxSlot) {
    throw verbs::Error("SendPool", EINVAL, "bad descriptor count");
  }
  std::byte* base = slab_.get();
  for (int c = 0; c < 2; ++c) {
    Class& k = classes_[c];
    k.base = base;
    k.stride = stride_of(params.capacity[c]);
    k.state.assign(params.count[c], BufState{.refs = 0, .retained = false, .free = true});
    k.free.resize(params.count[c]);
    for (std::uint32_t i = 0; i < params.count[c]; ++i) {
      k.free[i] = params.count[c] - 1 - i;
    }
    k.free_count = params.count[c];
    base += k.stride * params.count[c];
  }
  for (std::uint32_t i = 0; i < params.descs; ++i) {
    desc_free_[i] = params.descs - 1 - i;
    descs_[i].wr_id_base = id_base(i, 0);
  }
  desc_free_count_ = params.descs;
}

SendPool::~SendPool() = default;

}  // namespace rdmx::eager
