// Complex-valued rotary position embeddings as Qwen-Image uses them (QwenEmbedRope +
// apply_rotary_emb_qwen(use_real=False)), diffusers transformer_qwenimage.py. Same rotation as FLUX's cos/sin form
// (interleaved pairs), but the angles come from float32 tables:
//   for axis a of width d_a: ω_j = 1 / θ^(float32(2j)/d_a), j < d_a/2, all float32;
//   entry = polar(1, float32(p) · ω_j) (complex64); axes concatenated in order → Σ d_a/2 entries.
// Application: x (B, S, heads, hd) viewed as hd/2 complex numbers x[2i] + i·x[2i+1] (float32),
// multiplied by the table row of its position, turned back to interleaved reals and cast to x's
// dtype.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace ditserve::models {

// positions: (S, n_axes) integer positions (may be negative), one column per entry of axes_dims.
// Computed on the CPU — diffusers builds its tables on the CPU at construction and only moves them
// — and returned on `device`: (S, Σ d_a / 2) complex64.
torch::Tensor ComplexRopeFrequencies(const torch::Tensor& positions,
                                     const std::vector<int64_t>& axes_dims, double theta,
                                     const torch::Device& device);

// x: (B, S, heads, hd); freqs: (S, hd / 2) complex64 on x's device.
torch::Tensor ApplyRotaryEmbComplex(const torch::Tensor& x, const torch::Tensor& freqs);

}  // namespace ditserve::models
