// Little-endian field cursors for the byte layouts of protocol/ (the worker address) and of those
// built on it (plugin/ucx/tl_address.h): fields are written and read byte by byte, whatever the
// host order, and a struct is never memcpy'd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdmx::protocol {

class LeWriter {
 public:
  explicit LeWriter(std::uint8_t* p) noexcept : p_(p) {}
  template <class T>
  void put(T v) noexcept {
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      *p_++ = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i));
    }
  }
  void bytes(const void* src, std::size_t n) noexcept {
    std::memcpy(p_, src, n);
    p_ += n;
  }
  const std::uint8_t* pos() const noexcept { return p_; }

 private:
  std::uint8_t* p_;
};

class LeReader {
 public:
  explicit LeReader(const std::uint8_t* p) noexcept : p_(p) {}
  template <class T>
  T get() noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v |= std::uint64_t{*p_++} << (8 * i);
    }
    return static_cast<T>(v);
  }
  void bytes(void* dst, std::size_t n) noexcept {
    std::memcpy(dst, p_, n);
    p_ += n;
  }

 private:
  const std::uint8_t* p_;
};

}  // namespace rdmx::protocol
