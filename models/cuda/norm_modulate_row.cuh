// The row body of the adaptive-LayerNorm kernels (norm_modulate.cu: NormModulate;
// gated_residual.cu: the gated residual followed by it), so that both run one definition of the
// arithmetic: per row, LayerNorm without affine (float32 statistics, the normalised row rounded to
// the dtype, as torch.layer_norm returns it), then normed·(1 + scale) + shift with (1 + scale)
// rounded to the dtype and the product-sum computed in float32 and rounded once.
//
// Geometry: one block of kThreads threads per row; the row lives in registers as 16-byte vectors,
// thread t holding the row's vectors t, t + kThreads, ... (at most kMaxVecs of them): v[j] is the
// row's vector threadIdx.x + j·kThreads, valid where HoldsVector(j, vecs). A kernel loads its row
// into v (as float32 values of the dtype), then calls NormModulateRow. CUDA only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "models/cuda/element_convert.cuh"

namespace ditserve::cuda::norm_row {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // one block per row
constexpr int kMaxVecs = 4;    // 16-byte vectors per thread: the row lives in registers

// Elements of T in one 16-byte vector.
template <typename T>
__host__ __device__ constexpr int VecWidth() {
  return static_cast<int>(16 / sizeof(T));
}

// The widest row the body takes for an element size (2 or 4 bytes).
__host__ __device__ constexpr int64_t MaxDim(int element_bytes) {
  return static_cast<int64_t>(kThreads) * kMaxVecs * (16 / element_bytes);
}

union Pack16 {
  uint4 raw;
  unsigned short u16[8];
  float f32[4];
};

// One 16-byte vector of T as float32 values.
template <typename T>
__device__ __forceinline__ void Unpack(const uint4& raw, float* out) {
  Pack16 p;
  p.raw = raw;
  constexpr int V = VecWidth<T>();
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if constexpr (sizeof(T) == 4) {
      out[i] = p.f32[i];
    } else {
      T e;
      *reinterpret_cast<unsigned short*>(&e) = p.u16[i];
      out[i] = ToFloat(e);
    }
  }
}

// VecWidth<T>() float32 values rounded to T (nearest even) as one 16-byte vector.
template <typename T>
__device__ __forceinline__ uint4 Pack(const float* in) {
  Pack16 p;
  constexpr int V = VecWidth<T>();
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if constexpr (sizeof(T) == 4) {
      p.f32[i] = in[i];
    } else {
      const T e = FromFloat<T>(in[i]);
      p.u16[i] = *reinterpret_cast<const unsigned short*>(&e);
    }
  }
  return p.raw;
}

// Whether this thread holds the row's vector threadIdx.x + j·kThreads (of `vecs`).
__device__ __forceinline__ bool HoldsVector(int j, int vecs) {
  return static_cast<int>(threadIdx.x) + j * kThreads < vecs;
}

// Sum over the block; every thread gets the result. `shared` holds kThreads / kWarp floats and is
// free again when this returns.
__device__ __forceinline__ float BlockSum(float v, float* shared) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / kWarp; ++w) total += shared[w];
  __syncthreads();
  return total;
}

// The normalised and modulated row from its values in registers (v, as laid out above; `vecs`
// vectors of `dim` elements): scale and shift point at the row's batch entry, out at the row; all
// 16-byte aligned. Every thread of the block calls it (it synchronises the block).
template <typename T>
__device__ __forceinline__ void NormModulateRow(const float (&v)[kMaxVecs][VecWidth<T>()], int vecs,
                                                int64_t dim, float eps, const uint4* scale,
                                                const uint4* shift, uint4* out, float* shared) {
  constexpr int V = VecWidth<T>();
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (HoldsVector(j, vecs)) {
#pragma unroll
      for (int i = 0; i < V; ++i) sum += v[j][i];
    }
  }
  const float inv_dim = 1.f / static_cast<float>(dim);
  const float mean = BlockSum(sum, shared) * inv_dim;
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (HoldsVector(j, vecs)) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v[j][i] - mean;
        sq += d * d;
      }
    }
  }
  const float rstd = rsqrtf(BlockSum(sq, shared) * inv_dim + eps);
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (HoldsVector(j, vecs)) {
      const int idx = threadIdx.x + j * kThreads;
      float sc[V], sh[V], y[V];
      Unpack<T>(scale[idx], sc);
      Unpack<T>(shift[idx], sh);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float normed = RoundTo<T>((v[j][i] - mean) * rstd);  // torch.layer_norm's output
        const float factor = RoundTo<T>(1.f + sc[i]);              // the (1 + scale) tensor
        y[i] = sh[i] + normed * factor;                            // addcmul, rounded once
      }
      out[idx] = Pack<T>(y);
    }
  }
}

}  // namespace ditserve::cuda::norm_row
