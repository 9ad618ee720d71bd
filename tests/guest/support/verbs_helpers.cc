#include "tests/guest/support/verbs_helpers.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "tests/guest/support/guest_env.h"
#include "verbs/error.h"

namespace rdmx::test {

TestDevice TestDevice::open() {
  const std::vector<std::string> devs = test_devices();
  TestDevice d{verbs::Context::open(devs.empty() ? std::string() : devs.front())};
  d.port = d.ctx.first_active_port();
  if (d.port == 0) {
    throw std::runtime_error(d.ctx.name() + " has no active port");
  }
  d.gid_index = verbs::find_gid_index(d.ctx, d.port);
  d.gid = verbs::query_gid(d.ctx, d.port, d.gid_index);
  d.mtu = d.ctx.query_port(d.port).active_mtu;
  return d;
}

Buffer::Buffer(const verbs::ProtectionDomain& pd, std::size_t size, int access)
    : bytes(size, 0), mr(verbs::MemoryRegion::create(pd, bytes.data(), size, access)) {}

QpPair::QpPair(const TestDevice& dev, const verbs::ProtectionDomain& pd, ibv_qp_type type,
               int cq_depth, const verbs::QpCaps& caps, verbs::CompletionChannel* b_channel)
    : cq_a(verbs::CompletionQueue::create(dev.ctx, cq_depth)),
      cq_b(verbs::CompletionQueue::create(dev.ctx, cq_depth, b_channel)),
      a(verbs::QueuePair::create(
          pd, verbs::QpConfig{.type = type, .send_cq = &cq_a, .recv_cq = &cq_a, .caps = caps})),
      b(verbs::QueuePair::create(
          pd, verbs::QpConfig{.type = type, .send_cq = &cq_b, .recv_cq = &cq_b, .caps = caps})) {}

verbs::AddressHandle loopback_ah(const verbs::ProtectionDomain& pd, const TestDevice& dev) {
  return verbs::AddressHandle::create(
      pd, verbs::AhAttr{.dgid = dev.gid,
                        .sgid_index = static_cast<std::uint8_t>(dev.gid_index),
                        .port_num = dev.port});
}

ibv_qp* create_raw_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, ibv_srq* srq) {
  ibv_qp_init_attr qattr{};
  qattr.send_cq = cq;
  qattr.recv_cq = cq;
  qattr.srq = srq;
  qattr.qp_type = type;
  qattr.cap.max_send_wr = 4;
  qattr.cap.max_send_sge = 1;
  if (srq == nullptr) {
    qattr.cap.max_recv_wr = 4;
    qattr.cap.max_recv_sge = 1;
  }
  return ibv_create_qp(pd, &qattr);
}

namespace {

verbs::RcRtrAttr rtr_to(const TestDevice& dev, const verbs::QueuePair& peer, std::uint32_t psn,
                        const RcOptions& o) {
  return verbs::RcRtrAttr{
      .remote = {.qpn = peer.qp_num(), .psn = psn, .gid = dev.gid, .lid = 0},
      .path_mtu = dev.mtu,
      .sgid_index = static_cast<std::uint8_t>(dev.gid_index),
      .min_rnr_timer = o.min_rnr_timer,
      .max_dest_rd_atomic = 1,
      .port_num = dev.port,
  };
}

}  // namespace

void connect_rc_pair(const TestDevice& dev, verbs::QueuePair& a, verbs::QueuePair& b,
                     const RcOptions& a_opts, const RcOptions& b_opts) {
  constexpr std::uint32_t kPsnA = 0x1000;
  constexpr std::uint32_t kPsnB = 0x2000;
  a.to_init(verbs::RcInitAttr{.port_num = dev.port});
  b.to_init(verbs::RcInitAttr{.port_num = dev.port});
  a.to_rtr(rtr_to(dev, b, kPsnB, a_opts));
  b.to_rtr(rtr_to(dev, a, kPsnA, b_opts));
  a.to_rts(verbs::RcRtsAttr{.sq_psn = kPsnA,
                            .timeout = a_opts.timeout,
                            .retry_cnt = a_opts.retry_cnt,
                            .max_rd_atomic = 1,
                            .rnr_retry = a_opts.rnr_retry});
  b.to_rts(verbs::RcRtsAttr{.sq_psn = kPsnB,
                            .timeout = b_opts.timeout,
                            .retry_cnt = b_opts.retry_cnt,
                            .max_rd_atomic = 1,
                            .rnr_retry = b_opts.rnr_retry});
}

void activate_ud(verbs::QueuePair& qp, const TestDevice& dev) {
  qp.to_init(verbs::UdInitAttr{.qkey = kTestQkey, .port_num = dev.port});
  qp.to_rtr();
  qp.to_rts(verbs::UdRtsAttr{.sq_psn = 0});
}

