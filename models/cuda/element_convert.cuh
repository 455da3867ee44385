// Device-side conversions between the kernels' element types and float32 (round to nearest even),
// shared by the kernels of ditserve_cuda_kernels. CUDA only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ditserve::cuda {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }

// v rounded to T and back: the value a tensor of dtype T would hold.
template <typename T>
__device__ __forceinline__ float RoundTo(float v) { return ToFloat(FromFloat<T>(v)); }

}  // namespace ditserve::cuda
