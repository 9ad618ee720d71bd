#include "plugin/ucx/tl_address.h"

#include <cstring>

#include "rdmx/rdmx.h"

namespace rdmx::ucx {
namespace {

// Little-endian fields, whatever the host order (as protocol/address.cc writes the blob).
class Writer {
 public:
  explicit Writer(std::uint8_t* p) noexcept : p_(p) {}
  template <typename T>
  void put(T v) noexcept {
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      *p_++ = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i));
    }
  }
  void bytes(const void* src, std::size_t n) noexcept {
    std::memcpy(p_, src, n);
    p_ += n;
  }

 private:
  std::uint8_t* p_;
};

class Reader {
 public:
  explicit Reader(const std::uint8_t* p) noexcept : p_(p) {}
  template <typename T>
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

}  // namespace

bool split_address(const void* blob, std::size_t length, std::uint8_t* device,
                   std::uint8_t* iface) noexcept {
  protocol::WorkerAddress a;
  if (protocol::decode_address(blob, length, &a) != RDMX_OK || (a.caps & protocol::kCapShm)) {
    return false;
  }
  Writer d(device);
  d.bytes(a.gid.data(), a.gid.size());
  d.put(a.lid);
  d.put(a.link_layer);
  d.put(a.port);
  d.put(a.mtu);
  Writer i(iface);
  i.put(a.transport);
  i.put(a.caps);
  i.put(a.rd_atomic);
  i.put(a.uid);
  i.put(a.instance);
  i.put(a.ctrl_qpn);
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    i.put(a.ud_qpn[c]);
  }
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    i.put(a.class_capacity[c]);
  }
  i.put(a.max_inline);
  return true;
}

bool join_address(const std::uint8_t* device, const std::uint8_t* iface,
                  protocol::AddressBytes* blob) noexcept {
  protocol::WorkerAddress a;
  Reader d(device);
  d.bytes(a.gid.data(), a.gid.size());
  a.lid = d.get<std::uint16_t>();
  a.link_layer = d.get<std::uint8_t>();
  a.port = d.get<std::uint8_t>();
  a.mtu = d.get<std::uint32_t>();
  Reader i(iface);
  a.transport = i.get<std::uint8_t>();
  a.caps = i.get<std::uint8_t>();
  a.rd_atomic = i.get<std::uint8_t>();
  a.uid = i.get<std::uint64_t>();
  a.instance = i.get<std::uint64_t>();
  a.ctrl_qpn = i.get<std::uint32_t>();
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    a.ud_qpn[c] = i.get<std::uint32_t>();
  }
  for (int c = 0; c < protocol::kNumClasses; ++c) {
    a.class_capacity[c] = i.get<std::uint32_t>();
  }
  a.max_inline = i.get<std::uint32_t>();
  *blob = protocol::encode_address(a);
  // The decoder's consistency checks are the rules for a blob: what it refuses, rdmx would.
  protocol::WorkerAddress check;
  return protocol::decode_address(blob->data(), blob->size(), &check) == RDMX_OK;
}

}  // namespace rdmx::ucx
