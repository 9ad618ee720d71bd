// Host unit tests: configuration defaults and RDMX_* parsing, size resolution, address blobs,
// rdmx_strerror, the RC order guard.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "protocol/address.h"
#include "protocol/wire.h"
#include "rdmx/rdmx.h"
#include "transport/channel/order_guard.h"
#include "transport/config.h"

namespace rdmx::transport {
namespace {

// The address blob lives in protocol/ (its tests stay with the config's: both are pure).
using protocol::AddressBytes;
using protocol::decode_address;
using protocol::encode_address;
using protocol::kAddressSize;
using protocol::kAddressVersion;
using protocol::kCapRc;
using protocol::kCapUd;
using protocol::WorkerAddress;

using Env = std::map<std::string, std::string>;

const char* lookup(const char* name, void* user) {
  const auto& env = *static_cast<const Env*>(user);
  const auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

rdmx_config_t defaults() {
  rdmx_config_t c;
  rdmx_config_init(&c);
  return c;
}

TEST(Config, DefaultsWorkOutOfTheBox) {
  const rdmx_config_t c = defaults();
  EXPECT_EQ(c.device, nullptr);
  EXPECT_EQ(c.port, 0);
  EXPECT_EQ(c.gid_index, -1);
  EXPECT_EQ(c.transport, RDMX_TRANSPORT_AUTO);
  EXPECT_EQ(c.auto_ud_peers, 64u);
  EXPECT_GT(c.large_buf_size, c.small_buf_size);
  EXPECT_EQ(c.uid, 0u);
  EXPECT_EQ(c.ud_drop_rate, 0.0);
  Resolved r;
  std::string err;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_FALSE(r.ud);
  EXPECT_EQ(r.eager_limit, c.large_buf_size);
  EXPECT_GE(r.srq_depth, kMinSrqDepth);
  EXPECT_GT(r.low_watermark, 0u);
  EXPECT_LT(r.low_watermark, r.srq_depth);
}

TEST(Config, EveryFieldHasAnEnvironmentVariable) {
  rdmx_config_t c = defaults();
  const Env env = {{"RDMX_DEVICE", "rxe7"},          {"RDMX_PORT", "2"},
                   {"RDMX_GID_INDEX", "3"},          {"RDMX_TRANSPORT", "UD"},
                   {"RDMX_AUTO_UD_PEERS", "10"},     {"RDMX_SMALL_BUF", "512"},
                   {"RDMX_LARGE_BUF", "16k"},        {"RDMX_SRQ_DEPTH", "100"},
                   {"RDMX_SRQ_LOW_WATERMARK", "7"},  {"RDMX_EAGER_LIMIT", "4K"},
                   {"RDMX_RNDV_THRESH", "1m"},       {"RDMX_UID", "0x1234"},
                   {"RDMX_UD_DROP_RATE", "0.05"},    {"RDMX_UD_RTO_US", "777"},
                   {"RDMX_PEER_TIMEOUT_MS", "1500"}, {"RDMX_VERBOSE", "2"},
                   {"RDMX_MAX_RC_PEERS", "3"},       {"RDMX_COALESCE", "0"},
                   {"RDMX_RING_PEERS", "4"},         {"RDMX_RING_SLOTS", "8"},
                   {"RDMX_RING_SLOT_SIZE", "1k"},    {"RDMX_RNDV_READ_SHARE", "30"},
                   {"RDMX_RC_MAX_RD_ATOMIC", "4"}};
  std::string err;
  ASSERT_EQ(apply_env(&c, lookup, const_cast<Env*>(&env), &err), RDMX_OK) << err;
  EXPECT_STREQ(c.device, "rxe7");
  EXPECT_EQ(c.port, 2);
  EXPECT_EQ(c.gid_index, 3);
  EXPECT_EQ(c.transport, RDMX_TRANSPORT_UD);
  EXPECT_EQ(c.auto_ud_peers, 10u);
  EXPECT_EQ(c.small_buf_size, 512u);
  EXPECT_EQ(c.large_buf_size, 16384u);
  EXPECT_EQ(c.srq_depth, 100u);
  EXPECT_EQ(c.srq_low_watermark, 7u);
  EXPECT_EQ(c.eager_limit, 4096u);
  EXPECT_EQ(c.rndv_thresh, 1u << 20);
  EXPECT_EQ(c.uid, 0x1234u);
  EXPECT_DOUBLE_EQ(c.ud_drop_rate, 0.05);
  EXPECT_EQ(c.ud_rto_us, 777u);
  EXPECT_EQ(c.peer_timeout_ms, 1500u);
  EXPECT_EQ(c.verbose, 2);
  EXPECT_EQ(c.max_rc_peers, 3u);
  EXPECT_EQ(c.coalesce, 0u);
  EXPECT_EQ(c.ring_peers, 4u);
  EXPECT_EQ(c.ring_slots, 8u);
  EXPECT_EQ(c.ring_slot_size, 1024u);
  EXPECT_EQ(c.rndv_read_share, 30);
  EXPECT_EQ(c.rc_max_rd_atomic, 4u);
}

TEST(Config, RendezvousThresholdNeverAboveTheEagerLimitPlusOne) {
  rdmx_config_t c = defaults();
  EXPECT_EQ(c.max_rc_peers, kDefaultMaxRcPeers);
  Resolved r;
  std::string err;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_LE(r.rndv_thresh, r.eager_limit + 1);
  EXPECT_EQ(r.rndv_thresh, std::min<std::size_t>(c.rndv_thresh, r.eager_limit + 1));
  c.rndv_thresh = 1u << 30;  // above what eager can carry: everything above the limit is rndv
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rndv_thresh, r.eager_limit + 1);
  c.transport = RDMX_TRANSPORT_UD;  // UD: one packet
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rndv_thresh, 1024u - 32u + 1u);
  c.rndv_thresh = 100;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rndv_thresh, 100u);
  c.max_rc_peers = 0;
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("RDMX_MAX_RC_PEERS"), std::string::npos) << err;
}

