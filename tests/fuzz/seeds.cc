// Writes the seed corpus of every fuzz target: valid inputs built with the real encoders, so
// that the fuzzer starts from messages the transport accepts and mutates from there (random
// bytes rarely get past the version check). Generated rather than checked in: a wire format
// change cannot leave stale seeds behind.
//   fuzz_seeds OUTDIR    writes OUTDIR/<target>/<name> for each target in CMakeLists.txt
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/batch.h"
#include "protocol/connect.h"
#include "protocol/ring.h"
#include "protocol/sync_cookie.h"
#include "protocol/wire.h"
#include "protocol/wr_id.h"
#include "rdmx/rdmx.h"
#include "rendezvous/transfer_id.h"

namespace {

namespace fs = std::filesystem;
using namespace rdmx::protocol;
using Bytes = std::vector<std::byte>;

fs::path g_out;
int g_rejected = 0;  // seeds the real decoders refuse: a seed generator that is out of date

void expect(bool accepted, const std::string& what) {
  if (!accepted) {
    std::fprintf(stderr, "fuzz_seeds: the decoder rejects the %s seed\n", what.c_str());
    ++g_rejected;
  }
}

void write(const std::string& target, const std::string& name, const Bytes& b) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

template <class T>
void append(Bytes& b, const T& value) {
  b.resize(b.size() + sizeof(T));
  store_wire(b.data() + b.size() - sizeof(T), value);
}

template <class T>
Bytes wire(const T& value) {
  Bytes b;
  append(b, value);
  return b;
}

// A whole message: header (payload_length filled in), the kind's body if it has one, payload.
Bytes message(MsgHeader h, const Bytes& payload, const Bytes& body = {}) {
  h.payload_length = static_cast<std::uint32_t>(payload.size());
  Bytes b = wire(h);
  b.insert(b.end(), body.begin(), body.end());
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

MsgHeader header(MsgKind kind) {
  MsgHeader h = make_header(kind);
  h.src_ep = 1;
  h.seq = 7;
  h.ack = 6;
  h.flags = kFlagAckValid;
  return h;
}

WorkerAddress address(std::uint8_t transport) {
  WorkerAddress a;
  a.transport = transport;
  a.port = 1;
  a.caps = transport == RDMX_TRANSPORT_UD ? (kCapRc | kCapUd) : kCapRc;
  a.uid = 0x1234;
  a.instance = 0x99;
  a.gid[10] = a.gid[11] = 0xff;
  a.link_layer = 2;
  a.mtu = 1024;
  a.ctrl_qpn = 0x11;
  a.ud_qpn = {0x12, 0x13};
  a.class_capacity = {256, 8192};
  a.max_inline = 256;
  a.rd_atomic = 16;
  a.set_device_name("rxe0");
  return a;
}

Bytes bytes_of(const AddressBytes& a) {
  Bytes b(a.size());
  std::memcpy(b.data(), a.data(), a.size());
  return b;
}

Bytes connect_message(std::uint8_t op, std::uint8_t transport) {
  ConnectBody body{};
  body.op = op;
  body.transport = transport;
  body.rc_credits = 64;
  body.sender_index = 1;
  body.target_uid = 0x5678;
  body.rc_qpn[0] = 0x21;
  body.rc_qpn[1] = 0x22;
  body.rc_psn[0] = 0x31;
  body.rc_psn[1] = 0x32;
  const AddressBytes a = encode_address(address(transport));
  std::memcpy(body.address, a.data(), a.size());
  return message(header(MsgKind::kConnect), wire(body));
}

// A batch payload of `n` records, and its record count.
Bytes batch_payload(int n, std::uint32_t* count) {
  std::array<std::byte, 512> buf{};
  BatchWriter w(buf);
  const std::string text = "0123456789abcdefghij";
  for (int i = 0; i < n; ++i) {
    (void)w.append(100 + static_cast<std::uint64_t>(i), text.data(),
                   static_cast<std::size_t>(i) * 3);
  }
  *count = w.count();
  return Bytes(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(w.bytes()));
}

// One valid message of every kind (and two of the kinds whose payload varies).
std::vector<std::pair<std::string, Bytes>> messages() {
  using rdmx::rendezvous::encode_transfer;
  const std::uint32_t send_id = encode_transfer({.slot = 3, .generation = 1});
  const std::uint32_t recv_id = encode_transfer({.slot = 9, .generation = 2});
  const Bytes text{std::byte{'h'}, std::byte{'i'}, std::byte{'!'}};
  std::vector<std::pair<std::string, Bytes>> out;
  MsgHeader eager = header(MsgKind::kEager);
  eager.tag = 0x10002;
  out.emplace_back("eager", message(eager, text));
  out.emplace_back("eager_empty", message(eager, {}));
  MsgHeader sync = header(MsgKind::kEagerSync);
  sync.aux = encode_sync_cookie({.thread = 2, .generation = 5, .slot = 40});
  out.emplace_back("eager_sync", message(sync, text));
  out.emplace_back("ack", message(header(MsgKind::kAck), {}));
  MsgHeader match_ack = header(MsgKind::kMatchAck);
  match_ack.aux = sync.aux;
  out.emplace_back("match_ack", message(match_ack, {}));
  const RtsBody rts{.total_length = 1 << 20, .sender_slot = send_id, .rkey = 0x77, .addr = 4096};
  out.emplace_back("rts", message(header(MsgKind::kRts), {}, wire(rts)));
  const CtsBody cts{.remote_addr = 8192,
                    .offset = 0,
                    .granted_length = 1 << 20,
                    .rkey = 0x88,
                    .sender_slot = send_id,
                    .receiver_slot = recv_id,
                    .flags = 0};
  out.emplace_back("cts", message(header(MsgKind::kCts), {}, wire(cts)));
  const FinBody fin{
      .sender_slot = send_id, .receiver_slot = recv_id, .status = 0, .flags = kFinFlagReadDone};
  out.emplace_back("fin", message(header(MsgKind::kFin), {}, wire(fin)));
  out.emplace_back("connect", connect_message(connect_op::kRequest, RDMX_TRANSPORT_RC));
  MsgHeader disconnect = header(MsgKind::kDisconnect);
  disconnect.flags = 0;
  out.emplace_back("disconnect", message(disconnect, {}));
  const DataBody data{.offset = 4096, .receiver_slot = recv_id, .reserved = 0};
  out.emplace_back("rndv_data", message(header(MsgKind::kRndvData), text, wire(data)));
  MsgHeader batch = header(MsgKind::kBatch);
  const Bytes records = batch_payload(4, &batch.aux);
  out.emplace_back("batch", message(batch, records));
  const RingBody ring{.addr = 65536, .rkey = 0x99, .slots = 64, .slot_size = 256, .reserved = 0};
  MsgHeader offer = header(MsgKind::kRingOffer);
  offer.flags = kFlagRingAck;
  offer.ring_ack = 12;
  out.emplace_back("ring_offer", message(offer, {}, wire(ring)));
  out.emplace_back("ring_withdraw", message(header(MsgKind::kRingWithdraw), {}));
  out.emplace_back("ring_released", message(header(MsgKind::kRingReleased), {}));
  return out;
}

void wire_message() {
  for (const auto& [name, b] : messages()) {
    expect(validate(b, nullptr) == WireError::kOk, name);
    write("wire_message", name, b);
  }
}

void batch_records() {
  for (const int n : {0, 1, 5}) {
    std::uint32_t count = 0;
    const Bytes payload = batch_payload(n, &count);
    Bytes b;
    append(b, count);
    b.insert(b.end(), payload.begin(), payload.end());
    write("batch_records", "records_" + std::to_string(n), b);
  }
}

// The ring_slot target's input: a mode byte, then the bytes.
Bytes with_mode(std::uint8_t mode, const Bytes& rest) {
  Bytes b(1 + rest.size());
  b[0] = std::byte{mode};
  std::memcpy(b.data() + 1, rest.data(), rest.size());
  return b;
}

void ring_slot() {
  for (const auto& [name, m] : messages()) {
    if (m.size() + kRingFooterSize > kRingMaxSlot) {
      continue;
    }
    // Odd mode: the message, sealed by the target.
    write("ring_slot", "seal_" + name, with_mode(1, m));
    // Even mode: the image a sender writes into the end of a slot.
    Bytes image(ring_image_size(m.size()));
    std::memcpy(image.data(), m.data(), m.size());
    ring_seal(image.data(), m.size());
    write("ring_slot", "slot_" + name, with_mode(0, image));
  }
}

void worker_address() {
  WorkerAddress a;
  const AddressBytes blob = encode_address(address(RDMX_TRANSPORT_UD));
  expect(decode_address(blob.data(), blob.size(), &a) == RDMX_OK, "address");
  write("worker_address", "rc", bytes_of(encode_address(address(RDMX_TRANSPORT_RC))));
  write("worker_address", "ud", bytes_of(encode_address(address(RDMX_TRANSPORT_UD))));
}

void connect_messages() {
  write("connect_message", "request_rc", connect_message(connect_op::kRequest, RDMX_TRANSPORT_RC));
  write("connect_message", "reply_ud", connect_message(connect_op::kReply, RDMX_TRANSPORT_UD));
  write("connect_message", "ping_ud", connect_message(connect_op::kPing, RDMX_TRANSPORT_UD));
}

void wire_ids() {
  Bytes b;
  append(b, encode(WrId{.kind = WrKind::kSrqRecv, .thread = 3, .generation = 9, .slot = 77}));
  append(b, encode_sync_cookie({.thread = 2, .generation = 5, .slot = 40}));
  append(b, rdmx::rendezvous::encode_transfer({.slot = 3, .generation = 1}));
  write("wire_ids", "ids", b);
  Bytes invalid;
  append(invalid, kInvalidWrId);
  append(invalid, std::uint32_t{0});
  append(invalid, rdmx::rendezvous::kNoTransfer);
  write("wire_ids", "invalid", invalid);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  wire_message();
  batch_records();
  ring_slot();
  worker_address();
  connect_messages();
  wire_ids();
  return g_rejected == 0 ? 0 : 1;
}
