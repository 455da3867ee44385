#include "tests/support/step_cache_calls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>

#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

const std::map<std::string, torch::Tensor>& Tensors(const std::string& file) {
  static std::map<std::string, std::map<std::string, torch::Tensor>>* loaded =
      new std::map<std::string, std::map<std::string, torch::Tensor>>();
  auto it = loaded->find(file);
  if (it != loaded->end()) return it->second;
  std::map<std::string, torch::Tensor>& out = (*loaded)[file];
  auto all = sharding::ReadAllTensors(StepCacheDir() + "/" + file);
  if (all.ok()) out = *std::move(all);
  else ADD_FAILURE() << all.status();
  return out;
}

}  // namespace

std::string StepCacheDir() { return FixturesDir() + "/step-cache"; }

const nlohmann::json& StepCacheCalls() {
  static const nlohmann::json calls = [] {
    std::ifstream in(StepCacheDir() + "/step_cache_calls.json");
    nlohmann::json all = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (all.is_discarded() || !all.contains("calls")) {
      ADD_FAILURE() << "step_cache_calls.json is missing or has no calls";
      return nlohmann::json::array();
    }
    return all["calls"];
  }();
  return calls;
}

torch::Tensor StepCacheRef(const std::string& key) {
  const bool bf16 = key.find(".bf16.") != std::string::npos;
  const auto& refs = Tensors(bf16 ? "step_cache_reference_bf16.safetensors"
                                  : "step_cache_reference.safetensors");
  auto it = refs.find(key);
  if (it == refs.end()) {
    ADD_FAILURE() << "no reference tensor " << key;
    return {};
  }
  return it->second;
}

pipeline::GenerationJob StepCacheJob(const nlohmann::json& call) {
  pipeline::GenerationJob job;
  job.height = call["height"].get<int64_t>();
  job.width = call["width"].get<int64_t>();
  job.num_inference_steps = call["num_inference_steps"].get<int64_t>();
  job.max_sequence_length = call["max_sequence_length"].get<int64_t>();
  job.output = pipeline::JobOutput::kImage;
  if (!call["threshold"].is_null()) job.cache_threshold = call["threshold"].get<double>();
  pipeline::JobItem item;
  item.prompt = call["prompt"].get<std::string>();
  item.prompt_2 = item.prompt;
  item.seed = call["seed"].get<uint64_t>();
  if (!call["guidance_scale"].is_null()) item.guidance_scale = call["guidance_scale"].get<float>();
  if (call["true_cfg"].get<bool>()) {
    item.negative_prompt = call["negative_prompt"].get<std::string>();
    item.negative_prompt_2 = item.negative_prompt;
    item.true_cfg_scale = call["true_cfg_scale"].get<float>();
  }
  job.items.push_back(item);
  return job;
}

std::string DiffusersDecisions(const std::string& prefix) {
  const torch::Tensor computed = StepCacheRef(prefix + ".decisions");
  const torch::Tensor context = StepCacheRef(prefix + ".context");
  if (!computed.defined() || !context.defined()) return "";
  const torch::Tensor full = computed.to(torch::kInt64), negative = context.to(torch::kInt64);
  std::string s;
  for (int64_t i = 0; i < full.numel(); ++i) {
    const bool neg = negative[i].item<int64_t>() == 1;
    const bool f = full[i].item<int64_t>() == 1;
    s += neg ? (f ? 'C' : 'c') : (f ? 'F' : 'f');
  }
  return s;
}

std::string OurDecisions(const pipeline::GenerationResult& result) {
  std::string s;
  for (const auto& d : result.cache_decisions) {
    s += d.negative ? (d.computed ? 'C' : 'c') : (d.computed ? 'F' : 'f');
  }
  return s;
}

std::vector<double> DiffusersCompared(const std::string& prefix) {
  const torch::Tensor diffs = StepCacheRef(prefix + ".diffs");
  std::vector<double> out;
  if (!diffs.defined()) return out;
  const torch::Tensor d = diffs.to(torch::kFloat64).contiguous();
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double v = d[i].item<double>();
    out.push_back(v < 0 ? std::numeric_limits<double>::quiet_NaN() : v);  // -1: nothing compared
  }
  return out;
}

std::vector<double> OurCompared(const pipeline::GenerationResult& result) {
  std::vector<double> out;
  for (const auto& d : result.cache_decisions) out.push_back(d.compared);
  return out;
}

// Walks the passes while ours and diffusers' took the same path (the same decisions so far): each
// pass's compared value must be diffusers' within the tolerance, and a decision may differ only
// in bfloat16, at a pass whose value agrees that well (the two then part: later passes are not
// compared). float32: 1e-4 relative, and every decision equal. bfloat16: the tolerance is what
// bfloat16 does to diffusers' own value in this call: twice the largest |bf16 - float32| of
// diffusers' two runs over the passes where they took the same path (plus 1 % of the threshold).
// Returns whether every decision was diffusers'.
bool ExpectComparedAsDiffusers(const std::string& name, const std::string& prefix, bool f32,
                               double threshold, const pipeline::GenerationResult& r, int world) {
  const std::string ours = OurDecisions(r), theirs = DiffusersDecisions(prefix);
  const std::vector<double> ours_d = OurCompared(r), theirs_d = DiffusersCompared(prefix);
  double tolerance_of_threshold = 0;
  if (!f32) {
    const std::string f32_theirs = DiffusersDecisions(name);
    const std::vector<double> f32_d = DiffusersCompared(name);
    double spread = 0;
    for (size_t i = 0; i < theirs_d.size() && i < f32_d.size(); ++i) {
      if (!std::isnan(theirs_d[i]) && !std::isnan(f32_d[i])) {
        spread = std::max(spread, std::abs(theirs_d[i] - f32_d[i]));
      }
      if (f32_theirs[i] != theirs[i]) break;
    }
    tolerance_of_threshold = 2 * spread + 0.01 * threshold;
    std::printf("%s tp %d bfloat16: diffusers' own bf16 - float32 spread %.4f, tolerance %.4f\n",
                name.c_str(), world, spread, tolerance_of_threshold);
  }
  double worst = 0;
  bool same = true;
  for (size_t i = 0; i < ours.size() && i < ours_d.size() && i < theirs_d.size(); ++i) {
    if (std::isnan(theirs_d[i])) {
      EXPECT_TRUE(std::isnan(ours_d[i])) << "pass " << i << " compared " << ours_d[i];
    } else {
      const double tol = f32 ? 1e-5 + 1e-4 * theirs_d[i] : tolerance_of_threshold;
      worst = std::max(worst, std::abs(ours_d[i] - theirs_d[i]));
      EXPECT_NEAR(ours_d[i], theirs_d[i], tol)
          << "pass " << i << " (threshold " << threshold << ")";
    }
    if (ours[i] == theirs[i]) continue;
    EXPECT_FALSE(f32) << "pass " << i << ": ours " << ours[i] << ", diffusers' " << theirs[i];
    std::printf(
        "%s tp %d %s: pass %zu decided differently: ours %.4f, diffusers %.4f, threshold "
        "%.2f; the paths part here\n",
        name.c_str(), world, f32 ? "float32" : "bfloat16", i, ours_d[i], theirs_d[i], threshold);
    same = false;
    break;
  }
  std::printf("%s tp %d %s: compared values within %.2g of diffusers' on the common path\n",
              name.c_str(), world, f32 ? "float32" : "bfloat16", worst);
  return same;
}

}  // namespace ditserve::testing
