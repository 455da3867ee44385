// The fused SwiGLU kernel behind SwiGlu / SwiGluInto (models/cuda/swiglu.cu) against the reference
// op sequence (torch.silu of the gate half, times the value half) on the same GPU: bfloat16,
// float16 and float32, FLUX.2-dev's width (18432 per half) and small and odd ones (the element
// path), a column slice of a wider tensor in (the single blocks' fused projection output) and out
// (the [attention | mlp] buffer). Skipped where torch sees no CUDA device.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "models/common/fused_kernels.h"
#include "models/common/swiglu_feed_forward.h"
#include "tests/support/fixtures.h"

namespace ditserve::models {
namespace {

using ditserve::testing::RelativeError;

struct Case {
  torch::ScalarType dtype;
  int64_t width;  // of each half
};

void PrintTo(const Case& c, std::ostream* os) { *os << c10::toString(c.dtype) << " W" << c.width; }

class SwiGluTest : public ::testing::TestWithParam<Case> {};

TEST_P(SwiGluTest, FusedKernelMatchesTheReferenceSequence) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  if (!FusedKernelsEnabled()) GTEST_SKIP() << "DITSERVE_FUSED_KERNELS=0";
  const Case c = GetParam();
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
  const int64_t b = 2, s = 37, w = c.width;
  const double limit = c.dtype == torch::kFloat32 ? 1e-6 : 4e-3;

  // Contiguous in, new out.
  torch::Tensor x = torch::randn({b, s, 2 * w}, opts) * 3;
  torch::Tensor fused = SwiGlu(x);
  torch::Tensor ref = SwiGluReference(x);
  ASSERT_EQ(fused.sizes(), ref.sizes());
  double err = RelativeError(fused.cpu().to(torch::kFloat32), ref.cpu().to(torch::kFloat32));
  EXPECT_LT(err, limit);
  std::printf("swiglu %s W=%lld: relative error %.3g%s (limit %.0e)\n", c10::toString(c.dtype),
              static_cast<long long>(w), err, torch::equal(fused, ref) ? " (bit-identical)" : "",
              limit);

  // A column slice of a wider row in, a slice of a wider buffer out (FLUX.2's single blocks).
  torch::Tensor wide = torch::randn({b, s, 48 + 2 * w + 16}, opts);
  torch::Tensor in = wide.narrow(2, 48, 2 * w);
  torch::Tensor buffer = torch::full({b, s, 64 + w}, 7.0, opts);
  torch::Tensor tail = buffer.narrow(2, 64, w);
  SwiGluInto(in, tail);
  err = RelativeError(tail.cpu().to(torch::kFloat32), SwiGluReference(in).cpu().to(torch::kFloat32));
  EXPECT_LT(err, limit);
  EXPECT_TRUE(torch::all(buffer.narrow(2, 0, 64) == 7.0).item<bool>()) << "wrote outside its part";
}

INSTANTIATE_TEST_SUITE_P(
    Widths, SwiGluTest,
    ::testing::Values(Case{torch::kBFloat16, 18432}, Case{torch::kBFloat16, 64},
                      Case{torch::kBFloat16, 13}, Case{torch::kFloat16, 3072},
                      Case{torch::kFloat32, 3072}, Case{torch::kFloat32, 7}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.dtype == torch::kFloat32   ? "f32"
                         : info.param.dtype == torch::kFloat16 ? "f16"
                                                               : "bf16") +
             "_W" + std::to_string(info.param.width);
    });

}  // namespace
}  // namespace ditserve::models
