// The per-rank loader (diffusers hooks/tensor_parallel.py and modeling_utils.py's from_pretrained): every style on hand-made checkpoints, dtype conversion,
// staging, progress, errors before reading, and bit-exact reassembly of the three fixtures for
// n = 1, 2, 4.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "sharding/loader.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"
#include "tests/unit/sharding_test_util.h"

namespace ditserve::sharding {
namespace {

using ::ditserve::testing::TempDir;
using ::ditserve::testing::WriteComponent;
using ::testing::HasSubstr;

bool BitEqual(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto ac = a.cpu().contiguous(), bc = b.cpu().contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.numel() * ac.element_size()) == 0;
}

// The expected slice, computed with torch indexing only (independent of the loader's arithmetic):
// split `full` along `dim` into `blocks`, take chunk `rank` of `n` of each, concatenate.
torch::Tensor ExpectedSlice(const torch::Tensor& full, int dim, const std::vector<int64_t>& blocks,
                            int rank, int n) {
  std::vector<torch::Tensor> parts;
  for (const auto& block : full.split_with_sizes(blocks, dim)) {
    parts.push_back(block.chunk(n, dim)[rank]);
  }
  return torch::cat(parts, dim);
}

// Inverse: reassemble per-rank slices into the full tensor.
torch::Tensor Reassemble(const std::vector<torch::Tensor>& slices, int dim,
                         const std::vector<int64_t>& blocks) {
  const int n = static_cast<int>(slices.size());
  std::vector<int64_t> local;
  for (int64_t b : blocks) local.push_back(b / n);
  std::vector<std::vector<torch::Tensor>> per_rank;
  for (const auto& s : slices) per_rank.push_back(s.split_with_sizes(local, dim));
  std::vector<torch::Tensor> out;
  for (size_t k = 0; k < blocks.size(); ++k) {
    for (int r = 0; r < n; ++r) out.push_back(per_rank[r][k]);
  }
  return torch::cat(out, dim);
}

// A toy component with one module of every style, biases where the style allows them.
struct Toy {
  TempDir tmp;
  std::string dir;
  std::map<std::string, torch::Tensor> full;
  TpPlan plan;

