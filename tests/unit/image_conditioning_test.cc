// Image conditioning in the pipelines (issue 30), on the tiny fixtures whose VAEs diffusers saved
// with their encoders (flux1-tiny, flux2-tiny; a FluxKontextPipeline folder assembled from
// flux1-tiny): FLUX.2 reference images, FLUX.1 image-to-image and Kontext run at tp 1 and 2 (each
// rank a thread of an in-process group) and every degree gives the same latents; the cards say
// what each takes; the refusals happen on every rank alike; image-to-image's noise comes after
// the posterior's draw and its loop starts where the strength says. Parity with diffusers' own
// outputs is image_inputs_parity_test's (tests/fixtures/image-inputs).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "comm/local_communicator.h"
#include "common/remove_tree.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "pipeline/image_inputs.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"
#include "tests/support/fixtures.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/smooth_images.h"

namespace ditserve::pipeline {
namespace {

namespace fs = std::filesystem;
using ditserve::testing::FixturesDir;
using ditserve::testing::RelativeError;

torch::Tensor RandomImage(int64_t height, int64_t width, uint64_t seed) {
  return testing::SmoothRandomImage(height, width, seed);
}

GenerationJob Job(int64_t height, int64_t width, int64_t steps, int64_t max_sequence_length) {
  GenerationJob job;
  job.height = height;
  job.width = width;
  job.num_inference_steps = steps;
  job.max_sequence_length = max_sequence_length;
  job.output = JobOutput::kLatents;
  JobItem item;
  item.prompt = "a cat holding a sign that says hello";
  item.prompt_2 = item.prompt;
  item.seed = 42;
  item.guidance_scale = 3.5f;
  job.items.push_back(item);
  return job;
}

struct Outcome {
  torch::Tensor latents;  // rank 0's
  ModelCard card;
  std::vector<int> steps;  // progress events per rank
};

absl::StatusOr<Outcome> RunGroup(int world, const std::string& model_dir, const GenerationJob& job,
                                 const std::vector<lora::LoraAdapterSpec>& loras = {}) {
  PipelineOptions opts;
  opts.model_dir = model_dir;
  opts.loras = loras;
  ASSIGN_OR_RETURN(testing::PipelineGroupRun run, testing::RunPipelineGroup(world, opts, job));
  return Outcome{run.rank0().latents.at(0), run.card, run.steps};
}

// flux1-tiny as a FluxKontextPipeline folder (a copy; only model_index.json differs).
std::string KontextFolder() {
  static const std::string dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("ditserve-kontext-" + std::to_string(::getpid()));
    (void)ditserve::RemoveTree(d);
    fs::copy(FixturesDir() + "/flux1-tiny", d, fs::copy_options::recursive);
    nlohmann::json index;
    std::ifstream(d / "model_index.json") >> index;
    index["_class_name"] = "FluxKontextPipeline";
    std::ofstream(d / "model_index.json") << index.dump(2);
    return d.string();
  }();
  return dir;
}

void ExpectEveryDegreeAgrees(const std::string& dir, const GenerationJob& job, int expected_steps) {
  auto one = RunGroup(1, dir, job);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = RunGroup(2, dir, job);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(two->latents, one->latents), 1e-5);
  for (int s : one->steps) EXPECT_EQ(s, expected_steps);
  for (int s : two->steps) EXPECT_EQ(s, expected_steps);
}

