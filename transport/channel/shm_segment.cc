#include "transport/channel/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>

namespace rdmx::transport::shm {

namespace {

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

// /dev/shm's size, for the message of a segment that could not be made.
std::string shm_space() {
  struct statvfs s {};
  if (statvfs("/dev/shm", &s) != 0) {
    return "/dev/shm is missing";
  }
  const auto kib = [](unsigned long long b) { return std::to_string(b >> 10) + " KiB"; };
  return "/dev/shm has " + kib(static_cast<unsigned long long>(s.f_bavail) * s.f_frsize) +
         " free of " + kib(static_cast<unsigned long long>(s.f_blocks) * s.f_frsize);
}

}  // namespace

std::uint64_t node_identity() noexcept {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, id);
  char host[256] = {};
  (void)gethostname(host, sizeof(host) - 1);
  id += '/';
  id += host;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (const char c : id) {
    h = (h ^ static_cast<std::uint8_t>(c)) * 1099511628211ull;
  }
  return h != 0 ? h : 1;
}

std::string segment_name(std::uint32_t pid, std::uint64_t instance) {
  char name[64];
  std::snprintf(name, sizeof(name), "/rdmx-%u-%016llx", pid,
                static_cast<unsigned long long>(instance));
  return name;
}

bool Segment::map(int fd, std::size_t bytes, std::string* error) {
  fd_ = fd;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = "mmap of " + std::to_string(bytes >> 10) + " KiB failed: " + errno_text(errno);
    return false;
  }
  hdr_ = static_cast<SegmentHeader*>(p);
  bytes_ = bytes;
  return true;
}

bool Segment::create(const Geometry& g, std::uint32_t pid, std::uint64_t instance,
                     std::uint32_t expected, std::string* error) {
  (void)remove_stale_segments();
  const std::string name = segment_name(pid, instance);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    *error = "cannot create /dev/shm" + name + ": " + errno_text(errno) +
             "; RDMX_SHM=0 (mtl_rdmx_shm 0) sends node-local messages through the device";
    return false;
  }
  // Sparse: ftruncate reserves nothing. The header's page is allocated now, each ring's when
  // it is claimed (claim).
  int e = ftruncate(fd, static_cast<off_t>(g.bytes())) != 0 ? errno : 0;
  if (e == 0) {
    e = posix_fallocate(fd, 0, kCacheLine);
  }
  if (e != 0) {
    (void)close(fd);
    (void)shm_unlink(name.c_str());
    *error = "cannot size /dev/shm" + name + " to " + std::to_string(g.bytes() >> 10) +
             " KiB: " + errno_text(e) + "; " + shm_space() +
             ": lower RDMX_SHM_RINGS / RDMX_SHM_SLOTS (mtl_rdmx_shm_rings, mtl_rdmx_shm_slots), "
             "or RDMX_SHM=0";
    return false;
  }
  if (!map(fd, g.bytes(), error)) {
    (void)shm_unlink(name.c_str());
    return false;
  }
  name_ = name;
  hdr_->version = kSegmentVersion;
  hdr_->rings = g.rings;
  hdr_->slots = g.slots;
  hdr_->slot_size = g.slot_size;
  hdr_->owner_pid = pid;
  hdr_->expected = expected;
  hdr_->owner_instance = instance;
  hdr_->owner_addr = reinterpret_cast<std::uintptr_t>(hdr_);
  hdr_->claimed.store(0, std::memory_order_relaxed);
  hdr_->attached.store(0, std::memory_order_relaxed);
  // Last: a peer that maps the file before this sees no magic and retries its attach later.
  __atomic_store_n(&hdr_->magic, kSegmentMagic, __ATOMIC_RELEASE);
  return true;
}

