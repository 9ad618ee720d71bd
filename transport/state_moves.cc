#include "transport/state_moves.h"

#include <atomic>
#include <cstdio>

namespace rdmx::transport {
namespace {
std::atomic<std::uint64_t> g_refused{0};
}  // namespace

std::uint64_t refused_moves() noexcept {
  return g_refused.load(std::memory_order_relaxed);
}

void report_refused_move(const char* machine, std::string_view from, std::string_view to,
                         const char* what, std::uint64_t id) noexcept {
  g_refused.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "rdmx: refused %s state move %.*s -> %.*s (%s %#llx)\n", machine,
               static_cast<int>(from.size()), from.data(), static_cast<int>(to.size()), to.data(),
               what, static_cast<unsigned long long>(id));
}

}  // namespace rdmx::transport
