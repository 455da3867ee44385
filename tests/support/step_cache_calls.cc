#include "tests/support/step_cache_calls.h"

#include <gtest/gtest.h>

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

}  // namespace ditserve::testing
