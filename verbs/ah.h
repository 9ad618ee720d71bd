// Address handles (ibv_create_ah / ibv_destroy_ah) for UD sends.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "verbs/explicit.h"
#include "verbs/pd.h"

namespace rdmx::verbs {

// Explicit<> members have no default constructor: the compiler enforces initialisation.
// NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init)
struct AhAttr {
  ibv_gid dgid{};                     // the peer's GID; routed with a GRH when non-zero (RoCE)
  Explicit<std::uint8_t> sgid_index;  // our GID index (find_gid_index())
  std::uint8_t port_num = 1;
  std::uint16_t dlid = 0;  // InfiniBand only
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint8_t sl = 0;
};

class AddressHandle {
 public:
  static AddressHandle create(const ProtectionDomain& pd, const AhAttr& attr);

  AddressHandle(AddressHandle&& other) noexcept;
  AddressHandle& operator=(AddressHandle&& other) noexcept;
  AddressHandle(const AddressHandle&) = delete;
  AddressHandle& operator=(const AddressHandle&) = delete;
  ~AddressHandle();

  ibv_ah* get() const noexcept { return ah_; }

  [[nodiscard]] int destroy() noexcept;  // ibv_destroy_ah now; 0 or the errno value

 private:
  explicit AddressHandle(ibv_ah* ah) noexcept : ah_(ah) {}
  ibv_ah* ah_ = nullptr;
};

}  // namespace rdmx::verbs
