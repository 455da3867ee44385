// QwenImageAttentionBlock (the decoder mid block's single-head spatial self-attention), per frame:
// x -> QwenImageRMS_norm (images=True) -> to_qkv (1x1 conv, C -> 3C) -> tokens (N, 1, HW, 3C)
// split into q | k | v along channels -> SDPA (scale 1/sqrt(C)) -> proj (1x1 conv) -> + x.
// Internal to models/vae.
#pragma once

#include <string>

#include "models/vae/qwenimage_vae_layers.h"
#include "models/vae/vae_layers.h"

namespace ditserve::vae {

class QwenAttentionBlock {
 public:
  static absl::StatusOr<QwenAttentionBlock> Load(const sharding::ShardedStateDict& state,
                                                 const std::string& prefix, int64_t channels);
  // x: (N, C, H, W) -> same shape.
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  ChannelRmsNorm norm_;
  Conv2d to_qkv_, proj_;
};

}  // namespace ditserve::vae
