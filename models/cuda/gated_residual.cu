#include "models/cuda/gated_residual.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "models/cuda/norm_modulate.h"
#include "models/cuda/norm_modulate_row.cuh"
#include "models/cuda/vector_access.cuh"

namespace ditserve::cuda {
namespace {

using norm_row::HoldsVector;
using norm_row::kMaxVecs;
using norm_row::kThreads;
using norm_row::kWarp;
using norm_row::Pack;
using norm_row::Unpack;
using norm_row::VecWidth;

// x + g·y as torch.addcmul(x, g, y) computes it on CUDA (float32 opmath, value 1), as the value of
// T the result rounds to: with kFma one rounding (fmaf, PyTorch >= 2.11), else the product rounded
// to float32 first (PyTorch <= 2.10). Explicit _rn intrinsics, so no contraction choice of the
// compiler changes it. For 16-bit T the product is exact in float32: both forms agree.
template <typename T, bool kFma>
__device__ __forceinline__ float GatedResidualValue(float x, float g, float y) {
  if constexpr (kFma) {
    return RoundTo<T>(__fmaf_rn(g, y, x));
  } else {
    return RoundTo<T>(__fadd_rn(x, __fmul_rn(g, y)));
  }
}

// One 16-byte vector of the residual, elementwise x + g·y, as float32 values of T.
template <typename T, bool kFma>
__device__ __forceinline__ void GatedResidualVector(const uint4& x, const uint4& g, const uint4& y,
                                                    float* r) {
  constexpr int V = VecWidth<T>();
  float xv[V], gv[V], yv[V];
  Unpack<T>(x, xv);
  Unpack<T>(g, gv);
  Unpack<T>(y, yv);
#pragma unroll
  for (int i = 0; i < V; ++i) r[i] = GatedResidualValue<T, kFma>(xv[i], gv[i], yv[i]);
}

constexpr int kBlock = 256;                  // threads per block of the elementwise kernel
constexpr int64_t kMaxBlocks = 65535LL * 8;  // enough to fill the device; the loop does the rest

// Elementwise: one thread per 16-byte vector of x (grid-stride), vector i in batch entry
// i / batch_vecs at column vector i % row_vecs. Index is uint32_t where every vector index and
// index + stride fits, else int64_t.
template <typename T, bool kFma, typename Index>
__global__ void __launch_bounds__(kBlock)
    GatedResidualKernel(GatedResidualArgs a, Index total, Index row_vecs, Index batch_vecs) {
  constexpr int V = VecWidth<T>();
  const uint4* __restrict__ x = static_cast<const uint4*>(a.x);
  const uint4* __restrict__ y = static_cast<const uint4*>(a.y);
  const T* __restrict__ gate = static_cast<const T*>(a.gate);
  uint4* __restrict__ out = static_cast<uint4*>(a.out);
  const Index stride = static_cast<Index>(gridDim.x) * kBlock;
  for (Index i = static_cast<Index>(blockIdx.x) * kBlock + threadIdx.x; i < total; i += stride) {
    const int64_t b = static_cast<int64_t>(i / batch_vecs);
    const int64_t col = static_cast<int64_t>(i % row_vecs);
    const uint4 g = *reinterpret_cast<const uint4*>(gate + b * a.gate_stride_b + col * V);
    float r[V];
    GatedResidualVector<T, kFma>(x[i], g, y[i], r);
    out[i] = Pack<T>(r);
  }
}

// The residual, then NormModulate's row body on it (norm_modulate_row.cuh): one block per row.
template <typename T, bool kFma>
__global__ void __launch_bounds__(kThreads)
    GatedResidualNormModulateKernel(GatedResidualNormModulateArgs a) {
  constexpr int V = VecWidth<T>();
  __shared__ float shared[kThreads / kWarp];
  const GatedResidualArgs& r = a.residual;
  const int64_t row = blockIdx.x;  // b * tokens + s
  const int64_t b = row / r.tokens;
  const int vecs = static_cast<int>(r.dim / V);
  const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(r.x) + row * r.dim);
  const uint4* y = reinterpret_cast<const uint4*>(static_cast<const T*>(r.y) + row * r.dim);
  const uint4* gate =
      reinterpret_cast<const uint4*>(static_cast<const T*>(r.gate) + b * r.gate_stride_b);
  uint4* residual = reinterpret_cast<uint4*>(static_cast<T*>(r.out) + row * r.dim);

