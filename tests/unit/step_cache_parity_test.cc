// First Block Cache against diffusers' own hook (issue 33): every call of
// tests/fixtures/step-cache/step_cache_calls.json (made by make_step_cache_fixtures.py with the
// real diffusers: FluxPipeline and QwenImagePipeline on the tiny fixtures, enable_cache(
// FirstBlockCacheConfig(threshold)), float32 on the CPU) runs through our pipeline at tp 1 and 2:
// the same decisions in the same order (per pass: which context, computed or cached), the value
// each pass compared with the threshold within 1e-4 of diffusers', and the image within 1e-3; the
// calls without a cache give diffusers' image too. Registered only once the fixtures exist
// (tests/unit/CMakeLists.txt, REQUIRES).
#include <gtest/gtest.h>

#include <string>

#include "tests/support/fixtures.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/step_cache_calls.h"

namespace ditserve {
namespace {

using testing::DiffusersCompared;
using testing::DiffusersDecisions;
using testing::FixturesDir;
using testing::OurCompared;
using testing::OurDecisions;
using testing::RelativeError;
using testing::StepCacheCalls;
using testing::StepCacheJob;
using testing::StepCacheRef;

TEST(StepCacheParity, EveryCallDecidesAndDrawsAsDiffusers) {
  ASSERT_FALSE(StepCacheCalls().empty());
  for (const nlohmann::json& call : StepCacheCalls()) {
    const std::string name = call["name"].get<std::string>();
    SCOPED_TRACE(name);
    pipeline::PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/" + call["base"].get<std::string>();
    const torch::Tensor expected = StepCacheRef(name + ".image");
    ASSERT_TRUE(expected.defined());
    for (const int world : {1, 2}) {
      SCOPED_TRACE(world);
      auto run = testing::RunPipelineGroup(world, opts, StepCacheJob(call));
      ASSERT_TRUE(run.ok()) << run.status();
      const pipeline::GenerationResult& r = run->rank0();
      ASSERT_EQ(r.images.size(), 1u);
      const double err = RelativeError(r.images[0], expected);
      EXPECT_LT(err, 1e-3) << "image relative error " << err;
      if (call["threshold"].is_null()) {
        EXPECT_TRUE(r.cache_decisions.empty());
        continue;
      }
      const std::string theirs = DiffusersDecisions(name);
      EXPECT_EQ(OurDecisions(r), theirs);
      // The value each pass compared with the threshold, diffusers' to float32's precision.
      ASSERT_EQ(OurCompared(r).size(), DiffusersCompared(name).size());
      EXPECT_TRUE(testing::ExpectComparedAsDiffusers(name, name, /*f32=*/true,
                                                     call["threshold"].get<double>(), r, world));
      std::printf("%s tp %d: decisions %s, image relative error %.3g\n", name.c_str(), world,
                  theirs.c_str(), err);
    }
  }
}

}  // namespace
}  // namespace ditserve
