// protocol/batch.h: records written by BatchWriter read back by BatchReader, and a damaged
// batch stops the reader instead of running past the payload.
#include "protocol/batch.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace rdmx::protocol {
namespace {

TEST(Batch, RoundTripKeepsOrderTagsAndBytes) {
  std::array<std::byte, 256> buf{};
  BatchWriter w(buf);
  const std::vector<std::string> msgs = {"", "a", "0123456", "01234567", "0123456789abcdefg"};
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    ASSERT_TRUE(w.append(100 + i, msgs[i].data(), msgs[i].size()));
  }
  EXPECT_EQ(w.count(), msgs.size());
  EXPECT_EQ(w.bytes() % 8, 0u);
  BatchReader r(std::span<const std::byte>(buf.data(), w.bytes()), w.count());
  BatchReader::Message m{};
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    ASSERT_TRUE(r.next(&m)) << i;
    EXPECT_EQ(m.tag, 100 + i);
    ASSERT_EQ(m.length, msgs[i].size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data), m.length), msgs[i]);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m.data) % 8,
              reinterpret_cast<std::uintptr_t>(buf.data()) % 8);
  }
  EXPECT_FALSE(r.next(&m));
  EXPECT_FALSE(r.malformed());
}

TEST(Batch, WriterRefusesWhatDoesNotFitAndWritesNothing) {
  std::array<std::byte, 48> buf{};
  BatchWriter w(buf);
  const char data[32] = {};
  EXPECT_EQ(batch_record_size(8), 24u);
  EXPECT_EQ(batch_record_size(9), 32u);
  ASSERT_TRUE(w.append(1, data, 8));  // 24 bytes
  EXPECT_FALSE(w.fits(9));            // 32 more would make 56
  EXPECT_FALSE(w.append(2, data, 9));
  EXPECT_EQ(w.count(), 1u);
  EXPECT_EQ(w.bytes(), 24u);
  ASSERT_TRUE(w.append(3, data, 8));  // exactly full
  EXPECT_EQ(w.bytes(), 48u);
  EXPECT_FALSE(w.fits(0));
  w.clear();
  EXPECT_EQ(w.bytes(), 0u);
  EXPECT_EQ(w.count(), 0u);
}

TEST(Batch, ReaderStopsAtARecordThatRunsPastThePayload) {
  std::array<std::byte, 64> buf{};
  BatchWriter w(buf);
  const char data[16] = "0123456789abcde";
  ASSERT_TRUE(w.append(7, data, 8));
  ASSERT_TRUE(w.append(8, data, 16));
  // Cut the second record short: the first still reads, then the reader stops.
  BatchReader r(std::span<const std::byte>(buf.data(), w.bytes() - 8), 2);
  BatchReader::Message m{};
  ASSERT_TRUE(r.next(&m));
  EXPECT_EQ(m.tag, 7u);
  EXPECT_FALSE(r.next(&m));
  EXPECT_TRUE(r.malformed());
  EXPECT_FALSE(r.next(&m));
}

TEST(Batch, ReaderFlagsACountThatDoesNotMatchTheRecords) {
  std::array<std::byte, 64> buf{};
  BatchWriter w(buf);
  ASSERT_TRUE(w.append(1, nullptr, 0));
  ASSERT_TRUE(w.append(2, nullptr, 0));
  BatchReader::Message m{};
  BatchReader fewer(std::span<const std::byte>(buf.data(), w.bytes()), 1);
  ASSERT_TRUE(fewer.next(&m));
  EXPECT_FALSE(fewer.next(&m));
  EXPECT_TRUE(fewer.malformed());  // bytes left over
  BatchReader more(std::span<const std::byte>(buf.data(), w.bytes()), 3);
  ASSERT_TRUE(more.next(&m));
  ASSERT_TRUE(more.next(&m));
  EXPECT_FALSE(more.next(&m));
  EXPECT_TRUE(more.malformed());  // a record missing
}

TEST(Batch, HugeLengthDoesNotWrapTheBoundsCheck) {
  std::array<std::byte, 32> buf{};
  store_wire(buf.data(), BatchRecord{.tag = 1, .length = 0xffffffffu, .reserved = 0});
  BatchReader r(buf, 1);
  BatchReader::Message m{};
  EXPECT_FALSE(r.next(&m));
  EXPECT_TRUE(r.malformed());
}

// Found by tests/fuzz/batch_records (reproducer in tests/fuzz/crashes/batch_records): a second
// next() after a walk stopped by a bad record used to clear malformed().
TEST(Batch, MalformedStaysSetWhenAskedAgain) {
  BatchReader r(std::span<const std::byte>(), 0x20000000);  // records promised, no bytes
  BatchReader::Message m{};
  EXPECT_FALSE(r.next(&m));
  EXPECT_TRUE(r.malformed());
  EXPECT_FALSE(r.next(&m));
  EXPECT_TRUE(r.malformed());
}

}  // namespace
}  // namespace rdmx::protocol
