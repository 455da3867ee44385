#include "models/vae/vae_layers.h"

#include <vector>

#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<Conv2d> Conv2d::Load(const sharding::ShardedStateDict& state,
                                    const std::string& prefix, int64_t in, int64_t out,
                                    int64_t kernel) {
  Conv2d c;
  ASSIGN_OR_RETURN(c.weight, state.GetWithShape(prefix + ".weight", {out, in, kernel, kernel}));
  ASSIGN_OR_RETURN(c.bias, state.GetWithShape(prefix + ".bias", {out}));
  return c;
}

torch::Tensor Conv2d::operator()(const torch::Tensor& x) const {
  const int64_t pad = weight.size(-1) / 2;
  return torch::conv2d(x, weight, bias, /*stride=*/1, /*padding=*/pad);
}

torch::Tensor PadRightBottomStride2(const torch::Tensor& x, const Conv2d& conv) {
  auto padded = torch::constant_pad_nd(x, {0, 1, 0, 1}, 0);
  const std::vector<int64_t> stride = {2, 2}, no_padding = {0, 0};
  return torch::conv2d(padded, conv.weight, conv.bias, stride, no_padding);
}

absl::StatusOr<GroupNorm> GroupNorm::Load(const sharding::ShardedStateDict& state,
                                          const std::string& prefix, int64_t channels,
                                          int64_t groups, double eps) {
  GroupNorm n;
  ASSIGN_OR_RETURN(n.weight, state.GetWithShape(prefix + ".weight", {channels}));
  ASSIGN_OR_RETURN(n.bias, state.GetWithShape(prefix + ".bias", {channels}));
  n.groups = groups;
  n.eps = eps;
  return n;
}

torch::Tensor GroupNorm::operator()(const torch::Tensor& x) const {
  return torch::group_norm(x, groups, weight, bias, eps);
}

torch::Tensor Activate(VaeActivation act, const torch::Tensor& x) {
  switch (act) {
    case VaeActivation::kSilu: return torch::silu(x);
    case VaeActivation::kMish: return torch::mish(x);
    case VaeActivation::kGelu: return torch::gelu(x);
    case VaeActivation::kRelu: return torch::relu(x);
  }
  return x;
}

}  // namespace ditserve::vae
