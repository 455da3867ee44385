// The fused CUDA kernel behind JointHeadsFirst (models/cuda/qk_norm_rope.cu) against the reference
// op sequence (QK RMSNorm, cat, interleaved RoPE, transpose) on the same GPU: float32 to float32
// rounding, bfloat16 / float16 to one rounding of the output, for joint and single streams,
// views of a fused q/k/v GEMM result (strided), head dims 64 / 128 / 256, with and without norm and
// rotation, with torch.nn.RMSNorm (FLUX) or diffusers' RMSNorm (Qwen-Image: rounded to the
// weight's dtype before the weight multiply; a weight of another dtype takes the reference path).
// q, k and v in one launch (JointQkvHeadsFirst) against three JointHeadsFirst calls, exactly.
// Skipped where torch sees no CUDA device.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "models/common/attention_inputs.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/common/fused_kernels.h"
#include "models/common/module_loader.h"
#include "models/common/rms_norm.h"
#include "models/common/rope.h"
#include "tests/support/fixtures.h"

namespace ditserve::models {
namespace {

using ditserve::testing::RelativeError;

struct Case {
  torch::ScalarType dtype;
  int64_t head_dim;
  bool joint, norm, rope;
  bool diffusers_norm =
      false;  // DiffusersRmsNorm (and Qwen-Image's RopeOrder) instead of TorchRmsNorm
  bool unaligned =
      false;  // views starting one element off a vector boundary: the pair-per-lane kernel
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c10::toString(c.dtype) << " hd" << c.head_dim << (c.joint ? " joint" : " single")
      << (c.norm ? (c.diffusers_norm ? " diffusers norm" : " norm") : "") << (c.rope ? " rope" : "")
      << (c.unaligned ? " unaligned" : "");
}

class AttentionInputsTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionInputsTest, FusedKernelMatchesTheReferenceSequence) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  ASSERT_TRUE(FusedKernelsEnabled()) << "the CUDA build has no fused kernel";
  const Case c = GetParam();
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
  const int64_t b = 2, heads = 3, s_txt = 7, s_img = 33, hd = c.head_dim;
  // q/k/v of one fused GEMM each: (B, S, 3 * heads * hd), q the first third, as JointProjections.
  const int64_t skew = c.unaligned ? 1 : 0;
  auto fused_txt = torch::randn({b, s_txt, 3 * heads * hd + skew}, opts) * 3;
  auto fused_img = torch::randn({b, s_img, 3 * heads * hd + skew}, opts) * 3;
  auto view = [&](const torch::Tensor& f) {
    return f.narrow(2, heads * hd + skew, heads * hd).unflatten(2, {heads, hd});
  };
  const sharding::ShardedStateDict sd(
      0, 1,
      {{"a.weight", torch::rand({hd}, opts) + 0.5}, {"b.weight", torch::rand({hd}, opts) + 0.5}},
      {});
  const ReplicatedModuleLoader loader(sd);
  auto norm_txt = TorchRmsNorm::Load(loader, "a", 1e-6);
  auto norm_img = TorchRmsNorm::Load(loader, "b", 1e-6);
  ASSERT_TRUE(norm_txt.ok() && norm_img.ok());
  auto diffusers_txt = DiffusersRmsNorm::Load(loader, "a", 1e-6);
  auto diffusers_img = DiffusersRmsNorm::Load(loader, "b", 1e-6);
  ASSERT_TRUE(diffusers_txt.ok() && diffusers_img.ok());

  const int64_t tokens = (c.joint ? s_txt : 0) + s_img;
  auto ids =
      torch::stack({torch::zeros({tokens}), torch::arange(tokens) % 5, torch::arange(tokens)}, 1)
          .to(torch::kCUDA);
  const RopeTables rope = FluxRopeTables(ids, {hd / 4, hd / 4, hd / 2});

