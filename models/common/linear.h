// A replicated Linear: y = x · Wᵀ + b (torch.nn.Linear), W [out, in], optional b [out].
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"
#include "sharding/state_dict.h"

namespace ditserve::models {

class Linear : public LinearLayer {
 public:
  // Reads "<path>.weight" (2-D) and, when present, "<path>.bias" ([out]); INVALID_ARGUMENT on a
  // shape mismatch, NOT_FOUND without a weight.
  static absl::StatusOr<std::unique_ptr<Linear>> Load(const sharding::ShardedStateDict& sd,
                                                      const std::string& path);
  Linear(torch::Tensor weight, torch::Tensor bias)
      : weight_(std::move(weight)), bias_(std::move(bias)) {}

  torch::Tensor Forward(const torch::Tensor& x) const override;
  torch::Tensor ForwardJoined(const std::vector<torch::Tensor>& parts) const override;
  int64_t in_features() const override { return weight_.size(1); }
  int64_t out_features() const override { return weight_.size(0); }
  sharding::TpStyle style() const override { return sharding::TpStyle::kReplicated; }
  const torch::Tensor& weight() const override { return weight_; }
  const torch::Tensor& bias() const override { return bias_; }

 private:
  torch::Tensor& mutable_weight() override { return weight_; }
  torch::Tensor weight_;
  torch::Tensor bias_;  // undefined when the layer has none
};

// Reads "<path>.weight" (2-D) and, when present, "<path>.bias" (1-D); shared by the
// tensor-parallel layers, which check the shapes against their style themselves.
absl::Status ReadLinearTensors(const sharding::ShardedStateDict& sd, const std::string& path,
                               torch::Tensor* weight, torch::Tensor* bias);

}  // namespace ditserve::models
