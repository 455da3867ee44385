#include "models/cuda/qk_norm_rope.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "models/cuda/element_convert.cuh"
#include "models/cuda/vector_access.cuh"

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

// Offset of row (b, s, h)'s first element in the tokens-first (B, out_tokens, H, D) output.
__device__ __forceinline__ int64_t OutRow(const QkNormRopeArgs& a, int64_t b, int64_t s,
                                          int64_t h) {
  return ((b * a.out_tokens + a.token_offset + s) * a.heads + h) * a.head_dim;
}

// One warp per (b, s, h) row; lane l holds the pairs l, l + 32, ... of the row in registers.
template <typename T>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock) QkNormRopeKernel(QkNormRopeArgs a) {
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

  T* out = static_cast<T*>(a.out) + OutRow(a, b, s, h);
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int p = lane + kWarp * j;
    if (p < pairs) {
      out[2 * p] = FromFloat<T>(even[j]);
      out[2 * p + 1] = FromFloat<T>(odd[j]);
    }
  }
}

constexpr int kRowsPerWarp = 2;  // rows whose loads a warp has in flight together

// The common shapes (head_dim = 32·E, E in {2, 4, 8}, aligned rows): lane l holds the E consecutive
// elements [l·E, (l+1)·E) of a row (E even: its pairs are its own), read and written with one
// vector access; each warp handles kRowsPerWarp rows and issues all their loads before any
// arithmetic. The same per-element arithmetic as QkNormRopeKernel; only the order of the squares'
// float32 sum differs. `block` is the block's index within the launch's share of `a`'s rows.
template <typename T, int E>
__device__ __forceinline__ void VecRows(const QkNormRopeArgs& a, int64_t block) {
  const int64_t rows = a.batch * a.tokens * a.heads;
  const int64_t warp = block * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int e0 = lane * E;  // this lane's first element of the row
  float v[kRowsPerWarp][E];
  int64_t bsh[kRowsPerWarp][3];
  bool valid[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = warp * kRowsPerWarp + r;
    valid[r] = row < rows;  // the same for the whole warp
    const int64_t h = row % a.heads, s = (row / a.heads) % a.tokens, b = row / (a.heads * a.tokens);
    bsh[r][0] = b;
    bsh[r][1] = s;
    bsh[r][2] = h;
    if (valid[r]) {
      const T* x =
          static_cast<const T*>(a.x) + b * a.x_stride_b + s * a.x_stride_s + h * a.x_stride_h;
      const Vec<T, E> c = *reinterpret_cast<const Vec<T, E>*>(x + e0);
#pragma unroll
      for (int j = 0; j < E; ++j) v[r][j] = ToFloat(c.v[j]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!valid[r]) continue;
    if (a.norm_weight != nullptr) {
      float sum_sq = 0.f;
#pragma unroll
      for (int j = 0; j < E; ++j) sum_sq += v[r][j] * v[r][j];
#pragma unroll
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
      }
      const float rstd = rsqrtf(sum_sq / static_cast<float>(a.head_dim) + a.norm_eps);
      const T* w = static_cast<const T*>(a.norm_weight) + e0;
#pragma unroll
      for (int j = 0; j < E; ++j) v[r][j] = NormElement(v[r][j], rstd, w[j], a.round_before_weight);
    }
    if (a.cos != nullptr) {
      const int64_t at = (a.token_offset + bsh[r][1]) * a.head_dim + e0;
      const Vec<float, E> c = *reinterpret_cast<const Vec<float, E>*>(a.cos + at);
      const Vec<float, E> sn = *reinterpret_cast<const Vec<float, E>*>(a.sin + at);
#pragma unroll
      for (int j = 0; j < E; j += 2) {
        const float x0 = v[r][j], x1 = v[r][j + 1];
        v[r][j] = x0 * c.v[j] - x1 * sn.v[j];
        v[r][j + 1] = x1 * c.v[j + 1] + x0 * sn.v[j + 1];
      }
    }
    Vec<T, E> o;
#pragma unroll
    for (int j = 0; j < E; ++j) o.v[j] = FromFloat<T>(v[r][j]);
    T* out = static_cast<T*>(a.out) + OutRow(a, bsh[r][0], bsh[r][1], bsh[r][2]) + e0;
    *reinterpret_cast<Vec<T, E>*>(out) = o;
  }
}

// The vectorised kernel's launch, of one part or several: part i owns blocks [first_block[i],
// first_block[i + 1]). Passed as a __grid_constant__ parameter, so indexing it by the block's part
// reads the parameter in place.
struct PartsLaunch {
  QkNormRopeArgs part[kMaxQkNormRopeParts];
  int64_t first_block[kMaxQkNormRopeParts + 1];
  int count;
};

template <typename T, int E>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    QkNormRopeVecPartsKernel(const __grid_constant__ PartsLaunch parts) {
  const int64_t block = blockIdx.x;
  int i = 0;
  while (i + 1 < parts.count && block >= parts.first_block[i + 1]) ++i;
  VecRows<T, E>(parts.part[i], block - parts.first_block[i]);
}

