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
#include <torch/cuda.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ditserve::bench {

// A kernel's kind by its name: cuBLAS/cuBLASLt GEMMs (nvjet, sm90 xmma/gemm, cutlass), attention
// (cuDNN SDPA, flash, memory-efficient), ours (ditserve::cuda), everything else (elementwise,
// copies, norms, reductions).
inline std::string KernelKind(const std::string& name) {
  auto has = [&name](const char* s) { return name.find(s) != std::string::npos; };
  if (has("ditserve::cuda")) return "ours (models/cuda)";
  if (has("sdpa") || has("flash") || has("fmha") || has("attention")) return "attention";
  if (has("nvjet") || has("gemm") || has("cutlass") || has("xmma") || has("splitKreduce"))
    return "GEMM";
  return "other";
}

inline absl::Status ProfileKernels(const std::function<absl::Status()>& step,
                                   const std::string& path) {
  namespace prof = torch::profiler::impl;
  namespace ap = torch::autograd::profiler;
  prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  ap::prepareProfiler(config, activities);
  ap::enableProfiler(config, activities);
  absl::Status status = step();
  // The step only enqueued its kernels: wait for them, or the profile ends with the kernels that
  // happened to finish before it was disabled (a quarter of FLUX.2-dev's step in the 2026-12-04
  // profiles: 27.5 ms of 490).
  if (torch::cuda::is_available()) torch::cuda::synchronize();
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
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(by_kernel.begin(),
                                                                       by_kernel.end());
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
  // Where the step's device time goes, by kind of kernel (what the distance to a matmul-bound step
  // is made of).
  std::map<std::string, double> by_kind;
  for (const auto& [name, k] : rows) by_kind[KernelKind(name)] += k.second;
  std::string kinds;
  for (const char* kind : {"GEMM", "attention", "ours (models/cuda)", "other"}) {
    const double ms = by_kind[kind];
    char part[64];
    std::snprintf(part, sizeof(part), "%.1f ms (%.0f%%)", ms,
                  total_ms > 0 ? 100 * ms / total_ms : 0.0);
    kinds += absl::StrCat(kinds.empty() ? "" : ", ", kind, " ", part);
  }
  std::printf("profile by kind: %s\n", kinds.c_str());
  result->save(path + ".json");
  return absl::OkStatus();
}

}  // namespace ditserve::bench
