// The benchmark's out-of-band channel: one TCP connection between the rdmx_perf server and
// client that carries the worker address blobs and the client's commands (which test, which
// size, when to start). It is never on the measured path.
//
// Every read waits at most a deadline, so a dead or stuck peer ends the benchmark with a message
// instead of hanging it. Failures throw std::runtime_error with the errno text.
//
// Messages are raw structs: both ends are the same binary on the same architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmx::bench {

// Listening socket on host:port (port 0: any free port; *bound_port receives it).
int tcp_listen(const std::string& host, std::uint16_t port, std::uint16_t* bound_port);
// Accepts one connection within timeout_ms.
int tcp_accept(int listen_fd, int timeout_ms);
// Connects to host:port, retrying refused connections until timeout_ms (the server may still
// be starting).
int tcp_connect(const std::string& host, std::uint16_t port, int timeout_ms);

enum class Op : std::uint32_t {
  kHello = 1,  // client -> server: arg[0] transport, arg[1] workers, arg[2] eager limit cap
  kConnect,    // client -> server: wire up server workers [arg[0], arg[0] + arg[1])
  kProbe,      // client -> server: receive arg[0] probe messages of up to arg[1] bytes
  kRun,        // client -> server: arg[0] test, arg[1] size, arg[2] messages, arg[3] window
  kReady,      // server -> client: receives posted, start
  kDone,       // server -> client: the command finished; arg[0] 0 or an rdmx code
  kQuit,       // client -> server: destroy and exit
};

struct Msg {
  Op op = Op::kDone;
  std::uint32_t reserved = 0;
  std::uint64_t arg[4] = {0, 0, 0, 0};
};

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  Channel(Channel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  void send(const Msg& msg);
  // Waits up to timeout_ms for a message; throws on timeout or EOF, and (recv) when the message
  // is not `expect`.
  Msg recv(int timeout_ms, Op expect);
  Msg recv_any(int timeout_ms);
  // True when bytes (or EOF) are waiting; never blocks.
  bool readable();
  void send_blob(const void* data, std::size_t length);
  std::vector<std::uint8_t> recv_blob(int timeout_ms);

 private:
  void write_all(const void* data, std::size_t length);
  void read_all(void* data, std::size_t length, int timeout_ms);

  int fd_ = -1;
};

}  // namespace rdmx::bench
