#include "transport/reach.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace rdmx::transport {

namespace {

// RoCE v2's UDP port: connect() to it only asks for a route (UDP sends nothing on connect).
constexpr std::uint16_t kRoceV2Port = 4791;

bool is_link_local6(const GidBytes& g) noexcept {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

std::string device_of(const protocol::WorkerAddress& a) {
  const std::string_view d = a.device_name();
  return d.empty() ? std::string("(device not named)") : std::string(d);
}

// "rxe1 (GID 10.99.1.1)"
std::string port_text(const protocol::WorkerAddress& a) {
  return device_of(a) + " (GID " + gid_text(a.gid) + ")";
}

std::string peer_text(const protocol::WorkerAddress& a) {
  char uid[32];
  std::snprintf(uid, sizeof(uid), "%016llx", static_cast<unsigned long long>(a.uid));
  return device_of(a) + " (GID " + gid_text(a.gid) + ", uid " + uid + ")";
}

const char* link_layer_text(std::uint8_t ll) {
  return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

// The routing rule behind a connect() errno, for the message.
const char* route_kind(int e) {
  switch (e) {
    case EINVAL:
      return " (a blackhole route)";
    case EACCES:
    case EPERM:
      return " (a prohibit route)";
    default:
      return "";
  }
}

std::string prefix_text(const GidBytes& g) {
  char s[24];
  std::snprintf(s, sizeof(s), "%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4],
                g[5], g[6], g[7]);
  return s;
}

}  // namespace

bool is_ipv4_mapped(const GidBytes& g) noexcept {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.data(), kPrefix, sizeof(kPrefix)) == 0;
}

std::string gid_text(const GidBytes& g) {
  char s[INET6_ADDRSTRLEN] = {};
  if (is_ipv4_mapped(g)) {
    (void)inet_ntop(AF_INET, g.data() + 12, s, sizeof(s));
  } else {
    (void)inet_ntop(AF_INET6, g.data(), s, sizeof(s));
  }
  return s;
}

ReachVerdict classify_reach(const protocol::WorkerAddress& ours,
                            const protocol::WorkerAddress& peer, bool roce_v2, RouteLookup lookup,
                            void* user) {
  ReachVerdict v;
  auto refuse = [&](Reach r, std::string why) {
    v.reach = r;
    v.why = std::move(why);
    return v;
  };
  if (ours.link_layer != peer.link_layer) {
    return refuse(Reach::kLinkLayer,
                  "our " + port_text(ours) + " is on " + link_layer_text(ours.link_layer) +
                      ", the peer's " + peer_text(peer) + " on " +
                      link_layer_text(peer.link_layer) +
                      ": no RDMA path joins the two fabrics; choose devices on one fabric "
                      "(RDMX_DEVICE, mtl_rdmx_device)");
  }
  if (ours.link_layer != IBV_LINK_LAYER_ETHERNET) {
    // InfiniBand: addressed by LID without a GRH (verbs/ah.cc), so only within one subnet.
    if (peer.lid == 0) {
      return refuse(Reach::kNoLid, "the peer's " + peer_text(peer) +
                                       " has no LID: no subnet manager has configured its port "
                                       "(is opensm running on that fabric?)");
    }
    if (std::memcmp(ours.gid.data(), peer.gid.data(), 8) != 0) {
      return refuse(Reach::kSubnet,
                    "our " + port_text(ours) + " is in InfiniBand subnet " + prefix_text(ours.gid) +
                        ", the peer's " + peer_text(peer) + " in " + prefix_text(peer.gid) +
                        ": rdmx addresses InfiniBand peers by LID without a GRH, which does not "
                        "cross IB routers; use ports on one subnet (RDMX_DEVICE, RDMX_PORT)");
    }
    return v;
  }
  if (is_ipv4_mapped(ours.gid) != is_ipv4_mapped(peer.gid)) {
    return refuse(Reach::kFamily,
                  "our " + port_text(ours) + " is an " +
                      (is_ipv4_mapped(ours.gid) ? "IPv4" : "IPv6") + " GID, the peer's " +
                      peer_text(peer) + " an " + (is_ipv4_mapped(peer.gid) ? "IPv4" : "IPv6") +
                      " one: RoCE cannot address one family from the other; give every process "
                      "a GID of one family (RDMX_GID_INDEX; -1 picks the RoCE v2 IPv4 one)");
  }
  if (!roce_v2 || is_link_local6(ours.gid) || lookup == nullptr) {
    return v;  // RoCE v1 or link-local IPv6: switched, not routed; nothing to look up
  }
  const RouteAnswer r = lookup(ours.gid, peer.gid, user);
  if (!r.checked) {
    return v;
  }
  if (r.error != 0) {
    return refuse(Reach::kNoRoute,
                  "the kernel has no route from our " + port_text(ours) + " to the peer's " +
                      peer_text(peer) + ": connect() to its RoCE v2 port says '" +
                      std::strerror(r.error) + "'" + route_kind(r.error) +
                      "; check `ip route get " + gid_text(peer.gid) + " from " +
                      gid_text(ours.gid) +
                      "`, or choose another GID or device (RDMX_GID_INDEX, RDMX_DEVICE)");
  }
  if (!r.bound) {
    v.note = "our GID's address " + gid_text(ours.gid) +
             " could not be bound (not on this network namespace?): the route to " +
             gid_text(peer.gid) + " was looked up from any source";
  } else if (r.source != ours.gid) {
    v.note = "the kernel would send to " + gid_text(peer.gid) + " from " + gid_text(r.source) +
             ", not from our GID's address " + gid_text(ours.gid);
  }
  return v;
}

RouteAnswer kernel_route(const GidBytes& from, const GidBytes& to, void* /*user*/) {
  RouteAnswer out;
  const bool v4 = is_ipv4_mapped(to);
  const int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return out;
  }
  out.checked = true;
  sockaddr_storage src{};
  sockaddr_storage dst{};
  socklen_t len = 0;
  if (v4) {
    auto* s = reinterpret_cast<sockaddr_in*>(&src);
    auto* d = reinterpret_cast<sockaddr_in*>(&dst);
    s->sin_family = d->sin_family = AF_INET;
    std::memcpy(&s->sin_addr, from.data() + 12, 4);
    std::memcpy(&d->sin_addr, to.data() + 12, 4);
    d->sin_port = htons(kRoceV2Port);
    len = sizeof(sockaddr_in);
  } else {
    auto* s = reinterpret_cast<sockaddr_in6*>(&src);
    auto* d = reinterpret_cast<sockaddr_in6*>(&dst);
    s->sin6_family = d->sin6_family = AF_INET6;
    std::memcpy(&s->sin6_addr, from.data(), 16);
    std::memcpy(&d->sin6_addr, to.data(), 16);
    d->sin6_port = htons(kRoceV2Port);
    len = sizeof(sockaddr_in6);
  }
  // Bound to our GID's address, the lookup is the one for packets from it (policy routing
  // by source included); an address not in this namespace leaves the choice to the kernel.
  out.bound = bind(fd, reinterpret_cast<const sockaddr*>(&src), len) == 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&dst), len) != 0) {
    out.error = errno;
  } else {
    sockaddr_storage got{};
    socklen_t got_len = sizeof(got);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&got), &got_len) == 0) {
      if (v4) {
        out.source[10] = out.source[11] = 0xff;
        std::memcpy(out.source.data() + 12, &reinterpret_cast<const sockaddr_in*>(&got)->sin_addr,
                    4);
      } else {
        std::memcpy(out.source.data(), &reinterpret_cast<const sockaddr_in6*>(&got)->sin6_addr, 16);
      }
    } else {
      out.source = from;
    }
  }
  (void)close(fd);
  return out;
}

}  // namespace rdmx::transport
