#include "transport/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "protocol/ring.h"
#include "protocol/wire.h"

namespace rdmx::transport {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

}  // namespace

std::optional<std::uint64_t> parse_u64(std::string_view text) {
  text = trim(text);
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  if (text.empty()) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  text = trim(text);
  std::uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        scale = 1ull << 10;
        break;
      case 'm':
      case 'M':
        scale = 1ull << 20;
        break;
      case 'g':
      case 'G':
        scale = 1ull << 30;
        break;
      default:
        break;
    }
    if (scale != 1) {
      text.remove_suffix(1);
    }
  }
  const auto value = parse_u64(text);
  if (!value || *value > std::numeric_limits<std::uint64_t>::max() / scale) {
    return std::nullopt;
  }
  return *value * scale;
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  text = trim(text);
  if (text.empty()) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> parse_fraction(std::string_view text) {
  const std::string s(trim(text));
  if (s.empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0.0 || v > 1.0) {
    return std::nullopt;
  }
  return v;
}

std::optional<rdmx_transport_t> parse_transport(std::string_view text) {
  text = trim(text);
  if (iequals(text, "rc")) {
    return RDMX_TRANSPORT_RC;
  }
  if (iequals(text, "ud")) {
    return RDMX_TRANSPORT_UD;
  }
  if (iequals(text, "auto")) {
    return RDMX_TRANSPORT_AUTO;
  }
  return std::nullopt;
}

std::optional<rdmx_thread_mode_t> parse_thread_mode(std::string_view text) {
  text = trim(text);
  if (iequals(text, "single")) {
    return RDMX_THREAD_MODE_SINGLE;
  }
  if (iequals(text, "serialized")) {
    return RDMX_THREAD_MODE_SERIALIZED;
  }
  if (iequals(text, "multi")) {
    return RDMX_THREAD_MODE_MULTI;
  }
  return std::nullopt;
}

const char* thread_mode_name(rdmx_thread_mode_t mode) noexcept {
  switch (mode) {
    case RDMX_THREAD_MODE_SINGLE:
      return "single";
    case RDMX_THREAD_MODE_SERIALIZED:
      return "serialized";
    case RDMX_THREAD_MODE_MULTI:
      return "multi";
  }
  return "?";
}

const char* transport_name(rdmx_transport_t transport) noexcept {
  switch (transport) {
    case RDMX_TRANSPORT_RC:
      return "rc";
    case RDMX_TRANSPORT_UD:
      return "ud";
    case RDMX_TRANSPORT_AUTO:
      return "auto";
  }
  return "?";
}

