// diffusers DownEncoderBlock2D as the VAE Encoder builds it: `num_resnets` ResnetBlock2D (the first
// maps in -> out channels), then optionally Downsample2D with a conv and padding 0: F.pad(x,
// (0, 1, 0, 1)) with zeros (one column right, one row below), then a 3x3 stride-2 conv without
// padding, halving each side. Tensor names: "<prefix>.resnets.{j}.*" and
// "<prefix>.downsamplers.0.conv.*". Internal to models/vae.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/vae/resnet_block.h"
#include "models/vae/vae_layers.h"

namespace ditserve::vae {

class DownEncoderBlock {
 public:
  // Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<DownEncoderBlock> Load(const sharding::ShardedStateDict& state,
                                               const std::string& prefix, int64_t in, int64_t out,
                                               int64_t num_resnets, bool add_downsample,
                                               int64_t groups, VaeActivation act);
  // x: (B, in, H, W) -> (B, out, H/2, W/2) with the downsampler (even H, W), else (B, out, H, W).
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  std::vector<ResnetBlock2D> resnets_;
  std::optional<Conv2d> downsample_conv_;  // 3x3, applied with stride 2 after the asymmetric pad
};

}  // namespace ditserve::vae
