// diffusers UpDecoderBlock2D: `num_resnets` ResnetBlock2D (the first maps in -> out channels),
// then optionally Upsample2D (nearest-neighbour x2, then a 3x3 conv). Internal to models/vae.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/vae/resnet_block.h"
#include "models/vae/vae_layers.h"

namespace ditserve::vae {

class UpDecoderBlock {
 public:
  static absl::StatusOr<UpDecoderBlock> Load(const sharding::ShardedStateDict& state,
                                             const std::string& prefix, int64_t in, int64_t out,
                                             int64_t num_resnets, bool add_upsample,
                                             int64_t groups, VaeActivation act);
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  std::vector<ResnetBlock2D> resnets_;
  std::optional<Conv2d> upsample_conv_;
};

}  // namespace ditserve::vae