bool Segment::attach(std::uint32_t pid, std::uint64_t instance, std::uint64_t sender_uid,
                     std::string* error) {
  const std::string name = segment_name(pid, instance);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    *error = "cannot open /dev/shm" + name + ": " + errno_text(errno) +
             (errno == ENOENT ? " (the peer is gone, or does not share this /dev/shm: give "
                                "containers the same one, or set RDMX_SHM=0)"
                              : "");
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < kCacheLine) {
    (void)close(fd);
    *error = "/dev/shm" + name + " is not a segment yet";
    return false;
  }
  if (!map(fd, static_cast<std::size_t>(st.st_size), error)) {
    return false;
  }
  const Geometry g = geometry();
  if (__atomic_load_n(&hdr_->magic, __ATOMIC_ACQUIRE) != kSegmentMagic ||
      hdr_->version != kSegmentVersion || hdr_->owner_instance != instance ||
      g.slot_size <= kSlotPrefix || g.slot_size % kCacheLine != 0 || g.slots == 0 ||
      g.bytes() > bytes_) {
    *error = "/dev/shm" + name + " is not a segment of this rdmx version";
    return false;
  }
  ring_ = claim(sender_uid, error);
  if (ring_ == kNoRing) {
    *error = "/dev/shm" + name + ": " + *error;
    return false;
  }
  const std::uint32_t n = hdr_->attached.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (hdr_->expected != 0 && n == hdr_->expected) {
    (void)shm_unlink(name.c_str());  // everyone is in: nothing can be left behind from now on
  }
  return true;
}

Segment::~Segment() {
  unlink();
  if (hdr_ != nullptr) {
    (void)munmap(hdr_, bytes_);
  }
  if (fd_ >= 0) {
    (void)close(fd_);
  }
}

void Segment::unlink() noexcept {
  if (!name_.empty()) {
    (void)shm_unlink(name_.c_str());  // ENOENT: the last peer to attach removed it
    name_.clear();
  }
}

std::uint32_t Segment::claim(std::uint64_t sender_uid, std::string* error) noexcept {
  const std::uint32_t k = hdr_->claimed.fetch_add(1, std::memory_order_acq_rel);
  if (k >= hdr_->rings) {
    *error = "no ring left (" + std::to_string(hdr_->rings) +
             " taken): raise RDMX_SHM_RINGS (mtl_rdmx_shm_rings)";
    return kNoRing;
  }
  RingControl* c = layout(k).control;
  const Geometry g = geometry();
  const auto offset = reinterpret_cast<std::byte*>(c) - reinterpret_cast<std::byte*>(hdr_);
  if (const int e = posix_fallocate(fd_, offset, static_cast<off_t>(g.ring_bytes())); e != 0) {
    // The ring stays claimed and unused: its consumer never sees a message in it.
    *error = "no room for a ring of " + std::to_string(g.ring_bytes() >> 10) +
             " KiB: " + errno_text(e) + "; " + shm_space() +
             ": lower RDMX_SHM_SLOTS (mtl_rdmx_shm_slots), free /dev/shm, or set RDMX_SHM=0";
    return kNoRing;
  }
  c->sender_uid = sender_uid;
  return k;
}

RingLayout Segment::layout(std::uint32_t ring) const noexcept {
  const Geometry g = geometry();
  auto* c = reinterpret_cast<RingControl*>(reinterpret_cast<std::byte*>(hdr_) + kCacheLine +
                                           ring * g.ring_bytes());
  return {.control = c,
          .slots = reinterpret_cast<std::byte*>(c + 1),
          .nslots = g.slots,
          .slot_size = g.slot_size};
}

bool Segment::cma_works(pid_t pid) const noexcept {
  std::uint64_t magic = 0;
  iovec local{&magic, sizeof(magic)};
  iovec remote{reinterpret_cast<void*>(hdr_->owner_addr), sizeof(magic)};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(magic) && magic == kSegmentMagic;
}

int remove_stale_segments() noexcept {
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) {
    return 0;
  }
  int removed = 0;
  const uid_t me = geteuid();
  while (const dirent* e = readdir(d)) {
    unsigned pid = 0;
    unsigned long long instance = 0;
    if (std::sscanf(e->d_name, "rdmx-%u-%llx", &pid, &instance) != 2 || pid == 0) {
      continue;
    }
    struct stat st {};
    const std::string path = std::string("/dev/shm/") + e->d_name;
    if (stat(path.c_str(), &st) != 0 || st.st_uid != me) {
      continue;
    }
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      removed += shm_unlink((std::string("/") + e->d_name).c_str()) == 0 ? 1 : 0;
    }
  }
  closedir(d);
  return removed;
}

}  // namespace rdmx::transport::shm
