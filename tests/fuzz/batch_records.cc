// Fuzzes the records of a kBatch payload (protocol/batch.h) as deliver_batch walks them.
// Input: a 4-byte record count (the header's aux), then the payload. The records read are then
// written again with BatchWriter into a buffer of the payload's size and read back: the round
// trip must give the same messages and fill the buffer exactly.
#include <cstring>
#include <vector>

#include "batch_check.h"
#include "fuzz_check.h"
#include "protocol/batch.h"

using namespace rdmx::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::uint32_t count = 0;
  if (size < sizeof(count)) {
    return 0;
  }
  std::memcpy(&count, data, sizeof(count));
  const auto payload = rdmx::fuzz::as_bytes(data + sizeof(count), size - sizeof(count));
  const auto walk = rdmx::fuzz::check_batch(payload, count);
  if (walk.malformed) {
    return 0;  // what deliver_batch delivered before the bad record was checked
  }
  const auto& messages = walk.messages;
  // Exactly the payload's size on the heap: a writer that overruns it trips ASan.
  std::vector<std::byte> buffer(payload.size());
  BatchWriter writer(buffer);
  for (const auto& m : messages) {
    FUZZ_CHECK(writer.fits(m.length));
    FUZZ_CHECK(writer.append(m.tag, m.data, m.length));
  }
  FUZZ_CHECK(writer.bytes() == payload.size() && writer.count() == count);
  FUZZ_CHECK(!writer.fits(0) && !writer.append(0, nullptr, 0));  // full: refuses, writes nothing
  const auto again = rdmx::fuzz::check_batch(buffer, writer.count()).messages;
  FUZZ_CHECK(again.size() == messages.size());
  for (std::size_t i = 0; i < again.size(); ++i) {
    FUZZ_CHECK(again[i].tag == messages[i].tag && again[i].length == messages[i].length);
    FUZZ_CHECK(again[i].length == 0 ||
               std::memcmp(again[i].data, messages[i].data, again[i].length) == 0);
  }
  return 0;
}