  explicit Toy(torch::ScalarType dtype = torch::kFloat32) {
    dir = tmp.File("toy");
    torch::manual_seed(7);
    auto r = [&](std::vector<int64_t> shape) { return torch::randn(shape).to(dtype); };
    for (int b = 0; b < 2; ++b) {
      const std::string p = "blocks." + std::to_string(b) + ".";
      full[p + "col.weight"] = r({8, 12});
      full[p + "col.bias"] = r({8});
      full[p + "row.weight"] = r({6, 16});
      full[p + "row.bias"] = r({6});
      full[p + "split.weight"] = r({4, 8});
      full[p + "pcol.weight"] = r({24, 4});
      full[p + "pcol.bias"] = r({24});
      full[p + "prow.weight"] = r({4, 20});
      full[p + "norm.weight"] = r({12});
    }
    full["steps"] = torch::arange(10, torch::kInt64);
    full["mask"] = torch::tensor({true, false, true});
    WriteComponent(dir, {{"_class_name", "Toy"}, {"num_attention_heads", 4}}, full);
    plan.rules = {{"blocks.*.col", TpStyle::kColwise, {}},
                  {"blocks.*.row", TpStyle::kRowwise, {}},
                  {"blocks.*.split", TpStyle::kRowwiseSplitInput, {}},
                  {"blocks.*.pcol", TpStyle::kPackedColwise, {1, 1, 2}},
                  {"blocks.*.prow", TpStyle::kPackedRowwise, {4, 16}}};
  }
};

// (dim, blocks) the toy plan implies for a tensor, or dim -1.
std::pair<int, std::vector<int64_t>> ToyLayout(const std::string& name, const torch::Tensor& t) {
  if (name.find(".col.") != std::string::npos) return {0, {t.size(0)}};
  if (name.find(".row.weight") != std::string::npos) return {1, {t.size(1)}};
  if (name.find(".split.weight") != std::string::npos) return {1, {t.size(1)}};
  if (name.find(".pcol.") != std::string::npos) return {0, {6, 6, 12}};
  if (name.find(".prow.weight") != std::string::npos) return {1, {4, 16}};
  return {-1, {}};
}

TEST(LoaderTest, EveryStyleEveryRank) {
  for (torch::ScalarType stored : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    Toy toy(stored);
    for (int n : {1, 2}) {
      std::map<std::string, std::vector<torch::Tensor>> slices;
      for (int rank = 0; rank < n; ++rank) {
        LoadOptions opts;
        opts.dtype = stored;
        auto sd = LoadShard(toy.dir, &toy.plan, rank, n, opts);
        ASSERT_TRUE(sd.ok()) << sd.status();
        EXPECT_EQ(sd->rank(), rank);
        EXPECT_EQ(sd->world_size(), n);
        EXPECT_EQ(sd->Names().size(), toy.full.size());
        for (const auto& [name, full] : toy.full) {
          SCOPED_TRACE(name + " rank " + std::to_string(rank) + "/" + std::to_string(n));
          auto got = sd->Get(name);
          ASSERT_TRUE(got.ok());
          auto [dim, blocks] = ToyLayout(name, full);
          torch::Tensor want = dim < 0 ? full : ExpectedSlice(full, dim, blocks, rank, n);
          EXPECT_TRUE(BitEqual(*got, want));
          slices[name].push_back(*got);
        }
        EXPECT_EQ(sd->ShardingOf("blocks.1.col").style, TpStyle::kColwise);
        EXPECT_EQ(sd->ShardingOf("blocks.1.row").style, TpStyle::kRowwise);
        EXPECT_EQ(sd->ShardingOf("blocks.1.split").style, TpStyle::kRowwiseSplitInput);
        EXPECT_EQ(sd->ShardingOf("blocks.0.pcol").local_blocks,
                  (std::vector<int64_t>{6 / n, 6 / n, 12 / n}));
        EXPECT_EQ(sd->ShardingOf("blocks.0.prow").local_blocks,
                  (std::vector<int64_t>{4 / n, 16 / n}));
        EXPECT_EQ(sd->ShardingOf("blocks.0.norm").style, TpStyle::kReplicated);
        EXPECT_EQ(sd->modules().size(), 10u);
      }
      for (const auto& [name, parts] : slices) {
        auto [dim, blocks] = ToyLayout(name, toy.full[name]);
        if (dim < 0) continue;
        EXPECT_TRUE(BitEqual(Reassemble(parts, dim, blocks), toy.full[name])) << name;
      }
    }
  }
}

TEST(LoaderTest, ConvertsDtypesThroughATinyStagingBuffer) {
  Toy toy(torch::kBFloat16);
  for (torch::ScalarType target : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    for (uint64_t staging : {8ull, 24ull, 1000ull, 64ull << 20}) {
      SCOPED_TRACE(std::string(c10::toString(target)) + " staging " + std::to_string(staging));
      LoadOptions opts;
      opts.dtype = target;
      opts.staging_buffer_bytes = staging;
      std::vector<std::pair<uint64_t, uint64_t>> progress;
      opts.progress = [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); };
      auto sd = LoadShard(toy.dir, &toy.plan, 1, 2, opts);
      ASSERT_TRUE(sd.ok()) << sd.status();
      for (const auto& [name, full] : toy.full) {
        auto [dim, blocks] = ToyLayout(name, full);
        torch::Tensor want = dim < 0 ? full : ExpectedSlice(full, dim, blocks, 1, 2);
        if (want.is_floating_point()) want = want.to(target);  // PyTorch's own cast
        EXPECT_TRUE(BitEqual(*sd->Get(name), want)) << name;
      }
      // Progress is monotone and ends at the total of stored bytes read by this rank.
      ASSERT_FALSE(progress.empty());
      for (size_t i = 1; i < progress.size(); ++i) {
        EXPECT_LE(progress[i - 1].first, progress[i].first);
      }
      EXPECT_EQ(progress.back().first, progress.back().second);
      uint64_t stored = 0;
      for (const auto& [name, t] : sd->tensors()) {
        stored += t.numel() * (t.is_floating_point() ? 2 : t.element_size());
      }
      EXPECT_EQ(progress.back().second, stored);
      if (staging == 8) {
        EXPECT_GT(progress.size(), 50u);
      }
    }
  }
}

