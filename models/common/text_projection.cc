#include "models/common/text_projection.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::models {

absl::StatusOr<PixArtAlphaTextProjection> PixArtAlphaTextProjection::Load(
    const ModuleLoader& loader, const std::string& prefix, Activation act) {
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> l1, loader.LoadLinear(JoinPath(prefix, "linear_1")));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> l2, loader.LoadLinear(JoinPath(prefix, "linear_2")));
  if (l2->in_features() != l1->out_features()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": linear_2 takes ", l2->in_features(),
                                                   " features, linear_1 gives ",
                                                   l1->out_features()));
  }
  return PixArtAlphaTextProjection(std::move(l1), std::move(l2), act);
}

torch::Tensor PixArtAlphaTextProjection::Forward(const torch::Tensor& x) const {
  auto h = linear_1_->Forward(x);
  h = act_ == Activation::kSilu ? torch::silu(h) : torch::gelu(h, "tanh");
  return linear_2_->Forward(h);
}

}  // namespace ditserve::models
