#include "models/cuda/qk_norm_rope.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "models/cuda/element_convert.cuh"

namespace ditserve::cuda {
namespace {

// One normalised element in T's precision (qk_norm_rope.h): torch.nn.RMSNorm rounds x·rstd·w
// once; diffusers' RMSNorm rounds x·rstd to T before the multiply by the weight.
template <typename T>
__device__ __forceinline__ float NormElement(float x, float rstd, T w, bool round_before_weight) {
  float y = x * rstd;
  if (round_before_weight) y = RoundTo<T>(y);
  return RoundTo<T>(y * ToFloat(w));
}

constexpr int kWarp = 32;
constexpr int kMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4 = 256
constexpr int kWarpsPerBlock = 8;

// One warp per (b, s, h) row; lane l holds the pairs l, l + 32, ... of the row in registers.
template <typename T>
__global__ void __launch_bounds__(kWarp * kWarpsPerBlock) QkNormRopeKernel(QkNormRopeArgs a) {
  const int64_t rows = a.batch * a.tokens * a.heads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // whole warps leave together, so the shuffles below stay full-warp
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t h = row % a.heads;
  const int64_t s = (row / a.heads) % a.tokens;
  const int64_t b = row / (a.heads * a.tokens);
  const T* x = static_cast<const T*>(a.x) + b * a.x_stride_b + s * a.x_stride_s + h * a.x_stride_h;
  const int pairs = static_cast<int>(a.head_dim / 2);

  float even[kMaxPairsPerLane], odd[kMaxPairsPerLane];
  float sum_sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int p = lane + kWarp * j;
    even[j] = odd[j] = 0.f;
    if (p < pairs) {
      even[j] = ToFloat(x[2 * p]);
      odd[j] = ToFloat(x[2 * p + 1]);
      sum_sq += even[j] * even[j] + odd[j] * odd[j];
    }
  }

  if (a.norm_weight != nullptr) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    }
    const float rstd = rsqrtf(sum_sq / static_cast<float>(a.head_dim) + a.norm_eps);
    const T* w = static_cast<const T*>(a.norm_weight);
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      const int p = lane + kWarp * j;
      if (p < pairs) {
        // The norm's output is a tensor of x's dtype before the rotation reads it.
        even[j] = NormElement(even[j], rstd, w[2 * p], a.round_before_weight);
        odd[j] = NormElement(odd[j], rstd, w[2 * p + 1], a.round_before_weight);
      }
    }
  }

  if (a.cos != nullptr) {
    const int64_t r = (a.token_offset + s) * a.head_dim;
    const float* c = a.cos + r;
    const float* sn = a.sin + r;
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      const int p = lane + kWarp * j;
      if (p < pairs) {
        const float x0 = even[j], x1 = odd[j];
        // x·cos + rot(x)·sin with rot(x)[2p] = -x[2p+1], rot(x)[2p+1] = x[2p].
        even[j] = x0 * c[2 * p] - x1 * sn[2 * p];
        odd[j] = x1 * c[2 * p + 1] + x0 * sn[2 * p + 1];
      }
    }
  }

  T* out = static_cast<T*>(a.out) + ((b * a.heads + h) * a.out_tokens + a.token_offset + s) * a.head_dim;
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int p = lane + kWarp * j;
    if (p < pairs) {
      out[2 * p] = FromFloat<T>(even[j]);
      out[2 * p + 1] = FromFloat<T>(odd[j]);
    }
  }
}

}  // namespace

int LaunchQkNormRope(const QkNormRopeArgs& a, void* cuda_stream) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 2 * kWarp * kMaxPairsPerLane ||
      a.token_offset < 0 || a.token_offset + a.tokens > a.out_tokens || (a.cos == nullptr) != (a.sin == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t rows = a.batch * a.tokens * a.heads;
  if (rows == 0) return static_cast<int>(cudaSuccess);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  const dim3 block(kWarp * kWarpsPerBlock);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (a.type) {
    case ElementType::kFloat32: QkNormRopeKernel<float><<<grid, block, 0, stream>>>(a); break;
    case ElementType::kBFloat16: QkNormRopeKernel<__nv_bfloat16><<<grid, block, 0, stream>>>(a); break;
    case ElementType::kFloat16: QkNormRopeKernel<__half><<<grid, block, 0, stream>>>(a); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ditserve::cuda
