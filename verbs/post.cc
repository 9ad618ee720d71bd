#include "verbs/post.h"

#include <cerrno>

#include "verbs/error.h"

namespace rdmx::verbs {

namespace {

template <typename Wr>
bool sges_ok(const Wr& wr, std::uint32_t max_sge, bool allow_zero_length) {
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > max_sge) {
    return false;
  }
  if (!allow_zero_length) {
    for (int i = 0; i < wr.num_sge; ++i) {
      if (wr.sg_list[i].length == 0) {
        return false;
      }
    }
  }
  return true;
}

// Checks the chain, cuts it before the first bad WR, posts the prefix with `verb`, restores the
// chain and reports the split.
template <typename Wr, typename Verb, typename ZeroOk>
ChainPostResult post_checked(Wr* chain, std::uint32_t max_sge, ZeroOk zero_ok, Verb verb) noexcept {
  ChainPostResult result;
  if (chain == nullptr) {
    return result;  // providers dereference the head unconditionally
  }
  Wr* prev = nullptr;
  Wr* bad = nullptr;
  std::size_t good = 0;
  for (Wr* wr = chain; wr != nullptr; wr = wr->next) {
    if (!sges_ok(*wr, max_sge, zero_ok(*wr))) {
      bad = wr;
      break;
    }
    prev = wr;
    ++good;
  }
  if (bad != nullptr) {
    result.error = EINVAL;
    result.bad_wr = bad;
    if (prev == nullptr) {
      return result;  // the very first WR is bad: nothing to post
    }
    prev->next = nullptr;  // post only the good prefix
  }
  Wr* verb_bad = nullptr;
  const int e = verb_errno(verb(chain, &verb_bad));
  if (prev != nullptr && bad != nullptr) {
    prev->next = bad;
  }
  if (e != 0) {
    result.error = e;
    // Everything from verb_bad on is not posted; when the provider leaves bad_wr unset, assume
    // nothing was posted rather than claim WRs that may never complete.
    Wr* stop = verb_bad != nullptr ? verb_bad : chain;
    result.bad_wr = stop;
    for (Wr* wr = chain; wr != stop && wr != nullptr; wr = wr->next) {
      ++result.posted;
    }
    return result;
  }
  result.posted = good;
  return result;
}

}  // namespace

ChainPostResult post_srq_recv_checked(ibv_srq* srq, ibv_recv_wr* chain,
                                      std::uint32_t max_sge) noexcept {
  return post_checked(
      chain, max_sge, [](const ibv_recv_wr&) { return false; },
      [srq](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_srq_recv(srq, wr, bad); });
}

ChainPostResult post_recv_checked(ibv_qp* qp, ibv_recv_wr* chain, std::uint32_t max_sge) noexcept {
  return post_checked(
      chain, max_sge, [](const ibv_recv_wr&) { return false; },
      [qp](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); });
}

ChainPostResult post_send_checked(ibv_qp* qp, ibv_send_wr* chain, std::uint32_t max_sge) noexcept {
  return post_checked(
      chain, max_sge, [](const ibv_send_wr& wr) { return (wr.send_flags & IBV_SEND_INLINE) != 0; },
      [qp](ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); });
}

}  // namespace rdmx::verbs
