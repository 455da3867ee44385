// What the pipelines do with a job's input images before the VAE encoder (the frontend has
// already decoded, resized and cropped them by the card's rule: imaging/preprocess.h), and the
// position ids of reference tokens. Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "pipeline/latents.h"

namespace ditserve::pipeline {

// diffusers' VaeImageProcessor.preprocess after the resize: pil_to_numpy (float32 / 255), to
// (1, 3, H, W), normalize (2x - 1, float32), then `.to(device, dtype)` as the pipelines do.
// `rgb` is a uint8 (H, W, 3) CPU tensor (JobItem::images).
absl::StatusOr<torch::Tensor> VaeImageInput(const torch::Tensor& rgb, torch::ScalarType dtype,
                                            torch::Device device);

// Image to image's encoding (FluxImg2ImgPipeline, QwenImageImg2ImgPipeline: retrieve_latents with
// the generator): the prepared pixels through `vae`'s encoder, a sample of the posterior with eps
// drawn first from the item's CPU generator (`seed`) in the VAE's dtype (SeededDraws: the noise is
// the generator's next draw). Vae: AutoencoderKL or AutoencoderKLQwenImage (dtype(), device(),
// EncodeLatentDistribution).
template <typename Vae>
absl::StatusOr<torch::Tensor> SamplePosterior(const Vae& vae, const torch::Tensor& rgb,
                                              uint64_t seed) {
  ASSIGN_OR_RETURN(torch::Tensor x, VaeImageInput(rgb, vae.dtype(), vae.device()));
  ASSIGN_OR_RETURN(vae::LatentDistribution dist, vae.EncodeLatentDistribution(x));
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> eps,
                   SeededDraws({dist.mean.sizes().vec()}, seed, vae.dtype()));
  return vae::SampleLatent(dist, eps[0]);
}

// A reference image's latent grid: its prepared pixels' sides over `pixels_per_token` (the
// pipeline's vae_scale_factor * 2: FLUX.2's patchified latents and FLUX.1's packed ones both have
// one token per 2x2 latent pixels).
struct TokenGrid {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t tokens() const { return rows * cols; }
};
TokenGrid ImageTokenGrid(const torch::Tensor& rgb, int64_t pixels_per_token);

// (rows * cols, 4) FLUX.2 ids (t, y, x, 0), row-major: the generated image's with t = 0
// (Flux2Pipeline._prepare_latent_ids), reference image i's with t = 10 + 10 i
// (_prepare_image_ids with scale 10).
torch::Tensor Flux2TokenIds(int64_t t, const TokenGrid& grid, torch::ScalarType dtype,
                            torch::Device device);

}  // namespace ditserve::pipeline
