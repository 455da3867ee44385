// The whole FLUX.2 pipeline (prompt -> image) on the flux2-tiny fixture (diffusers' Flux2Pipeline
// with a tiny Mistral3 text encoder, tokenizers/chat template as FLUX.2-dev's, AutoencoderKLFlux2),
// each rank in its own thread of an in-process group, at tp 1, 2 and 4 with the text encoder on
// rank 0 or sharded over the ranks: token ids exactly, prompt embeddings, latents and the image
// against diffusers' own outputs (tests/fixtures/pipelines.json has the call).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "comm/local_communicator.h"
#include "pipeline/flux2_prompt_encoder.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixtures.h"

namespace ditserve::pipeline {
namespace {

namespace fs = std::filesystem;
using ditserve::testing::FixturesDir;
using ditserve::testing::Ref;
using ditserve::testing::RelativeError;

nlohmann::json Call() {
  std::ifstream in(FixturesDir() + "/pipelines.json");
  return nlohmann::json::parse(in)["flux2"];
}

GenerationJob FixtureJob(JobOutput output) {
  const nlohmann::json c = Call();
  GenerationJob job;
  job.height = c["height"].get<int64_t>();
  job.width = c["width"].get<int64_t>();
  job.num_inference_steps = c["num_inference_steps"].get<int64_t>();
  job.max_sequence_length = c["max_sequence_length"].get<int64_t>();
  job.output = output;
  JobItem item;
  item.prompt = c["prompt"].get<std::string>();
  item.seed = c["seed"].get<uint64_t>();
  item.guidance_scale = c["guidance_scale"].get<float>();
  job.items.push_back(item);
  return job;
}

struct Outcome {
  GenerationResult rank0;
  ModelCard card;
  std::vector<int> steps;
};

absl::StatusOr<Outcome> RunGroup(int world, TextEncoderPlacement placement, const GenerationJob& job,
                                 const std::string& model_dir = FixturesDir() + "/flux2-tiny") {
  std::mutex mu;
  Outcome out;
  out.steps.assign(world, 0);
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = model_dir;
    opts.text_encoder_placement = placement;
    auto p = LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    int steps = 0;
    auto r = (*p)->Run(job, [&](const StepEvent&) { ++steps; }, [] { return false; });
    std::lock_guard<std::mutex> lock(mu);
    out.steps[c.rank()] = steps;
    if (!r.ok()) return r.status();
    if (c.rank() == 0) {
      out.rank0 = *r;
      out.card = (*p)->Card();
    } else if (!r->images.empty() || !r->latents.empty()) {
      return absl::InternalError("only rank 0 returns images");
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

TEST(Flux2PromptEncoder, TokenIdsAndEmbeddingsMatchTransformers) {
  const nlohmann::json c = Call();
  const std::string root = FixturesDir() + "/flux2-tiny";
  auto comm = comm::MakeSingleRankCommunicator();
  PipelineOptions opts;
  auto encoder = Flux2PromptEncoder::Load(root + "/tokenizer", root + "/text_encoder", opts,
                                          comm.get(), /*sharded=*/false);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const int64_t seq = c["max_sequence_length"].get<int64_t>();
  auto tokens = (*encoder)->Tokenize({c["prompt"].get<std::string>()}, seq);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE(torch::equal(tokens->first, Ref("flux2.pipe.input_ids")));
  EXPECT_TRUE(torch::equal(tokens->second, Ref("flux2.pipe.attention_mask")));
  auto embeds = (*encoder)->Encode({c["prompt"].get<std::string>()}, seq);
  ASSERT_TRUE(embeds.ok()) << embeds.status();
  EXPECT_LT(RelativeError(*embeds, Ref("flux2.pipe.prompt_embeds")), 1e-4);
}

struct Case {
  int world;
  TextEncoderPlacement placement;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << "tp" << c.world << (c.placement == TextEncoderPlacement::kSharded ? "_sharded" : "_rank0");
}

class Flux2PipelineTest : public ::testing::TestWithParam<Case> {};

TEST_P(Flux2PipelineTest, ImageMatchesDiffusers) {
  auto r = RunGroup(GetParam().world, GetParam().placement, FixtureJob(JobOutput::kImage));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rank0.images.size(), 1u);
  EXPECT_EQ(r->steps, std::vector<int>(GetParam().world, 4));
  const double err = RelativeError(r->rank0.images[0], Ref("flux2.pipe.image"));
  EXPECT_LT(err, 1e-3);
  RecordProperty("relative_error", std::to_string(err));
}

TEST_P(Flux2PipelineTest, LatentsMatchTheLastStepAndEveryDegreeAgrees) {
  auto r = RunGroup(GetParam().world, GetParam().placement, FixtureJob(JobOutput::kLatents));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rank0.latents.size(), 1u);
  EXPECT_LT(RelativeError(r->rank0.latents[0], Ref("flux2.pipe.latents_after_step.3")), 1e-4);
  if (GetParam().world > 1) {
    auto one = RunGroup(1, TextEncoderPlacement::kRank0, FixtureJob(JobOutput::kLatents));
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_LT(RelativeError(r->rank0.latents[0], one->rank0.latents[0]), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Degrees, Flux2PipelineTest,
                         ::testing::Values(Case{1, TextEncoderPlacement::kRank0},
                                           Case{2, TextEncoderPlacement::kSharded},
                                           Case{2, TextEncoderPlacement::kRank0},
                                           Case{4, TextEncoderPlacement::kRank0}));

TEST(Flux2Pipeline, DescribesAPromptToImageModel) {
  auto r = RunGroup(1, TextEncoderPlacement::kAuto, FixtureJob(JobOutput::kLatents));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->card.family, "flux2");
  EXPECT_TRUE(r->card.accepts_text_prompt);
  EXPECT_FALSE(r->card.requires_prompt_embeddings);
  EXPECT_TRUE(r->card.images_out);
  EXPECT_EQ(r->card.default_steps, 50);
  EXPECT_FLOAT_EQ(r->card.default_guidance_scale, 4.0f);
}

TEST(Flux2Pipeline, ShardingTheEncoderOverMoreRanksThanKeyValueHeadsIsRefused) {
  // The tiny Mistral has 2 key/value heads: 4 ranks cannot each keep whole groups.
  auto r = RunGroup(4, TextEncoderPlacement::kSharded, FixtureJob(JobOutput::kLatents));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("key/value heads (2)"), std::string::npos) << r.status();
}

TEST(Flux2Pipeline, AnUnknownChatTemplateIsRefusedAtLoad) {
  const std::string src = FixturesDir() + "/flux2-tiny";
  const fs::path dir = fs::path(::testing::TempDir()) / "flux2-changed-template";
  (void)ditserve::RemoveTree(dir);
  fs::create_directories(dir / "tokenizer");
  for (const char* c : {"transformer", "vae", "text_encoder", "scheduler"}) {
    // Copied, not linked: links out of a model folder are refused (sharding/model_files.h).
    fs::copy(fs::path(src) / c, dir / c, fs::copy_options::recursive);
  }
  fs::copy_file(fs::path(src) / "model_index.json", dir / "model_index.json");
  for (const auto& f : fs::directory_iterator(fs::path(src) / "tokenizer")) {
    fs::copy_file(f.path(), dir / "tokenizer" / f.path().filename());
  }
  {
    std::ofstream t(dir / "tokenizer" / "chat_template.jinja", std::ios::app);
    t << "{{- ' ' }}";
  }
  auto r = RunGroup(1, TextEncoderPlacement::kAuto, FixtureJob(JobOutput::kLatents), dir.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("chat template"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("tokenizer"), std::string::npos) << r.status();
}

TEST(Flux2Pipeline, PrecomputedEmbeddingsGiveTheSameLatents) {
  GenerationJob job = FixtureJob(JobOutput::kLatents);
  PromptEmbeddings e;
  e.prompt_embeds = Ref("flux2.pipe.prompt_embeds");
  job.items[0].embeddings = e;
  auto r = RunGroup(2, TextEncoderPlacement::kAuto, job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(RelativeError(r->rank0.latents[0], Ref("flux2.pipe.latents_after_step.3")), 1e-4);
}

}  // namespace
}  // namespace ditserve::pipeline
