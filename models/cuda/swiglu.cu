#include "models/cuda/swiglu.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "models/cuda/element_convert.cuh"
#include "models/cuda/vector_access.cuh"

namespace ditserve::cuda {
namespace {

// silu(g) rounded to T, times v, rounded to T: torch.silu then torch.mul (float32 opmath).
template <typename T>
__device__ __forceinline__ T SwiGluElement(T g, T v) {
  const float gf = ToFloat(g);
  const float s = RoundTo<T>(gf / (1.0f + expf(-gf)));
  return FromFloat<T>(s * ToFloat(v));
}

// One thread per kVec consecutive outputs of a row; grid-stride over rows × (width / kVec).
template <typename T, int kVec>
__global__ void SwiGluKernel(const T* __restrict__ x, int64_t x_row_stride, int64_t rows,
                             int64_t width, T* __restrict__ out, int64_t out_row_stride) {
  const int64_t per_row = width / kVec;
  const int64_t total = rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row;
    const int64_t c = (i - r * per_row) * kVec;
    const T* g = x + r * x_row_stride + c;
    const Vec<T, kVec> gp = *reinterpret_cast<const Vec<T, kVec>*>(g);
    const Vec<T, kVec> vp = *reinterpret_cast<const Vec<T, kVec>*>(g + width);
    Vec<T, kVec> o;
#pragma unroll
    for (int j = 0; j < kVec; ++j) o.v[j] = SwiGluElement<T>(gp.v[j], vp.v[j]);
    *reinterpret_cast<Vec<T, kVec>*>(out + r * out_row_stride + c) = o;
  }
}

template <typename T>
int Launch(const SwiGluArgs& a, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vector = a.width % kVec == 0 && a.x_row_stride % kVec == 0 &&
                      a.out_row_stride % kVec == 0 && AlignedTo(a.x, 16) && AlignedTo(a.out, 16);
  const int vec = vector ? kVec : 1;
  const int64_t work = a.rows * (a.width / vec);
  constexpr int kThreads = 256;
  // Enough blocks to fill the device several times over; the loop covers the rest.
  const int64_t blocks = std::min<int64_t>((work + kThreads - 1) / kThreads, 65535LL * 8);
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  if (vector) {
    SwiGluKernel<T, kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        x, a.x_row_stride, a.rows, a.width, out, a.out_row_stride);
  } else {
    SwiGluKernel<T, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        x, a.x_row_stride, a.rows, a.width, out, a.out_row_stride);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchSwiGlu(const SwiGluArgs& a, void* cuda_stream) {
  if (a.x == nullptr || a.out == nullptr || a.rows < 0 || a.width < 0 ||
      a.x_row_stride < 2 * a.width || a.out_row_stride < a.width) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (a.rows == 0 || a.width == 0) return static_cast<int>(cudaSuccess);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (a.type) {
    case ElementType::kFloat32: return Launch<float>(a, stream);
    case ElementType::kBFloat16: return Launch<__nv_bfloat16>(a, stream);
    case ElementType::kFloat16: return Launch<__half>(a, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace ditserve::cuda
