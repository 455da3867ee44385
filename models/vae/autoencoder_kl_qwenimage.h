// diffusers' AutoencoderKLQwenImage, decode path for a single frame (text-to-image): post_quant_conv
// (causal 1x1x1) and QwenImageDecoder3d (conv_in -> mid block (residual, attention, residual) ->
// up blocks -> RMS norm -> SiLU -> conv_out), then the clamp to [-1, 1]; plus the
// QwenImagePipeline steps around it (unpack tokens, latents_mean / latents_std de-normalisation,
// frame 0). How the causal video decoder reduces to 2-D for one frame: qwenimage_vae_layers.h.
//
// Tensor names as diffusers saves them: "post_quant_conv.*", "decoder.*" (the encoder, quant_conv
// and the upsamplers' time_conv -- unused for a first frame -- are not read).
//
// Ownership: holds (refcounted) views of the state dict's tensors, except the causal convs, whose
// used temporal tap is copied (so dropping the state dict after Create frees the 3-D weights). Runs
// in the dtype and on the device of those tensors. Replicated only (rank 0 runs it).
// Thread-safety: immutable after Create; the decode calls are const and may run concurrently.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "models/vae/qwenimage_attention_block.h"
#include "models/vae/qwenimage_residual_block.h"
#include "models/vae/qwenimage_up_block.h"
#include "models/vae/qwenimage_vae_layers.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

class AutoencoderKLQwenImage {
 public:
  // Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<AutoencoderKLQwenImage> Create(const AutoencoderKLQwenImageConfig& config,
                                                       const sharding::ShardedStateDict& state);

  // vae.decode(z): z (B, z_dim, 1, h, w) (one frame; de-normalised), cast to the model
  // dtype/device. Returns (B, input_channels, 1, h * 2^k, w * 2^k) clamped to [-1, 1], model dtype
  // (k = len(dim_mult) - 1 upsamplers; 8x for the real VAE). More than one frame is refused.
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& z) const;

  // The pipeline's decode of unpacked latents `latents` (B, z_dim, 1, h, w): to the VAE dtype,
  // latents / (1 / latents_std) + latents_mean, Decode, frame 0. Returns (B, input_channels, H, W)
  // in [-1, 1]; PostprocessImage makes the image.
  absl::StatusOr<torch::Tensor> DecodeLatents(const torch::Tensor& latents) const;
  // The same from the packed tokens the denoising loop holds, (B, (h/2)(w/2), 4 * z_dim), for a
  // latent of h x w (h = 2 * (height // 16) for the real VAE).
  absl::StatusOr<torch::Tensor> DecodePackedLatents(const torch::Tensor& tokens,
                                                    int64_t latent_height,
                                                    int64_t latent_width) const;

  const AutoencoderKLQwenImageConfig& config() const { return config_; }
  torch::ScalarType dtype() const { return conv_in_.weight.scalar_type(); }
  torch::Device device() const { return conv_in_.weight.device(); }

 private:
  AutoencoderKLQwenImage() = default;
  absl::Status ValidateLatents(const torch::Tensor& z) const;
  // (B, z_dim, h, w) -> (B, input_channels, H, W), clamped.
  torch::Tensor DecodeFrame(const torch::Tensor& z) const;

  AutoencoderKLQwenImageConfig config_;
  CausalConv3dFrame post_quant_conv_;
  CausalConv3dFrame conv_in_;
  std::vector<QwenResidualBlock> mid_resnets_;  // two
  QwenAttentionBlock mid_attention_;
  std::vector<QwenUpBlock> up_blocks_;
  ChannelRmsNorm norm_out_;
  CausalConv3dFrame conv_out_;
};

}  // namespace ditserve::vae
