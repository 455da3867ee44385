// What the GPU parity tests share: a case (tensor-parallel degree, dtype, the relative-error limit
// against the reference) and the skip where torch sees no CUDA device. Header-only.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>
#include <string>
#include <tuple>

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

// The cases every fixture parity test runs on the GPU: float32 at tp 1 and 2 against diffusers'
// CPU float32 output (1e-3), bfloat16 at tp 1 against its bfloat16 CUDA run (2e-2).
inline auto FixtureParityCases() {
  return ::testing::Values(GpuCase{1, torch::kFloat32, 1e-3}, GpuCase{2, torch::kFloat32, 1e-3},
                           GpuCase{1, torch::kBFloat16, 2e-2});
}

// Test names: "tp<world>_<dtype>", and "<call>_tp<world>_<dtype>" for a (fixture call, case).
inline std::string CaseName(const GpuCase& c) {
  return "tp" + std::to_string(c.world) + "_" + DtypeName(c.dtype);
}
inline std::string CaseName(const ::testing::TestParamInfo<GpuCase>& info) {
  return CaseName(info.param);
}
inline std::string CallCaseName(
    const ::testing::TestParamInfo<std::tuple<std::string, GpuCase>>& info) {
  return std::get<0>(info.param) + "_" + CaseName(std::get<1>(info.param));
}

}  // namespace ditserve::testing
