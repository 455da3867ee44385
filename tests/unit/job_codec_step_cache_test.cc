// worker/job_codec.h for the step cache (First Block Cache): RunRequest.cache_threshold ->
// GenerationJob::cache_threshold (bounds, NaN), GenerationResult's pass counts -> RunResult on
// every rank, ModelCard::max_cache_threshold -> ModelDescription.step_cache, and
// EngineStatus::cached_steps -> WorkerStatus.cached_steps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "worker/job_codec.h"

namespace ditserve::worker {
namespace {

v1::RunRequest Request(double cache_threshold) {
  v1::RunRequest r;
  r.set_height(64);
  r.set_width(64);
  r.set_num_inference_steps(4);
  r.set_cache_threshold(cache_threshold);
  r.add_items()->set_prompt("a cat");
  return r;
}

TEST(JobCodecStepCache, TheThresholdReachesTheJob) {
  for (double t : {0.0, 0.05, 0.12, pipeline::GenerationJob::kMaxCacheThreshold}) {
    auto job = JobFromRunRequest(Request(t));
    ASSERT_TRUE(job.ok()) << t << ": " << job.status();
    EXPECT_EQ(job->cache_threshold, t);  // a double on the wire: unchanged
  }
  auto absent = JobFromRunRequest(v1::RunRequest());
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->cache_threshold, 0.0) << "absent is off";
}

TEST(JobCodecStepCache, AThresholdOutOfBoundsIsRefusedNamingTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double t : {-0.01, 1.0001, 2.0, nan, inf, -inf}) {
    auto job = JobFromRunRequest(Request(t));
    ASSERT_FALSE(job.ok()) << t;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(job.status().message(), "cache_threshold must be in 0..1"))
        << job.status();
  }
}

TEST(JobCodecStepCache, EveryRanksResultCarriesThePassCounts) {
  // Not rank 0: no outputs, the counts all the same (every rank counts the same).
  pipeline::GenerationResult result;
  result.full_steps = 3;
  result.cached_steps = 5;
  auto out = RunResultFromGeneration(Request(0.1), result, pipeline::ModelCard());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->outputs_size(), 0);
  EXPECT_EQ(out->full_steps(), 3u);
  EXPECT_EQ(out->cached_steps(), 5u);
  // Rank 0: with its image.
  result.images.push_back(torch::zeros({8, 8, 3}, torch::kUInt8));
  auto rank0 = RunResultFromGeneration(Request(0.1), result, pipeline::ModelCard());
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_EQ(rank0->outputs_size(), 1);
  EXPECT_EQ(rank0->full_steps(), 3u);
  EXPECT_EQ(rank0->cached_steps(), 5u);
}

TEST(JobCodecStepCache, TheModelDescriptionOffersTheCacheUpToTheCardsBound) {
  pipeline::ModelCard card;
  const v1::ModelDescription d = DescribeModel(card, 2, 1);
  ASSERT_TRUE(d.has_step_cache());
  EXPECT_EQ(d.step_cache().method(), "first_block_cache");
  EXPECT_EQ(d.step_cache().max_threshold(), pipeline::GenerationJob::kMaxCacheThreshold);
  EXPECT_EQ(d.step_cache().default_threshold(), 0.0) << "the frontend's flag sets the default";
  card.max_cache_threshold = 0.25;
  EXPECT_EQ(DescribeModel(card, 2, 1).step_cache().max_threshold(), 0.25);
  card.max_cache_threshold = 0;  // a model without the cache: none described
  EXPECT_FALSE(DescribeModel(card, 2, 1).has_step_cache());
}

TEST(JobCodecStepCache, WorkerStatusCarriesTheCachedPasses) {
  EngineStatus status;
  status.steps = 28;
  status.cached_steps = 17;
  const v1::WorkerStatus s = WorkerStatusToProto(status);
  EXPECT_EQ(s.steps(), 28u);
  EXPECT_EQ(s.cached_steps(), 17u);
}

}  // namespace
}  // namespace ditserve::worker
