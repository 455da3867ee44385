#include "models/common/fp8_linear.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"
#include "models/common/fused_kernels.h"

#if DITSERVE_HAS_FP8
#include <ATen/cuda/CUDAContext.h>  // the device's compute capability
#endif
#ifdef DITSERVE_WITH_CUDA_KERNELS
#include "models/cuda/fp8_quantize.h"
#endif

namespace ditserve::models {
namespace {
constexpr double kFp8Max = 448.0;
// Scales are amax · (1/448) with the reciprocal rounded to float once, as the CUDA kernel computes
// them (models/cuda/fp8_quantize.cu), so the two paths agree bit for bit.
constexpr double kInvFp8Max = static_cast<double>(1.0f / 448.0f);
constexpr double kTinyAmax = 1e-12;  // an all-zero row keeps a finite, positive scale

#if DITSERVE_HAS_FP8
// Every row of x (M, K) quantized on its own: q (M, K) e4m3, scale (M, 1) float32, x ≈ q · scale.
// The weights' per-output-channel quantization and the activations' reference path.
std::pair<torch::Tensor, torch::Tensor> QuantizeRowsReference(const torch::Tensor& x) {
  torch::Tensor xf = x.to(torch::kFloat32);
  torch::Tensor scale = xf.abs().amax(1, /*keepdim=*/true).clamp_min(kTinyAmax) * kInvFp8Max;
  torch::Tensor q = (xf / scale).clamp(-kFp8Max, kFp8Max).to(compat::kFloat8E4m3);
  return {q, scale};
}
#endif
}  // namespace

absl::Status CheckFp8Supported(const torch::Device& device, torch::ScalarType dtype) {
#if DITSERVE_HAS_FP8
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--weights fp8 needs a CUDA device (FP8 GEMMs); the device is ", device.str()));
  }
  if (dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weights fp8 computes in bfloat16: use --dtype bfloat16, not ", c10::toString(dtype)));
  }
  const int index = device.has_index() ? device.index() : 0;
  if (index >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", index));
  }
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(index);
  if (p->major * 10 + p->minor < 89) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--weights fp8 needs FP8 tensor cores (compute capability 8.9 or newer); ", p->name,
        " has ", p->major, ".", p->minor));
  }
  return absl::OkStatus();
#else
  (void)device;
  (void)dtype;
  return absl::FailedPreconditionError(
      "--weights fp8 needs the CUDA build of ditserve (LibTorch 2.4 or newer with CUDA) and an FP8 "
      "GPU; this build has no FP8 GEMM");
#endif
}

bool IsFp8BlockLinear(const std::string& path) {
  if (!absl::StartsWith(path, "transformer_blocks.") &&
      !absl::StartsWith(path, "single_transformer_blocks.")) {
    return false;
  }
  return !absl::StrContains(path, ".norm") && !absl::StrContains(path, "_mod.");
}

bool Fp8Shape(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0;
}

bool Fp8Shape(const torch::Tensor& w) { return w.dim() == 2 && Fp8Shape(w.size(0), w.size(1)); }

Fp8Weight QuantizeWeightFp8(const torch::Tensor& w) {
#if DITSERVE_HAS_FP8
  torch::NoGradGuard no_grad;
  auto [q, scale] = QuantizeRowsReference(w);
  return {q, scale.view({-1})};
#else
  (void)w;
  TORCH_CHECK(false, "FP8 weights are not available in this build");
#endif
}

std::pair<torch::Tensor, torch::Tensor> QuantizeRowsFp8(const torch::Tensor& x, bool use_kernel) {
#if DITSERVE_HAS_FP8
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "QuantizeRowsFp8: x must be (M, K) with contiguous rows");
#ifdef DITSERVE_WITH_CUDA_KERNELS
  cuda::Fp8QuantizeArgs a;
  if (use_kernel && x.is_cuda() && KernelElementType(x.scalar_type(), &a.type)) {
    torch::Tensor q = torch::empty(x.sizes(), x.options().dtype(compat::kFloat8E4m3));
    torch::Tensor scale = torch::empty({x.size(0), 1}, x.options().dtype(torch::kFloat32));
    a.x = x.data_ptr();
    a.rows = x.size(0);
    a.cols = x.size(1);
    a.x_stride = x.stride(0);
    a.q = q.data_ptr();
    a.scale = scale.data_ptr<float>();
    LaunchOnDevice(x.device(), "fp8_quantize",
                   [&](void* stream) { return cuda::LaunchFp8QuantizeRows(a, stream); });
    return {q, scale};
  }
#endif
  (void)use_kernel;
  return QuantizeRowsReference(x);
#else
  (void)x;
  (void)use_kernel;
  TORCH_CHECK(false, "FP8 is not available in this build");
#endif
}

torch::Tensor Fp8Linear(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale,
                        const torch::Tensor& bias) {
#if DITSERVE_HAS_FP8
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = q.size(0);
  torch::Tensor x2 = x.reshape({-1, x.size(-1)});
  if (x2.stride(1) != 1) x2 = x2.contiguous();
  const int64_t m = x2.size(0);
  // The FP8 GEMM wants every dimension a multiple of 16: pad the rows with zeros (scale tiny,
  // product zero) and drop them after.
  const int64_t pad = (16 - m % 16) % 16;
  if (pad > 0) x2 = torch::constant_pad_nd(x2, {0, 0, 0, pad});
  auto [x8, sx] = QuantizeRowsFp8(x2, FusedKernelsEnabled());
  torch::Tensor y = compat::ScaledMmRowwise(x8, q, sx, scale.view({1, -1}), bias, x.scalar_type());
  if (pad > 0) y = y.narrow(0, 0, m);
  return y.reshape(sizes);
#else
  (void)x;
  (void)q;
  (void)scale;
  (void)bias;
  TORCH_CHECK(false, "FP8 weights are not available in this build");
#endif
}

torch::Tensor StoredWeightLinear(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& fp8_scale, const torch::Tensor& bias) {
  return fp8_scale.defined() ? Fp8Linear(x, weight, fp8_scale, bias) : torch::linear(x, weight, bias);
}

}  // namespace ditserve::models
