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

}  // namespace ditserve::models
