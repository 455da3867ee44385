// Image inputs against diffusers' own runs (tests/fixtures/image-inputs, make_image_fixtures.py):
// each call (FLUX.2 editing with one reference that needs no resampling and with two of odd sizes
// that do; FLUX.1 image-to-image at strength 0.6; a Kontext call) goes from the committed input
// files through our decoding and preparation (imaging/) and the pipeline, at tp 1 and 2 (in-process
// ranks), float32 on the CPU: the prepared pixels (where stored), the VAE side's latents, the
// transformer's first call and the image are compared with diffusers'; tp 2 equals tp 1. The VAE
// encoders alone are vae_encoder_test's. The preparation and the run are
// tests/support/image_calls.h's, which image_inputs_gpu_test shares.
#include <gtest/gtest.h>

#include "pipeline/image_inputs.h"
#include "tests/support/fixtures.h"
#include "tests/support/image_calls.h"
#include "tests/support/image_fixtures.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::ImageCalls;
using ditserve::testing::ImageRef;
using ditserve::testing::RelativeError;
using ditserve::testing::RunImageCall;

class ImageInputsParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageInputsParity, MatchesDiffusersAtEveryDegree) {
  const std::string name = GetParam();
  auto one = RunImageCall(name, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  const nlohmann::json& result = ImageCalls()["results"][name];
  ASSERT_EQ(one->prepared.size(), result["prepared"].size());
  for (size_t i = 0; i < one->prepared.size(); ++i) {
    const torch::Tensor& px = one->prepared[i];
    EXPECT_EQ(px.size(1), result["prepared"][i]["width"].get<int64_t>()) << name << " image " << i;
    EXPECT_EQ(px.size(0), result["prepared"][i]["height"].get<int64_t>()) << name << " image " << i;
    const std::string key = name + ".pixels." + std::to_string(i);
    if (ditserve::testing::ImageReference().count(key) != 0) {
      auto x = VaeImageInput(px, torch::kFloat32, torch::kCPU);
      ASSERT_TRUE(x.ok()) << x.status();
      EXPECT_TRUE(torch::equal(*x, ImageRef(key))) << key << " differs from diffusers' preprocess";
    }
  }
  const torch::Tensor expected = ImageRef(name + ".image");
  ASSERT_EQ(one->image.sizes(), expected.sizes());
  EXPECT_LT(RelativeError(one->image, expected), 1e-3) << name;
  auto two = RunImageCall(name, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(two->image, one->image), 1e-5) << name;
}

INSTANTIATE_TEST_SUITE_P(Calls, ImageInputsParity,
                         ::testing::Values("flux2_edit_one", "flux2_edit_two", "flux1_img2img",
                                           "flux1_kontext"));

}  // namespace
}  // namespace ditserve::pipeline
