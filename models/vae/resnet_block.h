// diffusers ResnetBlock2D without a time embedding, as the VAE decoder uses it:
// y = conv2(act(GN2(conv1(act(GN1(x)))))); out = shortcut(x) + y, where the shortcut is a 1x1
// conv iff the channel count changes (output_scale_factor is 1). Internal to models/vae.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/vae/vae_layers.h"

namespace ditserve::vae {

class ResnetBlock2D {
 public:
  static absl::StatusOr<ResnetBlock2D> Load(const sharding::ShardedStateDict& state,
                                            const std::string& prefix, int64_t in, int64_t out,
                                            int64_t groups, VaeActivation act);
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  GroupNorm norm1_, norm2_;
  Conv2d conv1_, conv2_;
  std::optional<Conv2d> shortcut_;
  VaeActivation act_ = VaeActivation::kSilu;
};

// The `count` resnets "<prefix>.resnets.<i>" of an encoder or decoder block: the first maps `in`
// to `out` channels, the others keep `out`.
absl::StatusOr<std::vector<ResnetBlock2D>> LoadResnets(const sharding::ShardedStateDict& state,
                                                       const std::string& prefix, int64_t in,
                                                       int64_t out, int64_t count, int64_t groups,
                                                       VaeActivation act);
// Each resnet of `resnets` in turn.
torch::Tensor ForwardResnets(const std::vector<ResnetBlock2D>& resnets, const torch::Tensor& x);

}  // namespace ditserve::vae
