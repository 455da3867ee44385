// The step-cache fixtures (tests/fixtures/step-cache, make_step_cache_fixtures.py with the real
// diffusers: FluxPipeline / QwenImagePipeline on the tiny fixtures with enable_cache(
// FirstBlockCacheConfig(threshold))): the calls, diffusers' tensors, each call as our job, and the
// decisions of both sides in one spelling. Shared by step_cache_parity_test (CPU float32) and
// step_cache_gpu_test (CUDA float32 and bfloat16).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "pipeline/job.h"
#include "pipeline/pipeline.h"

namespace ditserve::testing {

std::string StepCacheDir();
// step_cache_calls.json's "calls" (each: name, base fixture folder, the call's arguments,
// threshold or null for no cache).
const nlohmann::json& StepCacheCalls();
// A tensor of diffusers' runs: `<call>.<what>` from step_cache_reference.safetensors (float32,
// CPU), `<call>.bf16.<what>` from step_cache_reference_bf16.safetensors (bfloat16, CUDA). An
// undefined tensor (and a test failure) when missing.
torch::Tensor StepCacheRef(const std::string& key);
// The call as the job diffusers ran (a JSON null: the pipeline's default).
pipeline::GenerationJob StepCacheJob(const nlohmann::json& call);
// Per pass, 'F' / 'f' for the prompt's context computed / cached, 'C' / 'c' for the negative
// prompt's: diffusers' (`prefix` is "<call>" or "<call>.bf16") and ours.
std::string DiffusersDecisions(const std::string& prefix);
std::string OurDecisions(const pipeline::GenerationResult& result);
// Per pass, the value compared with the threshold (NaN on a context's first pass, which computes
// without comparing): diffusers' (`<prefix>.diffs`) and ours (rank 0's CacheDecision::compared).
std::vector<double> DiffusersCompared(const std::string& prefix);
std::vector<double> OurCompared(const pipeline::GenerationResult& result);
// Walks the passes of call `name` while ours (`result`, at tp `world`) and diffusers' (`prefix`:
// "<call>" or "<call>.bf16") took the same path: each compared value must be diffusers' within
// the tolerance (float32: 1e-4 relative; bfloat16: twice the largest |bf16 - float32| of
// diffusers' own two runs on their common path, plus 1 % of `threshold`), and a decision may
// differ only in bfloat16 (the runs then part: later passes are not compared). gtest
// expectations; prints what it compared. Returns whether every decision was diffusers'.
bool ExpectComparedAsDiffusers(const std::string& name, const std::string& prefix, bool f32,
                               double threshold, const pipeline::GenerationResult& result,
                               int world);

}  // namespace ditserve::testing
