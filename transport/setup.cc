// Worker bring-up, one step per resource in creation order: the port and its GID, the sizes
// (fitted to the locked-memory limit), the worker's names, the PD, CQs and receive pools, the
// posting threads' send resources, the UD QPs, the address peers connect to. teardown.cc undoes
// them in reverse. A step that throws leaves only whole objects behind, so teardown() can run
// after any of them.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "transport/channel/rc_channel.h"
#include "transport/channel/ud_channel.h"
#include "transport/worker.h"
#include "verbs/error.h"
#include "verbs/mr.h"

namespace rdmx::transport {

namespace {

std::atomic<std::uint32_t> g_worker_counter{0};

std::uint32_t mtu_bytes(ibv_mtu mtu) {
  return 128u << static_cast<unsigned>(mtu);
}

const char* link_layer_name(std::uint8_t ll) {
  return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

// Thrown for setup failures that are not a failed verb: carries the rdmx code.
struct SetupError {
  int code;
  std::string message;
};

// The rdmx code and the fix for a verbs failure during setup.
int code_for(const verbs::Error& e, std::string* fix) {
  switch (e.errnum()) {
    case ENOSYS:
      *fix = "this kernel has no RDMA support: run under ci/softroce/run or load rdma_rxe";
      return RDMX_ERR_NO_DEVICE;
    case ENODEV:
      *fix = "check `ibv_devices`; set RDMX_DEVICE to one of them";
      return RDMX_ERR_NO_DEVICE;
    case ENOENT:
      *fix = "set RDMX_GID_INDEX (see `ibv_devinfo -v` or /sys/class/infiniband/DEV/ports/N/gids)";
      return RDMX_ERR_NO_DEVICE;
    case ENOMEM:
    case EPERM:
      *fix = "raise the locked-memory limit (`ulimit -l unlimited`) or lower RDMX_SRQ_DEPTH";
      return RDMX_ERR_NO_MEMORY;
    case EINVAL:
      *fix = "a queue size exceeds a device limit: lower RDMX_SRQ_DEPTH / buffer sizes";
      return RDMX_ERR_UNSUPPORTED;
    default:
      *fix = "RDMX_VERBOSE=2 shows the configuration used";
      return RDMX_ERR_IO;
  }
}

std::string kib(std::size_t bytes) {
  return std::to_string((bytes + 1023) / 1024) + " KiB";
}

}  // namespace

int Worker::create(const rdmx_config_t& config, Worker** out) {
  std::unique_ptr<Worker> w(new (std::nothrow) Worker(config));
  if (!w) {
    return RDMX_ERR_NO_MEMORY;
  }
  try {
    w->setup();
  } catch (const SetupError& e) {
    std::fprintf(stderr, "rdmx: worker creation failed: %s\n", e.message.c_str());
    return e.code;
  } catch (const verbs::Error& e) {
    std::string fix;
    const int code = code_for(e, &fix);
    std::fprintf(stderr, "rdmx: worker creation failed on %s: %s; fix: %s\n",
                 w->device_name_.empty() ? "(first active device)" : w->device_name_.c_str(),
                 e.what(), fix.c_str());
    return code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rdmx: worker creation failed: out of memory\n");
    return RDMX_ERR_NO_MEMORY;
  }
  if (w->multi_) {
    register_multi(w.get());
  }
  *out = w.release();
  return RDMX_OK;
}

eager::SrqPool::Params Worker::data_pool_params(std::uint8_t c, const Resolved& r) noexcept {
  return {.pool_id = c,
          .kind = r.ud ? protocol::WrKind::kUdRecv : protocol::WrKind::kSrqRecv,
          .thread = 0,
          .generation = 1,
          .capacity = c == kPoolSmall ? r.small_buf : r.large_buf,
          .grh_bytes = r.ud ? static_cast<std::uint32_t>(eager::kGrhBytes) : 0,
          .depth = r.srq_depth,
          .spare = r.srq_depth / 2 + r.refill_batch,
          .watermark = r.low_watermark,
          .batch = r.refill_batch};
}

eager::SrqPool::Params Worker::ctrl_pool_params() noexcept {
  return {.pool_id = kPoolCtrl,
          .kind = protocol::WrKind::kUdRecv,
          .thread = 0,
          .generation = 1,
          .capacity = kCtrlCapacity,
          .grh_bytes = static_cast<std::uint32_t>(eager::kGrhBytes),
          .depth = kCtrlDepth,
          .spare = 16,
          .watermark = 8,
          .batch = 8};
}

eager::SendPool::Params Worker::send_pool_params(std::uint16_t thread, const Resolved& r,
                                                 std::uint32_t descs) noexcept {
  const auto hdr = static_cast<std::uint32_t>(protocol::kHeaderSize);
  const std::uint32_t div = thread == 0 ? 1 : kThreadBufferDiv;
  return {.thread = thread,
          .capacity = {std::max(hdr + r.small_buf, hdr + kCtrlCapacity), hdr + r.large_buf},
          .count = {kSendSmallBuffers / div, kSendLargeBuffers / div},
          .descs = descs};
}

std::size_t Worker::setup_pinned_bytes(const Resolved& r) noexcept {
  std::size_t bytes = eager::SrqPool::registered_bytes_for(ctrl_pool_params()) +
                      eager::SendPool::registered_bytes_for(send_pool_params(0, r, kSendDescs));
  for (std::uint8_t c = 0; c < kNumClasses; ++c) {
    bytes += eager::SrqPool::registered_bytes_for(data_pool_params(c, r));
  }
  return bytes;
}

void Worker::fit_pinned_memory(std::uint32_t mtu) {
  const std::optional<std::size_t> limit = verbs::pinning_limit();
  if (!limit) {
    return;
  }
  // At most 3/4 of the limit: the rest is for rendezvous buffers and eager rings, which fall
  // back to copies when their registration is refused; the receive queues have no fallback.
  const std::size_t budget = *limit / 4 * 3;
  const std::size_t wanted = setup_pinned_bytes(res_);
  if (wanted <= budget) {
    return;
  }
  rdmx_config_t c = config_;
  Resolved r = res_;
  while (setup_pinned_bytes(r) > budget && r.srq_depth > kMinSrqDepth) {
    c.srq_depth = std::max(r.srq_depth / 2, kMinSrqDepth);
    c.srq_low_watermark = 0;  // the default for the new depth
    std::string why;
    if (resolve(c, mtu, &r, &why) != RDMX_OK) {
      throw SetupError{RDMX_ERR_INVALID_PARAM, why};
    }
  }
  const std::size_t least = setup_pinned_bytes(r);
  if (least > budget) {
    throw SetupError{RDMX_ERR_NO_MEMORY,
                     "the locked-memory limit (ulimit -l) is " + kib(*limit) + ", and rdmx pins " +
                         kib(wanted) + " of receive and send buffers at start (" + kib(least) +
                         " at the smallest SRQ depth, " + std::to_string(kMinSrqDepth) +
                         "), which must stay within 3/4 of the limit: raise the limit to " +
                         kib(least / 3 * 4 + 4096) +
                         " or more (`ulimit -l unlimited`, or a memlock line in "
                         "/etc/security/limits.conf), or lower RDMX_LARGE_BUF (now " +
                         std::to_string(res_.large_buf) + " bytes; the eager limit follows it)"};
  }
  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: locked-memory limit %s (ulimit -l): SRQ depth %u instead of %u, so that "
                 "the %s pinned at start stay within 3/4 of it; raise the limit for the full "
                 "depth\n",
                 kib(*limit).c_str(), r.srq_depth, res_.srq_depth, kib(least).c_str());
  }
  res_ = r;
}

