// diffusers' AutoencoderKL (FLUX.1's VAE) as the FLUX.1 pipelines use it: the decoder
// (AutoencoderKLDecoder, always) and the encoder (AutoencoderKLEncoder, when the checkpoint has
// one), with the pipelines' latent scaling on both sides:
//   decode: vae.decode(latents / scaling_factor + shift_factor)           (FluxPipeline)
//   encode: (z - shift_factor) * scaling_factor, z a sample or the mode   (FluxImg2ImgPipeline /
//           FluxKontextPipeline._encode_vae_image)
// The encoder is built iff the state dict has "encoder.conv_in.weight"; then every encoder (and,
// with use_quant_conv, quant_conv) tensor must be there. Without it has_encoder() is false and the
// model takes no input image (the encode calls answer FAILED_PRECONDITION).
//
// Image-to-image (FluxImg2ImgPipeline, sample_mode "sample"): dist = EncodeLatentDistribution
// (image); z = SampleLatent(dist, eps), eps drawn from the request's CPU generator in dtype()
// before the initial noise (autoencoder_kl_encoder.h); ImageLatents(z).
// Kontext (sample_mode "argmax"): ImageLatents(EncodeLatentDistribution(image)) (the mode, i.e.
// the mean; no draw).
//
// Ownership: holds (refcounted) views of the state dict's tensors; the state dict may be dropped
// after Create. Runs in the dtype and on the device of those tensors. Replicated only (rank 0 runs
// it). Thread-safety: immutable after Create; every call is const and may run concurrently.
#pragma once

#include <optional>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

class AutoencoderKL {
 public:
  // Errors name the first missing or mis-shaped tensor (decoder first, then encoder).
  static absl::StatusOr<AutoencoderKL> Create(const AutoencoderKLConfig& config,
                                              const sharding::ShardedStateDict& state);

  // --- decode (AutoencoderKLDecoder's contracts) ---
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& z) const { return decoder_.Decode(z); }
  absl::StatusOr<torch::Tensor> DecodeLatents(const torch::Tensor& latents) const {
    return decoder_.DecodeLatents(latents);
  }

  // --- encode (FAILED_PRECONDITION without an encoder) ---
  bool has_encoder() const { return encoder_.has_value(); }
  // vae.encode(image).latent_dist (after quant_conv): image (B, in_channels, H, W) in [-1, 1], any
  // floating dtype (cast to dtype() and moved to device()), H and W positive multiples of
  // scale_factor(); mean and std (B, latent_channels, H / scale, W / scale) in dtype().
  // INVALID_ARGUMENT for other shapes.
  absl::StatusOr<LatentDistribution> EncodeLatentDistribution(const torch::Tensor& image) const;
  // (z - shift_factor) * scaling_factor with z cast to dtype() / device() first (the pipelines do
  // the affine map in the VAE dtype). z: (B, latent_channels, h, w), a sample or the mode.
  // Needs no encoder.
  absl::StatusOr<torch::Tensor> ImageLatents(const torch::Tensor& z) const;
  // The same of the distribution's mode (its mean): FluxKontextPipeline's image latents.
  absl::StatusOr<torch::Tensor> ImageLatents(const LatentDistribution& dist) const {
    return ImageLatents(dist.mean);
  }

  const AutoencoderKLConfig& config() const { return decoder_.config(); }
  const AutoencoderKLDecoder& decoder() const { return decoder_; }
  // Only when has_encoder().
  const AutoencoderKLEncoder& encoder() const { return *encoder_; }
  // Spatial factor of both halves (they share block_out_channels): 2^(blocks - 1).
  int64_t scale_factor() const { return decoder_.config().scale_factor(); }
  torch::ScalarType dtype() const { return decoder_.dtype(); }
  torch::Device device() const { return decoder_.device(); }

 private:
  AutoencoderKL(AutoencoderKLDecoder decoder, std::optional<AutoencoderKLEncoder> encoder)
      : decoder_(std::move(decoder)), encoder_(std::move(encoder)) {}

  AutoencoderKLDecoder decoder_;
  std::optional<AutoencoderKLEncoder> encoder_;
};

}  // namespace ditserve::vae
