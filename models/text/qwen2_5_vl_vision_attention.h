// The attention pieces of the Qwen2.5-VL vision blocks (transformers' Qwen2_5_VLVisionAttention):
// the 2-D rotary embedding applied to q / k, and attention restricted to segments of the packed
// patch sequence (cu_seqlens: a frame for full-attention blocks, a window for the others), which
// transformers computes segment by segment (sdpa / eager) or as one varlen call (flash).
//
// Here segments of equal length are gathered into one batch (S, heads, L, head_dim) and attended
// together, then scattered back: per segment the same softmax(q kᵀ / sqrt(head_dim)) v, with a
// handful of attention calls per block (a window layout has at most four distinct window sizes
// per image) instead of one per window, and no N x N mask. Plain torch ops: any device and dtype.
//
// Thread-safety: immutable after Build; Attend is const.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace ditserve::text {

// transformers' apply_rotary_pos_emb_vision for one of q / k: x (N, heads, head_dim) in float32,
// x * cos + rotate_half(x) * sin with cos / sin (N, head_dim) float32 (the per-patch angles
// repeated twice), the result back in x's dtype.
torch::Tensor ApplyVisionRope(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin);

class VisionSegments {
 public:
  // `cu`: cumulative segment boundaries, starting at 0, non-decreasing (empty segments are
  // skipped); the last one is the sequence length. Index tensors are made on `device`.
  static VisionSegments Build(const std::vector<int64_t>& cu, const torch::Device& device);

  // q, k, v: (N, heads, head_dim), N = the last boundary. Returns (N, heads * head_dim): every
  // row attends to the rows of its own segment only.
  torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v) const;

  int64_t num_segments() const;

 private:
  struct Group {
    int64_t length = 0;  // rows per segment
    int64_t count = 0;   // segments of that length
    // The rows of those segments, segment after segment (count * length, int64); undefined when
    // this is the only group: its segments then tile the sequence in order.
    torch::Tensor rows;
  };
  std::vector<Group> groups_;
};

}  // namespace ditserve::text
