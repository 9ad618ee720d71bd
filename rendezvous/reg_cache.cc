#include "rendezvous/reg_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iterator>
#include <new>

#include "verbs/error.h"
#include "verbs/mr.h"

namespace rdmx::rendezvous {

using detail::RegEntry;

namespace {

// Copies without letting bad_alloc escape a noexcept path.
void assign_noexcept(std::string& dst, const char* src) noexcept {
  try {
    dst = src;
  } catch (...) {
    dst.clear();
  }
}

class VerbsRegistrar final : public Registrar {
 public:
  explicit VerbsRegistrar(const verbs::ProtectionDomain& pd) : pd_(&pd) {}

  int register_range(void* addr, std::size_t len, int access, Region& out,
                     std::string& error) noexcept override {
    try {
      auto mr = std::make_unique<verbs::MemoryRegion>(
          verbs::MemoryRegion::create(*pd_, addr, len, access));
      out.lkey = mr->lkey();
      out.rkey = mr->rkey();
      out.handle = mr.release();
      return 0;
    } catch (const verbs::Error& e) {
      assign_noexcept(error, e.what());
      return e.errnum() != 0 ? e.errnum() : EIO;
    } catch (const std::bad_alloc&) {
      assign_noexcept(error, "out of memory for the region descriptor");
      return ENOMEM;
    }
  }

  void deregister(Region& region) noexcept override {
    // ~MemoryRegion calls ibv_dereg_mr and logs a failure.
    delete static_cast<verbs::MemoryRegion*>(region.handle);
    region.handle = nullptr;
  }