TEST(ImageConditioning, Flux2ReferencesAtEveryDegree) {
  const std::string dir = FixturesDir() + "/flux2-tiny";
  GenerationJob job = Job(32, 48, 3, 64);
  job.items[0].guidance_scale = 4.0f;
  auto plain = RunGroup(1, dir, job);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const ImageInputCard& in = plain->card.image_inputs;
  EXPECT_EQ(in.use, ImageUse::kReference);
  EXPECT_EQ(in.max_images, 10);
  EXPECT_EQ(in.size_multiple, 4);  // the tiny VAE's scale factor is 2
  EXPECT_EQ(in.min_side, 64);
  EXPECT_EQ(in.max_aspect_ratio, 8);
  EXPECT_EQ(in.max_area, 1024 * 1024);

  job.items[0].images = {RandomImage(64, 96, 1), RandomImage(80, 64, 2)};
  ExpectEveryDegreeAgrees(dir, job, 3);
  auto with = RunGroup(1, dir, job);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->latents.sizes(), plain->latents.sizes());  // the references' tokens are dropped
  EXPECT_GT(RelativeError(with->latents, plain->latents), 1e-3);  // and they matter
  // Reference order matters (ids 10 and 20 differ).
  std::swap(job.items[0].images[0], job.items[0].images[1]);
  auto swapped = RunGroup(1, dir, job);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_GT(RelativeError(swapped->latents, with->latents), 1e-4);
}

// Image to image with `job` (one image, strength 0.6 over 5 steps: t_start = int(5 - 3.0) = 2, 3
// steps run): every degree agrees; the card takes one image at diffusers' default strength 0.6;
// `other_image` with the same seed gives another result; strength 1 runs every step. The card.
ModelCard ExpectImageToImageFromTheStrengthsStep(const std::string& dir, GenerationJob job,
                                                 const torch::Tensor& other_image) {
  job.items[0].strength = 0.6;
  ExpectEveryDegreeAgrees(dir, job, 3);
  auto r = RunGroup(1, dir, job);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ(r->card.image_inputs.use, ImageUse::kImageToImage);
  EXPECT_EQ(r->card.image_inputs.max_images, 1);
  EXPECT_DOUBLE_EQ(r->card.image_inputs.default_strength, 0.6);
  job.items[0].images = {other_image};
  auto other = RunGroup(1, dir, job);
  EXPECT_TRUE(other.ok()) << other.status();
  if (other.ok()) EXPECT_GT(RelativeError(other->latents, r->latents), 1e-3);
  job.items[0].strength = 1.0;
  auto full = RunGroup(1, dir, job);
  EXPECT_TRUE(full.ok()) << full.status();
  if (full.ok()) EXPECT_EQ(full->steps[0], 5);
  return r->card;
}

TEST(ImageConditioning, Flux1ImageToImageRunsFromTheStrengthsStep) {
  GenerationJob job = Job(32, 32, 5, 32);
  job.items[0].images = {RandomImage(32, 32, 3)};
  ExpectImageToImageFromTheStrengthsStep(FixturesDir() + "/flux1-tiny", job,
                                         RandomImage(32, 32, 4));
}

// QwenImageImg2ImgPipeline on the plain qwenimage-tiny folder (its VAE has its encoder), with
// true CFG.
TEST(ImageConditioning, QwenImageImageToImageRunsFromTheStrengthsStep) {
  GenerationJob job = Job(32, 48, 5, 64);
  job.items[0].negative_prompt = " ";
  job.items[0].true_cfg_scale = 4.0f;
  job.items[0].images = {RandomImage(32, 48, 7)};
  const ModelCard card = ExpectImageToImageFromTheStrengthsStep(FixturesDir() + "/qwenimage-tiny",
                                                                job, RandomImage(32, 48, 8));
  EXPECT_EQ(card.image_inputs.size_multiple, 8);  // the tiny VAE's factor 4, packed 2x2
}

TEST(ImageConditioning, ImageToImageWithALoraAtEveryDegree) {
  const std::string dir = FixturesDir() + "/flux1-tiny";
  const std::vector<lora::LoraAdapterSpec> loras = {{"style", FixturesDir() + "/lora/style"}};
  GenerationJob job = Job(32, 32, 4, 32);
  job.items[0].images = {RandomImage(32, 32, 6)};
  job.items[0].strength = 0.75;
  auto base = RunGroup(1, dir, job, loras);
  ASSERT_TRUE(base.ok()) << base.status();
  job.loras = {{"style", 0.8f}};
  auto one = RunGroup(1, dir, job, loras);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = RunGroup(2, dir, job, loras);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(two->latents, one->latents), 1e-5);
  EXPECT_GT(RelativeError(one->latents, base->latents), 1e-4);  // the adapter applies
  EXPECT_EQ(one->steps[0], 3);                                  // int(4 - 3.0) = 1: 3 steps
}

