// What the rdmx memory domain shows the outside: its name per device, the IBV_ACCESS_* flags a
// UCT registration request becomes, and the packed remote key a peer receives. Pure logic, so
// that it is unit-tested on the host; the glue (component.cc) only calls it.
#pragma once

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

// The remote key a peer needs to reach a registration: the MR's rkey (the address travels with
// each operation). Little-endian on the wire, whatever the host order.
inline constexpr std::size_t kPackedRkeySize = 4;
void pack_rkey(std::uint32_t rkey, void* buffer) noexcept;
std::uint32_t unpack_rkey(const void* buffer) noexcept;

// The data rate of a port in bytes per second from ibv_port_attr's active_width and
// active_speed codes, after the line encoding (8b/10b up to QDR, 64b/66b from FDR10), as UCX's
// ib transports compute it; 0 for a code this table does not know. The transports report it to
// UCP, which weighs lanes and protocols with it.
double port_data_rate(unsigned width_code, unsigned speed_code) noexcept;

}  // namespace rdmx::ucx
