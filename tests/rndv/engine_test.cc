// The rendezvous protocol end to end between engines, over a simulated transport:
//   - control messages (CTS, FIN, kRndvData) travel in per-direction FIFOs, like the sequenced
//     eager channel;
//   - RDMA writes travel in per-direction FIFOs (one RC QP) and are executed by memcpy from the
//     sender's buffer into the receiver's, but only after checking the keys: the lkey must be a
//     live registration of the sender covering the source, the rkey a live registration of the
//     receiver with REMOTE_WRITE covering the target (the fake registrar hands out the keys and
//     enforces read-only pages and pinning budgets like ibv_reg_mr). A bad key fails the write
//     and, as on a real RC QP, flushes every write behind it;
//   - the order in which the FIFOs advance is drawn from a seeded generator, so runs explore
//     interleavings reproducibly.
#include "rendezvous/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/rcache/fake_registrar.h"

namespace rdmx::rendezvous {
namespace {

using test::FakeRegistrar;
using test::FakeState;

struct Req {
  int completions = 0;
  int code = RDMX_INPROGRESS;
  std::uint64_t length = 0;
};

class Net;

// One worker: its registrations, cache, engine and the transport hooks it gives the engine.
class Node final : public Transport {
 public:
  Node(Net& net, std::uint32_t id, const EngineConfig& config)
      : net_(net),
        id_(id),
        cache_(std::make_unique<FakeRegistrar>(fake),
               RegCacheConfig{.source = InvalidationSource::kExternal}),
        engine(*this, cache_, config) {}

  PostResult post_cts(PeerIndex peer, const protocol::CtsBody& body) override;
  PostResult post_fin(PeerIndex peer, const protocol::FinBody& body) override;
  PostResult post_fragment(PeerIndex peer, const protocol::DataBody& body, const void* data,
                           std::size_t length) override;
  std::size_t fragment_capacity(PeerIndex) override { return frag_cap; }
  WriteConnection write_connection(PeerIndex) override { return connection; }
  PostResult post_write(PeerIndex peer, const WriteRequest& write) override;
  PostResult post_read(PeerIndex peer, const ReadRequest& read) override;
  void complete_send(void* request, int code) override {
    Req* r = static_cast<Req*>(request);
    ++r->completions;
    r->code = code;
    EXPECT_EQ(r->completions, 1) << "a send completed twice";
  }
  void complete_recv(void* request, int code, std::uint64_t length) override {
    Req* r = static_cast<Req*>(request);
    ++r->completions;
    r->code = code;
    r->length = length;
    EXPECT_EQ(r->completions, 1) << "a receive completed twice";
  }

  // Knobs.
  std::size_t frag_cap = 1000;
  WriteConnection connection = WriteConnection::kReady;
  std::uint32_t write_room = 1u << 30;   // send-queue room for writes (posted, not retired)
  std::uint32_t ctrl_budget = 1u << 30;  // control posts accepted before kNoResource
  bool ctrl_fail = false;                // control posts fail (peer unreachable)

  // Accounting of writes posted and not yet retired (a signalled completion retires those
  // before it, as SendQueue does).
  std::uint32_t outstanding_writes = 0;
  std::uint32_t unsignaled_done = 0;
  bool qp_error = false;
  std::uint32_t cts_posted = 0;
  std::uint32_t fins_posted = 0;
  std::uint32_t fragments_posted = 0;
  std::uint32_t reads_posted = 0;

  FakeState fake;

 private:
  PostResult ctrl_post();
  Net& net_;
  std::uint32_t id_;
  RegCache cache_;

 public:
  Engine engine;
};

struct CtrlMsg {
  enum Kind { kCts, kFin, kData } kind;
  protocol::CtsBody cts{};
  protocol::FinBody fin{};
  protocol::DataBody data{};
  std::vector<std::byte> bytes;
};

// An RDMA write, or an RDMA read (the receiver's read share): both go through the poster's
// send queue to the peer, in order, and share its room.
struct Write {
  WriteRequest w;
  bool is_read = false;
  ReadRequest r;
};

CtrlMsg make_msg(CtrlMsg::Kind kind, const protocol::CtsBody& cts, const protocol::FinBody& fin,
                 const protocol::DataBody& data) {
  CtrlMsg m;
  m.kind = kind;
  m.cts = cts;
  m.fin = fin;
  m.data = data;
  return m;
}

class Net {
 public:
  explicit Net(std::uint32_t nodes, const EngineConfig& config = {}, std::uint32_t seed = 1)
      : rng_(seed), n_(nodes) {
    for (std::uint32_t i = 0; i < nodes; ++i) {
      nodes_.push_back(std::make_unique<Node>(*this, i, config));
    }
    ctrl_.resize(std::size_t{nodes} * nodes);
    writes_.resize(std::size_t{nodes} * nodes);
  }
  Node& operator[](std::uint32_t i) { return *nodes_[i]; }

  std::deque<CtrlMsg>& ctrl(std::uint32_t from, std::uint32_t to) { return ctrl_[from * n_ + to]; }
  std::deque<Write>& writes(std::uint32_t from, std::uint32_t to) {
    return writes_[from * n_ + to];
  }

  // Sender `from` starts a send to `to`: the RTS is delivered (and matched) by the test.
  std::uint32_t send(std::uint32_t from, std::uint32_t to, Req& req, const void* buf,
                     std::uint64_t len, protocol::RtsBody* rts) {
    const std::uint32_t w = (*this)[from].engine.begin_send(to, &req, buf, len, rts);
    EXPECT_NE(w, kNoTransfer);
    return w;
  }