 private:
  const verbs::ProtectionDomain* pd_;
};

bool is_pinning_limit(int errnum) {
  return errnum == ENOMEM || errnum == EAGAIN || errnum == EPERM;
}

std::uintptr_t page_mask() {
  const long page = sysconf(_SC_PAGESIZE);
  return static_cast<std::uintptr_t>(page > 0 ? page : 4096) - 1;
}

}  // namespace

std::unique_ptr<Registrar> make_verbs_registrar(const verbs::ProtectionDomain& pd) {
  return std::make_unique<VerbsRegistrar>(pd);
}

// ---- Registration ---------------------------------------------------------------------------

Registration& Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
    lkey_ = std::exchange(other.lkey_, 0);
    rkey_ = std::exchange(other.rkey_, 0);
    base_ = std::exchange(other.base_, 0);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

void Registration::reset() noexcept {
  if (entry_ != nullptr) {
    cache_->release_entry(entry_);
  }
  cache_ = nullptr;
  entry_ = nullptr;
  lkey_ = 0;
  rkey_ = 0;
  base_ = 0;
  length_ = 0;
}

// ---- RegCache -------------------------------------------------------------------------------

RegCache::RegCache(const verbs::ProtectionDomain& pd, const RegCacheConfig& config)
    : RegCache(make_verbs_registrar(pd), config) {}

RegCache::RegCache(std::unique_ptr<Registrar> registrar, const RegCacheConfig& config)
    : config_(config),
      page_mask_(page_mask()),
      registrar_(std::move(registrar)),
      queue_(config.invalidation_queue_capacity) {
  queue_.watch_nothing();
  if (config_.source == InvalidationSource::kUcm) {
    events_.emplace(queue_);
    if (!events_->active()) {
      // Without invalidation a cached registration can outlive its memory and be handed out
      // for whatever is mapped there next: register per use instead.
      caching_ = false;
      disabled_reason_ = events_->error();
      std::fprintf(stderr, "rdmx: registration cache disabled, registering per use: %s\n",
                   disabled_reason_.c_str());
      events_.reset();
    }
  }
}

RegCache::~RegCache() {
  // Unsubscribe first: no hook may push while the queue is going away.
  events_.reset();
  std::size_t in_use = 0;
  while (RegEntry* e = all_.front()) {
    if (e->refs > 0) {
      ++in_use;
    }
    if (e->cached) {
      map_.erase(e->start);
      if (e->refs == 0) {
        lru_.remove(e);
      }
    }
    destroy_entry(e);
  }
  if (in_use > 0) {
    std::fprintf(stderr,
                 "rdmx: registration cache destroyed with %zu registrations in use; they were "
                 "deregistered and their handles must not be used\n",
                 in_use);
  }
}

void RegCache::set_error(int errnum, const char* what, std::uintptr_t addr, std::size_t len,
                         const std::string& cause) noexcept {
  char head[160];
  std::snprintf(head, sizeof(head), "rdmx registration cache: %s %zu bytes at %#zx: ", what, len,
                static_cast<std::size_t>(addr));
  try {
    last_error_ = head;
    last_error_ += cause.empty() ? verbs::format_verb_error("register", errnum, {}) : cause;
  } catch (...) {
    assign_noexcept(last_error_, head);
  }
}

int RegCache::try_acquire(const void* addr, std::size_t len, int access,
                          Registration& out) noexcept {
  out.reset();
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t end_byte = a + len;
  const std::uintptr_t end = (end_byte + page_mask_) & ~page_mask_;
  if (len == 0 || end_byte < a || end < end_byte) [[unlikely]] {
    ++stats_.failures;
    set_error(EINVAL, "cannot register", a, len,
              len == 0 ? "empty range" : "the range wraps around the address space");
    return EINVAL;
  }
  if (queue_.pending()) [[unlikely]] {
    flush_invalidations();
  }
  const std::uintptr_t start = a & ~page_mask_;

  // The only entry that can contain [start, end) is the last one starting at or before start
  // (cached entries do not overlap).
  auto it = map_.upper_bound(start);
  if (it != map_.begin()) {
    RegEntry* e = std::prev(it)->second;
    if (e->end >= end && (e->access & access) == access) [[likely]] {
      if (e->refs++ == 0) {
        lru_.remove(e);
        ++stats_.in_use_entries;
      }
      ++stats_.hits;
      fill(out, e);
      return 0;
    }
  }
  return miss(start, end, access, a, len, out);
}

Registration RegCache::acquire(const void* addr, std::size_t len, int access) {
  Registration reg;
  if (const int e = try_acquire(addr, len, access, reg); e != 0) {
    throw RegistrationError(e, last_error_);
  }
  return reg;
}

int RegCache::miss(std::uintptr_t start, std::uintptr_t end, int access, std::uintptr_t addr,
                   std::size_t len, Registration& out) noexcept {
  ++stats_.misses;

  // What to register: the request, grown over every cached entry it overlaps (range and flags),
  // so that the new entry serves their users too.
  std::uintptr_t reg_start = start;
  std::uintptr_t reg_end = end;
  int reg_access = access;
  if (caching_ && config_.merge) {
    auto it = map_.upper_bound(start);
    if (it != map_.begin() && std::prev(it)->second->end > start) {
      --it;
    }
    for (; it != map_.end() && it->first < end; ++it) {
      reg_start = std::min(reg_start, it->second->start);
      reg_end = std::max(reg_end, it->second->end);
      reg_access |= it->second->access;
    }
  }
  bool merged = reg_start != start || reg_end != end || reg_access != access;

  // Room for one more entry. Entries the new one will replace are counted too: conservative.
  if (caching_) {
    const std::size_t size = reg_end - reg_start;
    evict_until(config_.max_entries > 0 ? config_.max_entries - 1 : 0,
                config_.max_bytes > size ? config_.max_bytes - size : 0);
    // Events about the range while it is being registered must not be filtered out.
    queue_.watch(map_.empty() ? reg_start : std::min(reg_start, map_.begin()->first),
                 map_.empty() ? reg_end : std::max(reg_end, map_.rbegin()->second->end));
  }

  Registrar::Region region;
  std::string error;
  int err = register_with_retry(reg_start, reg_end, reg_access, region, error);
  if (err != 0 && merged) {
    // The union may span pages or ask for rights the request does not (a read-only or
    // unmapped page, another mapping): the caller asked only for its own pages and flags.
    ++stats_.merge_fallbacks;
    merged = false;
    reg_start = start;
    reg_end = end;
    reg_access = access;
    error.clear();
    err = register_with_retry(reg_start, reg_end, reg_access, region, error);
  }
  if (err != 0) {
    ++stats_.failures;
    set_error(err, "cannot register", addr, len, error);
    update_watch();
    return err;
  }

  RegEntry* entry = new (std::nothrow) RegEntry;
  if (entry == nullptr) {
    registrar_->deregister(region);
    ++stats_.failures;
    set_error(ENOMEM, "cannot track", addr, len, "out of memory");
    update_watch();
    return ENOMEM;
  }
  entry->start = reg_start;
  entry->end = reg_end;
  entry->access = reg_access;
  entry->region = region;
  entry->refs = 1;
  entry->cached = false;
  all_.push_back(entry);
  ++stats_.registrations;
  ++stats_.entries;
  stats_.bytes += entry->bytes();
  ++stats_.in_use_entries;
  if (merged) {
    ++stats_.merges;
  }

  if (caching_) {
    // Cached entries never overlap: the ones the new entry overlaps leave the map (they are
    // contained in it after a merge; after a fallback they only overlap it).
    invalidate_range(reg_start, reg_end, /*count=*/false);
    try {
      map_.emplace(reg_start, entry);
      entry->cached = true;
    } catch (...) {
      // No map node: the entry serves this use only.
    }
    update_watch();
  }
  fill(out, entry);
  return 0;
}

int RegCache::register_with_retry(std::uintptr_t start, std::uintptr_t end, int access,
                                  Registrar::Region& region, std::string& error) noexcept {
  // Page-aligned from the caller's pointer; ibv_reg_mr takes it back as a pointer.
  void* addr = reinterpret_cast<void*>(start);  // NOLINT(performance-no-int-to-ptr)
  int err = registrar_->register_range(addr, end - start, access, region, error);
  if (err != 0 && is_pinning_limit(err) && !lru_.empty()) {
    // Our own idle registrations may be what holds the pinned-memory budget.
    evict_all_unused();
    error.clear();
    err = registrar_->register_range(addr, end - start, access, region, error);
  }
  return err;
}

void RegCache::release_entry(RegEntry* entry) noexcept {
  if (--entry->refs > 0) {
    return;
  }
  --stats_.in_use_entries;
  if (!entry->cached) {
    destroy_entry(entry);
    return;
  }
  lru_.push_back(entry);
  if (stats_.entries > config_.max_entries || stats_.bytes > config_.max_bytes) {
    evict_until(config_.max_entries, config_.max_bytes);
    update_watch();
  }
}

std::size_t RegCache::flush_invalidations() noexcept {
  const std::uint64_t before = stats_.invalidations;
  queue_.drain(
      [this] {
        ++stats_.queue_overflows;
        invalidate_all();
      },
      [this](std::span<const AddrRange> batch) {
        for (const AddrRange& r : batch) {
          ++stats_.unmap_events;
          invalidate_range(r.start, r.end, /*count=*/true);
        }
      });
  update_watch();
  return static_cast<std::size_t>(stats_.invalidations - before);
}

void RegCache::invalidate(const void* addr, std::size_t len) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t end = a + len < a ? UINTPTR_MAX : a + len;
  queue_.push(a, end);
}