TEST(LoaderTest, NoPlanMeansReplicated) {
  Toy toy;
  auto sd = LoadShard(toy.dir, nullptr, 1, 2, LoadOptions{});
  ASSERT_TRUE(sd.ok()) << sd.status();
  for (const auto& [name, full] : toy.full) EXPECT_TRUE(BitEqual(*sd->Get(name), full)) << name;
  EXPECT_TRUE(sd->modules().empty());
}

TEST(LoaderTest, ErrorsComeBeforeReading) {
  Toy toy;
  LoadOptions opts;
  auto code_and = [](const absl::StatusOr<ShardedStateDict>& r, const std::string& m) {
    EXPECT_FALSE(r.ok());
    if (!r.ok()) {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr(m)) << r.status();
    }
  };
  code_and(LoadShard(toy.dir, &toy.plan, 2, 2, opts), "rank 2 is outside");
  code_and(LoadShard(toy.dir, &toy.plan, -1, 2, opts), "rank -1 is outside");
  code_and(LoadShard(toy.dir, &toy.plan, 0, 0, opts), "`tp_degree` must be >= 1");
  code_and(LoadShard(toy.dir, &toy.plan, 0, 3, opts), "must divide the number of attention heads");
  code_and(LoadShard(toy.dir, &toy.plan, 0, 8, opts), "heads");
  LoadOptions bad = opts;
  bad.dtype = torch::kInt32;
  code_and(LoadShard(toy.dir, &toy.plan, 0, 2, bad), "float32, bfloat16 or float16");
  bad = opts;
  bad.staging_buffer_bytes = 4;
  code_and(LoadShard(toy.dir, &toy.plan, 0, 2, bad), "staging_buffer_bytes");

  // Truncate the data: plan validation still runs first (heads), then reading reports DATA_LOSS
  // naming the file and a tensor; never a crash.
  const std::string file = toy.dir + "/diffusion_pytorch_model.safetensors";
  auto progress_calls = std::make_shared<int>(0);
  {
    auto ckpt = ComponentCheckpoint::Open(toy.dir);
    ASSERT_TRUE(ckpt.ok());
    ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(std::filesystem::file_size(file) / 2)), 0);
    code_and(LoadShard(**ckpt, &toy.plan, 0, 3, opts), "heads");
    auto r = LoadShard(**ckpt, &toy.plan, 0, 2, opts);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(file));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("tensor '"));
  }
  // Reopening the truncated file fails at the header already.
  code_and(LoadShard(toy.dir, &toy.plan, 0, 2, opts), "run past the data buffer");
}

