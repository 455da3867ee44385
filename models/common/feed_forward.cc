#include "models/common/feed_forward.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::models {

absl::StatusOr<FeedForward> FeedForward::Load(const ModuleLoader& loader, const std::string& prefix) {
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> in, loader.LoadLinear(JoinPath(prefix, "net.0.proj")));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> out, loader.LoadLinear(JoinPath(prefix, "net.2")));
  if (out->in_features() != in->out_features()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": net.2 takes ", out->in_features(), " features on this rank but net.0.proj gives ",
        in->out_features(), " (", sharding::TpStyleName(in->style()), " then ",
        sharding::TpStyleName(out->style()), ")"));
  }
  return FeedForward(std::move(in), std::move(out));
}

torch::Tensor LinearThenGeluTanh(const LinearLayer& layer, const torch::Tensor& x) {
  if (!IsLocalLinear(layer) || layer.has_lora() || layer.is_fp8()) return GeluTanh(layer.Forward(x));
  return compat::LinearGeluTanh(x, layer.weight(), layer.bias());
}

torch::Tensor FeedForward::Forward(const torch::Tensor& x) const {
  return proj_out_->Forward(LinearThenGeluTanh(*proj_in_, x));
}

}  // namespace ditserve::models
