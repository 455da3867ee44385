// The precomputed-embeddings pipeline (FLUX.2, Qwen-Image: the transformer, the scheduler, seeded
// noise, latents out) on the tiny fixtures at tp = 1, 2 and 4 with in-process ranks. The
// transformers themselves are checked against diffusers in flux2/qwenimage_transformer_test; here:
// what the model describes, that every degree gives the same latents, that the inputs matter
// (seed, steps, text mask) and that bad requests fail cleanly on every rank.
#include <gtest/gtest.h>

#include <mutex>

#include "pipeline/pipeline.h"
#include "tests/support/fixtures.h"
#include "comm/local_communicator.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::FixturesDir;
using ditserve::testing::Ref;
using ditserve::testing::RelativeError;

struct Family {
  std::string name;       // fixture prefix
  std::string dir;        // transformer folder
  bool has_mask = false;  // Qwen-Image: the fixture masks the last two text tokens
};
void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

const Family kFlux2{"flux2", "flux2-tiny/transformer", false};
const Family kQwen{"qwenimage", "qwenimage-tiny/transformer", true};

GenerationJob Request(const Family& f, uint64_t seed = 7, int64_t steps = 3, bool with_mask = true) {
  GenerationJob job;
  job.height = 128;
  job.width = 128;
  job.num_inference_steps = steps;
  job.max_sequence_length = 512;
  job.output = JobOutput::kLatents;
  JobItem item;
  item.seed = seed;
  item.guidance_scale = 4.0f;
  item.true_cfg_scale = 1.0f;
  PromptEmbeddings pe;
  pe.prompt_embeds = Ref(f.name + ".encoder_hidden_states");
  if (f.has_mask && with_mask) pe.text_mask = Ref(f.name + ".encoder_hidden_states_mask");
  item.embeddings = pe;
  job.items.push_back(item);
  return job;
}

struct GroupResult {
  ModelCard card;
  torch::Tensor latents;  // rank 0's
  int steps_seen = 0;
};

absl::StatusOr<GroupResult> RunGroup(const Family& f, int world, const GenerationJob& job) {
  std::mutex mu;
  GroupResult out;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/" + f.dir;
    auto p = LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    int steps = 0;
    auto r = (*p)->Run(job, [&](const StepEvent&) { ++steps; }, [] { return false; });
    if (!r.ok()) return r.status();
    if (c.rank() != 0) {
      return r->latents.empty() ? absl::OkStatus()
                                : absl::InternalError("only rank 0 may return latents");
    }
    if (r->latents.size() != 1) return absl::InternalError("rank 0 returned no latents");
    std::lock_guard<std::mutex> lock(mu);
    out.card = (*p)->Card();
    out.latents = r->latents[0];
    out.steps_seen = steps;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

class EmbeddingsPipelineTest : public ::testing::TestWithParam<Family> {};

TEST_P(EmbeddingsPipelineTest, DescribesAnEmbeddingsOnlyModel) {
  auto r = RunGroup(GetParam(), 1, Request(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  const ModelCard& d = r->card;
  EXPECT_EQ(d.family, GetParam().name);
  EXPECT_FALSE(d.accepts_text_prompt);
  EXPECT_TRUE(d.requires_prompt_embeddings);
  EXPECT_EQ(d.accepts_text_mask, GetParam().has_mask);
  EXPECT_FALSE(d.images_out);
  ASSERT_EQ(d.prompt_embeds_shape.size(), 3u);
  EXPECT_EQ(d.prompt_embeds_shape[2], Ref(GetParam().name + ".encoder_hidden_states").size(2));
  EXPECT_EQ(r->steps_seen, 3);
}

TEST_P(EmbeddingsPipelineTest, EveryTpDegreeGivesTheSameLatents) {
  auto one = RunGroup(GetParam(), 1, Request(GetParam()));
  ASSERT_TRUE(one.ok()) << one.status();
  const torch::Tensor& l1 = one->latents;
  // 128x128 → a 16x16 latent → 64 tokens of 4·C channels (packed 2x2 patches).
  ASSERT_EQ(l1.dim(), 3);
  EXPECT_EQ(l1.size(0), 1);
  EXPECT_EQ(l1.size(1), 64);
  EXPECT_TRUE(torch::isfinite(l1).all().item<bool>());
  for (int world : {2, 4}) {
    auto tp = RunGroup(GetParam(), world, Request(GetParam()));
    ASSERT_TRUE(tp.ok()) << tp.status();
    EXPECT_LT(RelativeError(tp->latents, l1), 1e-5) << "tp=" << world;
  }
}

TEST_P(EmbeddingsPipelineTest, SeedStepsAndMaskChangeTheResult) {
  auto base = RunGroup(GetParam(), 1, Request(GetParam()));
  auto again = RunGroup(GetParam(), 1, Request(GetParam()));
  auto seed = RunGroup(GetParam(), 1, Request(GetParam(), /*seed=*/8));
  auto steps = RunGroup(GetParam(), 1, Request(GetParam(), 7, /*steps=*/2));
  ASSERT_TRUE(base.ok() && again.ok() && seed.ok() && steps.ok());
  EXPECT_TRUE(torch::equal(base->latents, again->latents));
  EXPECT_GT(RelativeError(seed->latents, base->latents), 0.1);
  EXPECT_GT(RelativeError(steps->latents, base->latents), 1e-3);
  if (GetParam().has_mask) {
    auto unmasked = RunGroup(GetParam(), 1, Request(GetParam(), 7, 3, /*with_mask=*/false));
    ASSERT_TRUE(unmasked.ok());
    EXPECT_GT(RelativeError(unmasked->latents, base->latents), 1e-4);
  }
}

TEST_P(EmbeddingsPipelineTest, RejectsImageOutputOnEveryRank) {
  auto request = Request(GetParam());
  request.output = JobOutput::kImage;
  auto r = RunGroup(GetParam(), 2, request);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("LATENTS"), std::string::npos) << r.status();
}

INSTANTIATE_TEST_SUITE_P(Families, EmbeddingsPipelineTest, ::testing::Values(kFlux2, kQwen),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ditserve::pipeline
