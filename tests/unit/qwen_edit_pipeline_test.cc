// Qwen-Image-Edit (issue 34) in the Qwen-Image pipeline, on a tiny QwenImageEditPlusPipeline
// folder made by tests/support/qwen_edit_tiny_folder.h (qwenimage-tiny's transformer and Qwen2.5-VL
// text encoder with its vision tower, a processor/, a factor-16 VAE with its encoder): the card,
// one and two input images at tp 1 and tp 2 with the text encoder on rank 0 and sharded (every
// degree and placement gives the same latents), the condition images reaching the prompt through
// the vision tower, embeddings from the request, and the refusals on every rank alike. Parity with
// diffusers' QwenImageEditPlusPipeline is qwen_edit_parity_test's (tests/fixtures/qwen-edit, made
// by tests/fixtures/make_qwen_edit_fixtures.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "comm/local_communicator.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "imaging/qwen_edit_sizes.h"
#include "pipeline/pipeline.h"
#include "pipeline/warmup_job.h"
#include "sharding/safetensors_writer.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/qwen_edit_tiny_folder.h"
#include "tests/support/smooth_images.h"

namespace ditserve::pipeline {
namespace {

namespace fs = std::filesystem;
using ditserve::testing::FixturesDir;
using ditserve::testing::RelativeError;

const std::string& EditFolder() {
  static const std::string dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("ditserve-qwen-edit-" + std::to_string(::getpid()));
    absl::StatusOr<std::string> written = testing::WriteQwenEditTinyFolder(d.string(), 11);
    EXPECT_TRUE(written.ok()) << written.status();
    return d.string();
  }();
  return dir;
}

torch::Tensor RandomImage(int64_t height, int64_t width, uint64_t seed) {
  return testing::SmoothRandomImage(height, width, seed);
}

// An input image of width x height as the frontend prepares it for the model (both resizes).
void AddInput(JobItem* item, int width, int height, uint64_t seed) {
  const imaging::QwenEditImageSizes sizes = *imaging::QwenEditImageSizesFor(width, height, 32);
  item->images.push_back(RandomImage(sizes.vae.height, sizes.vae.width, seed));
  item->condition_images.push_back(
      RandomImage(sizes.condition.height, sizes.condition.width, seed + 100));
}

GenerationJob EditJob(int64_t height, int64_t width) {
  GenerationJob job;
  job.height = height;
  job.width = width;
  job.num_inference_steps = 3;
  job.max_sequence_length = 512;
  job.output = JobOutput::kLatents;
  JobItem item;
  item.prompt = "make the cat wear a red hat";
  item.negative_prompt = " ";
  item.true_cfg_scale = 4.0f;
  item.seed = 7;
  AddInput(&item, 45, 61, 1);
  job.items.push_back(item);
  return job;
}

absl::StatusOr<testing::PipelineGroupRun> RunEdit(
    int world, const GenerationJob& job,
    TextEncoderPlacement placement = TextEncoderPlacement::kAuto) {
  PipelineOptions opts;
  opts.model_dir = EditFolder();
  opts.text_encoder_placement = placement;
  return testing::RunPipelineGroup(world, opts, job);
}

torch::Tensor Latents(const absl::StatusOr<testing::PipelineGroupRun>& run) {
  return run->rank0().latents.at(0);
}

TEST(QwenEditPipeline, CardTakesOneToThreeImages) {
  auto run = RunEdit(1, EditJob(64, 96));
  ASSERT_TRUE(run.ok()) << run.status();
  const ImageInputCard& in = run->card.image_inputs;
  EXPECT_EQ(run->card.family, "qwenimage");
  EXPECT_EQ(in.use, ImageUse::kQwenEdit);
  EXPECT_EQ(in.min_images, 1);
  EXPECT_EQ(in.max_images, 3);
  EXPECT_EQ(in.size_multiple, 32);  // the tiny VAE's factor 16, packed 2x2
  EXPECT_EQ(in.max_aspect_ratio, 100);
  EXPECT_TRUE(run->card.accepts_text_prompt);
  // The output's latent grid: 64 x 96 pixels / 16 = 4 x 6, packed to 2 x 3 tokens of 16 channels.
  EXPECT_EQ(Latents(run).sizes(), (std::vector<int64_t>{1, 6, 16}));
  for (int s : run->steps) EXPECT_EQ(s, 3);
}

TEST(QwenEditPipeline, EveryDegreeAndPlacementAgrees) {
  for (int images : {1, 2}) {
    GenerationJob job = EditJob(64, 96);
    if (images == 2) AddInput(&job.items[0], 80, 36, 2);
    auto one = RunEdit(1, job);
    ASSERT_TRUE(one.ok()) << one.status();
    for (TextEncoderPlacement p : {TextEncoderPlacement::kRank0, TextEncoderPlacement::kSharded}) {
      auto two = RunEdit(2, job, p);
      ASSERT_TRUE(two.ok()) << two.status();
      EXPECT_LT(RelativeError(Latents(two), Latents(one)), 1e-5) << images << " image(s)";
    }
  }
}

TEST(QwenEditPipeline, ConditionAndVaeImagesBothMatter) {
  const GenerationJob base = EditJob(64, 96);
  auto reference = RunEdit(1, base);
  ASSERT_TRUE(reference.ok()) << reference.status();

  GenerationJob other_condition = base;  // only the vision tower's input differs
  other_condition.items[0].condition_images[0] = RandomImage(
      base.items[0].condition_images[0].size(0), base.items[0].condition_images[0].size(1), 55);
  auto a = RunEdit(1, other_condition);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(RelativeError(Latents(a), Latents(reference)), 1e-4);

  GenerationJob other_vae = base;  // only the reference tokens differ
  other_vae.items[0].images[0] =
      RandomImage(base.items[0].images[0].size(0), base.items[0].images[0].size(1), 56);
  auto b = RunEdit(1, other_vae);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(RelativeError(Latents(b), Latents(reference)), 1e-4);
}

TEST(QwenEditPipeline, ItemsOfOneRequestShareItsEncoding) {
  GenerationJob job = EditJob(64, 96);
  job.items.push_back(job.items[0]);
  job.items[1].seed = 8;
  auto both = RunEdit(1, job);
  ASSERT_TRUE(both.ok()) << both.status();
  GenerationJob second = EditJob(64, 96);
  second.items[0].seed = 8;
  auto alone = RunEdit(1, second);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_LT(RelativeError(both->rank0().latents.at(1), Latents(alone)), 1e-5);
}

TEST(QwenEditPipeline, EmbeddingsFromTheRequest) {
  GenerationJob job = EditJob(64, 96);
  JobItem& item = job.items[0];
  item.true_cfg_scale = 1.0f;
  item.negative_prompt.clear();
  PromptEmbeddings e;
  torch::manual_seed(3);
  e.prompt_embeds = torch::randn({1, 9, 32});
  item.embeddings = e;
  item.condition_images.clear();  // nothing to encode
  auto one = RunEdit(1, job);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = RunEdit(2, job);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(Latents(two), Latents(one)), 1e-5);
}

