// What QwenImagePipeline does to its denoised latents before vae.decode (pipeline_qwenimage.py,
// the output_type != "latent" branch), as two pure steps (and one for input images, 3):
//   1. _unpack_latents: tokens (B, (h/2)(w/2), 4C) -> view (B, h/2, w/2, C, 2, 2) -> permute
//      (0, 3, 1, 4, 2, 5) -> (B, C, 1, h, w) (the frame axis T = 1 of the video VAE), with
//      h = 2 * (height // (vae_scale_factor * 2)) and likewise w;
//   2. latents.to(vae dtype); mean = tensor(latents_mean) and inv_std = 1 / tensor(latents_std),
//      built in float32 (torch.tensor of Python floats), cast to the VAE dtype (the reciprocal is
//      taken after the cast); z = latents / inv_std + mean, per channel.
// What the edit pipelines (QwenImageEditPipeline / QwenImageEditPlusPipeline) do to an input
// image's encoding, after retrieve_latents(vae.encode(image), sample_mode="argmax") (the mode):
//   3. _encode_vae_image: mean = tensor(latents_mean), std = tensor(latents_std), built in float32
//      and cast to the latents' dtype (the VAE's); image_latents = (image_latents - mean) / std,
//      per channel -- a true division (pipeline_qwenimage_img2img.py / _edit_inpaint.py instead
//      multiply by 1.0 / std, which is not what this step does).
// What the image-to-image pipeline (QwenImageImg2ImgPipeline) does to its input image's encoding,
// after retrieve_latents(vae.encode(image), generator) (a sample of the posterior):
//   4. _encode_vae_image: mean = tensor(latents_mean) cast to the latents' dtype, inv_std =
//      1.0 / tensor(latents_std) (the reciprocal taken after the cast, in that dtype);
//      image_latents = (image_latents - mean) * inv_std, per channel.
// prepare_latents' _pack_latents of the image latents is the pipeline's (pipeline/latents.h
// PackLatents of the one frame).
// All functions are pure and thread-safe; shape errors come back as INVALID_ARGUMENT (nothing
// throws). Internal to models/vae (AutoencoderKLQwenImage composes them), exposed for tests.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::vae {

// Step 1; latent_height / latent_width (h, w) even, tokens.size(1) == (h/2)(w/2).
absl::StatusOr<torch::Tensor> UnpackQwenImageTokens(const torch::Tensor& tokens,
                                                    int64_t latent_height, int64_t latent_width);
// Step 2; z: (B, C, T, h, w) with C == latents_mean.size() == latents_std.size(); the result is
// in `dtype` (the VAE's) on z's device.
absl::StatusOr<torch::Tensor> DenormalizeQwenImageLatents(const torch::Tensor& z,
                                                          const std::vector<double>& latents_mean,
                                                          const std::vector<double>& latents_std,
                                                          torch::ScalarType dtype);

// Step 3; z: (B, C, T, h, w) floating with C == latents_mean.size() == latents_std.size(); the
// result is in z's dtype on z's device.
absl::StatusOr<torch::Tensor> NormalizeQwenImageLatents(const torch::Tensor& z,
                                                        const std::vector<double>& latents_mean,
                                                        const std::vector<double>& latents_std);
// Step 4; as step 3 (shapes, errors).
absl::StatusOr<torch::Tensor> ScaleQwenImageImg2ImgLatents(const torch::Tensor& z,
                                                           const std::vector<double>& latents_mean,
                                                           const std::vector<double>& latents_std);

}  // namespace ditserve::vae
