// diffusers' AutoencoderKLFlux2 (FLUX.2's VAE). Decode path: post_quant_conv (if configured) and
// the shared AutoencoderKL Decoder, plus the Flux2Pipeline steps before vae.decode (unpack tokens,
// BatchNorm de-normalisation with bn.running_mean / bn.running_var / batch_norm_eps, 2x2
// un-patchify; see flux2_latents.h). Encode path (reference images): the shared Encoder and
// quant_conv (autoencoder_kl_encoder.h), then Flux2Pipeline._encode_vae_image's steps (mode, 2x2
// patchify, BatchNorm normalisation). `bn` is never run as a layer at inference.
//
// Tensor names as diffusers saves them: "decoder.*", "post_quant_conv.*", "bn.running_mean",
// "bn.running_var", and "encoder.*", "quant_conv.*" (bn.num_batches_tracked is ignored). The
// encoder is built iff the state dict has "encoder.conv_in.weight"; then all of it must be there.
// Without it has_encoder() is false, the model takes no reference image and the encode calls
// answer FAILED_PRECONDITION.
//
// Ownership: holds (refcounted) views of the state dict's tensors; the state dict may be dropped
// after Create. Runs in the dtype and on the device of those tensors. Replicated only (rank 0 runs
// it). Thread-safety: immutable after Create; the decode calls are const and may run concurrently.
#pragma once

#include <optional>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "models/vae/autoencoder_kl_flux2_config.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

class AutoencoderKLFlux2 {
 public:
  // Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<AutoencoderKLFlux2> Create(const AutoencoderKLFlux2Config& config,
                                                   const sharding::ShardedStateDict& state);

  // vae.decode(z): z (B, latent_channels, H/8, W/8) (un-patchified, de-normalised), cast to the
  // model dtype/device. Returns (B, out_channels, H, W) in about [-1, 1] (not clamped), model
  // dtype.
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& z) const;

  // The pipeline's decode of the latents it holds after the denoising loop: `tokens`
  // (B, h*w, 4 * latent_channels) packed patchified latents with their `latent_ids` (B, h*w, 4)
  // rows (0, y, x, 0). De-normalises in the tokens' dtype, then Decode. Returns (B, out_channels,
  // 16h, 16w) (for the standard 4-block VAE) in about [-1, 1]; PostprocessImage makes the image.
  absl::StatusOr<torch::Tensor> DecodePackedLatents(const torch::Tensor& tokens,
                                                    const torch::Tensor& latent_ids) const;
  // The same for the pipeline's own ids on an h x w token grid (no ids tensor needed).
  absl::StatusOr<torch::Tensor> DecodePackedLatents(const torch::Tensor& tokens, int64_t height,
                                                    int64_t width) const;
  // De-normalise + un-patchify (B, 4 * latent_channels, h, w) -> the Decode input
  // (B, latent_channels, 2h, 2w), in z's dtype.
  absl::StatusOr<torch::Tensor> LatentsForDecode(const torch::Tensor& patchified) const;

  // --- encode (FAILED_PRECONDITION without an encoder) ---
  bool has_encoder() const { return encoder_.has_value(); }
  // vae.encode(image).latent_dist (after quant_conv): image (B, in_channels, H, W) in [-1, 1], any
  // floating dtype (cast to dtype() and moved to device()), H and W positive multiples of the
  // encoder's scale factor (pipeline_vae_scale_factor()); mean and std (B, latent_channels,
  // H / scale, W / scale) in dtype(). INVALID_ARGUMENT for other shapes.
  absl::StatusOr<LatentDistribution> EncodeLatentDistribution(const torch::Tensor& image) const;
  // Flux2Pipeline._encode_vae_image(image): the mode (mean) of the encoding, 2x2-patchified, then
  // (x - bn.running_mean) / sqrt(bn.running_var + batch_norm_eps) in dtype(). image as for
  // EncodeLatentDistribution, but H and W multiples of 2 * pipeline_vae_scale_factor(). Returns
  // (B, 4 * latent_channels, H / (2 * scale), W / (2 * scale)) in dtype() on device(): the
  // pipeline packs it ((B, h*w, 4C) tokens) and gives it its reference ids. No randomness.
  absl::StatusOr<torch::Tensor> EncodeReference(const torch::Tensor& image) const;

  const AutoencoderKLFlux2Config& config() const { return config_; }
  const AutoencoderKLDecoder& decoder() const { return decoder_; }
  // Only when has_encoder().
  const AutoencoderKLEncoder& encoder() const { return *encoder_; }
  torch::ScalarType dtype() const { return decoder_.dtype(); }
  torch::Device device() const { return decoder_.device(); }

 private:
  AutoencoderKLFlux2(AutoencoderKLFlux2Config config, AutoencoderKLDecoder decoder,
                     std::optional<AutoencoderKLEncoder> encoder, torch::Tensor running_mean,
                     torch::Tensor running_var)
      : config_(std::move(config)),
        decoder_(std::move(decoder)),
        encoder_(std::move(encoder)),
        running_mean_(std::move(running_mean)),
        running_var_(std::move(running_var)) {}

  AutoencoderKLFlux2Config config_;
  AutoencoderKLDecoder decoder_;
  std::optional<AutoencoderKLEncoder> encoder_;
  torch::Tensor running_mean_, running_var_;  // bn buffers, (4 * latent_channels,)
};

}  // namespace ditserve::vae
