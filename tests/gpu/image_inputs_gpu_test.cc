// Image inputs on the GPU (skipped where torch sees no CUDA device): the four calls of
// tests/fixtures/image-inputs (FLUX.2 editing with one reference and with two of odd sizes, FLUX.1
// image to image at strength 0.6, FLUX.1 Kontext) from the committed input files through our
// decoding and preparation and the pipeline on CUDA, the same path as image_inputs_parity_test
// (tests/support/image_calls.h). float32 against diffusers' float32 CPU run (`<call>.image`, the
// parity limit for an image, 1e-3), at tp 1 and at tp 2 (two in-process ranks on the one GPU);
// bfloat16 against diffusers' own bfloat16 run of the call on CUDA (`<call>.bf16.image` of
// image_reference_bf16.safetensors, made by make_image_fixtures.py --bf16-device cuda on the GPU
// host: a bf16 pipeline draws its noise in bf16, so it is held against diffusers' bf16 run, not
// the float32 one), within the README's bf16 limit (2e-2), or a fifth of diffusers' own bf16 error
// where that is larger (kShareOfOwnBf16Error).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <tuple>

#include <torch/torch.h>

#include "tests/support/fixtures.h"
#include "tests/support/gpu_case.h"
#include "tests/support/image_calls.h"
#include "tests/support/image_fixtures.h"

namespace ditserve::testing {
namespace {

using Param = std::tuple<std::string, GpuCase>;

// bfloat16: these tiny random-weight models are ill-conditioned in bf16 (diffusers' own bf16 image
// of flux2_edit_one is 0.275 from its float32 one, flux1_img2img's 0.369, on an H100, 2026-12-05),
// so two bf16 runs that round differently (our kernels, or only another GPU's GEMM algorithms)
// part by more than the README's 2e-2. The bar is then a fifth of diffusers' own bf16 error in the
// call: ours must be five times nearer diffusers' bf16 image than bf16 itself is to float32.
constexpr double kShareOfOwnBf16Error = 0.2;

class ImageInputsGpuTest : public ::testing::TestWithParam<Param> {};

TEST_P(ImageInputsGpuTest, ImageMatchesDiffusers) {
  DITSERVE_SKIP_WITHOUT_CUDA();
  const auto& [name, c] = GetParam();
  pipeline::PipelineOptions options;
  options.device = torch::Device(torch::kCUDA, 0);
  options.dtype = c.dtype;
  auto run = RunImageCall(name, c.world, options);
  ASSERT_TRUE(run.ok()) << name << ": " << run.status();
  ASSERT_TRUE(run->image.defined());

  // The same prepared sizes as diffusers' (the preparation is on the host, as on the CPU).
  const nlohmann::json& result = ImageCalls()["results"][name];
  ASSERT_EQ(run->prepared.size(), result["prepared"].size()) << name;
  for (size_t i = 0; i < run->prepared.size(); ++i) {
    EXPECT_EQ(run->prepared[i].size(0), result["prepared"][i]["height"].get<int64_t>()) << name;
    EXPECT_EQ(run->prepared[i].size(1), result["prepared"][i]["width"].get<int64_t>()) << name;
  }

  const bool f32 = c.dtype == torch::kFloat32;
  const torch::Tensor expected =
      f32 ? ImageRef(name + ".image") : ImageRefBf16(name + ".bf16.image");
  ASSERT_TRUE(expected.defined()) << name;
  const torch::Tensor image = run->image.to(torch::kCPU, torch::kFloat32);
  ASSERT_EQ(image.sizes(), expected.sizes()) << name;
  const double err = RelativeError(image, expected);
  RecordProperty("relative_error", std::to_string(err));
  std::printf(
      "image input %s on cuda, tp=%d %s: relative error %.3g against diffusers %s (limit "
      "%.0e)\n",
      name.c_str(), c.world, DtypeName(c.dtype), err, f32 ? "float32 (CPU)" : "bfloat16 (CUDA)",
      c.limit);
  double limit = c.limit;
  if (!f32) {  // for scale: how far the bf16 image is from the float32 reference
    const torch::Tensor f32_ref = ImageRef(name + ".image");
    ASSERT_TRUE(f32_ref.defined() && f32_ref.sizes() == image.sizes()) << name;
    const double own = RelativeError(expected, f32_ref);
    limit = std::max(c.limit, kShareOfOwnBf16Error * own);
    std::printf(
        "image input %s on cuda, tp=%d bfloat16: %.3g from diffusers float32 (diffusers' "
        "bf16 run: %.3g; limit against diffusers' bf16 run %.3g)\n",
        name.c_str(), c.world, RelativeError(image, f32_ref), own, limit);
  }
  EXPECT_LT(err, limit) << name << " tp=" << c.world << " " << DtypeName(c.dtype);
}

INSTANTIATE_TEST_SUITE_P(Calls, ImageInputsGpuTest,
                         ::testing::Combine(::testing::Values("flux2_edit_one", "flux2_edit_two",
                                                              "flux1_img2img", "flux1_kontext"),
                                            FixtureParityCases()),
                         CallCaseName);

}  // namespace
}  // namespace ditserve::testing
