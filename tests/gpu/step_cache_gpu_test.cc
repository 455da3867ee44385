// First Block Cache on the GPU against diffusers' hook (skipped where torch sees no CUDA device):
// every call of tests/fixtures/step-cache through our pipeline on CUDA, with the cached pass's
// CUDA graphs as the server runs them. float32 at tp 1 and tp 2 (two in-process ranks on the one
// GPU) against diffusers' float32 CPU run: the same decisions, the image within 1e-3. bfloat16 at
// tp 1 against diffusers' own bfloat16 run on CUDA (make_step_cache_fixtures.py --bf16-device
// cuda: `<call>.bf16.*`): every pass's compared value diffusers' within what bfloat16 does to
// diffusers' own value (ExpectComparedAsDiffusers, tests/support/step_cache_calls.h), the same
// decisions until a pass where the two values straddle the threshold (reported; the runs then part,
// so the image is not compared), and the image within the README's bf16 limit (2e-2).
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <tuple>

#include <torch/torch.h>

#include "tests/support/fixtures.h"
#include "tests/support/gpu_case.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/step_cache_calls.h"

namespace ditserve::testing {
namespace {

class StepCacheGpuTest : public ::testing::TestWithParam<GpuCase> {};

TEST_P(StepCacheGpuTest, EveryCallDecidesAndDrawsAsDiffusers) {
  DITSERVE_SKIP_WITHOUT_CUDA();
  const GpuCase& c = GetParam();
  const bool f32 = c.dtype == torch::kFloat32;
  ASSERT_FALSE(StepCacheCalls().empty());
  for (const nlohmann::json& call : StepCacheCalls()) {
    const std::string name = call["name"].get<std::string>();
    const std::string prefix = f32 ? name : name + ".bf16";
    SCOPED_TRACE(prefix);
    pipeline::PipelineOptions options;
    options.model_dir = FixturesDir() + "/" + call["base"].get<std::string>();
    options.device = torch::Device(torch::kCUDA, 0);
    options.dtype = c.dtype;
    auto run = RunPipelineGroup(c.world, options, StepCacheJob(call));
    ASSERT_TRUE(run.ok()) << run.status();
    const pipeline::GenerationResult& r = run->rank0();
    ASSERT_EQ(r.images.size(), 1u);
    const torch::Tensor expected = StepCacheRef(prefix + ".image");
    ASSERT_TRUE(expected.defined());
    bool same_path = true;
    std::string ours, theirs;
    if (call["threshold"].is_null()) {
      EXPECT_TRUE(r.cache_decisions.empty());
    } else {
      ours = OurDecisions(r);
      theirs = DiffusersDecisions(prefix);
      ASSERT_EQ(ours.size(), theirs.size()) << ours << " vs diffusers' " << theirs;
      same_path =
          ExpectComparedAsDiffusers(name, prefix, f32, call["threshold"].get<double>(), r, c.world);
    }
    const torch::Tensor image = r.images[0].to(torch::kCPU, torch::kFloat32);
    ASSERT_EQ(image.sizes(), expected.sizes());
    const double err = RelativeError(image, expected.to(torch::kFloat32));
    std::printf("step cache %s on cuda, tp %d %s: decisions %s (diffusers %s), image relative "
                "error %.3g against diffusers %s (limit %.0e)%s\n",
                name.c_str(), c.world, DtypeName(c.dtype), ours.c_str(), theirs.c_str(), err,
                f32 ? "float32 (CPU)" : "bfloat16 (CUDA)", c.limit,
                same_path ? "" : ": not compared, different paths");
    if (same_path) EXPECT_LT(err, c.limit) << "image relative error " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Degrees, StepCacheGpuTest, FixtureParityCases(),
                         [](const ::testing::TestParamInfo<GpuCase>& info) {
                           return CaseName(info);
                         });

}  // namespace
}  // namespace ditserve::testing
