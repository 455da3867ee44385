// Qwen-Image building blocks: complex RoPE (models/common/complex_rope.h) against the real
// cos/sin form, the centred image / shifted text positions (models/qwenimage/qwenimage_rope.h),
// the joint tables, the img_shapes conversions, diffusers' RMSNorm rounding
// (models/common/diffusers_rms_norm.h), and the attention inputs through JointHeadsFirst
// (models/common/attention_inputs.h) against the unfused per-stream sequence, bit for bit on CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "models/common/attention_inputs.h"
#include "models/common/complex_rope.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/common/module_loader.h"
#include "models/common/rope.h"
#include "models/qwenimage/qwenimage_rope.h"

namespace ditserve {
namespace {

using models::qwenimage::ImageShape;

const std::vector<int64_t> kAxes = {4, 6, 6};

TEST(ComplexRope, SameRotationAsTheRealInterleavedForm) {
  torch::manual_seed(3);
  auto positions = torch::randint(-40, 40, {7, 3}, torch::kInt64);
  auto freqs = models::ComplexRopeFrequencies(positions, kAxes, 10000.0, torch::kCPU);
  EXPECT_EQ(freqs.sizes(), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(freqs.scalar_type(), torch::kComplexFloat);
  auto x = torch::randn({2, 7, 3, 16});
  auto complex_out = models::ApplyRotaryEmbComplex(x, freqs);
  // FLUX's tables use float64 angles; the two agree to float32 rounding.
  auto tables = models::FluxRopeTables(positions, kAxes, 10000.0);
  auto real_out = models::ApplyRotaryEmbInterleaved(x, tables);
  EXPECT_TRUE(torch::allclose(complex_out, real_out, 1e-5, 1e-5));
  // A rotation keeps each pair's norm.
  auto pair_norm = [](const torch::Tensor& t) { return t.reshape({2, 7, 3, 8, 2}).pow(2).sum(-1); };
  EXPECT_TRUE(torch::allclose(pair_norm(complex_out), pair_norm(x), 1e-5, 1e-5));
}

// Entries are laid out axis after axis, d_a / 2 per axis, each exp(i · p · ω_j).
TEST(ComplexRope, AxisLayout) {
  auto positions = torch::tensor({{0, 1000, -999}}, torch::kInt64);
  auto freqs = models::ComplexRopeFrequencies(positions, kAxes, 10000.0, torch::kCPU);
  auto expect_angle = [&](int64_t index, double angle) {
    auto entry = freqs[0][index];
    EXPECT_NEAR(torch::real(entry).item<float>(), std::cos(angle), 1e-5) << index;
    EXPECT_NEAR(torch::imag(entry).item<float>(), std::sin(angle), 1e-5) << index;
  };
  expect_angle(0, 0.0);                                       // axis 0, p = 0
  expect_angle(1, 0.0);
  expect_angle(2, 1000.0);                                    // axis 1, j = 0: ω = 1
  expect_angle(3, 1000.0 / std::pow(10000.0, 2.0 / 6.0));     // axis 1, j = 1
  expect_angle(5, -999.0);                                    // axis 2, j = 0
  expect_angle(7, -999.0 / std::pow(10000.0, 4.0 / 6.0));     // axis 2, j = 2
}

torch::Tensor Freq(int64_t f, int64_t y, int64_t x) {
  return models::ComplexRopeFrequencies(torch::tensor({{f, y, x}}, torch::kInt64), kAxes, 10000.0,
                                        torch::kCPU)[0];
}

TEST(QwenRope, CentredImageAndShiftedTextPositions) {
  // h' = 5, w' = 4: rows -3..1, columns -2..1; text starts at max(5/2, 4/2) = 2.
  auto rope = models::qwenimage::QwenRopeFrequencies({ImageShape{1, 5, 4}}, 3, kAxes, 10000.0,
                                                     torch::kCPU);
  ASSERT_TRUE(rope.ok()) << rope.status();
  ASSERT_EQ(rope->image.sizes(), (std::vector<int64_t>{20, 8}));
  ASSERT_EQ(rope->text.sizes(), (std::vector<int64_t>{3, 8}));
  EXPECT_TRUE(torch::equal(rope->image[0], Freq(0, -3, -2)));
  EXPECT_TRUE(torch::equal(rope->image[1], Freq(0, -3, -1)));
  EXPECT_TRUE(torch::equal(rope->image[4], Freq(0, -2, -2)));
  EXPECT_TRUE(torch::equal(rope->image[19], Freq(0, 1, 1)));
  EXPECT_TRUE(torch::equal(rope->text[0], Freq(2, 2, 2)));
  EXPECT_TRUE(torch::equal(rope->text[2], Freq(4, 4, 4)));
  // A second image starts at frame index 1; text starts after the larger grid.
  rope = models::qwenimage::QwenRopeFrequencies({ImageShape{1, 2, 2}, ImageShape{1, 6, 6}}, 1,
                                                kAxes, 10000.0, torch::kCPU);
  ASSERT_TRUE(rope.ok());
  EXPECT_TRUE(torch::equal(rope->image[4], Freq(1, -3, -3)));
  EXPECT_TRUE(torch::equal(rope->text[0], Freq(3, 3, 3)));
  // Beyond diffusers' 4096-row tables.
  EXPECT_FALSE(models::qwenimage::QwenRopeFrequencies({ImageShape{1, 8, 8}}, 4093, kAxes, 10000.0,
                                                      torch::kCPU)
                   .ok());
}

// The joint tables hold the per-stream entries, text first, bit for bit: freqs as they are,
// cos / sin as their real / imaginary parts with every pair repeated (rope.h's layout, so that
// MakeRopeTables of them recombines the same complex values).
TEST(QwenRope, JointTablesAreTheStreamTablesTextFirst) {
  auto rope = models::qwenimage::QwenRopeFrequencies({ImageShape{1, 2, 2}, ImageShape{1, 3, 5}}, 4,
                                                     kAxes, 10000.0, torch::kCPU);
  ASSERT_TRUE(rope.ok()) << rope.status();
  const models::RopeTables& joint = rope->joint;
  const int64_t tokens = 4 + 4 + 15;
  EXPECT_EQ(joint.cos.sizes(), (std::vector<int64_t>{tokens, 16}));
  EXPECT_EQ(joint.sin.sizes(), (std::vector<int64_t>{tokens, 16}));
  EXPECT_EQ(joint.cos.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(joint.cos.is_contiguous() && joint.sin.is_contiguous());
  auto freqs = torch::cat({rope->text, rope->image}, 0);
  EXPECT_TRUE(torch::equal(joint.freqs, freqs));
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t copy : {2 * i, 2 * i + 1}) {
      EXPECT_TRUE(torch::equal(joint.cos.select(1, copy), torch::real(freqs).select(1, i))) << copy;
      EXPECT_TRUE(torch::equal(joint.sin.select(1, copy), torch::imag(freqs).select(1, i))) << copy;
    }
  }
  EXPECT_TRUE(torch::equal(models::MakeRopeTables(joint.cos, joint.sin).freqs, freqs));
}

// Qwen-Image's attention inputs through JointHeadsFirst on the CPU (the reference path) are
// exactly what the model computed before: diffusers' RMSNorm, ApplyRotaryEmbComplex with each
// stream's table, cat, heads first. q/k are views of a fused GEMM result, as JointProjections
// hands them over; the shapes include one head with 6 pairs per row, where a rotation of the
// joined sequence would put other elements in the CPU complex product's scalar tail.
struct QwenInputsCase {
  torch::ScalarType dtype, weight_dtype;
  int64_t batch, heads, text_len;
  std::vector<ImageShape> shapes;
  std::vector<int64_t> axes = kAxes;
};

class QwenAttentionInputsTest : public ::testing::TestWithParam<QwenInputsCase> {};

TEST_P(QwenAttentionInputsTest, JointHeadsFirstIsTheUnfusedSequenceBitForBit) {
  const QwenInputsCase c = GetParam();
  torch::manual_seed(11);
  const int64_t hd = c.axes[0] + c.axes[1] + c.axes[2], h = c.heads;
  int64_t n = 0;
  for (const auto& s : c.shapes) n += s.frames * s.height * s.width;
  auto rope = models::qwenimage::QwenRopeFrequencies(c.shapes, c.text_len, c.axes, 10000.0,
                                                     torch::kCPU);
  ASSERT_TRUE(rope.ok()) << rope.status();

  const sharding::ShardedStateDict sd(
      0, 1,
      {{"txt.weight", (torch::rand({hd}) + 0.5).to(c.weight_dtype)},
       {"img.weight", (torch::rand({hd}) + 0.5).to(c.weight_dtype)}},
      {});
  const models::ReplicatedModuleLoader loader(sd);
  auto norm_txt = models::DiffusersRmsNorm::Load(loader, "txt", 1e-6);
  auto norm_img = models::DiffusersRmsNorm::Load(loader, "img", 1e-6);
  ASSERT_TRUE(norm_txt.ok() && norm_img.ok());

  // The q third of a fused q/k/v GEMM result, (B, S, heads, hd) with the GEMM's row stride.
  auto q_view = [&](int64_t tokens) {
    auto fused = (torch::randn({c.batch, tokens, 3 * h * hd}) * 3).to(c.dtype);
    return fused.narrow(2, 0, h * hd).unflatten(2, {h, hd});
  };
  auto txt = q_view(c.text_len), img = q_view(n);

  auto unfused =
      torch::cat({models::ApplyRotaryEmbComplex(norm_txt->Forward(txt), rope->text),
                  models::ApplyRotaryEmbComplex(norm_img->Forward(img), rope->image)},
                 1)
          .permute({0, 2, 1, 3});
  const models::StreamPart t{txt, nullptr, &*norm_txt}, i{img, nullptr, &*norm_img};
  const auto order = models::RopeOrder::kPerStream;
  auto reference = models::JointHeadsFirstReference(t, i, &rope->joint, order);
  EXPECT_EQ(reference.scalar_type(), unfused.scalar_type());
  EXPECT_EQ(reference.sizes(), (std::vector<int64_t>{c.batch, h, c.text_len + n, hd}));
  EXPECT_TRUE(torch::equal(reference, unfused));
  EXPECT_TRUE(torch::equal(models::JointHeadsFirst(t, i, &rope->joint, order), unfused));

  // Rotating the joined sequence instead (FLUX's order) gives the same values to the rounding of
  // the output dtype, not always the same bits (on an AVX2 CPU the one-head float32 case differs in
  // a few elements): why Qwen-Image asks for kPerStream.
  auto joined = models::JointHeadsFirstReference(t, i, &rope->joint, models::RopeOrder::kJoined);
  const double tol = unfused.scalar_type() == torch::kFloat32 ? 1e-5 : 1e-2;
  EXPECT_TRUE(torch::allclose(joined.to(torch::kFloat32), unfused.to(torch::kFloat32), tol, tol));

  // v: no norm, no rotation, the plain join.
  auto v = models::JointHeadsFirst({txt}, {img}, nullptr);
  EXPECT_TRUE(torch::equal(v, torch::cat({txt, img}, 1).permute({0, 2, 1, 3})));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QwenAttentionInputsTest,
    ::testing::Values(
        QwenInputsCase{torch::kFloat32, torch::kFloat32, 2, 3, 7, {ImageShape{1, 6, 6}}},
        QwenInputsCase{torch::kBFloat16, torch::kBFloat16, 2, 3, 7, {ImageShape{1, 6, 6}}},
        QwenInputsCase{torch::kFloat32, torch::kFloat32, 2, 1, 13, {ImageShape{1, 63, 65}}, {4, 4, 4}},
        QwenInputsCase{torch::kBFloat16, torch::kBFloat16, 2, 1, 3,
                       {ImageShape{1, 2, 3}, ImageShape{1, 5, 3}}, {4, 4, 4}},
        // A float32 weight on bf16 q/k: diffusers' RMSNorm promotes to float32.
        QwenInputsCase{torch::kBFloat16, torch::kFloat32, 1, 2, 9, {ImageShape{1, 4, 4}}}),
    [](const ::testing::TestParamInfo<QwenInputsCase>& info) {
      const QwenInputsCase& c = info.param;
      auto name = [](torch::ScalarType t) { return t == torch::kFloat32 ? "f32" : "bf16"; };
      return std::string(name(c.dtype)) + "_w" + name(c.weight_dtype) + "_" +
             std::to_string(info.index);
    });

TEST(QwenRope, ImageShapesFromTensor) {
  auto square = models::qwenimage::ImageShapesFromTensor({}, 2, 64);
  ASSERT_TRUE(square.ok());
  ASSERT_EQ(square->size(), 1u);
  EXPECT_EQ((*square)[0].height, 8);
  EXPECT_EQ((*square)[0].width, 8);
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor({}, 1, 60).ok());
  auto batch = models::qwenimage::ImageShapesFromTensor(torch::tensor({{1, 4, 16}, {1, 4, 16}}), 2, 64);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)[0].height, 4);
  EXPECT_EQ((*batch)[0].width, 16);
  // Different per-sample shapes, a wrong batch size, a token mismatch, non-integers.
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor(torch::tensor({{1, 4, 16}, {1, 16, 4}}), 2, 64).ok());
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor(torch::tensor({{1, 8, 8}}), 2, 64).ok());
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor(torch::tensor({1, 8, 7}), 1, 64).ok());
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor(torch::tensor({1.0, 8.5, 8.0}), 1, 68).ok());
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor(torch::tensor({0, 8, 8}), 1, 0).ok());
}

TEST(DiffusersRmsNorm, Float32AndHalfRounding) {
  torch::manual_seed(5);
  auto x = torch::randn({3, 5, 16}) * 3;
  auto w = torch::randn({16});
  auto expected = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * w;
  EXPECT_TRUE(torch::allclose(models::DiffusersRmsNormForward(x, w, 1e-6), expected, 1e-6, 1e-6));
  // bf16: normalised in fp32, rounded to bf16, then a bf16 multiply by the weight.
  auto xb = x.to(torch::kBFloat16), wb = w.to(torch::kBFloat16);
  auto xf = xb.to(torch::kFloat32);
  auto want = (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(torch::kBFloat16) * wb;
  auto got = models::DiffusersRmsNormForward(xb, wb, 1e-6);
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(got, want));
  // Without a weight: back to the input dtype.
  EXPECT_EQ(models::DiffusersRmsNormForward(xb, {}, 1e-6).scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace ditserve
