// Shared receive queue (ibv_create_srq / ibv_destroy_srq, ibv_modify_srq, ibv_query_srq,
// ibv_post_srq_recv).
//
// Lifecycle rules enforced here (ibv_create_srq(3), ibv_modify_srq(3)):
//   - the attributes actually granted (max_wr, max_sge may exceed the request) are read back
//     with ibv_query_srq and exposed by attr(); posting checks against them;
//   - a request above the device limits is refused before calling the verb, naming the limit
//     (EINVAL); a device without SRQ support (max_srq == 0) is refused with ENOSYS;
//   - ibv_destroy_srq "fails if any queue pair is still associated with this SRQ": QueuePair
//     registers itself and destroy() returns EBUSY while any is attached, whatever the provider
//     would do;
//   - outstanding receive WRs and an armed limit whose event never came do not block destroy.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "verbs/pd.h"
#include "verbs/post.h"
#include "verbs/use_count.h"

namespace rdmx::verbs {

// Throws Error("ibv_create_srq", ENOSYS) when the device has no SRQs (max_srq == 0) and
// Error(EINVAL) when max_wr/max_sge is zero or above max_srq_wr/max_srq_sge. Pure: takes the
// device attributes as plain data so that it is testable without a device.
void check_srq_request(const ibv_device_attr& dev, std::uint32_t max_wr, std::uint32_t max_sge);

class SharedReceiveQueue {
 public:
  static SharedReceiveQueue create(const ProtectionDomain& pd, std::uint32_t max_wr,
                                   std::uint32_t max_sge = 1);

  SharedReceiveQueue(SharedReceiveQueue&& other) noexcept;
  SharedReceiveQueue& operator=(SharedReceiveQueue&& other) noexcept;
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;
  ~SharedReceiveQueue();

  ibv_srq* get() const noexcept { return srq_; }
  // Granted attributes, read back with ibv_query_srq right after creation (>= the request).
  const ibv_srq_attr& attr() const noexcept { return granted_; }
  std::uint32_t requested_max_wr() const noexcept { return requested_max_wr_; }
  std::uint32_t requested_max_sge() const noexcept { return requested_max_sge_; }

  // ibv_query_srq now: srq_limit reads back 0 once the limit event has fired (it is one-shot).
  ibv_srq_attr query() const;

  // Arms the low-watermark: one IBV_EVENT_SRQ_LIMIT_REACHED when fewer than `limit` WRs remain.
  // The event disarms it; arm again after handling it. Throws Error (EINVAL if limit > max_wr).
  void arm_limit(std::uint32_t limit);

  // One ibv_post_srq_recv for the whole chain, checked first (see post.h).
  ChainPostResult post(ibv_recv_wr* chain) noexcept {
    return post_srq_recv_checked(srq_, chain, granted_.max_sge);
  }

  int attached_qps() const noexcept { return qps_.count(); }
  // QueuePair registers itself here for its lifetime.
  UseRef register_qp() const { return qps_.acquire(); }

  // ibv_destroy_srq now. EBUSY (without calling the verb) while QPs are attached. WRs still
  // posted are discarded without completions: the owner reclaims their buffers itself.
  [[nodiscard]] int destroy() noexcept;

 private:
  SharedReceiveQueue(ibv_srq* srq, const ibv_srq_attr& granted, std::uint32_t max_wr,
                     std::uint32_t max_sge) noexcept;

  ibv_srq* srq_ = nullptr;
  ibv_srq_attr granted_{};
  std::uint32_t requested_max_wr_ = 0;
  std::uint32_t requested_max_sge_ = 0;
  UseCounter qps_;
};

}  // namespace rdmx::verbs
