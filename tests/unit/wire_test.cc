#include "protocol/wire.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmx::protocol {
namespace {

std::vector<std::byte> build(const MsgHeader& header, std::size_t body_bytes,
                             std::size_t payload_bytes) {
  std::vector<std::byte> buf(kHeaderSize + body_bytes + payload_bytes, std::byte{0xab});
  store_wire(buf.data(), header);
  return buf;
}

TEST(Wire, HeaderBytesAreLittleEndianAtDocumentedOffsets) {
  MsgHeader h = make_header(MsgKind::kEagerSync);
  h.flags = kFlagAckValid | kFlagAckRequest;
  h.src_ep = 0x04030201;
  h.seq = 0x0605;
  h.ack = 0x0807;
  h.payload_length = 0x0c0b0a09;
  h.tag = 0x1817161514131211;
  h.aux = 0x1c1b1a19;
  h.ring_ack = 0x201f1e1d;
  h.flags = static_cast<std::uint16_t>(h.flags | kFlagRingAck);
  std::array<std::byte, kHeaderSize> raw{};
  store_wire(raw.data(), h);
  const std::array<std::uint8_t, kHeaderSize> expected = {
      kWireVersion, 2,    0x07, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
      0x08,         0x09, 0x0a, 0x0b, 0x0c, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
      0x17,         0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20};
  for (std::size_t i = 0; i < kHeaderSize; ++i) {
    EXPECT_EQ(static_cast<std::uint8_t>(raw[i]), expected[i]) << "byte " << i;
  }
}

TEST(Wire, CtsBodyLayout) {
  CtsBody cts{.remote_addr = 0x1122334455667788,
              .offset = 0,
              .granted_length = 1,
              .rkey = 0xa1a2a3a4,
              .sender_slot = 7,
              .receiver_slot = 9,
              .flags = 0};
  std::array<std::byte, sizeof(CtsBody)> raw{};
  store_wire(raw.data(), cts);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[0]), 0x88);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[7]), 0x11);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[24]), 0xa4);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[28]), 7);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[32]), 9);
  const auto back = load_wire<CtsBody>(raw.data());
  EXPECT_EQ(back.remote_addr, cts.remote_addr);
  EXPECT_EQ(back.rkey, cts.rkey);
}

TEST(Wire, RingOfferBodyLayout) {
  const RingBody b{
      .addr = 0x1122334455667788, .rkey = 0xa1a2a3a4, .slots = 32, .slot_size = 512, .reserved = 0};
  std::array<std::byte, sizeof(RingBody)> raw{};
  store_wire(raw.data(), b);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[0]), 0x88);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[8]), 0xa4);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[12]), 32);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[17]), 2);  // 512 = 0x0200
  // An offer is ordered with the data (the sender uses the ring for what it sends after it).
  EXPECT_TRUE(is_sequenced(MsgKind::kRingOffer));
  EXPECT_FALSE(carries_payload(MsgKind::kRingOffer));
  EXPECT_FALSE(is_tagged(MsgKind::kRingOffer));
  EXPECT_EQ(body_size(MsgKind::kRingOffer), sizeof(RingBody));
}

TEST(Wire, RendezvousDataAndFinBodies) {
  DataBody d{.offset = 0x0102030405060708, .receiver_slot = 0x00100009, .reserved = 0};
  std::array<std::byte, sizeof(DataBody)> raw{};
  store_wire(raw.data(), d);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[0]), 0x08);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[8]), 0x09);
  EXPECT_EQ(static_cast<std::uint8_t>(raw[10]), 0x10);
  // kRndvData carries its body and then payload, is sequenced, and is not matched.
  EXPECT_TRUE(carries_payload(MsgKind::kRndvData));
  EXPECT_TRUE(is_sequenced(MsgKind::kRndvData));
  EXPECT_FALSE(is_tagged(MsgKind::kRndvData));
  EXPECT_EQ(body_size(MsgKind::kRndvData), sizeof(DataBody));
  MsgHeader h = make_header(MsgKind::kRndvData);
  h.payload_length = 100;
  EXPECT_EQ(validate(h, wire_size(MsgKind::kRndvData, 100)), WireError::kOk);
  EXPECT_EQ(validate(h, kHeaderSize + 100), WireError::kLengthMismatch) << "body missing";
  FinBody f{.sender_slot = 1, .receiver_slot = 2, .status = -5, .flags = kFinFlagToSender};
  std::array<std::byte, sizeof(FinBody)> fraw{};
  store_wire(fraw.data(), f);
  EXPECT_EQ(static_cast<std::uint8_t>(fraw[8]), 0xfb);
  EXPECT_EQ(static_cast<std::uint8_t>(fraw[12]), 1);
}

TEST(Wire, LoadFromUnalignedBuffer) {
  std::array<std::byte, kHeaderSize + 1> raw{};
  MsgHeader h = make_header(MsgKind::kEager);
  h.tag = 0xdeadbeefcafef00d;
  store_wire(raw.data() + 1, h);
  EXPECT_EQ(load_wire<MsgHeader>(raw.data() + 1).tag, h.tag);
}

TEST(Wire, ValidEagerAccepted) {
  MsgHeader h = make_header(MsgKind::kEager);
  h.payload_length = 100;
  const auto buf = build(h, 0, 100);
  MsgHeader out{};
  EXPECT_EQ(validate(buf, &out), WireError::kOk);
  EXPECT_EQ(out.payload_length, 100u);
  EXPECT_EQ(wire_size(MsgKind::kEager, 100), buf.size());
}

