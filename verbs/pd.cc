#include "verbs/pd.h"

#include <cerrno>
#include <utility>

#include "verbs/error.h"

namespace rdmx::verbs {

ProtectionDomain ProtectionDomain::create(const Context& ctx) {
  errno = 0;
  return ProtectionDomain(check_created(ibv_alloc_pd(ctx.get()), "ibv_alloc_pd", ctx.name()));
}

ProtectionDomain::ProtectionDomain(ProtectionDomain&& other) noexcept
    : pd_(std::exchange(other.pd_, nullptr)) {}

ProtectionDomain& ProtectionDomain::operator=(ProtectionDomain&& other) noexcept {
  if (this != &other) {
    ProtectionDomain old(std::move(*this));
    pd_ = std::exchange(other.pd_, nullptr);
  }
  return *this;
}

ProtectionDomain::~ProtectionDomain() {
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_dealloc_pd", e, "protection domain leaked");
  }
}

int ProtectionDomain::destroy() noexcept {
  if (pd_ == nullptr) {
    return 0;
  }
  const int e = verb_errno(ibv_dealloc_pd(pd_));
  if (e == 0) {
    pd_ = nullptr;
  }
  return e;
}

}  // namespace rdmx::verbs
