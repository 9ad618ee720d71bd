// The fabric settings on real rxe devices (issue 29): what is refused at worker creation (a P_Key
// index beyond the port's table, a GID index libibverbs cannot carry, devices that cannot be
// used, each said at verbose), and what the accepted ones become: the path attributes of every
// RC QP as the device reports them (ibv_query_qp), the path MTU cap in the address and in UD's
// packet size, messages of every path still intact.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/address.h"
#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

// rdmx_worker_create with `cfg`; returns its code and what it printed on stderr.
int create_and_capture(rdmx_config_t cfg, std::string* err) {
  rdmx_worker_t* w = nullptr;
  ::testing::internal::CaptureStderr();
  const int rc = rdmx_worker_create(&cfg, &w);
  *err = ::testing::internal::GetCapturedStderr();
  if (w != nullptr) {
    rdmx_worker_destroy(w);
  }
  return rc;
}

// The port attributes of a device's port 1, straight from libibverbs.
ibv_port_attr port_attr(const std::string& device) {
  ibv_port_attr attr{};
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; i < n; ++i) {
    if (device == ibv_get_device_name(list[i])) {
      if (ibv_context* ctx = ibv_open_device(list[i])) {
        (void)ibv_query_port(ctx, 1, &attr);
        (void)ibv_close_device(ctx);
      }
    }
  }
  ibv_free_device_list(list);
  return attr;
}

