// QwenImageUpBlock for one cache-free frame: num_res_blocks + 1 residual blocks (the first maps
// in -> out channels), then optionally QwenImageResample in "upsample2d" or "upsample3d" mode:
// nearest-exact x2 in space (float32) and Conv2d(out, out / 2, 3, padding 1) ("resample.1").
// For "upsample3d" the reference's first chunk only marks its cache slot "Rep" and does not run
// time_conv (no temporal doubling for the first frame), so both modes compute the same thing
// here and time_conv's weights are not read. Internal to models/vae.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/vae/qwenimage_residual_block.h"
#include "models/vae/vae_layers.h"

namespace ditserve::vae {

enum class QwenUpsampleMode { kNone, kUpsample2d, kUpsample3d };

class QwenUpBlock {
 public:
  static absl::StatusOr<QwenUpBlock> Load(const sharding::ShardedStateDict& state,
                                          const std::string& prefix, int64_t in, int64_t out,
                                          int64_t num_res_blocks, QwenUpsampleMode mode);
  // x: (N, in, H, W) -> (N, out, H, W), or (N, out / 2, 2H, 2W) with an upsampler.
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  std::vector<QwenResidualBlock> resnets_;
  std::optional<Conv2d> upsample_conv_;
};

}  // namespace ditserve::vae
