// The LoRA part of the step benchmarks (--lora-rank R): a random rank-R adapter on every linear
// layer inside the transformer blocks (what FLUX LoRAs usually adapt), written as a diffusers-format
// file at the model's global shapes, loaded through LoraLibrary like a served adapter, then timed
// in the same process: the unadapted step, the step with the adapter, loading, switching (building
// the scaled terms for a new choice set, and re-activating the cached one), the unadapted step
// again, and the alternative not taken: merging scale·B·A into every adapted weight (one addmm per
// layer, the cost a merge-based switch would pay twice per request, without an exact restore in
// bf16). Header-only; benchmarks only.
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "common/torch_compat.h"
#include "models/common/bench_support.h"
#include "models/lora/lora_library.h"
#include "sharding/safetensors_writer.h"
#include "sharding/torch_tensor.h"

namespace ditserve::models {

inline double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Writes an adapter of rank `rank` on `modules` (global shapes from the layers) to `path`, bf16.
inline absl::Status WriteRandomAdapter(const std::string& path, const LinearRegistry& layers,
                                       const std::vector<std::string>& modules, int64_t rank,
                                       int tp_rank, int world, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> keep;
  std::vector<sharding::TensorToWrite> out;
  for (const std::string& m : modules) {
    const lora::LayerGeometry g = lora::GeometryOf(*layers.Find(m), tp_rank, world);
    keep.push_back((torch::randn({rank, g.in_features}) * 0.01).to(torch::kBFloat16).contiguous());
    out.push_back({"transformer." + m + ".lora_A.weight", sharding::DType::kBF16,
                   keep.back().sizes().vec(), keep.back().data_ptr()});
    keep.push_back((torch::randn({g.out_features, rank}) * 0.01).to(torch::kBFloat16).contiguous());
    out.push_back({"transformer." + m + ".lora_B.weight", sharding::DType::kBF16,
                   keep.back().sizes().vec(), keep.back().data_ptr()});
  }
  return sharding::WriteSafetensors(path, out, {{"format", "pt"}});
}

inline absl::Status BenchLora(const DiffusionTransformer& model, int64_t rank,
                              const std::function<absl::StatusOr<torch::Tensor>()>& step,
                              const BenchTarget& target, const CommonBenchOptions& o,
                              const comm::Communicator& comm) {
  const LinearRegistry& layers = model.linear_layers();
  std::vector<std::string> blocks, attention;
  for (const auto& [path, layer] : layers.layers()) {
    if (absl::StartsWith(path, "transformer_blocks.") ||
        absl::StartsWith(path, "single_transformer_blocks.")) {
      blocks.push_back(path);
      if (absl::StrContains(path, ".attn.")) attention.push_back(path);
    }
  }
  char tmpl[] = "/tmp/ditserve_lora_bench_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(WriteRandomAdapter(dir + "/a.safetensors", layers, blocks, rank, comm.rank(),
                                     comm.world_size(), 1));
  RETURN_IF_ERROR(WriteRandomAdapter(dir + "/b.safetensors", layers, attention, rank, comm.rank(),
                                     comm.world_size(), 2));
  std::printf("lora: wrote 2 rank-%lld adapters (%zu and %zu modules) in %.0f ms\n",
              static_cast<long long>(rank), blocks.size(), attention.size(), MsSince(t0));

  ASSIGN_OR_RETURN(StepTimes base, TimeSteps(step, target.device, o.warmup, o.runs));
  sharding::LoadOptions lo;
  lo.device = model.device();
  lo.dtype = model.dtype();
  t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto lib, lora::LoraLibrary::Load({{"a", dir + "/a.safetensors"},
                                                      {"b", dir + "/b.safetensors"}},
                                                     layers, comm.rank(), comm.world_size(), lo));
  compat::SynchronizeDevice(target.device);
  const double load_ms = MsSince(t0);
  auto activate = [&](const std::vector<lora::LoraChoice>& c, double* ms)
      -> absl::StatusOr<lora::LoraActivation> {
    compat::SynchronizeDevice(target.device);
    const auto t = std::chrono::steady_clock::now();
    auto a = lib->Activate(c);
    compat::SynchronizeDevice(target.device);
    *ms = MsSince(t);
    return a;
  };
  double build_ms = 0, cached_ms = 0, switch_ms = 0;
  StepTimes adapted, both;
  {
    ASSIGN_OR_RETURN(auto active, activate({{"a", 0.8f}}, &build_ms));
    ASSIGN_OR_RETURN(adapted, TimeSteps(step, target.device, o.warmup, o.runs));
  }
  {
    ASSIGN_OR_RETURN(auto active, activate({{"a", 0.8f}}, &cached_ms));
  }
  {
    ASSIGN_OR_RETURN(auto active, activate({{"a", 0.8f}, {"b", 0.5f}}, &switch_ms));
    ASSIGN_OR_RETURN(both, TimeSteps(step, target.device, o.warmup, o.runs));
  }
  ASSIGN_OR_RETURN(StepTimes after, TimeSteps(step, target.device, o.warmup, o.runs));

  // The alternative: merge scale·B·A into each adapted weight (into a new buffer, one addmm each).
  double merge_ms = 0;
  {
    torch::NoGradGuard no_grad;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> factors;
    for (const std::string& m : blocks) {
      const torch::Tensor& w = layers.Find(m)->weight();
      factors.emplace_back(torch::randn({w.size(0), rank}, w.options()),
                           torch::randn({rank, w.size(1)}, w.options()));
    }
    compat::SynchronizeDevice(target.device);
    const auto t = std::chrono::steady_clock::now();
    for (size_t i = 0; i < blocks.size(); ++i) {
      (void)torch::addmm(layers.Find(blocks[i])->weight(), factors[i].first, factors[i].second);
    }
    compat::SynchronizeDevice(target.device);
    merge_ms = MsSince(t);
  }
  std::printf("lora: loaded both adapters in %.0f ms (%llu bytes on this rank)\n", load_ms,
              static_cast<unsigned long long>(lib->cards()[0].bytes + lib->cards()[1].bytes));
  std::printf("lora: step without adapter     median %.3f ms (min %.3f)\n", base.median_ms, base.min_ms);
  std::printf("lora: step with rank-%lld adapter median %.3f ms (min %.3f)  %+.1f %%\n",
              static_cast<long long>(rank), adapted.median_ms, adapted.min_ms,
              100.0 * (adapted.median_ms / base.median_ms - 1.0));
  std::printf("lora: step with two adapters   median %.3f ms (min %.3f)  %+.1f %%\n", both.median_ms,
              both.min_ms, 100.0 * (both.median_ms / base.median_ms - 1.0));
  std::printf("lora: step without, afterwards median %.3f ms (min %.3f)\n", after.median_ms, after.min_ms);
  std::printf("lora: switch = activate a new set %.2f ms (one adapter) / %.2f ms (two); the same set "
              "again (cached) %.2f ms\n", build_ms, switch_ms, cached_ms);
  std::printf("lora: merging instead (one addmm per adapted weight, %zu weights): %.2f ms per "
              "direction\n", blocks.size(), merge_ms);
  return absl::OkStatus();
}

}  // namespace ditserve::models