TEST(Settings, PkeyIndexBeyondThePortsTableIsRefusedNamingTheSetting) {
  RDMX_REQUIRE_DEVICE();
  const std::string dev = test_devices()[0];
  rdmx_config_t cfg = test_config(dev, RDMX_TRANSPORT_RC);
  cfg.pkey_index = port_attr(dev).pkey_tbl_len;  // one past the last entry
  std::string err;
  EXPECT_EQ(create_and_capture(cfg, &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("pkey_index " + std::to_string(cfg.pkey_index) + " is beyond the"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("RDMX_PKEY_INDEX"), std::string::npos) << err;
  // Index 0 (the default) is the port's full-membership default partition on rxe.
  cfg.pkey_index = 0;
  EXPECT_EQ(create_and_capture(cfg, &err), RDMX_OK) << err;
}

TEST(Settings, GidIndexAbove255IsRefusedWithTheReason) {
  RDMX_REQUIRE_DEVICE();
  const std::string dev = test_devices()[0];
  const int table = port_attr(dev).gid_tbl_len;
  if (table <= 300) {
    GTEST_SKIP() << dev << " has " << table << " GIDs: index 300 is refused as beyond the table";
  }
  rdmx_config_t cfg = test_config(dev, RDMX_TRANSPORT_RC);
  cfg.gid_index = 300;
  std::string err;
  EXPECT_EQ(create_and_capture(cfg, &err), RDMX_ERR_NO_DEVICE);
  for (const char* part : {"GID index 300 of", "cannot be used", "sgid_index is a uint8_t",
                           "0..255", "RDMX_GID_INDEX"}) {
    EXPECT_NE(err.find(part), std::string::npos) << part << " not in: " << err;
  }
}

TEST(Settings, DeviceChoiceSaysWhyEachDeviceIsTakenOrSkipped) {
  RDMX_REQUIRE_DEVICE();
  rdmx_config_t cfg = test_config("", RDMX_TRANSPORT_RC);
  cfg.device = nullptr;
  cfg.verbose = 1;
  std::string err;
  ASSERT_EQ(create_and_capture(cfg, &err), RDMX_OK) << err;
  EXPECT_NE(err.find(": taken: port 1 active"), std::string::npos) << err;
  // A port no device has: every device is skipped with its reason, then the worker is refused.
  cfg.port = 2;
  EXPECT_EQ(create_and_capture(cfg, &err), RDMX_ERR_NO_DEVICE);
  for (const std::string& dev : test_devices()) {
    EXPECT_NE(err.find("rdmx: device " + dev + ": skipped: " + dev + " has no port 2"),
              std::string::npos)
        << err;
  }
  if (test_devices().size() > 1) {
    EXPECT_NE(err.find("no other device is usable either"), std::string::npos) << err;
  }
}

struct Case {
  rdmx_transport_t transport;
};

class FabricSettings : public ::testing::TestWithParam<Case> {};

// Two ranks on the two devices with every path setting away from its default: the messages of
// each path arrive intact, and each RC QP (RC mode: two per peer; UD: the rendezvous write QP)
// carries the settings, as ibv_query_qp reports them.
TEST_P(FabricSettings, ReachEveryRcQpAndMessagesArriveIntact) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam().transport;
  const bool ud = transport == RDMX_TRANSPORT_UD;
  ASSERT_TRUE(run_ranks(2, [&](Rank& rank) {
    rdmx_config_t cfg = test_config(device_for(rank.rank(), true), transport);
    cfg.traffic_class = 104;  // DSCP 26
    cfg.service_level = 3;
    cfg.rc_timeout = 14;
    cfg.rc_retry_cnt = 5;
    cfg.path_mtu = 512;
    const Pair pair = open_pair(rank, cfg);
    // The address advertises the capped MTU; on UD one packet is the large class.
    const void* blob = nullptr;
    std::size_t len = 0;
    RDMX_CHECK_OK(rank, rdmx_worker_address(pair.worker, &blob, &len));
    protocol::WorkerAddress self;
    RDMX_CHECK_OK(rank, protocol::decode_address(blob, len, &self));
    RDMX_CHECK_EQ(rank, self.mtu, 512u);
    if (ud) {
      RDMX_CHECK_EQ(rank, self.class_capacity[1], 512u - 32u);
    }
    const std::uint64_t me = rdmx_worker_uid(pair.worker);
    const auto uids = rank.allgather(&me, sizeof(me));
    std::uint64_t peer = 0;
    std::memcpy(&peer, uids[static_cast<std::size_t>(1 - rank.rank())].data(), sizeof(peer));

    // One message per path: the largest eager one (UD: a whole 512-byte packet), one of several
    // packets (RC eager 8 KiB; UD: by rendezvous), and a rendezvous of 1 MiB.
    const std::size_t sizes[] = {self.class_capacity[1], 8192, 1u << 20};
    for (const std::size_t size : sizes) {
      std::vector<std::uint8_t> out(size), in(size, 0);
      for (std::size_t i = 0; i < size; ++i) {
        out[i] = static_cast<std::uint8_t>(i * 13 + size + static_cast<std::size_t>(rank.rank()));
      }
      rdmx_request_t sreq, rreq;
      RDMX_CHECK_OK(rank, rdmx_tag_recv(pair.worker, in.data(), size, peer, size, ~0ull, &rreq,
                                        nullptr, nullptr));
      RDMX_CHECK_OK(rank, rdmx_tag_send(pair.ep, out.data(), size, size, RDMX_SEND_FLUSH, &sreq,
                                        nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, pair.worker, &sreq, nullptr, "send"));
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, wait_request(rank, pair.worker, &rreq, &st, "receive"));
      RDMX_CHECK_EQ(rank, st.length, size);
      for (std::size_t i = 0; i < size; ++i) {
        const auto want =
            static_cast<std::uint8_t>(i * 13 + size + static_cast<std::size_t>(1 - rank.rank()));
        if (in[i] != want) {
          rank.fail(__FILE__, __LINE__,
                    "byte " + std::to_string(i) + " of " + std::to_string(size) + " differs");
        }
      }
    }
    const auto paths = transport::debug::rc_paths(pair.worker, peer);
    RDMX_CHECK(rank, !paths.empty());
    for (const auto& p : paths) {
      RDMX_CHECK_EQ(rank, p.traffic_class, 104);
      // rxe keeps no SL (RoCE has none; the priority is the traffic class's DSCP): its
      // ibv_query_qp reports 0 whatever was set. Other devices report what rdmx set.
      if (device_for(rank.rank(), true).rfind("rxe", 0) != 0) {
        RDMX_CHECK_EQ(rank, p.sl, 3);
      }
      RDMX_CHECK(rank, p.is_global);  // RoCE: always a GRH
      RDMX_CHECK_EQ(rank, p.pkey_index, 0);
      RDMX_CHECK_EQ(rank, p.path_mtu, 512);
      RDMX_CHECK_EQ(rank, p.timeout, 14);
      RDMX_CHECK_EQ(rank, p.retry_cnt, 5);
    }
    rank.barrier();
    rdmx_ep_destroy(pair.ep);
    rdmx_worker_destroy(pair.worker);
  }));
}

std::string case_name(const ::testing::TestParamInfo<Case>& param) {
  return param.param.transport == RDMX_TRANSPORT_RC ? "Rc" : "Ud";
}

INSTANTIATE_TEST_SUITE_P(Transports, FabricSettings,
                         ::testing::Values(Case{RDMX_TRANSPORT_RC}, Case{RDMX_TRANSPORT_UD}),
                         case_name);

}  // namespace
}  // namespace rdmx::test
