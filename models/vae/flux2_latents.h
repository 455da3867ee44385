// What Flux2Pipeline does to its denoised latents before vae.decode (pipeline_flux2.py, the
// output_type != "latent" branch), as three pure steps:
//   1. _unpack_latents_with_ids: tokens (B, L, C) are scattered to (B, C, h, w) at
//      flat = y * w + x from the ids' rows (t, y, x, l), h = max(y) + 1, w = max(x) + 1;
//   2. BatchNorm de-normalisation with the VAE's running statistics, per patchified channel:
//      z * sqrt(running_var + batch_norm_eps) + running_mean, the sqrt taken in the statistics'
//      dtype, then both cast to z's dtype (the arithmetic stays in the latents' dtype);
//   3. _unpatchify_latents: (B, 4C', h, w) -> (B, C', 2h, 2w), reshape (B, C', 2, 2, h, w) ->
//      permute (0, 1, 4, 2, 5, 3), i.e. patchified channel c * 4 + dy * 2 + dx goes to pixel
//      (2y + dy, 2x + dx) of channel c.
// and the inverse steps Flux2Pipeline._encode_vae_image applies to an encoded reference image:
//   _patchify_latents: (B, C', 2h, 2w) -> (B, 4C', h, w), view (B, C', h, 2, w, 2) -> permute
//      (0, 1, 3, 5, 2, 4) (pixel (2y + dy, 2x + dx) of channel c goes to channel c * 4 + dy * 2 +
//      dx);
//   BatchNorm normalisation (z - running_mean) / sqrt(running_var + batch_norm_eps), the statistics
//      prepared exactly as for step 2.
// All functions are pure and thread-safe; shape errors come back as INVALID_ARGUMENT (nothing
// throws). Internal to models/vae (AutoencoderKLFlux2 composes them), exposed for tests.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::vae {

// Step 1 with the pipeline's latent_ids (B, L, 4), integer or floating (cast to int64 as the
// pipeline does). Positions no token names stay zero, as in the reference.
absl::StatusOr<torch::Tensor> UnpackFlux2TokensWithIds(const torch::Tensor& tokens,
                                                       const torch::Tensor& latent_ids);
// Step 1 for the pipeline's own ids (row-major (0, y, x, 0) over an h x w grid): a reshape.
absl::StatusOr<torch::Tensor> UnpackFlux2Tokens(const torch::Tensor& tokens, int64_t height,
                                                int64_t width);
// Step 2; running_mean / running_var: (C,) with C = z.size(1).
absl::StatusOr<torch::Tensor> DenormalizeFlux2Latents(const torch::Tensor& z,
                                                      const torch::Tensor& running_mean,
                                                      const torch::Tensor& running_var,
                                                      double batch_norm_eps);
// Step 3; z: (B, C, h, w) with C divisible by 4.
absl::StatusOr<torch::Tensor> UnpatchifyFlux2Latents(const torch::Tensor& z);

// The inverse of step 3; z: (B, C, H, W) with even H and W -> (B, 4C, H/2, W/2).
absl::StatusOr<torch::Tensor> PatchifyFlux2Latents(const torch::Tensor& z);
// The inverse of step 2: (z - mean) / sqrt(var + eps), in z's dtype; running_mean / running_var:
// (C,) with C = z.size(1).
absl::StatusOr<torch::Tensor> NormalizeFlux2Latents(const torch::Tensor& z,
                                                    const torch::Tensor& running_mean,
                                                    const torch::Tensor& running_var,
                                                    double batch_norm_eps);

}  // namespace ditserve::vae