  const bool torch_norm = c.norm && !c.diffusers_norm, diffusers_norm = c.norm && c.diffusers_norm;
  const StreamPart txt{c.joint ? view(fused_txt) : torch::Tensor(),
                       torch_norm ? &*norm_txt : nullptr,
                       diffusers_norm ? &*diffusers_txt : nullptr};
  const StreamPart img{view(fused_img), torch_norm ? &*norm_img : nullptr,
                       diffusers_norm ? &*diffusers_img : nullptr};
  const RopeTables* r = c.rope ? &rope : nullptr;
  const RopeOrder order = c.diffusers_norm ? RopeOrder::kPerStream : RopeOrder::kJoined;
  ASSERT_TRUE(JointHeadsFirstRunsKernel(txt, img, r));
  torch::Tensor fused = JointHeadsFirst(txt, img, r, order);
  torch::Tensor ref = JointHeadsFirstReference(txt, img, r, order);
  ASSERT_EQ(fused.sizes(), ref.sizes());
  EXPECT_EQ(fused.sizes(), (std::vector<int64_t>{b, heads, tokens, hd}));
  // Tokens first in memory, like the reference's permuted view (SDPA's output then comes back in
  // the layout the output projection reads as a view).
  EXPECT_TRUE(fused.permute({0, 2, 1, 3}).is_contiguous());
  EXPECT_EQ(fused.scalar_type(), c.dtype);
  const double err = RelativeError(fused.cpu().to(torch::kFloat32), ref.cpu().to(torch::kFloat32));
  // float32: both compute in float32 (operation order may differ); half types: at most a rounding
  // step of the output apart on a few elements.
  const double limit = c.dtype == torch::kFloat32 ? 1e-6 : 4e-3;
  EXPECT_LT(err, limit);
  if (!c.norm && !c.rope) {
    EXPECT_TRUE(torch::equal(fused, ref)) << "a plain move must be exact";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionInputsTest,
    ::testing::Values(Case{torch::kFloat32, 128, true, true, true},
                      Case{torch::kBFloat16, 128, true, true, true},
                      Case{torch::kFloat16, 128, true, true, true},
                      Case{torch::kBFloat16, 128, false, true, true},
                      Case{torch::kBFloat16, 64, true, true, true},
                      Case{torch::kFloat32, 256, false, true, true},
                      Case{torch::kBFloat16, 128, true, true, false},
                      Case{torch::kBFloat16, 128, true, false, true},
                      Case{torch::kBFloat16, 128, true, false, false},
                      Case{torch::kFloat32, 128, false, false, false},
                      Case{torch::kFloat32, 128, true, true, true, true},
                      Case{torch::kBFloat16, 128, true, true, true, true},
                      Case{torch::kFloat16, 128, true, true, true, true},
                      Case{torch::kBFloat16, 128, false, true, true, true},
                      Case{torch::kBFloat16, 64, true, true, false, true},
                      // Head dims that are not 32·{2, 4, 8}, float32 at 256 (32 bytes a lane)
                      // and unaligned views: the pair-per-lane variant.
                      Case{torch::kBFloat16, 96, true, true, true},
                      Case{torch::kFloat16, 48, false, true, true, true},
                      Case{torch::kFloat32, 256, true, true, true, true},
                      Case{torch::kBFloat16, 128, true, true, true, false, true},
                      Case{torch::kBFloat16, 128, true, true, true, true, true},
                      Case{torch::kFloat32, 64, false, false, false, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      std::string dt = c.dtype == torch::kFloat32    ? "f32"
                       : c.dtype == torch::kBFloat16 ? "bf16"
                                                     : "f16";
      return dt + "_hd" + std::to_string(c.head_dim) + (c.joint ? "_joint" : "_single") +
             (c.norm ? (c.diffusers_norm ? "_diffusersnorm" : "_norm") : "") +
             (c.rope ? "_rope" : "") + (c.unaligned ? "_unaligned" : "");
    });

// diffusers' RMSNorm with a float32 weight on bfloat16 q/k promotes to float32, which is not the
// kernel's rounding: JointHeadsFirst runs the reference sequence (a float32 permuted view).
TEST(AttentionInputs, DiffusersNormWithAFloat32WeightTakesTheReferencePath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t b = 2, heads = 3, s_txt = 7, s_img = 33, hd = 128;
  const sharding::ShardedStateDict sd(
      0, 1,
      {{"a.weight", torch::rand({hd}, opts.dtype(torch::kFloat32)) + 0.5},
       {"b.weight", torch::rand({hd}, opts.dtype(torch::kFloat32)) + 0.5}},
      {});
  const ReplicatedModuleLoader loader(sd);
  auto norm_txt = DiffusersRmsNorm::Load(loader, "a", 1e-6);
  auto norm_img = DiffusersRmsNorm::Load(loader, "b", 1e-6);
  ASSERT_TRUE(norm_txt.ok() && norm_img.ok());
  auto ids = torch::stack({torch::zeros({s_txt + s_img}), torch::arange(s_txt + s_img) % 5,
                           torch::arange(s_txt + s_img)},
                          1)
                 .to(torch::kCUDA);
  const RopeTables rope = FluxRopeTables(ids, {hd / 4, hd / 4, hd / 2});
  const StreamPart txt{torch::randn({b, s_txt, heads, hd}, opts), nullptr, &*norm_txt};
  const StreamPart img{torch::randn({b, s_img, heads, hd}, opts), nullptr, &*norm_img};
  torch::Tensor out = JointHeadsFirst(txt, img, &rope, RopeOrder::kPerStream);
  EXPECT_FALSE(JointHeadsFirstRunsKernel(txt, img, &rope))
      << "the kernel took a weight of another dtype";
  EXPECT_EQ(out.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(out, JointHeadsFirstReference(txt, img, &rope, RopeOrder::kPerStream)));
}

// q, k and v of one attention in one launch (JointQkvHeadsFirst, LaunchQkNormRopeParts) give
// exactly what three JointHeadsFirst calls give: joint and single streams, FLUX's and Qwen-Image's
// norms, and parts of different vector widths or alignments (v from a view one element off: a
// launch a part), which must still be exact.
struct QkvCase {
  torch::ScalarType dtype;
  bool joint;
  bool diffusers_norm;
  bool v_unaligned;
};

void PrintTo(const QkvCase& c, std::ostream* os) {
  *os << c10::toString(c.dtype) << (c.joint ? " joint" : " single")
      << (c.diffusers_norm ? " diffusers norm" : "") << (c.v_unaligned ? " v unaligned" : "");
}

class JointQkvTest : public ::testing::TestWithParam<QkvCase> {};

TEST_P(JointQkvTest, OneLaunchEqualsThreeJointHeadsFirst) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  const QkvCase c = GetParam();
  torch::manual_seed(1);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
  const int64_t b = 2, heads = 3, s_txt = 7, s_img = 33, hd = 128, width = heads * hd;
  auto fused_txt = torch::randn({b, s_txt, 3 * width}, opts) * 3;
  auto fused_img = torch::randn({b, s_img, 3 * width}, opts) * 3;
  auto skewed_v = torch::randn({b, s_img, width + 1}, opts) * 3;
  auto part = [&](const torch::Tensor& f, int i) {
    return f.narrow(2, i * width, width).unflatten(2, {heads, hd});
  };
  const sharding::ShardedStateDict sd(0, 1,
                                      {{"a.weight", torch::rand({hd}, opts) + 0.5},
                                       {"b.weight", torch::rand({hd}, opts) + 0.5},
                                       {"c.weight", torch::rand({hd}, opts) + 0.5},
                                       {"d.weight", torch::rand({hd}, opts) + 0.5}},
                                      {});
  const ReplicatedModuleLoader loader(sd);
  auto t1 = TorchRmsNorm::Load(loader, "a", 1e-6), t2 = TorchRmsNorm::Load(loader, "b", 1e-6);
  auto t3 = TorchRmsNorm::Load(loader, "c", 1e-6), t4 = TorchRmsNorm::Load(loader, "d", 1e-6);
  auto d1 = DiffusersRmsNorm::Load(loader, "a", 1e-6),
       d2 = DiffusersRmsNorm::Load(loader, "b", 1e-6);
  auto d3 = DiffusersRmsNorm::Load(loader, "c", 1e-6),
       d4 = DiffusersRmsNorm::Load(loader, "d", 1e-6);
  ASSERT_TRUE(t1.ok() && t2.ok() && t3.ok() && t4.ok() && d1.ok() && d2.ok() && d3.ok() && d4.ok());
  auto norm = [&](const TorchRmsNorm& t, const DiffusersRmsNorm& d, const torch::Tensor& x) {
    return c.diffusers_norm ? StreamPart{x, nullptr, &d} : StreamPart{x, &t, nullptr};
  };
  const int64_t tokens = (c.joint ? s_txt : 0) + s_img;
  auto ids =
      torch::stack({torch::zeros({tokens}), torch::arange(tokens) % 5, torch::arange(tokens)}, 1)
          .to(torch::kCUDA);
  const RopeTables rope = FluxRopeTables(ids, {hd / 4, hd / 4, hd / 2});
  QkvParts txt, img;
  if (c.joint) {
    txt = {norm(*t1, *d1, part(fused_txt, 0)),
           norm(*t2, *d2, part(fused_txt, 1)),
           {part(fused_txt, 2)}};
  }
  img = {norm(*t3, *d3, part(fused_img, 0)),
         norm(*t4, *d4, part(fused_img, 1)),
         {c.v_unaligned ? skewed_v.narrow(2, 1, width).unflatten(2, {heads, hd})
                        : part(fused_img, 2)}};
  const RopeOrder order = c.diffusers_norm ? RopeOrder::kPerStream : RopeOrder::kJoined;
  const JointQkv got = JointQkvHeadsFirst(txt, img, rope, order);
  const torch::Tensor q = JointHeadsFirst(txt.q, img.q, &rope, order);
  const torch::Tensor k = JointHeadsFirst(txt.k, img.k, &rope, order);
  const torch::Tensor v = JointHeadsFirst(txt.v, img.v, nullptr, order);
  ASSERT_TRUE(JointHeadsFirstRunsKernel(txt.q, img.q, &rope));
  EXPECT_TRUE(torch::equal(got.q, q));
  EXPECT_TRUE(torch::equal(got.k, k));
  EXPECT_TRUE(torch::equal(got.v, v));
  EXPECT_EQ(got.q.sizes(), (std::vector<int64_t>{b, heads, tokens, hd}));
  for (const torch::Tensor* t : {&got.q, &got.k, &got.v}) {
    EXPECT_TRUE(t->permute({0, 2, 1, 3}).is_contiguous());
  }
  // And the reference sequence, to the output dtype's rounding.
  const double limit = c.dtype == torch::kFloat32 ? 1e-6 : 4e-3;
  EXPECT_LT(
      RelativeError(got.q.cpu().to(torch::kFloat32),
                    JointHeadsFirstReference(txt.q, img.q, &rope, order).cpu().to(torch::kFloat32)),
      limit);
  EXPECT_TRUE(torch::equal(got.v, JointHeadsFirstReference(txt.v, img.v, nullptr, order)));
}

INSTANTIATE_TEST_SUITE_P(Streams, JointQkvTest,
                         ::testing::Values(QkvCase{torch::kBFloat16, true, false, false},
                                           QkvCase{torch::kBFloat16, false, false, false},
                                           QkvCase{torch::kBFloat16, true, true, false},
                                           QkvCase{torch::kFloat32, true, false, false},
                                           QkvCase{torch::kFloat16, false, true, false},
                                           QkvCase{torch::kBFloat16, true, false, true},
                                           QkvCase{torch::kFloat32, false, false, true}),
                         [](const ::testing::TestParamInfo<QkvCase>& info) {
                           const QkvCase& c = info.param;
                           std::string dt = c.dtype == torch::kFloat32    ? "f32"
                                            : c.dtype == torch::kBFloat16 ? "bf16"
                                                                          : "f16";
                           return dt + (c.joint ? "_joint" : "_single") +
                                  (c.diffusers_norm ? "_diffusersnorm" : "") +
                                  (c.v_unaligned ? "_vunaligned" : "");
                         });

}  // namespace
}  // namespace ditserve::models
