// Row-parallel Linear (styles "rowwise", PackedRowwiseParallel and rowwise_split_input), diffusers hooks/tensor_parallel.py.
//
// This rank holds its columns of W (packed: its columns of each block, concatenated in block order)
// and the full bias. Input: this rank's shard of the last dim — or, for rowwise_split_input, the
// full replicated input, of which the layer takes its own contiguous slice [r·in/n, (r+1)·in/n).
// Output: y = AllReduceSum(x_r · W_rᵀ) + b — exactly one sum all-reduce per call (never a gather),
// the bias added once after it on every rank (diffusers hooks/tensor_parallel.py's recommendation).
//
// Call order: every rank of the group calls Forward on the same layers in the same order with
// same-shaped inputs (it is a collective). A failed all-reduce throws StatusError (keeping the
// communicator's code); the model's entry point turns it into a Status.
// Ownership: borrows the Communicator, which must outlive the layer. One thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"
#include "sharding/state_dict.h"
#include "comm/communicator.h"

namespace ditserve::models::tp {

class RowParallelLinear : public LinearLayer {
 public:
  // Builds the layer at `path` from sd's tensors and ShardingOf(path), which must be a rowwise
  // style. `comm` must belong to the group the state dict was sliced for (same rank and size).
  static absl::StatusOr<std::unique_ptr<RowParallelLinear>> Load(
      const sharding::ShardedStateDict& sd, const std::string& path, comm::Communicator* comm);

  torch::Tensor Forward(const torch::Tensor& x) const override;
  // One partial GEMM per part, one all-reduce of their sum (LinearLayer::ForwardJoined).
  torch::Tensor ForwardJoined(const std::vector<torch::Tensor>& parts) const override;
  // The width the caller feeds in: the local shard, or the full width for split-input.
  int64_t in_features() const override;
  int64_t out_features() const override { return weight_.size(0); }
  sharding::TpStyle style() const override { return style_; }
  std::vector<int64_t> local_blocks() const override { return local_blocks_; }
  const torch::Tensor& weight() const override { return weight_; }
  const torch::Tensor& bias() const override { return bias_; }

 private:
  torch::Tensor& mutable_weight() override { return weight_; }
  // The one all-reduce of this rank's contiguous partial product, then the bias once.
  torch::Tensor ReduceThenBias(torch::Tensor partial) const;
  RowParallelLinear(torch::Tensor w, torch::Tensor b, sharding::TpStyle style,
                    std::vector<int64_t> blocks, comm::Communicator* comm)
      : weight_(std::move(w)),
        bias_(std::move(b)),
        style_(style),
        local_blocks_(std::move(blocks)),
        comm_(comm) {}
  torch::Tensor weight_, bias_;
  sharding::TpStyle style_;
  std::vector<int64_t> local_blocks_;
  comm::Communicator* comm_;
};

}  // namespace ditserve::models::tp