void activate_ud(QpPair& pair, const TestDevice& dev) {
  activate_ud(pair.a, dev);
  activate_ud(pair.b, dev);
}

std::vector<ibv_wc> poll_n(ibv_cq* cq, std::size_t n, std::chrono::milliseconds timeout) {
  std::vector<ibv_wc> out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<ibv_wc, 16> wcs{};
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    const int got = ibv_poll_cq(cq, static_cast<int>(wcs.size()), wcs.data());
    if (got < 0) {
      throw std::runtime_error("ibv_poll_cq failed");
    }
    out.insert(out.end(), wcs.begin(), wcs.begin() + got);
    if (got == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return out;
}

std::vector<ibv_wc> poll_all(ibv_cq* cq) {
  std::vector<ibv_wc> out;
  std::array<ibv_wc, 16> wcs{};
  for (;;) {
    const int got = ibv_poll_cq(cq, static_cast<int>(wcs.size()), wcs.data());
    if (got < 0) {
      throw std::runtime_error("ibv_poll_cq failed");
    }
    if (got == 0) {
      return out;
    }
    out.insert(out.end(), wcs.begin(), wcs.begin() + got);
  }
}

void post_send(verbs::QueuePair& qp, Buffer& buf, std::size_t offset, std::uint32_t length,
               std::uint64_t wr_id, ibv_ah* ah, std::uint32_t remote_qpn) {
  ibv_sge sge = buf.sge(offset, length);
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ah != nullptr) {
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = remote_qpn;
    wr.wr.ud.remote_qkey = kTestQkey;
  }
  const verbs::ChainPostResult r = qp.post_send(&wr);
  if (!r) {
    throw verbs::Error("ibv_post_send", r.error, "test send wr_id " + std::to_string(wr_id));
  }
}

std::string wc_status(const ibv_wc& wc) {
  return std::string(ibv_wc_status_str(wc.status)) + " (" + std::to_string(wc.status) + ")";
}

}  // namespace rdmx::test

namespace rdmx::test {

RecvChain make_recv_chain(Buffer& buf, std::size_t n, std::uint32_t slot_bytes,
                          std::uint64_t first_wr_id) {
  RecvChain c;
  c.sges.reserve(n);
  c.wrs.reserve(n);  // no reallocation after linking
  for (std::size_t i = 0; i < n; ++i) {
    c.sges.push_back(buf.sge((i * slot_bytes) % buf.bytes.size(), slot_bytes));
    c.wrs.push_back(ibv_recv_wr{
        .wr_id = first_wr_id + i, .next = nullptr, .sg_list = &c.sges.back(), .num_sge = 1});
  }
  for (std::size_t i = 0; i + 1 < n; ++i) {
    c.wrs[i].next = &c.wrs[i + 1];
  }
  return c;
}

SrqRig::SrqRig(const TestDevice& dev, const verbs::ProtectionDomain& pd, std::uint32_t srq_wr,
               std::uint32_t slots, std::uint8_t sender_rnr_retry)
    : send_cq(verbs::CompletionQueue::create(dev.ctx, 256)),
      recv_cq(verbs::CompletionQueue::create(dev.ctx, 256)),
      srq(verbs::SharedReceiveQueue::create(pd, srq_wr)),
      sender(verbs::QueuePair::create(
          pd, verbs::QpConfig{.type = IBV_QPT_RC,
                              .send_cq = &send_cq,
                              .recv_cq = &send_cq,
                              .caps = {.max_send_wr = 128, .max_recv_wr = 1}})),
      receiver(verbs::QueuePair::create(pd, verbs::QpConfig{.type = IBV_QPT_RC,
                                                            .send_cq = &recv_cq,
                                                            .recv_cq = &recv_cq,
                                                            .srq = &srq,
                                                            .caps = {.max_send_wr = 4}})),
      sbuf(pd, std::size_t{64} * 128),
      rbuf(pd, std::size_t{slots} * kSlotBytes) {
  connect_rc_pair(dev, sender, receiver, RcOptions{.rnr_retry = sender_rnr_retry}, RcOptions{});
}

void SrqRig::send(std::size_t n, std::uint64_t first_wr_id) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t id = first_wr_id + i;
    const std::size_t off = (i % 128) * 64;
    std::memcpy(sbuf.at(off), &id, sizeof(id));
    post_send(sender, sbuf, off, 64, id);
  }
}

void SrqRig::expect_srq_empty() {
  send(1, 0xE0F);
  const auto wcs = poll_n(send_cq.get(), 1);
  ASSERT_EQ(wcs.size(), 1u) << "the probe send never completed";
  EXPECT_EQ(wcs[0].wr_id, 0xE0Fu);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR)
      << "the SRQ still had a receive posted: " << wc_status(wcs[0]);
  EXPECT_TRUE(poll_all(recv_cq.get()).empty()) << "a receive beyond the posted ones completed";
}

}  // namespace rdmx::test
