// Checked state machines of the transport's own objects (requests, UD write connections), in the
// manner of rendezvous/transfer_state.h: a table of allowed moves with a name per state, and one
// way to change state that checks the move against it.
//
// A request changes state several times per message, so the check is inline: one load from a
// constexpr table and one branch. Allowed moves are not logged (that would cost a branch on the
// verbosity per message); a refused move is always logged, out of line, and leaves the state as
// it was: it is a bug in rdmx, and the log names the machine, both states and the object.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rdmx::transport {

template <class State, std::size_t N>
struct StateMoves {
  const char* machine;                    // names the machine in the log
  std::array<std::string_view, N> names;  // by state value
  std::array<std::uint32_t, N> next;      // next[from]: bit `to` set when from -> to is allowed

  constexpr bool allowed(State from, State to) const noexcept {
    const auto f = static_cast<std::size_t>(from);
    const auto t = static_cast<std::size_t>(to);
    return f < N && t < N && (next[f] >> t & 1u) != 0;
  }
  constexpr std::string_view name(State s) const noexcept {
    const auto i = static_cast<std::size_t>(s);
    return i < N ? names[i] : std::string_view("unknown");
  }
};

template <class State>
constexpr std::uint32_t state_bit(State s) noexcept {
  return 1u << static_cast<unsigned>(s);
}

// Logs "rdmx: refused <machine> state move <from> -> <to> (<what> <id>)" on stderr.
[[gnu::cold, gnu::noinline]] void report_refused_move(const char* machine, std::string_view from,
                                                      std::string_view to, const char* what,
                                                      std::uint64_t id) noexcept;

// Refused moves in this process so far (every worker's): tests check it stays 0.
std::uint64_t refused_moves() noexcept;

// The one way such a state changes. `what` and `id` only label the log line.
template <class State, std::size_t N>
inline bool checked_move(State& state, State to, const StateMoves<State, N>& moves,
                         const char* what, std::uint64_t id) noexcept {
  if (!moves.allowed(state, to)) [[unlikely]] {
    report_refused_move(moves.machine, moves.name(state), moves.name(to), what, id);
    return false;
  }
  state = to;
  return true;
}

}  // namespace rdmx::transport
