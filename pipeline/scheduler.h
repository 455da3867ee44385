// FlowMatchEulerDiscreteScheduler as the FLUX.1 / FLUX.2 / Qwen-Image pipelines use it (diffusers
// scheduling_flow_match_euler_discrete.py), with the reference's exact float32/float64 semantics:
//   * the pipeline's sigmas = linspace(1, 1/N, N) in float64 (FluxSigmas), taken as float32;
//   * dynamic shifting with mu (CalculateShift for FLUX.1/Qwen, ComputeEmpiricalMu for FLUX.2):
//     σ' = e^mu / (e^mu + (1/σ - 1)^1) elementwise in float32 ("exponential"; "linear" uses mu);
//     otherwise the static shift σ' = s·σ / (1 + (s-1)·σ);
//   * optional shift_terminal stretch (Qwen-Image): σ'' = 1 -
//   (1-σ')/((1-σ'_last)/(1-shift_terminal));
//   * timesteps = σ·num_train_timesteps (float32, length N); a terminal σ = 0 appended (length
//   N+1);
//   * Step: x_next = (float32(x) + float32(dtype(dtype(dt)·v))).to(v.dtype), dt = σ[i+1]-σ[i],
//     i.e. the dt·v product is an op in v's dtype (bf16 in a bf16 pipeline), the update fp32.
// Options the FLUX pipelines never set (karras/exponential/beta sigmas, invert_sigmas, stochastic
// sampling) are refused with UNIMPLEMENTED when a config turns them on.
//
// Thread-safety: immutable after SetTimesteps; Step is const and stateless (the step index is the
// loop counter, as with diffusers' set_begin_index(0)).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ditserve::pipeline {

struct FlowMatchSchedulerConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = false;
  double base_shift = 0.5;
  double max_shift = 1.15;
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 4096;
  std::optional<double> shift_terminal;
  std::string time_shift_type = "exponential";  // or "linear"
};

// scheduler_config.json → config; INVALID_ARGUMENT for a wrong type, UNIMPLEMENTED for options this
// port does not implement.
absl::StatusOr<FlowMatchSchedulerConfig> ParseFlowMatchSchedulerConfig(const nlohmann::json& json);

// numpy.linspace(1.0, 1/N, N) in float64 (the FLUX pipelines' default sigmas).
std::vector<double> FluxSigmas(int num_steps);

// calculate_shift: linear in the image sequence length, not clamped.
double CalculateShift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len,
                      double base_shift, double max_shift);
inline double CalculateShift(int64_t image_seq_len, const FlowMatchSchedulerConfig& c) {
  return CalculateShift(image_seq_len, c.base_image_seq_len, c.max_image_seq_len, c.base_shift,
                        c.max_shift);
}
// FLUX.2's compute_empirical_mu(image_seq_len, num_steps).
double ComputeEmpiricalMu(int64_t image_seq_len, int64_t num_steps);

// Image-to-image's first step (diffusers' get_timesteps, in Python floats):
// t_start = int(max(steps - min(steps * strength, steps), 0)). The loop runs steps - t_start steps
// (at least one for any strength > 0).
int StrengthFirstStep(int steps, double strength);

class FlowMatchEulerScheduler {
 public:
  explicit FlowMatchEulerScheduler(FlowMatchSchedulerConfig config) : config_(std::move(config)) {}

  // `sigmas` as the pipeline passes them (float64, non-empty, in (0, 1]); `mu` is required with
  // dynamic shifting and ignored otherwise. INVALID_ARGUMENT on bad input.
  absl::Status SetTimesteps(const std::vector<double>& sigmas, std::optional<double> mu);

  int num_steps() const { return static_cast<int>(timesteps_.numel()); }
  // float32 CPU tensors: N + 1 sigmas (last 0), N timesteps.
  const torch::Tensor& sigmas() const { return sigmas_; }
  const torch::Tensor& timesteps() const { return timesteps_; }
  float sigma(int i) const { return sigmas_[i].item<float>(); }
  float timestep(int i) const { return timesteps_[i].item<float>(); }

  // Euler step `index` (0-based) from sample x with velocity v; result in v's dtype on v's device.
  // INVALID_ARGUMENT for an index outside [0, num_steps) or mismatched shapes.
  absl::StatusOr<torch::Tensor> Step(const torch::Tensor& v, int index,
                                     const torch::Tensor& x) const;

  const FlowMatchSchedulerConfig& config() const { return config_; }

 private:
  FlowMatchSchedulerConfig config_;
  torch::Tensor sigmas_;
  torch::Tensor timesteps_;
};

}  // namespace ditserve::pipeline
