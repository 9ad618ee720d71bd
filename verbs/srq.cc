#include "verbs/srq.h"

#include <cerrno>
#include <string>
#include <utility>

#include "verbs/error.h"

namespace rdmx::verbs {

void check_srq_request(const ibv_device_attr& dev, std::uint32_t max_wr, std::uint32_t max_sge) {
  if (dev.max_srq <= 0) {
    throw Error("ibv_create_srq", ENOSYS, "device reports max_srq 0: no SRQ support");
  }
  if (max_wr == 0 || max_wr > static_cast<std::uint32_t>(dev.max_srq_wr)) {
    throw Error("ibv_create_srq", EINVAL,
                "max_wr " + std::to_string(max_wr) + (max_wr == 0 ? " is zero" : " exceeds") +
                    " device max_srq_wr " + std::to_string(dev.max_srq_wr));
  }
  if (max_sge == 0 || max_sge > static_cast<std::uint32_t>(dev.max_srq_sge)) {
    throw Error("ibv_create_srq", EINVAL,
                "max_sge " + std::to_string(max_sge) + (max_sge == 0 ? " is zero" : " exceeds") +
                    " device max_srq_sge " + std::to_string(dev.max_srq_sge));
  }
}

SharedReceiveQueue::SharedReceiveQueue(ibv_srq* srq, const ibv_srq_attr& granted,
                                       std::uint32_t max_wr, std::uint32_t max_sge) noexcept
    : srq_(srq), granted_(granted), requested_max_wr_(max_wr), requested_max_sge_(max_sge) {}

SharedReceiveQueue SharedReceiveQueue::create(const ProtectionDomain& pd, std::uint32_t max_wr,
                                              std::uint32_t max_sge) {
  ibv_device_attr dev{};
  check_rc(ibv_query_device(pd.context(), &dev), "ibv_query_device");
  check_srq_request(dev, max_wr, max_sge);

  ibv_srq_init_attr init{};
  init.attr.max_wr = max_wr;
  init.attr.max_sge = max_sge;
  errno = 0;
  ibv_srq* srq =
      check_created(ibv_create_srq(pd.get(), &init), "ibv_create_srq",
                    "max_wr " + std::to_string(max_wr) + " max_sge " + std::to_string(max_sge));
  // Own it before the query can throw, so that a failed query does not leak the SRQ.
  SharedReceiveQueue result(srq, init.attr, max_wr, max_sge);
  result.granted_ = result.query();
  return result;
}

SharedReceiveQueue::SharedReceiveQueue(SharedReceiveQueue&& other) noexcept
    : srq_(std::exchange(other.srq_, nullptr)),
      granted_(other.granted_),
      requested_max_wr_(other.requested_max_wr_),
      requested_max_sge_(other.requested_max_sge_),
      qps_(std::move(other.qps_)) {}

SharedReceiveQueue& SharedReceiveQueue::operator=(SharedReceiveQueue&& other) noexcept {
  if (this != &other) {
    SharedReceiveQueue old(std::move(*this));
    srq_ = std::exchange(other.srq_, nullptr);
    granted_ = other.granted_;
    requested_max_wr_ = other.requested_max_wr_;
    requested_max_sge_ = other.requested_max_sge_;
    qps_ = std::move(other.qps_);
  }
  return *this;
}

SharedReceiveQueue::~SharedReceiveQueue() {
  if (const int e = destroy(); e != 0) {
    log_verb_failure("ibv_destroy_srq", e,
                     std::to_string(qps_.count()) + " QPs still attached; SRQ leaked");
  }
}

ibv_srq_attr SharedReceiveQueue::query() const {
  ibv_srq_attr attr{};
  check_rc(ibv_query_srq(srq_, &attr), "ibv_query_srq");
  return attr;
}

void SharedReceiveQueue::arm_limit(std::uint32_t limit) {
  ibv_srq_attr attr{};
  attr.srq_limit = limit;
  check_rc(
      ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), "ibv_modify_srq",
      "srq_limit " + std::to_string(limit) + " (max_wr " + std::to_string(granted_.max_wr) + ")");
}

int SharedReceiveQueue::destroy() noexcept {
  if (srq_ == nullptr) {
    return 0;
  }
  if (qps_.count() > 0) {
    return EBUSY;  // the man page's rule; some providers do not enforce it
  }
  const int e = verb_errno(ibv_destroy_srq(srq_));
  if (e == 0) {
    srq_ = nullptr;
  }
  return e;
}

}  // namespace rdmx::verbs