void Worker::bring_up_ud(verbs::QueuePair& qp) {
  qp.to_init(verbs::UdInitAttr{.qkey = kQkey, .port_num = port_, .pkey_index = res_.pkey_index});
  qp.to_rtr();
  qp.to_rts(verbs::UdRtsAttr{.sq_psn = 0});
}

void Worker::setup() {
  // The verbs layer's informational lines follow the most verbose worker (MCA or RDMX_VERBOSE).
  if (config_.verbose > verbs::log_level()) {
    verbs::set_log_level(config_.verbose);
  }
  const ibv_device_attr dev = open_port();  // device, port, GID and partition
  size_queues(dev);
  name_worker();
  create_queues();
  create_send_contexts();
  create_ud_qps();
  create_segment();
  // The port's RNR NAK counter counts every process on the node; stats() reports it as such,
  // from this baseline (rxe exposes it; other devices may not).
  node_rnr_path_ = "/sys/class/infiniband/" + device_name_ + "/ports/" + std::to_string(port_) +
                   "/hw_counters/rcvd_rnr_err";
  node_rnr_baseline_ = node_rnr_count();
  address_bytes_ = encode_address(local_address());
  setup_rendezvous();
}

namespace {

// What a worker would use on one device: its port, GID and partition.
struct PortPick {
  std::uint8_t port = 0;
  ibv_port_attr attr{};
  std::uint8_t gid_index = 0;
  ibv_gid gid{};
  bool roce_v2 = false;  // the GID is a RoCE v2 entry (routed by IP)
  std::uint16_t pkey = 0;
};

// The port, GID and P_Key entry `config` asks for on `ctx`; throws SetupError (or verbs::Error)
// saying why the device cannot be used and which setting fixes it.
PortPick pick_port(const verbs::Context& ctx, const ibv_device_attr& dev,
                   const rdmx_config_t& config) {
  const std::string name = ctx.name();
  PortPick p;
  if (config.port == 0) {
    p.port = ctx.first_active_port();
    if (p.port == 0) {
      throw SetupError{RDMX_ERR_NO_DEVICE,
                       "no active port on " + name + ": set RDMX_DEVICE/RDMX_PORT"};
    }
  } else {
    // Checked here: ibv_query_port's EINVAL for a missing port would read as a size problem.
    const int nports = dev.phys_port_cnt;
    if (config.port > nports) {
      throw SetupError{RDMX_ERR_NO_DEVICE,
                       name + " has no port " + std::to_string(config.port) + " (its ports: 1.." +
                           std::to_string(nports) +
                           "): set RDMX_PORT to one of them, or 0 for the first active port"};
    }
    p.port = static_cast<std::uint8_t>(config.port);
  }
  p.attr = ctx.query_port(p.port);
  const std::string where = name + " port " + std::to_string(p.port);
  if (p.attr.state != IBV_PORT_ACTIVE) {
    throw SetupError{RDMX_ERR_NO_DEVICE, "port " + std::to_string(p.port) + " of " + name +
                                             " is not active: set RDMX_DEVICE/RDMX_PORT"};
  }
  const bool roce = p.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  if (config.gid_index >= p.attr.gid_tbl_len) {
    throw SetupError{RDMX_ERR_NO_DEVICE, "GID index " + std::to_string(config.gid_index) +
                                             " is beyond the " +
                                             std::to_string(p.attr.gid_tbl_len) + " GIDs of " +
                                             where + ": set RDMX_GID_INDEX"};
  }
  std::uint32_t index = 0;
  if (config.gid_index >= 0) {
    index = static_cast<std::uint32_t>(config.gid_index);
  } else if (roce) {
    index = verbs::find_gid_index(ctx, p.port);  // ENOENT: no RoCE v2 IPv4 GID
  }
  if (index > verbs::kMaxUsableGidIndex) {
    throw SetupError{
        RDMX_ERR_NO_DEVICE,
        "GID index " + std::to_string(index) + " of " + where +
            " cannot be used: libibverbs carries the source GID index in 8 bits "
            "(ibv_global_route.sgid_index is a uint8_t), so address handles and RC connections "
            "reach only entries 0..255; set RDMX_GID_INDEX (mtl_rdmx_gid_index) to an entry "
            "below 256 with the address wanted (/sys/class/infiniband/" +
            name + "/ports/" + std::to_string(p.port) + "/gids), or -1 for the RoCE v2 IPv4 one"};
  }
  p.gid_index = static_cast<std::uint8_t>(index);
  p.gid = verbs::query_gid(ctx, p.port, p.gid_index);
  if (roce && verbs::is_zero(p.gid)) {
    throw SetupError{RDMX_ERR_NO_DEVICE, "GID index " + std::to_string(p.gid_index) + " of " +
                                             where + " is empty: set RDMX_GID_INDEX"};
  }
  if (roce) {
    try {
      p.roce_v2 = verbs::query_gid_type(ctx, p.port, p.gid_index) == IBV_GID_TYPE_ROCE_V2;
    } catch (const verbs::Error&) {
      p.roce_v2 = true;  // type unknown: look the route up anyway (reach.h)
    }
  }
  // Checked here, where the table is known: a QP's INIT with an index beyond it fails with
  // EINVAL, which would read as a queue size problem.
  if (config.pkey_index < 0 || config.pkey_index >= p.attr.pkey_tbl_len) {
    throw SetupError{RDMX_ERR_INVALID_PARAM,
                     "pkey_index " + std::to_string(config.pkey_index) + " is beyond the " +
                         std::to_string(p.attr.pkey_tbl_len) + " P_Key entries of " + where +
                         ": set RDMX_PKEY_INDEX (mtl_rdmx_pkey_index) to an index in [0, " +
                         std::to_string(p.attr.pkey_tbl_len - 1) +
                         "] of a partition the port is in (ibv_devinfo -v, /sys/class/infiniband/" +
                         name + "/ports/" + std::to_string(p.port) + "/pkeys)"};
  }
  p.pkey = verbs::query_pkey(ctx, p.port, static_cast<std::uint16_t>(config.pkey_index));
  if ((p.pkey & 0x7fff) == 0) {
    throw SetupError{RDMX_ERR_INVALID_PARAM,
                     "pkey_index " + std::to_string(config.pkey_index) + " of " + where +
                         " is an empty P_Key entry: set RDMX_PKEY_INDEX (mtl_rdmx_pkey_index) to "
                         "the index of a partition the port is in (ibv_devinfo -v)"};
  }
  return p;
}

std::string pick_text(const PortPick& p) {
  char s[160];
  std::snprintf(s, sizeof(s), "port %u active (%s, mtu %u), GID[%u] %s%s, P_Key 0x%04x", p.port,
                link_layer_name(p.attr.link_layer), mtu_bytes(p.attr.active_mtu), p.gid_index,
                verbs::to_string(p.gid).c_str(), p.roce_v2 ? " (RoCE v2)" : "", p.pkey);
  return s;
}

}  // namespace

