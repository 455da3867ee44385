// Rotate-half rotary position embeddings as the transformers LLMs compute them (the default RoPE of
// MistralRotaryEmbedding / Qwen2_5_VLRotaryEmbedding; apply_rotary_pos_emb and Qwen2.5-VL's
// apply_multimodal_rotary_pos_emb), for query/key tensors laid out (B, heads, T, head_dim).
//
//   inv_freq[j] = 1 / theta^(float32(2j) / d)      float32, j < d/2 (ROPE_INIT_FUNCTIONS "default")
//   angle[b, t, j] = inv_freq[j] * float32(pos[b, t])   one float32 product (their K=1 matmul)
//   emb = [angle | angle] (d wide); cos = cos(emb), sin = sin(emb) in float32, cast to the dtype
//   M-RoPE (positions (3, B, T), sections [s0, s1, s2], Σ = d/2): emb split into chunks
//   [s0, s1, s2, s0, s1, s2] along d, chunk i taken from axis i % 3 (transformers 4.x's layout;
//   5.17's Qwen2VLRotaryEmbedding.recomposition_frequencies splits the d/2 angles by [s0, s1, s2]
//   and duplicates the result: the same values, checked bit for bit by qwen_mrope_test)
//   out = x·cos + rotate_half(x)·sin in x's dtype, rotate_half(x) = [-x[d/2:] | x[:d/2]]
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace ditserve::text {

struct LlmRope {
  torch::Tensor cos;  // (B, 1, T, d), broadcast over heads
  torch::Tensor sin;
};

// (d/2,) float32 on `device`.
torch::Tensor LlmInvFreq(int64_t head_dim, double theta, const torch::Device& device);

// position_ids: (B, T) for 1-D RoPE (empty `mrope_section`), (3, B, T) for M-RoPE. Tables in
// `dtype` on position_ids' device.
LlmRope LlmRopeTables(const torch::Tensor& position_ids, int64_t head_dim, double theta,
                      const std::vector<int64_t>& mrope_section, torch::ScalarType dtype);

torch::Tensor RotateHalf(const torch::Tensor& x);

// x: (B, heads, T, d).
torch::Tensor ApplyLlmRope(const torch::Tensor& x, const LlmRope& rope);

}  // namespace ditserve::text
