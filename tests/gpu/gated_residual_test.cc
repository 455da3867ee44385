// The gated-residual kernels behind GatedResidual and GatedResidualNormModulate
// (models/cuda/gated_residual.cu) against the reference op sequence on the same GPU: the residual
// bit-identical to torch.addcmul(x, gate.unsqueeze(1), y) in bfloat16, float16 and float32; the
// normalised + modulated output bit-identical to NormModulate run on that addcmul result (its fused
// kernel where its contract holds) and within norm_modulate_test's limits of the reference
// sequence (torch.layer_norm, (1 + scale), addcmul). Widths of the three models (3072: FLUX.1 and
// Qwen-Image, 6144: FLUX.2) and small ones, gate / scale / shift as chunks of one modulation GEMM
// output (strided rows), batch 2; arguments outside the kernels' contract take the reference path
// and still give its answer. Skipped where torch sees no CUDA device.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/torch_compat.h"

#include "models/common/fused_kernels.h"
#include "models/common/gated_residual.h"
#include "models/common/norm_modulate.h"
#include "tests/support/fixtures.h"

namespace ditserve::models {
namespace {

using ditserve::testing::RelativeError;

constexpr double kEps = 1e-6;

struct Case {
  torch::ScalarType dtype;
  int64_t dim;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c10::toString(c.dtype) << " D" << c.dim;
}

torch::Tensor Addcmul(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y) {
  return torch::addcmul(x, gate.unsqueeze(1), y);
}

// Rows with an offset and a spread, as hidden states have.
torch::Tensor Hidden(int64_t b, int64_t s, int64_t d, const torch::TensorOptions& opts) {
  return (torch::randn({b, s, d}, opts) * 4 + torch::randn({b, s, 1}, opts) * 2).contiguous();
}

class GatedResidualTest : public ::testing::TestWithParam<Case> {};

TEST_P(GatedResidualTest, KernelsMatchAddcmulAndNormModulate) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  if (!FusedKernelsEnabled()) GTEST_SKIP() << "DITSERVE_FUSED_KERNELS=0";
  const Case c = GetParam();
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
  const int64_t b = 2, s = 37, d = c.dim;
  torch::Tensor x = Hidden(b, s, d, opts);
  torch::Tensor y = torch::randn({b, s, d}, opts);
  // (shift, scale, gate) x 2 of one GEMM output, like AdaLayerNormZero's chunks.
  auto chunks = (torch::randn({b, 6 * d}, opts) * 0.5).chunk(6, 1);
  const torch::Tensor &gate = chunks[2], &shift = chunks[3], &scale = chunks[4];

  ASSERT_TRUE(GatedResidualFused(x, gate, y)) << "the kernel's contract should hold here";
  torch::Tensor r_ref = Addcmul(x, gate, y);
  torch::Tensor r = GatedResidual(x, gate, y);
  ASSERT_EQ(r.sizes(), r_ref.sizes());
  EXPECT_EQ(r.scalar_type(), c.dtype);
  EXPECT_TRUE(torch::equal(r, r_ref))
      << "GatedResidual differs from addcmul; addcmul equals the product rounded, then the sum: "
      << torch::equal(r_ref, x + gate.unsqueeze(1) * y) << " (compat::kCudaAddcmulIsFma "
      << compat::kCudaAddcmulIsFma << ")";

