// The attention inputs of the FLUX transformers (FLUX.1, FLUX.2), heads first: q (or k) of the
// text then the image stream, each RMS-normalised by its own QK-norm, rotated by the joint RoPE
// table, as (B, heads, S_txt + S_img, hd) for SDPA; v joined the same way with no norm and no
// rotation. This is diffusers' norm → cat → apply_rotary_emb → transpose.
//
// On a CUDA tensor of the CUDA build, one fused kernel per stream (models/cuda/qk_norm_rope.h)
// reads the GEMM's q/k/v views once and writes the joint contiguous buffer: no float32 copies, no
// `cat`, no transpose copy for SDPA. Elsewhere, or with DITSERVE_FUSED_KERNELS=0 in the
// environment (read once per process), JointHeadsFirstReference: the reference op sequence, whose
// result is a permuted view. The two agree to the rounding of the output dtype.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <torch/torch.h>

#include "models/common/rms_norm.h"
#include "models/common/rope.h"

namespace ditserve::models {

// One stream's part: x (B, S, heads, hd) with a contiguous last dim (a view of the fused q/k/v
// GEMM is fine) and its QK-norm (null: none, as for v).
struct StreamPart {
  torch::Tensor x;
  const TorchRmsNorm* norm = nullptr;
};

// `txt.x` undefined: the image stream alone (single-stream blocks). `rope` null: no rotation.
// `rope` rows follow the joint token order (text first).
torch::Tensor JointHeadsFirst(const StreamPart& txt, const StreamPart& img, const RopeTables* rope);

// The reference op sequence (any device and dtype), as a (B, heads, S, hd) view.
torch::Tensor JointHeadsFirstReference(const StreamPart& txt, const StreamPart& img,
                                       const RopeTables* rope);

// Whether JointHeadsFirst can use the fused kernel in this process (CUDA build, not disabled).
bool FusedAttentionInputsEnabled();

}  // namespace ditserve::models