// Two jobs on one loaded pipeline: the second job's prompt comes as embeddings and only its
// negative prompt is encoded, with another image: it must not reuse the first job's image
// embeddings (the vision tower's output is reused only within a job).
TEST(QwenEditPipeline, ImageEmbeddingsDoNotOutliveTheirJob) {
  const GenerationJob first = EditJob(64, 96);
  GenerationJob second = EditJob(64, 96);
  PromptEmbeddings e;
  torch::manual_seed(4);
  e.prompt_embeds = torch::randn({1, 9, 32});
  second.items[0].embeddings = e;
  second.items[0].condition_images[0] = RandomImage(first.items[0].condition_images[0].size(0),
                                                    first.items[0].condition_images[0].size(1), 77);
  auto alone = RunEdit(1, second);
  ASSERT_TRUE(alone.ok()) << alone.status();
  torch::Tensor after_first;
  PipelineOptions opts;
  opts.model_dir = EditFolder();
  absl::Status s = comm::RunLocalGroup(1, [&](comm::Communicator& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> p, LoadPipeline(opts, &c));
    auto no_steps = [](const StepEvent&) {};
    auto never = [] { return false; };
    ASSIGN_OR_RETURN(GenerationResult a, p->Run(first, no_steps, never));
    ASSIGN_OR_RETURN(GenerationResult b, p->Run(second, no_steps, never));
    after_first = b.latents.at(0);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LT(RelativeError(after_first, Latents(alone)), 1e-6);
}

TEST(QwenEditPipeline, RefusalsOnEveryRank) {
  struct Case {
    const char* name;
    std::function<void(GenerationJob*)> spoil;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"no image",
       [](GenerationJob* j) {
         j->items[0].images.clear();
         j->items[0].condition_images.clear();
       },
       "needs at least 1 input image"},
      {"four images",
       [](GenerationJob* j) {
         for (int i = 0; i < 3; ++i) AddInput(&j->items[0], 40, 40, 10 + i);
       },
       "at most 3 input images"},
      {"condition image missing", [](GenerationJob* j) { j->items[0].condition_images.pop_back(); },
       "condition_images"},
      {"two prompts",
       [](GenerationJob* j) {
         j->items.push_back(j->items[0]);
         j->items[1].prompt = "another prompt";
       },
       "one prompt a job"},
      {"prompt with an image pad",
       [](GenerationJob* j) { j->items[0].prompt = "a <|image_pad|> here"; }, "prompt"},
  };
  for (const Case& c : cases) {
    GenerationJob job = EditJob(64, 96);
    c.spoil(&job);
    for (int world : {1, 2}) {
      auto run = RunEdit(world, job, TextEncoderPlacement::kSharded);
      ASSERT_FALSE(run.ok()) << c.name;
      EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_NE(run.status().message().find(c.message), std::string::npos)
          << c.name << ": " << run.status();
    }
  }
}

