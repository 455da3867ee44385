// QwenImageTransformer2DModel against diffusers' output on the tiny Qwen-Image checkpoint
// (float32, CPU; img_shapes [[(1, 8, 8)]], the last two text tokens masked): tp = 1 and
// tp = 2 / 4 (in-process groups, each rank loading its own shard with the production loader and
// the built-in plan), img_shapes handling, the mask, the factory and the argument checks.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "models/qwenimage/qwenimage_state_dict_shapes.h"
#include "models/qwenimage/qwenimage_transformer.h"
#include "models/transformer_factory.h"
#include "sharding/loader.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"
#include "worker/comm/local_communicator.h"

namespace ditserve {
namespace {

using models::qwenimage::QwenImageTransformer2DModel;
using testing::FixturesDir;
using testing::Ref;
using testing::RelativeError;

std::string TransformerDir() { return FixturesDir() + "/qwenimage-tiny/transformer"; }

nlohmann::json Config() {
  std::ifstream in(TransformerDir() + "/config.json");
  return nlohmann::json::parse(in);
}

models::qwenimage::QwenImageTransformerConfig Parsed() {
  auto parsed = models::qwenimage::ParseQwenImageTransformerConfig(Config());
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return *parsed;
}

const sharding::ShardedStateDict& FullWeights() {
  static const auto* sd =
      new sharding::ShardedStateDict(testing::LoadComponentFullFloat32(TransformerDir()));
  return *sd;
}

// The reference call's tensors; img_shapes is not stored (the model derives 8 × 8 from N = 64).
std::map<std::string, torch::Tensor> Inputs() {
  std::map<std::string, torch::Tensor> args;
  for (const char* name :
       {"hidden_states", "encoder_hidden_states", "encoder_hidden_states_mask", "timestep"}) {
    args[name] = Ref(std::string("qwenimage.") + name);
  }
  return args;
}

torch::Tensor RunTp1(const sharding::ShardedStateDict& sd,
                     const std::map<std::string, torch::Tensor>& args = Inputs()) {
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = models::CreateTransformer(Config(), sd, comm.get());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  EXPECT_EQ((*model)->class_name(), "QwenImageTransformer2DModel");
  auto out = (*model)->Forward(args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : torch::Tensor();
}

TEST(QwenImageTransformer, Tp1MatchesDiffusers) {
  auto out = RunTp1(FullWeights());
  ASSERT_TRUE(out.defined());
  EXPECT_EQ(out.sizes(), Ref("qwenimage.out").sizes());
  const double err = RelativeError(out, Ref("qwenimage.out"));
  EXPECT_LT(err, 1e-4) << "relative error " << err;
  std::printf("tp 1 relative error vs diffusers: %.3g\n", err);
}

TEST(QwenImageTransformer, StateDictShapesMatchTheCheckpoint) {
  const auto shapes = models::qwenimage::QwenImageStateDictShapes(Parsed());
  const auto& tensors = FullWeights().tensors();
  ASSERT_EQ(shapes.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    auto it = shapes.find(name);
    ASSERT_NE(it, shapes.end()) << name;
    EXPECT_EQ(it->second, t.sizes().vec()) << name;
  }
}

// The default config is Qwen-Image: SPEC §2.3's parameter count (what the benchmark allocates).
TEST(QwenImageTransformer, DefaultShapesAreQwenImage) {
  int64_t params = 0;
  for (const auto& [name, shape] : models::qwenimage::QwenImageStateDictShapes({})) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    params += n;
  }
  EXPECT_EQ(params, 20430401088LL);
}

TEST(QwenImageTransformer, ExplicitImgShapesInEveryLayout) {
  for (const auto& shapes : {torch::tensor({1, 8, 8}), torch::tensor({{1, 8, 8}}),
                             torch::tensor({{{1.0f, 8.0f, 8.0f}}})}) {
    auto args = Inputs();
    args["img_shapes"] = shapes;
    auto out = RunTp1(FullWeights(), args);
    ASSERT_TRUE(out.defined());
    EXPECT_LT(RelativeError(out, Ref("qwenimage.out")), 1e-4) << shapes;
  }
  // A different grid with the same token count changes the positions, hence the output.
  auto args = Inputs();
  args["img_shapes"] = torch::tensor({{1, 4, 16}});
  auto out = RunTp1(FullWeights(), args);
  ASSERT_TRUE(out.defined());
  EXPECT_GT(RelativeError(out, Ref("qwenimage.out")), 1e-3);
  // Two images of 32 tokens (an edit-style list): also valid.
  args["img_shapes"] = torch::tensor({{{1, 4, 8}, {1, 8, 4}}});
  out = RunTp1(FullWeights(), args);
  ASSERT_TRUE(out.defined());
}

TEST(QwenImageTransformer, TheTextMaskIsApplied) {
  auto args = Inputs();
  args.erase("encoder_hidden_states_mask");
  auto unmasked = RunTp1(FullWeights(), args);
  ASSERT_TRUE(unmasked.defined());
  EXPECT_GT(RelativeError(unmasked, Ref("qwenimage.out")), 1e-3);
  // An all-ones mask is the same as none.
  args["encoder_hidden_states_mask"] = torch::ones({1, 10});
  auto ones = RunTp1(FullWeights(), args);
  ASSERT_TRUE(ones.defined());
  EXPECT_LT(RelativeError(ones, unmasked), 1e-6);
  // Masked text tokens' content does not reach the image tokens.
  args = Inputs();
  args["encoder_hidden_states"] = args["encoder_hidden_states"].clone();
  args["encoder_hidden_states"].narrow(1, 8, 2).normal_();
  auto changed = RunTp1(FullWeights(), args);
  ASSERT_TRUE(changed.defined());
  EXPECT_LT(RelativeError(changed, Ref("qwenimage.out")), 1e-4);
}

absl::StatusOr<sharding::ShardedStateDict> LoadRank(int rank, int world) {
  auto plan = sharding::BuiltinTpPlan("QwenImageTransformer2DModel", Config());
  if (!plan.ok()) return plan.status();
  return sharding::LoadShard(TransformerDir(), &*plan, rank, world, sharding::LoadOptions{});
}

void RunTensorParallel(int world) {
  const auto tp1 = RunTp1(FullWeights());
  ASSERT_TRUE(tp1.defined());
  auto config = Config();
  std::mutex mu;
  std::vector<torch::Tensor> outs(world);
  std::vector<uint64_t> allreduces(world);
  std::vector<int64_t> heads(world);
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    auto sd = LoadRank(comm.rank(), world);
    if (!sd.ok()) return sd.status();
    // Sharded as planned: colwise q rows, rowwise MLP output columns, replicated modulation.
    EXPECT_EQ(sd->Get("transformer_blocks.0.attn.to_q.weight")->size(0), 64 / world);
    EXPECT_EQ(sd->Get("transformer_blocks.1.txt_mlp.net.2.weight")->size(1), 256 / world);
    EXPECT_EQ(sd->Get("transformer_blocks.1.txt_mlp.net.2.bias")->size(0), 64);
    EXPECT_EQ(sd->Get("transformer_blocks.0.img_mod.1.weight")->size(0), 384);
    auto parsed = models::qwenimage::ParseQwenImageTransformerConfig(config);
    if (!parsed.ok()) return parsed.status();
    auto model = QwenImageTransformer2DModel::Load(*parsed, *sd, &comm);
    if (!model.ok()) return model.status();
    auto out = (*model)->Forward(Inputs());
    if (!out.ok()) return out.status();
    std::lock_guard<std::mutex> lock(mu);
    outs[comm.rank()] = *out;
    allreduces[comm.rank()] = comm.Stats().allreduce_count;
    heads[comm.rank()] = (*model)->local_heads();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  const auto c = Parsed();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(outs[r].defined());
    const double err = RelativeError(outs[r], Ref("qwenimage.out"));
    EXPECT_LT(err, 1e-4) << "rank " << r << " of " << world;
    const double vs_tp1 = RelativeError(outs[r], tp1);
    if (r == 0) std::printf("tp %d relative error vs diffusers %.3g, vs tp 1 %.3g\n", world, err, vs_tp1);
    EXPECT_LT(vs_tp1, 1e-5) << "rank " << r << " of " << world << " vs tp=1";
    // SPEC §1.5: 4 all-reduces per block.
    EXPECT_EQ(allreduces[r], static_cast<uint64_t>(4 * c.num_layers));
    EXPECT_EQ(heads[r], c.num_attention_heads / world);
    EXPECT_TRUE(torch::equal(outs[r], outs[0]));
  }
}

TEST(QwenImageTransformer, Tp2MatchesDiffusersAndTp1) { RunTensorParallel(2); }
TEST(QwenImageTransformer, Tp4MatchesDiffusersAndTp1) { RunTensorParallel(4); }

TEST(QwenImageTransformer, Bfloat16RunsCloseToReference) {
  std::map<std::string, torch::Tensor> bf16;
  for (const auto& [name, t] : FullWeights().tensors()) bf16[name] = t.to(torch::kBFloat16);
  sharding::ShardedStateDict sd(0, 1, std::move(bf16), {});
  auto out = RunTp1(sd);
  ASSERT_TRUE(out.defined());
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const double err = RelativeError(out, Ref("qwenimage.out"));
  EXPECT_LT(err, 2e-2) << "bf16 relative error " << err;
  EXPECT_GT(err, 0.0);
}

TEST(QwenImageTransformer, RejectsBadArguments) {
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = models::CreateTransformer(Config(), FullWeights(), comm.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto code = [&](const std::map<std::string, torch::Tensor>& args) {
    return (*model)->Forward(args).status().code();
  };
  auto args = Inputs();
  args.erase("timestep");
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["encoder_hidden_states_mask"] = torch::ones({1, 9});
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["img_shapes"] = torch::tensor({{1, 8, 4}});  // 32 tokens, hidden_states has 64
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
  args["img_shapes"] = torch::tensor({{1.5, 8.0, 8.0}});
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
  args["img_shapes"] = torch::tensor({{1, 8}});
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["hidden_states"] = args["hidden_states"].narrow(1, 0, 60);  // not square, no img_shapes
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
  args["img_shapes"] = torch::tensor({{1, 6, 10}});  // …unless given
  EXPECT_TRUE((*model)->Forward(args).ok());
  args = Inputs();
  args["guidance"] = torch::ones({1});
  EXPECT_EQ(code(args), absl::StatusCode::kInvalidArgument);
}

TEST(QwenImageTransformer, ConfigChecks) {
  const auto c = Parsed();
  EXPECT_EQ(c.proj_out_channels(), 16);
  EXPECT_EQ(c.in_channels, 16);
  auto comm = comm::MakeSingleRankCommunicator();
  auto config = Config();
  config["zero_cond_t"] = true;
  EXPECT_EQ(models::CreateTransformer(config, FullWeights(), comm.get()).status().code(),
            absl::StatusCode::kUnimplemented);
  config = Config();
  config["axes_dims_rope"] = {4, 6, 8};
  EXPECT_EQ(models::CreateTransformer(config, FullWeights(), comm.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  config = Config();
  config["out_channels"] = 8;  // proj_out has 16 = 2² · 4 rows
  EXPECT_EQ(models::CreateTransformer(config, FullWeights(), comm.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  config = Config();
  config["num_layers"] = 3;
  EXPECT_EQ(models::CreateTransformer(config, FullWeights(), comm.get()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(QwenImageTransformer, RefusesShardedModulation) {
  auto comm = comm::MakeSingleRankCommunicator();
  std::map<std::string, sharding::ModuleSharding> modules{
      {"transformer_blocks.1.txt_mod.1", {sharding::TpStyle::kColwise, {}}}};
  sharding::ShardedStateDict sd(0, 1, FullWeights().tensors(), modules);
  EXPECT_EQ(models::CreateTransformer(Config(), sd, comm.get()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ditserve
