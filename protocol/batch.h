// The payload of a kBatch message: several small kEager messages to one peer, packed by the
// sender when the application posts them back to back (transport/send.cc, "Coalescing").
//
// One packet then carries what would have been many: on Soft-RoCE each packet costs tens of
// microseconds of kernel work on both sides, a record a memcpy. Open MPI's openib BTL and
// MVAPICH2 coalesce small sends the same way.
//
//   payload = record, record, ... (header.aux records, header.payload_length bytes in all)
//
//   byte 0                                   8                 12                16
//       +---------------------------------------+-----------------+-----------------+
//     0 |                  tag                  |     length      |    reserved     |
//       +---------------------------------------+-----------------+-----------------+
//    16 | length bytes of the message, then zeros up to the next multiple of 8      |
//       +---------------------------------------------------------------------------+
//
// Records keep 8-byte alignment, so the next record's header is aligned too. The batch as a
// whole takes one sequence number: its records are delivered in order, as if sent one by one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "protocol/wire.h"

namespace rdmx::protocol {

struct BatchRecord {
  std::uint64_t tag;
  std::uint32_t length;    // message bytes that follow (not counting the padding)
  std::uint32_t reserved;  // zero
};
static_assert(sizeof(BatchRecord) == 16 && offsetof(BatchRecord, length) == 8);
static_assert(std::is_trivially_copyable_v<BatchRecord>);

// Bytes a message of `length` takes in a batch.
constexpr std::size_t batch_record_size(std::size_t length) noexcept {
  return sizeof(BatchRecord) + ((length + 7) & ~std::size_t{7});
}

// Appends records to a caller-owned buffer.
class BatchWriter {
 public:
  explicit BatchWriter(std::span<std::byte> buffer) noexcept : buffer_(buffer) {}

  bool fits(std::size_t length) const noexcept {
    return batch_record_size(length) <= buffer_.size() - used_;
  }
  // False (and nothing written) when the record does not fit.
  bool append(std::uint64_t tag, const void* data, std::size_t length) noexcept {
    if (!fits(length)) {
      return false;
    }
    std::byte* p = buffer_.data() + used_;
    store_wire(
        p, BatchRecord{.tag = tag, .length = static_cast<std::uint32_t>(length), .reserved = 0});
    if (length != 0) {
      std::memcpy(p + sizeof(BatchRecord), data, length);
    }
    const std::size_t size = batch_record_size(length);
    std::memset(p + sizeof(BatchRecord) + length, 0, size - sizeof(BatchRecord) - length);
    used_ += size;
    ++count_;
    return true;
  }
  std::size_t bytes() const noexcept { return used_; }
  std::uint32_t count() const noexcept { return count_; }
  void clear() noexcept { used_ = count_ = 0; }

 private:
  std::span<std::byte> buffer_;
  std::size_t used_ = 0;
  std::uint32_t count_ = 0;
};

// Walks a received batch. A record that runs past the payload, or a count that does not match
// the records, ends the walk with malformed() set, for good: what came before it was valid.
class BatchReader {
 public:
  struct Message {
    std::uint64_t tag;
    const std::byte* data;
    std::uint32_t length;
  };

  BatchReader(std::span<const std::byte> payload, std::uint32_t count) noexcept
      : payload_(payload), left_(count) {}

  // The next message, or false at the end (or at the first bad record).
  bool next(Message* m) noexcept {
    if (left_ == 0) {
      // |=: a walk stopped by a bad record (left_ zeroed) must stay malformed when asked again.
      malformed_ |= pos_ != payload_.size();
      return false;
    }
    if (payload_.size() - pos_ < sizeof(BatchRecord)) {
      malformed_ = true;
      left_ = 0;
      return false;
    }
    const auto r = load_wire<BatchRecord>(payload_.data() + pos_);
    if (r.length > payload_.size() - pos_ - sizeof(BatchRecord) ||
        batch_record_size(r.length) > payload_.size() - pos_) {
      malformed_ = true;
      left_ = 0;
      return false;
    }
    *m = Message{
        .tag = r.tag, .data = payload_.data() + pos_ + sizeof(BatchRecord), .length = r.length};
    pos_ += batch_record_size(r.length);
    --left_;
    return true;
  }
  bool malformed() const noexcept { return malformed_; }

 private:
  std::span<const std::byte> payload_;
  std::size_t pos_ = 0;
  std::uint32_t left_;
  bool malformed_ = false;
};

}  // namespace rdmx::protocol