TEST(QwenEditPipeline, WarmupJobRuns) {
  auto loaded = RunEdit(1, EditJob(64, 96));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  GenerationJob warmup = WarmupJob(loaded->card, 64, 96);
  ASSERT_EQ(warmup.items.size(), 1u);
  ASSERT_EQ(warmup.items[0].images.size(), 1u);
  ASSERT_EQ(warmup.items[0].condition_images.size(), 1u);
  warmup.output = JobOutput::kLatents;
  auto run = RunEdit(1, warmup);
  EXPECT_TRUE(run.ok()) << run.status();
}

// QwenImageEditPipeline (Qwen-Image-Edit): one image, its ~1024² resize feeding both encoders.
TEST(QwenEditPipeline, QwenImageEditFolderTakesOneImage) {
  const fs::path d =
      fs::temp_directory_path() / ("ditserve-qwen-edit-v1-" + std::to_string(::getpid()));
  ASSERT_TRUE(testing::WriteQwenEditTinyFolder(d.string(), 11, "QwenImageEditPipeline").ok());
  PipelineOptions opts;
  opts.model_dir = d.string();
  GenerationJob job = EditJob(64, 96);
  // The frontend's condition image for this model: the VAE image's size (condition_area 1024²).
  const imaging::QwenEditImageSizes sizes =
      *imaging::QwenEditImageSizesFor(45, 61, 32, imaging::kQwenEditVaeArea);
  ASSERT_EQ(sizes.condition.width, sizes.vae.width);
  job.items[0].condition_images[0] = RandomImage(sizes.condition.height, sizes.condition.width, 9);
  auto one = testing::RunPipelineGroup(1, opts, job);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->card.image_inputs.use, ImageUse::kQwenEdit);
  EXPECT_EQ(one->card.image_inputs.max_images, 1);
  EXPECT_EQ(one->card.image_inputs.condition_area, imaging::kQwenEditVaeArea);
  opts.text_encoder_placement = TextEncoderPlacement::kSharded;
  auto two = testing::RunPipelineGroup(2, opts, job);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(Latents(two), Latents(one)), 1e-5);
  // The Plus folder labels the picture ("Picture 1: "): another prompt, another image.
  auto plus = RunEdit(1, job);
  ASSERT_TRUE(plus.ok()) << plus.status();
  EXPECT_EQ(plus->card.image_inputs.condition_area, imaging::kQwenEditConditionArea);
  EXPECT_GT(RelativeError(Latents(plus), Latents(one)), 1e-4);
  AddInput(&job.items[0], 40, 40, 3);
  auto refused = testing::RunPipelineGroup(1, opts, job);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("at most 1 input images"), std::string::npos)
      << refused.status();
}

