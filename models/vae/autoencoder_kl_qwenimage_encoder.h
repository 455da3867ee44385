// The encoder half of diffusers' AutoencoderKLQwenImage for one frame (T = 1), as the Qwen-Image
// edit pipelines use it: pixels -> the DiagonalGaussianDistribution of their latents.
//
// QwenImageEncoder3d: conv_in (causal 3x3x3) -> the down stages (qwenimage_down_block.h) -> mid
// block (residual, attention, residual) -> RMS norm -> SiLU -> conv_out (causal 3x3x3, 2 * z_dim
// channels), then quant_conv (causal 1x1x1). Tensor names as diffusers saves them: "encoder.*"
// and "quant_conv.*" (the "downsample3d" resamples' time_conv is not read: see below).
//
// Why one frame reduces to 2-D (as for the decoder, qwenimage_vae_layers.h): _encode clears the
// feature cache (all None) and runs the encoder over the frames in chunks, frame 0 alone first:
//     iter_ = 1 + (num_frame - 1) // 4
//     for i in range(iter_):
//         self._enc_conv_idx = [0]
//         if i == 0:
//             out = self.encoder(x[:, :, :1, :, :], feat_cache=self._enc_feat_map, ...)
//     enc = self.quant_conv(out)
// With one frame only that chunk runs. Every QwenImageCausalConv3d then gets cache_x = None and
// pads the full causal padding, 2 * padding_t ZERO frames in front (F.pad, constant 0; never
// replicate), so only the last temporal tap meets the frame; a "downsample3d" resample stores the
// frame in its empty cache slot and skips time_conv; quant_conv (kernel 1) is called without a
// cache and pads nothing. Tiling (use_tiling, off unless enable_tiling() is called) and slicing
// (use_slicing, off by default; per-sample anyway) are not reproduced.
//
// Posterior: DiagonalGaussianDistribution(moments): mean, logvar = chunk(moments, 2, dim=1),
// logvar clamped to [-30, 20], std = exp(0.5 * logvar); its mode() is the mean (retrieve_latents'
// sample_mode="argmax").
//
// attn_scales: diffusers' constructor would put a QwenImageAttentionBlock in down_blocks after the
// residual blocks of a stage whose scale is listed, but QwenImageEncoder3d.forward calls every
// down_blocks layer as layer(x, feat_cache, feat_idx) and QwenImageAttentionBlock.forward(self, x)
// takes no cache, so diffusers cannot encode with such a config; Create refuses it
// (UNIMPLEMENTED).
//
// Ownership: holds (refcounted) views of the state dict's tensors, except the causal convs, whose
// used temporal tap is copied. Runs in the dtype and on the device of those tensors. Replicated
// only (rank 0 runs it). Thread-safety: immutable after Create; every call is const and may run
// concurrently.
#pragma once

#include <optional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "models/vae/qwenimage_attention_block.h"
#include "models/vae/qwenimage_down_block.h"
#include "models/vae/qwenimage_residual_block.h"
#include "models/vae/qwenimage_vae_layers.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

class AutoencoderKLQwenImageEncoder {
 public:
  // Errors name the first missing or mis-shaped tensor; UNIMPLEMENTED when attn_scales lists one
  // of the encoder's stage scales (see above).
  static absl::StatusOr<AutoencoderKLQwenImageEncoder> Create(
      const AutoencoderKLQwenImageConfig& config, const sharding::ShardedStateDict& state);

  // Pixels are (B, input_channels, H, W) or one frame of a video (B, input_channels, 1, H, W),
  // B >= 1, any floating dtype, values in [-1, 1] (not checked), H and W positive multiples of
  // `side_multiple` (rounded up to at least 1); cast to the model dtype and moved to its device.
  // INVALID_ARGUMENT (the expected layout, the shape given) otherwise; UNIMPLEMENTED for more
  // than one frame.
  absl::Status ValidatePixels(const torch::Tensor& pixels, int64_t side_multiple) const;

  // quant_conv(encoder(x)) of AutoencoderKLQwenImage._encode: (B, 2 * z_dim, 1, H / s, W / s)
  // (s = scale_factor()), model dtype; pixels valid for scale_factor().
  absl::StatusOr<torch::Tensor> EncodeMoments(const torch::Tensor& pixels) const;
  // vae.encode(x).latent_dist: mean and std (B, z_dim, 1, H / s, W / s), model dtype.
  absl::StatusOr<LatentDistribution> Encode(const torch::Tensor& pixels) const;
  // vae.encode(x).latent_dist.mode(): the mean alone (the first z_dim channels of the moments).
  absl::StatusOr<torch::Tensor> EncodeMode(const torch::Tensor& pixels) const;

  const AutoencoderKLQwenImageConfig& config() const { return config_; }
  // 2^(number of down stages - 1) = 2^len(temperal_downsample): 8 for the real VAE.
  int64_t scale_factor() const { return config_.scale_factor(); }
  torch::ScalarType dtype() const { return conv_in_.weight.scalar_type(); }
  torch::Device device() const { return conv_in_.weight.device(); }

 private:
  AutoencoderKLQwenImageEncoder() = default;
  // (B, input_channels, H, W) in any dtype -> (B, 2 * z_dim, H / s, W / s) in the model dtype.
  torch::Tensor MomentsFrame(const torch::Tensor& frame) const;

  AutoencoderKLQwenImageConfig config_;
  CausalConv3dFrame conv_in_;
  std::vector<QwenDownBlock> down_blocks_;      // one per stage (len(dim_mult))
  std::vector<QwenResidualBlock> mid_resnets_;  // two
  QwenAttentionBlock mid_attention_;
  ChannelRmsNorm norm_out_;
  CausalConv3dFrame conv_out_;
  CausalConv3dFrame quant_conv_;
};

}  // namespace ditserve::vae