void RegCache::invalidate_range(std::uintptr_t start, std::uintptr_t end, bool count) noexcept {
  auto it = map_.upper_bound(start);
  if (it != map_.begin() && std::prev(it)->second->end > start) {
    --it;
  }
  while (it != map_.end() && it->first < end) {
    RegEntry* e = it->second;
    it = map_.erase(it);
    if (count) {
      ++stats_.invalidations;
    }
    detach(e);
  }
}

void RegCache::invalidate_all() noexcept {
  for (auto it = map_.begin(); it != map_.end();) {
    RegEntry* e = it->second;
    it = map_.erase(it);
    ++stats_.invalidations;
    detach(e);
  }
}

void RegCache::detach(RegEntry* entry) noexcept {
  // The map node is already gone.
  entry->cached = false;
  if (entry->refs == 0) {
    lru_.remove(entry);
    destroy_entry(entry);
  }
}

void RegCache::destroy_entry(RegEntry* entry) noexcept {
  all_.remove(entry);
  registrar_->deregister(entry->region);
  ++stats_.deregistrations;
  --stats_.entries;
  stats_.bytes -= entry->bytes();
  delete entry;
}

void RegCache::evict_until(std::size_t entries, std::size_t bytes) noexcept {
  while ((stats_.entries > entries || stats_.bytes > bytes) && !lru_.empty()) {
    RegEntry* e = lru_.front();
    lru_.remove(e);
    map_.erase(e->start);
    e->cached = false;
    ++stats_.evictions;
    destroy_entry(e);
  }
}

void RegCache::evict_all_unused() noexcept {
  evict_until(0, 0);
}

void RegCache::update_watch() noexcept {
  if (map_.empty()) {
    queue_.watch_nothing();
  } else {
    queue_.watch(map_.begin()->first, map_.rbegin()->second->end);
  }
}

void RegCache::fill(Registration& out, RegEntry* entry) noexcept {
  out.cache_ = this;
  out.entry_ = entry;
  out.lkey_ = entry->region.lkey;
  out.rkey_ = entry->region.rkey;
  out.base_ = entry->start;
  out.length_ = entry->bytes();
}

RegCacheStats RegCache::stats() const noexcept {
  RegCacheStats s = stats_;
  s.cached_entries = map_.size();
  s.unmap_events_filtered = queue_.filtered();
  s.caching = caching_;
  return s;
}

}  // namespace rdmx::rendezvous
