#include "eager/srq_pool.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "verbs/error.h"

namespace rdmx::eager {

namespace {

std::size_t stride_of(const SrqPool::Params& p) {
  const std::size_t raw = p.grh_bytes + 32 + p.capacity;  // GRH + wire header + payload
  return (raw + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
}

std::byte* allocate_slab(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0 || p == nullptr) {
    throw verbs::Error("posix_memalign", ENOMEM,
                       "receive slab of " + std::to_string(bytes) + " bytes");
  }
  std::memset(p, 0, bytes);
  return static_cast<std::byte*>(p);
}

void check_params(const SrqPool::Params& p) {
  if (p.depth == 0 || p.batch == 0 || p.batch > p.depth || p.watermark >= p.depth ||
      std::size_t{p.depth} + p.spare >= kMaxPoolBuffers || p.capacity == 0 ||
      !protocol::is_encodable(protocol::WrId{.kind = p.kind, .thread = p.thread})) {
    throw verbs::Error("SrqPool", EINVAL,
                       "bad pool parameters: depth " + std::to_string(p.depth) + " spare " +
                           std::to_string(p.spare) + " batch " + std::to_string(p.batch) +
                           " watermark " + std::to_string(p.watermark));
  }
}

}  // namespace

void SrqPool::SlabDeleter::operator()(std::byte* p) const noexcept {
  std::free(p);
}

std::size_t SrqPool::registered_bytes_for(const Params& p) noexcept {
  const std::size_t bytes = stride_of(p) * (std::size_t{p.depth} + p.spare);
  return (bytes + 4095) / 4096 * 4096;
}

SrqPool::SrqPool(const verbs::ProtectionDomain& pd, const Params& params)
    : params_((check_params(params), params)),
      stride_(stride_of(params)),
      slab_bytes_(registered_bytes_for(params)),
      total_(params.depth + params.spare),
      slab_owner_(allocate_slab(slab_bytes_)),
      slab_(slab_owner_.get()),
      mr_(verbs::MemoryRegion::create(pd, slab_, slab_bytes_, IBV_ACCESS_LOCAL_WRITE)),
      srq_(verbs::SharedReceiveQueue::create(pd, params.depth)),
      wrs_(total_),
      sges_(total_),
      free_(total_) {
  for (std::uint32_t i = 0; i < total_; ++i) {
    sges_[i].addr = reinterpret_cast<std::uintptr_t>(grh(i));
    sges_[i].length = static_cast<std::uint32_t>(stride_);
    sges_[i].lkey = mr_.lkey();
    wrs_[i].wr_id = protocol::encode(protocol::WrId{
        .kind = params_.kind,
        .thread = params_.thread,
        .generation = params_.generation,
        .slot = (std::uint32_t{params_.pool_id} << kPoolShift) | i,
    });
    wrs_[i].sg_list = &sges_[i];
    wrs_[i].num_sge = 1;
    wrs_[i].next = nullptr;
  }
  // Free stack: buffer 0 on top, so the first refill posts buffers in address order.
  for (std::uint32_t i = 0; i < total_; ++i) {
    free_[i] = total_ - 1 - i;
  }
  free_count_ = total_;
  const int n = refill(true);
  if (n < 0) {
    throw verbs::Error("ibv_post_srq_recv", -n, "initial fill of " + std::to_string(params.depth));
  }
  arm();
}

SrqPool::~SrqPool() {
  if (srq_.get() != nullptr) {
    (void)destroy_srq();
  }
}

int SrqPool::refill(bool force) noexcept {
  const std::uint32_t n = postable();
  if (n == 0 || (!force && !wants_refill())) {
    return 0;
  }
  // Link the top n free buffers into one chain.
  const std::uint32_t base = free_count_ - n;
  for (std::uint32_t i = 0; i + 1 < n; ++i) {
    wrs_[free_[base + i]].next = &wrs_[free_[base + i + 1]];
  }
  wrs_[free_[base + n - 1]].next = nullptr;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_srq_recv(srq_.get(), &wrs_[free_[base]], &bad);
  std::uint32_t posted = n;
  if (rc != 0) {
    posted = 0;
    for (const ibv_recv_wr* w = &wrs_[free_[base]]; w != nullptr && w != bad; w = w->next) {
      ++posted;
    }
  }
  // The posted ones are the first `posted` of the chain: free_[base .. base + posted). Move the
  // unposted tail down so the free stack stays contiguous.
  const std::uint32_t unposted = n - posted;
  std::memmove(&free_[base], &free_[base + posted], unposted * sizeof(std::uint32_t));
  free_count_ = base + unposted;
  posted_now_ += posted;
  counters_.posted += posted;
  if (posted != 0) {
    ++counters_.refills;
  }
  if (!armed_) {
    maybe_rearm();
  }
  return rc != 0 ? -verbs::verb_errno(rc) : static_cast<int>(posted);
}

void SrqPool::arm() noexcept {
  // Arming below the watermark would fire at once; wait for a refill to lift the level.
  if (params_.watermark == 0 || posted_now_ <= params_.watermark || srq_.get() == nullptr) {
    return;
  }
  try {
    srq_.arm_limit(params_.watermark);
    armed_ = true;
  } catch (const verbs::Error& e) {
    verbs::log_verb_failure("ibv_modify_srq", e.errnum(), "arming srq_limit");
    armed_ = false;
  }
}

void SrqPool::maybe_rearm() noexcept {
  if (!armed_) {
    arm();
  }
}

void SrqPool::note_limit_event() noexcept {
  ++counters_.limit_events;
  armed_ = false;  // the event disarmed the limit: the next refill arms it again
}

int SrqPool::on_limit_event() noexcept {
  note_limit_event();
  const int n = refill(true);
  maybe_rearm();
  return n;
}

int SrqPool::destroy_srq() noexcept {
  const int e = srq_.destroy();
  if (e == 0) {
    counters_.reclaimed += posted_now_;
    // Those buffers are the pool's again; no completion will ever name them.
    posted_now_ = 0;
  }
  return e;
}

}  // namespace rdmx::eager
