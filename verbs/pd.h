// Protection domain (ibv_alloc_pd / ibv_dealloc_pd). Every MR, SRQ, QP and AH belongs to one; it
// must be declared after the Context and before those objects so that it is destroyed after them.
#pragma once

#include <infiniband/verbs.h>

#include "verbs/context.h"

namespace rdmx::verbs {

class ProtectionDomain {
 public:
  static ProtectionDomain create(const Context& ctx);

  ProtectionDomain(ProtectionDomain&& other) noexcept;
  ProtectionDomain& operator=(ProtectionDomain&& other) noexcept;
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ~ProtectionDomain();

  ibv_pd* get() const noexcept { return pd_; }
  ibv_context* context() const noexcept { return pd_->context; }

  // ibv_dealloc_pd now; 0 or the errno value (EBUSY while objects still use the PD). On failure
  // the handle is kept so that the destructor can retry and log.
  [[nodiscard]] int destroy() noexcept;

 private:
  explicit ProtectionDomain(ibv_pd* pd) noexcept : pd_(pd) {}
  ibv_pd* pd_ = nullptr;
};

}  // namespace rdmx::verbs
