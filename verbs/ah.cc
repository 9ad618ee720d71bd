#include "verbs/ah.h"

#include <cerrno>
#include <string>
#include <utility>

#include "verbs/context.h"
#include "verbs/error.h"

namespace rdmx::verbs {

AddressHandle AddressHandle::create(const ProtectionDomain& pd, const AhAttr& a) {
  ibv_ah_attr attr{};
  attr.dlid = a.dlid;
  attr.sl = a.sl;
  attr.port_num = a.port_num;
  if (!is_zero(a.dgid)) {
    attr.is_global = 1;
    attr.grh.dgid = a.dgid;
    attr.grh.sgid_index = a.sgid_index;
    attr.grh.hop_limit = a.hop_limit;
    attr.grh.traffic_class = a.traffic_class;
  }
  errno = 0;
  return AddressHandle(check_created(ibv_create_ah(pd.get(), &attr), "ibv_create_ah",
                                     "dgid " + to_string(a.dgid) + " sgid_index " +
                                         std::to_string(a.sgid_index.get()) + " port " +
                                         std::to_string(a.port_num)));
}

AddressHandle::AddressHandle(AddressHandle&& other) noexcept
    : ah_(std::exchange(other.ah_, nullptr)) {}

AddressHandle& AddressHandle::operator=(AddressHandle&& other) noexcept {
  if (this != &other) {
    AddressHandle old(std::move(*this));
    ah_ = std::exchange(other.ah_, nullptr);
  }
  return *this;
}

AddressHandle::~AddressHandle() {
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_destroy_ah", e, "address handle leaked");
  }
}

int AddressHandle::destroy() noexcept {
  if (ah_ == nullptr) {
    return 0;
  }
  const int e = verb_errno(ibv_destroy_ah(ah_));
  if (e == 0) {
    ah_ = nullptr;
  }
  return e;
}

}  // namespace rdmx::verbs
