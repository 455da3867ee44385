#include "models/common/fused_kernels.h"

#include <cstdlib>
#include <cstring>

namespace ditserve::models {

bool FusedKernelsEnabled() {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  static const bool enabled = [] {
    const char* v = std::getenv("DITSERVE_FUSED_KERNELS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
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

}  // namespace ditserve::models
