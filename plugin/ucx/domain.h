// The verbs objects behind one rdmx memory domain (an MD of the UCT component rdmx): the device
// context and its protection domain, declared in creation order so that the PD goes first. The
// MRs it makes are owned by their UCT memory handles, which UCX must release before it closes
// the MD (uct_md_close's contract), so every MR goes before the PD.
//
// Registrations are plain ibv_reg_mr of exactly the requested range, not rdmx's registration
// cache (rendezvous/reg_cache.h): an MD is shared by every worker of a UCP context and called
// from any of their threads, while a RegCache belongs to one thread; and UCT's mem_reg hands
// the caller the lifetime of each handle, which a cache entry shared by overlapping requests
// would not match. Caching at this level would be an option of its own (UCX's ib MD has one).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verbs/context.h"
#include "verbs/mr.h"
#include "verbs/pd.h"

namespace rdmx::ucx {

class Domain {
 public:
  // The names of the RDMA devices present (ibv_get_device_list); empty when there is none or
  // the kernel has no RDMA support.
  static std::vector<std::string> device_names();

  // Opens the device and allocates its PD. Throws verbs::Error.
  static Domain open(std::string_view ibdev);

  // ibv_reg_mr of [addr, addr+length) with IBV_ACCESS_* `access`. Throws verbs::Error (its
  // message names `ulimit -l` when pinning is refused).
  std::unique_ptr<verbs::MemoryRegion> register_memory(void* addr, std::size_t length,
                                                       int access) const;

  // The largest region the device registers (ibv_device_attr.max_mr_size).
  std::size_t max_mr_size() const noexcept { return max_mr_size_; }
  const std::string& device() const noexcept { return device_; }
  int port_count() const noexcept { return ports_; }
  // ibv_query_port of a port (1-based). Throws verbs::Error.
  ibv_port_attr query_port(int port) const {
    return ctx_.query_port(static_cast<std::uint8_t>(port));
  }

 private:
  Domain(verbs::Context ctx, verbs::ProtectionDomain pd, std::size_t max_mr_size, int ports,
         std::string device) noexcept
      : ctx_(std::move(ctx)),
        pd_(std::move(pd)),
        max_mr_size_(max_mr_size),
        ports_(ports),
        device_(std::move(device)) {}

  verbs::Context ctx_;
  verbs::ProtectionDomain pd_;
  std::size_t max_mr_size_;
  int ports_;
  std::string device_;
};

}  // namespace rdmx::ucx
