// Fused CUDA kernel for the attention inputs of the FLUX transformers and Qwen-Image: per (batch,
// token, head) row of q or k, RMSNorm over the head dim (float32 statistics, rstd = rsqrt(mean(x²)
// + eps)), then the interleaved rotary embedding (apply_rotary_emb: in float32, rounded once),
// written to a tokens-first (B, S_total, H, D) buffer at a token offset, so that the text and image
// streams land in one joint tensor without a `cat` (the caller hands SDPA its heads-first view).
// With no norm and no rope the same kernel only moves v into that buffer. For head_dim = 32·E
// (E = 2, 4, 8; at most 16 bytes a lane) with rows aligned to E elements, each lane reads and
// writes E consecutive elements in one access; other shapes take a pair-per-lane variant with the
// same arithmetic.
//
// The norm's rounding, in x's dtype T (each round() a no-op for float32):
//   round_before_weight false (torch.nn.RMSNorm, FLUX):      round(x·rstd·w)
//   round_before_weight true  (diffusers' RMSNorm with a weight of x's dtype, Qwen-Image):
//                                                            round(round(x·rstd)·w)
//
// Torch-free (raw pointers and strides), so it is its own CUDA target (ditserve_cuda_kernels);
// models/common/attention_inputs.h is the LibTorch glue. Only built with -DDITSERVE_CUDA=ON.
//
// Contract: x's last dimension is contiguous; every pointer is device memory of the stream's
// device; cos/sin are (rope_rows, D) float32 contiguous with pairs repeated ([c0, c0, c1, c1, ...],
// rope row = offset + token); out is (B, S_total, H, D) contiguous; D even and <= 256.
// Asynchronous on `stream`; returns the launch's cudaError_t (0 = cudaSuccess).
#pragma once

#include <cstdint>

#include "models/cuda/element_type.h"

namespace ditserve::cuda {

struct QkNormRopeArgs {
  ElementType type = ElementType::kBFloat16;
  const void* x = nullptr;  // (B, S, H, D) with strides below (in elements)
  int64_t x_stride_b = 0, x_stride_s = 0, x_stride_h = 0;
  int64_t batch = 0, tokens = 0, heads = 0, head_dim = 0;
  const void* norm_weight = nullptr;  // (D), same type as x; null: no RMSNorm
  float norm_eps = 1e-6f;
  bool round_before_weight = false;  // see the norm's rounding above; ignored without norm_weight
  const float* cos = nullptr;        // null: no rotary embedding
  const float* sin = nullptr;
  void* out = nullptr;  // (B, out_tokens, H, D)
  int64_t out_tokens = 0, token_offset = 0;
};

int LaunchQkNormRope(const QkNormRopeArgs& args, void* cuda_stream);

// Up to kMaxQkNormRopeParts argument sets (e.g. q, k and v of both streams of one attention) in
// one kernel launch where every part takes the vector path with the same width, else a launch
// each: the same results as LaunchQkNormRope per part, in fewer launches (each launch is a gap of
// a few microseconds between kernels). All parts of one element type; each meets the contract
// above; their outputs must not overlap. Returns the first error (cudaErrorInvalidValue for a
// part outside the contract, or a count outside [0, kMaxQkNormRopeParts], nothing launched).
constexpr int kMaxQkNormRopeParts = 6;
int LaunchQkNormRopeParts(const QkNormRopeArgs* parts, int count, void* cuda_stream);

}  // namespace ditserve::cuda