int apply_env(rdmx_config_t* config, EnvLookup lookup, void* user, std::string* error) {
  int rc = RDMX_OK;
  auto fail = [&](const char* name, const char* value, const char* expected) {
    if (rc == RDMX_OK && error != nullptr) {
      *error = std::string(name) + "='" + value + "' is not " + expected;
    }
    rc = RDMX_ERR_INVALID_PARAM;
  };
  auto get = [&](const char* name) -> const char* {
    const char* v = lookup(name, user);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  auto u32 = [&](const char* name, std::uint32_t* field, bool size) {
    if (const char* v = get(name)) {
      const auto x = size ? parse_size(v) : parse_u64(v);
      if (!x || *x > std::numeric_limits<std::uint32_t>::max()) {
        fail(name, v, size ? "a size (e.g. 4096 or 8k)" : "an unsigned 32-bit number");
      } else {
        *field = static_cast<std::uint32_t>(*x);
      }
    }
  };
  auto sz = [&](const char* name, std::size_t* field) {
    if (const char* v = get(name)) {
      const auto x = parse_size(v);
      if (!x) {
        fail(name, v, "a size (e.g. 4096 or 8k)");
      } else {
        *field = static_cast<std::size_t>(*x);
      }
    }
  };
  auto integer = [&](const char* name, int* field, int lo, int hi) {
    if (const char* v = get(name)) {
      const auto x = parse_int(v);
      if (!x || *x < lo || *x > hi) {
        fail(name, v,
             ("an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]").c_str());
      } else {
        *field = static_cast<int>(*x);
      }
    }
  };

  auto string = [&](const char* name, const char** field) {
    if (const char* v = get(name)) {
      *field = v;
    }
  };
  auto transport = [&](const char* name, rdmx_transport_t* field) {
    if (const char* v = get(name)) {
      if (const auto t = parse_transport(v)) {
        *field = *t;
      } else {
        fail(name, v, "one of rc, ud, auto");
      }
    }
  };
  auto thread_mode = [&](const char* name, rdmx_thread_mode_t* field) {
    if (const char* v = get(name)) {
      if (const auto t = parse_thread_mode(v)) {
        *field = *t;
      } else {
        fail(name, v, "one of single, serialized, multi");
      }
    }
  };
  auto uid = [&](const char* name, std::uint64_t* field) {
    if (const char* v = get(name)) {
      const auto x = parse_u64(v);
      if (!x || *x == RDMX_ANY_SOURCE) {
        fail(name, v, "a 64-bit number other than 2^64-1");
      } else {
        *field = *x;
      }
    }
  };
  auto fraction = [&](const char* name, double* field) {
    if (const char* v = get(name)) {
      if (const auto x = parse_fraction(v)) {
        *field = *x;
      } else {
        fail(name, v, "a fraction in [0, 1]");
      }
    }
  };
  // One line per setting of settings.def, by its kind.
#define RDMX_APPLY_INT(env, field, lo, hi) integer(env, field, lo, hi)
#define RDMX_APPLY_U32(env, field, lo, hi) u32(env, field, false)
#define RDMX_APPLY_SIZE32(env, field, lo, hi) u32(env, field, true)
#define RDMX_APPLY_SIZE(env, field, lo, hi) sz(env, field)
#define RDMX_APPLY_STRING(env, field, lo, hi) string(env, field)
#define RDMX_APPLY_TRANSPORT(env, field, lo, hi) transport(env, field)
#define RDMX_APPLY_THREADS(env, field, lo, hi) thread_mode(env, field)
#define RDMX_APPLY_UID(env, field, lo, hi) uid(env, field)
#define RDMX_APPLY_FRACTION(env, field, lo, hi) fraction(env, field)
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help) \
  RDMX_APPLY_##kind(env, &config->field, lo, hi);
#include "transport/settings.def"
#undef RDMX_SETTING
#undef RDMX_APPLY_INT
#undef RDMX_APPLY_U32
#undef RDMX_APPLY_SIZE32
#undef RDMX_APPLY_SIZE
#undef RDMX_APPLY_STRING
#undef RDMX_APPLY_TRANSPORT
#undef RDMX_APPLY_THREADS
#undef RDMX_APPLY_UID
#undef RDMX_APPLY_FRACTION
  return rc;
}