  float v[kMaxVecs][V];
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (HoldsVector(j, vecs)) {
      const int idx = threadIdx.x + j * kThreads;
      GatedResidualVector<T, kFma>(x[idx], gate[idx], y[idx], v[j]);
      residual[idx] = Pack<T>(v[j]);
    }
  }
  norm_row::NormModulateRow<T>(
      v, vecs, r.dim, a.eps,
      reinterpret_cast<const uint4*>(static_cast<const T*>(a.scale) + b * a.scale_stride_b),
      reinterpret_cast<const uint4*>(static_cast<const T*>(a.shift) + b * a.shift_stride_b),
      reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * r.dim), shared);
}

int64_t VectorWidth(ElementType t) {
  return t == ElementType::kFloat32 ? 4 : 8;
}

// The shapes and strides of the contract (pointers are checked once there is work).
bool ShapesValid(const GatedResidualArgs& a) {
  const int64_t width = VectorWidth(a.type);
  return a.batch >= 0 && a.tokens >= 0 && a.dim > 0 && a.dim % width == 0 &&
         a.gate_stride_b % width == 0;
}

bool PointersValid(const GatedResidualArgs& a) {
  for (const void* p : {a.x, a.y, a.gate, static_cast<const void*>(a.out)}) {
    if (p == nullptr || !AlignedTo(p, 16)) return false;
  }
  return true;
}

template <typename T, bool kFma>
int LaunchElementwise(const GatedResidualArgs& a, cudaStream_t stream) {
  constexpr int V = VecWidth<T>();
  const int64_t row_vecs = a.dim / V;
  const int64_t batch_vecs = a.tokens * row_vecs;
  const int64_t total = a.batch * batch_vecs;
  const int64_t blocks = std::min<int64_t>((total + kBlock - 1) / kBlock, kMaxBlocks);
  const dim3 grid(static_cast<unsigned>(blocks));
  if (total + kMaxBlocks * kBlock <= static_cast<int64_t>(UINT32_MAX)) {
    GatedResidualKernel<T, kFma, uint32_t><<<grid, kBlock, 0, stream>>>(
        a, static_cast<uint32_t>(total), static_cast<uint32_t>(row_vecs),
        static_cast<uint32_t>(batch_vecs));
  } else {
    GatedResidualKernel<T, kFma, int64_t>
        <<<grid, kBlock, 0, stream>>>(a, total, row_vecs, batch_vecs);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T, bool kFma>
int LaunchRows(const GatedResidualNormModulateArgs& a, cudaStream_t stream) {
  const int64_t rows = a.residual.batch * a.residual.tokens;
  GatedResidualNormModulateKernel<T, kFma>
      <<<dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchGatedResidual(const GatedResidualArgs& a, void* cuda_stream) {
  if (!ShapesValid(a)) return static_cast<int>(cudaErrorInvalidValue);
  if (a.batch * a.tokens == 0) return static_cast<int>(cudaSuccess);
  if (!PointersValid(a)) return static_cast<int>(cudaErrorInvalidValue);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (a.type) {
    case ElementType::kFloat32:
      return a.fused_multiply_add ? LaunchElementwise<float, true>(a, stream)
                                  : LaunchElementwise<float, false>(a, stream);
    case ElementType::kBFloat16:
      return LaunchElementwise<__nv_bfloat16, true>(a, stream);
    case ElementType::kFloat16:
      return LaunchElementwise<__half, true>(a, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int LaunchGatedResidualNormModulate(const GatedResidualNormModulateArgs& a, void* cuda_stream) {
  const GatedResidualArgs& r = a.residual;
  const int64_t width = VectorWidth(r.type);
  if (!ShapesValid(r) || r.dim > NormModulateMaxDim(r.type) || a.scale_stride_b % width != 0 ||
      a.shift_stride_b % width != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t rows = r.batch * r.tokens;
  if (rows == 0) return static_cast<int>(cudaSuccess);
  if (rows > 0x7fffffff || !PointersValid(r) || a.scale == nullptr || a.shift == nullptr ||
      a.out == nullptr || !AlignedTo(a.scale, 16) || !AlignedTo(a.shift, 16) ||
      !AlignedTo(a.out, 16)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (r.type) {
    case ElementType::kFloat32:
      return r.fused_multiply_add ? LaunchRows<float, true>(a, stream)
                                  : LaunchRows<float, false>(a, stream);
    case ElementType::kBFloat16:
      return LaunchRows<__nv_bfloat16, true>(a, stream);
    case ElementType::kFloat16:
      return LaunchRows<__half, true>(a, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace ditserve::cuda