TEST(ImageConditioning, Flux1KontextAtEveryDegree) {
  GenerationJob job = Job(32, 32, 3, 32);
  job.items[0].images = {RandomImage(48, 64, 5)};
  ExpectEveryDegreeAgrees(KontextFolder(), job, 3);
  auto r = RunGroup(1, KontextFolder(), job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->card.image_inputs.use, ImageUse::kKontext);
  EXPECT_EQ(r->card.image_inputs.max_images, 1);
  auto plain = RunGroup(1, KontextFolder(), Job(32, 32, 3, 32));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(RelativeError(r->latents, plain->latents), 1e-3);
}

TEST(ImageConditioning, RefusalsOnEveryRank) {
  struct Case {
    std::string dir;
    std::function<void(GenerationJob*)> edit;
    std::string message;
  };
  const std::string flux1 = FixturesDir() + "/flux1-tiny";
  const std::string flux2 = FixturesDir() + "/flux2-tiny";
  const std::vector<Case> cases = {
      // A transformer folder alone (no VAE, so no encoder): no image at all.
      {flux2 + "/transformer",
       [](GenerationJob* j) {
         j->items[0].images = {RandomImage(32, 32, 1)};
         PromptEmbeddings e;
         e.prompt_embeds = torch::zeros({1, 8, 96});  // joint_attention_dim
         j->items[0].embeddings = e;
       },
       "takes no input image"},
      {FixturesDir() + "/qwenimage-tiny",
       [](GenerationJob* j) {
         j->items[0].images = {RandomImage(32, 32, 1), RandomImage(32, 32, 2)};
         j->items[0].strength = 0.5;
       },
       "at most 1 input images"},
      {flux1,
       [](GenerationJob* j) {
         j->items[0].images = {RandomImage(32, 32, 1), RandomImage(32, 32, 2)};
         j->items[0].strength = 0.5;
       },
       "at most 1 input images"},
      {flux1,
       [](GenerationJob* j) {
         j->items[0].images = {RandomImage(64, 32, 1)};
         j->items[0].strength = 0.5;
       },
       "output's size"},
      {flux1, [](GenerationJob* j) { j->items[0].images = {RandomImage(32, 32, 1)}; },
       "strength in (0, 1]"},
      {flux2,
       [](GenerationJob* j) {
         j->items[0].images = {RandomImage(64, 64, 1)};
         j->items[0].strength = 0.5;
       },
       "only image-to-image"},
      {flux2, [](GenerationJob* j) { j->items[0].images = {RandomImage(66, 64, 1)}; },
       "multiples of 4"},
  };
  for (const Case& c : cases) {
    GenerationJob job = Job(32, 32, 5, 32);
    c.edit(&job);
    auto r = RunGroup(2, c.dir, job);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

TEST(ImageConditioning, NoiseComesAfterThePosteriorDraw) {
  GenerationJob job = Job(32, 32, 4, 32);
  job.items[0].seed = 7;
  auto draws = SeededDraws({{1, 4, 16, 16}, {1, 4, 16, 16}}, 7, torch::kFloat32);
  ASSERT_TRUE(draws.ok());
  auto noise = BatchNoise(job, {1, 4, 16, 16}, torch::kFloat32, torch::kCPU, {{1, 4, 16, 16}});
  ASSERT_TRUE(noise.ok());
  EXPECT_TRUE(torch::equal(*noise, (*draws)[1]));
  auto plain = BatchNoise(job, {1, 4, 16, 16}, torch::kFloat32, torch::kCPU);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(torch::equal(*plain, (*draws)[0]));
}

// DiagonalGaussianDistribution.sample(generator) as the image-to-image path draws it
// (SeededDraws, then vae::SampleLatent): randn on the CPU generator in the distribution's dtype
// (not a float32 draw cast), then mean + std * eps.
TEST(ImageConditioning, PosteriorSampleIsDrawnInTheVaeDtype) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    vae::LatentDistribution dist{torch::randn({1, 4, 4, 4}).to(dtype),
                                 (torch::rand({1, 4, 4, 4}) + 0.5).to(dtype)};
    auto draws = SeededDraws({dist.mean.sizes().vec()}, 42, dtype);
    ASSERT_TRUE(draws.ok()) << draws.status();
    auto z = vae::SampleLatent(dist, (*draws)[0]);
    ASSERT_TRUE(z.ok()) << z.status();
    auto eps = torch::randn({1, 4, 4, 4}, compat::SeededCpuGenerator(42),
                            torch::TensorOptions().dtype(dtype));
    EXPECT_EQ(z->scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(*z, dist.mean + dist.std * eps));
  }
  // One generator, two draws: the second continues the stream (as the pipeline's noise does).
  vae::LatentDistribution dist{torch::zeros({1, 4, 4, 4}), torch::ones({1, 4, 4, 4})};
  auto draws = SeededDraws({{1, 4, 4, 4}, {1, 4, 4, 4}}, 5, torch::kFloat32);
  ASSERT_TRUE(draws.ok()) << draws.status();
  auto first = vae::SampleLatent(dist, (*draws)[0]);
  auto second = vae::SampleLatent(dist, (*draws)[1]);
  ASSERT_TRUE(first.ok() && second.ok());
  auto both = torch::randn({2, 4, 4, 4}, compat::SeededCpuGenerator(5));
  EXPECT_TRUE(torch::equal(*first, both[0].unsqueeze(0)));
  EXPECT_TRUE(torch::equal(*second, both[1].unsqueeze(0)));
}

