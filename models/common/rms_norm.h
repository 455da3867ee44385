// torch.nn.RMSNorm(dim, eps, elementwise_affine=True) over the last dim (the FLUX QK-norm):
// y = x / sqrt(mean(x², -1) + eps) * weight, through compat::RmsNorm so the rounding follows the
// linked LibTorch exactly as PyTorch of the same version does.
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

class TorchRmsNorm {
 public:
  // Reads "<path>.weight" (1-D).
  static absl::StatusOr<TorchRmsNorm> Load(const ModuleLoader& loader, const std::string& path,
                                           double eps);
  torch::Tensor Forward(const torch::Tensor& x) const;
  int64_t dim() const { return weight_.size(0); }
  const torch::Tensor& weight() const { return weight_; }
  double eps() const { return eps_; }

 private:
  TorchRmsNorm(torch::Tensor weight, double eps) : weight_(std::move(weight)), eps_(eps) {}
  torch::Tensor weight_;
  double eps_;
};

}  // namespace ditserve::models
