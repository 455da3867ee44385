#include "models/cuda/norm_modulate.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "models/cuda/norm_modulate_row.cuh"
#include "models/cuda/vector_access.cuh"

namespace ditserve::cuda {
namespace {

using norm_row::HoldsVector;
using norm_row::kMaxVecs;
using norm_row::kThreads;
using norm_row::kWarp;
using norm_row::VecWidth;

template <typename T>
__global__ void __launch_bounds__(kThreads) NormModulateKernel(NormModulateArgs a) {
  constexpr int V = VecWidth<T>();
  __shared__ float shared[kThreads / kWarp];
  const int64_t row = blockIdx.x;  // b * tokens + s
  const int64_t b = row / a.tokens;
  const int vecs = static_cast<int>(a.dim / V);
  const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.dim);

  float v[kMaxVecs][V];
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (HoldsVector(j, vecs)) norm_row::Unpack<T>(x[threadIdx.x + j * kThreads], v[j]);
  }
  norm_row::NormModulateRow<T>(
      v, vecs, a.dim, a.eps,
      reinterpret_cast<const uint4*>(static_cast<const T*>(a.scale) + b * a.scale_stride_b),
      reinterpret_cast<const uint4*>(static_cast<const T*>(a.shift) + b * a.shift_stride_b),
      reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * a.dim), shared);
}

int ElementBytes(ElementType t) {
  return t == ElementType::kFloat32 ? 4 : 2;
}

}  // namespace

int64_t NormModulateMaxDim(ElementType type) {
  return norm_row::MaxDim(ElementBytes(type));
}

int LaunchNormModulate(const NormModulateArgs& a, void* cuda_stream) {
  const int64_t width = 16 / ElementBytes(a.type);
  const int64_t row_bytes_align = width;  // strides in elements must keep 16-byte alignment
  if (a.batch < 0 || a.tokens < 0 || a.dim <= 0 || a.dim % width != 0 ||
      a.dim > NormModulateMaxDim(a.type) || a.scale_stride_b % row_bytes_align != 0 ||
      a.shift_stride_b % row_bytes_align != 0 || !AlignedTo(a.x, 16) || !AlignedTo(a.scale, 16) ||
      !AlignedTo(a.shift, 16) || !AlignedTo(a.out, 16)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t rows = a.batch * a.tokens;
  if (rows == 0) return static_cast<int>(cudaSuccess);
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(rows));
  const dim3 block(kThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (a.type) {
    case ElementType::kFloat32:
      NormModulateKernel<float><<<grid, block, 0, stream>>>(a);
      break;
    case ElementType::kBFloat16:
      NormModulateKernel<__nv_bfloat16><<<grid, block, 0, stream>>>(a);
      break;
    case ElementType::kFloat16:
      NormModulateKernel<__half><<<grid, block, 0, stream>>>(a);
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ditserve::cuda
