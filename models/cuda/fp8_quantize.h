// Dynamic per-row FP8 quantization of a GEMM's activations (the `--weights fp8` path,
// models/common/fp8_linear.h): for each row r of x (rows, cols), scale[r] = max(amax(|x[r]|), tiny)
// · float(1/448) and q[r][c] = e4m3(x[r][c] / scale[r]) (round to nearest even, saturating at
// ±448), so that x ≈ q · scale row by row, which is how a rowwise-scaled FP8 GEMM reads it.
// One block per row; the row is read twice (the second time from cache), written once as bytes.
//
// Torch-free, built into ditserve_cuda_kernels (CUDA variant only).
// Contract: x rows of `cols` contiguous elements, row stride x_stride (elements), bf16 or fp16 or
// float32 (ElementType); q (rows, cols) contiguous bytes (torch.float8_e4m3fn); scale (rows) float32;
// all device memory of the stream's device; cols > 0. Asynchronous on `stream`; returns the
// launch's cudaError_t (0 = cudaSuccess), cudaErrorInvalidValue outside the contract.
#pragma once

#include <cstdint>

#include "models/cuda/element_type.h"

namespace ditserve::cuda {

// The largest finite e4m3 (fn) value.
constexpr float kFp8E4m3Max = 448.0f;

struct Fp8QuantizeArgs {
  ElementType type = ElementType::kBFloat16;
  const void* x = nullptr;
  int64_t rows = 0, cols = 0, x_stride = 0;
  void* q = nullptr;
  float* scale = nullptr;
};

int LaunchFp8QuantizeRows(const Fp8QuantizeArgs& args, void* cuda_stream);

}  // namespace ditserve::cuda
