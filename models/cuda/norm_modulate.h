// Fused CUDA kernel for the adaptive LayerNorm of every DiT block in ditserve (FLUX.1, FLUX.2,
// Qwen-Image): per row of x, LayerNorm without affine (float32 statistics, the normalised row
// rounded to x's dtype, as torch.layer_norm returns it), then the modulation
// normed·(1 + scale) + shift with (1 + scale) rounded to the dtype and the product-sum computed in
// float32 and rounded once (models/common/ada_layer_norm.h's Modulate, an addcmul). One read of x,
// one write of the result, instead of the two kernels and the intermediate tensor of the
// reference op sequence.
//
// The row body is norm_modulate_row.cuh, shared with the gated residual's fused kernel
// (gated_residual.h). Torch-free (raw pointers and strides), built into ditserve_cuda_kernels; the
// LibTorch glue is models/common/norm_modulate.cc (NormModulate). Only built with
// -DDITSERVE_CUDA=ON.
//
// Contract: x and out are (batch, tokens, dim) contiguous; scale and shift are (batch, dim) with a
// contiguous last dim and row strides scale_stride_b / shift_stride_b (elements; chunks of the
// modulation GEMM's output are fine); all of x's dtype, on the stream's device. dim must be a
// multiple of the vector width (8 for 16-bit types, 4 for float32) and at most
// NormModulateMaxDim(type); pointers and row strides aligned to 16 bytes. Asynchronous on
// `stream`; returns the launch's cudaError_t (0 = cudaSuccess), cudaErrorInvalidValue for arguments
// outside the contract (nothing launched).
#pragma once

#include <cstdint>

#include "models/cuda/element_type.h"

namespace ditserve::cuda {

struct NormModulateArgs {
  ElementType type = ElementType::kBFloat16;
  const void* x = nullptr;
  int64_t batch = 0, tokens = 0, dim = 0;
  const void* scale = nullptr;
  int64_t scale_stride_b = 0;
  const void* shift = nullptr;
  int64_t shift_stride_b = 0;
  float eps = 1e-6f;
  void* out = nullptr;
};

// The widest row the kernel takes for an element type (whole rows live in registers).
int64_t NormModulateMaxDim(ElementType type);

int LaunchNormModulate(const NormModulateArgs& args, void* cuda_stream);

}  // namespace ditserve::cuda
