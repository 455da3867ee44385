// The primitive layers of AutoencoderKLQwenImage's decoder for one frame, as plain weight holders
// with a const forward on 4-D (N, C, H, W) maps (the frame axis T = 1 removed); plain nn.Conv2d
// layers use vae_layers.h's Conv2d. Internal to models/vae.
//
// Why one frame reduces to 2-D: AutoencoderKLQwenImage._decode calls the decoder chunk by chunk
// with a feature cache `feat_cache` that starts as all None; frame 0 is the first chunk, so every
// QwenImageCausalConv3d gets cache_x = None and pads its input with the full causal padding,
// 2 * padding_t zero frames in front and none behind. For the decoder's convs (kernel (3, 3, 3)
// with padding 1, or kernel 1 with padding 0) the only temporal tap that meets the real frame is
// the last one, so the output is conv2d(x, weight[:, :, kt - 1], bias, padding k / 2) exactly (the
// other taps only add zeros). QwenImageResample in "upsample3d" mode records "Rep" in its cache
// slot on the first chunk and skips its time_conv, so it upsamples in space only (see
// qwenimage_up_block.h).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

// QwenImageCausalConv3d (stride 1, temporal kernel kt with causal padding kt - 1, spatial kernel k
// with padding k / 2) applied to the first, cache-free chunk of one frame. Holds the last temporal
// tap of the checkpoint's (out, in, kt, k, k) weight as a contiguous (out, in, k, k) copy, so the
// 3-D weight itself is not kept.
struct CausalConv3dFrame {
  torch::Tensor weight;  // (out, in, k, k)
  torch::Tensor bias;    // (out,)
  static absl::StatusOr<CausalConv3dFrame> Load(const sharding::ShardedStateDict& state,
                                                const std::string& prefix, int64_t in,
                                                int64_t out, int64_t kernel_t, int64_t kernel);
  // x: (N, in, H, W) -> (N, out, H, W).
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// QwenImageRMS_norm, channel_first, without bias: F.normalize(x, dim=1) (x / max(||x||_2, 1e-12)
// over the channels, computed in float32 for half types and cast back) * sqrt(C) * gamma. The
// checkpoint's gamma is (C, 1, 1, 1) for images=False (residual blocks, norm_out) or (C, 1, 1)
// for images=True (attention); both act as per-channel scales of a (N, C, H, W) map.
struct ChannelRmsNorm {
  torch::Tensor gamma;  // (C, 1, 1)
  double scale = 1.0;   // sqrt(C)
  static absl::StatusOr<ChannelRmsNorm> Load(const sharding::ShardedStateDict& state,
                                             const std::string& prefix, int64_t channels,
                                             bool images);
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// QwenImageUpsample(scale_factor=(2, 2), mode="nearest-exact"): computed in float32, cast back.
torch::Tensor UpsampleNearestExact2x(const torch::Tensor& x);

}  // namespace ditserve::vae
