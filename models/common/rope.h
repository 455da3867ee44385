// FLUX.1 / FLUX.2 rotary position embeddings (FluxPosEmbed, apply_rotary_emb), diffusers embeddings.py / normalization.py / attention.py.
//
// Tables: for each axis a (width d_a), ω_j = 1 / θ^(2j/d_a) in float64, angles p·ω_j in float64
// (p = float32(ids[:, a]) promoted), cos/sin repeated twice in place ([c0,c0,c1,c1,...]), cast to
// float32, and the axes concatenated in order → (S, Σ d_a).
// Application: interleaved pairs, rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i];
// out = (float32(x)·cos + float32(rot(x))·sin).to(x.dtype), x being (B, S, heads, hd).
#pragma once

#include <vector>

#include <torch/torch.h>

namespace ditserve::models {

// Position ids as the FLUX transformers take them: (N, axes), or a 3-D (B, N, axes) tensor whose
// first row is taken, as diffusers does (with a deprecation warning).
inline torch::Tensor PositionIds2d(const torch::Tensor& ids) { return ids.dim() == 3 ? ids[0] : ids; }

struct RopeTables {
  torch::Tensor cos;  // (S, Σ d_a) float32
  torch::Tensor sin;
  // (S, Σ d_a / 2) complex64: cos + i·sin of each pair, what ApplyRotaryEmbInterleaved multiplies
  // by (one complex product instead of the reference's eight elementwise ops; same arithmetic).
  torch::Tensor freqs;
};

// Tables from cos/sin laid out as above (pairs repeated), with `freqs` filled in.
RopeTables MakeRopeTables(torch::Tensor cos, torch::Tensor sin);

// ids: (S, n_axes) of any dtype (3-D ids are the caller's business). One axis per entry of
// axes_dims; throws if ids has fewer columns. Computed on ids' device (float64 where supported).
RopeTables FluxRopeTables(const torch::Tensor& ids, const std::vector<int64_t>& axes_dims,
                          double theta = 10000.0);

// x (B, S, heads, hd) rotated by `rope`, in x's dtype, computed in float32 as the reference does:
// pairs (x[2i], x[2i+1]) as complex numbers times freqs, i.e. x[2i]·cos − x[2i+1]·sin and
// x[2i+1]·cos + x[2i]·sin.
torch::Tensor ApplyRotaryEmbInterleaved(const torch::Tensor& x, const RopeTables& rope);

}  // namespace ditserve::models
