#include "bench/ctrl_channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace rdmx::bench {

namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

addrinfo* resolve(const std::string& host, std::uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    throw std::runtime_error("getaddrinfo " + host + ": " + gai_strerror(rc));
  }
  return res;
}

void set_nodelay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

int tcp_listen(const std::string& host, std::uint16_t port, std::uint16_t* bound_port) {
  addrinfo* res = resolve(host, port, true);
  int fd = -1;
  int err = 0;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      break;
    }
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    fail("listen on " + host + ":" + std::to_string(port), err);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int e = errno;
    close(fd);
    fail("getsockname", e);
  }
  if (bound_port != nullptr) {
    *bound_port =
        ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port
                                       : reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  }
  return fd;
}

int tcp_accept(int listen_fd, int timeout_ms) {
  pollfd pfd{.fd = listen_fd, .events = POLLIN, .revents = 0};
  for (;;) {
    const int n = poll(&pfd, 1, timeout_ms);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      fail("poll on the listening socket", errno);
    }
    if (n == 0) {
      throw std::runtime_error("no client connected within " + std::to_string(timeout_ms) + " ms");
    }
    break;
  }
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    fail("accept", errno);
  }
  set_nodelay(fd);
  return fd;
}

int tcp_connect(const std::string& host, std::uint16_t port, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int err = 0;
  for (;;) {
    addrinfo* res = resolve(host, port, false);
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        err = errno;
        continue;
      }
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(res);
        set_nodelay(fd);
        return fd;
      }
      err = errno;
      close(fd);
    }
    freeaddrinfo(res);
    if (std::chrono::steady_clock::now() >= deadline) {
      fail("connect to " + host + ":" + std::to_string(port), err);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      close(fd_);
    }
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Channel::~Channel() {
  if (fd_ >= 0) {
    close(fd_);
  }
}

void Channel::write_all(const void* data, std::size_t length) {
  const auto* p = static_cast<const char*>(data);
  while (length > 0) {
    const ssize_t n = ::send(fd_, p, length, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      fail("send on the control channel", errno);
    }
    p += n;
    length -= static_cast<std::size_t>(n);
  }
}

void Channel::read_all(void* data, std::size_t length, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto* p = static_cast<char*>(data);
  while (length > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{.fd = fd_, .events = POLLIN, .revents = 0};
    const int r = poll(&pfd, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      fail("poll on the control channel", errno);
    }
    if (r == 0) {
      throw std::runtime_error("the peer sent nothing for " + std::to_string(timeout_ms) +
                               " ms on the control channel");
    }
    const ssize_t n = ::recv(fd_, p, length, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      fail("recv on the control channel", errno);
    }
    if (n == 0) {
      throw std::runtime_error("the peer closed the control channel");
    }
    p += n;
    length -= static_cast<std::size_t>(n);
  }
}

bool Channel::readable() {
  pollfd pfd{.fd = fd_, .events = POLLIN, .revents = 0};
  const int r = poll(&pfd, 1, 0);
  if (r < 0 && errno != EINTR) {
    fail("poll on the control channel", errno);
  }
  return r > 0;
}

void Channel::send(const Msg& msg) {
  write_all(&msg, sizeof(msg));
}

Msg Channel::recv_any(int timeout_ms) {
  Msg m;
  read_all(&m, sizeof(m), timeout_ms);
  return m;
}

Msg Channel::recv(int timeout_ms, Op expect) {
  const Msg m = recv_any(timeout_ms);
  if (m.op != expect) {
    throw std::runtime_error("control channel: expected op " +
                             std::to_string(static_cast<unsigned>(expect)) + ", got " +
                             std::to_string(static_cast<unsigned>(m.op)));
  }
  return m;
}

void Channel::send_blob(const void* data, std::size_t length) {
  const std::uint64_t n = length;
  write_all(&n, sizeof(n));
  write_all(data, length);
}

std::vector<std::uint8_t> Channel::recv_blob(int timeout_ms) {
  std::uint64_t n = 0;
  read_all(&n, sizeof(n), timeout_ms);
  if (n > (1u << 20)) {
    throw std::runtime_error("control channel: blob of " + std::to_string(n) + " bytes");
  }
  std::vector<std::uint8_t> blob(n);
  read_all(blob.data(), blob.size(), timeout_ms);
  return blob;
}

}  // namespace rdmx::bench
