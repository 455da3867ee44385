// QwenImageResidualBlock for one cache-free frame (see qwenimage_vae_layers.h):
// out = shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))), norms QwenImageRMS_norm
// (images=False), convs causal 3x3x3 (last temporal tap), shortcut a 1x1x1 causal conv iff the
// channel count changes. Dropout is the identity at inference. Internal to models/vae.
#pragma once

#include <optional>
#include <string>

#include "models/vae/qwenimage_vae_layers.h"

namespace ditserve::vae {

class QwenResidualBlock {
 public:
  static absl::StatusOr<QwenResidualBlock> Load(const sharding::ShardedStateDict& state,
                                                const std::string& prefix, int64_t in,
                                                int64_t out);
  // x: (N, in, H, W) -> (N, out, H, W).
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  ChannelRmsNorm norm1_, norm2_;
  CausalConv3dFrame conv1_, conv2_;
  std::optional<CausalConv3dFrame> shortcut_;
};

}  // namespace ditserve::vae
