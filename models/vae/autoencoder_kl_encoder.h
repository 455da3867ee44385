// The encoder half of diffusers' AutoencoderKL and AutoencoderKLFlux2: image -> the
// DiagonalGaussianDistribution of its latents.
//
// conv_in -> down blocks (layers_per_block resnets each, a stride-2 Downsample2D after all but the
// last) -> mid block (resnet, [attention], resnet) -> GroupNorm -> SiLU -> conv_out
// (2 * latent_channels: double_z) -> [quant_conv]; the moments split along dim 1 into mean and
// logvar, logvar clamped to [-30, 20], std = exp(0.5 * logvar). Tensor names: "encoder.*" and
// "quant_conv.*" as diffusers saves them.
//
// Sampling (AutoencoderKL img2img) is the caller's: diffusers' DiagonalGaussianDistribution.sample
// draws eps = randn_tensor(mean.shape, generator, device, dtype=<the VAE dtype>), which with the
// pipeline's CPU generator is torch.randn(mean.shape, generator=cpu_generator, dtype=<VAE dtype>)
// drawn ON THE CPU IN THE VAE DTYPE (a bfloat16 draw is not a float32 draw cast to bfloat16), then
// moved to the VAE's device; then mean + std * eps. SampleLatent takes an eps the caller drew that
// way (the pipelines: pipeline::SeededDraws, whose next draw from the request's generator is the
// initial noise, FluxImg2ImgPipeline.prepare_latents' order).
//
// Ownership: holds (refcounted) views of the state dict's tensors; the state dict may be dropped
// after Create. Runs in the dtype and on the device of those tensors. Replicated only (rank 0 runs
// it). Thread-safety: immutable after Create; Encode is const and may run concurrently.
#pragma once

#include <optional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/down_encoder_block.h"
#include "models/vae/mid_block_attention.h"
#include "models/vae/resnet_block.h"
#include "models/vae/vae_layers.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

// diffusers' DiagonalGaussianDistribution (deterministic=False), both (B, latent_channels, h, w) in
// the VAE's dtype and on its device. mode() is `mean`.
struct LatentDistribution {
  torch::Tensor mean;
  torch::Tensor std;
};

// mean + std * eps, eps (the shape of mean) moved to mean's device and dtype first.
// INVALID_ARGUMENT if eps's shape differs or it is not floating.
absl::StatusOr<torch::Tensor> SampleLatent(const LatentDistribution& dist,
                                           const torch::Tensor& eps);
// The distribution of moments (B, 2C, h, w) (after quant_conv): chunk, clamp, exp, in their dtype.
absl::StatusOr<LatentDistribution> LatentDistributionFromMoments(const torch::Tensor& moments);

// True iff `state` holds an encoder ("encoder.conv_in.weight"): AutoencoderKL and
// AutoencoderKLFlux2 build one then (and need all of its tensors), and skip it otherwise.
bool StateDictHasVaeEncoder(const sharding::ShardedStateDict& state);

class AutoencoderKLEncoder {
 public:
  // Errors name the first missing or mis-shaped tensor; INVALID_ARGUMENT when down_block_types
  // and block_out_channels disagree in count or a channel count is not divisible by
  // norm_num_groups.
  static absl::StatusOr<AutoencoderKLEncoder> Create(const VaeEncoderConfig& config,
                                                     const sharding::ShardedStateDict& state);

  // vae.encode(image).latent_dist. image: (B, in_channels, H, W), B >= 1, any floating dtype,
  // values in [-1, 1] (not checked), H and W positive multiples of scale_factor(); cast to the
  // model dtype and device. Returns (B, latent_channels, H / scale, W / scale) mean and std.
  // INVALID_ARGUMENT for other shapes.
  absl::StatusOr<LatentDistribution> Encode(const torch::Tensor& image) const;
  // The moments before the split (B, 2 * latent_channels, h, w) (after quant_conv), model dtype.
  absl::StatusOr<torch::Tensor> EncodeMoments(const torch::Tensor& image) const;

  // INVALID_ARGUMENT (the expected layout, the shape given) unless `image` is a valid Encode
  // input whose sides are also multiples of `side_multiple` (a multiple of scale_factor()).
  absl::Status ValidateImage(const torch::Tensor& image, int64_t side_multiple) const;

  const VaeEncoderConfig& config() const { return config_; }
  int64_t scale_factor() const { return config_.scale_factor(); }
  torch::ScalarType dtype() const { return conv_in_.weight.scalar_type(); }
  torch::Device device() const { return conv_in_.weight.device(); }

 private:
  AutoencoderKLEncoder() = default;
  torch::Tensor MomentsUnguarded(const torch::Tensor& image) const;

  VaeEncoderConfig config_;
  Conv2d conv_in_;
  std::vector<DownEncoderBlock> down_blocks_;
  std::vector<ResnetBlock2D> mid_resnets_;  // two
  std::optional<MidBlockAttention> mid_attention_;
  GroupNorm norm_out_;
  Conv2d conv_out_;
  std::optional<Conv2d> quant_conv_;
};

}  // namespace ditserve::vae