ibv_device_attr Worker::open_port() {
  // Named: that device or the reason it cannot be used. Not named: the first device whose port,
  // GID and partition can be used (the rule of RDMX_DEVICE's help), each one's verdict said at
  // verbose >= 1 so a multi-rail host shows why a rank took the device it did.
  std::optional<PortPick> pick;
  if (!device_name_.empty()) {
    ctx_.emplace(verbs::Context::open(device_name_));
    pick = pick_port(*ctx_, ctx_->query_device().orig_attr, config_);
    if (config_.verbose >= 1) {
      std::fprintf(stderr, "rdmx: device %s: taken (named by RDMX_DEVICE): %s\n",
                   device_name_.c_str(), pick_text(*pick).c_str());
    }
  } else {
    const verbs::DeviceList list = verbs::DeviceList::get();
    std::string first_why;  // the first device's reason leads the error (it was the one taken
    std::string others;     // before devices were skipped), the others' follow
    for (ibv_device* d : list.devices()) {
      const std::string name = ibv_get_device_name(d);
      std::string why;
      try {
        verbs::Context ctx = verbs::Context::open(name);
        pick = pick_port(ctx, ctx.query_device().orig_attr, config_);
        ctx_.emplace(std::move(ctx));
      } catch (const SetupError& e) {
        why = e.message;
      } catch (const verbs::Error& e) {
        why = e.what();
      }
      if (pick) {
        if (config_.verbose >= 1) {
          std::fprintf(stderr, "rdmx: device %s: taken: %s\n", name.c_str(),
                       pick_text(*pick).c_str());
        }
        break;
      }
      if (config_.verbose >= 1) {
        std::fprintf(stderr, "rdmx: device %s: skipped: %s\n", name.c_str(), why.c_str());
      }
      if (first_why.empty()) {
        first_why = why;
      } else {
        others += (others.empty() ? "" : "; ") + name + ": " + why;
      }
    }
    if (!pick) {
      if (list.devices().empty()) {
        throw verbs::Error("ibv_get_device_list", ENODEV, "no RDMA device");
      }
      throw SetupError{
          RDMX_ERR_NO_DEVICE,
          first_why +
              (others.empty() ? "" : "; no other device is usable either (" + others + ")")};
    }
  }
  device_name_ = ctx_->name();
  const ibv_device_attr dev = ctx_->query_device().orig_attr;
  port_ = pick->port;
  port_attr_ = pick->attr;
  gid_index_ = pick->gid_index;
  gid_ = pick->gid;
  gid_roce_v2_ = pick->roce_v2;
  pkey_ = pick->pkey;
  // The vendor ids the kernel's software drivers report (rxe_param.h, siw.h).
  constexpr std::uint32_t kRxeVendorId = 0xffffff;
  constexpr std::uint32_t kSiwVendorId = 0x626d74;
  software_device_ = dev.vendor_id == kRxeVendorId || dev.vendor_id == kSiwVendorId;
  return dev;
}

