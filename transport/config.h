// Configuration: defaults, RDMX_* environment variables and the derived values the worker uses.
//
// rdmx_config_init() and rdmx_config_from_env() (include/rdmx/rdmx.h) are thin wrappers over the
// functions here; the parsers are pure so that they are unit-tested on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rdmx/rdmx.h"

namespace rdmx::transport {

// Defaults (see README "Defaults" for the reasoning).
inline constexpr std::uint32_t kDefaultAutoUdPeers = 64;     // MVAPICH2-like: UD from 64 peers
inline constexpr std::uint32_t kDefaultSmallBuf = 1024;      // payload bytes, small class
inline constexpr std::uint32_t kDefaultLargeBuf = 8192;      // payload bytes, large class (RC)
inline constexpr std::uint32_t kDefaultSrqDepth = 512;       // receive buffers per SRQ
inline constexpr std::uint32_t kDefaultSrqLowWatermark = 0;  // 0 = derived: depth / 4
inline constexpr std::size_t kDefaultEagerLimit = kDefaultLargeBuf;
// Rendezvous takes every message eager cannot carry (RC: above 8 KiB; resolve() clamps the
// threshold to the eager limit + 1, so UD's default is one packet + 1). Not yet the measured
// eager/rendezvous crossover: tests/rndv/rndv_sweep measures it on an idle machine.
inline constexpr std::size_t kDefaultRndvThresh = kDefaultEagerLimit + 1;
inline constexpr std::uint32_t kDefaultUdRtoUs = 2000;
inline constexpr std::uint32_t kDefaultPeerTimeoutMs = 30000;  // UCX's peer timeout
// UD mode: RC connections kept for rendezvous writes (MVAPICH2's hybrid mode keeps 64).
inline constexpr std::uint32_t kDefaultMaxRcPeers = 64;
// RC eager rings (protocol/ring.h): openib gave up to 16 peers rings of 16 buffers; 32 slots of
// 512 bytes (rxe's inline limit) are 16 KiB per peer, 256 KiB per worker at most.
inline constexpr std::uint32_t kDefaultRingPeers = 16;
inline constexpr std::uint32_t kDefaultRingSlots = 32;
inline constexpr std::uint32_t kDefaultRingSlotSize = 512;
// The receiver's read share of a rendezvous message (rdmx_config_t.rndv_read_share): -1 picks
// kSoftwareReadShare on software devices, 0 on hardware. At most kMaxReadShare percent, so
// that the sender always writes a part (its write-with-imm completes the receive).
inline constexpr int kDefaultReadShare = -1;
inline constexpr int kSoftwareReadShare = 50;
inline constexpr int kMaxReadShare = 90;
// RDMA reads in flight per RC QP, each way (rdmx_config_t.rc_max_rd_atomic), before the
// device's own limit: 16 covers a 4-deep read pipeline for several receives at once.
inline constexpr std::uint32_t kDefaultRcMaxRdAtomic = 16;
inline constexpr std::uint32_t kMaxRcMaxRdAtomic = 16;
// Shared memory (transport/channel/shm_segment.h): a ring of 32 eager messages per node-local
// sender (as many as an RC ring), up to 256 senders per segment. The segment is a sparse file:
// only the rings of senders that write take pages (~265 KiB each with RC's 8 KiB eager limit).
inline constexpr std::uint32_t kDefaultShmSlots = 32;
inline constexpr std::uint32_t kMinShmSlots = 2;
inline constexpr std::uint32_t kMaxShmSlots = 1024;
inline constexpr std::uint32_t kDefaultShmRings = 256;
inline constexpr std::uint32_t kMaxShmRings = 4096;
// RNR retries of an RC send (rdmx_config_t.rc_rnr_retry): 7 is the verbs encoding of "for ever".
inline constexpr std::uint32_t kRnrRetryForever = 7;
// RC local ACK timeout exponent and transport retries (rdmx_config_t.rc_timeout, rc_retry_cnt):
// 4.096 us x 2^17 = 0.5 s per try, 7 tries. On an incast the ACKs of a QP that keeps meeting an
// empty SRQ can be late many times in a row, and an RC QP that gives up fails the whole
// connection; rxe even treats 7 retries as "for ever", and the RC watchdog (no send completion
// for peer_timeout_ms) finds dead peers. The verbs fields are 5 and 3 bits wide.
inline constexpr int kDefaultRcTimeout = 17;
inline constexpr int kMaxRcTimeout = 31;
inline constexpr int kDefaultRcRetryCnt = 7;
inline constexpr int kMaxRcRetryCnt = 7;
// Fabric settings (rdmx_config_t.traffic_class, service_level): the GRH's 8-bit traffic class
// and the 4-bit SL.
inline constexpr int kMaxTrafficClass = 255;
inline constexpr int kMaxServiceLevel = 15;
// MULTI thread mode: send contexts at most (rdmx_config_t.max_threads; a thread index fits the
// wr_id's 12 bits and the sync cookie's, worker.h checks).
inline constexpr std::uint32_t kDefaultMaxThreads = 32;
inline constexpr std::uint32_t kMaxThreads = 1024;

// A tiny SRQ must not deadlock: below this many receive buffers the refill batch and the
// watermark collapse onto each other, so smaller requests are raised to it.
inline constexpr std::uint32_t kMinSrqDepth = 16;
inline constexpr std::uint32_t kMaxSrqDepth = 1u << 16;
inline constexpr std::uint32_t kMinSmallBuf = 64;
inline constexpr std::uint32_t kMaxLargeBuf = 1u << 20;

// Parsers for one environment value. Sizes accept a k/K, m/M or g/G suffix (powers of 1024).
std::optional<std::uint64_t> parse_u64(std::string_view text);  // decimal or 0x hex
std::optional<std::uint64_t> parse_size(std::string_view text);
std::optional<std::int64_t> parse_int(std::string_view text);
std::optional<double> parse_fraction(std::string_view text);  // a number in [0, 1]
std::optional<rdmx_transport_t> parse_transport(std::string_view text);
const char* transport_name(rdmx_transport_t transport) noexcept;
std::optional<rdmx_thread_mode_t> parse_thread_mode(std::string_view text);
const char* thread_mode_name(rdmx_thread_mode_t mode) noexcept;

// A getenv-like lookup, so tests can feed their own environment.
using EnvLookup = const char* (*)(const char* name, void* user);

// Applies every RDMX_* variable found through `lookup` to *config. Returns RDMX_OK, or
// RDMX_ERR_INVALID_PARAM with *error naming the variable and the value it could not parse (the
// remaining variables are still applied).
int apply_env(rdmx_config_t* config, EnvLookup lookup, void* user, std::string* error);

// The values a worker runs with, after checking and deriving from a config. Pure: no device.
struct Resolved {
  std::uint32_t small_buf = 0;  // payload bytes per small receive buffer
  std::uint32_t large_buf = 0;  // payload bytes per large receive buffer
  std::uint32_t srq_depth = 0;
  std::uint32_t low_watermark = 0;
  std::uint32_t refill_batch = 0;
  std::size_t eager_limit = 0;
  std::size_t rndv_thresh = 0;  // messages of this size and up use rendezvous (<= eager_limit + 1)
  std::uint32_t max_rc_peers = 0;
  std::uint32_t ring_peers = 0;  // 0: no rings (UD, or turned off)
  std::uint32_t ring_slots = 0;
  std::uint32_t ring_slot_size = 0;
  int rndv_read_share = 0;  // percent; -1: chosen by device type (the worker knows it); UD: 0
  std::uint32_t rc_max_rd_atomic = 1;  // before the device's limit
  std::uint8_t rc_rnr_retry = kRnrRetryForever;
  std::uint8_t rc_timeout = kDefaultRcTimeout;
  std::uint8_t rc_retry_cnt = kDefaultRcRetryCnt;
  std::uint8_t traffic_class = 0;
  std::uint8_t service_level = 0;
  std::uint16_t pkey_index = 0;  // checked against the port's table by the worker
  // The path MTU in bytes the worker advertises and sizes UD packets by: the port's active MTU,
  // capped by rdmx_config_t.path_mtu.
  std::uint32_t path_mtu = 0;
  bool ud = false;
  bool multi = false;             // RDMX_THREAD_MODE_MULTI: the worker locks (threads.cc)
  std::uint32_t max_threads = 1;  // send contexts at most (1 unless multi)
  bool shm = false;               // node-local peers through shared memory
  bool shm_cma = false;
  std::uint32_t shm_slots = 0;
  std::uint32_t shm_rings = 0;
};

// Checks a configuration (*error says what is wrong and which variable fixes it) and derives the
// worker's sizes. port_mtu is the port's active MTU in bytes; capped by config.path_mtu it is
// Resolved::path_mtu, which on UD caps both classes.
int resolve(const rdmx_config_t& config, std::uint32_t port_mtu, Resolved* out, std::string* error);

// RC or UD for a configuration (transport=auto: UD when expected_peers >= auto_ud_peers).
bool choose_ud(const rdmx_config_t& config) noexcept;

// 0 in the config means "derive from host and pid"; this is that derivation (never 0, never
// RDMX_ANY_SOURCE). `counter` separates several workers of one process.
std::uint64_t derive_uid(std::string_view host, std::uint32_t pid, std::uint32_t counter) noexcept;

}  // namespace rdmx::transport
