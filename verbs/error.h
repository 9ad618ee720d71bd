// Errors of the verbs layer, and the two check helpers for libibverbs' two return conventions.
//
// libibverbs reports failure in two different ways, and mixing them up hides errors:
//   - creators (ibv_create_*, ibv_alloc_pd, ibv_reg_mr, ibv_open_device ...) return NULL and set
//     errno                                                        -> check_created()
//   - int calls (ibv_modify_*, ibv_destroy_*, ibv_post_*, ibv_query_*) return the errno value
//     itself, 0 on success; `rv < 0` never fires for them          -> check_rc()
// Setup paths throw Error; destructors only log (log_verb_failure) because they must not throw.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace rdmx::verbs {

// A failed verb: what was called, the errno value and a human explanation. what() reads
// "<verb>: <detail>: <strerror text> (<ERRNO NAME>)", e.g.
// "ibv_create_srq: max_wr 2000000 exceeds device max_srq_wr 1048576: Invalid argument (EINVAL)".
class Error : public std::runtime_error {
 public:
  Error(std::string_view verb, int errnum, std::string_view detail = {});

  const std::string& verb() const noexcept { return verb_; }
  int errnum() const noexcept { return errnum_; }

 private:
  std::string verb_;
  int errnum_;
};

// "EINVAL" for EINVAL, "errno 1234" for values glibc has no name for.
std::string errno_name(int errnum);

// Formats the one-line message used by Error and by log_verb_failure.
std::string format_verb_error(std::string_view verb, int errnum, std::string_view detail);

// Normalises an int verb's return value to an errno value (0 = success). Providers follow the
// "return the errno value" convention, but a few older paths return -1 with errno set or -errno;
// those are mapped instead of being mistaken for success or for a huge positive code.
int verb_errno(int rv) noexcept;

// For int verbs: throws Error(verb, errno value) unless rv is 0.
void check_rc(int rv, std::string_view verb, std::string_view detail = {});

// For creators: throws Error(verb, errno) when p is NULL, otherwise returns p. Must be called
// right after the verb, before anything else can overwrite errno.
template <typename T>
T* check_created(T* p, std::string_view verb, std::string_view detail = {});

// For destructors and other paths that must not throw: one line on stderr naming the verb and
// errno, then carry on.
void log_verb_failure(std::string_view verb, int errnum, std::string_view detail = {}) noexcept;

// Verbosity of this layer's informational lines (not of failures, which log_verb_failure always
// prints): expected device quirks such as rxe never sending IBV_EVENT_QP_LAST_WQE_REACHED are
// reported in the callers' reports and printed only at level >= 1, so a library user (e.g. an
// MPI job's MPI_Finalize) sees nothing by default. Starts at RDMX_VERBOSE (0 when unset);
// set_log_level() raises or lowers it for the whole process.
int log_level() noexcept;
void set_log_level(int level) noexcept;

// ---------------------------------------------------------------------------------------------

[[noreturn]] void throw_created_failure(std::string_view verb, std::string_view detail);

template <typename T>
T* check_created(T* p, std::string_view verb, std::string_view detail) {
  if (p == nullptr) [[unlikely]] {
    throw_created_failure(verb, detail);
  }
  return p;
}

}  // namespace rdmx::verbs
