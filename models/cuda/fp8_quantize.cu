#include "models/cuda/fp8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "models/cuda/element_convert.cuh"

namespace ditserve::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
// Below this a row counts as all zeros (its scale stays finite and positive).
constexpr float kTinyAmax = 1e-12f;

__device__ __forceinline__ float BlockMax(float v, float* shared) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / kWarp; ++w) m = fmaxf(m, shared[w]);
  return m;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) Fp8QuantizeRowsKernel(Fp8QuantizeArgs a) {
  __shared__ float shared[kThreads / kWarp];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
  float amax = 0.f;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) amax = fmaxf(amax, fabsf(ToFloat(x[c])));
  amax = fmaxf(BlockMax(amax, shared), kTinyAmax);
  // amax · (1/448) and x / scale: the ATen reference's operations (fp8_linear.cc), bit for bit.
  const float scale = amax * (1.0f / kFp8E4m3Max);
  if (threadIdx.x == 0) a.scale[row] = scale;
  auto* q = static_cast<__nv_fp8_storage_t*>(a.q) + row * a.cols;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    q[c] = __nv_cvt_float_to_fp8(ToFloat(x[c]) / scale, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace

int LaunchFp8QuantizeRows(const Fp8QuantizeArgs& a, void* cuda_stream) {
  if (a.rows < 0 || a.cols <= 0 || a.x_stride < a.cols || a.rows > 0x7fffffff ||
      a.x == nullptr || a.q == nullptr || a.scale == nullptr) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (a.rows == 0) return static_cast<int>(cudaSuccess);
  const dim3 grid(static_cast<unsigned>(a.rows));
  const dim3 block(kThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (a.type) {
    case ElementType::kFloat32: Fp8QuantizeRowsKernel<float><<<grid, block, 0, stream>>>(a); break;
    case ElementType::kBFloat16: Fp8QuantizeRowsKernel<__nv_bfloat16><<<grid, block, 0, stream>>>(a); break;
    case ElementType::kFloat16: Fp8QuantizeRowsKernel<__half><<<grid, block, 0, stream>>>(a); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ditserve::cuda
