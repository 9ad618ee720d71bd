// Host unit tests: whether a peer can be reached, from the two addresses (transport/reach.h), with
// the kernel's route lookup replaced by a table; and the real lookup on the loopback address.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>

#include "protocol/address.h"
#include "transport/reach.h"

namespace rdmx::transport {
namespace {

using protocol::WorkerAddress;

GidBytes v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  GidBytes g{};
  g[10] = g[11] = 0xff;
  g[12] = a;
  g[13] = b;
  g[14] = c;
  g[15] = d;
  return g;
}

GidBytes v6(std::uint16_t first, std::uint8_t last) {
  GidBytes g{};
  g[0] = static_cast<std::uint8_t>(first >> 8);
  g[1] = static_cast<std::uint8_t>(first);
  g[15] = last;
  return g;
}

WorkerAddress roce(const char* device, const GidBytes& gid, std::uint64_t uid) {
  WorkerAddress a;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  a.gid = gid;
  a.uid = uid;
  a.set_device_name(device);
  return a;
}

WorkerAddress ib(const char* device, std::uint64_t prefix, std::uint16_t lid) {
  WorkerAddress a;
  a.link_layer = IBV_LINK_LAYER_INFINIBAND;
  for (int i = 0; i < 8; ++i) {
    a.gid[i] = static_cast<std::uint8_t>(prefix >> (56 - 8 * i));
  }
  a.gid[15] = static_cast<std::uint8_t>(lid);  // a GUID byte
  a.lid = lid;
  a.uid = 0x77;
  a.set_device_name(device);
  return a;
}

// A route table for the tests: `error` for every lookup, and the source it reports.
struct FakeRoutes {
  int error = 0;
  bool bound = true;
  GidBytes source{};
  bool use_from_as_source = true;
  int calls = 0;
};

RouteAnswer fake_route(const GidBytes& from, const GidBytes& /*to*/, void* user) {
  auto& f = *static_cast<FakeRoutes*>(user);
  ++f.calls;
  RouteAnswer r;
  r.checked = true;
  r.error = f.error;
  r.bound = f.bound;
  r.source = f.use_from_as_source ? from : f.source;
  return r;
}

TEST(Reach, SameRoceSubnetWithARouteIsReachable) {
  FakeRoutes routes;
  const ReachVerdict v =
      classify_reach(roce("rxe1", v4(10, 99, 1, 1), 1), roce("rxe2", v4(10, 99, 1, 2), 2), true,
                     fake_route, &routes);
  EXPECT_EQ(v.reach, Reach::kOk) << v.why;
  EXPECT_TRUE(v.why.empty());
  EXPECT_TRUE(v.note.empty());
  EXPECT_EQ(routes.calls, 1);
}

TEST(Reach, NoKernelRouteIsRefusedNamingBothDevicesAndGids) {
  FakeRoutes routes;
  routes.error = ENETUNREACH;
  const ReachVerdict v =
      classify_reach(roce("rxe1", v4(10, 97, 0, 1), 1), roce("rxe2", v4(10, 99, 1, 2), 0xabc), true,
                     fake_route, &routes);
  EXPECT_EQ(v.reach, Reach::kNoRoute);
  for (const char* part : {"rxe1", "10.97.0.1", "rxe2", "10.99.1.2", "0000000000000abc",
                           "ip route get 10.99.1.2 from 10.97.0.1", "RDMX_GID_INDEX"}) {
    EXPECT_NE(v.why.find(part), std::string::npos) << part << " not in: " << v.why;
  }
  routes.error = EINVAL;  // what a blackhole route gives connect()
  const ReachVerdict b =
      classify_reach(roce("rxe1", v4(10, 97, 0, 1), 1), roce("rxe2", v4(10, 99, 1, 2), 2), true,
                     fake_route, &routes);
  EXPECT_EQ(b.reach, Reach::kNoRoute);
  EXPECT_NE(b.why.find("blackhole"), std::string::npos) << b.why;
}

TEST(Reach, AnotherSourceAddressIsANoteNotARefusal) {
  FakeRoutes routes;
  routes.use_from_as_source = false;
  routes.source = v4(10, 99, 1, 1);
  const ReachVerdict v =
      classify_reach(roce("rxe1", v4(10, 97, 0, 1), 1), roce("rxe2", v4(10, 99, 1, 2), 2), true,
                     fake_route, &routes);
  EXPECT_EQ(v.reach, Reach::kOk);
  EXPECT_NE(v.note.find("from 10.99.1.1, not from our GID's address 10.97.0.1"), std::string::npos)
      << v.note;
}

TEST(Reach, LinkLayersMustMatch) {
  FakeRoutes routes;
  const ReachVerdict v =
      classify_reach(roce("rxe1", v4(10, 99, 1, 1), 1), ib("mlx5_0", 0xfe80000000000000ull, 5),
                     true, fake_route, &routes);
  EXPECT_EQ(v.reach, Reach::kLinkLayer);
  EXPECT_NE(v.why.find("Ethernet (RoCE)"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("InfiniBand"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("mlx5_0"), std::string::npos) << v.why;
  EXPECT_EQ(routes.calls, 0);  // refused before any lookup
}

TEST(Reach, RoceGidFamiliesMustMatch) {
  FakeRoutes routes;
  const ReachVerdict v = classify_reach(roce("rxe1", v4(10, 99, 1, 1), 1),
                                        roce("rxe2", v6(0x2001, 2), 2), true, fake_route, &routes);
  EXPECT_EQ(v.reach, Reach::kFamily);
  EXPECT_NE(v.why.find("IPv4"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("IPv6"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("2001::2"), std::string::npos) << v.why;
  EXPECT_EQ(routes.calls, 0);
}

TEST(Reach, Ipv6GidsAreRoutedLinkLocalAndRoceV1AreNot) {
  FakeRoutes routes;
  routes.error = EHOSTUNREACH;
  EXPECT_EQ(classify_reach(roce("rxe1", v6(0x2001, 1), 1), roce("rxe2", v6(0x2001, 2), 2), true,
                           fake_route, &routes)
                .reach,
            Reach::kNoRoute);
  EXPECT_EQ(routes.calls, 1);
  // fe80::/10 has no route to look up without a scope, and RoCE v1 is not routed by IP.
  EXPECT_EQ(classify_reach(roce("rxe1", v6(0xfe80, 1), 1), roce("rxe2", v6(0xfe80, 2), 2), true,
                           fake_route, &routes)
                .reach,
            Reach::kOk);
  EXPECT_EQ(classify_reach(roce("rxe1", v4(10, 0, 0, 1), 1), roce("rxe2", v4(10, 0, 0, 2), 2),
                           false, fake_route, &routes)
                .reach,
            Reach::kOk);
  EXPECT_EQ(routes.calls, 1);
}

TEST(Reach, InfinibandIsLidRoutedWithinOneSubnet) {
  FakeRoutes routes;
  EXPECT_EQ(classify_reach(ib("mlx5_0", 0xfe80000000000000ull, 3),
                           ib("mlx5_1", 0xfe80000000000000ull, 9), true, fake_route, &routes)
                .reach,
            Reach::kOk);
  const ReachVerdict other =
      classify_reach(ib("mlx5_0", 0xfe80000000000000ull, 3), ib("mlx5_1", 0xfec0000000000001ull, 9),
                     true, fake_route, &routes);
  EXPECT_EQ(other.reach, Reach::kSubnet);
  EXPECT_NE(other.why.find("fe80:0000:0000:0000"), std::string::npos) << other.why;
  EXPECT_NE(other.why.find("fec0:0000:0000:0001"), std::string::npos) << other.why;
  EXPECT_NE(other.why.find("without a GRH"), std::string::npos) << other.why;
  const ReachVerdict nolid =
      classify_reach(ib("mlx5_0", 0xfe80000000000000ull, 3), ib("mlx5_1", 0xfe80000000000000ull, 0),
                     true, fake_route, &routes);
  EXPECT_EQ(nolid.reach, Reach::kNoLid);
  EXPECT_NE(nolid.why.find("subnet manager"), std::string::npos) << nolid.why;
  EXPECT_EQ(routes.calls, 0);  // no IP routing on InfiniBand
}

TEST(Reach, GidText) {
  EXPECT_EQ(gid_text(v4(10, 99, 1, 2)), "10.99.1.2");
  EXPECT_EQ(gid_text(v6(0xfe80, 0x12)), "fe80::12");
  EXPECT_TRUE(is_ipv4_mapped(v4(1, 2, 3, 4)));
  EXPECT_FALSE(is_ipv4_mapped(v6(0x2001, 1)));
}

TEST(Reach, KernelRouteOnLoopback) {
  // 127.0.0.1 to itself: a route from the bound address; nothing is sent.
  const RouteAnswer r = kernel_route(v4(127, 0, 0, 1), v4(127, 0, 0, 1), nullptr);
  ASSERT_TRUE(r.checked);
  EXPECT_EQ(r.error, 0);
  EXPECT_TRUE(r.bound);
  EXPECT_EQ(r.source, v4(127, 0, 0, 1));
  // The limited broadcast address cannot be connect()ed to without SO_BROADCAST: an error comes
  // back as an errno, not a crash or a hang.
  const RouteAnswer b = kernel_route(v4(127, 0, 0, 1), v4(255, 255, 255, 255), nullptr);
  ASSERT_TRUE(b.checked);
  EXPECT_NE(b.error, 0);
}

}  // namespace
}  // namespace rdmx::transport
