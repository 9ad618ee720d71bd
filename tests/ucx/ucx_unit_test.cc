// Host unit tests of plugin/ucx's pure rules: the version check that keeps the module out of a
// UCX it was not built for, the MD names, the access translation and the packed rkey.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <uct/api/uct.h>

#include <array>
#include <cstdint>

#include "plugin/ucx/md_format.h"
#include "plugin/ucx/version_check.h"

namespace rdmx::ucx {
namespace {

TEST(UcxVersionCheck, SameMajorMinorRegisters) {
  EXPECT_EQ(version_mismatch({1, 13}, {1, 13}), "");
}

TEST(UcxVersionCheck, OtherMinorIsRefusedWithBothVersionsAndTheFix) {
  const std::string m = version_mismatch({1, 13}, {1, 16});
  EXPECT_NE(m.find("UCX 1.13"), std::string::npos) << m;
  EXPECT_NE(m.find("UCX 1.16"), std::string::npos) << m;
  EXPECT_NE(m.find("Rebuild rdmx against the installed UCX"), std::string::npos) << m;
  EXPECT_NE(m.find("not registered"), std::string::npos) << m;
  // An older runtime is as incompatible as a newer one.
  EXPECT_NE(version_mismatch({1, 13}, {1, 12}), "");
}

TEST(UcxVersionCheck, OtherMajorIsRefused) {
  EXPECT_NE(version_mismatch({1, 13}, {2, 13}), "");
  EXPECT_NE(version_mismatch({2, 0}, {1, 0}), "");
}

TEST(UcxVersionCheck, TheMessageSaysWhichVersionIsWhich) {
  const std::string m = version_mismatch({1, 13}, {1, 16});
  EXPECT_NE(m.find("built against UCX 1.13 but this process runs UCX 1.16"), std::string::npos)
      << m;
}

TEST(UcxMdName, PrefixedDeviceNameWithinUcxLimit) {
  EXPECT_EQ(md_name("rxe0", 15), "rdmx_rxe0");
  EXPECT_EQ(md_name("rocep1s0f0", 15), "rdmx_rocep1s0f0");  // exactly 15 characters
  EXPECT_EQ(md_name("rocep1s0f10", 15), std::nullopt);      // would be truncated: skipped
  EXPECT_EQ(md_name("", 15), std::nullopt);
}

TEST(UcxMdName, DeviceOfOnlyOurNames) {
  EXPECT_EQ(device_of("rdmx_rxe0"), "rxe0");
  EXPECT_EQ(device_of("rxe0"), std::nullopt);  // the ib component's MD
  EXPECT_EQ(device_of("rdmx_"), std::nullopt);
  EXPECT_EQ(device_of(*md_name("mlx5_0", 15)), "mlx5_0");
}

TEST(UcxAccess, EachUctRightMapsToTheVerbsItNeeds) {
  EXPECT_EQ(ibv_access(UCT_MD_MEM_ACCESS_LOCAL_READ), 0);
  EXPECT_EQ(ibv_access(UCT_MD_MEM_ACCESS_LOCAL_WRITE), IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(ibv_access(UCT_MD_MEM_ACCESS_REMOTE_GET), IBV_ACCESS_REMOTE_READ);
  // ibv_reg_mr refuses remote write or atomics without local write.
  EXPECT_EQ(ibv_access(UCT_MD_MEM_ACCESS_REMOTE_PUT),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(ibv_access(UCT_MD_MEM_ACCESS_REMOTE_ATOMIC),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
}

TEST(UcxAccess, NoAccessBitMeansAllAndOtherFlagsAreIgnored) {
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                  IBV_ACCESS_REMOTE_ATOMIC;
  EXPECT_EQ(ibv_access(UCT_MD_MEM_ACCESS_ALL), all);
  EXPECT_EQ(ibv_access(0), all);
  EXPECT_EQ(ibv_access(UCT_MD_MEM_FLAG_NONBLOCK | UCT_MD_MEM_FLAG_HIDE_ERRORS), all);
  EXPECT_EQ(ibv_access(UCT_MD_MEM_FLAG_HIDE_ERRORS | UCT_MD_MEM_ACCESS_REMOTE_GET),
            IBV_ACCESS_REMOTE_READ);
}

TEST(UcxRkey, PackedLittleEndianAndRoundTrips) {
  std::array<unsigned char, kPackedRkeySize> buf{};
  pack_rkey(0x11223344u, buf.data());
  EXPECT_EQ(buf, (std::array<unsigned char, kPackedRkeySize>{0x44, 0x33, 0x22, 0x11}));
  for (std::uint32_t rkey : {0u, 1u, 0x1234u, 0xfffffffeu, 0xffffffffu}) {
    pack_rkey(rkey, buf.data());
    EXPECT_EQ(unpack_rkey(buf.data()), rkey);
  }
}

}  // namespace
}  // namespace rdmx::ucx
