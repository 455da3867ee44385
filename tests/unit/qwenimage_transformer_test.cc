// QwenImageTransformer2DModel against diffusers' output on the tiny Qwen-Image checkpoint
// (float32, CPU; img_shapes [[(1, 8, 8)]], the last two text tokens masked): tp = 1 and
// tp = 2 / 4 (in-process groups, each rank loading its own shard with the production loader and
// the built-in plan), img_shapes handling, the mask, the factory and the argument checks.
#include <gtest/gtest.h>

#include "comm/local_communicator.h"
#include "common/status_macros.h"
#include "models/qwenimage/qwenimage_state_dict_shapes.h"
#include "models/qwenimage/qwenimage_transformer.h"
#include "models/transformer_factory.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"
#include "tests/support/transformer_harness.h"

namespace ditserve {
namespace {

using models::qwenimage::QwenImageTransformer2DModel;
using testing::Ref;
using testing::RelativeError;

constexpr testing::FixtureTransformer kQwenImage{"qwenimage-tiny", "QwenImageTransformer2DModel"};

nlohmann::json Config() {
  return testing::TransformerConfig(kQwenImage);
}
const sharding::ShardedStateDict& FullWeights() {
  return testing::TransformerFullWeights(kQwenImage);
}

models::qwenimage::QwenImageTransformerConfig Parsed() {
  return testing::ValueOrAddFailure(models::qwenimage::ParseQwenImageTransformerConfig(Config()));
}

// The reference call's tensors; img_shapes is not stored (the model derives 8 × 8 from N = 64).
std::map<std::string, torch::Tensor> Inputs() {
  return testing::RefArguments("qwenimage.", {"hidden_states", "encoder_hidden_states",
                                              "encoder_hidden_states_mask", "timestep"});
}

torch::Tensor RunTp1(const sharding::ShardedStateDict& sd,
                     const std::map<std::string, torch::Tensor>& args = Inputs()) {
  return testing::RunTransformerTp1(kQwenImage, sd, args);
}

TEST(QwenImageTransformer, Tp1MatchesDiffusers) {
  testing::ExpectTp1MatchesReference(kQwenImage, Inputs(), Ref("qwenimage.out"));
}

TEST(QwenImageTransformer, StateDictShapesMatchTheCheckpoint) {
  testing::ExpectShapesMatchWeights(models::qwenimage::QwenImageStateDictShapes(Parsed()),
                                    FullWeights());
}

// The default config is Qwen-Image: diffusers transformer_qwenimage.py's parameter count (what the
// benchmark allocates).
TEST(QwenImageTransformer, DefaultShapesAreQwenImage) {
  EXPECT_EQ(testing::ParameterCount(models::qwenimage::QwenImageStateDictShapes({})),
            20430401088LL);
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

// The model keeps the last RoPE tables (a request's steps reuse them): one instance asked for
// another grid, another text length, then the first again answers exactly as fresh models do.
TEST(QwenImageTransformer, CachedRopeTablesFollowTheShapes) {
  auto comm = comm::MakeSingleRankCommunicator();
  auto model =
      models::qwenimage::QwenImageTransformer2DModel::Load(Parsed(), FullWeights(), comm.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto square = Inputs();
  auto wide = Inputs();
  wide["img_shapes"] = torch::tensor({{1, 4, 16}});
  auto shorter = Inputs();
  shorter["encoder_hidden_states"] = shorter["encoder_hidden_states"].narrow(1, 0, 5).contiguous();
  shorter["encoder_hidden_states_mask"] =
      shorter["encoder_hidden_states_mask"].narrow(1, 0, 5).contiguous();
  for (const auto* args : {&square, &wide, &shorter, &square, &square}) {
    auto out = (*model)->Forward(*args);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(torch::equal(*out, RunTp1(FullWeights(), *args)));
  }
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

// Every rank loads its shard with the built-in Qwen-Image plan and builds the model directly.
void RunTensorParallel(int world) {
  const auto c = Parsed();
  testing::TensorParallelExpectations expected;
  expected.reference = Ref("qwenimage.out");
  // diffusers hooks/tensor_parallel.py: 4 all-reduces per block.
  expected.allreduces = static_cast<uint64_t>(4 * c.num_layers);
  // With the modulation sharded: one more for every img_mod / txt_mod and norm_out together (one
  // GEMM: models/tp/modulation_bank.h).
  expected.modulation_allreduces = 1;
  expected.local_heads = c.num_attention_heads / world;
  testing::ExpectTensorParallelMatches(
      kQwenImage, world, Inputs(), expected,
      [&](const sharding::ShardedStateDict& sd, comm::Communicator& comm) {
        // Sharded as planned: colwise q rows, rowwise MLP output columns; the modulation keeps its
        // output rows (replicated, or rowwise_split_input: 1/N of its input columns).
        EXPECT_EQ(sd.Get("transformer_blocks.0.attn.to_q.weight")->size(0), 64 / world);
        EXPECT_EQ(sd.Get("transformer_blocks.1.txt_mlp.net.2.weight")->size(1), 256 / world);
        EXPECT_EQ(sd.Get("transformer_blocks.1.txt_mlp.net.2.bias")->size(0), 64);
        EXPECT_EQ(sd.Get("transformer_blocks.0.img_mod.1.weight")->size(0), 384);
        return testing::LoadRankModel<QwenImageTransformer2DModel>(c, sd, comm);
      });
}

TEST(QwenImageTransformer, Tp2MatchesDiffusersAndTp1) {
  RunTensorParallel(2);
}
TEST(QwenImageTransformer, Tp4MatchesDiffusersAndTp1) {
  RunTensorParallel(4);
}

TEST(QwenImageTransformer, Bfloat16RunsCloseToReference) {
  testing::ExpectBfloat16CloseToReference(kQwenImage, Inputs(), Ref("qwenimage.out"));
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
  auto config = Config();
  config["use_layer3d_rope"] = true;
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kUnimplemented);
  config = Config();
  config["zero_cond_t"] = true;  // Qwen-Image-Edit-2511: served
  EXPECT_TRUE(testing::CreateTransformerStatus(config, FullWeights()).ok());
  config = Config();
  config["axes_dims_rope"] = {4, 6, 8};
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kInvalidArgument);
  config = Config();
  config["out_channels"] = 8;  // proj_out has 16 = 2² · 4 rows
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kInvalidArgument);
  config = Config();
  config["num_layers"] = 3;
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kNotFound);
}

// Qwen-Image-Edit-2511's zero_cond_t on the fixture's weights. Its own diffusers parity needs a
// fixture made with the switch on (not made yet); these are the properties that hold without one.

// The reference call's latents with two input images' tokens after them: img_shapes (1, 3, 3), the
// 8 x 8 output, then 4 x 4 and 4 x 8 images; the given timestep.
std::map<std::string, torch::Tensor> EditInputs(double timestep) {
  auto a = Inputs();
  torch::manual_seed(2511);
  a["hidden_states"] = torch::cat({a["hidden_states"], torch::randn({1, 16 + 32, 16})}, 1);
  a["img_shapes"] = torch::tensor({1, 8, 8, 1, 4, 4, 1, 4, 8}, torch::kInt64).view({1, 3, 3});
  a["timestep"] = torch::full({1}, timestep);
  return a;
}

// The model of `c` at tp = `world` (rank 0's output; every rank's must agree), the modulation
// sharded as served when `shard_modulation`.
torch::Tensor RunConfig(const models::qwenimage::QwenImageTransformerConfig& c,
                        const std::map<std::string, torch::Tensor>& args, int world = 1,
                        bool shard_modulation = false) {
  std::vector<torch::Tensor> out(world);
  const absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(
        auto sd, testing::LoadTransformerShard(kQwenImage, comm.rank(), world, shard_modulation));
    ASSIGN_OR_RETURN(auto model, QwenImageTransformer2DModel::Load(c, sd, &comm));
    ASSIGN_OR_RETURN(out[comm.rank()], model->Forward(args));
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  for (int r = 1; r < world && s.ok(); ++r) EXPECT_TRUE(torch::equal(out[r], out[0])) << r;
  return out[0];
}

models::qwenimage::QwenImageTransformerConfig ZeroCondT() {
  auto c = Parsed();
  c.zero_cond_t = true;
  return c;
}

TEST(QwenImageTransformer, ZeroCondTIsThePlainModelWhereBothTimestepsAgree) {
  // Without input images every token is the output's: the step's modulation, as the plain model.
  auto plain = RunConfig(Parsed(), Inputs());
  EXPECT_LT(RelativeError(RunConfig(ZeroCondT(), Inputs()), plain), 1e-6);
  // At timestep 0 both embeddings are the same: the plain model on the same tokens.
  EXPECT_LT(
      RelativeError(RunConfig(ZeroCondT(), EditInputs(0.0)), RunConfig(Parsed(), EditInputs(0.0))),
      1e-6);
}

TEST(QwenImageTransformer, ZeroCondTModulatesTheInputImagesAtTimestepZero) {
  const auto args = EditInputs(0.7);
  const auto plain = RunConfig(Parsed(), args);
  const auto zero = RunConfig(ZeroCondT(), args);
  ASSERT_EQ(zero.sizes(), plain.sizes());
  EXPECT_GT(RelativeError(zero, plain), 1e-3);  // the input images' tokens moved the output's
  // The input images' tokens at timestep 0.7 under zero_cond_t see timestep 0's modulation: with
  // the output's tokens' modulation at 0.7 too, they are not the plain model's at 0.7 or at 0.
  EXPECT_GT(RelativeError(zero, RunConfig(Parsed(), EditInputs(0.0))), 1e-3);
  // Sharded (tp 2, 4; the modulation replicated and sharded as served): tp 1's output.
  for (int world : {2, 4}) {
    for (bool shard_modulation : {false, true}) {
      EXPECT_LT(RelativeError(RunConfig(ZeroCondT(), args, world, shard_modulation), zero), 1e-5)
          << world << (shard_modulation ? " modulation sharded" : "");
    }
  }
}

TEST(QwenImageTransformer, RefusesShardedModulation) {
  std::map<std::string, sharding::ModuleSharding> modules{
      {"transformer_blocks.1.txt_mod.1", {sharding::TpStyle::kColwise, {}}}};
  sharding::ShardedStateDict sd(0, 1, FullWeights().tensors(), modules);
  EXPECT_EQ(testing::CreateTransformerStatus(Config(), sd).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ditserve
