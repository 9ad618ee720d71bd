// What every fuzz target in tests/fuzz shares: the entry point libFuzzer (or replay_main.cc)
// calls, and FUZZ_CHECK, which aborts on a broken invariant. Aborting, not returning, is what
// makes libFuzzer keep the input as a crash, and what fails a replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace rdmx::fuzz {

[[noreturn]] inline void fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
  std::abort();
}

inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

}  // namespace rdmx::fuzz

#define FUZZ_CHECK(cond) ((cond) ? void(0) : ::rdmx::fuzz::fail(#cond, __FILE__, __LINE__))
