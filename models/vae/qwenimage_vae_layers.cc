#include "models/vae/qwenimage_vae_layers.h"

#include <cmath>

#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<CausalConv3dFrame> CausalConv3dFrame::Load(const sharding::ShardedStateDict& state,
                                                          const std::string& prefix, int64_t in,
                                                          int64_t out, int64_t kernel_t,
                                                          int64_t kernel) {
  CausalConv3dFrame c;
  ASSIGN_OR_RETURN(auto w, state.GetWithShape(prefix + ".weight",
                                              {out, in, kernel_t, kernel, kernel}));
  ASSIGN_OR_RETURN(c.bias, state.GetWithShape(prefix + ".bias", {out}));
  c.weight = w.select(2, kernel_t - 1).contiguous();
  return c;
}

torch::Tensor CausalConv3dFrame::operator()(const torch::Tensor& x) const {
  return torch::conv2d(x, weight, bias, /*stride=*/1, /*padding=*/weight.size(-1) / 2);
}

absl::StatusOr<ChannelRmsNorm> ChannelRmsNorm::Load(const sharding::ShardedStateDict& state,
                                                    const std::string& prefix, int64_t channels,
                                                    bool images) {
  ChannelRmsNorm n;
  const std::vector<int64_t> shape =
      images ? std::vector<int64_t>{channels, 1, 1} : std::vector<int64_t>{channels, 1, 1, 1};
  ASSIGN_OR_RETURN(auto gamma, state.GetWithShape(prefix + ".gamma", shape));
  n.gamma = gamma.view({channels, 1, 1});
  n.scale = std::sqrt(static_cast<double>(channels));
  return n;
}

torch::Tensor ChannelRmsNorm::operator()(const torch::Tensor& x) const {
  const bool upcast = x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16;
  auto xf = upcast ? x.to(torch::kFloat) : x;
  // F.normalize(x, p=2, dim=1, eps=1e-12): x / ||x||_2.clamp_min(eps).
  auto normalized = (xf / xf.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12)).to(x.scalar_type());
  return normalized * scale * gamma;
}

torch::Tensor UpsampleNearestExact2x(const torch::Tensor& x) {
  // What F.interpolate(scale_factor=(2.0, 2.0), mode="nearest-exact") dispatches to: output size
  // floor(2 * side), source index floor((dst + 0.5) / 2) from the given scales. (Called directly:
  // LibTorch 1.13's functional::interpolate warns about align_corners for this mode.)
  const int64_t h = x.size(-2), w = x.size(-1);
  auto up = at::_upsample_nearest_exact2d(x.to(torch::kFloat), {2 * h, 2 * w}, 2.0, 2.0);
  return up.to(x.scalar_type());
}

}  // namespace ditserve::vae
