#include "tests/unit/tp_test_sharding.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "absl/strings/str_split.h"

namespace ditserve::testing {
namespace {

using sharding::TpStyle;

bool Matches(const std::string& pattern, const std::string& path) {
  std::vector<std::string> p = absl::StrSplit(pattern, '.'), q = absl::StrSplit(path, '.');
  if (p.size() != q.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != "*" && p[i] != q[i]) return false;
  }
  return true;
}

// Slices dim `dim` of t for rank r of n: whole-range chunks, or per block then concatenated.
torch::Tensor Slice(const torch::Tensor& t, int64_t dim, const std::vector<int64_t>& props, int r,
                    int n, std::vector<int64_t>* local_blocks) {
  std::vector<int64_t> sizes;
  if (props.empty()) {
    sizes = {t.size(dim)};
  } else {
    const int64_t sum = std::accumulate(props.begin(), props.end(), int64_t{0});
    EXPECT_EQ(t.size(dim) % sum, 0);
    for (int64_t p : props) sizes.push_back(p * (t.size(dim) / sum));
  }
  std::vector<torch::Tensor> parts;
  int64_t offset = 0;
  if (local_blocks) local_blocks->clear();
  for (int64_t s : sizes) {
    EXPECT_EQ(s % n, 0);
    parts.push_back(t.narrow(dim, offset + r * (s / n), s / n));
    if (local_blocks) local_blocks->push_back(s / n);
    offset += s;
  }
  return torch::cat(parts, dim).contiguous();
}

}  // namespace

std::vector<TestPlanEntry> Flux1TestPlan(int64_t d) {
  std::vector<TestPlanEntry> plan;
  for (const char* m : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"}) {
    plan.push_back({std::string("transformer_blocks.*.attn.") + m, TpStyle::kColwise, {}});
  }
  plan.push_back({"transformer_blocks.*.attn.to_out.0", TpStyle::kRowwise, {}});
  plan.push_back({"transformer_blocks.*.attn.to_add_out", TpStyle::kRowwise, {}});
  plan.push_back({"transformer_blocks.*.ff.net.0.proj", TpStyle::kColwise, {}});
  plan.push_back({"transformer_blocks.*.ff.net.2", TpStyle::kRowwise, {}});
  plan.push_back({"transformer_blocks.*.ff_context.net.0.proj", TpStyle::kColwise, {}});
  plan.push_back({"transformer_blocks.*.ff_context.net.2", TpStyle::kRowwise, {}});
  for (const char* m : {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}) {
    plan.push_back({std::string("single_transformer_blocks.*.") + m, TpStyle::kColwise, {}});
  }
  plan.push_back({"single_transformer_blocks.*.proj_out", TpStyle::kPackedRowwise, {d, 4 * d}});
  return plan;
}

sharding::ShardedStateDict SliceForRank(const sharding::ShardedStateDict& full,
                                        const std::vector<TestPlanEntry>& plan, int rank,
                                        int world_size) {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, sharding::ModuleSharding> modules;
  for (const auto& [name, t] : full.tensors()) {
    const auto dot = name.rfind('.');
    const std::string module = name.substr(0, dot), leaf = name.substr(dot + 1);
    const TestPlanEntry* entry = nullptr;
    for (const auto& e : plan) {
      if (Matches(e.pattern, module)) entry = &e;
    }
    if (entry == nullptr) {
      tensors[name] = t;
      continue;
    }
    sharding::ModuleSharding ms;
    ms.style = entry->style;
    const bool packed =
        entry->style == TpStyle::kPackedColwise || entry->style == TpStyle::kPackedRowwise;
    const auto& props = packed ? entry->blocks : std::vector<int64_t>{};
    std::vector<int64_t> blocks;
    if (sharding::IsColwise(entry->style)) {
      // weight rows and bias entries, same rule
      tensors[name] = Slice(t, 0, props, rank, world_size, &blocks);
    } else if (leaf == "weight") {
      tensors[name] = Slice(t, 1, props, rank, world_size, &blocks);
    } else {
      tensors[name] = t;  // rowwise bias: replicated
    }
    if (packed && leaf == "weight") ms.local_blocks = blocks;
    if (leaf == "weight" || !modules.count(module)) modules[module] = ms;
  }
  return sharding::ShardedStateDict(rank, world_size, std::move(tensors), std::move(modules));
}

}  // namespace ditserve::testing