TEST(LoaderTest, RefusesF8OnThisLibTorch) {
  TempDir tmp;
  const std::string dir = tmp.File("f8");
  std::filesystem::create_directories(dir);
  ditserve::testing::WriteTextFile(dir + "/config.json", "{}");
  ditserve::testing::WriteRawSafetensors(
      dir + "/diffusion_pytorch_model.safetensors",
      R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", "abcd");
  auto r = LoadShard(dir, nullptr, 0, 1, LoadOptions{});
  if (TorchDType(DType::kF8E4M3).ok()) GTEST_SKIP() << "this LibTorch has float8";
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'w'"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("F8_E4M3"));
}

TEST(LoaderTest, SavesReplicatedAndRefusesSharded) {
  Toy toy;
  auto full = LoadShard(toy.dir, nullptr, 0, 1, LoadOptions{});
  ASSERT_TRUE(full.ok());
  TempDir out;
  ASSERT_TRUE(SaveShardedStateDict(*full, out.File("saved.safetensors")).ok());
  auto back = ReadAllTensors(out.File("saved.safetensors"));
  ASSERT_TRUE(back.ok());
  for (const auto& [name, t] : toy.full) EXPECT_TRUE(BitEqual(back->at(name), t)) << name;

  auto shard = LoadShard(toy.dir, &toy.plan, 0, 2, LoadOptions{});
  ASSERT_TRUE(shard.ok());
  absl::Status s = SaveShardedStateDict(*shard, out.File("shard.safetensors"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("saving a tensor-parallel sharded model is not supported"));
  EXPECT_FALSE(std::filesystem::exists(out.File("shard.safetensors")));
}

// The fixtures: rank r of n for n = 1, 2, 4, reassembled by the plan, equals the full tensor bit
// for bit; every slice equals torch indexing of the full tensor.
struct FixtureCase {
  const char* dir;
  size_t planned_modules;
  // Absolute packed blocks per module suffix, from the models' _tp_plan with the fixture configs
  // (D = 4 heads * 16 = 64; FLUX.2 Mh = 3 * 64 = 192).
  std::map<std::string, std::vector<int64_t>> packed;
};

class FixtureLoadTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureLoadTest, ReassemblesBitExactly) {
  const FixtureCase& fc = GetParam();
  const std::string dir = ditserve::testing::FixturesDir() + fc.dir;
  auto ckpt = ComponentCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto plan = BuiltinTpPlan((*ckpt)->class_name(), (*ckpt)->config());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, torch::Tensor> full;
  for (const auto& path : (*ckpt)->weight_files()) {
    auto all = ReadAllTensors(path);
    ASSERT_TRUE(all.ok()) << all.status();
    full.insert(all->begin(), all->end());
  }
  for (int n : {1, 2, 4}) {
    std::map<std::string, std::vector<torch::Tensor>> slices;
    std::map<std::string, ModuleSharding> modules;
    for (int rank = 0; rank < n; ++rank) {
      LoadOptions opts;
      opts.staging_buffer_bytes = 4096;
      auto sd = LoadShard(**ckpt, &*plan, rank, n, opts);
      ASSERT_TRUE(sd.ok()) << sd.status();
      EXPECT_EQ(sd->modules().size(), fc.planned_modules);
      EXPECT_EQ(sd->tensors().size(), full.size());
      for (const auto& [name, t] : sd->tensors()) slices[name].push_back(t);
      modules = sd->modules();
    }
    for (const auto& [name, parts] : slices) {
      SCOPED_TRACE(name + " n=" + std::to_string(n));
      const torch::Tensor& f = full.at(name);
      const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
      const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const std::string module =
          is_weight ? name.substr(0, name.size() - 7) : is_bias ? name.substr(0, name.size() - 5) : "";
      auto m = modules.find(module);
      int dim = -1;
      std::vector<int64_t> blocks;
      if (m != modules.end()) {
        const TpStyle style = m->second.style;
        dim = IsColwise(style) ? 0 : (is_weight ? 1 : -1);
        if (dim >= 0) {
          blocks = {f.size(dim)};
          for (const auto& [suffix, b] : fc.packed) {
            if (module.size() >= suffix.size() &&
                module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0) {
              blocks = b;
            }
          }
          const bool packed = style == TpStyle::kPackedColwise || style == TpStyle::kPackedRowwise;
          EXPECT_EQ(packed, blocks.size() > 1);
        }
      }
      for (int r = 0; r < n; ++r) {
        torch::Tensor want = dim < 0 ? f : ExpectedSlice(f, dim, blocks, r, n);
        EXPECT_TRUE(BitEqual(parts[r], want)) << "rank " << r;
      }
      torch::Tensor whole = dim < 0 ? parts[0] : Reassemble(parts, dim, blocks);
      EXPECT_TRUE(BitEqual(whole, f));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, FixtureLoadTest,
    ::testing::Values(
        FixtureCase{"/flux1-tiny/transformer", 2 * 12 + 2 * 5, {{".proj_out", {64, 256}}}},
        FixtureCase{"/flux2-tiny/transformer",
                    2 * 12 + 2 * 2,
                    {{".linear_in", {192, 192}},
                     {".to_qkv_mlp_proj", {64, 64, 64, 192, 192}},
                     {"single_transformer_blocks.0.attn.to_out", {64, 192}},
                     {"single_transformer_blocks.1.attn.to_out", {64, 192}}}},
        FixtureCase{"/qwenimage-tiny/transformer", 2 * 12, {}}),
    [](const auto& info) {
      std::string s = info.param.dir;
      return s.substr(1, s.find('-') - 1);
    });

}  // namespace
}  // namespace ditserve::sharding