void Worker::size_queues(const ibv_device_attr& dev) {
  std::string why;
  const std::uint32_t port_mtu = mtu_bytes(port_attr_.active_mtu);
  if (resolve(config_, port_mtu, &res_, &why) != RDMX_OK) {
    throw SetupError{RDMX_ERR_INVALID_PARAM, why};
  }
  fit_pinned_memory(port_mtu);
  ud_mode_ = res_.ud;
  choose_channel();
  size_send_contexts(dev);
  rd_atomic_ =
      static_cast<std::uint8_t>(std::clamp(std::min(dev.max_qp_rd_atom, dev.max_qp_init_rd_atom), 1,
                                           static_cast<int>(res_.rc_max_rd_atomic)));
  update_rc_credit_window();
}

template <class Ch>
ChannelOps Worker::channel_ops() noexcept {
  return {.post = &Ch::post,
          .stream_full = &Ch::stream_full,
          .poll_recv = &Worker::poll_recv<Ch>,
          .poll_send = &Worker::poll_send<Ch>,
          .on_recv = &Worker::on_recv<Ch>,
          .on_send = &Worker::on_send<Ch>};
}

void Worker::choose_channel() noexcept {
  ops_ = ud_mode_ ? channel_ops<UdChannel>() : channel_ops<RcChannel>();
}

