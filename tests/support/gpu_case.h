// What the GPU parity tests share: a case (tensor-parallel degree, dtype, the relative-error limit
// against the reference) and the skip where torch sees no CUDA device. Header-only.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>

// Skips the calling test when torch sees no CUDA device (the CPU machines and CI).
#define DITSERVE_SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch"

namespace ditserve::testing {

struct GpuCase {
  int world;                // tensor-parallel degree (in-process ranks on the one GPU)
  torch::ScalarType dtype;  // float32 or bfloat16
  double limit;             // relative error allowed against the reference
};

inline const char* DtypeName(torch::ScalarType t) {
  return t == torch::kFloat32 ? "float32" : "bfloat16";
}

inline void PrintTo(const GpuCase& c, std::ostream* os) {
  *os << "tp=" << c.world << " " << DtypeName(c.dtype) << " limit " << c.limit;
}

}  // namespace ditserve::testing
