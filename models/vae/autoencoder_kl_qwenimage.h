// diffusers' AutoencoderKLQwenImage for a single frame, as the Qwen-Image pipelines use it.
//
// Decode path (text-to-image and edit): post_quant_conv (causal 1x1x1) and QwenImageDecoder3d
// (conv_in -> mid block (residual, attention, residual) -> up blocks -> RMS norm -> SiLU ->
// conv_out), then the clamp to [-1, 1]; plus the QwenImagePipeline steps around it (unpack
// tokens, latents_mean / latents_std de-normalisation, frame 0). How the causal video decoder
// reduces to 2-D for one frame: qwenimage_vae_layers.h.
//
// Encode path (input images of the edit pipelines; autoencoder_kl_qwenimage_encoder.h): the
// encoder and quant_conv, the posterior's mode, then QwenImageEditPipeline._encode_vae_image's
// normalisation and prepare_latents' packing (qwenimage_latents.h):
//     image_latents = retrieve_latents(self.vae.encode(image), ..., sample_mode="argmax")
//     image_latents = (image_latents - latents_mean) / latents_std
//     image_latents = self._pack_latents(image_latents, ...)
// The encoder is built iff the state dict has "encoder.conv_in.weight" (what the pipeline's
// vae_encodes() reads from the checkpoint header); then every encoder tensor and quant_conv must
// be there. Without it has_encoder() is false, the model takes no input image and the encode
// calls answer FAILED_PRECONDITION.
//
// Tensor names as diffusers saves them: "post_quant_conv.*", "decoder.*", "encoder.*",
// "quant_conv.*" (the resamples' time_conv -- unused for a first frame -- is not read).
//
// Ownership: holds (refcounted) views of the state dict's tensors, except the causal convs, whose
// used temporal tap is copied (so dropping the state dict after Create frees the 3-D weights). Runs
// in the dtype and on the device of those tensors. Replicated only (rank 0 runs it).
// Thread-safety: immutable after Create; every call is const and may run concurrently.
#pragma once

#include <optional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "models/vae/autoencoder_kl_qwenimage_encoder.h"
#include "models/vae/qwenimage_attention_block.h"
#include "models/vae/qwenimage_residual_block.h"
#include "models/vae/qwenimage_up_block.h"
#include "models/vae/qwenimage_vae_layers.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

class AutoencoderKLQwenImage {
 public:
  // Errors name the first missing or mis-shaped tensor (decoder first, then encoder);
  // UNIMPLEMENTED for an encoder that diffusers cannot run (attn_scales, see the encoder's header).
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

  // --- encode (FAILED_PRECONDITION without an encoder) ---
  bool has_encoder() const { return encoder_.has_value(); }
  // Pixels: (B, input_channels, H, W), or one frame (B, input_channels, 1, H, W), in [-1, 1], any
  // floating dtype (cast to dtype() and moved to device()), H and W positive multiples of
  // scale_factor(); INVALID_ARGUMENT for other shapes, UNIMPLEMENTED for T > 1. Latent shapes
  // below: h = H / scale_factor(), w = W / scale_factor(); all in dtype() on device().
  //
  // vae.encode(pixels).latent_dist: mean and std (B, z_dim, 1, h, w).
  absl::StatusOr<LatentDistribution> EncodeLatentDistribution(const torch::Tensor& pixels) const;
  // Its mode (the mean), retrieve_latents(..., sample_mode="argmax"): (B, z_dim, 1, h, w).
  absl::StatusOr<torch::Tensor> EncodeMode(const torch::Tensor& pixels) const;
  // QwenImageEditPipeline._encode_vae_image: (EncodeMode - latents_mean) / latents_std, in
  // dtype(): (B, z_dim, 1, h, w).
  absl::StatusOr<torch::Tensor> EncodeImageLatents(const torch::Tensor& pixels) const;
  // QwenImageImg2ImgPipeline._encode_vae_image after its posterior sample z (B, z_dim, 1, h, w)
  // (SampleLatent of EncodeLatentDistribution with the request's draw): (z - latents_mean) *
  // (1 / latents_std), in z's dtype. Needs no encoder (z is given).
  absl::StatusOr<torch::Tensor> ImageToImageLatents(const torch::Tensor& z) const;

  const AutoencoderKLQwenImageConfig& config() const { return config_; }
  // Only when has_encoder().
  const AutoencoderKLQwenImageEncoder& encoder() const { return *encoder_; }
  // Spatial factor of both halves: 2^len(temperal_downsample) (8 for the real VAE).
  int64_t scale_factor() const { return config_.scale_factor(); }
  torch::ScalarType dtype() const { return conv_in_.weight.scalar_type(); }
  torch::Device device() const { return conv_in_.weight.device(); }

 private:
  AutoencoderKLQwenImage() = default;
  absl::Status ValidateLatents(const torch::Tensor& z) const;
  absl::Status RequireEncoder() const;
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
  std::optional<AutoencoderKLQwenImageEncoder> encoder_;
};

}  // namespace ditserve::vae
