// Registration cache for RDMA-write rendezvous: ibv_reg_mr is expensive (a syscall that pins
// every page), so registrations of user buffers are kept and reused by page range.
//
// Model
//   - An entry registers a page-aligned range [start, end). Cached entries never overlap; they
//     sit in an ordered map keyed by start, so a lookup is one O(log n) search and a hit
//     allocates nothing.
//   - acquire(addr, len[, access]) returns a Registration (RAII) for an entry that contains the
//     pages of [addr, addr+len) and grants at least `access` (IBV_ACCESS_* flags). A request that
//     overlaps cached entries without being served by one is registered as the union of their
//     ranges and flags and its own (merge); if that registration fails (the union spans memory
//     or asks for rights the request does not: a read-only or unmapped page), exactly the
//     requested pages with the requested flags are registered instead. Entries the new one
//     covers or overlaps leave the map.
//   - Access: the source of an RDMA write needs no flags (0: local read); a buffer the peer
//     writes into needs IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, which the kernel
//     refuses on read-only memory (a const send buffer is legal MPI). Ask for what the use
//     needs: an entry with more rights serves a request for fewer.
//   - Every entry has a reference count: one per Registration. Entries in use are never evicted
//     or deregistered. Unused entries stay registered on an LRU list and are evicted
//     (deregistered) when the cache holds more than max_entries entries or max_bytes
//     registered bytes; the bounds count every live registration, in use or not, so in-use
//     entries alone may exceed them (nothing is evicted then; acquire still succeeds).
//   - A registration refused with ENOMEM/EAGAIN/EPERM (pinning limit, `ulimit -l`) is retried
//     once after evicting every unused entry: the cache's own idle pins are the usual culprit.
//   - Memory released to the OS (munmap, free of an mmap'ed block, heap trimming, mremap,
//     madvise(DONTNEED), MAP_FIXED over a mapping) invalidates the entries that overlap it:
//     libucm reports it from any thread into an InvalidationQueue (mem_events.h); the owner
//     drains the queue at the start of every acquire() (one atomic load when empty) and in
//     flush_invalidations(). An invalidated entry leaves the map at once, so later acquires
//     register the new memory; an invalidated entry still in use is deregistered when its last
//     Registration is released.
//
// Threads: one cache per worker, used only from that worker's thread (acquire, release,
// flush, stats, destruction). Only the invalidation queue is touched by other threads, and
// invalidate() may be called from any thread.
//
// Lifetime: every Registration must be released before the cache is destroyed; the destructor
// deregisters everything and reports entries still in use on stderr.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "protocol/intrusive_list.h"
#include "rendezvous/invalidation_queue.h"
#include "rendezvous/mem_events.h"
#include "verbs/pd.h"

