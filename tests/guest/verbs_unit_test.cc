// Host tests (label "unit") of the verbs layer's pure logic: the checks made before calling a
// verb, error formatting, use counting, and the leak-check parser. No device is touched.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <type_traits>

#include "tests/guest/support/leak_check.h"
#include "verbs/context.h"
#include "verbs/error.h"
#include "verbs/qp.h"
#include "verbs/srq.h"
#include "verbs/use_count.h"

namespace rdmx::verbs {
namespace {

// rxe's figures (ibv_devinfo -v on kernel 6.1).
ibv_device_attr rxe_like_attr() {
  ibv_device_attr attr{};
  attr.max_srq = 917503;
  attr.max_srq_wr = 1048576;
  attr.max_srq_sge = 27;
  return attr;
}

TEST(SrqRequestCheck, DeviceWithoutSrqSupportIsEnosysNotACrash) {
  ibv_device_attr attr = rxe_like_attr();
  attr.max_srq = 0;
  try {
    check_srq_request(attr, 16, 1);
    FAIL() << "accepted an SRQ on a device with max_srq 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.errnum(), ENOSYS);
    EXPECT_EQ(e.verb(), "ibv_create_srq");
    EXPECT_NE(std::string(e.what()).find("no SRQ support"), std::string::npos) << e.what();
  }
}

TEST(SrqRequestCheck, MaxWrAboveDeviceLimitIsEinvalNamingTheLimit) {
  try {
    check_srq_request(rxe_like_attr(), 2000000, 1);
    FAIL() << "accepted max_wr above max_srq_wr";
  } catch (const Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_STREQ(e.what(),
                 "ibv_create_srq: max_wr 2000000 exceeds device max_srq_wr 1048576: Invalid "
                 "argument (EINVAL)");
  }
}

TEST(SrqRequestCheck, MaxSgeAboveDeviceLimitIsEinvalNamingTheLimit) {
  try {
    check_srq_request(rxe_like_attr(), 16, 28);
    FAIL() << "accepted max_sge above max_srq_sge";
  } catch (const Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("max_sge 28 exceeds device max_srq_sge 27"),
              std::string::npos)
        << e.what();
  }
}

TEST(SrqRequestCheck, LimitsThemselvesAndZeroRequests) {
  EXPECT_NO_THROW(check_srq_request(rxe_like_attr(), 1048576, 27));
  EXPECT_THROW(check_srq_request(rxe_like_attr(), 0, 1), Error);
  EXPECT_THROW(check_srq_request(rxe_like_attr(), 16, 0), Error);
}

TEST(VerbErrno, IntVerbsReturnTheErrnoValueNotMinusOne) {
  EXPECT_EQ(verb_errno(0), 0);
  EXPECT_EQ(verb_errno(EBUSY), EBUSY);  // the libibverbs convention: `rv < 0` would miss it
  errno = ENOMEM;
  EXPECT_EQ(verb_errno(-1), ENOMEM);  // legacy -1 + errno
  EXPECT_EQ(verb_errno(-EINVAL), EINVAL);
  EXPECT_THROW(check_rc(EBUSY, "ibv_destroy_cq"), Error);
  EXPECT_NO_THROW(check_rc(0, "ibv_destroy_cq"));
}

TEST(CheckCreated, NullCarriesVerbErrnoAndStrerror) {
  errno = EPERM;
  try {
    check_created(static_cast<ibv_pd*>(nullptr), "ibv_alloc_pd", "rxe0");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.errnum(), EPERM);
    EXPECT_STREQ(e.what(), "ibv_alloc_pd: rxe0: Operation not permitted (EPERM)");
  }
  int x = 0;
  EXPECT_EQ(check_created(&x, "ibv_alloc_pd"), &x);
}

TEST(UseCounter, CountsReferencesAcrossMovesOfTheOwner) {
  UseCounter counter;
  UseRef a = counter.acquire();
  UseRef b = counter.acquire();
  EXPECT_EQ(counter.count(), 2);
  UseCounter moved = std::move(counter);  // the wrapper owning the counter was moved
  EXPECT_EQ(moved.count(), 2);
  a.reset();
  EXPECT_EQ(moved.count(), 1);
  UseRef c = std::move(b);
  EXPECT_EQ(moved.count(), 1);
  c = UseRef();
  EXPECT_EQ(moved.count(), 0);
}

TEST(Explicit, TrapAttributesHaveNoDefault) {
  // Leaving them out of a designated initializer must not compile.
  static_assert(!std::is_default_constructible_v<RcRtsAttr>);
  static_assert(!std::is_default_constructible_v<RcRtrAttr>);
  static_assert(!std::is_default_constructible_v<UdInitAttr>);
  const RcRtsAttr rts{.sq_psn = 1, .timeout = 14, .retry_cnt = 7, .max_rd_atomic = 1};
  EXPECT_EQ(rts.rnr_retry, 7) << "RC default must be infinite RNR retry (SRQ peers)";
  EXPECT_EQ(static_cast<std::uint8_t>(rts.timeout), 14);
}

TEST(Gid, Ipv4MappedAndFormatting) {
  ibv_gid gid{};
  EXPECT_TRUE(is_zero(gid));
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  gid.raw[12] = 10;
  gid.raw[13] = 99;
  gid.raw[14] = 0;
  gid.raw[15] = 1;
  EXPECT_TRUE(is_ipv4_mapped(gid));
  EXPECT_EQ(to_string(gid), "0000:0000:0000:0000:0000:ffff:0a63:0001");
  gid.raw[0] = 0xfe;
  EXPECT_FALSE(is_ipv4_mapped(gid));
}

TEST(LeakCheckParser, ParsesTheRdmaToolsBatchOutput) {
  // Captured from `rdma -j -b -` in the guest (iproute2 6.1, kernel 6.1), with an SRQ's
  // nested "lqpn" list.
  const std::string text =
      R"([{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":17,"type":"RC","state":"INIT","pid":155,"comm":"ibv_rc_pingpong"},{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"}])"
      "\n"
      R"([{"ifindex":0,"ifname":"rxe0","srqn":0,"type":"BASIC","lqpn":["18-19"],"pdn":2,"pid":157,"comm":"18-19"}])"
      "\n[]\n";
  const auto objs = test::parse_rdma_json(text, {"qp", "srq", "mr"});
  ASSERT_EQ(objs.size(), 3u);
  EXPECT_EQ(objs[0].kind, "qp");
  EXPECT_EQ(objs[0].pid(), 155);
  EXPECT_EQ(objs[0].key(), "qp rxe0 lqpn 17");
  EXPECT_FALSE(objs[1].pid().has_value()) << "kernel objects carry no pid";
  EXPECT_EQ(objs[2].kind, "srq");
  EXPECT_EQ(objs[2].field("lqpn"), R"(["18-19"])");
  EXPECT_EQ(objs[2].key(), "srq rxe0 srqn 0");
  EXPECT_THROW(test::parse_rdma_json("[", {"qp"}), std::runtime_error);
  EXPECT_THROW(test::parse_rdma_json("[]", {"qp", "cq"}), std::runtime_error);
}

}  // namespace
}  // namespace rdmx::verbs
