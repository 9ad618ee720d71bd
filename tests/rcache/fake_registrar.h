// A registrar for host tests of the cache's bookkeeping: it registers nothing, but records
// every live "registration" with its range and creation time, hands out unique keys, and can be
// told to refuse ranges (poisoned pages, a pinned-bytes budget) the way ibv_reg_mr does.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/reg_cache.h"

namespace rdmx::test {

struct FakeRegion {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  int access = 0;
  std::uint64_t created = 0;  // FakeState::clock at registration
};

// Shared between the test and the registrar the cache owns.
struct FakeState {
  std::map<std::uint32_t, FakeRegion> live;  // by lkey
  std::vector<FakeRegion> attempts;          // every register_range call, in order
  std::set<std::uintptr_t> poisoned_pages;   // ranges containing one fail with EFAULT
  std::set<std::uintptr_t> readonly_pages;   // writable registrations including one: EFAULT
  std::size_t budget_bytes = SIZE_MAX;       // live bytes beyond this fail with ENOMEM
  std::uint32_t next_key = 1;
  std::uint64_t clock = 0;  // advanced by the test (model time)
  std::size_t page = 4096;

  std::size_t live_bytes() const {
    std::size_t b = 0;
    for (const auto& [key, r] : live) {
      b += r.end - r.start;
    }
    return b;
  }
};

class FakeRegistrar final : public rendezvous::Registrar {
 public:
  explicit FakeRegistrar(FakeState& state) : s_(state) {}

  int register_range(void* addr, std::size_t len, int access, Region& out,
                     std::string& error) noexcept override {
    const auto start = reinterpret_cast<std::uintptr_t>(addr);
    s_.attempts.push_back({start, start + len, access, s_.clock});
    const bool writable =
        (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) !=
        0;
    for (std::uintptr_t p = start & ~(s_.page - 1); p < start + len; p += s_.page) {
      if (s_.poisoned_pages.count(p) != 0) {
        error = "fake_reg_mr: poisoned page: Bad address (EFAULT)";
        return EFAULT;
      }
      if (writable && s_.readonly_pages.count(p) != 0) {
        error = "fake_reg_mr: writable registration of a read-only page: Bad address (EFAULT)";
        return EFAULT;
      }
    }
    if (s_.live_bytes() + len > s_.budget_bytes) {
      error = "fake_reg_mr: over the pinning budget: Cannot allocate memory (ENOMEM)";
      return ENOMEM;
    }
    const std::uint32_t key = s_.next_key++;
    s_.live[key] = FakeRegion{start, start + len, access, s_.clock};
    out.handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(key));
    out.lkey = key;
    out.rkey = key | 0x8000'0000u;
    return 0;
  }

  void deregister(Region& region) noexcept override {
    s_.live.erase(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(region.handle)));
    region.handle = nullptr;
  }

 private:
  FakeState& s_;
};

}  // namespace rdmx::test
