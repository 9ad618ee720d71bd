// Checked posting of work-request chains (ibv_post_recv, ibv_post_srq_recv, ibv_post_send).
//
// The verbs stop at the first WR they cannot take and return it through bad_wr; everything
// before it is posted, nothing after it is (ibv_post_srq_recv(3)). ChainPostResult reports exactly
// that split so the caller can account for every wr_id. Before calling the verb, the chain is
// checked for the two mistakes a provider may not catch:
//   - num_sge above the queue's max_sge (or negative);
//   - an SGE of length 0, which several HCAs read as 2^31 bytes rather than "empty".
// A WR failing the check is treated exactly like a WR the verb refused: the WRs before it are
// posted, it and the rest are not, and it is reported as bad_wr.
//
// Who uses them: the tests and any caller handing the verbs a chain it did not build itself.
// The datapath does not: eager::SendQueue and eager::SrqPool post WRs whose SGE counts and
// lengths are fixed when the queues are set up (correct by construction), with the raw verbs
// on get() handles and the same bad_wr accounting, so no message pays for a walk of its chain.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace rdmx::verbs {

struct ChainPostResult {
  int error = 0;                 // 0, or the errno value (EINVAL for a WR refused by the check)
  std::size_t posted = 0;        // WRs accepted: the first `posted` of the chain
  const void* bad_wr = nullptr;  // the first WR not posted (== the WR at index `posted`)

  explicit operator bool() const noexcept { return error == 0; }
  std::size_t bad_index() const noexcept { return posted; }
};

ChainPostResult post_srq_recv_checked(ibv_srq* srq, ibv_recv_wr* chain,
                                      std::uint32_t max_sge) noexcept;
ChainPostResult post_recv_checked(ibv_qp* qp, ibv_recv_wr* chain, std::uint32_t max_sge) noexcept;
// For sends, zero-length SGEs are refused too except on IBV_SEND_INLINE WRs (where the provider
// copies `length` bytes and never hands the SGE to the HCA).
ChainPostResult post_send_checked(ibv_qp* qp, ibv_send_wr* chain, std::uint32_t max_sge) noexcept;

}  // namespace rdmx::verbs
