#include "rendezvous/transfer_state.h"

#include <array>
#include <cstdio>

namespace rdmx::rendezvous {

namespace {

constexpr std::array<std::string_view, kSendStateCount> kSendNames = {
    "free", "wait_cts", "wait_connection", "writing", "copying", "draining", "done", "failed"};
constexpr std::array<std::string_view, kRecvStateCount> kRecvNames = {
    "free", "cts_pending", "wait_data", "copying", "draining", "done", "failed"};

template <class E>
constexpr std::uint32_t bit(E e) {
  return 1u << static_cast<unsigned>(e);
}

// kSendNext[from]: the states `from` may move to.
constexpr std::array<std::uint32_t, kSendStateCount> kSendNext = [] {
  using S = SendState;
  std::array<std::uint32_t, kSendStateCount> t{};
  t[static_cast<int>(S::kFree)] = bit(S::kWaitCts);
  t[static_cast<int>(S::kWaitCts)] = bit(S::kFree) | bit(S::kWaitConnection) | bit(S::kWriting) |
                                     bit(S::kCopying) | bit(S::kFailed);
  t[static_cast<int>(S::kWaitConnection)] = bit(S::kWriting) | bit(S::kCopying) | bit(S::kFailed);
  t[static_cast<int>(S::kWriting)] = bit(S::kDone) | bit(S::kDraining) | bit(S::kFailed);
  t[static_cast<int>(S::kCopying)] = bit(S::kDone) | bit(S::kFailed);
  t[static_cast<int>(S::kDraining)] = bit(S::kFailed);
  t[static_cast<int>(S::kDone)] = bit(S::kFree);
  t[static_cast<int>(S::kFailed)] = bit(S::kFree);
  return t;
}();

constexpr std::array<std::uint32_t, kRecvStateCount> kRecvNext = [] {
  using R = RecvState;
  std::array<std::uint32_t, kRecvStateCount> t{};
  t[static_cast<int>(R::kFree)] = bit(R::kCtsPending) | bit(R::kWaitData);
  t[static_cast<int>(R::kCtsPending)] = bit(R::kWaitData) | bit(R::kFailed);
  t[static_cast<int>(R::kWaitData)] =
      bit(R::kCopying) | bit(R::kDraining) | bit(R::kDone) | bit(R::kFailed);
  t[static_cast<int>(R::kCopying)] = bit(R::kDone) | bit(R::kFailed);
  t[static_cast<int>(R::kDraining)] = bit(R::kFailed);
  t[static_cast<int>(R::kDone)] = bit(R::kFree);
  t[static_cast<int>(R::kFailed)] = bit(R::kFree);
  return t;
}();

void stderr_sink(void*, std::string_view line) {
  std::fprintf(stderr, "rdmx: %.*s\n", static_cast<int>(line.size()), line.data());
}

template <class E, std::size_t N>
bool checked(E& state, E to, std::uint32_t id, std::uint32_t peer, const TransitionLog& log,
             const char* side, const std::array<std::string_view, N>& names,
             const std::array<std::uint32_t, N>& next) noexcept {
  const auto from = static_cast<std::size_t>(state);
  const auto dest = static_cast<std::size_t>(to);
  const bool ok = from < N && dest < N && (next[from] & (1u << dest)) != 0;
  if (!ok || log.verbose >= 2) {
    char line[160];
    const int n = std::snprintf(
        line, sizeof(line), "rendezvous %s %08x (peer %u): %s%.*s -> %.*s", side, id, peer,
        ok ? "" : "refused transition ", static_cast<int>(from < N ? names[from].size() : 1),
        from < N ? names[from].data() : "?", static_cast<int>(dest < N ? names[dest].size() : 1),
        dest < N ? names[dest].data() : "?");
    log.write(std::string_view(line, n > 0 ? static_cast<std::size_t>(n) : 0));
  }
  if (ok) {
    state = to;
  }
  return ok;
}

}  // namespace

std::string_view to_string(SendState state) noexcept {
  const auto i = static_cast<std::size_t>(state);
  return i < kSendNames.size() ? kSendNames[i] : "unknown";
}

std::string_view to_string(RecvState state) noexcept {
  const auto i = static_cast<std::size_t>(state);
  return i < kRecvNames.size() ? kRecvNames[i] : "unknown";
}

bool allowed(SendState from, SendState to) noexcept {
  const auto f = static_cast<std::size_t>(from);
  const auto t = static_cast<std::size_t>(to);
  return f < kSendNext.size() && t < kSendNext.size() && (kSendNext[f] & bit(to)) != 0;
}

bool allowed(RecvState from, RecvState to) noexcept {
  const auto f = static_cast<std::size_t>(from);
  const auto t = static_cast<std::size_t>(to);
  return f < kRecvNext.size() && t < kRecvNext.size() && (kRecvNext[f] & bit(to)) != 0;
}

void TransitionLog::write(std::string_view line) const noexcept {
  (sink != nullptr ? sink : stderr_sink)(user, line);
}

bool transition(SendState& state, SendState to, std::uint32_t id, std::uint32_t peer,
                const TransitionLog& log) noexcept {
  return checked(state, to, id, peer, log, "send", kSendNames, kSendNext);
}

bool transition(RecvState& state, RecvState to, std::uint32_t id, std::uint32_t peer,
                const TransitionLog& log) noexcept {
  return checked(state, to, id, peer, log, "recv", kRecvNames, kRecvNext);
}

}  // namespace rdmx::rendezvous
