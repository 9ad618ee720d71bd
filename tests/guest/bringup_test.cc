// Device discovery, GID selection, memory registration and the RC/UD bring-up the eager layer
// builds on: two QPs of one device exchanging messages (rxe loops them back internally).
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tests/guest/support/guest_env.h"
#include "tests/guest/support/leak_check.h"
#include "tests/guest/support/verbs_fixture.h"
#include "verbs/ah.h"
#include "verbs/error.h"

namespace rdmx::test {
namespace {

class BringUpTest : public VerbsTest {};

TEST_F(BringUpTest, OpensTheHarnessDeviceAndFindsTheRoceV2Ipv4Gid) {
  EXPECT_EQ(dev->ctx.name(), test_devices().front());
  const ibv_port_attr port = dev->ctx.query_port(dev->port);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  std::printf("device %s port %u link_layer %s active_mtu %d gid[%u] %s\n", dev->ctx.name().c_str(),
              dev->port, port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB",
              128 << static_cast<int>(port.active_mtu), dev->gid_index,
              verbs::to_string(dev->gid).c_str());
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    EXPECT_TRUE(verbs::is_ipv4_mapped(dev->gid));
    EXPECT_EQ(verbs::query_gid_type(dev->ctx, dev->port, dev->gid_index), IBV_GID_TYPE_ROCE_V2);
    // The harness found it through sysfs; we found it through ibv_query_gid_ex.
    if (const auto env = test_gid_index()) {
      EXPECT_EQ(static_cast<int>(dev->gid_index), *env);
    }
    const auto ips = test_ips();
    if (!ips.empty()) {
      char ip[32];
      std::snprintf(ip, sizeof(ip), "%u.%u.%u.%u", dev->gid.raw[12], dev->gid.raw[13],
                    dev->gid.raw[14], dev->gid.raw[15]);
      EXPECT_EQ(ip, ips.front());
    }
  } else {
    EXPECT_EQ(dev->gid_index, 0u);
  }
}

TEST_F(BringUpTest, UnknownDeviceNameIsEnodev) {
  try {
    verbs::Context::open("no_such_rdma_device");
    FAIL() << "opened a device that does not exist";
  } catch (const verbs::Error& e) {
    EXPECT_EQ(e.errnum(), ENODEV);
    EXPECT_NE(std::string(e.what()).find("no_such_rdma_device"), std::string::npos);
  }
  // And without a name: the first device with an active port.
  verbs::Context any = verbs::Context::open();
  EXPECT_NE(any.first_active_port(), 0);
}

// No device opened in this process: the test forks, and a child must not inherit verbs state.
class RegistrationTest : public GuestTest {};

TEST_F(RegistrationTest, RefusedPinningNamesUlimit) {
  // Root pins without limit (CAP_IPC_LOCK). A child drops that capability and lowers
  // RLIMIT_MEMLOCK so that ibv_reg_mr fails as it does for ordinary users.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    std::string msg;
    int code = 2;
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    rlimit lim{rlim_t{64} << 10, rlim_t{64} << 10};
    if (syscall(SYS_capget, &hdr, data) != 0) {
      msg = "capget failed";
    } else {
      data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
      data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
      if (syscall(SYS_capset, &hdr, data) != 0 || setrlimit(RLIMIT_MEMLOCK, &lim) != 0) {
        msg = "cannot drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK";
      } else {
        try {
          TestDevice d = TestDevice::open();
          verbs::ProtectionDomain p = verbs::ProtectionDomain::create(d.ctx);
          std::vector<std::uint8_t> big(8 << 20);
          verbs::MemoryRegion mr =
              verbs::MemoryRegion::create(p, big.data(), big.size(), IBV_ACCESS_LOCAL_WRITE);
          msg = "registration of 8 MiB with a 64 KiB memlock limit succeeded";
          code = 1;
        } catch (const verbs::Error& e) {
          msg = e.what();
          code = (e.errnum() == ENOMEM || e.errnum() == EPERM) &&
                         std::string(e.what()).find("ulimit -l") != std::string::npos
                     ? 0
                     : 1;
        }
      }
    }
    const ssize_t w = write(fds[1], msg.data(), msg.size());
    _exit(w >= 0 ? code : 2);
  }
  close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) {
    msg.append(buf, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  std::printf("child: %s\n", msg.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0) << msg;
  // The child's objects died with it.
  EXPECT_TRUE(no_rdma_objects_of(child));
}

TEST_F(BringUpTest, RcPairExchangesAMessage) {
  QpPair pair(*dev, *pd, IBV_QPT_RC, 16,
              verbs::QpCaps{.max_send_wr = 8, .max_recv_wr = 8, .max_inline_data = 64});
  auto& [cq_a, cq_b, a, b] = pair;
  EXPECT_GE(a.caps().max_send_wr, 8u);
  EXPECT_GE(a.caps().max_inline_data, 64u);
  Buffer abuf(*pd, 4096);
  Buffer bbuf(*pd, 4096);
  connect_rc_pair(*dev, a, b);
  EXPECT_EQ(a.query_state(), IBV_QPS_RTS);

  for (std::uint64_t i = 0; i < 2; ++i) {
    ibv_sge sge = bbuf.sge(i * 256, 256);
    ibv_recv_wr wr{.wr_id = 100 + i, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ASSERT_TRUE(b.post_recv(&wr));
  }
  const char hello[] = "hello rdmx over RC";
  std::memcpy(abuf.at(0), hello, sizeof(hello));
  post_send(a, abuf, 0, sizeof(hello), 42);
  // An inline send: the payload is copied at post time, so the buffer may change right after.
  const char inl[] = "inline payload";
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(inl), sizeof(inl), 0};
  ibv_send_wr wr{};
  wr.wr_id = 43;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ASSERT_TRUE(a.post_send(&wr));

  const auto sent = poll_n(cq_a.get(), 2);
  ASSERT_EQ(sent.size(), 2u);
  for (const ibv_wc& wc : sent) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  }
  const auto got = poll_n(cq_b.get(), 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 100u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS) << wc_status(got[0]);
  EXPECT_EQ(got[0].byte_len, sizeof(hello));
  EXPECT_STREQ(reinterpret_cast<const char*>(bbuf.at(0)), hello);
  EXPECT_EQ(got[1].wr_id, 101u);
  EXPECT_STREQ(reinterpret_cast<const char*>(bbuf.at(256)), inl);

  for (QueuePair* qp : {&a, &b}) {
    const verbs::TeardownReport r =
        qp->shutdown([](const ibv_wc& wc) { ADD_FAILURE() << "unexpected wr_id " << wc.wr_id; });
    EXPECT_EQ(r.destroy_error, 0);
    EXPECT_FALSE(r.drain_timed_out);
  }
}

