// Fused CUDA kernel for FLUX.2's SwiGLU (Flux2SwiGLU, diffusers transformer_flux2.py):
// out = silu(g) · v for each row [g | v] of x, with the reference's roundings: silu computed in
// float32 (x / (1 + exp(-x))) and rounded to the dtype, then the product in float32 rounded once,
// as torch.silu followed by torch.mul give it. One read of x and one write of out, instead of two
// kernels, an intermediate tensor and (in the single blocks) a copy into the output projection's
// [attention | mlp] buffer: `out` may be a slice of a wider row.
//
// Torch-free (raw pointers and strides), built into ditserve_cuda_kernels; the LibTorch glue is
// models/common/swiglu_feed_forward.cc (SwiGlu, SwiGluInto). Only built with -DDITSERVE_CUDA=ON.
//
// Contract: x is rows × (2·width) with a contiguous last dim and row stride x_row_stride (elements:
// a column slice of a wider tensor is fine), g the first half of each row and v the second; out is
// rows × width with a contiguous last dim and row stride out_row_stride; same dtype, same device.
// The kernel uses 16-byte vectors when width, both row strides and both pointers allow, elements
// otherwise. Asynchronous on `stream`; returns the launch's cudaError_t (0 = cudaSuccess),
// cudaErrorInvalidValue for arguments outside the contract (nothing launched).
#pragma once

#include <cstdint>

#include "models/cuda/element_type.h"

namespace ditserve::cuda {

struct SwiGluArgs {
  ElementType type = ElementType::kBFloat16;
  const void* x = nullptr;
  int64_t x_row_stride = 0;
  int64_t rows = 0, width = 0;
  void* out = nullptr;
  int64_t out_row_stride = 0;
};

int LaunchSwiGlu(const SwiGluArgs& args, void* cuda_stream);

}  // namespace ditserve::cuda
