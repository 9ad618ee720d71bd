// Walks a kBatch payload with the receive path's BatchReader (transport/recv.cc, deliver_batch)
// and checks what deliver_batch relies on: every message it is handed lies inside the payload,
// records follow each other, no more than `count` come out, and a walk that ends without
// malformed() consumed exactly the payload and exactly `count` records. Shared by the
// wire_message and batch_records targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "protocol/batch.h"

namespace rdmx::fuzz {

// What deliver_batch delivered, and whether the walk ended at a bad record (or bytes after the
// last one) instead of at the end.
struct BatchWalk {
  std::vector<protocol::BatchReader::Message> messages;
  bool malformed = false;
};

inline BatchWalk check_batch(std::span<const std::byte> payload, std::uint32_t count) {
  using protocol::BatchRecord;
  protocol::BatchReader reader(payload, count);
  protocol::BatchReader::Message m{};
  std::vector<protocol::BatchReader::Message> out;
  std::size_t pos = 0;  // where the next record must start
  while (reader.next(&m)) {
    FUZZ_CHECK(!reader.malformed());
    FUZZ_CHECK(out.size() < count);
    FUZZ_CHECK(m.data == payload.data() + pos + sizeof(BatchRecord));
    FUZZ_CHECK(protocol::batch_record_size(m.length) <= payload.size() - pos);
    const auto r = protocol::load_wire<BatchRecord>(payload.data() + pos);
    FUZZ_CHECK(r.tag == m.tag && r.length == m.length);
    pos += protocol::batch_record_size(m.length);
    out.push_back(m);
  }
  if (reader.malformed()) {
    FUZZ_CHECK(out.size() < count || pos != payload.size());
  } else {
    FUZZ_CHECK(out.size() == count && pos == payload.size());
  }
  // The end stays the end, and a malformed batch stays malformed.
  const bool malformed = reader.malformed();
  FUZZ_CHECK(!reader.next(&m) && reader.malformed() == malformed);
  return {.messages = out, .malformed = malformed};
}

}  // namespace rdmx::fuzz
