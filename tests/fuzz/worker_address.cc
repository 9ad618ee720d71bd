// Fuzzes the worker address blob from the modex (protocol/address.h): decode_address, as
// rdmx_ep_create runs it on what MPI hands over. A rejected blob leaves the output untouched; an
// accepted one is consistent and re-encodes to the same bytes.
#include "address_check.h"
#include "fuzz_check.h"
#include "protocol/address.h"
#include "rdmx/rdmx.h"

using namespace rdmx::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  WorkerAddress out;
  out.uid = 0x5a5a5a5a5a5a5a5aull;  // a sentinel that a rejected blob must leave in place
  out.mtu = 7;
  const WorkerAddress untouched = out;
  FUZZ_CHECK(decode_address(nullptr, size, &out) == RDMX_ERR_INVALID_PARAM);
  FUZZ_CHECK(decode_address(data, size, nullptr) == RDMX_ERR_INVALID_PARAM);
  const int rc = decode_address(data, size, &out);
  if (rc != RDMX_OK) {
    FUZZ_CHECK(rc == RDMX_ERR_BAD_ADDRESS);
    FUZZ_CHECK(out == untouched);
    return 0;
  }
  FUZZ_CHECK(size == kAddressSize);
  rdmx::fuzz::check_address(data, out);
  return 0;
}