// The vector width E of the vectorised kernel for these arguments (elements a lane), or 0 where
// the shape or alignment does not allow it.
template <typename T>
int64_t VectorWidth(const QkNormRopeArgs& a) {
  const int64_t e = a.head_dim / kWarp;
  if (a.head_dim % kWarp != 0 || (e != 2 && e != 4 && e != 8)) return 0;
  if (e * static_cast<int64_t>(sizeof(T)) > 16 || e * static_cast<int64_t>(sizeof(float)) > 32) {
    return 0;
  }
  const int64_t bytes = e * static_cast<int64_t>(sizeof(T));
  if (!AlignedTo(a.x, bytes) || !AlignedTo(a.out, bytes) || a.x_stride_b % e != 0 ||
      a.x_stride_s % e != 0 || a.x_stride_h % e != 0) {
    return 0;
  }
  if (a.cos != nullptr && (!AlignedTo(a.cos, e * 4) || !AlignedTo(a.sin, e * 4))) return 0;
  return e;
}

// Blocks of the vectorised kernel for a's rows.
int64_t VectorBlocks(const QkNormRopeArgs& a) {
  const int64_t rows = a.batch * a.tokens * a.heads;
  const int64_t warps = (rows + kRowsPerWarp - 1) / kRowsPerWarp;
  return (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
}

// All parts in one launch of the vectorised kernel when every part allows the same width, else
// false (nothing launched).
template <typename T>
bool LaunchVectorParts(const QkNormRopeArgs* parts, int count, cudaStream_t stream) {
  PartsLaunch p{};
  p.count = 0;
  int64_t e = 0, blocks = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t rows = parts[i].batch * parts[i].tokens * parts[i].heads;
    if (rows == 0) continue;
    const int64_t width = VectorWidth<T>(parts[i]);
    if (width == 0 || (e != 0 && width != e)) return false;
    e = width;
    p.part[p.count] = parts[i];
    p.first_block[p.count] = blocks;
    blocks += VectorBlocks(parts[i]);
    ++p.count;
  }
  if (p.count == 0) return true;
  p.first_block[p.count] = blocks;
  const dim3 grid(static_cast<unsigned>(blocks));
  const dim3 block(kWarp * kWarpsPerBlock);
  switch (e) {
    case 2:
      QkNormRopeVecPartsKernel<T, 2><<<grid, block, 0, stream>>>(p);
      break;
    case 4:
      QkNormRopeVecPartsKernel<T, 4><<<grid, block, 0, stream>>>(p);
      break;
    default:
      QkNormRopeVecPartsKernel<T, 8><<<grid, block, 0, stream>>>(p);
      break;
  }
  return true;
}

template <typename T>
void Launch(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (LaunchVectorParts<T>(&a, 1, stream)) return;  // the vectorised kernel, one part
  const int64_t rows = a.batch * a.tokens * a.heads;
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  const dim3 block(kWarp * kWarpsPerBlock);
  QkNormRopeKernel<T><<<grid, block, 0, stream>>>(a);
}

// The contract of qk_norm_rope.h that a launch checks.
bool ValidArgs(const QkNormRopeArgs& a) {
  return a.head_dim > 0 && a.head_dim % 2 == 0 && a.head_dim <= 2 * kWarp * kMaxPairsPerLane &&
         a.token_offset >= 0 && a.token_offset + a.tokens <= a.out_tokens &&
         (a.cos == nullptr) == (a.sin == nullptr);
}

}  // namespace

int LaunchQkNormRope(const QkNormRopeArgs& a, void* cuda_stream) {
  if (!ValidArgs(a)) return static_cast<int>(cudaErrorInvalidValue);
  if (a.batch * a.tokens * a.heads == 0) return static_cast<int>(cudaSuccess);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (a.type) {
    case ElementType::kFloat32:
      Launch<float>(a, stream);
      break;
    case ElementType::kBFloat16:
      Launch<__nv_bfloat16>(a, stream);
      break;
    case ElementType::kFloat16:
      Launch<__half>(a, stream);
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchQkNormRopeParts(const QkNormRopeArgs* parts, int count, void* cuda_stream) {
  if (count < 0 || count > kMaxQkNormRopeParts || (count > 0 && parts == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  for (int i = 0; i < count; ++i) {
    if (!ValidArgs(parts[i]) || parts[i].type != parts[0].type) {
      return static_cast<int>(cudaErrorInvalidValue);
    }
  }
  if (count == 0) return static_cast<int>(cudaSuccess);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  bool launched = false;
  switch (parts[0].type) {
    case ElementType::kFloat32:
      launched = LaunchVectorParts<float>(parts, count, stream);
      break;
    case ElementType::kBFloat16:
      launched = LaunchVectorParts<__nv_bfloat16>(parts, count, stream);
      break;
    case ElementType::kFloat16:
      launched = LaunchVectorParts<__half>(parts, count, stream);
      break;
  }
  if (launched) return static_cast<int>(cudaGetLastError());
  // Parts of different widths, or one the vector path does not take: a launch each.
  for (int i = 0; i < count; ++i) {
    const int err = LaunchQkNormRope(parts[i], cuda_stream);
    if (err != static_cast<int>(cudaSuccess)) return err;
  }
  return static_cast<int>(cudaSuccess);
}

}  // namespace ditserve::cuda