void Worker::size_send_contexts(const ibv_device_attr& dev) {
  multi_ = res_.multi;
  serial_ = next_serial();
  if (!multi_) {
    return;
  }
  // Every context's descriptors fit in the send CQ (worker.h): halve them until max_threads
  // contexts do, down to kMinThreadDescs.
  const std::uint64_t cq_max = static_cast<std::uint64_t>(std::max(dev.max_cqe, 0));
  std::uint32_t descs = kSendDescs;
  while (descs > kMinThreadDescs &&
         std::uint64_t{descs} * res_.max_threads + kSendCqSlack > cq_max) {
    descs /= 2;
  }
  if (std::uint64_t{descs} * res_.max_threads + kSendCqSlack > cq_max) {
    const std::uint64_t fit = cq_max > kSendCqSlack ? (cq_max - kSendCqSlack) / kMinThreadDescs : 0;
    throw SetupError{RDMX_ERR_INVALID_PARAM,
                     "max_threads " + std::to_string(res_.max_threads) + ": " +
                         std::to_string(res_.max_threads) + " send contexts of " +
                         std::to_string(kMinThreadDescs) + " descriptors need a send CQ of " +
                         std::to_string(std::uint64_t{descs} * res_.max_threads + kSendCqSlack) +
                         " entries and " + device_name_ + " takes " + std::to_string(cq_max) +
                         ": set RDMX_MAX_THREADS (mtl_rdmx_max_threads) to " + std::to_string(fit) +
                         " or less"};
  }
  send_descs_ = descs;
}