  // The pair: one kernel where NormModulate's kernel takes the row, else the two ops.
  EXPECT_EQ(GatedResidualNormModulateFused(x, gate, y, scale, shift),
            NormModulateFused(x, scale, shift));
  auto [residual, normed] = GatedResidualNormModulate(x, gate, y, scale, shift, kEps);
  EXPECT_TRUE(torch::equal(residual, r_ref)) << "the pair's residual differs from addcmul";
  EXPECT_TRUE(torch::equal(normed, NormModulate(r_ref, scale, shift, kEps)))
      << "the pair's normed output differs from NormModulate on the addcmul result";
  const torch::Tensor ref = NormModulateReference(r_ref, scale, shift, kEps);
  const double err = RelativeError(normed.cpu().to(torch::kFloat32), ref.cpu().to(torch::kFloat32));
  const double limit = c.dtype == torch::kFloat32 ? 2e-6 : 4e-3;
  EXPECT_LT(err, limit);
  std::printf("gated_residual %s D=%lld: pair fused %d, normed relative error %.3g (limit %.0e)\n",
              c10::toString(c.dtype), static_cast<long long>(d),
              GatedResidualNormModulateFused(x, gate, y, scale, shift) ? 1 : 0, err, limit);
}

INSTANTIATE_TEST_SUITE_P(Widths, GatedResidualTest,
                         ::testing::Values(Case{torch::kBFloat16, 3072},
                                           Case{torch::kBFloat16, 6144}, Case{torch::kBFloat16, 64},
                                           Case{torch::kBFloat16, 8}, Case{torch::kFloat16, 3072},
                                           Case{torch::kFloat16, 6144}, Case{torch::kFloat16, 64},
                                           Case{torch::kFloat16, 8}, Case{torch::kFloat32, 3072},
                                           Case{torch::kFloat32, 6144}, Case{torch::kFloat32, 64},
                                           Case{torch::kFloat32, 8}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           std::string dt = c.dtype == torch::kFloat32    ? "f32"
                                            : c.dtype == torch::kBFloat16 ? "bf16"
                                                                          : "f16";
                           return dt + "_D" + std::to_string(c.dim);
                         });

// FLUX.1's image stream at 1024x1024 (4096 tokens), batch 1: many rows, one launch each way.
TEST(GatedResidual, ReleasedSizeImageStreamIsBitIdentical) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  if (!FusedKernelsEnabled()) GTEST_SKIP() << "DITSERVE_FUSED_KERNELS=0";
  torch::manual_seed(1);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::Tensor x = Hidden(1, 4096, 3072, opts), y = torch::randn({1, 4096, 3072}, opts);
  auto chunks = torch::randn({1, 6 * 3072}, opts).chunk(6, 1);
  ASSERT_TRUE(GatedResidualNormModulateFused(x, chunks[2], y, chunks[4], chunks[3]));
  torch::Tensor r_ref = Addcmul(x, chunks[2], y);
  EXPECT_TRUE(torch::equal(GatedResidual(x, chunks[2], y), r_ref));
  auto [residual, normed] = GatedResidualNormModulate(x, chunks[2], y, chunks[4], chunks[3], kEps);
  EXPECT_TRUE(torch::equal(residual, r_ref));
  EXPECT_TRUE(torch::equal(normed, NormModulate(r_ref, chunks[4], chunks[3], kEps)));
}

// Each argument outside the kernels' contract falls back and still gives the reference's answer.
void ExpectReferencePath(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                         const torch::Tensor& scale, const torch::Tensor& shift) {
  EXPECT_FALSE(GatedResidualFused(x, gate, y));
  EXPECT_FALSE(GatedResidualNormModulateFused(x, gate, y, scale, shift));
  torch::Tensor r_ref = Addcmul(x, gate, y);
  EXPECT_TRUE(torch::equal(GatedResidual(x, gate, y), r_ref));
  auto [residual, normed] = GatedResidualNormModulate(x, gate, y, scale, shift, kEps);
  EXPECT_TRUE(torch::equal(residual, r_ref));
  EXPECT_TRUE(torch::equal(normed, NormModulate(r_ref, scale, shift, kEps)));
}

TEST(GatedResidual, OutsideTheContractTakesTheReferencePath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  {
    SCOPED_TRACE("odd width (100 is not a multiple of 8)");
    auto m = torch::randn({2, 6 * 100}, opts).chunk(6, 1);
    ExpectReferencePath(Hidden(2, 5, 100, opts), m[2], torch::randn({2, 5, 100}, opts), m[4], m[3]);
  }
  {
    SCOPED_TRACE("float32 width 6 (not a multiple of 4)");
    const auto f32 = opts.dtype(torch::kFloat32);
    auto m = torch::randn({2, 6 * 6}, f32).chunk(6, 1);
    ExpectReferencePath(Hidden(2, 5, 6, f32), m[2], torch::randn({2, 5, 6}, f32), m[4], m[3]);
  }
  auto m = torch::randn({2, 6 * 3072}, opts).chunk(6, 1);
  torch::Tensor x = Hidden(2, 5, 3072, opts);
  {
    SCOPED_TRACE("non-contiguous y");
    torch::Tensor y_t = torch::randn({2, 3072, 5}, opts).transpose(1, 2);
    ExpectReferencePath(x, m[2], y_t, m[4], m[3]);
  }
  {
    SCOPED_TRACE("gate rows not 16-byte aligned");
    torch::Tensor gate = torch::randn({2, 3072 + 1}, opts).narrow(1, 1, 3072);
    ExpectReferencePath(x, gate, torch::randn({2, 5, 3072}, opts), m[4], m[3]);
  }
  {
    SCOPED_TRACE("y of another dtype");
    torch::Tensor y32 = torch::randn({2, 5, 3072}, opts.dtype(torch::kFloat32));
    EXPECT_FALSE(GatedResidualFused(x, m[2], y32));
    EXPECT_TRUE(torch::equal(GatedResidual(x, m[2], y32), Addcmul(x, m[2], y32)));
  }
}

}  // namespace
}  // namespace ditserve::models
