// The VAE mid-block's spatial self-attention (diffusers Attention with group norm, one head of
// width C, residual connection): tokens are the h*w pixels, channels the features.
// Internal to models/vae.
#pragma once

#include <string>

#include "models/vae/vae_layers.h"

namespace ditserve::vae {

class MidBlockAttention {
 public:
  static absl::StatusOr<MidBlockAttention> Load(const sharding::ShardedStateDict& state,
                                                const std::string& prefix, int64_t channels,
                                                int64_t groups);
  // x: (B, C, h, w) -> same shape.
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  GroupNorm norm_;
  torch::Tensor q_w_, q_b_, k_w_, k_b_, v_w_, v_b_, out_w_, out_b_;
};

}  // namespace ditserve::vae
