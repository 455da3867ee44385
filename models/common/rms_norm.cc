#include "models/common/rms_norm.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::models {

absl::StatusOr<TorchRmsNorm> TorchRmsNorm::Load(const ModuleLoader& loader,
                                                const std::string& path, double eps) {
  ASSIGN_OR_RETURN(auto w, loader.Tensor(path + ".weight"));
  if (w.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".weight: expected 1-D, got ", w.dim(), "-D"));
  }
  return TorchRmsNorm(std::move(w), eps);
}

torch::Tensor TorchRmsNorm::Forward(const torch::Tensor& x) const {
  return compat::RmsNorm(x, weight_, eps_);
}

}  // namespace ditserve::models
