// FP8 weights (models/common/fp8_linear.h) on the GPU: the activation-quantization kernel
// (models/cuda/fp8_quantize.cu) against the ATen reference sequence bit for bit; the FP8 GEMM
// against the bfloat16 one on random data (rows not a multiple of 16 included); a layer quantized
// at load releasing its model-dtype bytes; FP8 parts fused into one GEMM giving the parts' answers.
// Skipped where torch sees no CUDA device or the GPU has no FP8.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/torch_compat.h"
#include "models/common/fp8_linear.h"
#include "models/common/fused_linear.h"
#include "models/common/linear.h"
#include "tests/support/fixtures.h"

namespace ditserve::models {
namespace {

using ditserve::testing::RelativeError;

const torch::Device kCuda(torch::kCUDA, 0);

#define SKIP_WITHOUT_FP8()                                                                      \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";          \
  if (!CheckFp8Supported(kCuda, torch::kBFloat16).ok())                                         \
  GTEST_SKIP() << CheckFp8Supported(kCuda, torch::kBFloat16)

TEST(Fp8Linear, CheckNamesWhatIsMissing) {
  EXPECT_EQ(CheckFp8Supported(torch::kCPU, torch::kBFloat16).code(),
            absl::StatusCode::kFailedPrecondition);
  SKIP_WITHOUT_FP8();
  EXPECT_EQ(CheckFp8Supported(kCuda, torch::kFloat32).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Fp8Linear, KernelQuantizesRowsExactlyAsTheReference) {
  SKIP_WITHOUT_FP8();
  torch::manual_seed(0);
  for (const int64_t cols : {64, 3072, 12288}) {
    auto x = torch::randn({37, cols}, torch::TensorOptions().device(kCuda).dtype(torch::kBFloat16)) * 7;
    x[3].zero_();  // an all-zero row keeps a finite scale
    auto [q_kernel, s_kernel] = QuantizeRowsFp8(x, /*use_kernel=*/true);
    auto [q_ref, s_ref] = QuantizeRowsFp8(x, /*use_kernel=*/false);
    EXPECT_TRUE(torch::equal(s_kernel, s_ref)) << cols;
    EXPECT_TRUE(torch::equal(q_kernel.view(torch::kUInt8), q_ref.view(torch::kUInt8))) << cols;
    EXPECT_TRUE(torch::isfinite(s_kernel).all().item<bool>());
  }
}

TEST(Fp8Linear, GemmStaysNearBfloat16) {
  SKIP_WITHOUT_FP8();
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(kCuda).dtype(torch::kBFloat16);
  for (const int64_t m : {4096, 37, 1}) {
    auto x = torch::randn({1, m, 512}, opts);
    auto w = torch::randn({256, 512}, opts) * 0.05;
    auto b = torch::randn({256}, opts);
    Fp8Weight f = QuantizeWeightFp8(w);
    EXPECT_TRUE(compat::IsFloat8(f.q.scalar_type()));
    torch::Tensor y = Fp8Linear(x, f.q, f.scale, b);
    torch::Tensor ref = torch::linear(x.to(torch::kFloat32), w.to(torch::kFloat32), b.to(torch::kFloat32));
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, m, 256}));
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    const double err = RelativeError(y.to(torch::kFloat32).cpu(), ref.cpu());
    EXPECT_LT(err, 0.06) << "rows " << m;
    std::printf("fp8 GEMM, %lld x 512 x 256: relative error %.3g against float32\n",
                static_cast<long long>(m), err);
  }
}

TEST(Fp8Linear, QuantizedLayerReleasesItsBf16BytesAndFusesWithOthers) {
  SKIP_WITHOUT_FP8();
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(kCuda).dtype(torch::kBFloat16);
  std::vector<std::shared_ptr<LinearLayer>> parts;
  std::vector<torch::Tensor> originals;
  for (int i = 0; i < 3; ++i) {
    auto w = torch::randn({64 * (i + 1), 128}, opts) * 0.1;
    originals.push_back(w);  // a second handle, as the state dict holds
    parts.push_back(std::make_shared<Linear>(w, torch::randn({64 * (i + 1)}, opts)));
  }
  auto x = torch::randn({2, 40, 128}, opts);
  std::vector<torch::Tensor> separate;
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_TRUE(parts[i]->QuantizeToFp8());
    EXPECT_TRUE(parts[i]->is_fp8());
    EXPECT_TRUE(compat::IsFloat8(parts[i]->weight().scalar_type()));
    EXPECT_EQ(originals[i].numel(), 0) << "the bf16 bytes were not released";
    EXPECT_EQ(parts[i]->out_features(), 64 * static_cast<int64_t>(i + 1));
    separate.push_back(parts[i]->Forward(x));
  }
  EXPECT_FALSE(parts[0]->QuantizeToFp8()) << "already FP8";
  auto fused = FusedLinear::Fuse(parts, "test");
  ASSERT_TRUE(fused.ok()) << fused.status();
  auto outs = fused->Forward(x);
  ASSERT_EQ(outs.size(), 3u);
  for (size_t i = 0; i < outs.size(); ++i) {
    // Same quantized operands; only the GEMM's tiling may differ.
    EXPECT_LT(RelativeError(outs[i].to(torch::kFloat32).cpu(), separate[i].to(torch::kFloat32).cpu()), 1e-2);
    // The parts now read their slices of the stacked FP8 weight.
    EXPECT_LT(RelativeError(parts[i]->Forward(x).to(torch::kFloat32).cpu(),
                            separate[i].to(torch::kFloat32).cpu()), 1e-2);
  }
  // A shape the FP8 GEMM cannot take stays in bf16.
  Linear odd(torch::randn({24, 40}, opts), torch::Tensor());
  EXPECT_FALSE(odd.QuantizeToFp8());
  EXPECT_FALSE(odd.is_fp8());
}

}  // namespace
}  // namespace ditserve::models
