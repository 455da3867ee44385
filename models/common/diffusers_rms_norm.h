// diffusers' own RMSNorm (normalization.py; Qwen-Image's QK-norm and txt_norm). It
// rounds differently from torch.nn.RMSNorm (models/common/rms_norm.h):
//   y = float32(x) * rsqrt(mean(float32(x)², -1) + eps)      (float32)
//   weight bf16/fp16: y = y.to(weight dtype) * weight        (one rounding, then a half-precision op)
//   weight float32:   y = y * weight                         (stays float32, as PyTorch promotes)
//   no weight:        y = y.to(x dtype)
// Thread-safety: immutable after Load.
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

torch::Tensor DiffusersRmsNormForward(const torch::Tensor& x, const torch::Tensor& weight, double eps);

class DiffusersRmsNorm {
 public:
  // Reads "<path>.weight" (1-D).
  static absl::StatusOr<DiffusersRmsNorm> Load(const ModuleLoader& loader, const std::string& path,
                                               double eps);
  torch::Tensor Forward(const torch::Tensor& x) const {
    return DiffusersRmsNormForward(x, weight_, eps_);
  }
  int64_t dim() const { return weight_.size(0); }
  const torch::Tensor& weight() const { return weight_; }
  double eps() const { return eps_; }

 private:
  DiffusersRmsNorm(torch::Tensor weight, double eps) : weight_(std::move(weight)), eps_(eps) {}
  torch::Tensor weight_;
  double eps_;
};

}  // namespace ditserve::models
