// Qwen-Image building blocks: complex RoPE (models/common/complex_rope.h) against the real
// cos/sin form, the centred image / shifted text positions (models/qwenimage/qwenimage_rope.h),
// the img_shapes conversions, and diffusers' RMSNorm rounding (models/common/diffusers_rms_norm.h).
#include <gtest/gtest.h>

#include <cmath>

#include "models/common/complex_rope.h"
#include "models/common/diffusers_rms_norm.h"
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
