// The single place where LibTorch 1.13 (Debian, CPU) and LibTorch 2.x (GPU host, CUDA) differ.
// Everything else calls these wrappers instead of version-specific ATen functions.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/torch_guard.h"

#ifdef DITSERVE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#if !defined(TORCH_VERSION_MAJOR)
#include <torch/version.h>
#endif

#define DITSERVE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ditserve::compat {

// torch.addcmul(x, t1, t2) (value 1) in float32 on CUDA: PyTorch 2.11 computes it as one fma
// (std::fma(t1, t2, x), one rounding); earlier versions round t1·t2 to float32 before the sum. Our
// gated-residual kernel (models/common/gated_residual.cc) reproduces the linked version's.
inline constexpr bool kCudaAddcmulIsFma = DITSERVE_TORCH_AT_LEAST(2, 11);

// A CPU generator seeded like torch.Generator("cpu").manual_seed(seed): the same ATen kernel, so
// torch::randn with it reproduces PyTorch's noise bit for bit (same PyTorch version and dtype).
inline at::Generator SeededCpuGenerator(uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

// Waits for the device's queued work (a no-op on the CPU), for honest host-side timings.
inline void SynchronizeDevice(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// A point in the work queued so far on `device`'s current stream. Wait() blocks the host until the
// device has done that work; SecondsSince(earlier) is the device's time from `earlier` to this mark
// (CUDA event timing: not moved by when the host gets round to waiting). On the CPU, work is done
// when it is queued: the mark is the host's clock at construction and Wait() returns at once. Lets
// a loop queue step i+1 before waiting for step i (a SynchronizeDevice would wait for both) and
// still time each step. Not thread-safe; make, wait on and compare marks on the thread that
// queues the work, marks of one device.
class DeviceMark {
 public:
  explicit DeviceMark(const torch::Device& device) : host_time_(std::chrono::steady_clock::now()) {
#ifdef DITSERVE_WITH_CUDA
    if (device.is_cuda()) {
      event_.emplace(cudaEventDefault);  // with timing
      event_->record(at::cuda::getCurrentCUDAStream(device.index()));
    }
#else
    (void)device;
#endif
  }
  void Wait() {
#ifdef DITSERVE_WITH_CUDA
    if (event_.has_value()) event_->synchronize();
#endif
  }
  // Both marks waited for (on CUDA).
  double SecondsSince(const DeviceMark& earlier) const {
#ifdef DITSERVE_WITH_CUDA
    if (event_.has_value() && earlier.event_.has_value()) {
      return static_cast<double>(earlier.event_->elapsed_time(*event_)) / 1000.0;
    }
#endif
    return std::chrono::duration<double>(host_time_ - earlier.host_time_).count();
  }

 private:
  std::chrono::steady_clock::time_point host_time_;
#ifdef DITSERVE_WITH_CUDA
  std::optional<at::cuda::CUDAEvent> event_;
#endif
};

// Scaled dot-product attention on (B, heads, S, hd) tensors with the default scale 1/sqrt(hd).
// `mask` is empty or a boolean mask broadcastable to (B, heads, S, S) (true = attend).
inline torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                               const torch::Tensor& v,
                                               const torch::Tensor& mask = {}) {
#if DITSERVE_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(
      q, k, v, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt);
#else
  // LibTorch 1.13 has no public SDPA: the math path, as PyTorch's own fallback computes it.
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1));
  if (mask.defined()) {
    scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(scores, -1);
  return torch::matmul(probs, v);
#endif
}

// gelu(x · wᵀ + b, approximate="tanh"). On CUDA with a bias (LibTorch 2.x) this is one cuBLASLt
// GEMM whose epilogue adds the bias and applies GELU(tanh) to the float32 accumulator before the
// single rounding to x's dtype (at::_addmm_activation), saving a pass over the widest activation
// of the block; elsewhere the plain linear then gelu.
inline torch::Tensor LinearGeluTanh(const torch::Tensor& x, const torch::Tensor& w,
                                    const torch::Tensor& b) {
#if defined(DITSERVE_WITH_CUDA) && DITSERVE_TORCH_AT_LEAST(2, 0)
  if (x.is_cuda() && b.defined() && x.dim() >= 2) {
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes.back() = w.size(0);
    auto y = at::_addmm_activation(b, x.reshape({-1, x.size(-1)}), w.t(), 1, 1, /*use_gelu=*/true);
    return y.view(sizes);
  }
#endif
  return torch::gelu(torch::linear(x, w, b), "tanh");
}

// FP8 (float8_e4m3fn tensors and the rowwise-scaled FP8 GEMM): LibTorch 2.x with CUDA only.
#if defined(DITSERVE_WITH_CUDA) && DITSERVE_TORCH_AT_LEAST(2, 4)
#define DITSERVE_HAS_FP8 1
#else
#define DITSERVE_HAS_FP8 0
#endif

#if DITSERVE_HAS_FP8
inline constexpr torch::ScalarType kFloat8E4m3 = torch::kFloat8_e4m3fn;
inline bool IsFloat8(torch::ScalarType t) {
  return t == kFloat8E4m3;
}
#else
inline bool IsFloat8(torch::ScalarType) {
  return false;
}
#endif

#if DITSERVE_HAS_FP8

// (a8 · b8ᵀ) scaled row by row: out[m][n] = (Σ_k a8[m][k]·b8[n][k]) · scale_a[m] · scale_b[n]
// (+ bias[n]), in out_dtype. a8 (M, K) and b8 (N, K) e4m3 row-major; scale_a (M, 1) and scale_b
// (1, N) float32; K and N multiples of 16. PyTorch's _scaled_mm (rowwise recipe), with fast
// accumulation.
inline torch::Tensor ScaledMmRowwise(const torch::Tensor& a8, const torch::Tensor& b8,
                                     const torch::Tensor& scale_a, const torch::Tensor& scale_b,
                                     const torch::Tensor& bias, torch::ScalarType out_dtype) {
  return at::_scaled_mm(a8, b8.t(), scale_a, scale_b,
                        bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt,
                        /*scale_result=*/c10::nullopt, out_dtype, /*use_fast_accum=*/true);
}
#endif

// torch.nn.functional.rms_norm(x, [x.size(-1)], weight, eps) (weight may be undefined).
inline torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
#if DITSERVE_TORCH_AT_LEAST(2, 4)
  return at::rms_norm(x, {x.size(-1)},
                      weight.defined() ? c10::optional<at::Tensor>(weight) : c10::nullopt, eps);
#else
  // PyTorch's composite implementation: upcast half types to float32, normalise, cast back,
  // then multiply by the weight.
  auto xf = x.scalar_type() == torch::kFloat64 ? x : x.to(torch::kFloat32);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  y = y.to(x.scalar_type());
  return weight.defined() ? y * weight : y;
#endif
}

#ifdef DITSERVE_WITH_CUDA
// Bytes held by live tensors (now and at their peak since the process started) and by the caching
// allocator on a CUDA device. The stat enum moved from c10::cuda::CUDACachingAllocator to
// c10::CachingDeviceAllocator in PyTorch 2.5.
inline void CudaAllocatorBytes(int device, uint64_t* allocated, uint64_t* peak_allocated,
                               uint64_t* reserved) {
  auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
#if DITSERVE_TORCH_AT_LEAST(2, 5)
  constexpr size_t kAggregate =
      static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
#else
  constexpr size_t kAggregate =
      static_cast<size_t>(c10::cuda::CUDACachingAllocator::StatType::AGGREGATE);
#endif
  *allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current);
  *peak_allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].peak);
  *reserved = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
}
#endif

}  // namespace ditserve::compat