void Worker::name_worker() {
  uid_ = config_.uid;
  if (uid_ == 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    uid_ = derive_uid(host, static_cast<std::uint32_t>(getpid()),
                      g_worker_counter.fetch_add(1, std::memory_order_relaxed));
  }
  std::random_device rd;
  instance_ =
      (std::uint64_t{rd()} << 32) ^ rd() ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (instance_ == 0) {
    instance_ = 1;
  }
  rng_ = instance_ | 1;
  drop_threshold_ = static_cast<std::uint32_t>(std::min(config_.ud_drop_rate, 1.0) * 4294967295.0);

  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: %s port %u (%s, mtu %u of the port's %u) gid[%u] %s, traffic class %u "
                 "sl %u pkey[%u] 0x%04x, transport %s (%u expected peers, "
                 "UD from %u), classes %u/%u B, srq depth %u watermark %u batch %u, eager limit "
                 "%zu, uid %016llx\n",
                 device_name_.c_str(), port_, link_layer_name(port_attr_.link_layer), res_.path_mtu,
                 mtu_bytes(port_attr_.active_mtu), gid_index_, verbs::to_string(gid_).c_str(),
                 res_.traffic_class, res_.service_level, res_.pkey_index, pkey_,
                 ud_mode_ ? "ud" : "rc", config_.expected_peers, config_.auto_ud_peers,
                 res_.small_buf, res_.large_buf, res_.srq_depth, res_.low_watermark,
                 res_.refill_batch, res_.eager_limit, static_cast<unsigned long long>(uid_));
  }
}

void Worker::create_queues() {
  events_.emplace(*ctx_);
  pd_.emplace(verbs::ProtectionDomain::create(*ctx_));
  // Events reach the channel only once a caller arms the CQs (rdmx_worker_arm): until then it
  // costs one file descriptor and nothing per message.
  cq_channel_.emplace(verbs::CompletionChannel::create(*ctx_));
  send_cq_.emplace(verbs::CompletionQueue::create(
      *ctx_, static_cast<int>(send_descs_ * res_.max_threads + kSendCqSlack), &*cq_channel_));
  recv_cq_.emplace(verbs::CompletionQueue::create(
      *ctx_, static_cast<int>(2 * res_.srq_depth + kCtrlDepth + kSendCqSlack), &*cq_channel_));
  wake_.emplace(WakeSet::create(cq_channel_->fd(), ctx_->async_fd()));

  // Receive pools: one SRQ per size class, plus the control QP's.
  for (std::uint8_t c = 0; c < kNumClasses; ++c) {
    pools_[c] = std::make_unique<eager::SrqPool>(*pd_, data_pool_params(c, res_));
  }
  pools_[kPoolCtrl] = std::make_unique<eager::SrqPool>(*pd_, ctrl_pool_params());
  for (int c = 0; c < kNumPools; ++c) {
    eager::SrqPool* p = pools_[c].get();
    p->watch(&pools_moved_);
    events_->on(IBV_EVENT_SRQ_LIMIT_REACHED, p->srq(), [this, p, c](const ibv_async_event&) {
      if (hold_refills_for_test_ && c < kNumClasses) {
        p->note_limit_event();  // hold_refills_for_test(false) refills, which re-arms
      } else {
        (void)p->on_limit_event();
      }
    });
  }
}

