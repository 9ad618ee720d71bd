#include "verbs/mr.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

#include "verbs/error.h"

namespace rdmx::verbs {

namespace {

std::string memlock_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) {
    return "unknown";
  }
  if (lim.rlim_cur == RLIM_INFINITY) {
    return "unlimited";
  }
  return std::to_string(lim.rlim_cur / 1024) + " KiB";
}

}  // namespace

std::optional<std::size_t> pinning_limit() noexcept {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2]{};
  if (syscall(SYS_capget, &hdr, caps) == 0 &&
      (caps[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0) {
    return std::nullopt;
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(lim.rlim_cur);
}

MemoryRegion MemoryRegion::create(ibv_pd* pd, void* addr, std::size_t length, int access) {
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(pd, addr, length, access);
  if (mr == nullptr) {
    const int e = errno != 0 ? errno : EIO;
    char range[96];
    std::snprintf(range, sizeof(range), "%zu bytes at %p, access 0x%x", length, addr,
                  static_cast<unsigned>(access));
    std::string detail = range;
    if (e == ENOMEM || e == EPERM) {
      // The kernel pins registered pages against RLIMIT_MEMLOCK; the default 8 MiB is the
      // usual reason a registration fails on a healthy machine.
      detail += ": cannot pin the pages; raise the locked-memory limit (ulimit -l, now " +
                memlock_limit() + ")";
    }
    throw Error("ibv_reg_mr", e, detail);
  }
  return MemoryRegion(mr);
}

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    MemoryRegion old(std::move(*this));
    mr_ = std::exchange(other.mr_, nullptr);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() {
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_dereg_mr", e, "memory region leaked");
  }
}

int MemoryRegion::destroy() noexcept {
  if (mr_ == nullptr) {
    return 0;
  }
  const int e = verb_errno(ibv_dereg_mr(mr_));
  if (e == 0) {
    mr_ = nullptr;
  }
  return e;
}

}  // namespace rdmx::verbs
