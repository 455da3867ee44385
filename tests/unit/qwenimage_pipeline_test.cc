// The whole Qwen-Image pipeline (prompt -> image, true CFG with a negative prompt) on the
// qwenimage-tiny fixture (diffusers' QwenImagePipeline with a tiny Qwen2.5-VL text encoder and
// AutoencoderKLQwenImage), in-process ranks at tp 1, 2 and 4 with the text encoder on rank 0 or
// sharded: token ids exactly, prompt embeddings, latents and the image against diffusers' outputs
// (tests/fixtures/pipelines.json "qwenimage" and "qwenimage_nocfg").
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "comm/local_communicator.h"
#include "pipeline/pipeline.h"
#include "pipeline/qwenimage_prompt_encoder.h"
#include "tests/support/fixtures.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::FixturesDir;
using ditserve::testing::Ref;
using ditserve::testing::RelativeError;

nlohmann::json Call(const char* which = "qwenimage") {
  std::ifstream in(FixturesDir() + "/pipelines.json");
  return nlohmann::json::parse(in)[which];
}

GenerationJob FixtureJob(JobOutput output, bool cfg) {
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
  if (cfg) {
    item.negative_prompt = c["negative_prompt"].get<std::string>();
    item.true_cfg_scale = c["true_cfg_scale"].get<float>();
  }
  job.items.push_back(item);
  return job;
}

absl::StatusOr<GenerationResult> RunGroup(int world, TextEncoderPlacement placement,
                                          const GenerationJob& job) {
  std::mutex mu;
  GenerationResult rank0;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/qwenimage-tiny";
    opts.text_encoder_placement = placement;
    auto p = LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    if (!(*p)->Card().accepts_text_prompt || !(*p)->Card().images_out) {
      return absl::InternalError("the pipeline folder should give a prompt -> image model");
    }
    auto r = (*p)->Run(job, [](const StepEvent&) {}, [] { return false; });
    if (!r.ok()) return r.status();
    if (c.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      rank0 = *r;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return rank0;
}

TEST(QwenImagePromptEncoder, TokenIdsAndEmbeddingsMatchTransformers) {
  const std::string root = FixturesDir() + "/qwenimage-tiny";
  auto comm = comm::MakeSingleRankCommunicator();
  auto encoder = QwenImagePromptEncoder::Load(root + "/tokenizer", root + "/text_encoder",
                                              PipelineOptions{}, comm.get(), /*sharded=*/false);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const nlohmann::json c = Call();
  auto tokens = (*encoder)->Tokenize({c["prompt"].get<std::string>()});
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE(torch::equal(tokens->first, Ref("qwenimage.pipe.input_ids")));
  EXPECT_TRUE(torch::equal(tokens->second, Ref("qwenimage.pipe.attention_mask")));
  auto neg = (*encoder)->Tokenize({c["negative_prompt"].get<std::string>()});
  ASSERT_TRUE(neg.ok()) << neg.status();
  EXPECT_TRUE(torch::equal(neg->first, Ref("qwenimage.pipe.negative_input_ids")));
  auto embeds = (*encoder)->Encode({c["prompt"].get<std::string>()}, c["max_sequence_length"].get<int64_t>());
  ASSERT_TRUE(embeds.ok()) << embeds.status();
  EXPECT_LT(RelativeError(embeds->first, Ref("qwenimage.pipe.prompt_embeds")), 1e-4);
  EXPECT_TRUE(torch::equal(embeds->second.cpu(), Ref("qwenimage.pipe.prompt_embeds_mask")));
}

struct Case {
  int world;
  TextEncoderPlacement placement;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << "tp" << c.world << (c.placement == TextEncoderPlacement::kSharded ? "_sharded" : "_rank0");
}

class QwenImagePipelineTest : public ::testing::TestWithParam<Case> {};

TEST_P(QwenImagePipelineTest, TrueCfgImageMatchesDiffusers) {
  auto r = RunGroup(GetParam().world, GetParam().placement, FixtureJob(JobOutput::kImage, true));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->images.size(), 1u);
  EXPECT_LT(RelativeError(r->images[0], Ref("qwenimage.pipe.image")), 1e-3);
}

TEST_P(QwenImagePipelineTest, LatentsMatchWithAndWithoutCfgAndEveryDegreeAgrees) {
  auto cfg = RunGroup(GetParam().world, GetParam().placement, FixtureJob(JobOutput::kLatents, true));
  auto plain = RunGroup(GetParam().world, GetParam().placement, FixtureJob(JobOutput::kLatents, false));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_LT(RelativeError(cfg->latents[0], Ref("qwenimage.pipe.latents_after_step.2")), 1e-4);
  EXPECT_LT(RelativeError(plain->latents[0], Ref("qwenimage.pipe_nocfg.latents_after_step.2")), 1e-4);
  if (GetParam().world > 1) {
    auto one = RunGroup(1, TextEncoderPlacement::kRank0, FixtureJob(JobOutput::kLatents, true));
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_LT(RelativeError(cfg->latents[0], one->latents[0]), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Degrees, QwenImagePipelineTest,
                         ::testing::Values(Case{1, TextEncoderPlacement::kRank0},
                                           Case{2, TextEncoderPlacement::kSharded},
                                           Case{2, TextEncoderPlacement::kRank0},
                                           Case{4, TextEncoderPlacement::kRank0}));

TEST(QwenImagePipeline, WithoutCfgTheImageMatchesDiffusers) {
  auto r = RunGroup(2, TextEncoderPlacement::kAuto, FixtureJob(JobOutput::kImage, false));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(RelativeError(r->images[0], Ref("qwenimage.pipe_nocfg.image")), 1e-3);
}

}  // namespace
}  // namespace ditserve::pipeline
