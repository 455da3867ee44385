// The fused adaptive-LayerNorm kernel behind NormModulate (models/cuda/norm_modulate.cu) against
// the reference op sequence (torch.layer_norm, then (1 + scale) and an addcmul) on the same GPU:
// float32 to float32 rounding, bfloat16 / float16 to one rounding of the output, for the widths of
// the three models (3072: FLUX.1 and Qwen-Image, 6144: FLUX.2) and small ones, scale and shift as
// chunks of one modulation GEMM output (strided rows), batch 2; arguments outside the kernel's
// contract take the reference path and still give its answer. Skipped where torch sees no CUDA
// device.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "models/common/norm_modulate.h"
#include "tests/support/fixtures.h"

namespace ditserve::models {
namespace {

using ditserve::testing::RelativeError;

struct Case {
  torch::ScalarType dtype;
  int64_t dim;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c10::toString(c.dtype) << " D" << c.dim; }

class NormModulateTest : public ::testing::TestWithParam<Case> {};

TEST_P(NormModulateTest, FusedKernelMatchesTheReferenceSequence) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  const Case c = GetParam();
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
  const int64_t b = 2, s = 37, d = c.dim;
  // Rows with an offset and a spread, as hidden states have.
  auto x = (torch::randn({b, s, d}, opts) * 4 + torch::randn({b, s, 1}, opts) * 2).contiguous();
  // (shift, scale, gate) x 2 of one GEMM output, like AdaLayerNormZero's chunks.
  auto emb = torch::randn({b, 6 * d}, opts) * 0.5;
  auto chunks = emb.chunk(6, 1);
  const torch::Tensor& shift = chunks[0];
  const torch::Tensor& scale = chunks[1];
  ASSERT_TRUE(NormModulateFused(x, scale, shift)) << "the kernel's contract should hold here";
  torch::Tensor fused = NormModulate(x, scale, shift, 1e-6);
  torch::Tensor ref = NormModulateReference(x, scale, shift, 1e-6);
  ASSERT_EQ(fused.sizes(), ref.sizes());
  EXPECT_EQ(fused.scalar_type(), c.dtype);
  const double err = RelativeError(fused.cpu().to(torch::kFloat32), ref.cpu().to(torch::kFloat32));
  const double limit = c.dtype == torch::kFloat32 ? 2e-6 : 4e-3;
  EXPECT_LT(err, limit);
  std::printf("norm_modulate %s D=%lld: relative error %.3g (limit %.0e)\n",
              c10::toString(c.dtype), static_cast<long long>(d), err, limit);
}

INSTANTIATE_TEST_SUITE_P(
    Widths, NormModulateTest,
    ::testing::Values(Case{torch::kBFloat16, 3072}, Case{torch::kBFloat16, 6144},
                      Case{torch::kBFloat16, 64}, Case{torch::kFloat16, 3072},
                      Case{torch::kFloat32, 3072}, Case{torch::kFloat32, 4096},
                      Case{torch::kFloat32, 8}, Case{torch::kBFloat16, 8192}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      std::string dt = c.dtype == torch::kFloat32 ? "f32" : c.dtype == torch::kBFloat16 ? "bf16" : "f16";
      return dt + "_D" + std::to_string(c.dim);
    });

TEST(NormModulate, OutsideTheContractTakesTheReferencePath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto emb = torch::randn({2, 2 * 3072}, opts);
  auto c = emb.chunk(2, 1);
  // A transposed (non-contiguous) x, a row wider than the registers hold, a width not a multiple
  // of the vector: each falls back and still gives the reference's answer.
  auto x_t = torch::randn({2, 3072, 5}, opts).transpose(1, 2);
  EXPECT_FALSE(NormModulateFused(x_t, c[1], c[0]));
  EXPECT_TRUE(torch::equal(NormModulate(x_t, c[1], c[0], 1e-6),
                           NormModulateReference(x_t, c[1], c[0], 1e-6)));
  auto wide = torch::randn({1, 3, 8200}, opts);
  auto wide_mod = torch::randn({1, 2 * 8200}, opts).chunk(2, 1);
  EXPECT_FALSE(NormModulateFused(wide, wide_mod[1], wide_mod[0]));
  EXPECT_TRUE(torch::equal(NormModulate(wide, wide_mod[1], wide_mod[0], 1e-6),
                           NormModulateReference(wide, wide_mod[1], wide_mod[0], 1e-6)));
  auto odd = torch::randn({1, 3, 100}, opts);
  auto odd_mod = torch::randn({1, 200}, opts).chunk(2, 1);
  EXPECT_FALSE(NormModulateFused(odd, odd_mod[1], odd_mod[0]));
}

}  // namespace
}  // namespace ditserve::models
