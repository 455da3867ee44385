// The whole FLUX.1 pipeline (prompt -> image) on the flux1-tiny fixture at tp = 1, 2 and 4, each
// rank in its own thread of an in-process group: the image must equal diffusers' flux1.image.
#include <gtest/gtest.h>

#include <mutex>

#include "pipeline/flux1_pipeline.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixture_jobs.h"
#include "tests/support/fixtures.h"
#include "comm/local_communicator.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::FixturesDir;
using ditserve::testing::Ref;
using ditserve::testing::Flux1FixtureJob;
using ditserve::testing::RelativeError;

// Runs `job` on a group of `world` in-process ranks; returns rank 0's result and the number of
// step events each rank saw.
absl::StatusOr<GenerationResult> RunGroup(int world, const GenerationJob& job,
                                          std::vector<int>* steps_seen = nullptr,
                                          std::function<bool(int rank)> cancel = {}) {
  std::mutex mu;
  GenerationResult rank0;
  if (steps_seen) steps_seen->assign(world, 0);
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/flux1-tiny";
    auto p = LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    int steps = 0;
    auto r = (*p)->Run(
        job, [&](const StepEvent&) { ++steps; },
        [&] { return cancel ? cancel(c.rank()) : false; });
    {
      std::lock_guard<std::mutex> lock(mu);
      if (steps_seen) (*steps_seen)[c.rank()] = steps;
    }
    if (!r.ok()) return r.status();
    if (c.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      rank0 = *r;
    } else if (!r->images.empty() || !r->latents.empty()) {
      return absl::InternalError("only rank 0 may return images");
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return rank0;
}

class Flux1PipelineTest : public ::testing::TestWithParam<int> {};

TEST_P(Flux1PipelineTest, ImageMatchesDiffusers) {
  std::vector<int> steps;
  auto result = RunGroup(GetParam(), Flux1FixtureJob(JobOutput::kImage), &steps);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->images.size(), 1u);
  EXPECT_EQ(steps, std::vector<int>(GetParam(), 4));
  const double err = RelativeError(result->images[0], Ref("flux1.image"));
  EXPECT_LT(err, 1e-3) << "tp=" << GetParam();
  RecordProperty("relative_error", std::to_string(err));
}

INSTANTIATE_TEST_SUITE_P(TpDegrees, Flux1PipelineTest, ::testing::Values(1, 2, 4));

TEST(Flux1Pipeline, LatentsMatchTheLastDenoisingStep) {
  auto result = RunGroup(2, Flux1FixtureJob(JobOutput::kLatents));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->latents.size(), 1u);
  EXPECT_LT(RelativeError(result->latents[0], Ref("flux1.latents_after_step.3")), 1e-4);
}

TEST(Flux1Pipeline, CancellationStopsEveryRankAtTheSameStep) {
  // Only rank 1 sees the cancel request, after its second step boundary: all ranks must stop.
  std::atomic<int> checks{0};
  std::vector<int> steps;
  auto result = RunGroup(2, Flux1FixtureJob(JobOutput::kImage), &steps, [&](int rank) {
    if (rank == 0) return false;
    return checks.fetch_add(1) >= 2;
  });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_NE(std::string(result.status().message()).find("before step 3 of 4"), std::string::npos)
      << result.status();
  // Both ranks finished exactly two steps: rank 0 never saw a cancel request of its own.
  EXPECT_EQ(steps, (std::vector<int>{2, 2}));
}

TEST(Flux1Pipeline, PrecomputedEmbeddingsGiveTheSameImage) {
  GenerationJob job = Flux1FixtureJob(JobOutput::kImage);
  PromptEmbeddings e;
  e.prompt_embeds = Ref("flux1.prompt_embeds");
  e.pooled_prompt_embeds = Ref("flux1.pooled_prompt_embeds");
  job.items[0].embeddings = e;
  job.items[0].prompt.clear();
  auto result = RunGroup(2, job);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(RelativeError(result->images[0], Ref("flux1.image")), 1e-3);
}

}  // namespace
}  // namespace ditserve::pipeline