TEST_F(BringUpTest, UdPairExchangesAMessageWithTheGrhFirst) {
  QpPair pair(*dev, *pd, IBV_QPT_UD, 16, verbs::QpCaps{.max_send_wr = 8, .max_recv_wr = 8});
  auto& [cq_a, cq_b, a, b] = pair;
  activate_ud(pair, *dev);
  verbs::AddressHandle ah = loopback_ah(*pd, *dev);
  Buffer abuf(*pd, 4096);
  Buffer bbuf(*pd, 4096);

  constexpr std::uint32_t kPayload = 200;
  ibv_sge rsge = bbuf.sge(0, kGrhBytes + kPayload);
  ibv_recv_wr rwr{.wr_id = 7, .next = nullptr, .sg_list = &rsge, .num_sge = 1};
  ASSERT_TRUE(b.post_recv(&rwr));
  for (std::uint32_t i = 0; i < kPayload; ++i) {
    *abuf.at(i) = static_cast<std::uint8_t>(i * 7 + 1);
  }
  post_send(a, abuf, 0, kPayload, 9, ah.get(), b.qp_num());

  const auto sent = poll_n(cq_a.get(), 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS) << wc_status(sent[0]);
  const auto got = poll_n(cq_b.get(), 1);
  ASSERT_EQ(got.size(), 1u);
  const ibv_wc& wc = got[0];
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status(wc);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.src_qp, a.qp_num());
  EXPECT_TRUE((wc.wc_flags & IBV_WC_GRH) != 0) << "RoCE: every UD receive carries a GRH";
  EXPECT_EQ(wc.byte_len, kGrhBytes + kPayload) << "byte_len counts the 40-byte GRH";
  EXPECT_EQ(std::memcmp(bbuf.at(kGrhBytes), abuf.at(0), kPayload), 0)
      << "payload must start at offset 40";
  if (verbs::is_ipv4_mapped(dev->gid)) {
    // RoCE v2 over IPv4: the 20-byte IPv4 header sits in the last 20 bytes of the GRH area.
    EXPECT_EQ(*bbuf.at(20) >> 4, 4) << "IPv4 header expected at offset 20";
    EXPECT_EQ(std::memcmp(bbuf.at(20 + 12), &dev->gid.raw[12], 4), 0) << "source IP";
  }

  for (QueuePair* qp : {&a, &b}) {
    const verbs::TeardownReport r =
        qp->shutdown([](const ibv_wc& c) { ADD_FAILURE() << "unexpected wr_id " << c.wr_id; },
                     verbs::TeardownOptions{.ud_marker_ah = ah.get()});
    EXPECT_EQ(r.destroy_error, 0);
    EXPECT_TRUE(r.send_marker_returned);
    EXPECT_TRUE(r.recv_marker_returned);
  }
}

TEST_F(BringUpTest, LeakCheckSeesAnObjectLeftBehind) {
  // The helper itself must be able to fail: a raw PD nobody deallocates is reported.
  RdmaLeakCheck check;
  check.baseline();
  ibv_pd* raw = ibv_alloc_pd(dev->ctx.get());
  ASSERT_NE(raw, nullptr);
  const auto leaked = check.new_objects();
  ASSERT_EQ(leaked.size(), 1u);
  EXPECT_EQ(leaked[0].kind, "pd");
  EXPECT_EQ(leaked[0].pid(), getpid());
  EXPECT_FALSE(check.no_new_objects());
  EXPECT_FALSE(no_rdma_objects_of(getpid()));
  ASSERT_EQ(ibv_dealloc_pd(raw), 0);
  EXPECT_TRUE(check.no_new_objects());
}

}  // namespace
}  // namespace rdmx::test