std::unique_ptr<verbs::QueuePair> Worker::make_ud_qp(verbs::SharedReceiveQueue& srq,
                                                     std::uint32_t depth) {
  // The first UD QP finds the largest inline size the device takes; the others ask for it.
  static constexpr std::uint32_t kInlineTry[] = {512, 256, 128, 64, 0};
  for (const std::uint32_t inl : kInlineTry) {
    if (max_inline_ != 0 && inl > max_inline_) {
      continue;
    }
    try {
      auto qp = std::make_unique<verbs::QueuePair>(
          verbs::QueuePair::create(*pd_, verbs::QpConfig{.type = IBV_QPT_UD,
                                                         .send_cq = &*send_cq_,
                                                         .recv_cq = &*recv_cq_,
                                                         .srq = &srq,
                                                         .caps = {.max_send_wr = depth,
                                                                  .max_recv_wr = 0,
                                                                  .max_send_sge = 2,
                                                                  .max_recv_sge = 1,
                                                                  .max_inline_data = inl},
                                                         .sq_sig_all = false}));
      max_inline_ = qp->caps().max_inline_data;
      bring_up_ud(*qp);
      return qp;
    } catch (const verbs::Error& e) {
      if (inl == 0 || e.verb() != "ibv_create_qp") {
        throw;
      }
    }
  }
  throw verbs::Error("ibv_create_qp", EINVAL, "UD QP");
}

void Worker::create_ud_qps() {
  // The control QP (always) and, in UD mode, one data QP per size class.
  ctrl_qp_ = make_ud_qp(pools_[kPoolCtrl]->srq_object(), kCtrlSendDepth);
  ctrl_sq_ = eager::SendQueue(ctrl_qp_->get(), kCtrlSendDepth, kSignalEvery);
  if (ud_mode_) {
    for (int c = 0; c < kNumClasses; ++c) {
      ud_qp_[c] = make_ud_qp(pools_[c]->srq_object(), kUdSendDepth);
      ud_sq_[c] = eager::SendQueue(ud_qp_[c]->get(), kUdSendDepth, kSignalEvery);
      ud_wr_[c].opcode = IBV_WR_SEND;
      ud_wr_[c].sg_list = &ud_sge_[c];
      ud_wr_[c].num_sge = 1;
      ud_wr_[c].wr.ud.remote_qkey = kQkey;
    }
  }
}

WorkerAddress Worker::local_address() const {
  WorkerAddress a;
  a.transport = static_cast<std::uint8_t>(ud_mode_ ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC);
  a.port = port_;
  a.caps = static_cast<std::uint8_t>(kCapRc | (ud_mode_ ? kCapUd : 0) |
                                     (shm_ != nullptr ? protocol::kCapShm : 0));
  a.uid = uid_;
  a.instance = instance_;
  std::memcpy(a.gid.data(), gid_.raw, 16);
  a.lid = port_attr_.lid;
  a.link_layer = port_attr_.link_layer;
  a.mtu = res_.path_mtu;  // the port's, capped by path_mtu
  a.ctrl_qpn = ctrl_qp_->qp_num();
  if (ud_mode_) {
    a.ud_qpn = {ud_qp_[0]->qp_num(), ud_qp_[1]->qp_num()};
  }
  a.class_capacity = {res_.small_buf, res_.large_buf};
  a.max_inline = max_inline_;
  a.rd_atomic = rd_atomic_;
  if (shm_ != nullptr) {
    a.node_id = node_id_;
    a.pid = static_cast<std::uint32_t>(getpid());
  }
  a.set_device_name(device_name_);
  return a;
}

}  // namespace rdmx::transport
