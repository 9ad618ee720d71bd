// Fuzzes the three ids a peer or the device hands back for rdmx to route by: a completion's
// wr_id (protocol/wr_id.h), the synchronous-send cookie a kMatchAck echoes
// (protocol/sync_cookie.h) and the rendezvous transfer word of CTS/FIN/DATA bodies and
// write-with-imm immediates (rendezvous/transfer_id.h). Input: 8 bytes wr_id, 4 bytes cookie,
// 4 bytes transfer word (missing bytes are zero). Every word decodes to fields in range that
// encode back to the same word; an id whose fields are in range survives encode then decode.
#include <cstring>

#include "fuzz_check.h"
#include "protocol/sync_cookie.h"
#include "protocol/wr_id.h"
#include "rendezvous/transfer_id.h"

namespace {

using namespace rdmx::protocol;

void check_wr_id(std::uint64_t word) {
  const WrId id = decode(word);
  FUZZ_CHECK(wr_kind(word) == id.kind);
  FUZZ_CHECK(id.thread <= kWrMaxThread);
  FUZZ_CHECK(encode(id) == word);  // the fields cover all 64 bits
  // kInvalidWrId and a zeroed wr_id never pass the pollers' first check.
  FUZZ_CHECK(is_valid_wr_id(word) == is_encodable(id));
  FUZZ_CHECK(!is_valid_wr_id(kInvalidWrId) && !is_valid_wr_id(0));
  if (is_encodable(id)) {
    FUZZ_CHECK(word != kInvalidWrId && word != 0);
  }
}

void check_cookie(std::uint32_t word) {
  const SyncCookie c = decode_sync_cookie(word);
  FUZZ_CHECK(c.thread < kSyncCookieThreads && c.slot < kSyncCookieSlots);
  FUZZ_CHECK(encode_sync_cookie(c) == word);
}

void check_transfer(std::uint32_t word) {
  using namespace rdmx::rendezvous;
  const TransferId id = decode_transfer(word);
  FUZZ_CHECK(id.slot < kMaxTransferSlots && id.generation <= kTransferGenerationMask);
  FUZZ_CHECK(encode_transfer(id) == word);
  FUZZ_CHECK(is_valid_transfer(word) == (id.generation != 0));
  FUZZ_CHECK(from_imm(to_imm(word)) == word);
  const std::uint16_t next = next_transfer_generation(id.generation);
  FUZZ_CHECK(next != 0 && next <= kTransferGenerationMask && next != id.generation);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  unsigned char in[16] = {};
  std::memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
  std::uint64_t wr_id = 0;
  std::uint32_t cookie = 0;
  std::uint32_t transfer = 0;
  std::memcpy(&wr_id, in, 8);
  std::memcpy(&cookie, in + 8, 4);
  std::memcpy(&transfer, in + 12, 4);
  check_wr_id(wr_id);
  check_cookie(cookie);
  check_transfer(transfer);
  return 0;
}
