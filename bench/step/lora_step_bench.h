// The LoRA part of the step benchmarks (--lora-rank R): a random rank-R adapter on every linear
// layer inside the transformer blocks (what FLUX LoRAs usually adapt), written as a
// diffusers-format file at the model's global shapes, loaded through LoraLibrary like a served
// adapter, then timed in the same process, for both modes (lora_library.h: merged copy, runtime
// terms): loading, the step with one and two adapters against the unadapted one, switching on (a
// new choice set, and the cached one again) and off (restoring the base), and the unadapted step
// afterwards. Header-only; benchmarks only.
#pragma once

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "bench/step/step_bench.h"
#include "common/remove_tree.h"
#include "common/torch_compat.h"
#include "models/lora/lora_library.h"
#include "sharding/safetensors_writer.h"

namespace ditserve::bench {

inline double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Writes an adapter of rank `rank` on `modules` (global shapes from the layers) to `path`, bf16.
inline absl::Status WriteRandomAdapter(const std::string& path,
                                       const models::LinearRegistry& layers,
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
  const models::LinearRegistry& layers = model.linear_layers();
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
  struct Cleanup {  // not std::filesystem::remove_all: see common/remove_tree.h
    std::string d;
    ~Cleanup() { RemoveTree(d).IgnoreError(); }
  } cleanup{dir};
  auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(WriteRandomAdapter(dir + "/a.safetensors", layers, blocks, rank, comm.rank(),
                                     comm.world_size(), 1));
  RETURN_IF_ERROR(WriteRandomAdapter(dir + "/b.safetensors", layers, attention, rank, comm.rank(),
                                     comm.world_size(), 2));
  std::printf("lora: wrote 2 rank-%lld adapters (%zu and %zu modules) in %.0f ms\n",
              static_cast<long long>(rank), blocks.size(), attention.size(), MsSince(t0));

  ASSIGN_OR_RETURN(StepTimes base, TimeSteps(step, target.device, o.warmup, o.runs));
  std::printf("lora: step without adapter          median %.3f ms (min %.3f)\n", base.median_ms,
              base.min_ms);
  sharding::LoadOptions lo;
  lo.device = model.device();
  lo.dtype = model.dtype();
  for (const lora::LoraMode mode : {lora::LoraMode::kMerge, lora::LoraMode::kRuntime}) {
    const char* name = mode == lora::LoraMode::kMerge ? "merge" : "runtime";
    t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(auto lib, lora::LoraLibrary::Load(
                                   {{"a", dir + "/a.safetensors"}, {"b", dir + "/b.safetensors"}},
                                   layers, comm.rank(), comm.world_size(), lo, mode));
    compat::SynchronizeDevice(target.device);
    const double load_ms = MsSince(t0);
    // Activation and its end (restoring the base weights), each bracketed by synchronisation.
    auto timed = [&](const std::vector<lora::LoraChoice>& c, double* on_ms, double* off_ms,
                     StepTimes* steps) -> absl::Status {
      compat::SynchronizeDevice(target.device);
      auto t = std::chrono::steady_clock::now();
      {
        ASSIGN_OR_RETURN(auto active, lib->Activate(c));
        compat::SynchronizeDevice(target.device);
        *on_ms = MsSince(t);
        if (steps != nullptr) {
          ASSIGN_OR_RETURN(*steps, TimeSteps(step, target.device, o.warmup, o.runs));
        }
        compat::SynchronizeDevice(target.device);
        t = std::chrono::steady_clock::now();
      }
      compat::SynchronizeDevice(target.device);
      *off_ms = MsSince(t);
      return absl::OkStatus();
    };
    double on1 = 0, off1 = 0, again = 0, off_again = 0, on2 = 0, off2 = 0;
    StepTimes one, two;
    RETURN_IF_ERROR(timed({{"a", 0.8f}}, &on1, &off1, &one));
    RETURN_IF_ERROR(timed({{"a", 0.8f}}, &again, &off_again, nullptr));
    RETURN_IF_ERROR(timed({{"a", 0.8f}, {"b", 0.5f}}, &on2, &off2, &two));
    ASSIGN_OR_RETURN(StepTimes after, TimeSteps(step, target.device, o.warmup, o.runs));
    std::printf("lora %s: loaded both adapters in %.0f ms (%llu bytes on this rank)\n", name,
                load_ms,
                static_cast<unsigned long long>(lib->cards()[0].bytes + lib->cards()[1].bytes));
    std::printf("lora %s: step with rank-%lld adapter median %.3f ms (min %.3f)  %+.1f %%\n", name,
                static_cast<long long>(rank), one.median_ms, one.min_ms,
                100.0 * (one.median_ms / base.median_ms - 1.0));
    std::printf("lora %s: step with two adapters    median %.3f ms (min %.3f)  %+.1f %%\n", name,
                two.median_ms, two.min_ms, 100.0 * (two.median_ms / base.median_ms - 1.0));
    std::printf("lora %s: step without, afterwards  median %.3f ms (min %.3f)\n", name,
                after.median_ms, after.min_ms);
    std::printf(
        "lora %s: switch on: new set %.2f ms (one adapter) / %.2f ms (two), same set again "
        "%.2f ms; off (restore): %.2f / %.2f ms\n",
        name, on1, on2, again, off1, off2);
  }
  return absl::OkStatus();
}

}  // namespace ditserve::bench
