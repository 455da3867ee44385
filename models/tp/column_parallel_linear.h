// Column-parallel Linear (styles "colwise" and PackedColwiseParallel), diffusers hooks/tensor_parallel.py.
//
// This rank holds its rows of W and the same rows of b (the loader slices them; packed styles
// slice per block and concatenate the local blocks in block order). Input: replicated, full width.
// Output: this rank's shard of the features, no communication.
// Thread-safety: immutable after construction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"
#include "sharding/state_dict.h"

namespace ditserve::models::tp {

class ColumnParallelLinear : public LinearLayer {
 public:
  // Builds the layer at `path` from sd's tensors and ShardingOf(path), which must be colwise or
  // packed colwise; for packed, the local blocks must sum to the local rows.
  static absl::StatusOr<std::unique_ptr<ColumnParallelLinear>> Load(
      const sharding::ShardedStateDict& sd, const std::string& path);

  torch::Tensor Forward(const torch::Tensor& x) const override;
  int64_t in_features() const override { return weight_.size(1); }
  int64_t out_features() const override { return weight_.size(0); }
  sharding::TpStyle style() const override { return style_; }
  std::vector<int64_t> local_blocks() const override { return local_blocks_; }
  const torch::Tensor& weight() const override { return weight_; }
  const torch::Tensor& bias() const override { return bias_; }

 private:
  torch::Tensor& mutable_weight() override { return weight_; }
  ColumnParallelLinear(torch::Tensor w, torch::Tensor b, sharding::TpStyle style,
                       std::vector<int64_t> blocks)
      : weight_(std::move(w)), bias_(std::move(b)), style_(style), local_blocks_(std::move(blocks)) {}
  torch::Tensor weight_, bias_;
  sharding::TpStyle style_;
  std::vector<int64_t> local_blocks_;
};

}  // namespace ditserve::models::tp
