// Tensor-parallel linear layers (models/tp) in real in-process groups of 1, 2 and 4 ranks:
// results equal the unsharded computation, one all-reduce per rowwise call, bias added once.
#include <gtest/gtest.h>

#include <mutex>

#include "models/common/module_loader.h"
#include "common/torch_guard.h"
#include "models/tp/column_parallel_linear.h"
#include "models/tp/modulation_bank.h"
#include "models/tp/parallel_module_loader.h"
#include "models/tp/row_parallel_linear.h"
#include "tests/unit/tp_test_sharding.h"
#include "comm/local_communicator.h"

namespace ditserve {
namespace {

using sharding::TpStyle;
using testing::TestPlanEntry;

struct Weights {
  sharding::ShardedStateDict full;
  std::vector<TestPlanEntry> plan;
};

// up: 16 → 32 colwise; down: 32 → 16 rowwise; qkv: 16 → [8, 16, 8] packed colwise;
// fused: [16 | 32] → 16 packed rowwise; split: 16 → 8 rowwise_split_input; rep: replicated.
const Weights& TestWeights() {
  static const Weights* w = [] {
    torch::manual_seed(7);
    auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    std::map<std::string, torch::Tensor> t = {
        {"up.weight", torch::randn({32, 16}, opts)},    {"up.bias", torch::randn({32}, opts)},
        {"down.weight", torch::randn({16, 32}, opts)},  {"down.bias", torch::randn({16}, opts)},
        {"qkv.weight", torch::randn({32, 16}, opts)},   {"qkv.bias", torch::randn({32}, opts)},
        {"fused.weight", torch::randn({16, 48}, opts)}, {"fused.bias", torch::randn({16}, opts)},
        {"split.weight", torch::randn({8, 16}, opts)},  {"split.bias", torch::randn({8}, opts)},
        {"rep.weight", torch::randn({8, 16}, opts)},
    };
    std::vector<TestPlanEntry> plan = {
        {"up", TpStyle::kColwise, {}},
        {"down", TpStyle::kRowwise, {}},
        {"qkv", TpStyle::kPackedColwise, {1, 2, 1}},
        {"fused", TpStyle::kPackedRowwise, {1, 2}},
        {"split", TpStyle::kRowwiseSplitInput, {}},
    };
    return new Weights{sharding::ShardedStateDict(0, 1, std::move(t), {}), std::move(plan)};
  }();
  return *w;
}

torch::Tensor Full(const std::string& name) { return *TestWeights().full.Get(name); }

class TpLayersTest : public ::testing::TestWithParam<int> {};

TEST_P(TpLayersTest, MatchTheUnshardedComputation) {
  const int world = GetParam();
  torch::manual_seed(11);
  const auto x = torch::randn({2, 5, 16}, torch::kFloat64);
  const auto up_full = torch::linear(x, Full("up.weight"), Full("up.bias"));
  const auto mlp_full = torch::linear(torch::gelu(up_full), Full("down.weight"), Full("down.bias"));
  const auto qkv_full = torch::linear(x, Full("qkv.weight"), Full("qkv.bias"));
  const auto fused_in = torch::cat({x, up_full}, -1);
  const auto fused_full = torch::linear(fused_in, Full("fused.weight"), Full("fused.bias"));
  const auto split_full = torch::linear(x, Full("split.weight"), Full("split.bias"));

  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    auto sd = testing::SliceForRank(TestWeights().full, TestWeights().plan, r, world);
    models::tp::ParallelModuleLoader loader(sd, &comm);
    auto up = loader.LoadLinear("up");
    auto down = loader.LoadLinear("down");
    auto qkv = loader.LoadLinear("qkv");
    auto fused = loader.LoadLinear("fused");
    auto split = loader.LoadLinear("split");
    auto rep = loader.LoadLinear("rep");
    for (auto* l : {&up, &down, &qkv, &fused, &split, &rep}) {
      if (!l->ok()) return l->status();
    }
    EXPECT_EQ((*up)->style(), TpStyle::kColwise);
    EXPECT_EQ((*down)->style(), TpStyle::kRowwise);
    EXPECT_EQ((*rep)->style(), TpStyle::kReplicated);
    EXPECT_EQ((*up)->out_features(), 32 / world);
    EXPECT_EQ((*down)->in_features(), 32 / world);
    EXPECT_EQ((*split)->in_features(), 16);  // takes the replicated input

    // colwise: this rank's contiguous feature shard, no communication.
    const uint64_t before = comm.Stats().allreduce_count;
    auto up_local = (*up)->Forward(x);
    EXPECT_EQ(comm.Stats().allreduce_count, before);
    EXPECT_TRUE(torch::allclose(up_local, up_full.narrow(-1, r * 32 / world, 32 / world)));

    // colwise → rowwise: the full result, exactly one all-reduce (when world > 1).
    auto mlp = (*down)->Forward(torch::gelu(up_local));
    EXPECT_EQ(comm.Stats().allreduce_count, before + (world > 1 ? 1 : 0));
    EXPECT_TRUE(torch::allclose(mlp, mlp_full, 1e-9, 1e-9));

    // packed colwise: per-block shards [q_r, k_r, v_r].
    EXPECT_EQ((*qkv)->local_blocks(), (std::vector<int64_t>{8 / world, 16 / world, 8 / world}));
    auto qkv_local = (*qkv)->Forward(x);
    auto expected = torch::cat({qkv_full.narrow(-1, r * 8 / world, 8 / world),
                                qkv_full.narrow(-1, 8 + r * 16 / world, 16 / world),
                                qkv_full.narrow(-1, 24 + r * 8 / world, 8 / world)},
                               -1);
    EXPECT_TRUE(torch::allclose(qkv_local, expected));

    // packed rowwise on [x_r | up_r] (FLUX.1 single-block proj_out layout).
    auto fused_local_in = torch::cat({x.narrow(-1, r * 16 / world, 16 / world), up_local}, -1);
    auto fused_out = (*fused)->Forward(fused_local_in);
    EXPECT_TRUE(torch::allclose(fused_out, fused_full, 1e-9, 1e-9));
    // The same from the two parts, never joined: one GEMM per part, still one all-reduce.
    const uint64_t before_joined = comm.Stats().allreduce_count;
    auto joined_out = (*fused)->ForwardJoined({x.narrow(-1, r * 16 / world, 16 / world), up_local});
    EXPECT_TRUE(torch::allclose(joined_out, fused_full, 1e-9, 1e-9));
    EXPECT_EQ(comm.Stats().allreduce_count, before_joined + (world > 1 ? 1 : 0));
    // rowwise_split_input joins its parts (the layer slices the joined input itself).
    auto split_joined = (*split)->ForwardJoined({x.narrow(-1, 0, 6), x.narrow(-1, 6, 10)});
    EXPECT_TRUE(torch::allclose(split_joined, split_full, 1e-9, 1e-9));

    // rowwise_split_input: replicated input, the layer slices it.
    auto split_out = (*split)->Forward(x);
    EXPECT_TRUE(torch::allclose(split_out, split_full, 1e-9, 1e-9));
    EXPECT_EQ(comm.Stats().allreduce_count, before + (world > 1 ? 5 : 0));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(TpLayersTest, RowwiseBiasIsAddedOnce) {
  const int world = GetParam();
  std::map<std::string, torch::Tensor> t = {
      {"o.weight", torch::zeros({3, 8})},
      {"o.bias", torch::tensor({1.0f, 2.0f, 3.0f})},
  };
  sharding::ShardedStateDict full(0, 1, std::move(t), {});
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    auto sd = testing::SliceForRank(full, {{"o", TpStyle::kRowwise, {}}}, comm.rank(), world);
    auto layer = models::tp::RowParallelLinear::Load(sd, "o", &comm);
    if (!layer.ok()) return layer.status();
    auto y = (*layer)->Forward(torch::ones({1, 8 / world}));
    EXPECT_TRUE(torch::equal(y, torch::tensor({{1.0f, 2.0f, 3.0f}})));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// ModulationBank: three modulation layers (rowwise_split_input as served at tp > 1, replicated
// otherwise) as one GEMM give each layer's own output for SiLU(temb), with a LoRA term on one of
// them, in one all-reduce; the same temb again costs nothing, another recomputes; the layers still
// work alone afterwards (their weights are views of the stack).
TEST_P(TpLayersTest, ModulationBankIsEachLayerInOneGemmAndOneAllReduce) {
  const int world = GetParam();
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  std::map<std::string, torch::Tensor> t = {
      {"m0.weight", torch::randn({12, 16}, opts)}, {"m0.bias", torch::randn({12}, opts)},
      {"m1.weight", torch::randn({6, 16}, opts)},  {"m1.bias", torch::randn({6}, opts)},
      {"m2.weight", torch::randn({4, 16}, opts)},  {"m2.bias", torch::randn({4}, opts)},
  };
  const sharding::ShardedStateDict full(0, 1, t, {});
  const auto temb = torch::randn({2, 16}, opts);
  const auto lora_a = torch::randn({3, 16}, opts), lora_b = torch::randn({6, 3}, opts);
  std::vector<torch::Tensor> want;
  for (const char* m : {"m0", "m1", "m2"}) {
    want.push_back(torch::linear(torch::silu(temb), t.at(std::string(m) + ".weight"),
                                 t.at(std::string(m) + ".bias")));
  }
  want[1] = want[1] + torch::mm(torch::mm(torch::silu(temb), lora_a.t()), lora_b.t());
  const TpStyle style = world > 1 ? TpStyle::kRowwiseSplitInput : TpStyle::kReplicated;
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    std::vector<TestPlanEntry> plan;
    if (world > 1) plan = {{"m0", style, {}}, {"m1", style, {}}, {"m2", style, {}}};
    auto sd = testing::SliceForRank(full, plan, comm.rank(), world);
    models::tp::ParallelModuleLoader loader(sd, &comm);
    std::vector<models::tp::ModulationConsumer> consumers;
    std::vector<models::ModulationSource> sources(3);
    std::vector<std::shared_ptr<models::LinearLayer>> layers;
    for (int i = 0; i < 3; ++i) {
      auto layer = loader.LoadLinear("m" + std::to_string(i));
      if (!layer.ok()) return layer.status();
      layers.push_back(std::shared_ptr<models::LinearLayer>(std::move(*layer)));
      consumers.push_back({layers.back(), [&sources, i](models::ModulationSource s) { sources[i] = std::move(s); }});
    }
    // This rank's slice of the LoRA term: A's columns for a split layer, B whole.
    const int64_t width = 16 / world;
    layers[1]->SetLoraTerms({{lora_a.narrow(1, comm.rank() * width, width), lora_b}});
    const absl::Status shared = models::tp::ShareModulation(consumers, &comm, "test");
    if (!shared.ok()) return shared;
    const uint64_t before = comm.Stats().allreduce_count;
    for (int i : {2, 0, 1}) {
      auto y = sources[i](temb);
      EXPECT_TRUE(torch::allclose(y, want[i], 1e-9, 1e-9)) << "part " << i;
    }
    EXPECT_EQ(comm.Stats().allreduce_count, before + (world > 1 ? 1 : 0)) << "one all-reduce for all";
    const auto other = temb * 2;
    auto again = sources[0](other);
    EXPECT_TRUE(torch::allclose(again, torch::linear(torch::silu(other), t.at("m0.weight"), t.at("m0.bias")),
                                1e-9, 1e-9));
    EXPECT_EQ(comm.Stats().allreduce_count, before + (world > 1 ? 2 : 0)) << "another temb recomputes";
    // A layer alone still computes its own output (weights are views of the stack).
    layers[1]->ClearLoraTerms();
    EXPECT_TRUE(torch::allclose(layers[2]->Forward(torch::silu(temb)), want[2], 1e-9, 1e-9));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(TpLayers, ModulationBankRefusesMixedLayers) {
  std::map<std::string, torch::Tensor> t = {{"a.weight", torch::zeros({4, 8})},
                                            {"b.weight", torch::zeros({4, 6})}};
  const sharding::ShardedStateDict sd(0, 1, std::move(t), {});
  auto comm = comm::MakeSingleRankCommunicator();
  models::tp::ParallelModuleLoader loader(sd, comm.get());
  std::shared_ptr<models::LinearLayer> a(std::move(*loader.LoadLinear("a")));
  std::shared_ptr<models::LinearLayer> b(std::move(*loader.LoadLinear("b")));
  auto bank = models::tp::ModulationBank::Stack({a, b}, comm.get(), "test");
  ASSERT_FALSE(bank.ok());
  EXPECT_EQ(bank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bank.status().message().find("cannot share a GEMM"), absl::string_view::npos) << bank.status();
}

INSTANTIATE_TEST_SUITE_P(World, TpLayersTest, ::testing::Values(1, 2, 4));

TEST(TpLayers, LoadersCheckStylesAndGroups) {
  auto sd = testing::SliceForRank(TestWeights().full, TestWeights().plan, 0, 2);
  // The replicated loader refuses sharded modules.
  models::ReplicatedModuleLoader replicated(sd);
  EXPECT_EQ(replicated.LoadLinear("up").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(replicated.LoadLinear("rep").ok());
  // Classes refuse the wrong style.
  EXPECT_FALSE(models::tp::ColumnParallelLinear::Load(sd, "down").ok());
  // A rowwise layer needs the communicator of its group.
  auto single = comm::MakeSingleRankCommunicator();
  EXPECT_EQ(models::tp::RowParallelLinear::Load(sd, "down", single.get()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(models::tp::RowParallelLinear::Load(sd, "down", nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Packed blocks that do not add up are refused.
  std::map<std::string, sharding::ModuleSharding> modules = {
      {"qkv", {TpStyle::kPackedColwise, {4, 4}}}};
  sharding::ShardedStateDict bad(0, 2, {{"qkv.weight", torch::zeros({16, 16})}}, modules);
  EXPECT_EQ(models::tp::ColumnParallelLinear::Load(bad, "qkv").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A missing module is NOT_FOUND.
  models::tp::ParallelModuleLoader loader(sd, single.get());
  EXPECT_EQ(loader.LoadLinear("nope").status().code(), absl::StatusCode::kNotFound);
}

// Fails every collective as a broken group does.
class FailingCommunicator : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllReduceSum(torch::Tensor&) override { return absl::UnavailableError("peer died"); }
  absl::Status AllReduceMax(torch::Tensor&) override { return absl::UnavailableError("peer died"); }
  absl::Status Broadcast(torch::Tensor&, int) override { return absl::UnavailableError("x"); }
  absl::Status AllGather(const torch::Tensor&, torch::Tensor&) override {
    return absl::UnavailableError("x");
  }
  absl::Status Barrier() override { return absl::UnavailableError("x"); }
  comm::CommStats Stats() const override { return {}; }
};

TEST(TpLayers, FailedAllReduceThrowsStatusErrorKeepingTheCode) {
  auto sd = testing::SliceForRank(TestWeights().full, TestWeights().plan, 0, 2);
  FailingCommunicator comm;
  auto down = models::tp::RowParallelLinear::Load(sd, "down", &comm);
  ASSERT_TRUE(down.ok()) << down.status();
  auto result = GuardTorch("test forward", [&] {
    return (*down)->Forward(torch::zeros({1, 16}, torch::kFloat64));
  });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(result.status().message()).find("peer died"), std::string::npos);
}

}  // namespace
}  // namespace ditserve