// A random diffusers-format LoRA on every attention projection of the tiny transformer's blocks.
std::string WriteAttentionLora(const std::string& path) {
  auto base =
      sharding::ReadAllTensors(EditFolder() + "/transformer/diffusion_pytorch_model.safetensors");
  EXPECT_TRUE(base.ok()) << base.status();
  torch::manual_seed(5);
  std::vector<torch::Tensor> keep;
  std::vector<sharding::TensorToWrite> out;
  const int64_t rank = 2;
  for (const auto& [name, w] : *base) {
    const std::string suffix = ".weight";
    if (name.find(".attn.") == std::string::npos || w.dim() != 2 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string module = name.substr(0, name.size() - suffix.size());
    keep.push_back((torch::randn({rank, w.size(1)}) * 0.3).contiguous());
    out.push_back({"transformer." + module + ".lora_A.weight", sharding::DType::kF32,
                   keep.back().sizes().vec(), keep.back().data_ptr()});
    keep.push_back((torch::randn({w.size(0), rank}) * 0.3).contiguous());
    out.push_back({"transformer." + module + ".lora_B.weight", sharding::DType::kF32,
                   keep.back().sizes().vec(), keep.back().data_ptr()});
  }
  EXPECT_GT(out.size(), 8u);
  EXPECT_TRUE(sharding::WriteSafetensors(path, out, {{"format", "pt"}}).ok());
  return path;
}

TEST(QwenEditPipeline, WithALoraAtEveryDegree) {
  const std::string lora =
      WriteAttentionLora((fs::temp_directory_path() / ("ditserve-qwen-edit-lora-" +
                                                       std::to_string(::getpid()) + ".safetensors"))
                             .string());
  PipelineOptions opts;
  opts.model_dir = EditFolder();
  opts.loras = {{"style", lora}};
  GenerationJob job = EditJob(64, 96);
  auto base = testing::RunPipelineGroup(1, opts, job);
  ASSERT_TRUE(base.ok()) << base.status();
  job.loras = {{"style", 0.8f}};
  auto one = testing::RunPipelineGroup(1, opts, job);
  ASSERT_TRUE(one.ok()) << one.status();
  opts.text_encoder_placement = TextEncoderPlacement::kSharded;
  auto two = testing::RunPipelineGroup(2, opts, job);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(Latents(two), Latents(one)), 1e-5);
  EXPECT_GT(RelativeError(Latents(one), Latents(base)), 1e-4);  // the adapter applies
  EXPECT_EQ(one->card.loras.size(), 1u);
}

TEST(QwenEditPipeline, AVaeOfOtherLatentChannelsIsRefusedAtLoad) {
  const fs::path d =
      fs::temp_directory_path() / ("ditserve-qwen-edit-zdim-" + std::to_string(::getpid()));
  ASSERT_TRUE(testing::WriteQwenEditTinyFolder(d.string(), 11).ok());
  nlohmann::json config;
  std::ifstream(d / "vae" / "config.json") >> config;
  config["z_dim"] = 8;  // 32 channels a packed token; the transformer takes 16
  config["latents_mean"] = std::vector<double>(8, 0.0);
  config["latents_std"] = std::vector<double>(8, 1.0);
  std::ofstream(d / "vae" / "config.json") << config.dump(2);
  PipelineOptions opts;
  opts.model_dir = d.string();
  auto run = testing::RunPipelineGroup(1, opts, EditJob(64, 96));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kFailedPrecondition) << run.status();
  EXPECT_NE(run.status().message().find("z_dim x 4"), std::string::npos) << run.status();
  EXPECT_NE(run.status().message().find("in_channels (16)"), std::string::npos) << run.status();
}

TEST(QwenEditPipeline, EditFolderWithoutProcessorIsRefusedAtLoad) {
  const fs::path d =
      fs::temp_directory_path() / ("ditserve-qwen-edit-noproc-" + std::to_string(::getpid()));
  ASSERT_TRUE(testing::WriteQwenEditTinyFolder(d.string(), 11).ok());
  fs::remove(d / "processor" / "preprocessor_config.json");
  PipelineOptions opts;
  opts.model_dir = d.string();
  auto run = testing::RunPipelineGroup(1, opts, EditJob(64, 96));
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("preprocessor_config.json"), std::string::npos)
      << run.status();
}

}  // namespace
}  // namespace ditserve::pipeline
