// FLUX.1 latent handling (diffusers pipeline_flux.py), also used by Qwen-Image:
//   * latent size: 2·(pixels // (2·vae_scale_factor)) per side, vae_scale_factor =
//     2^(len(vae.block_out_channels) - 1) (8 for the real VAE, 2 for the tiny one);
//   * initial noise: torch.randn on the CPU generator seeded like torch.Generator("cpu")
//     .manual_seed(seed), drawn in the target dtype on the CPU, then moved to the device
//     (bit-identical to PyTorch of the same version);
//   * 2×2 packing (B, C, h, w) → (B, (h/2)(w/2), 4C): view (B,C,h/2,2,w/2,2), permute
//     (0,2,4,1,3,5); unpacking is the inverse (view (B,h/2,w/2,C,2,2), permute (0,3,1,4,2,5));
//   * image ids: (L, 3) rows [0, y, x] in token order, built in float32 then cast.
// All functions are pure; they throw nothing (shape errors come back as INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::pipeline {

// 2^(num_vae_blocks - 1); num_vae_blocks = len(block_out_channels) >= 1.
int64_t VaeScaleFactor(int64_t num_vae_blocks);

// Latent height or width for an image side of `pixels`: 2 * (pixels / (2 * vae_scale_factor)).
int64_t LatentSide(int64_t pixels, int64_t vae_scale_factor);

// Successive draws from one CPU generator seeded with `seed`, one tensor per shape, in order, each
// in `dtype` on the CPU: what diffusers' randn_tensor calls draw from a request's generator (FLUX.1
// image-to-image: the VAE posterior's sample, then the noise).
absl::StatusOr<std::vector<torch::Tensor>> SeededDraws(
    const std::vector<std::vector<int64_t>>& shapes, uint64_t seed, torch::ScalarType dtype);
// The first draw alone (a request's initial noise), moved to `device`.
absl::StatusOr<torch::Tensor> InitialNoise(const std::vector<int64_t>& shape, uint64_t seed,
                                           torch::ScalarType dtype, torch::Device device);

// (B, C, h, w) with even h, w → (B, (h/2)(w/2), 4C).
absl::StatusOr<torch::Tensor> PackLatents(const torch::Tensor& latents);
// (B, (h/2)(w/2), 4C) → (B, C, h, w) for latent height h and width w (even).
absl::StatusOr<torch::Tensor> UnpackLatents(const torch::Tensor& packed, int64_t latent_height,
                                            int64_t latent_width);
// (rows·cols, 3) ids [0, y, x] for a grid of rows × cols packed tokens.
torch::Tensor LatentImageIds(int64_t rows, int64_t cols, torch::ScalarType dtype,
                             torch::Device device);

}  // namespace ditserve::pipeline
