// FluxTransformer2DModel against diffusers' output on the tiny FLUX.1 checkpoint (float32, CPU):
// tp = 1 and tp = 2 / 4 (in-process groups), plus the factory and argument checks.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/local_communicator.h"
#include "models/flux1/flux1_state_dict_shapes.h"
#include "models/flux1/flux1_transformer.h"
#include "models/transformer_factory.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"
#include "tests/support/transformer_harness.h"
#include "tests/unit/tp_test_sharding.h"

namespace ditserve {
namespace {

using models::flux1::FluxTransformer2DModel;
using testing::Ref;
using testing::RelativeError;

constexpr testing::FixtureTransformer kFlux1{"flux1-tiny", "FluxTransformer2DModel"};

nlohmann::json Config() { return testing::TransformerConfig(kFlux1); }
const sharding::ShardedStateDict& FullWeights() { return testing::TransformerFullWeights(kFlux1); }

std::map<std::string, torch::Tensor> Step0Inputs() {
  return testing::RefArguments("flux1.step0.in.",
                               {"hidden_states", "encoder_hidden_states", "pooled_projections",
                                "timestep", "img_ids", "txt_ids", "guidance"});
}

// The state dict the model (and the benchmark's random weights) assume is exactly the checkpoint's.
TEST(Flux1Transformer, StateDictShapesMatchTheCheckpoint) {
  auto parsed = models::flux1::ParseFluxTransformerConfig(Config());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  testing::ExpectShapesMatchWeights(models::flux1::FluxStateDictShapes(*parsed), FullWeights());
}

TEST(Flux1Transformer, Tp1MatchesDiffusers) {
  testing::ExpectTp1MatchesReference(kFlux1, Step0Inputs(), Ref("flux1.step0.out"));
}

// The built-in FLUX.1 plan through the production loader; the factory builds every rank's model.
void RunTensorParallel(int world) {
  const auto config = Config();
  testing::TensorParallelExpectations expected;
  expected.reference = Ref("flux1.step0.out");
  // diffusers hooks/tensor_parallel.py: exactly 4 all-reduces per double block and 1 per single block.
  expected.allreduces = static_cast<uint64_t>(4 * config["num_layers"].get<int64_t>() +
                                              config["num_single_layers"].get<int64_t>());
  // With the modulation sharded: one more for all the AdaLN projections together (norm1,
  // norm1_context, the single blocks' norm, norm_out share one GEMM: models/tp/modulation_bank.h).
  expected.modulation_allreduces = 1;
  testing::ExpectTensorParallelMatches(kFlux1, world, Step0Inputs(), expected);
}

// The loader's shards are exactly diffusers' slices (test helper written from diffusers' hooks/tensor_parallel.py).
TEST(Flux1Transformer, LoaderShardsMatchSpecSlicing) {
  auto parsed = models::flux1::ParseFluxTransformerConfig(Config());
  ASSERT_TRUE(parsed.ok());
  for (int world : {2, 4}) {
    for (int r = 0; r < world; ++r) {
      auto sd = testing::LoadTransformerShard(kFlux1, r, world);
      ASSERT_TRUE(sd.ok()) << sd.status();
      auto expected = testing::SliceForRank(FullWeights(), testing::Flux1TestPlan(parsed->inner_dim()),
                                            r, world);
      ASSERT_EQ(sd->Names(), expected.Names());
      for (const auto& name : expected.Names()) {
        EXPECT_TRUE(torch::equal(*sd->Get(name), *expected.Get(name))) << name << " rank " << r;
      }
      const auto packed = sd->ShardingOf("single_transformer_blocks.0.proj_out");
      EXPECT_EQ(packed.style, sharding::TpStyle::kPackedRowwise);
      EXPECT_EQ(packed.local_blocks,
                (std::vector<int64_t>{parsed->inner_dim() / world, 4 * parsed->inner_dim() / world}));
    }
  }
}

TEST(Flux1Transformer, Tp2MatchesDiffusersAndTp1) { RunTensorParallel(2); }
TEST(Flux1Transformer, Tp4MatchesDiffusersAndTp1) { RunTensorParallel(4); }

TEST(Flux1Transformer, LocalHeadsFollowTheShard) {
  auto config = Config();
  auto parsed = models::flux1::ParseFluxTransformerConfig(config);
  ASSERT_TRUE(parsed.ok());
  auto status = comm::RunLocalGroup(2, [&](comm::Communicator& comm) -> absl::Status {
    auto sd = testing::SliceForRank(FullWeights(), testing::Flux1TestPlan(parsed->inner_dim()),
                                    comm.rank(), 2);
    auto model = FluxTransformer2DModel::Load(*parsed, sd, &comm);
    if (!model.ok()) return model.status();
    EXPECT_EQ((*model)->local_heads(), parsed->num_attention_heads / 2);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(Flux1Transformer, Bfloat16RunsCloseToReference) {
  // diffusers would embed guidance bf16(bf16(3.5)·1000) = 3504 (diffusers pipeline_flux.py); we keep timestep and
  // guidance in float32 up to the sinusoid (FloatConditioning), so the bf16 run meets the fixture
  // README's bf16 bar against the float32 reference itself.
  const auto out =
      testing::ExpectBfloat16CloseToReference(kFlux1, Step0Inputs(), Ref("flux1.step0.out"));
  ASSERT_TRUE(out.defined());
  // The float32 counterpart: the same bf16-rounded weights, run in float32.
  const auto rounded = testing::CastWeights(
      testing::CastWeights(FullWeights(), torch::kBFloat16), torch::kFloat32);
  const auto counterpart = testing::RunTransformerTp1(kFlux1, rounded, Step0Inputs());
  ASSERT_TRUE(counterpart.defined());
  const double vs_counterpart = RelativeError(out, counterpart);
  const double vs_reference = RelativeError(out, Ref("flux1.step0.out"));
  std::printf("bf16 relative error: %.4g vs the fp32 counterpart, %.4g vs diffusers fp32\n",
              vs_counterpart, vs_reference);
  EXPECT_GT(vs_counterpart, 0.0);  // it really ran in bf16
  EXPECT_LT(vs_counterpart, 2e-2);
  EXPECT_LT(vs_reference, 2e-2);
}

TEST(Flux1Transformer, RejectsBadArguments) {
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = models::CreateTransformer(Config(), FullWeights(), comm.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto args = Step0Inputs();
  args.erase("guidance");
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Step0Inputs();
  args["hidden_states"] = args["hidden_states"].narrow(2, 0, 8);
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Step0Inputs();
  args["img_ids"] = args["img_ids"].narrow(0, 0, 10);
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
  args = Step0Inputs();
  args["bogus"] = torch::zeros({1});
  EXPECT_EQ((*model)->Forward(args).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Flux1Transformer, FactoryRefusesUnknownClassAndBadConfig) {
  auto config = Config();
  config["_class_name"] = "NoSuchTransformer";
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kUnimplemented);
  config = Config();
  config["axes_dims_rope"] = {4, 6, 8};  // sums to 18, head_dim is 16
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kInvalidArgument);
  config = Config();
  config["num_layers"] = 3;  // the checkpoint has 2
  EXPECT_EQ(testing::CreateTransformerStatus(config, FullWeights()).code(),
            absl::StatusCode::kNotFound);
}

TEST(Flux1Transformer, RefusesTpDegreeNotDividingHeads) {
  testing::ExpectTpDegreeRefused(kFlux1, 3);
}

// A communicator whose collectives fail as a broken group's do.
class BrokenCommunicator : public comm::Communicator {
 public:
  BrokenCommunicator(int rank, int world) : rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  absl::Status AllReduceSum(torch::Tensor&) override { return absl::UnavailableError("peer gone"); }
  absl::Status AllReduceMax(torch::Tensor&) override { return absl::UnavailableError("peer gone"); }
  absl::Status Broadcast(torch::Tensor&, int) override { return absl::UnavailableError("peer gone"); }
  absl::Status AllGather(const torch::Tensor&, torch::Tensor&) override {
    return absl::UnavailableError("peer gone");
  }
  absl::Status Barrier() override { return absl::UnavailableError("peer gone"); }
  comm::CommStats Stats() const override { return {}; }

 private:
  int rank_, world_;
};

TEST(Flux1Transformer, BrokenGroupSurfacesAsUnavailable) {
  auto config = Config();
  const int64_t d = config["num_attention_heads"].get<int64_t>() *
                    config["attention_head_dim"].get<int64_t>();
  auto sd = testing::SliceForRank(FullWeights(), testing::Flux1TestPlan(d), 0, 2);
  BrokenCommunicator comm(0, 2);
  auto model = models::CreateTransformer(config, sd, &comm);
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = (*model)->Forward(Step0Inputs());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable) << out.status();
}

}  // namespace
}  // namespace ditserve