TEST(Config, BadValuesNameTheVariableAndKeepTheDefault) {
  rdmx_config_t c = defaults();
  const Env env = {{"RDMX_SRQ_DEPTH", "lots"}, {"RDMX_PORT", "1"}};
  std::string err;
  EXPECT_EQ(apply_env(&c, lookup, const_cast<Env*>(&env), &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("RDMX_SRQ_DEPTH"), std::string::npos) << err;
  EXPECT_NE(err.find("lots"), std::string::npos) << err;
  EXPECT_EQ(c.srq_depth, defaults().srq_depth);
  EXPECT_EQ(c.port, 1);  // the other variables still apply

  for (const auto& [name, value] : Env{{"RDMX_TRANSPORT", "tcp"},
                                       {"RDMX_UD_DROP_RATE", "1.5"},
                                       {"RDMX_UD_DROP_RATE", "-0.1"},
                                       {"RDMX_PORT", "256"},
                                       {"RDMX_GID_INDEX", "-2"},
                                       {"RDMX_UID", "0xffffffffffffffff"},
                                       {"RDMX_LARGE_BUF", "8q"},
                                       {"RDMX_SMALL_BUF", "99999999999"},
                                       {"RDMX_VERBOSE", "x"},
                                       {"RDMX_RNDV_READ_SHARE", "-2"},
                                       {"RDMX_RNDV_READ_SHARE", "91"}}) {
    rdmx_config_t d = defaults();
    const Env one = {{name, value}};
    err.clear();
    EXPECT_EQ(apply_env(&d, lookup, const_cast<Env*>(&one), &err), RDMX_ERR_INVALID_PARAM)
        << name << "=" << value;
    EXPECT_NE(err.find(name), std::string::npos) << err;
  }
}

TEST(Config, EmptyVariablesAreIgnored) {
  rdmx_config_t c = defaults();
  const Env env = {{"RDMX_SRQ_DEPTH", ""}, {"RDMX_DEVICE", ""}};
  EXPECT_EQ(apply_env(&c, lookup, const_cast<Env*>(&env), nullptr), RDMX_OK);
  EXPECT_EQ(c.srq_depth, defaults().srq_depth);
  EXPECT_EQ(c.device, nullptr);
}

TEST(Config, Parsers) {
  EXPECT_EQ(parse_size("8k"), 8192u);
  EXPECT_EQ(parse_size(" 2M "), 2u << 20);
  EXPECT_EQ(parse_size("1g"), 1u << 30);
  EXPECT_EQ(parse_size("0x10"), 16u);
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("k"));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size("99999999999999999999"));
  EXPECT_EQ(parse_int("-1"), -1);
  EXPECT_FALSE(parse_int("1.0"));
  EXPECT_EQ(parse_fraction("0"), 0.0);
  EXPECT_EQ(parse_fraction("1"), 1.0);
  EXPECT_FALSE(parse_fraction("nan"));
  EXPECT_FALSE(parse_fraction("0.5x"));
  EXPECT_EQ(parse_transport("Rc"), RDMX_TRANSPORT_RC);
  EXPECT_EQ(parse_transport("auto"), RDMX_TRANSPORT_AUTO);
  EXPECT_FALSE(parse_transport("dc"));
}