namespace rdmx::rendezvous {

// Where the cache learns that memory went back to the OS.
enum class InvalidationSource {
  // libucm hooks (mem_events.h). If UCM cannot deliver events, caching is switched off
  // (every registration is deregistered when its last user releases it): a cache without
  // invalidation would hand out stale registrations.
  kUcm,
  // The owner reports every release itself with RegCache::invalidate() (e.g. from Open MPI's
  // memory-release callbacks); the cache does not subscribe to UCM.
  kExternal,
};

struct RegCacheConfig {
  std::size_t max_entries = 1024;                // live registrations
  std::size_t max_bytes = std::size_t{1} << 30;  // registered (pinned) bytes
  // Flags of acquire()/try_acquire() calls that do not name any.
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  bool merge = true;                               // merge overlapping requests (see above)
  std::size_t invalidation_queue_capacity = 1024;  // ranges; overflow invalidates everything
  InvalidationSource source = InvalidationSource::kUcm;
};

struct RegCacheStats {
  std::uint64_t hits = 0;           // acquires served by a cached entry
  std::uint64_t misses = 0;         // acquires that had to register
  std::uint64_t registrations = 0;  // successful registrations (ibv_reg_mr)
  std::uint64_t deregistrations = 0;
  std::uint64_t evictions = 0;              // unused entries deregistered to respect the bounds
  std::uint64_t invalidations = 0;          // entries invalidated by a memory-release event
  std::uint64_t unmap_events = 0;           // ranges drained from the invalidation queue
  std::uint64_t unmap_events_filtered = 0;  // releases outside every cached entry: not queued
  std::uint64_t queue_overflows = 0;        // times the queue overflowed (everything invalidated)
  std::uint64_t merges = 0;                 // registrations of a merged range
  std::uint64_t merge_fallbacks = 0;        // merged range refused, exact range registered instead
  std::uint64_t failures = 0;               // acquires that failed
  std::size_t entries = 0;                  // live registrations (cached or still in use)
  std::size_t bytes = 0;                    // bytes of live registrations
  std::size_t cached_entries = 0;           // entries in the lookup map
  std::size_t in_use_entries = 0;           // entries with at least one Registration
  bool caching = true;                      // false: invalidation unavailable, nothing is kept
};

// The memory-registration primitive the cache drives. RegCache uses ibv_reg_mr on a PD;
// tests of the pure bookkeeping substitute a fake. Called on misses and deregistrations only,
// never on a hit.
class Registrar {
 public:
  struct Region {
    void* handle = nullptr;  // the registrar's own object (an owned verbs::MemoryRegion)
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
  };

  virtual ~Registrar() = default;
  // 0 with `out` filled, or an errno value with `error` describing the failure.
  virtual int register_range(void* addr, std::size_t len, int access, Region& out,
                             std::string& error) noexcept = 0;
  // Never fails from the caller's view: failures are logged.
  virtual void deregister(Region& region) noexcept = 0;
};

// ibv_reg_mr / ibv_dereg_mr on a PD (verbs::MemoryRegion).
std::unique_ptr<Registrar> make_verbs_registrar(const verbs::ProtectionDomain& pd);

// acquire()'s failure: errnum() is the errno value, what() names the range and the cause.
class RegistrationError : public std::runtime_error {
 public:
  RegistrationError(int errnum, const std::string& what)
      : std::runtime_error(what), errnum_(errnum) {}
  int errnum() const noexcept { return errnum_; }

 private:
  int errnum_;
};

class RegCache;

namespace detail {
// One registration. In the map while `cached`; on the LRU list exactly when cached and unused.
struct RegEntry {
  std::uintptr_t start = 0;  // page-aligned
  std::uintptr_t end = 0;    // page-aligned, exclusive
  int access = 0;            // IBV_ACCESS_* flags it was registered with
  Registrar::Region region;
  std::uint32_t refs = 0;  // Registrations alive
  bool cached = true;
  protocol::detail::Links<RegEntry> lru;
  protocol::detail::Links<RegEntry> all;  // every live entry, cached or not

  std::size_t bytes() const noexcept { return end - start; }
};
}  // namespace detail

// A registration in use. Move-only; releases on destruction or reset(). Must be released on
// the cache's owner thread, before the cache is destroyed.
class Registration {
 public:
  Registration() = default;
  Registration(Registration&& other) noexcept { *this = std::move(other); }
  Registration& operator=(Registration&& other) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration() { reset(); }

  explicit operator bool() const noexcept { return entry_ != nullptr; }
  std::uint32_t lkey() const noexcept { return lkey_; }
  std::uint32_t rkey() const noexcept { return rkey_; }
  // The registered range containing the request: page-aligned, possibly larger.
  std::uintptr_t base() const noexcept { return base_; }
  std::size_t length() const noexcept { return length_; }

  void reset() noexcept;

 private:
  friend class RegCache;
  RegCache* cache_ = nullptr;
  detail::RegEntry* entry_ = nullptr;
  std::uint32_t lkey_ = 0;
  std::uint32_t rkey_ = 0;
  std::uintptr_t base_ = 0;
  std::size_t length_ = 0;
};

class RegCache {
 public:
  // Registers with ibv_reg_mr on `pd`, which must outlive the cache.
  RegCache(const verbs::ProtectionDomain& pd, const RegCacheConfig& config);
  // Any registrar (tests of the bookkeeping use a fake one).
  RegCache(std::unique_ptr<Registrar> registrar, const RegCacheConfig& config);
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;
  ~RegCache();

