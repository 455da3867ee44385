// LoRA adapters under tensor parallelism (models/lora/lora_adapter.h, lora_library.h) in real
// in-process groups of 1, 2 and 4 ranks: every tensor-parallel style (colwise, rowwise, packed
// colwise, packed rowwise, rowwise_split_input, replicated) and a FusedLinear of q/k/v, with one
// and two adapters, give the unsharded output of the merged weight W + Σ wᵢ·sᵢ·Bᵢ·Aᵢ; a kohya fused
// q|k|v adapter gives the same as the equivalent per-module one; the base output after an adapted
// call is bit-identical to before; bad adapters and bad choices are refused naming them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <tuple>
#include <unistd.h>

#include "common/remove_tree.h"
#include "comm/local_communicator.h"
#include "models/common/fused_linear.h"
#include "models/lora/lora_library.h"
#include "models/tp/parallel_module_loader.h"
#include "sharding/safetensors_writer.h"
#include "tests/unit/tp_test_sharding.h"

namespace ditserve {
namespace {

namespace fs = std::filesystem;
using sharding::TpStyle;
using testing::TestPlanEntry;

const char* kQkv[] = {"transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k",
                      "transformer_blocks.0.attn.to_v"};

struct Model {
  sharding::ShardedStateDict full;
  std::vector<TestPlanEntry> plan;
  std::map<std::string, std::pair<int64_t, int64_t>> dims;  // out, in
};

// up: 16 → 32 colwise; down: 32 → 16 rowwise; qkv: 16 → [8, 16, 8] packed colwise; fused:
// [16 | 32] → 16 packed rowwise; split: 16 → 8 rowwise_split_input; rep: 16 → 8 replicated;
// to_q / to_k / to_v: 16 → 16 colwise each, fused into one GEMM.
const Model& TestModel() {
  static const Model* m = [] {
    torch::manual_seed(3);
    std::map<std::string, std::pair<int64_t, int64_t>> dims = {
        {"up", {32, 16}}, {"down", {16, 32}}, {"qkv", {32, 16}}, {"fused", {16, 48}},
        {"split", {8, 16}}, {"rep", {8, 16}}, {kQkv[0], {16, 16}}, {kQkv[1], {16, 16}},
        {kQkv[2], {16, 16}}};
    std::map<std::string, torch::Tensor> t;
    for (const auto& [name, d] : dims) {
      t[name + ".weight"] = torch::randn({d.first, d.second});
      t[name + ".bias"] = torch::randn({d.first});
    }
    std::vector<TestPlanEntry> plan = {
        {"up", TpStyle::kColwise, {}},        {"down", TpStyle::kRowwise, {}},
        {"qkv", TpStyle::kPackedColwise, {1, 2, 1}}, {"fused", TpStyle::kPackedRowwise, {1, 2}},
        {"split", TpStyle::kRowwiseSplitInput, {}},  {kQkv[0], TpStyle::kColwise, {}},
        {kQkv[1], TpStyle::kColwise, {}},     {kQkv[2], TpStyle::kColwise, {}}};
    return new Model{sharding::ShardedStateDict(0, 1, std::move(t), {}), std::move(plan), dims};
  }();
  return *m;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/lora_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { (void)ditserve::RemoveTree(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void Write(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
           const std::map<std::string, std::string>& metadata = {}) {
  std::vector<sharding::TensorToWrite> out;
  for (const auto& [name, t] : tensors) {
    out.push_back({name, t.scalar_type() == torch::kFloat64 ? sharding::DType::kF64 : sharding::DType::kF32,
                   t.sizes().vec(), t.data_ptr()});
  }
  ASSERT_TRUE(sharding::WriteSafetensors(path, out, metadata).ok());
}

// A diffusers-format adapter on `modules` with rank r; returns the factors by module.
std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> WriteDiffusersAdapter(
    const std::string& path, const std::vector<std::string>& modules, int64_t r, uint64_t seed,
    const std::string& metadata_json) {
  torch::manual_seed(seed);
  std::map<std::string, torch::Tensor> file;
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> factors;
  for (const std::string& m : modules) {
    const auto [out, in] = TestModel().dims.at(m);
    torch::Tensor a = torch::randn({r, in}) * 0.3, b = torch::randn({out, r}) * 0.3;
    file["transformer." + m + ".lora_A.weight"] = a;
    file["transformer." + m + ".lora_B.weight"] = b;
    factors[m] = {a, b};
  }
  Write(path, file, {{"format", "pt"}, {"lora_adapter_metadata", metadata_json}});
  return factors;
}

torch::Tensor Full(const std::string& name) { return *TestModel().full.Get(name); }

// This rank's shard with tensors of its own: SliceForRank shares replicated tensors between the
// in-process ranks, which a real rank (its own process) never does, and a merge writes buffers.
sharding::ShardedStateDict OwnShard(int rank, int world) {
  auto sd = testing::SliceForRank(TestModel().full, TestModel().plan, rank, world);
  std::map<std::string, torch::Tensor> own;
  for (const auto& [name, t] : sd.tensors()) own[name] = t.clone();
  return sharding::ShardedStateDict(rank, world, std::move(own), sd.modules());
}

struct Layers {
  models::LinearRegistry registry;
  std::map<std::string, std::shared_ptr<models::LinearLayer>> owned;
  std::optional<models::FusedLinear> qkv_fused;
};

absl::Status BuildLayers(const sharding::ShardedStateDict& sd, comm::Communicator* comm, Layers* out) {
  models::tp::ParallelModuleLoader loader(sd, comm, &out->registry);
  std::vector<std::shared_ptr<models::LinearLayer>> parts;
  for (const auto& [name, d] : TestModel().dims) {
    auto l = loader.LoadLinear(name);
    if (!l.ok()) return l.status();
    out->owned[name] = std::shared_ptr<models::LinearLayer>(std::move(*l));
  }
  for (const char* q : kQkv) parts.push_back(out->owned.at(q));
  auto fused = models::FusedLinear::Fuse(parts, "attn");
  if (!fused.ok()) return fused.status();
  out->qkv_fused.emplace(std::move(*fused));
  return absl::OkStatus();
}

// Every layer's output for input x on this rank, as the model would consume it.
std::map<std::string, torch::Tensor> Outputs(const Layers& l, const torch::Tensor& x,
                                             const torch::Tensor& x32, int rank, int world) {
  std::map<std::string, torch::Tensor> y;
  y["up"] = l.owned.at("up")->Forward(x);
  y["down"] = l.owned.at("down")->Forward(x32.narrow(-1, rank * 32 / world, 32 / world));
  y["qkv"] = l.owned.at("qkv")->Forward(x);
  auto xf = torch::cat({x.narrow(-1, rank * 16 / world, 16 / world),
                        x32.narrow(-1, rank * 32 / world, 32 / world)}, -1);
  y["fused"] = l.owned.at("fused")->Forward(xf);
  y["split"] = l.owned.at("split")->Forward(x);
  y["rep"] = l.owned.at("rep")->Forward(x);
  auto qkv = l.qkv_fused->Forward(x);
  for (int i = 0; i < 3; ++i) y[kQkv[i]] = qkv[i];
  return y;
}

// The full (unsharded) outputs with the weights merged: W + Σ deltas[m].
std::map<std::string, torch::Tensor> MergedOutputs(
    const std::map<std::string, torch::Tensor>& deltas, const torch::Tensor& x,
    const torch::Tensor& x32) {
  auto W = [&](const std::string& m) {
    auto it = deltas.find(m);
    return it == deltas.end() ? Full(m + ".weight") : Full(m + ".weight") + it->second;
  };
  std::map<std::string, torch::Tensor> y;
  for (const std::string m : {"up", "qkv", "split", "rep", kQkv[0], kQkv[1], kQkv[2]}) {
    y[m] = torch::linear(x, W(m), Full(m + ".bias"));
  }
  y["down"] = torch::linear(x32, W("down"), Full("down.bias"));
  y["fused"] = torch::linear(torch::cat({x, x32}, -1), W("fused"), Full("fused.bias"));
  return y;
}

// This rank's part of a full output, as the layer's style leaves it.
torch::Tensor LocalPart(const std::string& m, const torch::Tensor& full, int rank, int world) {
  if (m == "up" || m == kQkv[0] || m == kQkv[1] || m == kQkv[2]) {
    const int64_t n = full.size(-1) / world;
    return full.narrow(-1, rank * n, n);
  }
  if (m == "qkv") {
    return torch::cat({full.narrow(-1, rank * 8 / world, 8 / world),
                       full.narrow(-1, 8 + rank * 16 / world, 16 / world),
                       full.narrow(-1, 24 + rank * 8 / world, 8 / world)}, -1);
  }
  return full;  // rowwise styles all-reduce; replicated is whole
}

// (tp degree, mode): every case runs merged and as runtime terms.
class LoraAdapterTest : public ::testing::TestWithParam<std::tuple<int, lora::LoraMode>> {
 protected:
  int World() const { return std::get<0>(GetParam()); }
  lora::LoraMode Mode() const { return std::get<1>(GetParam()); }
};

TEST_P(LoraAdapterTest, EveryStyleMatchesTheMergedWeightsAndRestoresExactly) {
  const int world = World();
  TempDir dir;
  std::vector<std::string> all;
  for (const auto& [m, d] : TestModel().dims) all.push_back(m);
  // "a": every module, r 4, alpha 8 → s = 2. "b": some modules, r 2, alpha 1 → s = 0.5.
  auto fa = WriteDiffusersAdapter(dir.File("a.safetensors"), all, 4, 21,
                                  R"({"r": 4, "lora_alpha": 8})");
  auto fb = WriteDiffusersAdapter(dir.File("b.safetensors"), {"up", "down", "fused", kQkv[1]}, 2, 22,
                                  R"({"r": 2, "lora_alpha": 1})");
  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, 16}), x32 = torch::randn({2, 3, 32});
  std::map<std::string, torch::Tensor> one, two;
  for (const auto& [m, ab] : fa) {
    one[m] = 2.0 * 0.7 * torch::mm(ab.second, ab.first);
    two[m] = one[m].clone();
  }
  for (const auto& [m, ab] : fb) two[m] = two[m] + 0.5 * -1.5 * torch::mm(ab.second, ab.first);
  const auto expect_one = MergedOutputs(one, x, x32), expect_two = MergedOutputs(two, x, x32);
  const auto expect_base = MergedOutputs({}, x, x32);

  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    auto sd = OwnShard(r, world);
    Layers layers;
    if (auto s = BuildLayers(sd, &comm, &layers); !s.ok()) return s;
    sharding::LoadOptions opts;
    opts.staging_buffer_bytes = 64;  // several chunks per factor
    auto lib = lora::LoraLibrary::Load({{"a", dir.File("a.safetensors")}, {"b", dir.File("b.safetensors")}},
                                       layers.registry, r, world, opts, Mode());
    if (!lib.ok()) return lib.status();
    EXPECT_EQ((*lib)->cards().size(), 2u);
    EXPECT_EQ((*lib)->cards()[0].modules, static_cast<int64_t>(all.size()));
    EXPECT_EQ((*lib)->cards()[1].rank, 2);

    const auto before = Outputs(layers, x, x32, r, world);
    std::map<std::string, torch::Tensor> weights_before;
    for (const auto& [m, l] : layers.owned) weights_before[m] = l->weight().clone();
    for (const auto& [m, y] : before) {
      EXPECT_TRUE(torch::allclose(y, LocalPart(m, expect_base.at(m), r, world), 1e-4, 1e-4)) << m;
    }
    {
      auto active = (*lib)->Activate({{"a", 0.7f}});
      if (!active.ok()) return active.status();
      if (Mode() == lora::LoraMode::kRuntime) {
        EXPECT_EQ(active->layers(), all.size());
      } else {  // one buffer per layer, except to_q / to_k / to_v, which share the fused one
        EXPECT_EQ(active->merged_buffers(), all.size() - 2);
        EXPECT_FALSE(layers.owned.at("up")->has_lora());
      }
      const uint64_t reduces = comm.Stats().allreduce_count;
      const auto y = Outputs(layers, x, x32, r, world);
      // The adapted rowwise layers (down, fused, split) keep exactly one all-reduce each.
      EXPECT_EQ(comm.Stats().allreduce_count, reduces + (world > 1 ? 3 : 0));
      for (const auto& [m, out] : y) {
        EXPECT_TRUE(torch::allclose(out, LocalPart(m, expect_one.at(m), r, world), 1e-4, 1e-4))
            << m << " world " << world;
      }
    }
    {
      auto active = (*lib)->Activate({{"a", 0.7f}, {"b", -1.5f}});
      if (!active.ok()) return active.status();
      const auto y = Outputs(layers, x, x32, r, world);
      for (const auto& [m, out] : y) {
        EXPECT_TRUE(torch::allclose(out, LocalPart(m, expect_two.at(m), r, world), 1e-4, 1e-4))
            << m << " world " << world;
      }
    }
    const auto after = Outputs(layers, x, x32, r, world);
    for (const auto& [m, y] : after) EXPECT_TRUE(torch::equal(y, before.at(m))) << m;
    for (const auto& [m, l] : layers.owned) EXPECT_TRUE(torch::equal(l->weight(), weights_before.at(m))) << m;
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(LoraAdapterTest, KohyaFusedQkvEqualsTheSplitAdapter) {
  const int world = World();
  TempDir dir;
  torch::manual_seed(9);
  const int64_t r = 2;
  // Stored in float64: the model is float32, so the slices go through the loader's staging
  // buffer (converted chunk by chunk), not straight into the destination.
  torch::Tensor down = torch::randn({r, 16}, torch::kFloat64) * 0.3,
                up = torch::randn({48, r}, torch::kFloat64) * 0.3;
  Write(dir.File("kohya.safetensors"),
        {{"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", down},
         {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", up},
         {"lora_unet_double_blocks_0_img_attn_qkv.alpha", torch::tensor(1.0, torch::kFloat64)}});
  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, 16}), x32 = torch::randn({2, 3, 32});
  std::map<std::string, torch::Tensor> deltas;
  for (int i = 0; i < 3; ++i) {
    deltas[kQkv[i]] = (0.5 * torch::mm(up.narrow(0, 16 * i, 16), down)).to(torch::kFloat32);
  }
  const auto expect = MergedOutputs(deltas, x, x32);
  auto status = comm::RunLocalGroup(world, [&](comm::Communicator& comm) -> absl::Status {
    const int rank = comm.rank();
    auto sd = OwnShard(rank, world);
    Layers layers;
    if (auto s = BuildLayers(sd, &comm, &layers); !s.ok()) return s;
    sharding::LoadOptions opts;
    opts.staging_buffer_bytes = 24;  // three float64 values a chunk
    auto lib = lora::LoraLibrary::Load({{"k", dir.File("kohya.safetensors")}}, layers.registry, rank,
                                       world, opts, Mode());
    if (!lib.ok()) return lib.status();
    EXPECT_EQ((*lib)->cards()[0].format, "kohya");
    auto active = (*lib)->Activate({{"k", 1.0f}});
    if (!active.ok()) return active.status();
    const auto y = Outputs(layers, x, x32, rank, world);
    for (const char* m : kQkv) {
      EXPECT_TRUE(torch::allclose(y.at(m), LocalPart(m, expect.at(m), rank, world), 1e-4, 1e-4)) << m;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(WorldAndMode, LoraAdapterTest,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(lora::LoraMode::kMerge,
                                                              lora::LoraMode::kRuntime)));

TEST(LoraLibraryTest, RefusesBadAdaptersAndChoicesNamingThem) {
  TempDir dir;
  auto comm = comm::MakeSingleRankCommunicator();
  auto sd = testing::SliceForRank(TestModel().full, TestModel().plan, 0, 1);
  Layers layers;
  ASSERT_TRUE(BuildLayers(sd, comm.get(), &layers).ok());

  // A module the model does not have.
  Write(dir.File("missing.safetensors"), {{"transformer.nope.lora_A.weight", torch::zeros({2, 16})},
                                          {"transformer.nope.lora_B.weight", torch::zeros({8, 2})}});
  auto missing = lora::LoraLibrary::Load({{"m", dir.File("missing.safetensors")}}, layers.registry, 0, 1, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find("adapter 'm'"), std::string::npos) << missing.status();

  // Factor widths that disagree with the layer.
  Write(dir.File("wide.safetensors"), {{"transformer.up.lora_A.weight", torch::zeros({2, 17})},
                                       {"transformer.up.lora_B.weight", torch::zeros({32, 2})}});
  auto wide = lora::LoraLibrary::Load({{"w", dir.File("wide.safetensors")}}, layers.registry, 0, 1, {});
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("'up' is 32x16"), std::string::npos) << wide.status();

  // A path that does not exist; a folder resolves to its pytorch_lora_weights.safetensors.
  auto absent = lora::LoraLibrary::Load({{"x", dir.File("absent")}}, layers.registry, 0, 1, {});
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  fs::create_directories(dir.File("folder"));
  WriteDiffusersAdapter(dir.File("folder/pytorch_lora_weights.safetensors"), {"up"}, 2, 1, "{}");
  auto lib = lora::LoraLibrary::Load({{"f", dir.File("folder")}}, layers.registry, 0, 1, {},
                                     lora::LoraMode::kRuntime);
  ASSERT_TRUE(lib.ok()) << lib.status();

  // Names: empty and repeated.
  EXPECT_FALSE(lora::LoraLibrary::Load({{"", dir.File("folder")}}, layers.registry, 0, 1, {}).ok());
  EXPECT_FALSE(lora::LoraLibrary::Load({{"f", dir.File("folder")}, {"f", dir.File("folder")}},
                                       layers.registry, 0, 1, {}).ok());

  // Choices.
  for (const auto& bad : std::vector<std::vector<lora::LoraChoice>>{
           {{"g", 1.0f}}, {{"f", 1.0f}, {"f", 0.5f}}, {{"f", 9.0f}}, {{"f", NAN}}}) {
    auto a = (*lib)->Activate(bad);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad[0].name;
  }
  EXPECT_FALSE(layers.owned.at("up")->has_lora());
  {
    auto a = (*lib)->Activate({{"f", 1.0f}});
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(layers.owned.at("up")->has_lora());
  }
  EXPECT_FALSE(layers.owned.at("up")->has_lora());  // cleared with the activation
}

// Merge mode over its byte limit (or out of memory): the job runs with runtime terms, same numbers.
TEST(LoraLibraryTest, MergeOverItsLimitFallsBackToRuntimeTerms) {
  TempDir dir;
  auto comm = comm::MakeSingleRankCommunicator();
  auto sd = OwnShard(0, 1);
  Layers layers;
  ASSERT_TRUE(BuildLayers(sd, comm.get(), &layers).ok());
  auto factors = WriteDiffusersAdapter(dir.File("a.safetensors"), {"up", "down"}, 2, 4, "{}");
  auto lib = lora::LoraLibrary::Load({{"a", dir.File("a.safetensors")}}, layers.registry, 0, 1, {},
                                     lora::LoraMode::kMerge);
  ASSERT_TRUE(lib.ok()) << lib.status();
  torch::manual_seed(1);
  const auto x = torch::randn({2, 16});
  const auto expected = torch::linear(
      x, Full("up.weight") + torch::mm(factors["up"].second, factors["up"].first), Full("up.bias"));
  // Within the limit: merged (up's and down's weights, 32x16 + 16x32 float32 = 4096 bytes).
  (*lib)->set_merge_max_bytes(4096);
  {
    auto a = (*lib)->Activate({{"a", 1.0f}});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->merged_buffers(), 2u);
    EXPECT_TRUE(torch::allclose(layers.owned.at("up")->Forward(x), expected, 1e-5, 1e-5));
  }
  EXPECT_EQ((*lib)->merge_fallbacks(), 0u);
  // Over it: runtime terms.
  (*lib)->set_merge_max_bytes(4095);
  {
    auto a = (*lib)->Activate({{"a", 1.0f}});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->merged_buffers(), 0u);
    EXPECT_EQ(a->layers(), 2u);
    EXPECT_TRUE(layers.owned.at("up")->has_lora());
    EXPECT_TRUE(torch::allclose(layers.owned.at("up")->Forward(x), expected, 1e-5, 1e-5));
  }
  EXPECT_EQ((*lib)->merge_fallbacks(), 1u);
  EXPECT_FALSE(layers.owned.at("up")->has_lora());
  EXPECT_TRUE(torch::equal(layers.owned.at("up")->Forward(x),
                           torch::linear(x, Full("up.weight"), Full("up.bias"))));
}

}  // namespace
}  // namespace ditserve
