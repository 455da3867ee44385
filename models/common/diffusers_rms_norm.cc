#include "models/common/diffusers_rms_norm.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::models {

torch::Tensor DiffusersRmsNormForward(const torch::Tensor& x, const torch::Tensor& weight,
                                      double eps) {
  auto xf = x.to(torch::kFloat32);
  auto variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  // x (input dtype) * fp32 rsqrt promotes to fp32, i.e. float32(x) * rsqrt(...).
  auto y = xf * torch::rsqrt(variance + eps);
  if (!weight.defined()) return y.to(x.scalar_type());
  if (weight.scalar_type() == torch::kBFloat16 || weight.scalar_type() == torch::kFloat16) {
    y = y.to(weight.scalar_type());
  }
  return y * weight;
}

absl::StatusOr<DiffusersRmsNorm> DiffusersRmsNorm::Load(const ModuleLoader& loader,
                                                        const std::string& path, double eps) {
  ASSIGN_OR_RETURN(auto w, loader.Tensor(path + ".weight"));
  if (w.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".weight: expected 1-D, got ", w.dim(), "-D"));
  }
  return DiffusersRmsNorm(std::move(w), eps);
}

}  // namespace ditserve::models
