// Whether this worker can reach a peer, from the two worker addresses alone (before any packet):
// rdmx_worker_check_peer and rdmx_ep_create refuse a peer that cannot be reached with the reason,
// instead of a connection that times out after peer_timeout_ms.
//
//   different link layers (InfiniBand vs Ethernet)  different fabrics: nothing connects them
//   RoCE, GIDs of different families               an IPv4 GID cannot address an IPv6 one
//   RoCE v2, no kernel route from our GID's         rxe and RoCE NICs route by the kernel's
//     address to the peer's                          tables: the packets would go nowhere
//   InfiniBand, different subnet prefixes           rdmx addresses IB peers by LID without a
//                                                    GRH, which does not cross IB routers
//   InfiniBand, peer LID 0                          no subnet manager configured its port
//
// classify_reach is pure (the route lookup is passed in) so that it is unit-tested on the host;
// kernel_route is the lookup the worker passes: a UDP socket bound to our GID's address and
// connect()ed to the peer's RoCE v2 port, which asks the kernel for a route and sends nothing.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "protocol/address.h"

namespace rdmx::transport {

using GidBytes = std::array<std::uint8_t, 16>;

// The kernel's answer for a route from one GID's IP address to another's.
struct RouteAnswer {
  bool checked = false;  // false: no socket could be made (the check is then skipped)
  int error = 0;         // 0: a route exists; else connect()'s errno (ENETUNREACH, EINVAL, ...)
  bool bound = false;    // the socket was bound to our address (else the kernel chose one)
  GidBytes source{};     // the source address the kernel chose, as a GID (when error == 0)
};
using RouteLookup = RouteAnswer (*)(const GidBytes& from, const GidBytes& to, void* user);

enum class Reach : std::uint8_t {
  kOk,
  kLinkLayer,  // InfiniBand vs Ethernet
  kFamily,     // RoCE: IPv4-mapped vs IPv6 GIDs
  kNoRoute,    // RoCE v2: the kernel has no route from our GID's address to the peer's
  kSubnet,     // InfiniBand: another subnet prefix
  kNoLid,      // InfiniBand: the peer's port has no LID
};

struct ReachVerdict {
  Reach reach = Reach::kOk;
  std::string why;   // kOk: empty; else the reason and the fix, naming both devices and GIDs
  std::string note;  // kOk: something worth saying at verbose >= 1 (another source address)
};

// `ours` and `peer` are the two workers' addresses; `roce_v2`: our GID is a RoCE v2 entry (the
// only kind routed by IP; v1 is Ethernet-only, link-local IPv6 has no route to look up).
ReachVerdict classify_reach(const protocol::WorkerAddress& ours,
                            const protocol::WorkerAddress& peer, bool roce_v2, RouteLookup lookup,
                            void* user);

// The kernel's lookup (socket, bind, connect to UDP port 4791, getsockname); `user` unused.
RouteAnswer kernel_route(const GidBytes& from, const GidBytes& to, void* user);

// A GID as text: a.b.c.d for an IPv4-mapped one, IPv6 notation otherwise.
std::string gid_text(const GidBytes& gid);
bool is_ipv4_mapped(const GidBytes& gid) noexcept;

}  // namespace rdmx::transport
