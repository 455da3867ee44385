// First Block Cache (issue 33): the decision rule (models/common/first_block_cache.h), rank 0's
// decision for the group under a forced disagreement, a cached transformer pass of each family
// against its full pass, and the pipelines on the tiny fixtures: threshold 0 is the job without a
// cache, every degree makes the same decisions and gives the same latents, true CFG's two
// contexts, a LoRA, and the refusals. Parity with diffusers' own hook is step_cache_parity_test's
// (tests/fixtures/step-cache, from make_step_cache_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "comm/local_communicator.h"
#include "models/common/first_block_cache.h"
#include "models/transformer_factory.h"
#include "pipeline/job.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixtures.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/transformer_harness.h"

namespace ditserve {
namespace {

using models::FirstBlockCache;
using pipeline::GenerationJob;
using pipeline::GenerationResult;
using testing::FixturesDir;
using testing::RelativeError;

// ---- The decision ----

TEST(FirstBlockCache, ComparesWithTheLastFullPassAndComputesOnlyAboveTheThreshold) {
  FirstBlockCache cache(0.25);
  const torch::Tensor r = torch::ones({2, 4, 8});
  EXPECT_TRUE(cache.ShouldComputeLocally(r)) << "a context's first pass has nothing to compare";
  cache.Computed(r, torch::zeros_like(r));
  // diff = mean|r' - r| / mean|r|; the factors are exact in float32, so diff is exactly 0.25 etc.
  EXPECT_FALSE(cache.ShouldComputeLocally(r * 1.125));
  EXPECT_FALSE(cache.ShouldComputeLocally(r * 1.25)) << "diff == threshold caches (diffusers: >)";
  EXPECT_TRUE(cache.ShouldComputeLocally(r * 1.375));
  EXPECT_TRUE(cache.ShouldComputeLocally(-r));
  // A cached pass leaves the comparison against the last full pass.
  cache.Cached();
  EXPECT_FALSE(cache.ShouldComputeLocally(r * 1.25));
  cache.Computed(r * 2, torch::zeros_like(r));
  EXPECT_FALSE(cache.ShouldComputeLocally(r * 2.5));  // 0.5 / 2
  EXPECT_TRUE(cache.ShouldComputeLocally(r));         // 1 / 2
  EXPECT_EQ(cache.full_passes(), 2u);
  EXPECT_EQ(cache.cached_passes(), 1u);
}

TEST(FirstBlockCache, NanCachesAsInDiffusers) {
  FirstBlockCache cache(0.1);
  const torch::Tensor zero = torch::zeros({1, 2, 4});
  cache.Computed(zero, zero);
  EXPECT_FALSE(cache.ShouldComputeLocally(zero)) << "0 / 0 is NaN, and NaN > t is false";
  EXPECT_TRUE(cache.ShouldComputeLocally(zero + 1)) << "1 / 0 is inf";
}

// The ranks' residuals forced apart: every rank follows rank 0, whichever way it decides.
TEST(FirstBlockCache, RankZeroDecidesForTheGroup) {
  for (const bool rank0_computes : {false, true}) {
    std::vector<int> decided(2, -1);
    const absl::Status s = comm::RunLocalGroup(2, [&](comm::Communicator& c) -> absl::Status {
      FirstBlockCache cache(0.1);
      const torch::Tensor r = torch::ones({1, 3, 4});
      cache.Computed(r, torch::zeros_like(r));
      const bool computes_here = (c.rank() == 0) == rank0_computes;
      const torch::Tensor mine = computes_here ? r * 3 : r;
      EXPECT_EQ(cache.ShouldComputeLocally(mine), computes_here);
      absl::StatusOr<bool> d = cache.Decide(mine, c);
      if (!d.ok()) return d.status();
      if (c.rank() == 0) {
        EXPECT_DOUBLE_EQ(cache.last_compared(), rank0_computes ? 2.0 : 0.0);  // |3r - r| / |r|
      } else {
        EXPECT_TRUE(std::isnan(cache.last_compared())) << "only rank 0 compares";
      }
      decided[c.rank()] = *d ? 1 : 0;
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(decided[0], rank0_computes ? 1 : 0);
    EXPECT_EQ(decided[1], rank0_computes ? 1 : 0);
  }
}

// ---- A transformer pass ----

struct TransformerCase {
  testing::FixtureTransformer transformer;
  const char* prefix;
  std::vector<const char*> args;
};

std::vector<TransformerCase> TransformerCases() {
  return {{{"flux1-tiny", "FluxTransformer2DModel"},
           "flux1.step0.in.",
           {"hidden_states", "encoder_hidden_states", "pooled_projections", "timestep", "img_ids",
            "txt_ids", "guidance"}},
          {{"flux2-tiny", "Flux2Transformer2DModel"},
           "flux2.",
           {"hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids",
            "guidance"}},
          {{"qwenimage-tiny", "QwenImageTransformer2DModel"},
           "qwenimage.",
           {"hidden_states", "encoder_hidden_states", "encoder_hidden_states_mask", "timestep"}}};
}

std::map<std::string, torch::Tensor> CaseArguments(const TransformerCase& c) {
  std::map<std::string, torch::Tensor> args;
  for (const char* name : c.args) args[name] = testing::Ref(std::string(c.prefix) + name);
  return args;
}

// The first pass with a cache runs every block (the same output as without one, bit for bit); a
// second pass on the same inputs has the same head residual (diff 0), so it skips the remaining
// blocks and adds their cached residual back: the full output up to the rounding of (x − y) + y;
// a pass at another timestep above the threshold computes again.
TEST(StepCacheTransformer, CachedPassAddsTheRemainingBlocksResidualBack) {
  for (const TransformerCase& c : TransformerCases()) {
    SCOPED_TRACE(c.transformer.model);
    auto comm = comm::MakeSingleRankCommunicator();
    auto model = models::CreateTransformer(testing::TransformerConfig(c.transformer),
                                           testing::TransformerFullWeights(c.transformer),
                                           comm.get());
    ASSERT_TRUE(model.ok()) << model.status();
    const auto args = CaseArguments(c);
    auto full = (*model)->Forward(args);
    ASSERT_TRUE(full.ok()) << full.status();

    FirstBlockCache cache(1e-3);
    auto first = (*model)->Forward(args, &cache);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(torch::equal(*first, *full));
    auto second = (*model)->Forward(args, &cache);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(cache.full_passes(), 1u);
    EXPECT_EQ(cache.cached_passes(), 1u);
    EXPECT_LT(RelativeError(*second, *full), 1e-5);

    auto moved = args;
    moved["timestep"] = args.at("timestep") * 0.5;
    auto third = (*model)->Forward(moved, &cache);
    ASSERT_TRUE(third.ok()) << third.status();
    EXPECT_EQ(cache.full_passes(), 2u) << "a timestep half as large changes the head's residual";
    auto uncached = (*model)->Forward(moved);
    ASSERT_TRUE(uncached.ok()) << uncached.status();
    EXPECT_TRUE(torch::equal(*third, *uncached));
  }
}

// ---- The pipelines ----

struct PipelineCase {
  const char* folder;
  int64_t height, width, max_sequence_length;
  float guidance_scale;
  bool true_cfg;
};

const PipelineCase kFlux1{"flux1-tiny", 32, 32, 32, 3.5f, false};
const PipelineCase kFlux2{"flux2-tiny", 32, 48, 64, 4.0f, false};
const PipelineCase kQwenImage{"qwenimage-tiny", 64, 96, 64, 0.0f, true};
constexpr int64_t kSteps = 8;

GenerationJob Job(const PipelineCase& c, double threshold) {
  GenerationJob job;
  job.height = c.height;
  job.width = c.width;
  job.num_inference_steps = kSteps;
  job.max_sequence_length = c.max_sequence_length;
  job.output = pipeline::JobOutput::kLatents;
  job.cache_threshold = threshold;
  pipeline::JobItem item;
  item.prompt = "a cat holding a sign that says hello";
  item.prompt_2 = item.prompt;
  item.seed = 42;
  item.guidance_scale = c.guidance_scale;
  if (c.true_cfg) {
    item.negative_prompt = " ";
    item.true_cfg_scale = 4.0f;
  }
  job.items.push_back(item);
  return job;
}

absl::StatusOr<testing::PipelineGroupRun> RunJob(int world, const PipelineCase& c,
                                                 const GenerationJob& job,
                                                 std::vector<lora::LoraAdapterSpec> loras = {}) {
  pipeline::PipelineOptions opts;
  opts.model_dir = FixturesDir() + "/" + c.folder;
  opts.loras = std::move(loras);
  return testing::RunPipelineGroup(world, opts, job);
}

std::string Decisions(const GenerationResult& r) {
  std::string s;
  // F / f: the prompt's pass computed in full / cached; C / c: the negative prompt's.
  for (const auto& d : r.cache_decisions) {
    s += d.negative ? (d.computed ? 'C' : 'c') : (d.computed ? 'F' : 'f');
  }
  return s;
}

// Threshold 0 runs no cache; a threshold no pass gets under runs every block through the cached
// path: the same latents, bit for bit.
TEST(StepCachePipeline, ThresholdZeroIsTheJobWithoutACache) {
  auto plain = RunJob(1, kFlux1, Job(kFlux1, 0));
  ASSERT_TRUE(plain.ok()) << plain.status();
  const GenerationResult& p = plain->rank0();
  EXPECT_EQ(p.full_steps, kSteps);
  EXPECT_EQ(p.cached_steps, 0u);
  EXPECT_TRUE(p.cache_decisions.empty());
  auto computing = RunJob(1, kFlux1, Job(kFlux1, 1e-12));
  ASSERT_TRUE(computing.ok()) << computing.status();
  EXPECT_EQ(Decisions(computing->rank0()), std::string(kSteps, 'F'));
  EXPECT_TRUE(torch::equal(computing->rank0().latents.at(0), p.latents.at(0)));
}

// Every family at tp 1 and 2: the same decisions on every rank and degree, counts that add up to
// the passes, latents within float32 rounding of each other; a threshold that caches changes the
// result, and caching more never computes more.
TEST(StepCachePipeline, EveryDegreeMakesTheSameDecisions) {
  for (const PipelineCase* c : {&kFlux1, &kFlux2, &kQwenImage}) {
    SCOPED_TRACE(c->folder);
    const uint32_t passes = kSteps * (c->true_cfg ? 2 : 1);
    auto plain = RunJob(1, *c, Job(*c, 0));
    ASSERT_TRUE(plain.ok()) << plain.status();
    uint32_t last_full = passes + 1;
    for (const double threshold : {0.05, 0.35, 0.45, 0.6, 1.0}) {
      SCOPED_TRACE(threshold);
      auto one = RunJob(1, *c, Job(*c, threshold));
      ASSERT_TRUE(one.ok()) << one.status();
      auto two = RunJob(2, *c, Job(*c, threshold));
      ASSERT_TRUE(two.ok()) << two.status();
      const GenerationResult& r = one->rank0();
      std::printf("%s threshold %.2f: %s\n", c->folder, threshold, Decisions(r).c_str());
      EXPECT_EQ(r.full_steps + r.cached_steps, passes);
      ASSERT_EQ(r.cache_decisions.size(), passes);
      for (const auto& rank : two->results) EXPECT_EQ(Decisions(rank), Decisions(r));
      EXPECT_EQ(Decisions(one->results[0]), Decisions(r));
      EXPECT_LT(RelativeError(two->rank0().latents.at(0), r.latents.at(0)), 1e-5);
      EXPECT_TRUE(r.cache_decisions[0].computed);
      if (c->true_cfg) EXPECT_TRUE(r.cache_decisions[1].computed && r.cache_decisions[1].negative);
      EXPECT_LE(r.full_steps, last_full);
      last_full = r.full_steps;
      if (r.cached_steps > 0) {
        EXPECT_GT(RelativeError(r.latents.at(0), plain->rank0().latents.at(0)), 1e-6);
      } else {
        EXPECT_TRUE(torch::equal(r.latents.at(0), plain->rank0().latents.at(0)));
      }
      for (int steps : two->steps) EXPECT_EQ(steps, kSteps);
    }
    EXPECT_LT(last_full, passes) << "threshold 1.0 caches some pass of the tiny model";
  }
}

TEST(StepCachePipeline, WithALoraAtEveryDegree) {
  const std::vector<lora::LoraAdapterSpec> loras = {{"style", FixturesDir() + "/lora/style"}};
  GenerationJob job = Job(kFlux1, 0.3);
  job.loras = {{"style", 0.8f}};
  auto one = RunJob(1, kFlux1, job, loras);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = RunJob(2, kFlux1, job, loras);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(Decisions(two->rank0()), Decisions(one->rank0()));
  EXPECT_LT(RelativeError(two->rank0().latents.at(0), one->rank0().latents.at(0)), 1e-5);
  job.loras.clear();
  auto base = RunJob(1, kFlux1, job, loras);
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_GT(RelativeError(one->rank0().latents.at(0), base->rank0().latents.at(0)), 1e-4);
}

TEST(StepCachePipeline, RefusesThresholdsOutOfRangeOnEveryRank) {
  for (const double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    auto r = RunJob(2, kFlux1, Job(kFlux1, bad));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("cache_threshold"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace ditserve
