#include "models/vae/resnet_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<ResnetBlock2D> ResnetBlock2D::Load(const sharding::ShardedStateDict& state,
                                                  const std::string& prefix, int64_t in,
                                                  int64_t out, int64_t groups, VaeActivation act) {
  ResnetBlock2D r;
  r.act_ = act;
  ASSIGN_OR_RETURN(r.norm1_, GroupNorm::Load(state, prefix + ".norm1", in, groups, kVaeNormEps));
  ASSIGN_OR_RETURN(r.conv1_, Conv2d::Load(state, prefix + ".conv1", in, out, 3));
  ASSIGN_OR_RETURN(r.norm2_, GroupNorm::Load(state, prefix + ".norm2", out, groups, kVaeNormEps));
  ASSIGN_OR_RETURN(r.conv2_, Conv2d::Load(state, prefix + ".conv2", out, out, 3));
  if (in != out) {
    ASSIGN_OR_RETURN(r.shortcut_, Conv2d::Load(state, prefix + ".conv_shortcut", in, out, 1));
  }
  return r;
}

absl::StatusOr<std::vector<ResnetBlock2D>> LoadResnets(const sharding::ShardedStateDict& state,
                                                       const std::string& prefix, int64_t in,
                                                       int64_t out, int64_t count, int64_t groups,
                                                       VaeActivation act) {
  std::vector<ResnetBlock2D> resnets;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(ResnetBlock2D r,
                     ResnetBlock2D::Load(state, absl::StrCat(prefix, ".resnets.", i),
                                         i == 0 ? in : out, out, groups, act));
    resnets.push_back(std::move(r));
  }
  return resnets;
}

torch::Tensor ForwardResnets(const std::vector<ResnetBlock2D>& resnets, const torch::Tensor& x) {
  torch::Tensor h = x;
  for (const ResnetBlock2D& r : resnets) h = r.Forward(h);
  return h;
}

torch::Tensor ResnetBlock2D::Forward(const torch::Tensor& x) const {
  auto h = conv1_(Activate(act_, norm1_(x)));
  h = conv2_(Activate(act_, norm2_(h)));
  return (shortcut_ ? (*shortcut_)(x) : x) + h;
}

}  // namespace ditserve::vae
