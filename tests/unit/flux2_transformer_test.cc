// Flux2Transformer2DModel against diffusers' output on the tiny FLUX.2 checkpoint (float32, CPU):
// tp = 1 and tp = 2 / 4 (in-process groups, each rank loading its own shard with the production
// loader and the built-in plan), the packed layouts, the factory and the argument checks.
#include <gtest/gtest.h>

#include "models/flux2/flux2_state_dict_shapes.h"
#include "models/flux2/flux2_transformer.h"
#include "models/transformer_factory.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"
#include "tests/support/transformer_harness.h"
#include "comm/local_communicator.h"

namespace ditserve {
namespace {

using models::flux2::Flux2Transformer2DModel;
using testing::Ref;
using testing::RelativeError;

constexpr testing::FixtureTransformer kFlux2{"flux2-tiny", "Flux2Transformer2DModel"};

nlohmann::json Config() { return testing::TransformerConfig(kFlux2); }
const sharding::ShardedStateDict& FullWeights() { return testing::TransformerFullWeights(kFlux2); }

models::flux2::Flux2TransformerConfig Parsed() {
  return testing::ValueOrAddFailure(models::flux2::ParseFlux2TransformerConfig(Config()));
}

std::map<std::string, torch::Tensor> Inputs() {
  return testing::RefArguments("flux2.", {"hidden_states", "encoder_hidden_states", "timestep",
                                          "img_ids", "txt_ids", "guidance"});
}

torch::Tensor RunTp1(const sharding::ShardedStateDict& sd,
                     const std::map<std::string, torch::Tensor>& args = Inputs()) {
  return testing::RunTransformerTp1(kFlux2, sd, args);
}

TEST(Flux2Transformer, Tp1MatchesDiffusers) {
  testing::ExpectTp1MatchesReference(kFlux2, Inputs(), Ref("flux2.out"));
}

// The state dict the model (and the benchmark's random weights) assume is exactly the checkpoint's.
TEST(Flux2Transformer, StateDictShapesMatchTheCheckpoint) {
  testing::ExpectShapesMatchWeights(models::flux2::Flux2StateDictShapes(Parsed()), FullWeights());
}

// The default config is FLUX.2-dev: diffusers transformer_flux2.py's parameter count (what the benchmark allocates).
TEST(Flux2Transformer, DefaultShapesAreFlux2Dev) {
  EXPECT_EQ(testing::ParameterCount(models::flux2::Flux2StateDictShapes({})), 32223281152LL);
}

// Rows [o_k + r·s_k/n, o_k + (r+1)·s_k/n) of every block, concatenated (diffusers hooks/tensor_parallel.py), along `dim`.
torch::Tensor PackedSlice(const torch::Tensor& full, const std::vector<int64_t>& blocks, int64_t dim,
                          int rank, int world) {
  std::vector<torch::Tensor> parts;
  int64_t offset = 0;
  for (int64_t size : blocks) {
    parts.push_back(full.narrow(dim, offset + rank * size / world, size / world));
    offset += size;
  }
  return torch::cat(parts, dim);
}

TEST(Flux2Transformer, PackedShardsFollowTheBlocks) {
  const auto c = Parsed();
  const int64_t d = c.inner_dim(), mh = c.mlp_hidden_dim();
  const auto& full = FullWeights();
  for (int world : {2, 4}) {
    for (int r = 0; r < world; ++r) {
      auto sd = testing::LoadTransformerShard(kFlux2, r, world);
      ASSERT_TRUE(sd.ok()) << sd.status();
      const std::string fused = "single_transformer_blocks.1.attn.to_qkv_mlp_proj";
      EXPECT_TRUE(torch::equal(*sd->Get(fused + ".weight"),
                               PackedSlice(*full.Get(fused + ".weight"), {d, d, d, mh, mh}, 0, r, world)));
      EXPECT_EQ(sd->ShardingOf(fused).local_blocks,
                (std::vector<int64_t>{d / world, d / world, d / world, mh / world, mh / world}));
      const std::string out = "single_transformer_blocks.1.attn.to_out";
      EXPECT_TRUE(torch::equal(*sd->Get(out + ".weight"),
                               PackedSlice(*full.Get(out + ".weight"), {d, mh}, 1, r, world)));
      const std::string ff = "transformer_blocks.0.ff_context.linear_in";
      EXPECT_TRUE(torch::equal(*sd->Get(ff + ".weight"),
                               PackedSlice(*full.Get(ff + ".weight"), {mh, mh}, 0, r, world)));
      // The shared modulation stays whole on every rank.
      EXPECT_TRUE(torch::equal(*sd->Get("single_stream_modulation.linear.weight"),
                               *full.Get("single_stream_modulation.linear.weight")));
    }
  }
}

// Every rank loads its shard with the built-in FLUX.2 plan and builds the model directly.
void RunTensorParallel(int world) {
  const auto c = Parsed();
  testing::TensorParallelExpectations expected;
  expected.reference = Ref("flux2.out");
  // diffusers hooks/tensor_parallel.py: 4 all-reduces per double block and 1 per single block.
  expected.allreduces = static_cast<uint64_t>(4 * c.num_layers + c.num_single_layers);
  // With the modulation sharded: one more for the three shared modulations and norm_out together
  // (one GEMM: models/tp/modulation_bank.h).
  expected.modulation_allreduces = 1;
  expected.local_heads = c.num_attention_heads / world;
  testing::ExpectTensorParallelMatches(
      kFlux2, world, Inputs(), expected,
      [&](const sharding::ShardedStateDict& shard, comm::Communicator& comm) {
        return testing::LoadRankModel<Flux2Transformer2DModel>(c, shard, comm);
      });
}

TEST(Flux2Transformer, Tp2MatchesDiffusersAndTp1) { RunTensorParallel(2); }
TEST(Flux2Transformer, Tp4MatchesDiffusersAndTp1) { RunTensorParallel(4); }

TEST(Flux2Transformer, ThreeDimensionalIdsTakeTheFirstRow) {
  auto args = Inputs();
  args["img_ids"] = args["img_ids"].unsqueeze(0);
  args["txt_ids"] = args["txt_ids"].unsqueeze(0);
  auto out = RunTp1(FullWeights(), args);
  ASSERT_TRUE(out.defined());
  EXPECT_LT(RelativeError(out, Ref("flux2.out")), 1e-4);
}

// Every input really takes part: perturbing any of them moves the output.
TEST(Flux2Transformer, EveryInputMatters) {
  const auto base = RunTp1(FullWeights());
  ASSERT_TRUE(base.defined());
  for (const char* name : {"encoder_hidden_states", "timestep", "guidance", "img_ids", "txt_ids"}) {
    auto args = Inputs();
    args[name] = args[name] + (std::string(name).find("ids") != std::string::npos ? 1.0 : 0.05);
    auto out = RunTp1(FullWeights(), args);
    ASSERT_TRUE(out.defined()) << name;
    EXPECT_GT(RelativeError(out, base), 1e-4) << name << " does not affect the output";
  }
}

TEST(Flux2Transformer, Bfloat16RunsCloseToReference) {
  testing::ExpectBfloat16CloseToReference(kFlux2, Inputs(), Ref("flux2.out"));
}

TEST(Flux2Transformer, RejectsBadArguments) {
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = models::CreateTransformer(Config(), FullWeights(), comm.get());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->RequiredArguments(),
            (std::vector<std::string>{"hidden_states", "encoder_hidden_states", "timestep", "img_ids",
                                      "txt_ids", "guidance"}));
  auto args = Inputs();
  args.erase("guidance");
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["hidden_states"] = args["hidden_states"].narrow(2, 0, 8);
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["img_ids"] = args["img_ids"].narrow(1, 0, 3);  // 4 RoPE axes
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["txt_ids"] = args["txt_ids"].narrow(0, 0, 5);
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Inputs();
  args["pooled_projections"] = torch::zeros({1, 8});  // FLUX.1's, not FLUX.2's
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Flux2Transformer, ConfigIsReadFromTheFile) {
  const auto c = Parsed();
  EXPECT_EQ(c.rope_theta, 2000);
  EXPECT_EQ(c.timestep_guidance_channels, 32);
  EXPECT_EQ(c.mlp_hidden_dim(), 192);
  EXPECT_EQ(c.axes_dims_rope, (std::vector<int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(c.out_channels, c.in_channels);  // null → in_channels
  auto config = Config();
  config["axes_dims_rope"] = {4, 4, 4, 6};
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kInvalidArgument);
  config = Config();
  config["mlp_ratio"] = 4.0;  // linear_in would need 2·256 rows
  EXPECT_FALSE(testing::CreateTransformerStatus(config, FullWeights()).ok());
  config = Config();
  config["num_single_layers"] = 3;
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kNotFound);
  auto comm = comm::MakeSingleRankCommunicator();
  config = Config();
  config["guidance_embeds"] = false;  // then guidance is optional and ignored
  auto no_guidance = models::CreateTransformer(config, FullWeights(), comm.get());
  ASSERT_TRUE(no_guidance.ok()) << no_guidance.status();
  auto args = Inputs();
  args.erase("guidance");
  auto out = (*no_guidance)->Forward(args);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_GT(RelativeError(*out, Ref("flux2.out")), 1e-3);
}

// Plans that would slice the fused / SwiGLU layers straight across are refused, not run.
TEST(Flux2Transformer, RefusesPlainStylesOnPackedLayers) {
  auto comm = comm::MakeSingleRankCommunicator();
  for (const auto& [path, style] :
       std::vector<std::pair<std::string, sharding::TpStyle>>{
           {"single_transformer_blocks.0.attn.to_qkv_mlp_proj", sharding::TpStyle::kColwise},
           {"single_transformer_blocks.0.attn.to_out", sharding::TpStyle::kRowwise},
           {"transformer_blocks.1.ff.linear_in", sharding::TpStyle::kColwise},
           {"double_stream_modulation_img.linear", sharding::TpStyle::kColwise}}) {
    std::map<std::string, sharding::ModuleSharding> modules{{path, {style, {}}}};
    sharding::ShardedStateDict sd(0, 1, FullWeights().tensors(), modules);
    auto model = models::CreateTransformer(Config(), sd, comm.get());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition) << path << model.status();
  }
}

TEST(Flux2Transformer, RefusesTpDegreeNotDividingHeads) {
  testing::ExpectTpDegreeRefused(kFlux2, 3);
}

}  // namespace
}  // namespace ditserve
