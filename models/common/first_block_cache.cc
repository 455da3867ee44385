#include "models/common/first_block_cache.h"

#include <limits>
#include <utility>

#include "comm/agree.h"

namespace ditserve::models {

double FirstBlockCache::Compare(const torch::Tensor& head_residual) const {
  if (!head_residual_.defined()) return std::numeric_limits<double>::quiet_NaN();
  // diffusers' _should_compute_remaining_blocks, op for op: both means and the quotient in the
  // residuals' dtype, then .item() to a double compared with the threshold.
  const torch::Tensor absmean = (head_residual - head_residual_).abs().mean();
  const torch::Tensor prev_absmean = head_residual_.abs().mean();
  return (absmean / prev_absmean).item<double>();
}

bool FirstBlockCache::ComputesAt(double compared) const {
  return !head_residual_.defined() || compared > threshold_;  // NaN (0 / 0) caches, as in diffusers
}

bool FirstBlockCache::ShouldComputeLocally(const torch::Tensor& head_residual) const {
  return ComputesAt(Compare(head_residual));
}

absl::StatusOr<bool> FirstBlockCache::Decide(const torch::Tensor& head_residual,
                                             comm::Communicator& comm) {
  last_compared_ = std::numeric_limits<double>::quiet_NaN();
  bool local = true;
  if (comm.rank() == 0) {
    last_compared_ = Compare(head_residual);
    local = ComputesAt(last_compared_);
  }
  if (comm.world_size() == 1) return local;
  return comm::FlagOfRank(comm, local, /*root=*/0, head_residual.device());
}

void FirstBlockCache::Computed(torch::Tensor head_residual, torch::Tensor tail_residual) {
  head_residual_ = std::move(head_residual);
  tail_residual_ = std::move(tail_residual);
  ++full_passes_;
}

}  // namespace ditserve::models
