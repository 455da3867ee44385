// One stage of QwenImageEncoder3d's down path for one cache-free frame (see
// qwenimage_vae_layers.h): num_res_blocks QwenImageResidualBlock (the first maps in -> out
// channels), then optionally QwenImageResample in "downsample2d" or "downsample3d" mode.
//
// diffusers keeps the stages' layers in ONE flat nn.ModuleList, encoder.down_blocks, numbered
// across stages (for num_res_blocks 2: 0, 1 the residual blocks of stage 0, 2 its resample, 3, 4
// those of stage 1, ...); a stage is loaded from its first index in that list, and num_layers()
// says where the next stage starts.
//
// The resample: nn.ZeroPad2d((0, 1, 0, 1)) (one zero column right, one zero row below), then
// Conv2d(out, out, 3, stride 2) without padding ("<i>.resample.1"), halving even sides. For
// "downsample3d" the reference's first chunk finds its cache slot None, stores the frame there
// and returns WITHOUT running time_conv:
//     if feat_cache[idx] is None:
//         feat_cache[idx] = x.clone()
//         feat_idx[0] += 1
// so both modes compute the same thing here and time_conv's weights are not read. Internal to
// models/vae.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/vae/qwenimage_residual_block.h"
#include "models/vae/vae_layers.h"

namespace ditserve::vae {

enum class QwenDownsampleMode { kNone, kDownsample2d, kDownsample3d };

class QwenDownBlock {
 public:
  // Reads "<list_prefix>.<first_index + j>.*" (residual blocks j < num_res_blocks, then the
  // resample's "resample.1"). Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<QwenDownBlock> Load(const sharding::ShardedStateDict& state,
                                            const std::string& list_prefix, int64_t first_index,
                                            int64_t in, int64_t out, int64_t num_res_blocks,
                                            QwenDownsampleMode mode);
  // Entries of the flat list this stage takes: num_res_blocks (+ 1 with a resample).
  int64_t num_layers() const;
  // x: (N, in, H, W) -> (N, out, H / 2, W / 2) with a resample (even H, W), else (N, out, H, W).
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  std::vector<QwenResidualBlock> resnets_;
  std::optional<Conv2d> downsample_conv_;  // 3x3, applied with stride 2 after the asymmetric pad
};

}  // namespace ditserve::vae
