// First Block Cache on the GPU against diffusers' hook (skipped where torch sees no CUDA device):
// every call of tests/fixtures/step-cache through our pipeline on CUDA, with the cached pass's
// CUDA graphs as the server runs them. float32 at tp 1 and tp 2 (two in-process ranks on the one
// GPU) against diffusers' float32 CPU run: the same decisions, the image within 1e-3. bfloat16 at
// tp 1 against diffusers' own bfloat16 run on CUDA (make_step_cache_fixtures.py --bf16-device
// cuda: `<call>.bf16.*`): every pass's compared value diffusers' within what bfloat16 does to
// diffusers' own value (ComparedAsDiffusers), the same decisions until a pass where the two values
// straddle the threshold (reported; the runs then part, so the image is not compared), and the
// image within the README's bf16 limit (2e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "tests/support/fixtures.h"
#include "tests/support/gpu_case.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/step_cache_calls.h"

namespace ditserve::testing {
namespace {

// Walks the passes while ours and diffusers' took the same path (the same decisions so far): each
// pass's compared value must be diffusers' within the tolerance, and a decision may differ only
// in bfloat16, at a pass whose value agrees that well (the two then part: later passes are not
// compared). float32: 1e-4 relative, and every decision equal. bfloat16: the tolerance is what
// bfloat16 does to diffusers' own value in this call: twice the largest |bf16 - float32| of
// diffusers' two runs over the passes where they took the same path (plus 1 % of the threshold).
// Returns whether every decision was diffusers'.
bool ComparedAsDiffusers(const std::string& name, const std::string& prefix, bool f32,
                         double threshold, const pipeline::GenerationResult& r, int world) {
  const std::string ours = OurDecisions(r), theirs = DiffusersDecisions(prefix);
  const std::vector<double> ours_d = OurCompared(r), theirs_d = DiffusersCompared(prefix);
  double tolerance_of_threshold = 0;
  if (!f32) {
    const std::string f32_theirs = DiffusersDecisions(name);
    const std::vector<double> f32_d = DiffusersCompared(name);
    double spread = 0;
    for (size_t i = 0; i < theirs_d.size() && i < f32_d.size(); ++i) {
      if (!std::isnan(theirs_d[i]) && !std::isnan(f32_d[i])) {
        spread = std::max(spread, std::abs(theirs_d[i] - f32_d[i]));
      }
      if (f32_theirs[i] != theirs[i]) break;
    }
    tolerance_of_threshold = 2 * spread + 0.01 * threshold;
    std::printf("%s tp %d bfloat16: diffusers' own bf16 - float32 spread %.4f, tolerance %.4f\n",
                name.c_str(), world, spread, tolerance_of_threshold);
  }
  double worst = 0;
  bool same = true;
  for (size_t i = 0; i < ours.size() && i < ours_d.size() && i < theirs_d.size(); ++i) {
    if (std::isnan(theirs_d[i])) {
      EXPECT_TRUE(std::isnan(ours_d[i])) << "pass " << i << " compared " << ours_d[i];
    } else {
      const double tol = f32 ? 1e-5 + 1e-4 * theirs_d[i] : tolerance_of_threshold;
      worst = std::max(worst, std::abs(ours_d[i] - theirs_d[i]));
      EXPECT_NEAR(ours_d[i], theirs_d[i], tol)
          << "pass " << i << " (threshold " << threshold << ")";
    }
    if (ours[i] == theirs[i]) continue;
    EXPECT_FALSE(f32) << "pass " << i << ": ours " << ours[i] << ", diffusers' " << theirs[i];
    std::printf(
        "%s tp %d %s: pass %zu decided differently: ours %.4f, diffusers %.4f, threshold "
        "%.2f; the paths part here\n",
        name.c_str(), world, f32 ? "float32" : "bfloat16", i, ours_d[i], theirs_d[i], threshold);
    same = false;
    break;
  }
  std::printf("%s tp %d %s: compared values within %.2g of diffusers' on the common path\n",
              name.c_str(), world, f32 ? "float32" : "bfloat16", worst);
  return same;
}

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
          ComparedAsDiffusers(name, prefix, f32, call["threshold"].get<double>(), r, c.world);
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
