// What the rdmx memory domain shows the outside: its name per device, the IBV_ACCESS_* flags a
// UCT registration request becomes, and the packed remote key a peer receives. Pure logic, so
// that it is unit-tested on the host; the glue (component.cc) only calls it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rdmx::ucx {

// One MD per RDMA device, named "rdmx_<ibdev>" so that it cannot be mistaken for the ib
// component's MD of the same device (named <ibdev>) in UCX's logs and ucx_info.
inline constexpr std::string_view kMdPrefix = "rdmx_";

// The MD name of a device, or nullopt when it does not fit in `max_len` characters (UCX's
// UCT_MD_NAME_MAX counts the terminating NUL: pass UCT_MD_NAME_MAX - 1).
std::optional<std::string> md_name(std::string_view ibdev, std::size_t max_len);
// The device an MD name names, or nullopt when it is not one of ours.
std::optional<std::string_view> device_of(std::string_view md_name);

// IBV_ACCESS_* flags for uct_md_mem_reg's UCT_MD_MEM_ACCESS_* flags (other bits ignored). No
// access bit at all means every access: UCT does not say what 0 means, and UCX's own ib MD
// registers every buffer for all access whatever the flags, which callers may rely on. Remote
// write and atomics imply local write, which ibv_reg_mr requires with them.
int ibv_access(unsigned uct_flags) noexcept;

// The remote key a peer needs to reach a registration (the address travels with each
// operation). A registration is made in the MD's PD and again in the PD of each rdmx
// interface's worker attached to the MD (domain.h), since a QP reaches only memory registered
// in its own PD: the packed key carries the MD's rkey (for tools that read the MD alone) and,
// per attached worker, its uid and rkey, so that a peer's put or get picks the rkey of the
// worker its endpoint is connected to. Little-endian on the wire, whatever the host order.
inline constexpr std::size_t kMaxRmaWorkers = 4;  // rdmx interfaces with put/get per MD
struct WorkerRkey {
  std::uint64_t uid = 0;  // 0: no worker in this entry
  std::uint32_t rkey = 0;
};
struct RemoteKey {
  std::uint32_t md_rkey = 0;
  std::array<WorkerRkey, kMaxRmaWorkers> workers{};
  // The rkey of the worker with this uid, or nullopt when the key has none for it (the
  // registration was made before that worker was attached and past kMaxRmaWorkers).
  std::optional<std::uint32_t> rkey_for(std::uint64_t uid) const noexcept;
};
inline constexpr std::size_t kPackedRkeySize = 4 + kMaxRmaWorkers * (8 + 4);
void pack_rkey(const RemoteKey& key, void* buffer) noexcept;
RemoteKey unpack_rkey(const void* buffer) noexcept;

// The data rate of a port in bytes per second from ibv_port_attr's active_width and
// active_speed codes, after the line encoding (8b/10b up to QDR, 64b/66b from FDR10), as UCX's
// ib transports compute it; 0 for a code this table does not know. The transports report it to
// UCP, which weighs lanes and protocols with it.
double port_data_rate(unsigned width_code, unsigned speed_code) noexcept;

}  // namespace rdmx::ucx
