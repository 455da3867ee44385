#include "models/common/fused_kernels.h"

#include <cstdlib>
#include <cstring>

#ifdef DITSERVE_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace ditserve::models {

bool EnvironmentSwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool FusedKernelsEnabled() {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  static const bool enabled = EnvironmentSwitchOn("DITSERVE_FUSED_KERNELS");
  return enabled;
#else
  return false;
#endif
}

bool KernelElementType(torch::ScalarType t, cuda::ElementType* out) {
  switch (t) {
    case torch::kFloat32: *out = cuda::ElementType::kFloat32; return true;
    case torch::kBFloat16: *out = cuda::ElementType::kBFloat16; return true;
    case torch::kFloat16: *out = cuda::ElementType::kFloat16; return true;
    default: return false;
  }
}

#ifdef DITSERVE_WITH_CUDA_KERNELS
void LaunchOnDevice(const torch::Device& device, const char* kernel,
                    const std::function<int(void* stream)>& launch) {
  const c10::cuda::CUDAGuard device_guard(device);
  const int err = launch(at::cuda::getCurrentCUDAStream(device.index()).stream());
  TORCH_CHECK(err == 0, kernel, " kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
}

bool VectorRowsFit(const torch::Tensor& x, cuda::ElementType* type, int64_t* width) {
  if (!FusedKernelsEnabled() || !x.is_cuda() || x.dim() != 3 || !x.is_contiguous() ||
      !KernelElementType(x.scalar_type(), type) || !DataAligned16(x)) {
    return false;
  }
  *width = x.scalar_type() == torch::kFloat32 ? 4 : 8;
  return x.size(2) % *width == 0;
}

bool PerSampleVectorFits(const torch::Tensor& t, const torch::Tensor& x, int64_t width) {
  return t.device() == x.device() && t.scalar_type() == x.scalar_type() && t.dim() == 2 &&
         t.size(0) == x.size(0) && t.size(1) == x.size(2) && t.stride(1) == 1 &&
         t.stride(0) % width == 0 && DataAligned16(t);
}
#endif

}  // namespace ditserve::models
