// Qwen-Image's RoPE positions (QwenEmbedRope with scale_rope=True), diffusers transformer_qwenimage.py, on top of the
// complex tables of models/common/complex_rope.h:
//   image k (of the list), frame f, row y, column x (row-major order, images one after another):
//     (k + f, y - ceil(h'/2), x - ceil(w'/2))
//   text token j: (m + j) on all three axes, m = max over the images of max(h'/2, w'/2) (floor).
// diffusers' tables cover positions [-4096, 4096); positions outside are refused.
//
// img_shapes as a tensor (how ditserve passes diffusers' `img_shapes = [[(f, h', w'), ...]] * B`):
// shape (3,), (B, 3) or (B, K, 3), integer-valued (any dtype), in packed-grid units (h' = H/16 for
// an H-pixel image). Diffusers reads the first batch entry only; ditserve requires every batch
// entry to be equal. Absent, a single square image is assumed: h' = w' = sqrt(N) when N is a
// perfect square (INVALID_ARGUMENT otherwise).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/rope.h"

namespace ditserve::models::qwenimage {

struct ImageShape {
  int64_t frames = 1, height = 0, width = 0;  // packed-grid units
  bool operator==(const ImageShape& o) const {
    return frames == o.frames && height == o.height && width == o.width;
  }
};

// Validates and converts an img_shapes argument (see above) for `batch` samples of `image_tokens`
// tokens; an undefined tensor gives the square default.
absl::StatusOr<std::vector<ImageShape>> ImageShapesFromTensor(const torch::Tensor& img_shapes,
                                                              int64_t batch, int64_t image_tokens);

struct QwenRopeFreqs {
  torch::Tensor image;  // (N, hd/2) complex64
  torch::Tensor text;   // (T, hd/2) complex64
  // The same entries in the joint token order (text first) as models/common/rope.h's tables, what
  // JointHeadsFirst takes: cos / sin (T + N, hd) float32 with pairs repeated ([c0, c0, c1, c1,
  // ...], the real / imaginary parts), freqs (T + N, hd/2) = cat(text, image), the complex64
  // values themselves (so its rotation is ApplyRotaryEmbComplex's, bit for bit). On the device.
  RopeTables joint;
};

// INVALID_ARGUMENT for a position outside diffusers' tables.
absl::StatusOr<QwenRopeFreqs> QwenRopeFrequencies(const std::vector<ImageShape>& shapes,
                                                  int64_t text_len,
                                                  const std::vector<int64_t>& axes_dims,
                                                  double theta, const torch::Device& device);

}  // namespace ditserve::models::qwenimage
