#include "tests/support/transformer_harness.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <mutex>

#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/transformer_factory.h"
#include "sharding/loader.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"
#include "comm/local_communicator.h"

namespace ditserve::testing {

std::string TransformerDir(const FixtureTransformer& t) {
  return FixturesDir() + "/" + t.model + "/transformer";
}

nlohmann::json TransformerConfig(const FixtureTransformer& t) {
  auto text = ReadTextFile(TransformerDir(t) + "/config.json");
  if (!text.ok()) {
    ADD_FAILURE() << text.status();
    return nlohmann::json::object();
  }
  return ValueOrAddFailure(ParseJsonObject(*text));
}

const sharding::ShardedStateDict& TransformerFullWeights(const FixtureTransformer& t) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, sharding::ShardedStateDict>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded->find(t.model);
  if (it == loaded->end()) {
    it = loaded->emplace(t.model, LoadComponentFullFloat32(TransformerDir(t))).first;
  }
  return it->second;
}

absl::StatusOr<sharding::ShardedStateDict> LoadTransformerShard(const FixtureTransformer& t,
                                                                int rank, int world,
                                                                bool shard_modulation) {
  ASSIGN_OR_RETURN(auto plan, sharding::BuiltinTpPlan(t.class_name, TransformerConfig(t)));
  if (shard_modulation) sharding::AddModulationSharding(&plan);
  return sharding::LoadShard(TransformerDir(t), &plan, rank, world, sharding::LoadOptions{});
}

ForwardArgs RefArguments(const std::string& prefix, std::initializer_list<const char*> names) {
  ForwardArgs args;
  for (const char* name : names) args[name] = Ref(prefix + name);
  return args;
}

torch::Tensor RunTransformerTp1(const FixtureTransformer& t, const sharding::ShardedStateDict& sd,
                                const ForwardArgs& args) {
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = models::CreateTransformer(TransformerConfig(t), sd, comm.get());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  EXPECT_EQ((*model)->class_name(), t.class_name);
  auto out = (*model)->Forward(args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : torch::Tensor();
}

absl::Status CreateTransformerStatus(const nlohmann::json& config,
                                     const sharding::ShardedStateDict& sd) {
  auto comm = comm::MakeSingleRankCommunicator();
  return models::CreateTransformer(config, sd, comm.get()).status();
}

void ExpectTp1MatchesReference(const FixtureTransformer& t, const ForwardArgs& args,
                               const torch::Tensor& reference) {
  auto out = RunTransformerTp1(t, TransformerFullWeights(t), args);
  ASSERT_TRUE(out.defined());
  EXPECT_EQ(out.sizes(), reference.sizes());
  const double err = RelativeError(out, reference);
  EXPECT_LT(err, 1e-4) << "relative error " << err;
  std::printf("tp 1 relative error vs diffusers: %.3g\n", err);
}

torch::Tensor ExpectBfloat16CloseToReference(const FixtureTransformer& t, const ForwardArgs& args,
                                             const torch::Tensor& reference) {
  auto out = RunTransformerTp1(t, CastWeights(TransformerFullWeights(t), torch::kBFloat16), args);
  EXPECT_TRUE(out.defined());
  if (!out.defined()) return out;
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const double err = RelativeError(out, reference);
  EXPECT_LT(err, 2e-2) << "bf16 relative error " << err;
  EXPECT_GT(err, 0.0);
  return out;
}

void ExpectTensorParallelMatches(const FixtureTransformer& t, int world, const ForwardArgs& args,
                                 const TensorParallelExpectations& expected,
                                 const RankModelBuilder& build) {
  const auto tp1 = RunTransformerTp1(t, TransformerFullWeights(t), args);
  ASSERT_TRUE(tp1.defined());
  const auto config = TransformerConfig(t);
  for (const bool shard_modulation : {false, true}) {
    SCOPED_TRACE(shard_modulation ? "modulation sharded (served plan)"
                                  : "modulation replicated (reference plan)");
    std::mutex mu;
    std::vector<torch::Tensor> outs(world);
    std::vector<uint64_t> allreduces(world);
    std::vector<int64_t> heads(world, -1);
    auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
      ASSIGN_OR_RETURN(auto shard, LoadTransformerShard(t, comm.rank(), world, shard_modulation));
      RankModel built;
      if (build) {
        ASSIGN_OR_RETURN(built, build(shard, comm));
      } else {
        ASSIGN_OR_RETURN(built.model, models::CreateTransformer(config, shard, &comm));
      }
      ASSIGN_OR_RETURN(auto out, built.model->Forward(args));
      std::lock_guard<std::mutex> lock(mu);
      outs[comm.rank()] = out;
      allreduces[comm.rank()] = comm.Stats().allreduce_count;
      heads[comm.rank()] = built.local_heads;
      return absl::OkStatus();
    });
    ASSERT_TRUE(status.ok()) << status;
    const uint64_t want_allreduces =
        expected.allreduces + (shard_modulation ? expected.modulation_allreduces : 0);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(outs[r].defined());
      const double err = RelativeError(outs[r], expected.reference);
      EXPECT_LT(err, 1e-4) << "rank " << r << " of " << world;
      const double vs_tp1 = RelativeError(outs[r], tp1);
      if (r == 0) {
        std::printf("tp %d, modulation %s: relative error vs diffusers %.3g, vs tp 1 %.3g\n", world,
                    shard_modulation ? "sharded" : "replicated", err, vs_tp1);
      }
      EXPECT_LT(vs_tp1, 1e-5) << "rank " << r << " of " << world << " vs tp=1";
      EXPECT_EQ(allreduces[r], want_allreduces) << "rank " << r;
      if (expected.local_heads >= 0) {
        EXPECT_EQ(heads[r], expected.local_heads) << "rank " << r;
      }
      // Every rank returns the same full output.
      EXPECT_TRUE(torch::equal(outs[r], outs[0]));
    }
  }
}

void ExpectTpDegreeRefused(const FixtureTransformer& t, int world) {
  const auto config = TransformerConfig(t);
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    sharding::ShardedStateDict sd(comm.rank(), world, TransformerFullWeights(t).tensors(), {});
    auto model = models::CreateTransformer(config, sd, &comm);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

void ExpectShapesMatchWeights(const std::map<std::string, std::vector<int64_t>>& shapes,
                              const sharding::ShardedStateDict& sd) {
  const auto& tensors = sd.tensors();
  ASSERT_EQ(shapes.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    auto it = shapes.find(name);
    ASSERT_NE(it, shapes.end()) << name;
    EXPECT_EQ(it->second, t.sizes().vec()) << name;
  }
}

int64_t ParameterCount(const std::map<std::string, std::vector<int64_t>>& shapes) {
  int64_t params = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    params += n;
  }
  return params;
}

}  // namespace ditserve::testing