TEST(Config, AutoPicksUdAtTheThreshold) {
  rdmx_config_t c = defaults();
  c.expected_peers = 63;
  EXPECT_FALSE(choose_ud(c));
  c.expected_peers = 64;
  EXPECT_TRUE(choose_ud(c));
  c.transport = RDMX_TRANSPORT_RC;
  EXPECT_FALSE(choose_ud(c));
  c.transport = RDMX_TRANSPORT_UD;
  c.expected_peers = 1;
  EXPECT_TRUE(choose_ud(c));
}

TEST(Config, TinySrqIsRaisedAndStillRefillsBeforeRunningDry) {
  rdmx_config_t c = defaults();
  c.srq_depth = 2;
  Resolved r;
  ASSERT_EQ(resolve(c, 1024, &r, nullptr), RDMX_OK);
  EXPECT_EQ(r.srq_depth, kMinSrqDepth);
  EXPECT_GE(r.refill_batch, 1u);
  EXPECT_LE(r.refill_batch, r.srq_depth / 4);
  EXPECT_GE(r.low_watermark, 1u);
  EXPECT_LE(r.low_watermark + r.refill_batch, r.srq_depth);
  c.srq_depth = 16;
  c.srq_low_watermark = 1000;  // clamped below depth - batch
  ASSERT_EQ(resolve(c, 1024, &r, nullptr), RDMX_OK);
  EXPECT_LE(r.low_watermark + r.refill_batch, r.srq_depth);
}

TEST(Config, UdClassesFitOnePacket) {
  rdmx_config_t c = defaults();
  c.transport = RDMX_TRANSPORT_UD;
  Resolved r;
  ASSERT_EQ(resolve(c, 1024, &r, nullptr), RDMX_OK);
  EXPECT_TRUE(r.ud);
  EXPECT_EQ(r.large_buf, 1024u - 32u);  // path MTU minus the wire header
  EXPECT_LT(r.small_buf, r.large_buf);
  EXPECT_EQ(r.eager_limit, r.large_buf);
  ASSERT_EQ(resolve(c, 4096, &r, nullptr), RDMX_OK);
  EXPECT_EQ(r.large_buf, 4096u - 32u);
}

