// The attention inputs of the FLUX transformers (FLUX.1, FLUX.2) and Qwen-Image, heads first: q
// (or k) of the text then the image stream, each RMS-normalised by its own QK-norm, rotated by the
// joint RoPE table, as (B, heads, S_txt + S_img, hd) for SDPA; v joined the same way with no norm
// and no rotation. This is diffusers' norm → cat → apply_rotary_emb → transpose (FLUX), or
// norm → apply_rotary_emb per stream → cat → transpose (Qwen-Image, RopeOrder::kPerStream).
//
// On a CUDA tensor of the CUDA build, one fused kernel per stream (models/cuda/qk_norm_rope.h)
// reads the GEMM's q/k/v views once and writes the joint buffer: no float32 copies, no `cat`.
// Elsewhere, or with DITSERVE_FUSED_KERNELS=0 in the environment (models/common/fused_kernels.h),
// JointHeadsFirstReference: the reference op sequence. The two agree to the rounding of the
// output dtype, and both return a heads-first view of a tokens-first (B, S, heads, hd) tensor —
// diffusers' layout for SDPA, whose fused kernels (cuDNN, flash) then write their output tokens
// first too, so that the output projection's (B, S, heads·hd) is a view, not a transpose copy.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <torch/torch.h>

#include "models/common/diffusers_rms_norm.h"
#include "models/common/rms_norm.h"
#include "models/common/rope.h"

namespace ditserve::models {

// One stream's part: x (B, S, heads, hd) with a contiguous last dim (a view of the fused q/k/v
// GEMM is fine) and its QK-norm: torch.nn.RMSNorm (`norm`, FLUX) or diffusers' RMSNorm
// (`diffusers_norm`, Qwen-Image; it rounds x·rstd to the weight's dtype before the weight
// multiply; a weight of another dtype than x, which promotes, takes the reference path). At most
// one of the two is set; neither: no norm, as for v.
struct StreamPart {
  torch::Tensor x;
  const TorchRmsNorm* norm = nullptr;
  const DiffusersRmsNorm* diffusers_norm = nullptr;
};

// Where the reference path rotates: the joined sequence (diffusers' FLUX order) or each stream by
// its own rows of the table before the join (diffusers' Qwen-Image order). The values are the same
// elementwise, but LibTorch's CPU complex product can round a loop's SIMD body and its scalar tail
// differently, and which elements fall in the tail depends on the tensor's length: only the
// model's own order keeps its CPU output bit-identical to the unfused model. The fused kernel
// ignores it (it rotates each row on its own).
enum class RopeOrder { kJoined, kPerStream };

// `txt.x` undefined: the image stream alone (single-stream blocks). `rope` null: no rotation.
// `rope` rows follow the joint token order (text first).
torch::Tensor JointHeadsFirst(const StreamPart& txt, const StreamPart& img, const RopeTables* rope,
                              RopeOrder order = RopeOrder::kJoined);

// Whether JointHeadsFirst takes the fused kernel for these arguments (the CUDA build, kernels on,
// and the kernel's contract met).
bool JointHeadsFirstRunsKernel(const StreamPart& txt, const StreamPart& img,
                               const RopeTables* rope);

// One stream's q, k and v (views of its fused q/k/v GEMM); q and k with their QK-norms, v with
// none (its norm fields are ignored).
struct QkvParts {
  StreamPart q, k, v;
};

struct JointQkv {
  torch::Tensor q, k, v;  // (B, heads, S_txt + S_img, hd) views, tokens first in memory
};

// q, k and v of one attention: JointHeadsFirst(txt.q, img.q, &rope), the same for k, and
// JointHeadsFirst(txt.v, img.v, nullptr). Where the kernel runs for all three, one launch
// (LaunchQkNormRopeParts) writes them all: 1 launch instead of 6 for a joint attention, 3 for a
// single stream. Elsewhere, three JointHeadsFirst calls. `txt.q.x` undefined: the image stream
// alone (then txt.k and txt.v must be undefined too).
JointQkv JointQkvHeadsFirst(const QkvParts& txt, const QkvParts& img, const RopeTables& rope,
                            RopeOrder order = RopeOrder::kJoined);

// The reference op sequence (any device and dtype), as a (B, heads, S, hd) view. Each norm is the
// module's own Forward, so the rounding is exactly the unfused model's.
torch::Tensor JointHeadsFirstReference(const StreamPart& txt, const StreamPart& img,
                                       const RopeTables* rope,
                                       RopeOrder order = RopeOrder::kJoined);

}  // namespace ditserve::models