  // Advances one randomly chosen FIFO by one item and runs every engine's progress().
  // Returns false when nothing was left to do.
  bool step();
  // Steps until quiet (or `limit` steps: a hang is a failure).
  void run(std::size_t limit = 10'000'000) {
    std::size_t i = 0;
    while (step()) {
      ASSERT_LT(++i, limit) << "the protocol did not settle";
    }
  }

  std::uint32_t size() const { return n_; }

 private:
  void execute_write(std::uint32_t from, std::uint32_t to);
  void execute_read(std::uint32_t from, std::uint32_t to, const ReadRequest& r);
  void deliver(std::uint32_t from, std::uint32_t to);

  std::mt19937 rng_;
  std::uint32_t n_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::deque<CtrlMsg>> ctrl_;
  std::vector<std::deque<Write>> writes_;
};

// --- Node: the transport hooks ----------------------------------------------------------------

PostResult Node::ctrl_post() {
  if (ctrl_fail) {
    return PostResult::kFailed;
  }
  if (ctrl_budget == 0) {
    return PostResult::kNoResource;
  }
  --ctrl_budget;
  return PostResult::kPosted;
}

PostResult Node::post_cts(PeerIndex peer, const protocol::CtsBody& body) {
  const PostResult r = ctrl_post();
  if (r == PostResult::kPosted) {
    net_.ctrl(id_, peer).push_back(make_msg(CtrlMsg::kCts, body, {}, {}));
    ++cts_posted;
  }
  return r;
}

PostResult Node::post_fin(PeerIndex peer, const protocol::FinBody& body) {
  const PostResult r = ctrl_post();
  if (r == PostResult::kPosted) {
    net_.ctrl(id_, peer).push_back(make_msg(CtrlMsg::kFin, {}, body, {}));
    ++fins_posted;
  }
  return r;
}

PostResult Node::post_fragment(PeerIndex peer, const protocol::DataBody& body, const void* data,
                               std::size_t length) {
  EXPECT_LE(length, frag_cap);
  const PostResult r = ctrl_post();
  if (r == PostResult::kPosted) {
    CtrlMsg m = make_msg(CtrlMsg::kData, {}, {}, body);
    m.bytes.resize(length);
    if (length != 0) {
      std::memcpy(m.bytes.data(), data, length);  // the copy a bounce buffer makes
    }
    net_.ctrl(id_, peer).push_back(std::move(m));
    ++fragments_posted;
  }
  return r;
}

PostResult Node::post_write(PeerIndex peer, const WriteRequest& write) {
  if (qp_error) {
    return PostResult::kFailed;
  }
  if (outstanding_writes >= write_room) {
    return PostResult::kNoResource;
  }
  ++outstanding_writes;
  // Like SendQueue: the WR that fills the queue is signalled, so that a full queue always
  // produces a completion that makes room again.
  Write w{.w = write, .is_read = false, .r = {}};
  w.w.signaled = w.w.signaled || outstanding_writes >= write_room;
  net_.writes(id_, peer).push_back(w);
  return PostResult::kPosted;
}

PostResult Node::post_read(PeerIndex peer, const ReadRequest& read) {
  if (qp_error) {
    return PostResult::kFailed;
  }
  if (outstanding_writes >= write_room) {
    return PostResult::kNoResource;
  }
  ++outstanding_writes;
  Write w{.w = {}, .is_read = true, .r = read};
  w.r.signaled = w.r.signaled || outstanding_writes >= write_room;
  ++reads_posted;
  net_.writes(id_, peer).push_back(w);
  return PostResult::kPosted;
}

// --- Net: moving things ---------------------------------------------------------------------

// A registration of `fake` whose key is `key` (lkey, or rkey with the top bit) covering
// [addr, addr + len), with `access` rights.
bool covered(const FakeState& fake, std::uint32_t key, bool rkey, std::uintptr_t addr,
             std::uint64_t len, int access) {
  const auto it = fake.live.find(rkey ? key & 0x7fffffffu : key);
  if (it == fake.live.end() || (rkey && (key & 0x80000000u) == 0)) {
    return false;
  }
  const test::FakeRegion& r = it->second;
  return addr >= r.start && addr + len <= r.end && (r.access & access) == access;
}

void Net::execute_read(std::uint32_t from, std::uint32_t to, const ReadRequest& r) {
  Node& reader = *nodes_[from];
  Node& owner = *nodes_[to];
  bool ok = !reader.qp_error;
  if (ok) {
    const auto local = reinterpret_cast<std::uintptr_t>(r.local_addr);
    ok = covered(reader.fake, r.lkey, false, local, r.length, IBV_ACCESS_LOCAL_WRITE) &&
         covered(owner.fake, r.rkey, true, r.remote_addr, r.length, IBV_ACCESS_REMOTE_READ);
    EXPECT_TRUE(ok) << "read with keys that do not cover it";
    if (ok) {
      std::memcpy(r.local_addr, reinterpret_cast<const void*>(r.remote_addr), r.length);
    }
  }
  if (!ok) {
    reader.qp_error = true;
  }
  if (r.signaled || !ok) {
    reader.outstanding_writes -= reader.unsignaled_done + 1;
    reader.unsignaled_done = 0;
    reader.engine.on_read_completion(r.token, ok);
  } else {
    ++reader.unsignaled_done;
  }
}

void Net::execute_write(std::uint32_t from, std::uint32_t to) {
  Node& src = *nodes_[from];
  Node& dst = *nodes_[to];
  const Write item = writes(from, to).front();
  writes(from, to).pop_front();
  if (item.is_read) {
    execute_read(from, to, item.r);
    return;
  }
  const WriteRequest w = item.w;
  bool ok = !src.qp_error;
  if (ok && w.length != 0) {
    const auto local = reinterpret_cast<std::uintptr_t>(w.local_addr);
    ok = covered(src.fake, w.lkey, false, local, w.length, 0) &&
         covered(dst.fake, w.rkey, true, w.remote_addr, w.length, IBV_ACCESS_REMOTE_WRITE);
    EXPECT_TRUE(ok) << "write with keys that do not cover it";
    if (ok) {
      std::memcpy(reinterpret_cast<void*>(w.remote_addr), w.local_addr, w.length);
    }
  }
  if (!ok) {
    src.qp_error = true;  // the QP goes to ERR: this and every later write complete in error
  }
  if (ok && w.with_imm) {
    dst.engine.on_imm(w.imm);
  }
  if (w.signaled || !ok) {
    src.outstanding_writes -= src.unsignaled_done + 1;
    src.unsignaled_done = 0;
    src.engine.on_write_completion(w.token, ok);
  } else {
    ++src.unsignaled_done;
  }
}

void Net::deliver(std::uint32_t from, std::uint32_t to) {
  CtrlMsg m = std::move(ctrl(from, to).front());
  ctrl(from, to).pop_front();
  Engine& e = nodes_[to]->engine;
  switch (m.kind) {
    case CtrlMsg::kCts:
      e.on_cts(from, m.cts);
      break;
    case CtrlMsg::kFin:
      e.on_fin(from, m.fin);
      break;
    case CtrlMsg::kData:
      e.on_fragment(from, m.data, m.bytes.data(), m.bytes.size());
      break;
  }
}

bool Net::step() {
  int work = 0;
  for (auto& n : nodes_) {
    work += n->engine.progress();
  }
  std::vector<std::pair<bool, std::uint32_t>> ready;  // (write?, from * n + to)
  for (std::uint32_t i = 0; i < n_ * n_; ++i) {
    if (!ctrl_[i].empty()) {
      ready.emplace_back(false, i);
    }
    if (!writes_[i].empty()) {
      ready.emplace_back(true, i);
    }
  }
  if (ready.empty()) {
    return work != 0;
  }
  const auto [is_write, i] = ready[rng_() % ready.size()];
  if (is_write) {
    execute_write(i / n_, i % n_);
  } else {
    deliver(i / n_, i % n_);
  }
  return true;
}

// --- helpers --------------------------------------------------------------------------------

std::vector<std::byte> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

constexpr std::byte kGuard{0xee};

// A receive buffer of `capacity` bytes starting `misalign` bytes into an allocation, with guard
// bytes on both sides.
struct RecvBuf {
  RecvBuf(std::size_t capacity, std::size_t misalign)
      : storage(capacity + misalign + 64, kGuard), data(storage.data() + misalign), cap(capacity) {}
  std::vector<std::byte> storage;
  std::byte* data;
  std::size_t cap;
  bool guards_intact() const {
    const std::size_t lead = static_cast<std::size_t>(data - storage.data());
    for (std::size_t i = 0; i < lead; ++i) {
      if (storage[i] != kGuard) return false;
    }
    for (std::size_t i = lead + cap; i < storage.size(); ++i) {
      if (storage[i] != kGuard) return false;
    }
    return true;
  }
};

struct Transfer {
  std::vector<std::byte> src;
  std::size_t src_offset = 0;
  std::unique_ptr<RecvBuf> dst;
  Req send, recv;
  protocol::RtsBody rts{};
};

// One transfer from node 0 to node 1: begin, match (the RTS arriving), run to completion.
void one_transfer(Net& net, Transfer& t, std::size_t len, std::size_t capacity,
                  std::size_t src_misalign = 0, std::size_t dst_misalign = 0) {
  t.src = pattern(len + src_misalign, static_cast<std::uint32_t>(len));
  t.src_offset = src_misalign;
  t.dst = std::make_unique<RecvBuf>(capacity, dst_misalign);
  net.send(0, 1, t.send, t.src.data() + src_misalign, len, &t.rts);
  EXPECT_EQ(t.rts.total_length, len);
  net[1].engine.on_rts_matched(0, &t.recv, t.dst->data, capacity, t.rts);
  net.run();
}

// A transfer of `len` bytes (pattern `seed`) from node `from` to node `to` into a buffer of the
// same size, begun and matched (the RTS arriving); nothing has moved yet.
void start_transfer(Net& net, Transfer& t, std::size_t len, std::uint32_t seed,
                    std::uint32_t from = 0, std::uint32_t to = 1) {
  t.src = pattern(len, seed);
  t.dst = std::make_unique<RecvBuf>(len, 0);
  net.send(from, to, t.send, t.src.data(), len, &t.rts);
  net[to].engine.on_rts_matched(from, &t.recv, t.dst->data, len, t.rts);
}

void expect_delivered(const Transfer& t, std::size_t len) {
  const std::size_t n = std::min(len, t.dst->cap);
  EXPECT_EQ(std::memcmp(t.dst->data, t.src.data() + t.src_offset, n), 0) << "contents differ";
  EXPECT_TRUE(t.dst->guards_intact()) << "bytes written outside the receive buffer";
  EXPECT_EQ(t.send.completions, 1);
  EXPECT_EQ(t.recv.completions, 1);
  EXPECT_EQ(t.send.code, RDMX_OK);
  EXPECT_EQ(t.recv.code, len > t.dst->cap ? RDMX_ERR_TRUNCATED : RDMX_OK);
  EXPECT_EQ(t.recv.length, len) << "the status carries the true length";
}

// Both sides completed once with RDMX_ERR_IO (a FIN told the other one), every write or read
// that node `poster` posted came back, and neither engine holds the transfer any more.
void expect_failed_on_both_sides(Net& net, const Transfer& t, std::uint32_t poster) {
  EXPECT_EQ(t.send.completions, 1);
  EXPECT_EQ(t.send.code, RDMX_ERR_IO);
  EXPECT_EQ(t.recv.completions, 1);
  EXPECT_EQ(t.recv.code, RDMX_ERR_IO);
  EXPECT_EQ(net[poster].outstanding_writes, 0u) << "every posted write or read came back";
  EXPECT_EQ(net[0].engine.stats().send_active, 0u);
  EXPECT_EQ(net[1].engine.stats().recv_active, 0u);
}

// Node 0 sends 9000 bytes to node 1 and gets, instead of node 1's CTS, one granting
// `granted_length` bytes from `offset` with `flags`: the completion code of the send.
int send_code_after_cts(Net& net, std::uint64_t offset, std::uint64_t granted_length,
                        std::uint32_t flags) {
  Req send;
  std::vector<std::byte> src = pattern(9000, 9);
  protocol::RtsBody rts{};
  net.send(0, 1, send, src.data(), src.size(), &rts);
  net[0].engine.on_cts(1, protocol::CtsBody{.remote_addr = 0,
                                            .offset = offset,
                                            .granted_length = granted_length,
                                            .rkey = 0,
                                            .sender_slot = rts.sender_slot,
                                            .receiver_slot = 0x00100000,
                                            .flags = flags});
  return send.code;
}

EngineConfig small_writes(std::uint32_t max_write, std::uint32_t depth = 4) {
  EngineConfig c;
  c.max_write = max_write;
  c.pipeline_depth = depth;
  return c;
}

// --- tests ----------------------------------------------------------------------------------

TEST(Engine, SizesAroundTheWriteLimitArriveIntactByZeroCopy) {
  // max_write 4096 stands in for rxe's 8 MiB: the same boundaries at a host-friendly scale.
  for (const std::size_t len :
       {1ul, 4095ul, 4096ul, 4097ul, 3 * 4096ul, 1ul << 20, (1ul << 20) + 1}) {
    SCOPED_TRACE("length " + std::to_string(len));
    Net net(2, small_writes(4096), static_cast<std::uint32_t>(len));
    Transfer t;
    one_transfer(net, t, len, len);
    expect_delivered(t, len);
    const EngineStats& s = net[0].engine.stats();
    EXPECT_EQ(s.zero_copy_bytes, len);
    EXPECT_EQ(s.copied_bytes, 0u);
    EXPECT_EQ(s.writes, WritePlan(len, 4096, 4).count());
    EXPECT_EQ(net[0].fragments_posted, 0u);
    EXPECT_EQ(s.send_active, 0u);
    EXPECT_EQ(net[1].engine.stats().recv_active, 0u);
    EXPECT_EQ(net[0].engine.active_with(1), 0u);
    EXPECT_EQ(net[1].engine.active_with(0), 0u);
  }
}

TEST(Engine, RealDeviceLimitEightMiB) {
  for (const std::size_t len : {(8ul << 20) - 1, 8ul << 20, (8ul << 20) + 1}) {
    SCOPED_TRACE("length " + std::to_string(len));
    Net net(2);
    Transfer t;
    one_transfer(net, t, len, len);
    expect_delivered(t, len);
    EXPECT_EQ(net[0].engine.stats().writes, len > (8ul << 20) ? 2u : 1u);
  }
}

TEST(Engine, UnalignedStartAndEnd) {
  for (const std::size_t mis : {1ul, 3ul, 7ul, 4095ul}) {
    SCOPED_TRACE("misalign " + std::to_string(mis));
    Net net(2, small_writes(1000));
    Transfer t;
    const std::size_t len = 3 * 4096 + 5;
    one_transfer(net, t, len, len, mis, (mis * 5) % 4096);
    expect_delivered(t, len);
  }
}

TEST(Engine, TruncationWritesExactlyTheReceiveBuffer) {
  for (const std::size_t cap : {0ul, 1ul, 999ul, 1000ul, 1001ul, 5000ul}) {
    SCOPED_TRACE("capacity " + std::to_string(cap));
    Net net(2, small_writes(1000));
    Transfer t;
    one_transfer(net, t, 10'000, cap);
    expect_delivered(t, 10'000);
    EXPECT_EQ(net[0].engine.stats().zero_copy_bytes, cap) << "only the granted bytes move";
    EXPECT_EQ(net[1].engine.stats().truncated, 1u);
  }
}

TEST(Engine, ReadOnlySendBufferRegistersWithoutWriteRights) {
  Net net(2, small_writes(4096));
  Transfer t;
  t.src = pattern(3 * 4096, 9);
  for (std::size_t p = 0; p < t.src.size(); p += 4096) {
    net[0].fake.readonly_pages.insert((reinterpret_cast<std::uintptr_t>(t.src.data()) + p) &
                                      ~std::uintptr_t{4095});
  }
  t.dst = std::make_unique<RecvBuf>(t.src.size(), 0);
  net.send(0, 1, t.send, t.src.data(), t.src.size(), &t.rts);
  net[1].engine.on_rts_matched(0, &t.recv, t.dst->data, t.dst->cap, t.rts);
  net.run();
  expect_delivered(t, t.src.size());
  EXPECT_EQ(net[0].engine.stats().reg_failures, 0u);
  EXPECT_EQ(net[0].engine.stats().zero_copy_bytes, t.src.size());
}

TEST(Engine, ReceiverRegistrationFailureFallsBackToCopies) {
  Net net(2, small_writes(4096));
  net[1].fake.budget_bytes = 4096;  // the receiver's `ulimit -l`
  net[0].frag_cap = 777;
  Transfer t;
  one_transfer(net, t, 100'000, 100'000, 3, 5);
  expect_delivered(t, 100'000);
  const EngineStats& s = net[0].engine.stats();
  EXPECT_EQ(s.zero_copy_bytes, 0u);
  EXPECT_EQ(s.copied_bytes, 100'000u);
  EXPECT_EQ(s.copy_sends, 1u);
  EXPECT_EQ(s.writes, 0u);
  EXPECT_EQ(net[0].fragments_posted, (100'000 + 776) / 777);
  EXPECT_EQ(net[1].engine.stats().reg_failures, 1u);
}

TEST(Engine, SenderRegistrationFailureFallsBackToCopies) {
  Net net(2, small_writes(4096));
  net[0].fake.budget_bytes = 0;
  Transfer t;
  one_transfer(net, t, 50'000, 60'000);
  expect_delivered(t, 50'000);
  EXPECT_EQ(net[0].engine.stats().reg_failures, 1u);
  EXPECT_EQ(net[0].engine.stats().copied_bytes, 50'000u);
  EXPECT_EQ(net[1].engine.stats().reg_failures, 0u);
}

TEST(Engine, SenderCopyPathSendsOneFragmentForAnEmptyGrant) {
  Net net(2, small_writes(4096));
  net[0].fake.budget_bytes = 0;  // the sender cannot register: copy path
  net[0].connection = WriteConnection::kUnavailable;
  Transfer t;
  one_transfer(net, t, 10'000, 0);
  expect_delivered(t, 10'000);
  EXPECT_EQ(net[0].fragments_posted, 1u) << "an empty grant still sends one (empty) fragment";
  EXPECT_EQ(net[0].engine.stats().writes, 0u);
}

TEST(Engine, CopyPathWithTruncationAndEmptyGrant) {
  for (const std::size_t cap : {0ul, 1ul, 2500ul}) {
    SCOPED_TRACE("capacity " + std::to_string(cap));
    Net net(2, small_writes(4096));
    net[1].fake.budget_bytes = 0;
    Transfer t;
    one_transfer(net, t, 10'000, cap);
    expect_delivered(t, 10'000);
    EXPECT_EQ(net[0].engine.stats().copied_bytes, cap);
    if (cap == 0) {
      // Nothing to register: a zero-length write-with-imm completes the receiver.
      EXPECT_EQ(net[0].engine.stats().writes, 1u);
    } else {
      EXPECT_GE(net[0].fragments_posted, 1u);
    }
  }
}

TEST(Engine, PipelineRespectsSendQueueRoomAndResumesFromProgress) {
  Net net(2, small_writes(100, 8));
  net[0].write_room = 3;  // fewer than the pipeline depth
  Transfer t;
  one_transfer(net, t, 10'000, 10'000);
  expect_delivered(t, 10'000);
  EXPECT_EQ(net[0].engine.stats().writes, 100u);
}

TEST(Engine, CtsWaitsForResourcesThenGoes) {
  Net net(2, small_writes(4096));
  net[1].ctrl_budget = 0;
  Transfer t;
  start_transfer(net, t, 20'000, 1);
  EXPECT_TRUE(net[1].engine.has_pending());
  for (int i = 0; i < 10; ++i) {
    (void)net.step();
  }
  EXPECT_EQ(net[1].cts_posted, 0u);
  EXPECT_EQ(t.send.completions + t.recv.completions, 0);
  net[1].ctrl_budget = 1u << 30;
  net.run();
  expect_delivered(t, 20'000);
}

TEST(Engine, ConnectionSetUpDelaysWritesThenTheyGo) {
  Net net(2, small_writes(4096));
  net[0].connection = WriteConnection::kConnecting;
  Transfer t;
  start_transfer(net, t, 30'000, 2);
  net.run();
  EXPECT_EQ(net[0].engine.stats().writes, 0u) << "no write before the connection is up";
  EXPECT_EQ(net[0].engine.active_with(1), 1u);
  net[0].connection = WriteConnection::kReady;
  net[0].engine.on_connection_ready(1);
  net.run();
  expect_delivered(t, 30'000);
  EXPECT_EQ(net[0].engine.stats().zero_copy_bytes, 30'000u);
}

TEST(Engine, NoConnectionMeansCopyPath) {
  for (const bool fail_later : {false, true}) {
    Net net(2, small_writes(4096));
    net[0].connection = fail_later ? WriteConnection::kConnecting : WriteConnection::kUnavailable;
    Transfer t;
    start_transfer(net, t, 30'000, 3);
    net.run();
    if (fail_later) {
      net[0].engine.on_connection_failed(1);
      net.run();
    }
    expect_delivered(t, 30'000);
    EXPECT_EQ(net[0].engine.stats().copied_bytes, 30'000u);
  }
}

TEST(Engine, WriteErrorFailsBothSidesAfterTheWritesDrain) {
  Net net(2, small_writes(100, 8));
  Transfer t;
  start_transfer(net, t, 10'000, 4);
  // Deliver the CTS, then break the QP before the writes execute.
  while (net.ctrl(1, 0).empty()) {
    ASSERT_TRUE(net.step());
  }
  (void)net.step();
  while (!net.ctrl(1, 0).empty()) {
    (void)net.step();
  }
  ASSERT_GT(net.writes(0, 1).size(), 1u);
  net[0].qp_error = true;
  // The request must not complete while writes may still read the buffer.
  EXPECT_EQ(t.send.completions, 0);
  net.run();
  expect_failed_on_both_sides(net, t, 0);
}

TEST(Engine, PeerFailureFailsEveryTransferWithThatPeerOnly) {
  Net net(3, small_writes(4096));
  std::vector<Transfer> ts(4);
  // 0 -> 1 twice, 2 -> 1 once, 1 -> 0 once; RTSs matched, nothing moved yet.
  const std::uint32_t from[] = {0, 0, 2, 1};
  const std::uint32_t to[] = {1, 1, 1, 0};
  for (std::size_t i = 0; i < ts.size(); ++i) {
    start_transfer(net, ts[i], 20'000, static_cast<std::uint32_t>(i), from[i], to[i]);
  }
  EXPECT_EQ(net[1].engine.active_with(0), 3u);
  // Node 1 learns that node 0 is dead; node 0 learns the same of node 1.
  net[1].engine.on_peer_failed(0, RDMX_ERR_UNREACHABLE);
  net[0].engine.on_peer_failed(1, RDMX_ERR_UNREACHABLE);
  net.ctrl(0, 1).clear();
  net.ctrl(1, 0).clear();
  net.writes(0, 1).clear();
  net.writes(1, 0).clear();
  for (const int i : {0, 1, 3}) {
    EXPECT_EQ(ts[i].send.code, RDMX_ERR_UNREACHABLE) << i;
    EXPECT_EQ(ts[i].recv.code, RDMX_ERR_UNREACHABLE) << i;
  }
  EXPECT_EQ(net[1].engine.active_with(0), 0u);
  net.run();
  expect_delivered(ts[2], 20'000);  // 2 -> 1 is unaffected
}

TEST(Engine, StaleCtsAndImmediatesAreDroppedAndTheWaitingReceiverIsFailed) {
  Net net(2, small_writes(4096));
  Transfer t;
  t.src = pattern(5000, 5);
  t.dst = std::make_unique<RecvBuf>(5000, 0);
  net.send(0, 1, t.send, t.src.data(), 5000, &t.rts);
  // The sender gives up (e.g. teardown) before the receiver matches.
  net[0].engine.cancel_all(RDMX_ERR_CANCELED);
  EXPECT_EQ(t.send.code, RDMX_ERR_CANCELED);
  net[1].engine.on_rts_matched(0, &t.recv, t.dst->data, 5000, t.rts);
  net.run();
  EXPECT_EQ(t.recv.completions, 1) << "a CTS for a dead send is answered with a FIN";
  EXPECT_EQ(t.recv.code, RDMX_ERR_CANCELED);
  EXPECT_GE(net[0].engine.stats().stale, 1u);
  // Immediates and completions naming nothing live are ignored.
  net[1].engine.on_imm(t.rts.sender_slot);
  net[1].engine.on_imm(0);
  net[0].engine.on_write_completion(Engine::write_token(t.rts.sender_slot, 0), true);
  EXPECT_EQ(t.recv.completions, 1);
  EXPECT_GE(net[1].engine.stats().stale, 2u);
}

TEST(Engine, RtsNotPostedIsAbortedWithoutATrace) {
  Net net(2, small_writes(4096));
  std::vector<std::byte> src = pattern(9000, 6);
  Req send;
  protocol::RtsBody rts{};
  const std::uint32_t w = net[0].engine.begin_send(1, &send, src.data(), src.size(), &rts);
  EXPECT_EQ(net[0].engine.active_with(1), 1u);
  net[0].engine.abort_send(w);
  EXPECT_EQ(net[0].engine.active_with(1), 0u);
  EXPECT_EQ(net[0].engine.stats().sends, 0u);
  EXPECT_EQ(send.completions, 0) << "an aborted send belongs to the caller again";
  // The slot's next user has a new generation: the old word is dead.
  const std::uint32_t w2 = net[0].engine.begin_send(1, &send, src.data(), src.size(), &rts);
  EXPECT_EQ(decode_transfer(w2).slot, decode_transfer(w).slot);
  EXPECT_NE(w2, w);
  net[0].engine.abort_send(w);  // stale: ignored
  EXPECT_EQ(net[0].engine.active_with(1), 1u);
}

TEST(Engine, CancelAllKeepsRegistrationsOfWritesInFlightUntilReleaseAll) {
  Net net(2, small_writes(100, 4));
  Transfer t;
  start_transfer(net, t, 10'000, 7);
  while (net.writes(0, 1).empty()) {
    ASSERT_TRUE(net.step());
  }
  net[0].engine.cancel_all(RDMX_ERR_CANCELED);
  EXPECT_EQ(t.send.completions, 1);
  EXPECT_EQ(t.send.code, RDMX_ERR_CANCELED);
  EXPECT_EQ(net[0].engine.stats().send_active, 1u) << "draining: the device may still read";
  net[0].engine.release_all();
  EXPECT_EQ(net[0].engine.stats().send_active, 0u);
  EXPECT_EQ(t.send.completions, 1) << "no second completion";
  // Late completions of the drained writes are stale.
  net[0].engine.on_write_completion(Engine::write_token(t.rts.sender_slot, 0), false);
  EXPECT_GE(net[0].engine.stats().stale, 1u);
}

TEST(Engine, FinFromTheReceiverFailsTheSender) {
  Net net(2, small_writes(4096));
  Req send;
  std::vector<std::byte> src = pattern(9000, 8);
  protocol::RtsBody rts{};
  net.send(0, 1, send, src.data(), src.size(), &rts);
  net[0].engine.on_fin(1, protocol::FinBody{.sender_slot = rts.sender_slot,
                                            .receiver_slot = 0,
                                            .status = RDMX_ERR_NO_RESOURCE,
                                            .flags = protocol::kFinFlagToSender});
  EXPECT_EQ(send.code, RDMX_ERR_NO_RESOURCE);
  // A FIN from another peer for the same word would have been ignored.
  Req send2;
  net.send(0, 1, send2, src.data(), src.size(), &rts);
  net[0].engine.on_fin(5, protocol::FinBody{.sender_slot = rts.sender_slot,
                                            .receiver_slot = 0,
                                            .status = RDMX_ERR_IO,
                                            .flags = protocol::kFinFlagToSender});
  EXPECT_EQ(send2.completions, 0);
}

TEST(Engine, CtsWithUnknownFlagsFailsBothSides) {
  Net net(2, small_writes(4096));
  EXPECT_EQ(send_code_after_cts(net, 0, 9000, 0x80), RDMX_ERR_IO);
}

// --- the receiver's read share -------------------------------------------------------------

EngineConfig read_share(std::uint32_t percent, std::uint32_t max_write = 4096,
                        std::uint32_t depth = 4) {
  EngineConfig c = small_writes(max_write, depth);
  c.read_percent = percent;
  c.min_read_split = 1000;
  return c;
}

TEST(Engine, ReadShareMovesPartOfTheMessageByReadsAndTheRestByWrites) {
  // Random delivery orders: the write-with-imm before, between and after the reads.
  for (const std::uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    for (const std::size_t len : {1000ul, 4097ul, 50'000ul, 1ul << 20}) {
      for (const std::uint32_t percent : {1u, 50u, 99u}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " length " + std::to_string(len) +
                     " percent " + std::to_string(percent));
        Net net(2, read_share(percent), seed);
        Transfer t;
        one_transfer(net, t, len, len, seed, seed * 3);
        expect_delivered(t, len);
        const std::uint64_t share = len / 100 * percent & ~std::uint64_t{63};
        const EngineStats& r = net[1].engine.stats();
        EXPECT_EQ(r.read_bytes, share);
        EXPECT_EQ(r.reads, share == 0 ? 0u : WritePlan(share, 4096, 4).count());
        EXPECT_EQ(net[0].engine.stats().writes, WritePlan(len - share, 4096, 4).count());
        EXPECT_EQ(net[0].engine.stats().zero_copy_bytes, len);
        EXPECT_EQ(net[0].engine.stats().send_active, 0u);
        EXPECT_EQ(r.recv_active, 0u);
      }
    }
  }
}

TEST(Engine, ReadShareWithTruncationReadsOnlyTheGrantedBytes) {
  Net net(2, read_share(50));
  Transfer t;
  one_transfer(net, t, 100'000, 30'000);
  expect_delivered(t, 100'000);
  EXPECT_EQ(net[1].engine.stats().read_bytes, 15'000u & ~63u);
  EXPECT_EQ(net[1].engine.stats().truncated, 1u);
}

TEST(Engine, ReadShareIsOffBelowTheSplitSizeOrWithoutTheSendersKey) {
  Net net(2, read_share(50));
  Transfer t;
  one_transfer(net, t, 999, 999);
  expect_delivered(t, 999);
  EXPECT_EQ(net[1].engine.stats().reads, 0u);
  // A sender without reads configured offers no key: the receiver then asks for writes only.
  Net mixed(2, read_share(50));
  Transfer u;
  u.src = pattern(20'000, 4);
  u.dst = std::make_unique<RecvBuf>(20'000, 0);
  mixed.send(0, 1, u.send, u.src.data(), 20'000, &u.rts);
  ASSERT_NE(u.rts.rkey, 0u);
  u.rts.rkey = 0;
  mixed[1].engine.on_rts_matched(0, &u.recv, u.dst->data, 20'000, u.rts);
  mixed.run();
  expect_delivered(u, 20'000);
  EXPECT_EQ(mixed[1].engine.stats().reads, 0u);
}

TEST(Engine, ReadShareEachSideWaitsForTheOther) {
  Net net(2, read_share(50));
  net[1].write_room = 0;  // the receiver's reads cannot be posted yet
  Transfer t;
  start_transfer(net, t, 40'000, 11);
  for (int i = 0; i < 2000; ++i) {
    (void)net.step();
  }
  const std::uint64_t share = 20'000 & ~63u;  // half, in whole 64-byte units
  EXPECT_EQ(net[0].engine.stats().writes, WritePlan(40'000 - share, 4096, 4).count())
      << "the sender's share is written";
  EXPECT_EQ(t.send.completions, 0) << "the receiver still has to read the sender's buffer";
  EXPECT_EQ(t.recv.completions, 0) << "the write-with-imm alone does not complete a read share";
  net[1].write_room = 1u << 30;
  net.run();
  expect_delivered(t, 40'000);
  EXPECT_EQ(net[1].engine.stats().read_bytes, share);
}

TEST(Engine, ReadErrorFailsBothSides) {
  for (const bool before_post : {true, false}) {
    SCOPED_TRACE(before_post ? "the QP fails before the reads" : "a read completes in error");
    Net net(2, read_share(50, 1000, 8));
    if (before_post) {
      net[1].qp_error = true;
    }
    Transfer t;
    start_transfer(net, t, 40'000, 12);
    net[1].qp_error = true;
    net.run();
    expect_failed_on_both_sides(net, t, 1);
  }
}

TEST(Engine, PeerFailureWithReadsInFlightHoldsTheReceiveUntilTheyRetire) {
  Net net(2, read_share(50, 1000, 8));
  Transfer t;
  start_transfer(net, t, 40'000, 13);
  ASSERT_GT(net.writes(1, 0).size(), 1u) << "reads posted with the CTS";
  net[1].engine.on_peer_failed(0, RDMX_ERR_UNREACHABLE);
  EXPECT_EQ(t.recv.completions, 0) << "the device may still write into the buffer";
  EXPECT_EQ(net[1].engine.stats().recv_active, 1u);
  net[0].engine.on_peer_failed(1, RDMX_ERR_UNREACHABLE);
  net.ctrl(0, 1).clear();
  net.ctrl(1, 0).clear();
  net.writes(0, 1).clear();
  net[1].qp_error = true;  // the dead connection flushes the reads
  net.run();
  EXPECT_EQ(t.recv.completions, 1);
  EXPECT_EQ(t.recv.code, RDMX_ERR_UNREACHABLE);
  EXPECT_EQ(net[1].engine.stats().recv_active, 0u);
}

TEST(Engine, CancelAllKeepsRegistrationsOfReadsInFlightUntilReleaseAll) {
  Net net(2, read_share(50, 1000, 8));
  Transfer t;
  start_transfer(net, t, 40'000, 14);
  ASSERT_FALSE(net.writes(1, 0).empty());
  net[1].engine.cancel_all(RDMX_ERR_CANCELED);
  EXPECT_EQ(t.recv.completions, 1);
  EXPECT_EQ(t.recv.code, RDMX_ERR_CANCELED);
  EXPECT_EQ(net[1].engine.stats().recv_active, 1u) << "draining: the device may still write";
  net[1].engine.release_all();
  EXPECT_EQ(net[1].engine.stats().recv_active, 0u);
  EXPECT_EQ(t.recv.completions, 1) << "no second completion";
}

TEST(Engine, ReadCtsThatBreaksTheRulesFailsTheSend) {
  for (const std::uint64_t offset : {0ul, 9000ul, 20'000ul}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    Net net(2, read_share(50));
    EXPECT_EQ(send_code_after_cts(net, offset, 100, protocol::kCtsFlagRead), RDMX_ERR_IO);
  }
}

TEST(Engine, ManyConcurrentTransfersFromSeveralPeersInRandomOrder) {
  for (const std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Net net(4, small_writes(512, 4), seed);
    net[1].write_room = 5;
    net[2].fake.budget_bytes = 64 * 1024;  // node 2 falls back to copies once pinned out
    net[3].ctrl_budget = 1u << 30;
    std::vector<Transfer> ts(60);
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const auto from = static_cast<std::uint32_t>(i % 4);
      const auto to = static_cast<std::uint32_t>((from + 1 + rng() % 3) % 4);
      const std::size_t len = 1 + rng() % 20'000;
      const std::size_t cap = (i % 7 == 0) ? len / 2 : len + rng() % 100;
      ts[i].src = pattern(len + i % 5, static_cast<std::uint32_t>(i));
      ts[i].src_offset = i % 5;
      ts[i].dst = std::make_unique<RecvBuf>(cap, i % 3);
      net.send(from, to, ts[i].send, ts[i].src.data() + ts[i].src_offset, len, &ts[i].rts);
      net[to].engine.on_rts_matched(from, &ts[i].recv, ts[i].dst->data, cap, ts[i].rts);
      // Interleave: let the network run a little between posts.
      for (auto k = rng() % 20; k > 0; --k) {
        (void)net.step();
      }
    }
    net.run();
    std::uint64_t moved = 0;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      SCOPED_TRACE("transfer " + std::to_string(i));
      expect_delivered(ts[i], ts[i].rts.total_length);
      moved += std::min<std::uint64_t>(ts[i].rts.total_length, ts[i].dst->cap);
    }
    std::uint64_t zero = 0;
    std::uint64_t copied = 0;
    for (std::uint32_t n = 0; n < 4; ++n) {
      zero += net[n].engine.stats().zero_copy_bytes;
      copied += net[n].engine.stats().copied_bytes;
      EXPECT_EQ(net[n].engine.stats().send_active + net[n].engine.stats().recv_active, 0u);
      EXPECT_EQ(net[n].outstanding_writes, 0u);
    }
    EXPECT_EQ(zero + copied, moved);
    EXPECT_GT(zero, 0u);
  }
}

TEST(Engine, VerboseLogShowsEachTransitionOfBothSides) {
  std::vector<std::string> lines;
  EngineConfig c = small_writes(4096);
  c.log = TransitionLog{.verbose = 2,
                        .sink =
                            [](void* u, std::string_view l) {
                              static_cast<std::vector<std::string>*>(u)->emplace_back(l);
                            },
                        .user = &lines};
  Net net(2, c);
  Transfer t;
  one_transfer(net, t, 5000, 5000);
  expect_delivered(t, 5000);
  std::string all;
  for (const auto& l : lines) {
    all += l + "\n";
    EXPECT_EQ(l.find("refused"), std::string::npos) << l;
  }
  for (const char* want : {"free -> wait_cts", "wait_cts -> writing", "writing -> done",
                           "done -> free", "free -> wait_data", "wait_data -> done"}) {
    EXPECT_NE(all.find(want), std::string::npos) << want << " missing in\n" << all;
  }
}

}  // namespace
}  // namespace rdmx::rendezvous