TEST(Config, ResolveRejectsNonsense) {
  std::string err;
  Resolved r;
  rdmx_config_t c = defaults();
  c.large_buf_size = c.small_buf_size;
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("RDMX_LARGE_BUF"), std::string::npos) << err;
  c = defaults();
  c.small_buf_size = 8;
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  c = defaults();
  c.transport = static_cast<rdmx_transport_t>(3);
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  c = defaults();
  c.uid = RDMX_ANY_SOURCE;
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  c = defaults();
  c.ring_slot_size = 500;  // not a multiple of 8
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("RDMX_RING_SLOT_SIZE"), std::string::npos) << err;
  c.ring_peers = 0;  // off: the geometry does not matter
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.ring_peers, 0u);
}

TEST(Config, RingsOnlyOverRc) {
  std::string err;
  Resolved r;
  rdmx_config_t c = defaults();
  c.transport = RDMX_TRANSPORT_RC;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.ring_peers, kDefaultRingPeers);
  EXPECT_EQ(r.ring_slots, kDefaultRingSlots);
  EXPECT_EQ(r.ring_slot_size, kDefaultRingSlotSize);
  c.transport = RDMX_TRANSPORT_UD;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.ring_peers, 0u);
}

TEST(Config, ReadShareOnlyOverRcAndWithinRange) {
  std::string err;
  Resolved r;
  rdmx_config_t c = defaults();
  EXPECT_EQ(c.rndv_read_share, -1) << "by default the worker picks it by device type";
  c.transport = RDMX_TRANSPORT_RC;
  c.rndv_read_share = 40;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rndv_read_share, 40);
  c.transport = RDMX_TRANSPORT_UD;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rndv_read_share, 0) << "UD's RC connections carry writes only";
  c.transport = RDMX_TRANSPORT_RC;
  c.rndv_read_share = 95;
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("RDMX_RNDV_READ_SHARE"), std::string::npos) << err;
}

TEST(Config, RnrRetryWithinRange) {
  std::string err;
  Resolved r;
  rdmx_config_t c = defaults();
  EXPECT_EQ(c.rc_rnr_retry, kRnrRetryForever);
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rc_rnr_retry, kRnrRetryForever);
  c.rc_rnr_retry = 0;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rc_rnr_retry, 0);
  c.rc_rnr_retry = kRnrRetryForever + 1;
  EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM);
  EXPECT_NE(err.find("RDMX_RC_RNR_RETRY"), std::string::npos) << err;
}

TEST(Config, ReadsInFlightWithinRange) {
  std::string err;
  Resolved r;
  rdmx_config_t c = defaults();
  EXPECT_EQ(c.rc_max_rd_atomic, kDefaultRcMaxRdAtomic);
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.rc_max_rd_atomic, kDefaultRcMaxRdAtomic);
  for (const std::uint32_t bad : {0u, kMaxRcMaxRdAtomic + 1}) {
    c.rc_max_rd_atomic = bad;
    err.clear();
    EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM) << bad;
    EXPECT_NE(err.find("RDMX_RC_MAX_RD_ATOMIC"), std::string::npos) << err;
  }
}

