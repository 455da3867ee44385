// The decoder half of diffusers' AutoencoderKL (FLUX.1's VAE): latents -> image in about [-1, 1].
//
// [post_quant_conv] -> conv_in -> mid block (resnet, [attention], resnet) -> up blocks
// (layers_per_block + 1 resnets each, nearest x2 upsample + conv after all but the last)
// -> GroupNorm -> SiLU -> conv_out. Tensor names: "decoder.*" and "post_quant_conv.*" as diffusers
// saves them; the encoder's tensors are ignored.
//
// Ownership: holds (refcounted) views of the state dict's tensors; the state dict may be dropped
// after Create. Runs in the dtype and on the device of those tensors. Replicated only (rank 0 runs
// it). Thread-safety: immutable after Create; the decode calls are const and may run concurrently.
#pragma once

#include <optional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/mid_block_attention.h"
#include "models/vae/resnet_block.h"
#include "models/vae/up_decoder_block.h"
#include "models/vae/vae_layers.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

class AutoencoderKLDecoder {
 public:
  // Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<AutoencoderKLDecoder> Create(const AutoencoderKLConfig& config,
                                                     const sharding::ShardedStateDict& state);

  // vae.decode(z): z (B, latent_channels, h, w) in VAE latent space (already unscaled), cast to the
  // model dtype/device. Returns (B, out_channels, h * scale_factor, w * scale_factor), model dtype.
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& z) const;

  // The pipeline's decode of denoised latents: Decode(latents / scaling_factor + shift_factor),
  // the affine map done in the model dtype as the pipeline does it.
  absl::StatusOr<torch::Tensor> DecodeLatents(const torch::Tensor& latents) const;

  const AutoencoderKLConfig& config() const { return config_; }
  torch::ScalarType dtype() const { return conv_in_.weight.scalar_type(); }
  torch::Device device() const { return conv_in_.weight.device(); }

 private:
  AutoencoderKLDecoder() = default;
  torch::Tensor DecodeUnguarded(const torch::Tensor& z) const;
  absl::Status ValidateLatents(const torch::Tensor& z) const;

  AutoencoderKLConfig config_;
  std::optional<Conv2d> post_quant_conv_;
  Conv2d conv_in_;
  std::vector<ResnetBlock2D> mid_resnets_;  // two
  std::optional<MidBlockAttention> mid_attention_;
  std::vector<UpDecoderBlock> up_blocks_;
  GroupNorm norm_out_;
  Conv2d conv_out_;
};

}  // namespace ditserve::vae