TEST(Wire, ZeroPayloadEagerAccepted) {
  const auto buf = build(make_header(MsgKind::kEager), 0, 0);
  EXPECT_EQ(validate(buf, nullptr), WireError::kOk);
}

TEST(Wire, EveryKindWithItsBodyAccepted) {
  for (std::uint8_t k = 1; k < kMsgKindCount; ++k) {
    const auto kind = static_cast<MsgKind>(k);
    MsgHeader h = make_header(kind);
    if (kind == MsgKind::kAck) {
      h.flags = kFlagAckValid;
    }
    const std::size_t payload = carries_payload(kind) ? 8 : 0;
    h.payload_length = static_cast<std::uint32_t>(payload);
    const auto buf = build(h, body_size(kind), payload);
    EXPECT_EQ(validate(buf, nullptr), WireError::kOk) << to_string(kind);
  }
}

TEST(Wire, TruncatedRejected) {
  MsgHeader h = make_header(MsgKind::kEager);
  auto buf = build(h, 0, 0);
  EXPECT_EQ(validate(std::span(buf).first(kHeaderSize - 1), nullptr), WireError::kTruncated);
  EXPECT_EQ(validate(std::span<const std::byte>{}, nullptr), WireError::kTruncated);
  // A CTS that lost part of its body.
  const auto cts = build(make_header(MsgKind::kCts), sizeof(CtsBody), 0);
  EXPECT_EQ(validate(std::span(cts).first(kHeaderSize + 8), nullptr), WireError::kTruncated);
}

TEST(Wire, BadVersionRejectedBeforeAnythingElse) {
  MsgHeader h = make_header(MsgKind::kEager);
  h.version = kWireVersion + 1;
  h.kind = 200;  // a newer version may have more kinds: report the version, not the kind
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadVersion);
  h.version = 0;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadVersion);
}

TEST(Wire, BadKindRejected) {
  MsgHeader h = make_header(MsgKind::kEager);
  h.kind = 0;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadKind);
  h.kind = kMsgKindCount;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadKind);
  h.kind = 0xff;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadKind);
}

TEST(Wire, ZeroedBufferNeverValid) {
  std::array<std::byte, 64> zeros{};
  EXPECT_NE(validate(zeros, nullptr), WireError::kOk);
}

TEST(Wire, UnknownFlagsRejected) {
  MsgHeader h = make_header(MsgKind::kEager);
  h.flags = 1u << 7;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadFlags);
}

TEST(Wire, StandaloneAckNeedsAckValid) {
  MsgHeader h = make_header(MsgKind::kAck);
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kBadFlags);
  h.flags = kFlagAckValid;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kOk);
}

TEST(Wire, LengthMismatchRejected) {
  MsgHeader h = make_header(MsgKind::kEager);
  h.payload_length = 100;
  EXPECT_EQ(validate(h, kHeaderSize + 99), WireError::kLengthMismatch);
  EXPECT_EQ(validate(h, kHeaderSize + 101), WireError::kLengthMismatch);
  EXPECT_EQ(validate(h, kHeaderSize + 100), WireError::kOk);
  // Huge claimed length must not overflow the comparison.
  h.payload_length = 0xffffffff;
  EXPECT_EQ(validate(h, kHeaderSize), WireError::kLengthMismatch);
}

TEST(Wire, PayloadOnControlKindRejected) {
  MsgHeader h = make_header(MsgKind::kRts);
  h.payload_length = 4;
  EXPECT_EQ(validate(h, kHeaderSize + sizeof(RtsBody) + 4), WireError::kLengthMismatch);
  MsgHeader m = make_header(MsgKind::kMatchAck);
  EXPECT_EQ(validate(m, kHeaderSize + 1), WireError::kLengthMismatch);
}

TEST(Wire, KindClassification) {
  EXPECT_FALSE(is_sequenced(MsgKind::kAck));
  EXPECT_FALSE(is_sequenced(MsgKind::kInvalid));
  EXPECT_TRUE(is_sequenced(MsgKind::kEager));
  EXPECT_TRUE(is_sequenced(MsgKind::kCts));
  EXPECT_TRUE(is_sequenced(MsgKind::kDisconnect));
  EXPECT_TRUE(is_tagged(MsgKind::kRts));
  EXPECT_FALSE(is_tagged(MsgKind::kCts));
  EXPECT_EQ(body_size(MsgKind::kEager), 0u);
  EXPECT_EQ(body_size(MsgKind::kCts), sizeof(CtsBody));
  EXPECT_LE(body_size(MsgKind::kCts), kMaxBodySize);
}

TEST(Wire, NamesAreDistinct) {
  for (std::uint8_t a = 0; a < kMsgKindCount; ++a) {
    EXPECT_NE(to_string(static_cast<MsgKind>(a)), "unknown");
    for (std::uint8_t b = 0; b < a; ++b) {
      EXPECT_NE(to_string(static_cast<MsgKind>(a)), to_string(static_cast<MsgKind>(b)));
    }
  }
  EXPECT_EQ(to_string(WireError::kBadVersion), "bad version");
}

}  // namespace
}  // namespace rdmx::protocol
