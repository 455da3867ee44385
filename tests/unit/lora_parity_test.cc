// LoRA parity against diffusers (tests/fixtures/make_lora_fixtures.py: load_lora_weights +
// set_adapters with weights on the flux1-tiny pipeline): a diffusers-format adapter ("style", with
// its adapter config in the file's metadata) and a kohya-format one ("detail"), alone and together,
// at tp = 1, 2 and 4 in in-process groups (served plan: AdaLN modulation sharded at tp > 1), with
// the adapters merged into a copy of the weights and as runtime low-rank terms:
//   * the transformer's step-0 output equals diffusers' (relative error < 1e-4);
//   * the whole pipeline's image equals diffusers' (< 1e-3, as the base image test);
//   * the unadapted output after an adapted one is bit-identical to the one before.
#include <gtest/gtest.h>

#include <mutex>
#include <tuple>

#include "comm/local_communicator.h"
#include "models/lora/lora_library.h"
#include "models/transformer_factory.h"
#include "pipeline/pipeline.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixture_jobs.h"
#include "tests/support/fixtures.h"
#include "tests/support/transformer_harness.h"

namespace ditserve {
namespace {

using testing::FixturesDir;
using testing::RelativeError;

constexpr testing::FixtureTransformer kFlux1{"flux1-tiny", "FluxTransformer2DModel"};

// diffusers' outputs with the adapters (lora_reference.safetensors).
torch::Tensor LoraRef(const std::string& name) {
  static const auto* refs = [] {
    auto all = sharding::ReadAllTensors(FixturesDir() + "/lora_reference.safetensors");
    return new std::map<std::string, torch::Tensor>(all.ok() ? *all : std::map<std::string, torch::Tensor>{});
  }();
  auto it = refs->find(name);
  EXPECT_NE(it, refs->end()) << "no reference " << name;
  return it == refs->end() ? torch::Tensor() : it->second.to(torch::kFloat32);
}

std::vector<lora::LoraAdapterSpec> Adapters() {
  return {{"style", FixturesDir() + "/lora/style"},
          {"detail", FixturesDir() + "/lora/detail.safetensors"}};
}

testing::ForwardArgs Step0Inputs() {
  return testing::RefArguments("flux1.step0.in.",
                               {"hidden_states", "encoder_hidden_states", "pooled_projections",
                                "timestep", "img_ids", "txt_ids", "guidance"});
}

// This rank's flux1-tiny transformer (its own shard; served plan) and its adapters. The shard
// outlives the model (CreateTransformer's contract): all three live and die together.
struct RankWithLoras {
  sharding::ShardedStateDict shard;
  std::unique_ptr<models::DiffusionTransformer> model;
  std::unique_ptr<lora::LoraLibrary> loras;
};
absl::StatusOr<std::unique_ptr<RankWithLoras>> LoadRank(
    comm::Communicator& comm, const std::vector<lora::LoraAdapterSpec>& specs, lora::LoraMode mode) {
  const int world = comm.world_size();
  auto r = std::make_unique<RankWithLoras>();
  auto shard = testing::LoadTransformerShard(kFlux1, comm.rank(), world, /*shard_modulation=*/world > 1);
  if (!shard.ok()) return shard.status();
  r->shard = *std::move(shard);
  auto model = models::CreateTransformer(testing::TransformerConfig(kFlux1), r->shard, &comm);
  if (!model.ok()) return model.status();
  r->model = *std::move(model);
  auto lib = lora::LoraLibrary::Load(specs, r->model->linear_layers(), comm.rank(), world, {}, mode);
  if (!lib.ok()) return lib.status();
  r->loras = *std::move(lib);
  return r;
}

struct Case {
  const char* reference;  // suffix of lora.step0.* / lora.image.*
  std::vector<lora::LoraChoice> choices;  // canonical order (by name), as the frontend sends them
};

const std::vector<Case>& StepCases() {
  static const auto* cases = new std::vector<Case>{
      {"style_0.8", {{"style", 0.8f}}},
      {"detail_1.0", {{"detail", 1.0f}}},
      {"style_0.8+detail_-0.5", {{"detail", -0.5f}, {"style", 0.8f}}},
  };
  return *cases;
}

// (tp degree, mode): merged weights and runtime low-rank terms both give diffusers' numbers.
class LoraParityTest : public ::testing::TestWithParam<std::tuple<int, lora::LoraMode>> {
 protected:
  int World() const { return std::get<0>(GetParam()); }
  lora::LoraMode Mode() const { return std::get<1>(GetParam()); }
};

TEST_P(LoraParityTest, TransformerOutputMatchesDiffusers) {
  const int world = World();
  const auto args = Step0Inputs();
  ASSERT_LT(RelativeError(LoraRef("lora.step0.base"), testing::Ref("flux1.step0.out")), 1e-6);
  std::mutex mu;
  std::map<std::string, double> errors;
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    auto rank = LoadRank(comm, Adapters(), Mode());
    if (!rank.ok()) return rank.status();
    auto& model = (*rank)->model;
    auto& lib = (*rank)->loras;
    auto base = model->Forward(args);
    if (!base.ok()) return base.status();
    for (const Case& c : StepCases()) {
      auto active = lib->Activate(c.choices);
      if (!active.ok()) return active.status();
      auto out = model->Forward(args);
      if (!out.ok()) return out.status();
      const double err = RelativeError(*out, LoraRef(std::string("lora.step0.") + c.reference));
      std::lock_guard<std::mutex> lock(mu);
      errors[c.reference] = std::max(errors[c.reference], err);
    }
    auto again = model->Forward(args);
    if (!again.ok()) return again.status();
    EXPECT_TRUE(torch::equal(*again, *base)) << "rank " << comm.rank();
    std::lock_guard<std::mutex> lock(mu);
    errors["base"] = std::max(errors["base"], RelativeError(*base, LoraRef("lora.step0.base")));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (const auto& [name, err] : errors) {
    EXPECT_LT(err, 1e-4) << name << " tp=" << world;
    RecordProperty(name, std::to_string(err));
  }
  // The adapters matter: each adapted reference is far from the base output.
  for (const Case& c : StepCases()) {
    EXPECT_GT(RelativeError(LoraRef(std::string("lora.step0.") + c.reference), LoraRef("lora.step0.base")),
              1e-2)
        << c.reference;
  }
}

TEST_P(LoraParityTest, ImageMatchesDiffusersAndTheBaseImageIsRestored) {
  const int world = World();
  std::mutex mu;
  std::map<std::string, torch::Tensor> images;
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    pipeline::PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/flux1-tiny";
    opts.loras = Adapters();
    opts.lora_mode = Mode();
    auto p = pipeline::LoadPipeline(opts, &comm);
    if (!p.ok()) return p.status();
    EXPECT_EQ((*p)->Card().loras.size(), 2u);
    const std::vector<std::pair<std::string, std::vector<lora::LoraChoice>>> runs = {
        {"base", {}},
        {"style_0.8", {{"style", 0.8f}}},
        {"style_0.8+detail_-0.5", {{"detail", -0.5f}, {"style", 0.8f}}},
        {"base_after", {}}};
    for (const auto& [name, choices] : runs) {
      pipeline::GenerationJob job = testing::Flux1FixtureJob(pipeline::JobOutput::kImage);
      job.loras = choices;
      auto r = (*p)->Run(job, [](const pipeline::StepEvent&) {}, [] { return false; });
      if (!r.ok()) return r.status();
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        images[name] = r->images.at(0);
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_LT(RelativeError(images["base"], testing::Ref("flux1.image")), 1e-3);
  EXPECT_TRUE(torch::equal(images["base_after"], images["base"]));
  for (const char* name : {"style_0.8", "style_0.8+detail_-0.5"}) {
    const torch::Tensor ref = LoraRef(std::string("lora.image.") + name);
    const double err = RelativeError(images[name], ref);
    EXPECT_LT(err, 1e-3) << name << " tp=" << world;
    EXPECT_GT(RelativeError(ref, testing::Ref("flux1.image")), 1e-2) << name << " barely changes the image";
    RecordProperty(name, std::to_string(err));
  }
}

// The same "style" adapter as PEFT's own save_pretrained writes it (base_model.model.* keys, the
// config in adapter_config.json beside the file) gives diffusers' output too.
TEST_P(LoraParityTest, PeftLayoutOfTheSameAdapterMatches) {
  const int world = World();
  const auto args = Step0Inputs();
  std::mutex mu;
  double worst = 0;
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    auto rank = LoadRank(comm, {{"peft", FixturesDir() + "/lora/style-peft"}}, Mode());
    if (!rank.ok()) return rank.status();
    auto& model = (*rank)->model;
    auto& lib = (*rank)->loras;
    auto active = lib->Activate({{"peft", 0.8f}});
    if (!active.ok()) return active.status();
    auto out = model->Forward(args);
    if (!out.ok()) return out.status();
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, RelativeError(*out, LoraRef("lora.step0.style_0.8")));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_LT(worst, 1e-4) << "tp=" << world;
}

INSTANTIATE_TEST_SUITE_P(TpDegreesAndModes, LoraParityTest,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(lora::LoraMode::kMerge,
                                                              lora::LoraMode::kRuntime)));

}  // namespace
}  // namespace ditserve