  // Hot path: 0 with `out` holding the registration (any registration `out` held before is
  // released first), or an errno value with `out` empty and last_error() describing the
  // failure: EINVAL for len 0 or a range that wraps, otherwise the registration's error
  // (EFAULT for unmapped memory, ENOMEM/EPERM for the pinning limit...). Never throws.
  int try_acquire(const void* addr, std::size_t len, int access, Registration& out) noexcept;
  // With config().access.
  int try_acquire(const void* addr, std::size_t len, Registration& out) noexcept {
    return try_acquire(addr, len, config_.access, out);
  }

  // The same; throw RegistrationError on failure.
  Registration acquire(const void* addr, std::size_t len, int access);
  Registration acquire(const void* addr, std::size_t len) {
    return acquire(addr, len, config_.access);
  }

  // Same as reg.reset().
  void release(Registration& reg) noexcept { reg.reset(); }

  // Applies every queued invalidation now (acquire does it too). Returns the number of
  // entries invalidated.
  std::size_t flush_invalidations() noexcept;

  // Any thread: [addr, addr+len) is being released to the OS. The InvalidationSource::kExternal
  // feed, and harmless with kUcm.
  void invalidate(const void* addr, std::size_t len) noexcept;

  RegCacheStats stats() const noexcept;
  const RegCacheConfig& config() const noexcept { return config_; }
  // The last failure's description ("" before any).
  const std::string& last_error() const noexcept { return last_error_; }
  // Why caching is off ("" when it is on).
  const std::string& caching_disabled_reason() const noexcept { return disabled_reason_; }

 private:
  friend class Registration;
  using EntryMap = std::map<std::uintptr_t, detail::RegEntry*>;

  void release_entry(detail::RegEntry* entry) noexcept;
  // [start, end): the request's pages; addr/len: the request itself, for messages.
  int miss(std::uintptr_t start, std::uintptr_t end, int access, std::uintptr_t addr,
           std::size_t len, Registration& out) noexcept;
  int register_with_retry(std::uintptr_t start, std::uintptr_t end, int access,
                          Registrar::Region& region, std::string& error) noexcept;
  // Removes every cached entry overlapping [start, end) from the map; `count` says whether
  // they count as invalidations (memory released) or were only replaced by a new entry.
  void invalidate_range(std::uintptr_t start, std::uintptr_t end, bool count) noexcept;
  void invalidate_all() noexcept;
  // Takes `entry` out of the map; deregisters it when unused, otherwise it is destroyed by
  // its last release.
  void detach(detail::RegEntry* entry) noexcept;
  void destroy_entry(detail::RegEntry* entry) noexcept;
  void evict_until(std::size_t entries, std::size_t bytes) noexcept;
  void evict_all_unused() noexcept;
  void update_watch() noexcept;
  void fill(Registration& out, detail::RegEntry* entry) noexcept;

  void set_error(int errnum, const char* what, std::uintptr_t addr, std::size_t len,
                 const std::string& cause) noexcept;

  RegCacheConfig config_;
  std::uintptr_t page_mask_;
  std::unique_ptr<Registrar> registrar_;
  EntryMap map_;
  // Unused cached entries, least recently used first.
  protocol::detail::List<detail::RegEntry, &detail::RegEntry::lru> lru_;
  // Every live entry, so that the destructor finds in-use entries that left the map.
  protocol::detail::List<detail::RegEntry, &detail::RegEntry::all> all_;
  InvalidationQueue queue_;
  std::optional<MemEventSubscription> events_;
  bool caching_ = true;
  std::string disabled_reason_;
  std::string last_error_;
  RegCacheStats stats_;
};

}  // namespace rdmx::rendezvous