TEST(Config, FabricSettingsParseWithinTheirRanges) {
  rdmx_config_t c = defaults();
  EXPECT_EQ(c.traffic_class, 0);
  EXPECT_EQ(c.service_level, 0);
  EXPECT_EQ(c.pkey_index, 0);
  EXPECT_EQ(c.path_mtu, 0);
  EXPECT_EQ(c.rc_timeout, 17);
  EXPECT_EQ(c.rc_retry_cnt, 7);
  Env env{{"RDMX_TRAFFIC_CLASS", "104"}, {"RDMX_SERVICE_LEVEL", "3"}, {"RDMX_PKEY_INDEX", "2"},
          {"RDMX_PATH_MTU", "512"},      {"RDMX_RC_TIMEOUT", "14"},   {"RDMX_RC_RETRY_CNT", "5"},
          {"RDMX_UD_RTO_US", "5000"}};
  std::string err;
  ASSERT_EQ(apply_env(&c, lookup, &env, &err), RDMX_OK) << err;
  EXPECT_EQ(c.traffic_class, 104);
  EXPECT_EQ(c.service_level, 3);
  EXPECT_EQ(c.pkey_index, 2);
  EXPECT_EQ(c.path_mtu, 512);
  EXPECT_EQ(c.rc_timeout, 14);
  EXPECT_EQ(c.rc_retry_cnt, 5);
  EXPECT_EQ(c.ud_rto_us, 5000u);
  Resolved r;
  ASSERT_EQ(resolve(c, 1024, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.traffic_class, 104);
  EXPECT_EQ(r.service_level, 3);
  EXPECT_EQ(r.pkey_index, 2);
  EXPECT_EQ(r.rc_timeout, 14);
  EXPECT_EQ(r.rc_retry_cnt, 5);

  // Out of range in the environment: refused, naming the variable, the field keeps its value.
  const std::pair<const char*, const char*> bad[] = {
      {"RDMX_TRAFFIC_CLASS", "256"}, {"RDMX_SERVICE_LEVEL", "16"}, {"RDMX_PKEY_INDEX", "-1"},
      {"RDMX_RC_TIMEOUT", "32"},     {"RDMX_RC_RETRY_CNT", "8"},   {"RDMX_PATH_MTU", "8192"}};
  for (const auto& [name, value] : bad) {
    rdmx_config_t d = defaults();
    Env one{{name, value}};
    err.clear();
    EXPECT_EQ(apply_env(&d, lookup, &one, &err), RDMX_ERR_INVALID_PARAM) << name;
    EXPECT_NE(err.find(name), std::string::npos) << err;
  }
}

TEST(Config, FabricSettingsRejectedByResolveNameTheSetting) {
  // What a C caller sets directly (no environment parsing) is checked by resolve.
  struct Case {
    void (*set)(rdmx_config_t&);
    const char* names;
  };
  const Case cases[] = {
      {[](rdmx_config_t& c) { c.traffic_class = 300; }, "RDMX_TRAFFIC_CLASS"},
      {[](rdmx_config_t& c) { c.traffic_class = -1; }, "RDMX_TRAFFIC_CLASS"},
      {[](rdmx_config_t& c) { c.service_level = 16; }, "RDMX_SERVICE_LEVEL"},
      {[](rdmx_config_t& c) { c.pkey_index = -2; }, "RDMX_PKEY_INDEX"},
      {[](rdmx_config_t& c) { c.path_mtu = 1500; }, "RDMX_PATH_MTU"},
      {[](rdmx_config_t& c) { c.rc_timeout = 32; }, "RDMX_RC_TIMEOUT"},
      {[](rdmx_config_t& c) { c.rc_retry_cnt = 8; }, "RDMX_RC_RETRY_CNT"},
  };
  for (const Case& k : cases) {
    rdmx_config_t c = defaults();
    k.set(c);
    Resolved r;
    std::string err;
    EXPECT_EQ(resolve(c, 1024, &r, &err), RDMX_ERR_INVALID_PARAM) << k.names;
    EXPECT_NE(err.find(k.names), std::string::npos) << err;
  }
}

TEST(Config, PathMtuCapsThePortsMtuAndTheUdClasses) {
  rdmx_config_t c = defaults();
  Resolved r;
  std::string err;
  ASSERT_EQ(resolve(c, 4096, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.path_mtu, 4096u);  // 0: the port's
  c.path_mtu = 1024;
  ASSERT_EQ(resolve(c, 4096, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.path_mtu, 1024u);
  ASSERT_EQ(resolve(c, 512, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.path_mtu, 512u);  // a cap only: a smaller port MTU stays
  c.path_mtu = 512;
  c.transport = RDMX_TRANSPORT_UD;
  ASSERT_EQ(resolve(c, 4096, &r, &err), RDMX_OK) << err;
  EXPECT_EQ(r.path_mtu, 512u);
  EXPECT_EQ(r.large_buf, 512u - protocol::kHeaderSize);  // one packet at the capped MTU
  EXPECT_LE(r.small_buf, r.large_buf / 2);
  EXPECT_LE(r.eager_limit, r.large_buf);
  c.path_mtu = 256;  // header + the smallest class still fit
  EXPECT_EQ(resolve(c, 4096, &r, &err), RDMX_OK) << err;
}

TEST(Config, DerivedUidsDiffer) {
  const std::uint64_t a = derive_uid("node1", 100, 0);
  EXPECT_NE(a, derive_uid("node1", 100, 1));
  EXPECT_NE(a, derive_uid("node1", 101, 0));
  EXPECT_NE(a, derive_uid("node2", 100, 0));
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, RDMX_ANY_SOURCE);
}

WorkerAddress sample_address() {
  WorkerAddress a;
  a.transport = RDMX_TRANSPORT_UD;
  a.port = 1;
  a.caps = kCapRc | kCapUd;
  a.uid = 0x0102030405060708ull;
  a.instance = 0xdeadbeefcafef00dull;
  for (int i = 0; i < 16; ++i) {
    a.gid[i] = static_cast<std::uint8_t>(i * 3);
  }
  a.lid = 7;
  a.link_layer = 2;
  a.mtu = 1024;
  a.ctrl_qpn = 0x11;
  a.ud_qpn = {0x12, 0x13};
  a.class_capacity = {496, 992};
  a.max_inline = 512;
  a.rd_atomic = 16;
  a.caps |= protocol::kCapShm;
  a.node_id = 0x1112131415161718ull;
  a.pid = 4242;
  a.set_device_name("mlx5_bond_0");
  return a;
}

TEST(Address, RoundTrips) {
  const WorkerAddress a = sample_address();
  const AddressBytes bytes = encode_address(a);
  ASSERT_EQ(bytes.size(), kAddressSize);
  WorkerAddress b;
  ASSERT_EQ(decode_address(bytes.data(), bytes.size(), &b), RDMX_OK);
  EXPECT_EQ(a, b);
  // Little-endian, fixed offsets (the layout drawn in address.h).
  EXPECT_EQ(std::memcmp(bytes.data(), "RDMX", 4), 0);
  EXPECT_EQ(bytes[4], kAddressVersion);
  EXPECT_EQ(bytes[8], 0x08);   // uid, low byte first
  EXPECT_EQ(bytes[48], 0x11);  // ctrl qpn
  EXPECT_EQ(bytes[72], 16);    // rd atomic
  EXPECT_EQ(bytes[76], 0x18);  // node id, low byte first
  EXPECT_EQ(bytes[84], 4242 & 0xff);
  EXPECT_EQ(std::memcmp(bytes.data() + 88, "mlx5_bond_0\0\0\0\0\0", 16), 0);  // NUL-padded
  EXPECT_EQ(b.device_name(), "mlx5_bond_0");
}

TEST(Address, Version4CarriesTheDeviceNameCutTo16Bytes) {
  EXPECT_EQ(kAddressVersion, 4);
  EXPECT_EQ(kAddressSize, 104u);
  WorkerAddress a = sample_address();
  a.set_device_name("a_device_name_longer_than_16");
  const AddressBytes bytes = encode_address(a);
  WorkerAddress b;
  ASSERT_EQ(decode_address(bytes.data(), bytes.size(), &b), RDMX_OK);
  EXPECT_EQ(b.device_name(), "a_device_name_lo");  // 16 bytes, no NUL
  a.set_device_name("");
  const AddressBytes none = encode_address(a);
  ASSERT_EQ(decode_address(none.data(), none.size(), &b), RDMX_OK);
  EXPECT_EQ(b.device_name(), "");
  // A version 3 blob (88 bytes) is refused: its senders do not name their device.
  AddressBytes old = bytes;
  old[4] = 3;
  EXPECT_EQ(decode_address(old.data(), 88, &b), RDMX_ERR_BAD_ADDRESS);
  EXPECT_EQ(decode_address(old.data(), old.size(), &b), RDMX_ERR_BAD_ADDRESS);
}

TEST(Address, RejectsWhatItCannotUse) {
  const AddressBytes good = encode_address(sample_address());
  WorkerAddress out;
  EXPECT_EQ(decode_address(nullptr, good.size(), &out), RDMX_ERR_INVALID_PARAM);
  EXPECT_EQ(decode_address(good.data(), good.size() - 1, &out), RDMX_ERR_BAD_ADDRESS);
  EXPECT_EQ(decode_address(good.data(), 3, &out), RDMX_ERR_BAD_ADDRESS);
  AddressBytes bad = good;
  bad[0] = 'X';
  EXPECT_EQ(decode_address(bad.data(), bad.size(), &out), RDMX_ERR_BAD_ADDRESS);
  bad = good;
  bad[4] = kAddressVersion + 1;  // another version
  EXPECT_EQ(decode_address(bad.data(), bad.size(), &out), RDMX_ERR_BAD_ADDRESS);
  WorkerAddress a = sample_address();
  a.ud_qpn = {0, 0};  // UD without data QPs
  bad = encode_address(a);
  EXPECT_EQ(decode_address(bad.data(), bad.size(), &out), RDMX_ERR_BAD_ADDRESS);
  a = sample_address();
  a.transport = 0;
  bad = encode_address(a);
  EXPECT_EQ(decode_address(bad.data(), bad.size(), &out), RDMX_ERR_BAD_ADDRESS);
  a = sample_address();
  a.uid = 0;
  bad = encode_address(a);
  EXPECT_EQ(decode_address(bad.data(), bad.size(), &out), RDMX_ERR_BAD_ADDRESS);
  a = sample_address();
  a.rd_atomic = 0;  // a responder that takes no reads: a peer could not size its QP to it
  bad = encode_address(a);
  EXPECT_EQ(decode_address(bad.data(), bad.size(), &out), RDMX_ERR_BAD_ADDRESS);
}

TEST(Strerror, EveryCodeHasText) {
  for (int code = RDMX_ERR_TIMED_OUT; code <= RDMX_INPROGRESS; ++code) {
    const char* s = rdmx_strerror(code);
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 5u);
    EXPECT_STRNE(s, rdmx_strerror(12345)) << code;
  }
  EXPECT_NE(std::strstr(rdmx_strerror(RDMX_ERR_NO_DEVICE), "RDMX_DEVICE"), nullptr);
}

TEST(OrderGuard, BoundsTheDistanceToTheOldestIncomplete) {
  OrderGuard g(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(g.can_send());
    g.on_send();
  }
  EXPECT_FALSE(g.can_send());
  g.on_complete(2);  // out of order: the oldest (0) still holds the window
  EXPECT_FALSE(g.can_send());
  g.on_complete(0);
  EXPECT_EQ(g.oldest(), 1);
  EXPECT_TRUE(g.can_send());
  g.on_complete(1);
  EXPECT_EQ(g.oldest(), 3);  // 2 was already complete
  g.on_complete(1);          // twice: ignored
  g.on_complete(9);          // never sent: ignored
  EXPECT_EQ(g.outstanding(), 1u);
}

TEST(OrderGuard, WrapsAroundTheSequenceSpace) {
  OrderGuard g(8, 65533);
  for (int i = 0; i < 6; ++i) {
    g.on_send();
  }
  EXPECT_EQ(g.next(), 3);
  for (protocol::Seq s = 65533; s != 3; s = protocol::seq_add(s, 1)) {
    g.on_complete(s);
  }
  EXPECT_EQ(g.outstanding(), 0u);
  EXPECT_EQ(g.oldest(), 3);
}

}  // namespace
}  // namespace rdmx::transport
