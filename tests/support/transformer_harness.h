// Test support for the diffusion transformer tests (FLUX.1, FLUX.2, Qwen-Image) on the tiny
// fixture checkpoints: a transformer's config, full float32 weights and per-rank shards (production
// loader, built-in plan), forward arguments from reference tensors, and the checks every model
// shares: parity at tp = 1, in bfloat16 and at tp = 2 / 4 on in-process ranks
// (comm::RunLocalGroup), the state dict shapes, and configs / tp degrees the factory refuses.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/transformer.h"
#include "sharding/state_dict.h"
#include "comm/communicator.h"

namespace ditserve::testing {

using ForwardArgs = std::map<std::string, torch::Tensor>;

// A tiny fixture transformer: FixturesDir()/<model>/transformer, whose config.json names
// `class_name` (the built-in TP plan its shards are loaded with).
struct FixtureTransformer {
  const char* model;       // "flux1-tiny"
  const char* class_name;  // "FluxTransformer2DModel"
};

std::string TransformerDir(const FixtureTransformer& t);
// config.json, parsed afresh on every call (tests edit their copy); on error a test failure and
// an empty object.
nlohmann::json TransformerConfig(const FixtureTransformer& t);
// Every tensor replicated, float32 (LoadComponentFullFloat32), loaded once per model.
const sharding::ShardedStateDict& TransformerFullWeights(const FixtureTransformer& t);
// This rank's shard through the production loader with the built-in plan of `t.class_name` (the
// reference's, AdaLN modulation replicated), or with the modulation sharded as the server does by
// default (sharding::AddModulationSharding).
absl::StatusOr<sharding::ShardedStateDict> LoadTransformerShard(const FixtureTransformer& t,
                                                                int rank, int world,
                                                                bool shard_modulation = false);

// args[name] = Ref(prefix + name) for every name.
ForwardArgs RefArguments(const std::string& prefix, std::initializer_list<const char*> names);

// CreateTransformer(config) on `sd` with a single-rank communicator, run on `args`. EXPECTs that
// it builds, is `t.class_name` and runs; the output, or an undefined tensor.
torch::Tensor RunTransformerTp1(const FixtureTransformer& t, const sharding::ShardedStateDict& sd,
                                const ForwardArgs& args);
// CreateTransformer(config) on `sd` with a single-rank communicator: only its status.
absl::Status CreateTransformerStatus(const nlohmann::json& config,
                                     const sharding::ShardedStateDict& sd);

// The full weights at tp = 1 on `args`: `reference`'s shape, relative error below 1e-4.
void ExpectTp1MatchesReference(const FixtureTransformer& t, const ForwardArgs& args,
                               const torch::Tensor& reference);
// The full weights cast to bfloat16 at tp = 1 on `args`: a bfloat16 output within 2e-2 of
// `reference` (float32) but not equal to it (it really ran in bf16). The output, or undefined.
torch::Tensor ExpectBfloat16CloseToReference(const FixtureTransformer& t, const ForwardArgs& args,
                                             const torch::Tensor& reference);

// This rank's model, built from its shard on `comm`, and its local attention heads (-1: not
// reported, not checked).
struct RankModel {
  std::unique_ptr<models::DiffusionTransformer> model;
  int64_t local_heads = -1;
};
using RankModelBuilder = std::function<absl::StatusOr<RankModel>(
    const sharding::ShardedStateDict& shard, comm::Communicator& comm)>;

// A RankModel straight from Model::Load(parsed, shard, &comm) (not through the factory), with the
// model's local_heads().
template <typename Model, typename ParsedConfig>
absl::StatusOr<RankModel> LoadRankModel(const ParsedConfig& parsed,
                                        const sharding::ShardedStateDict& shard,
                                        comm::Communicator& comm) {
  auto model = Model::Load(parsed, shard, &comm);
  if (!model.ok()) return model.status();
  const int64_t heads = (*model)->local_heads();
  return RankModel{*std::move(model), heads};
}

// What every rank of a tensor-parallel forward must meet.
struct TensorParallelExpectations {
  torch::Tensor reference;   // diffusers' output
  uint64_t allreduces = 0;   // per rank for one forward (diffusers hooks/tensor_parallel.py)
  // The extra all-reduces per forward with the modulation sharded (one per modulation GEMM).
  uint64_t modulation_allreduces = 0;
  int64_t local_heads = -1;  // -1: not checked
};

// Runs the full weights at tp = 1, then, for the reference's plan and for the served one (modulation
// sharded), `world` in-process ranks (comm::RunLocalGroup) that each load their shard
// (LoadTransformerShard), build their model with `build` (null: CreateTransformer on the config)
// and run `args`. Every rank's output is within 1e-4 of the reference and 1e-5 of tp = 1, equal to
// rank 0's, after exactly `allreduces` (+ `modulation_allreduces` when sharded) all-reduces and
// with `local_heads` heads.
void ExpectTensorParallelMatches(const FixtureTransformer& t, int world, const ForwardArgs& args,
                                 const TensorParallelExpectations& expected,
                                 const RankModelBuilder& build = nullptr);

// CreateTransformer on every rank of an in-process group of `world` ranks (the full weights, as
// if sharded) fails with INVALID_ARGUMENT (a degree that does not divide the heads).
void ExpectTpDegreeRefused(const FixtureTransformer& t, int world);

// A state dict shapes table (what the model and the benchmark assume) has exactly the checkpoint's
// tensors and shapes.
void ExpectShapesMatchWeights(const std::map<std::string, std::vector<int64_t>>& shapes,
                              const sharding::ShardedStateDict& sd);
// The number of parameters of a state dict shapes table.
int64_t ParameterCount(const std::map<std::string, std::vector<int64_t>>& shapes);

}  // namespace ditserve::testing
