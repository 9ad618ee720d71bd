#include "rendezvous/write_plan.h"

#include <algorithm>
#include <limits>

namespace rdmx::rendezvous {

namespace {

constexpr std::uint64_t kMaxWrites = std::numeric_limits<std::uint32_t>::max();

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) noexcept {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace

WritePlan::WritePlan(std::uint64_t length, std::uint32_t max_write, std::uint32_t depth) noexcept
    : length_(length),
      max_write_(std::max<std::uint32_t>(max_write, 1)),
      depth_(std::max<std::uint32_t>(depth, 1)) {
  if (ceil_div(length_, max_write_) > kMaxWrites) {
    max_write_ = ceil_div(length_, kMaxWrites);
  }
  count_ = length_ == 0 ? 1 : static_cast<std::uint32_t>(ceil_div(length_, max_write_));
  signal_period_ = std::max<std::uint32_t>(depth_ / 2, 1);
}

PlannedWrite WritePlan::at(std::uint32_t index) const noexcept {
  const std::uint64_t offset = std::uint64_t{index} * max_write_;
  const bool last = index + 1 == count_;
  return PlannedWrite{
      .index = index,
      .offset = offset,
      .length = static_cast<std::uint32_t>(std::min(max_write_, length_ - offset)),
      .with_imm = last,
      .signaled = last || (index + 1) % signal_period_ == 0,
  };
}

std::vector<PlannedWrite> plan_writes(std::uint64_t length, std::uint32_t max_write,
                                      std::uint32_t depth) {
  const WritePlan plan(length, max_write, depth);
  std::vector<PlannedWrite> out;
  out.reserve(plan.count());
  for (std::uint32_t i = 0; i < plan.count(); ++i) {
    out.push_back(plan.at(i));
  }
  return out;
}

std::uint64_t WritePipeline::acked_bytes() const noexcept {
  if (acked_ == 0) {
    return 0;
  }
  if (acked_ == plan_.count()) {
    return plan_.length();
  }
  return std::uint64_t{acked_} * plan_.max_write();
}

bool WritePipeline::on_completion(std::uint32_t index) noexcept {
  if (index >= posted_) {
    return false;
  }
  acked_ = std::max(acked_, index + 1);
  return true;
}

}  // namespace rdmx::rendezvous
