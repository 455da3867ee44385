#include "models/common/first_block_cache.h"

#include <utility>

#include "comm/agree.h"

namespace ditserve::models {

bool FirstBlockCache::ShouldComputeLocally(const torch::Tensor& head_residual) const {
  if (!head_residual_.defined()) return true;
  // diffusers' _should_compute_remaining_blocks, op for op: both means and the quotient in the
  // residuals' dtype, then .item() to a double compared with the threshold.
  const torch::Tensor absmean = (head_residual - head_residual_).abs().mean();
  const torch::Tensor prev_absmean = head_residual_.abs().mean();
  const double diff = (absmean / prev_absmean).item<double>();
  return diff > threshold_;
}

absl::StatusOr<bool> FirstBlockCache::Decide(const torch::Tensor& head_residual,
                                             comm::Communicator& comm) const {
  const bool local = comm.rank() == 0 ? ShouldComputeLocally(head_residual) : true;
  if (comm.world_size() == 1) return local;
  return comm::FlagOfRank(comm, local, /*root=*/0, head_residual.device());
}

void FirstBlockCache::Computed(torch::Tensor head_residual, torch::Tensor tail_residual) {
  head_residual_ = std::move(head_residual);
  tail_residual_ = std::move(tail_residual);
  ++full_passes_;
}

}  // namespace ditserve::models
