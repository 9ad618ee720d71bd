// Host unit tests of plugin/ucx's pure rules: the version check that keeps the module out of a
// UCX it was not built for, the MD names, the access translation, the packed rkey, the port's
// data rate and the worker address split into UCP's device and interface addresses.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "plugin/ucx/md_format.h"
#include "plugin/ucx/tl_address.h"
#include "plugin/ucx/version_check.h"
#include "protocol/address.h"
#include "rdmx/rdmx.h"

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
  RemoteKey key;
  key.md_rkey = 0x11223344u;
  key.workers[0] = {0x0102030405060708ull, 0xa1a2a3a4u};
  key.workers[kMaxRmaWorkers - 1] = {~std::uint64_t{0}, 0xffffffffu};
  pack_rkey(key, buf.data());
  EXPECT_EQ(buf[0], 0x44);  // the MD's rkey first, little-endian
  EXPECT_EQ(buf[3], 0x11);
  EXPECT_EQ(buf[4], 0x08);  // then the first worker's uid and rkey
  EXPECT_EQ(buf[11], 0x01);
  EXPECT_EQ(buf[12], 0xa4);
  EXPECT_EQ(buf[15], 0xa1);
  EXPECT_EQ(buf[kPackedRkeySize - 1], 0xff);
  const RemoteKey back = unpack_rkey(buf.data());
  EXPECT_EQ(back.md_rkey, key.md_rkey);
  for (std::size_t i = 0; i < kMaxRmaWorkers; ++i) {
    EXPECT_EQ(back.workers[i].uid, key.workers[i].uid) << i;
    EXPECT_EQ(back.workers[i].rkey, key.workers[i].rkey) << i;
  }
}

TEST(UcxRkey, TheRkeyOfTheWorkerThePeerIsConnectedTo) {
  RemoteKey key;
  key.md_rkey = 7;
  key.workers[1] = {42, 0x4242};
  key.workers[2] = {43, 0x4343};
  EXPECT_EQ(key.rkey_for(42), 0x4242u);
  EXPECT_EQ(key.rkey_for(43), 0x4343u);
  EXPECT_EQ(key.rkey_for(44), std::nullopt);  // registered before that worker came, past the max
  EXPECT_EQ(key.rkey_for(0), std::nullopt);   // an empty entry is no worker's
}

TEST(UcxPortRate, WidthTimesLaneRateAfterEncoding) {
  // 1x SDR: 2.5 Gb/s, 8b/10b: 250 MB/s (what rxe reports on a slow link).
  EXPECT_DOUBLE_EQ(port_data_rate(1, 1), 250e6);
  // 4x EDR: 4 x 25.78125 Gb/s x 64/66 = 100 Gb/s = 12.5 GB/s.
  EXPECT_DOUBLE_EQ(port_data_rate(2, 32), 12.5e9);
  // 4x QDR = 32 Gb/s of data.
  EXPECT_DOUBLE_EQ(port_data_rate(2, 4), 4e9);
  EXPECT_EQ(port_data_rate(3, 1), 0);  // no such width code
  EXPECT_EQ(port_data_rate(1, 3), 0);  // no such speed code
}

protocol::WorkerAddress sample_worker(std::uint8_t transport) {
  protocol::WorkerAddress a;
  a.transport = transport;
  a.port = 1;
  a.caps = protocol::kCapRc | (transport == RDMX_TRANSPORT_UD ? protocol::kCapUd : 0);
  a.uid = 0x1122334455667788ull;
  a.instance = 0x99aabbccddeeff01ull;
  for (std::size_t i = 0; i < a.gid.size(); ++i) {
    a.gid[i] = static_cast<std::uint8_t>(0xf0 + i);
  }
  a.lid = 0x1234;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  a.mtu = 1024;
  a.ctrl_qpn = 0x11;
  a.ud_qpn = {0x12, 0x13};
  a.class_capacity = {496, 992};
  a.max_inline = 256;
  a.rd_atomic = 16;
  return a;
}

TEST(UcxTlAddress, SplitAndJoinGiveTheWorkersAddressBack) {
  for (const std::uint8_t transport : {RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD}) {
    const protocol::WorkerAddress a = sample_worker(transport);
    const protocol::AddressBytes blob = protocol::encode_address(a);
    std::array<std::uint8_t, kTlDeviceAddressSize> dev{};
    std::array<std::uint8_t, kTlIfaceAddressSize> iface{};
    ASSERT_TRUE(split_address(blob.data(), blob.size(), dev.data(), iface.data()));
    EXPECT_EQ(iface_address_transport(iface.data()), transport);
    protocol::AddressBytes joined{};
    ASSERT_TRUE(join_address(dev.data(), iface.data(), &joined));
    protocol::WorkerAddress b;
    ASSERT_EQ(protocol::decode_address(joined.data(), joined.size(), &b), RDMX_OK);
    EXPECT_EQ(b, a);  // every field the split keeps (node id, pid, name were never set)
  }
}

TEST(UcxTlAddress, TheDeviceAddressIsThePortAlone) {
  // Two workers on one port: UCP groups interfaces by device address, so theirs must be equal.
  protocol::WorkerAddress a = sample_worker(RDMX_TRANSPORT_RC);
  protocol::WorkerAddress b = a;
  b.uid = 7;
  b.instance = 8;
  b.ctrl_qpn = 0x99;
  std::array<std::uint8_t, kTlDeviceAddressSize> da{}, db{};
  std::array<std::uint8_t, kTlIfaceAddressSize> ia{}, ib{};
  const auto ba = protocol::encode_address(a), bb = protocol::encode_address(b);
  ASSERT_TRUE(split_address(ba.data(), ba.size(), da.data(), ia.data()));
  ASSERT_TRUE(split_address(bb.data(), bb.size(), db.data(), ib.data()));
  EXPECT_EQ(da, db);
  EXPECT_NE(ia, ib);
}

TEST(UcxTlAddress, RefusesWhatItCannotCarry) {
  protocol::WorkerAddress a = sample_worker(RDMX_TRANSPORT_RC);
  a.caps |= protocol::kCapShm;  // node id and pid would be lost
  a.node_id = 5;
  a.pid = 6;
  const auto blob = protocol::encode_address(a);
  std::array<std::uint8_t, kTlDeviceAddressSize> dev{};
  std::array<std::uint8_t, kTlIfaceAddressSize> iface{};
  EXPECT_FALSE(split_address(blob.data(), blob.size(), dev.data(), iface.data()));
  EXPECT_FALSE(split_address(blob.data(), blob.size() - 1, dev.data(), iface.data()));
  // Parts that are no worker's: a zero uid is refused by rdmx's own decoder.
  const auto good = protocol::encode_address(sample_worker(RDMX_TRANSPORT_UD));
  ASSERT_TRUE(split_address(good.data(), good.size(), dev.data(), iface.data()));
  std::fill(iface.begin() + 3, iface.begin() + 11, 0);  // the uid
  protocol::AddressBytes joined{};
  EXPECT_FALSE(join_address(dev.data(), iface.data(), &joined));
}

}  // namespace
}  // namespace rdmx::ucx
