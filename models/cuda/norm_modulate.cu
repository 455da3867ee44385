#include "models/cuda/norm_modulate.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "models/cuda/element_convert.cuh"
#include "models/cuda/vector_access.cuh"

namespace ditserve::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // one block per row
constexpr int kMaxVecs = 4;    // 16-byte vectors per thread: the row lives in registers

template <typename T>
__host__ __device__ constexpr int VecWidth() {
  return static_cast<int>(16 / sizeof(T));
}

union Pack16 {
  uint4 raw;
  unsigned short u16[8];
  float f32[4];
};

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

// Sum over the block; every thread gets the result. `shared` holds kThreads / kWarp floats and is
// free again when this returns.
__device__ __forceinline__ float BlockSum(float v, float* shared) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / kWarp; ++w) total += shared[w];
  __syncthreads();
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) NormModulateKernel(NormModulateArgs a) {
  constexpr int V = VecWidth<T>();
  __shared__ float shared[kThreads / kWarp];
  const int64_t row = blockIdx.x;  // b * tokens + s
  const int64_t b = row / a.tokens;
  const int vecs = static_cast<int>(a.dim / V);
  const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.dim);

  float v[kMaxVecs][V];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int idx = threadIdx.x + j * kThreads;
    if (idx < vecs) {
      Unpack<T>(x[idx], v[j]);
#pragma unroll
      for (int i = 0; i < V; ++i) sum += v[j][i];
    }
  }
  const float inv_dim = 1.f / static_cast<float>(a.dim);
  const float mean = BlockSum(sum, shared) * inv_dim;
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (threadIdx.x + j * kThreads < vecs) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v[j][i] - mean;
        sq += d * d;
      }
    }
  }
  const float rstd = rsqrtf(BlockSum(sq, shared) * inv_dim + a.eps);

  const uint4* scale = reinterpret_cast<const uint4*>(static_cast<const T*>(a.scale) + b * a.scale_stride_b);
  const uint4* shift = reinterpret_cast<const uint4*>(static_cast<const T*>(a.shift) + b * a.shift_stride_b);
  uint4* out = reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * a.dim);
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int idx = threadIdx.x + j * kThreads;
    if (idx < vecs) {
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

int ElementBytes(ElementType t) { return t == ElementType::kFloat32 ? 4 : 2; }

}  // namespace

int64_t NormModulateMaxDim(ElementType type) {
  return static_cast<int64_t>(kThreads) * kMaxVecs * (16 / ElementBytes(type));
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
    case ElementType::kFloat32: NormModulateKernel<float><<<grid, block, 0, stream>>>(a); break;
    case ElementType::kBFloat16: NormModulateKernel<__nv_bfloat16><<<grid, block, 0, stream>>>(a); break;
    case ElementType::kFloat16: NormModulateKernel<__half><<<grid, block, 0, stream>>>(a); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ditserve::cuda
