// Memory registration (ibv_reg_mr / ibv_dereg_mr). The caller owns the memory; it must outlive
// the MemoryRegion.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "verbs/pd.h"

namespace rdmx::verbs {

// The bytes this process may pin (RLIMIT_MEMLOCK, which ibv_reg_mr counts against), or nullopt
// when it may pin without limit (RLIM_INFINITY, or CAP_IPC_LOCK, as root has).
std::optional<std::size_t> pinning_limit() noexcept;

class MemoryRegion {
 public:
  // access: IBV_ACCESS_* flags. Throws Error; for ENOMEM/EPERM (pinning refused) the message
  // names the locked-memory limit (`ulimit -l`) that is the usual cause.
  static MemoryRegion create(const ProtectionDomain& pd, void* addr, std::size_t length,
                             int access) {
    return create(pd.get(), addr, length, access);
  }
  // The same in a PD another owner holds (an rdmx worker's, rdmx_worker_pd): the MR must go
  // before that PD does.
  static MemoryRegion create(ibv_pd* pd, void* addr, std::size_t length, int access);

  MemoryRegion(MemoryRegion&& other) noexcept;
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  ~MemoryRegion();

  ibv_mr* get() const noexcept { return mr_; }
  std::uint32_t lkey() const noexcept { return mr_->lkey; }
  std::uint32_t rkey() const noexcept { return mr_->rkey; }
  void* addr() const noexcept { return mr_->addr; }
  std::size_t length() const noexcept { return mr_->length; }

  [[nodiscard]] int destroy() noexcept;  // ibv_dereg_mr now; 0 or the errno value

 private:
  explicit MemoryRegion(ibv_mr* mr) noexcept : mr_(mr) {}
  ibv_mr* mr_ = nullptr;
};

}  // namespace rdmx::verbs