// settings.def's upper bounds (what the environment may set) are the ones resolve checks (what
// a C caller may set): one range per setting, written twice, held equal here.
constexpr bool same_max(std::string_view field, long long hi) {
  return (field != "rndv_read_share" || hi == kMaxReadShare) &&
         (field != "max_threads" || hi == kMaxThreads) &&
         (field != "traffic_class" || hi == kMaxTrafficClass) &&
         (field != "service_level" || hi == kMaxServiceLevel) &&
         (field != "rc_timeout" || hi == kMaxRcTimeout) &&
         (field != "rc_retry_cnt" || hi == kMaxRcRetryCnt);
}
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help) \
  static_assert(same_max(#field, hi), "settings.def: " #field "'s range is not resolve's");
#include "transport/settings.def"
#undef RDMX_SETTING

bool choose_ud(const rdmx_config_t& config) noexcept {
  switch (config.transport) {
    case RDMX_TRANSPORT_RC:
      return false;
    case RDMX_TRANSPORT_UD:
      return true;
    case RDMX_TRANSPORT_AUTO:
      break;
  }
  return config.auto_ud_peers != 0 && config.expected_peers >= config.auto_ud_peers;
}

int resolve(const rdmx_config_t& config, std::uint32_t port_mtu, Resolved* out,
            std::string* error) {
  auto fail = [&](std::string text) {
    if (error != nullptr) {
      *error = std::move(text);
    }
    return RDMX_ERR_INVALID_PARAM;
  };
  if (config.transport != RDMX_TRANSPORT_AUTO && config.transport != RDMX_TRANSPORT_RC &&
      config.transport != RDMX_TRANSPORT_UD) {
    return fail("transport " + std::to_string(static_cast<int>(config.transport)) +
                " is not rc, ud or auto (RDMX_TRANSPORT)");
  }
  if (config.thread_mode != RDMX_THREAD_MODE_SINGLE &&
      config.thread_mode != RDMX_THREAD_MODE_SERIALIZED &&
      config.thread_mode != RDMX_THREAD_MODE_MULTI) {
    return fail("thread_mode " + std::to_string(static_cast<int>(config.thread_mode)) +
                " is not single, serialized or multi (RDMX_THREAD_MODE)");
  }
  if (config.max_threads < 1 || config.max_threads > kMaxThreads) {
    return fail("max_threads " + std::to_string(config.max_threads) + " is not in 1.." +
                std::to_string(kMaxThreads) + " (RDMX_MAX_THREADS)");
  }
  if (config.small_buf_size < kMinSmallBuf) {
    return fail("small_buf_size " + std::to_string(config.small_buf_size) + " is below " +
                std::to_string(kMinSmallBuf) + " (RDMX_SMALL_BUF)");
  }
  if (config.large_buf_size <= config.small_buf_size || config.large_buf_size > kMaxLargeBuf) {
    return fail("large_buf_size " + std::to_string(config.large_buf_size) +
                " must be above small_buf_size " + std::to_string(config.small_buf_size) +
                " and at most " + std::to_string(kMaxLargeBuf) + " (RDMX_LARGE_BUF)");
  }
  if (config.srq_depth > kMaxSrqDepth) {
    return fail("srq_depth " + std::to_string(config.srq_depth) + " is above " +
                std::to_string(kMaxSrqDepth) + " (RDMX_SRQ_DEPTH)");
  }
  if (config.ud_drop_rate < 0.0 || config.ud_drop_rate > 1.0 || std::isnan(config.ud_drop_rate)) {
    return fail("ud_drop_rate must be in [0, 1] (RDMX_UD_DROP_RATE)");
  }
  if (config.uid == RDMX_ANY_SOURCE) {
    return fail("uid 2^64-1 is RDMX_ANY_SOURCE (RDMX_UID)");
  }
  if (config.port < 0 || config.port > 255) {
    return fail("port " + std::to_string(config.port) + " is not in [0, 255] (RDMX_PORT)");
  }
  if (config.gid_index < -1) {
    return fail("gid_index " + std::to_string(config.gid_index) + " is below -1 (RDMX_GID_INDEX)");
  }
  if (config.traffic_class < 0 || config.traffic_class > kMaxTrafficClass) {
    return fail("traffic_class " + std::to_string(config.traffic_class) +
                " is not in [0, 255] (RDMX_TRAFFIC_CLASS; on RoCE DSCP d is d << 2)");
  }
  if (config.service_level < 0 || config.service_level > kMaxServiceLevel) {
    return fail("service_level " + std::to_string(config.service_level) +
                " is not in [0, 15] (RDMX_SERVICE_LEVEL)");
  }
  if (config.pkey_index < 0 || config.pkey_index > 65535) {
    return fail("pkey_index " + std::to_string(config.pkey_index) +
                " is not in [0, 65535] (RDMX_PKEY_INDEX)");
  }
  if (config.path_mtu != 0 && config.path_mtu != 256 && config.path_mtu != 512 &&
      config.path_mtu != 1024 && config.path_mtu != 2048 && config.path_mtu != 4096) {
    return fail("path_mtu " + std::to_string(config.path_mtu) +
                " is not 0 (the port's MTU) or one of 256, 512, 1024, 2048, 4096 (RDMX_PATH_MTU)");
  }
  if (config.rc_timeout < 0 || config.rc_timeout > kMaxRcTimeout) {
    return fail("rc_timeout " + std::to_string(config.rc_timeout) +
                " is not an exponent in [0, 31] (RDMX_RC_TIMEOUT; 17 = 0.5 s per try)");
  }
  if (config.rc_retry_cnt < 0 || config.rc_retry_cnt > kMaxRcRetryCnt) {
    return fail("rc_retry_cnt " + std::to_string(config.rc_retry_cnt) +
                " is not in [0, 7] (RDMX_RC_RETRY_CNT)");
  }

  Resolved r;
  r.ud = choose_ud(config);
  r.multi = config.thread_mode == RDMX_THREAD_MODE_MULTI;
  r.max_threads = r.multi ? config.max_threads : 1;
  r.traffic_class = static_cast<std::uint8_t>(config.traffic_class);
  r.service_level = static_cast<std::uint8_t>(config.service_level);
  r.pkey_index = static_cast<std::uint16_t>(config.pkey_index);
  r.rc_timeout = static_cast<std::uint8_t>(config.rc_timeout);
  r.rc_retry_cnt = static_cast<std::uint8_t>(config.rc_retry_cnt);
  // A cap only: a port whose MTU is below it keeps its own (the verbs refuse a larger one).
  r.path_mtu = config.path_mtu != 0
                   ? std::min(port_mtu, static_cast<std::uint32_t>(config.path_mtu))
                   : port_mtu;
  const std::uint32_t path_mtu = r.path_mtu;
  r.srq_depth = std::max(config.srq_depth, kMinSrqDepth);
  // Refill in batches of up to 32 (eRPC/UCX use 16-32), but at most a quarter of the queue so
  // that a tiny SRQ is refilled long before it runs dry.
  r.refill_batch = std::clamp<std::uint32_t>(r.srq_depth / 4, 1, 32);
  r.low_watermark = config.srq_low_watermark != 0 ? config.srq_low_watermark : r.srq_depth / 4;
  // The limit event must be able to fire before the queue is empty and after a refill batch.
  r.low_watermark = std::clamp<std::uint32_t>(r.low_watermark, 1, r.srq_depth - r.refill_batch);

  const auto header = static_cast<std::uint32_t>(protocol::kHeaderSize);
  if (r.ud) {
    if (path_mtu <= header + kMinSmallBuf) {
      return fail("path MTU " + std::to_string(path_mtu) +
                  " is too small for UD, whose packets carry a " + std::to_string(header) +
                  "-byte header and at least " + std::to_string(kMinSmallBuf) +
                  " bytes: raise RDMX_PATH_MTU or use RDMX_TRANSPORT=rc");
    }
    // UD messages are one packet: header + payload <= path MTU.
    r.large_buf = path_mtu - header;
    r.small_buf = std::min(config.small_buf_size, r.large_buf / 2);
  } else {
    r.small_buf = config.small_buf_size;
    r.large_buf = config.large_buf_size;
  }
  r.eager_limit = std::min<std::size_t>(config.eager_limit, r.large_buf);
  // Nothing above the eager limit can go eagerly.
  r.rndv_thresh = std::min<std::size_t>(config.rndv_thresh, r.eager_limit + 1);
  if (config.max_rc_peers == 0) {
    return fail("max_rc_peers must be at least 1 (RDMX_MAX_RC_PEERS)");
  }
  r.max_rc_peers = config.max_rc_peers;
  if (config.ring_peers != 0 &&
      !protocol::ring_geometry_ok(config.ring_slots, config.ring_slot_size)) {
    return fail("ring of " + std::to_string(config.ring_slots) + " slots of " +
                std::to_string(config.ring_slot_size) + " bytes: slots must be in [" +
                std::to_string(protocol::kRingMinSlots) + ", " +
                std::to_string(protocol::kRingMaxSlots) + "] (RDMX_RING_SLOTS) and the slot " +
                "size a multiple of 8 in [" + std::to_string(protocol::kRingMinSlot) + ", " +
                std::to_string(protocol::kRingMaxSlot) +
                "] (RDMX_RING_SLOT_SIZE); RDMX_RING_PEERS=0 turns the ring off");
  }
  // UD has no connection to write over.
  r.ring_peers = r.ud ? 0 : config.ring_peers;
  r.ring_slots = config.ring_slots;
  r.ring_slot_size = config.ring_slot_size;
  if (config.rndv_read_share < -1 || config.rndv_read_share > kMaxReadShare) {
    return fail("rndv_read_share " + std::to_string(config.rndv_read_share) +
                " is not a percentage in [0, " + std::to_string(kMaxReadShare) +
                "] or -1 for the device's default (RDMX_RNDV_READ_SHARE)");
  }
  // UD's on-demand RC connections carry writes only.
  r.rndv_read_share = r.ud ? 0 : config.rndv_read_share;
  if (config.rc_max_rd_atomic == 0 || config.rc_max_rd_atomic > kMaxRcMaxRdAtomic) {
    return fail("rc_max_rd_atomic " + std::to_string(config.rc_max_rd_atomic) + " is not in [1, " +
                std::to_string(kMaxRcMaxRdAtomic) + "] (RDMX_RC_MAX_RD_ATOMIC)");
  }
  r.rc_max_rd_atomic = config.rc_max_rd_atomic;
  if (config.rc_rnr_retry > kRnrRetryForever) {
    return fail("rc_rnr_retry " + std::to_string(config.rc_rnr_retry) + " is not in [0, " +
                std::to_string(kRnrRetryForever) + "] (RDMX_RC_RNR_RETRY)");
  }
  r.rc_rnr_retry = static_cast<std::uint8_t>(config.rc_rnr_retry);
  if (config.shm > 1 || config.shm_cma > 1) {
    return fail("shm and shm_cma are 0 or 1 (RDMX_SHM, RDMX_SHM_CMA)");
  }
  if (config.shm != 0 && (config.shm_slots < kMinShmSlots || config.shm_slots > kMaxShmSlots ||
                          config.shm_rings == 0 || config.shm_rings > kMaxShmRings)) {
    return fail("shared-memory ring of " + std::to_string(config.shm_slots) + " slots, " +
                std::to_string(config.shm_rings) + " rings: slots must be in [" +
                std::to_string(kMinShmSlots) + ", " + std::to_string(kMaxShmSlots) +
                "] (RDMX_SHM_SLOTS), rings in [1, " + std::to_string(kMaxShmRings) +
                "] (RDMX_SHM_RINGS); RDMX_SHM=0 turns shared memory off");
  }
  r.shm = config.shm != 0;
  r.shm_slots = config.shm_slots;
  r.shm_rings = config.shm_rings;
  r.shm_cma = config.shm_cma != 0;
  *out = r;
  return RDMX_OK;
}

std::uint64_t derive_uid(std::string_view host, std::uint32_t pid, std::uint32_t counter) noexcept {
  // FNV-1a of the host name in the high 32 bits, pid and a per-process counter below: unique
  // among the processes of one job as long as host names differ.
  std::uint32_t h = 2166136261u;
  for (const char c : host) {
    h = (h ^ static_cast<std::uint8_t>(c)) * 16777619u;
  }
  std::uint64_t uid =
      (std::uint64_t{h} << 32) | (std::uint64_t{pid & 0xffffffu} << 8) | (counter & 0xffu);
  if (uid == 0 || uid == RDMX_ANY_SOURCE) {
    uid = 1;
  }
  return uid;
}

}  // namespace rdmx::transport

namespace {
const char* getenv_lookup(const char* name, void*) {
  return std::getenv(name);
}
}  // namespace

using namespace rdmx::transport;  // NOLINT: the C functions below use the defaults

extern "C" {

void rdmx_config_init(rdmx_config_t* c) {
  if (c == nullptr) {
    return;
  }
  *c = rdmx_config_t{};
  c->device = nullptr;
  c->port = 0;
  c->gid_index = -1;
  c->transport = RDMX_TRANSPORT_AUTO;
  c->expected_peers = 0;
  c->auto_ud_peers = kDefaultAutoUdPeers;
  c->small_buf_size = kDefaultSmallBuf;
  c->large_buf_size = kDefaultLargeBuf;
  c->srq_depth = kDefaultSrqDepth;
  c->srq_low_watermark = kDefaultSrqLowWatermark;
  c->eager_limit = kDefaultEagerLimit;
  c->rndv_thresh = kDefaultRndvThresh;
  c->uid = 0;
  c->ud_drop_rate = 0.0;
  c->ud_rto_us = kDefaultUdRtoUs;
  c->peer_timeout_ms = kDefaultPeerTimeoutMs;
  c->verbose = 0;
  c->max_rc_peers = kDefaultMaxRcPeers;
  c->coalesce = 1;
  c->ring_peers = kDefaultRingPeers;
  c->ring_slots = kDefaultRingSlots;
  c->ring_slot_size = kDefaultRingSlotSize;
  c->rndv_read_share = kDefaultReadShare;
  c->rc_max_rd_atomic = kDefaultRcMaxRdAtomic;
  c->rc_rnr_retry = kRnrRetryForever;
  c->shm = 1;
  c->shm_slots = kDefaultShmSlots;
  c->shm_rings = kDefaultShmRings;
  c->shm_cma = 1;
  c->shm_local_peers = 0;
  c->node_id = 0;
  c->traffic_class = 0;
  c->service_level = 0;
  c->pkey_index = 0;
  c->path_mtu = 0;
  c->rc_timeout = kDefaultRcTimeout;
  c->rc_retry_cnt = kDefaultRcRetryCnt;
  c->thread_mode = RDMX_THREAD_MODE_SINGLE;
  c->max_threads = kDefaultMaxThreads;
}

int rdmx_config_from_env(rdmx_config_t* c) {
  if (c == nullptr) {
    return RDMX_ERR_INVALID_PARAM;
  }
  std::string error;
  const int rc = apply_env(c, getenv_lookup, nullptr, &error);
  if (rc != RDMX_OK) {
    std::fprintf(stderr, "rdmx: %s\n", error.c_str());
  }
  return rc;
}

}  // extern "C"
