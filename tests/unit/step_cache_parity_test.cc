// First Block Cache against diffusers' own hook (issue 33): every call of
// tests/fixtures/step-cache/step_cache_calls.json (made by make_step_cache_fixtures.py with the
// real diffusers: FluxPipeline and QwenImagePipeline on the tiny fixtures, enable_cache(
// FirstBlockCacheConfig(threshold)), float32 on the CPU) runs through our pipeline at tp 1 and 2:
// the same decisions in the same order (per pass: which context, computed or cached) and the image
// within 1e-3; the calls without a cache give diffusers' image too. Registered only once the
// fixtures exist (tests/unit/CMakeLists.txt, REQUIRES).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/job.h"
#include "pipeline/pipeline.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"
#include "tests/support/pipeline_group.h"

namespace ditserve {
namespace {

using pipeline::GenerationJob;
using testing::FixturesDir;
using testing::RelativeError;

std::string StepCacheDir() { return FixturesDir() + "/step-cache"; }

const nlohmann::json& Calls() {
  static const nlohmann::json calls = [] {
    std::ifstream in(StepCacheDir() + "/step_cache_calls.json");
    return nlohmann::json::parse(in)["calls"];
  }();
  return calls;
}

const std::map<std::string, torch::Tensor>& References() {
  static const auto* refs = [] {
    auto* out = new std::map<std::string, torch::Tensor>();
    auto all = sharding::ReadAllTensors(StepCacheDir() + "/step_cache_reference.safetensors");
    if (all.ok()) *out = *std::move(all);
    else ADD_FAILURE() << all.status();
    return out;
  }();
  return *refs;
}

torch::Tensor Reference(const std::string& key) {
  auto it = References().find(key);
  if (it == References().end()) {
    ADD_FAILURE() << "no reference tensor " << key;
    return {};
  }
  return it->second;
}

// The call's arguments as the job diffusers ran (a JSON null: the pipeline's default).
GenerationJob CallJob(const nlohmann::json& call) {
  GenerationJob job;
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

// diffusers' decisions as the pipeline reports them: per pass, 'F' / 'f' for the prompt's context
// computed / cached, 'C' / 'c' for the negative prompt's.
std::string DiffusersDecisions(const std::string& name) {
  const torch::Tensor computed = Reference(name + ".decisions").to(torch::kInt64);
  const torch::Tensor context = Reference(name + ".context").to(torch::kInt64);
  std::string s;
  for (int64_t i = 0; i < computed.numel(); ++i) {
    const bool negative = context[i].item<int64_t>() == 1;
    const bool full = computed[i].item<int64_t>() == 1;
    s += negative ? (full ? 'C' : 'c') : (full ? 'F' : 'f');
  }
  return s;
}

std::string OurDecisions(const pipeline::GenerationResult& r) {
  std::string s;
  for (const auto& d : r.cache_decisions) {
    s += d.negative ? (d.computed ? 'C' : 'c') : (d.computed ? 'F' : 'f');
  }
  return s;
}

TEST(StepCacheParity, EveryCallDecidesAndDrawsAsDiffusers) {
  ASSERT_FALSE(Calls().empty());
  for (const nlohmann::json& call : Calls()) {
    const std::string name = call["name"].get<std::string>();
    SCOPED_TRACE(name);
    pipeline::PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/" + call["base"].get<std::string>();
    const torch::Tensor expected = Reference(name + ".image");
    ASSERT_TRUE(expected.defined());
    for (const int world : {1, 2}) {
      SCOPED_TRACE(world);
      auto run = testing::RunPipelineGroup(world, opts, CallJob(call));
      ASSERT_TRUE(run.ok()) << run.status();
      const pipeline::GenerationResult& r = run->rank0();
      ASSERT_EQ(r.images.size(), 1u);
      const double err = RelativeError(r.images[0], expected);
      EXPECT_LT(err, 1e-3) << "image relative error " << err;
      if (call["threshold"].is_null()) {
        EXPECT_TRUE(r.cache_decisions.empty());
        continue;
      }
      const std::string theirs = DiffusersDecisions(name);
      EXPECT_EQ(OurDecisions(r), theirs);
      std::printf("%s tp %d: decisions %s, image relative error %.3g\n", name.c_str(), world,
                  theirs.c_str(), err);
    }
  }
}

}  // namespace
}  // namespace ditserve
