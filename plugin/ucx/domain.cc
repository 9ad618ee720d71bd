#include "plugin/ucx/domain.h"

#include <limits>
#include <utility>

#include "verbs/error.h"

namespace rdmx::ucx {

std::vector<std::string> Domain::device_names() {
  std::vector<std::string> names;
  try {
    // Named: the devices are valid only while the list lives (a temporary would be gone).
    const verbs::DeviceList list = verbs::DeviceList::get();
    for (ibv_device* dev : list.devices()) {
      names.emplace_back(ibv_get_device_name(dev));
    }
  } catch (const verbs::Error&) {
    // No RDMA support in this kernel (ENOSYS) or no device: no MD is the answer.
  }
  return names;
}

Domain Domain::open(std::string_view ibdev) {
  verbs::Context ctx = verbs::Context::open(ibdev);
  verbs::ProtectionDomain pd = verbs::ProtectionDomain::create(ctx);
  const ibv_device_attr_ex attr = ctx.query_device();
  const std::uint64_t max_mr = attr.orig_attr.max_mr_size;
  const std::size_t max_mr_size = max_mr > std::numeric_limits<std::size_t>::max()
                                      ? std::numeric_limits<std::size_t>::max()
                                      : static_cast<std::size_t>(max_mr);
  return Domain(std::move(ctx), std::move(pd), max_mr_size, attr.orig_attr.phys_port_cnt,
                std::string(ibdev));
}

Domain::Registration* Domain::register_memory(void* addr, std::size_t length, int access) {
  auto r = std::make_unique<Registration>(
      Registration{addr, length, access, verbs::MemoryRegion::create(pd_, addr, length, access)});
  const std::lock_guard<std::mutex> lock(*mutex_);
  try {
    for (std::size_t s = 0; s < workers_.size(); ++s) {
      if (workers_[s].uid != 0) {
        r->worker_mr[s] = std::make_unique<verbs::MemoryRegion>(
            verbs::MemoryRegion::create(workers_[s].pd, addr, length, access));
      }
    }
  } catch (...) {
    // Under the lock: a detach may not see the slot free while an MR of it is still in its PD.
    r->worker_mr = {};
    throw;
  }
  live_.push_back(r.get());
  return r.release();
}

void Domain::deregister(Registration* r) noexcept {
  {
    // The workers' MRs under the lock, as detach releases them: a worker's PD goes right after
    // its detach, and must by then hold no MR of ours.
    const std::lock_guard<std::mutex> lock(*mutex_);
    std::erase(live_, r);
    r->worker_mr = {};
  }
  delete r;  // the MRs' destructors deregister (and log a failure: UCX cannot act on one)
}

void Domain::pack(const Registration& r, void* buffer) const {
  RemoteKey key;
  key.md_rkey = r.md_mr.rkey();
  {
    const std::lock_guard<std::mutex> lock(*mutex_);
    for (std::size_t s = 0; s < workers_.size(); ++s) {
      if (r.worker_mr[s]) {
        key.workers[s] = {workers_[s].uid, r.worker_mr[s]->rkey()};
      }
    }
  }
  pack_rkey(key, buffer);
}

int Domain::attach(std::uint64_t uid, ibv_pd* pd) {
  const std::lock_guard<std::mutex> lock(*mutex_);
  std::size_t s = 0;
  while (s < workers_.size() && workers_[s].uid != 0) {
    ++s;
  }
  if (s == workers_.size()) {
    return -1;
  }
  try {
    for (Registration* r : live_) {
      r->worker_mr[s] = std::make_unique<verbs::MemoryRegion>(
          verbs::MemoryRegion::create(pd, r->addr, r->length, r->access));
    }
  } catch (...) {
    for (Registration* r : live_) {
      r->worker_mr[s].reset();
    }
    throw;
  }
  workers_[s] = Worker{uid, pd};
  return static_cast<int>(s);
}

void Domain::detach(int slot) noexcept {
  const std::lock_guard<std::mutex> lock(*mutex_);
  const auto s = static_cast<std::size_t>(slot);
  for (Registration* r : live_) {
    r->worker_mr[s].reset();
  }
  workers_[s] = Worker{};
}

}  // namespace rdmx::ucx
