// CUDA kernels for the gated residual of every DiT block in ditserve (FLUX.1, FLUX.2, Qwen-Image):
// out = x + gate[b]·y, gate broadcast over the tokens, with torch.addcmul(x, gate, y)'s arithmetic
// on CUDA: float32 opmath, rounded once to the dtype (see `fused_multiply_add` for float32).
//
//  * LaunchGatedResidual: that alone, in place of addcmul's broadcasting TensorIterator kernel.
//  * LaunchGatedResidualNormModulate: the gated residual followed by NormModulate of its result
//    (norm_modulate.h), as one kernel: x and y read once, the new residual stream and the
//    normalised + modulated row written, with NormModulate's arithmetic on the rounded residual
//    (the same row body as that kernel: norm_modulate_row.cuh), so both outputs equal the two
//    kernels run one after the other bit for bit.
//
// Torch-free (raw pointers and strides), built into ditserve_cuda_kernels; the LibTorch glue is
// models/common/gated_residual.cc (GatedResidual, GatedResidualNormModulate). Only built with
// -DDITSERVE_CUDA=ON.
//
// Contract (both): x, y and every output are (batch, tokens, dim) contiguous; gate (and scale,
// shift) are (batch, dim) with a contiguous last dim and row strides *_stride_b (elements; chunks
// of the modulation GEMM's output are fine); all of one dtype, on the stream's device; outputs do
// not overlap the inputs or each other. dim must be a multiple of the vector width (8 for 16-bit
// types, 4 for float32), and for LaunchGatedResidualNormModulate at most NormModulateMaxDim(type);
// pointers and row strides aligned to 16 bytes. Asynchronous on `stream`; returns the launch's
// cudaError_t (0 = cudaSuccess), cudaErrorInvalidValue for arguments outside the contract (nothing
// launched).
#pragma once

#include <cstdint>

#include "models/cuda/element_type.h"

namespace ditserve::cuda {

struct GatedResidualArgs {
  ElementType type = ElementType::kBFloat16;
  const void* x = nullptr;
  const void* y = nullptr;
  int64_t batch = 0, tokens = 0, dim = 0;
  const void* gate = nullptr;
  int64_t gate_stride_b = 0;
  // float32 only: x + gate·y with one rounding (fmaf: PyTorch >= 2.11's addcmul, which calls
  // std::fma when value == 1) instead of the product rounded to float32 before the sum (PyTorch <=
  // 2.10's `a + alpha * (b * c)`). For 16-bit types the product of two elements is exact in
  // float32, so both give the same result and the flag is ignored.
  bool fused_multiply_add = true;
  void* out = nullptr;
};

int LaunchGatedResidual(const GatedResidualArgs& args, void* cuda_stream);

struct GatedResidualNormModulateArgs {
  GatedResidualArgs residual;  // the gated residual; its `out` is the new residual stream
  const void* scale = nullptr;
  int64_t scale_stride_b = 0;
  const void* shift = nullptr;
  int64_t shift_stride_b = 0;
  float eps = 1e-6f;
  void* out = nullptr;  // NormModulate(residual.out, scale, shift, eps)
};

int LaunchGatedResidualNormModulate(const GatedResidualNormModulateArgs& args, void* cuda_stream);

}  // namespace ditserve::cuda
