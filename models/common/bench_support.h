// Helpers for the transformer step benchmarks (ditserve-*-bench): a state dict of random weights
// for given shapes, and the median wall time of a forward. Header-only; not used by serving code.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/torch_compat.h"
#include "sharding/state_dict.h"

namespace ditserve::models {

// Every tensor N(0, 0.02²) except 1-D "*norm*" tensors (RMSNorm scales), which are ones.
// Replicated (rank 0 of 1); `params` gets the element count.
inline sharding::ShardedStateDict RandomStateDict(
    const std::map<std::string, std::vector<int64_t>>& shapes, const torch::TensorOptions& opts,
    uint64_t seed, int64_t* params) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  std::map<std::string, torch::Tensor> tensors;
  *params = 0;
  for (const auto& [name, shape] : shapes) {
    const bool norm_scale = shape.size() == 1 && name.find("norm") != std::string::npos;
    tensors[name] = norm_scale ? torch::ones(shape, opts) : torch::randn(shape, opts) * 0.02;
    *params += tensors[name].numel();
  }
  return sharding::ShardedStateDict(0, 1, std::move(tensors), {});
}

struct StepTimes {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  size_t runs = 0;
};

// Runs `step` warmup + runs times, each bracketed by device synchronisation, and returns the
// timed runs' statistics. `step` returns its output; the first one must be finite.
inline absl::StatusOr<StepTimes> TimeSteps(const std::function<absl::StatusOr<torch::Tensor>()>& step,
                                           const torch::Device& device, int64_t warmup, int64_t runs) {
  if (runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  std::vector<double> ms;
  for (int64_t i = 0; i < warmup + runs; ++i) {
    compat::SynchronizeDevice(device);
    const auto start = std::chrono::steady_clock::now();
    auto out = step();
    if (!out.ok()) return out.status();
    compat::SynchronizeDevice(device);
    const double elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i == 0 && !torch::isfinite(out->to(torch::kFloat32)).all().item<bool>()) {
      return absl::InternalError("non-finite output");
    }
    if (i >= warmup) ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  StepTimes t;
  t.runs = ms.size();
  t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

}  // namespace ditserve::models
