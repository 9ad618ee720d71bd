#include "verbs/error.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rdmx::verbs {

std::string errno_name(int errnum) {
  // strerrorname_np is a glibc extension (2.32+); it returns NULL for unknown values.
  if (const char* name = strerrorname_np(errnum); name != nullptr) {
    return name;
  }
  return "errno " + std::to_string(errnum);
}

std::string format_verb_error(std::string_view verb, int errnum, std::string_view detail) {
  std::string msg(verb);
  if (!detail.empty()) {
    msg += ": ";
    msg += detail;
  }
  msg += ": ";
  msg += std::strerror(errnum);
  msg += " (";
  msg += errno_name(errnum);
  msg += ")";
  return msg;
}

Error::Error(std::string_view verb, int errnum, std::string_view detail)
    : std::runtime_error(format_verb_error(verb, errnum, detail)), verb_(verb), errnum_(errnum) {}

int verb_errno(int rv) noexcept {
  if (rv == 0) {
    return 0;
  }
  if (rv > 0) {
    return rv;
  }
  if (rv == -1) {
    return errno != 0 ? errno : EIO;
  }
  return -rv;
}

void check_rc(int rv, std::string_view verb, std::string_view detail) {
  if (const int e = verb_errno(rv); e != 0) [[unlikely]] {
    throw Error(verb, e, detail);
  }
}

void throw_created_failure(std::string_view verb, std::string_view detail) {
  // Some providers fail without setting errno; EIO beats reporting "Success".
  const int e = errno != 0 ? errno : EIO;
  throw Error(verb, e, detail);
}

void log_verb_failure(std::string_view verb, int errnum, std::string_view detail) noexcept {
  try {
    const std::string line = "rdmx: " + format_verb_error(verb, errnum, detail) + "\n";
    std::fputs(line.c_str(), stderr);
  } catch (...) {
    // Out of memory while formatting: still leave a trace, without allocating.
    std::fputs("rdmx: verbs call failed (could not format the message)\n", stderr);
  }
}

namespace {

// -1: not read from the environment yet.
std::atomic<int> g_log_level{-1};

int level_from_env() noexcept {
  const char* v = std::getenv("RDMX_VERBOSE");
  return (v != nullptr && *v != '\0') ? std::max(0, std::atoi(v)) : 0;
}

}  // namespace

int log_level() noexcept {
  int level = g_log_level.load(std::memory_order_relaxed);
  if (level < 0) [[unlikely]] {
    level = level_from_env();
    int expected = -1;
    if (!g_log_level.compare_exchange_strong(expected, level, std::memory_order_relaxed)) {
      level = expected;  // set_log_level() won the race
    }
  }
  return level;
}

void set_log_level(int level) noexcept {
  g_log_level.store(std::max(0, level), std::memory_order_relaxed);
}

}  // namespace rdmx::verbs
