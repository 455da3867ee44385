#include "models/vae/qwenimage_residual_block.h"

#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<QwenResidualBlock> QwenResidualBlock::Load(const sharding::ShardedStateDict& state,
                                                          const std::string& prefix, int64_t in,
                                                          int64_t out) {
  QwenResidualBlock r;
  ASSIGN_OR_RETURN(r.norm1_, ChannelRmsNorm::Load(state, prefix + ".norm1", in, /*images=*/false));
  ASSIGN_OR_RETURN(r.conv1_, CausalConv3dFrame::Load(state, prefix + ".conv1", in, out, 3, 3));
  ASSIGN_OR_RETURN(r.norm2_, ChannelRmsNorm::Load(state, prefix + ".norm2", out, /*images=*/false));
  ASSIGN_OR_RETURN(r.conv2_, CausalConv3dFrame::Load(state, prefix + ".conv2", out, out, 3, 3));
  if (in != out) {
    ASSIGN_OR_RETURN(r.shortcut_,
                     CausalConv3dFrame::Load(state, prefix + ".conv_shortcut", in, out, 1, 1));
  }
  return r;
}

torch::Tensor QwenResidualBlock::Forward(const torch::Tensor& x) const {
  auto h = shortcut_ ? (*shortcut_)(x) : x;
  auto y = conv1_(torch::silu(norm1_(x)));
  y = conv2_(torch::silu(norm2_(y)));
  return y + h;
}

}  // namespace ditserve::vae
