// Kernel-level profile of one transformer step for the benchmarks (ditserve-*-bench --profile):
// runs the step once under PyTorch's Kineto profiler and writes, per CUDA kernel name, the number
// of launches and the total device time, longest first (TSV), plus the Chrome trace (FILE.json).
// LibTorch 2.x with CUDA only (the profiler's C++ API differs in 1.13); not used by serving code.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ditserve::models {

inline absl::Status ProfileKernels(const std::function<absl::Status()>& step, const std::string& path) {
  namespace prof = torch::profiler::impl;
  namespace ap = torch::autograd::profiler;
  prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  ap::prepareProfiler(config, activities);
  ap::enableProfiler(config, activities);
  absl::Status status = step();
  std::unique_ptr<ap::ProfilerResult> result = ap::disableProfiler();
  if (!status.ok()) return status;
  std::map<std::string, std::pair<int64_t, double>> by_kernel;
  double total_ms = 0;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    auto& k = by_kernel[e.name()];
    k.first += 1;
    k.second += static_cast<double>(e.durationNs()) / 1e6;
    total_ms += static_cast<double>(e.durationNs()) / 1e6;
  }
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(by_kernel.begin(), by_kernel.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path));
  std::fprintf(f, "total_ms\tcalls\tshare\tkernel\n");
  for (const auto& [name, k] : rows) {
    std::fprintf(f, "%.3f\t%lld\t%.4f\t%s\n", k.second, static_cast<long long>(k.first),
                 total_ms > 0 ? k.second / total_ms : 0.0, name.c_str());
  }
  std::fclose(f);
  std::printf("profile: %.3f ms of CUDA kernels in %zu distinct kernels -> %s\n", total_ms,
              rows.size(), path.c_str());
  result->save(path + ".json");
  return absl::OkStatus();
}

}  // namespace ditserve::models