TEST(ImageConditioning, StrengthFirstStepIsDiffusersGetTimesteps) {
  // t_start = int(max(N - min(N * strength, N), 0)) in doubles.
  EXPECT_EQ(StrengthFirstStep(5, 0.6), 2);
  EXPECT_EQ(StrengthFirstStep(5, static_cast<double>(0.6f)), 1);  // why strength is a double
  EXPECT_EQ(StrengthFirstStep(28, 1.0), 0);
  EXPECT_EQ(StrengthFirstStep(28, 0.95), 1);
  EXPECT_EQ(StrengthFirstStep(4, 0.25), 3);
}

TEST(ImageConditioning, ReferenceIdsAndPixels) {
  torch::Tensor ids = Flux2TokenIds(20, TokenGrid{2, 3}, torch::kFloat32, torch::kCPU);
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{6, 4}));
  for (int64_t y = 0; y < 2; ++y) {
    for (int64_t x = 0; x < 3; ++x) {
      torch::Tensor row = ids[y * 3 + x];
      EXPECT_EQ(row[0].item<float>(), 20);
      EXPECT_EQ(row[1].item<float>(), y);
      EXPECT_EQ(row[2].item<float>(), x);
      EXPECT_EQ(row[3].item<float>(), 0);
    }
  }
  torch::Tensor rgb = torch::tensor({0, 128, 255}, torch::kUInt8).view({1, 1, 3});
  auto x = VaeImageInput(rgb, torch::kFloat32, torch::kCPU);
  ASSERT_TRUE(x.ok());
  ASSERT_EQ(x->sizes(), (std::vector<int64_t>{1, 3, 1, 1}));
  EXPECT_FLOAT_EQ((*x)[0][0][0][0].item<float>(), -1.0f);
  EXPECT_FLOAT_EQ((*x)[0][1][0][0].item<float>(), 2.0f * (128.0f / 255.0f) - 1.0f);
  EXPECT_FLOAT_EQ((*x)[0][2][0][0].item<float>(), 1.0f);
}

}  // namespace
}  // namespace ditserve::pipeline
