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

std::unique_ptr<verbs::MemoryRegion> Domain::register_memory(void* addr, std::size_t length,
                                                             int access) const {
  return std::make_unique<verbs::MemoryRegion>(
      verbs::MemoryRegion::create(pd_, addr, length, access));
}

}  // namespace rdmx::ucx
