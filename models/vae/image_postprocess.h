// diffusers VaeImageProcessor.postprocess(output_type="np") for a decoded batch: denormalise
// (x * 0.5 + 0.5).clamp(0, 1) in the decoder's dtype, then channels-last float32.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::vae {

// decoded: (B, C, H, W) floating, as AutoencoderKLDecoder returns it. Returns (B, H, W, C) float32
// in [0, 1] on the same device (contiguous). Turning it into 8-bit pixels (round(x * 255)) is the
// image writer's job.
absl::StatusOr<torch::Tensor> PostprocessImage(const torch::Tensor& decoded);

}  // namespace ditserve::vae
