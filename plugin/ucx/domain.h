// The verbs objects behind one rdmx memory domain (an MD of the UCT component rdmx): the device
// context and its protection domain, declared in creation order so that the PD goes first. The
// registrations it makes are owned by their UCT memory handles, which UCX must release before it
// closes the MD (uct_md_close's contract), so every MR goes before the PD.
//
// Registrations are plain ibv_reg_mr of exactly the requested range, not rdmx's registration
// cache (rendezvous/reg_cache.h): an MD is shared by every worker of a UCP context and called
// from any of their threads, while a RegCache belongs to one thread; and UCT's mem_reg hands
// the caller the lifetime of each handle, which a cache entry shared by overlapping requests
// would not match. Caching at this level would be an option of its own (UCX's ib MD has one);
// UCP 1.13 keeps a registration cache of its own above the MD.
//
// Put and get: the worker of an rdmx interface (rdmx_rc or rdmx_ud) posts on QPs of its own PD
// (its own device context, whose asynchronous events are the worker's alone), and a QP reaches
// only memory registered in its PD. So an interface attaches its worker's PD to the MD (a slot,
// at most kMaxRmaWorkers): every registration is made there too, those made before included, and
// the packed key carries each attached worker's rkey (md_format.h). Detaching deregisters the
// slot's MRs, before the worker and its PD go.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plugin/ucx/md_format.h"
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

  // A registration (UCT's memh): in the MD's PD and in each attached worker's.
  struct Registration {
    void* addr;
    std::size_t length;
    int access;
    verbs::MemoryRegion md_mr;
    std::array<std::unique_ptr<verbs::MemoryRegion>, kMaxRmaWorkers> worker_mr{};  // by slot
  };

  // ibv_reg_mr of [addr, addr+length) with IBV_ACCESS_* `access`, in the MD's PD and every
  // attached worker's. Throws verbs::Error (its message names `ulimit -l` when pinning is
  // refused). Any thread.
  Registration* register_memory(void* addr, std::size_t length, int access);
  void deregister(Registration* r) noexcept;
  // The packed key of a registration (kPackedRkeySize bytes).
  void pack(const Registration& r, void* buffer) const;

  // Attaches the PD of the worker `uid`: its slot, or -1 when kMaxRmaWorkers are attached.
  // Registers every registration there; throws verbs::Error (attaching nothing) when one fails.
  int attach(std::uint64_t uid, ibv_pd* pd);
  // Deregisters the slot's MRs and frees the slot. Before the worker's PD goes.
  void detach(int slot) noexcept;

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

  struct Worker {
    std::uint64_t uid = 0;  // 0: free slot
    ibv_pd* pd = nullptr;
  };

  verbs::Context ctx_;
  verbs::ProtectionDomain pd_;
  // UCT calls an MD from any thread: the slots and the list of registrations under the mutex.
  // A put reads only its own slot's MR of a registration, which changes only when its own
  // interface attaches or detaches.
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
  std::array<Worker, kMaxRmaWorkers> workers_{};
  std::vector<Registration*> live_;
  std::size_t max_mr_size_;
  int ports_;
  std::string device_;
};

}  // namespace rdmx::ucx
