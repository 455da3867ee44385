// Whether this process uses ditserve's own CUDA kernels (models/cuda) where their contracts hold:
// true in the CUDA build (DITSERVE_WITH_CUDA_KERNELS) unless DITSERVE_FUSED_KERNELS=0 is in the
// environment (read once per process; the A/B switch of the benchmarks and of the parity runs).
// Elsewhere every fused op runs its reference op sequence.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

#include "models/cuda/element_type.h"

namespace ditserve::models {

bool FusedKernelsEnabled();

// An A/B switch of the CUDA build (DITSERVE_FUSED_KERNELS, DITSERVE_CUDA_GRAPHS): on unless the
// environment sets `name` to "0". Reads the environment at each call; callers keep the answer.
bool EnvironmentSwitchOn(const char* name);

// The kernels' element type for a tensor dtype (float32, bfloat16, float16); false for others.
bool KernelElementType(torch::ScalarType t, cuda::ElementType* out);

// Whether t's first element is 16-byte aligned (a 16-byte vector access may start there).
inline bool DataAligned16(const torch::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

#ifdef DITSERVE_WITH_CUDA_KERNELS
// Launches one of our kernels for tensors on `device`: that device current (a CUDAGuard, so any
// calling thread is correct), `launch` given its current stream (a cudaStream_t); throws
// (c10::Error) naming `kernel` when the launch reports an error.
void LaunchOnDevice(const torch::Device& device, const char* kernel,
                    const std::function<int(void* stream)>& launch);

// The rows of x (B, S, D) as our row kernels read them in 16-byte vectors (NormModulate, the gated
// residual): fused kernels on, x on CUDA, 3-D, contiguous, of a kernel dtype (*type), 16-byte
// aligned, D a multiple of the vector's width in elements (*width: 8 for 16-bit types, 4 for
// float32).
bool VectorRowsFit(const torch::Tensor& x, cuda::ElementType* type, int64_t* width);

// A per-sample (B, D) vector for those rows (scale, shift, gate: chunks of a modulation GEMM's
// output are fine): x's device and dtype, a contiguous last dim, every row on a 16-byte boundary.
bool PerSampleVectorFits(const torch::Tensor& t, const torch::Tensor& x, int64_t width);
#endif

}  // namespace ditserve::models
