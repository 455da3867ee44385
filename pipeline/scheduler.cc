#include "pipeline/scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::pipeline {
namespace {

constexpr char kContext[] = "scheduler config";

}  // namespace

absl::StatusOr<FlowMatchSchedulerConfig> ParseFlowMatchSchedulerConfig(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("scheduler config is not a JSON object");
  FlowMatchSchedulerConfig c;
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_train_timesteps", &c.num_train_timesteps, kContext));
  ASSIGN_OR_RETURN(c.shift, JsonField<double>(j, "shift", c.shift));
  RETURN_IF_ERROR(ReadBool(j, "use_dynamic_shifting", &c.use_dynamic_shifting, kContext));
  ASSIGN_OR_RETURN(c.base_shift, JsonField<double>(j, "base_shift", c.base_shift));
  ASSIGN_OR_RETURN(c.max_shift, JsonField<double>(j, "max_shift", c.max_shift));
  RETURN_IF_ERROR(ReadPositiveInt(j, "base_image_seq_len", &c.base_image_seq_len, kContext));
  RETURN_IF_ERROR(ReadPositiveInt(j, "max_image_seq_len", &c.max_image_seq_len, kContext));
  ASSIGN_OR_RETURN(const double shift_terminal, JsonField<double>(j, "shift_terminal", 0.0));
  // diffusers tests `if self.config.shift_terminal:`, so 0 means off.
  if (shift_terminal != 0) c.shift_terminal = shift_terminal;
  ASSIGN_OR_RETURN(c.time_shift_type,
                   JsonField<std::string>(j, "time_shift_type", c.time_shift_type));
  if (c.time_shift_type != "exponential" && c.time_shift_type != "linear") {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler config: time_shift_type '", c.time_shift_type, "' is not exponential/linear"));
  }
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                          "invert_sigmas", "stochastic_sampling"}) {
    bool on = false;
    RETURN_IF_ERROR(ReadBool(j, key, &on, kContext));
    if (on) {
      return absl::UnimplementedError(
          absl::StrCat("scheduler config: '", key, "' is not supported by this server"));
    }
  }
  if (c.base_image_seq_len == c.max_image_seq_len) {
    return absl::InvalidArgumentError("scheduler config: base_image_seq_len == max_image_seq_len");
  }
  return c;
}

std::vector<double> FluxSigmas(int num_steps) {
  // numpy.linspace: start + i·step with step = (stop - start)/(num - 1), the last value set to
  // stop.
  std::vector<double> s(static_cast<size_t>(std::max(num_steps, 0)));
  if (num_steps <= 0) return s;
  const double start = 1.0, stop = 1.0 / num_steps;
  if (num_steps == 1) {
    s[0] = start;
    return s;
  }
  const double step = (stop - start) / (num_steps - 1);
  for (int i = 0; i < num_steps; ++i) s[i] = static_cast<double>(i) * step + start;
  s[num_steps - 1] = stop;
  return s;
}

double CalculateShift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len,
                      double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / static_cast<double>(max_seq_len - base_seq_len);
  const double b = base_shift - m * static_cast<double>(base_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

double ComputeEmpiricalMu(int64_t image_seq_len, int64_t num_steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333;
  const double a2 = 0.00016927, b2 = 0.45666666;
  const double l = static_cast<double>(image_seq_len);
  if (image_seq_len > 4300) return a2 * l + b2;
  const double m200 = a2 * l + b2;
  const double m10 = a1 * l + b1;
  const double a = (m200 - m10) / 190.0;
  const double b = m200 - 200.0 * a;
  return a * static_cast<double>(num_steps) + b;
}

absl::Status FlowMatchEulerScheduler::SetTimesteps(const std::vector<double>& sigmas_in,
                                                   std::optional<double> mu) {
  if (sigmas_in.empty()) return absl::InvalidArgumentError("scheduler: no sigmas");
  if (config_.use_dynamic_shifting && !mu.has_value()) {
    return absl::InvalidArgumentError("scheduler: dynamic shifting needs mu");
  }
  // numpy float32 arrays with Python-float scalars: every op rounds to float32.
  std::vector<float> s(sigmas_in.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (!(sigmas_in[i] > 0 && sigmas_in[i] <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler: sigma ", sigmas_in[i], " outside (0, 1]"));
    }
    s[i] = static_cast<float>(sigmas_in[i]);
  }
  if (config_.use_dynamic_shifting) {
    const bool exponential = config_.time_shift_type == "exponential";
    const float m = static_cast<float>(exponential ? std::exp(*mu) : *mu);
    for (float& v : s) {
      const float base = 1.0f / v - 1.0f;  // (1/t - 1) ** 1.0 is exact
      v = m / (m + base);
    }
  } else {
    const float shift = static_cast<float>(config_.shift);
    const float shift_m1 = static_cast<float>(config_.shift - 1.0);
    for (float& v : s) v = shift * v / (1.0f + shift_m1 * v);
  }
  if (config_.shift_terminal.has_value()) {
    const float scale = (1.0f - s.back()) / static_cast<float>(1.0 - *config_.shift_terminal);
    for (float& v : s) v = 1.0f - ((1.0f - v) / scale);
  }
  auto sig = torch::from_blob(s.data(), {static_cast<int64_t>(s.size())}, torch::kFloat32).clone();
  timesteps_ = sig * config_.num_train_timesteps;
  sigmas_ = torch::cat({sig, torch::zeros({1}, torch::kFloat32)});
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> FlowMatchEulerScheduler::Step(const torch::Tensor& v, int index,
                                                            const torch::Tensor& x) const {
  if (!sigmas_.defined())
    return absl::FailedPreconditionError("scheduler: SetTimesteps not called");
  if (index < 0 || index >= num_steps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: step index ", index, " outside [0, ", num_steps(), ")"));
  }
  if (!v.defined() || !x.defined() || v.sizes() != x.sizes()) {
    return absl::InvalidArgumentError("scheduler: velocity and sample shapes differ");
  }
  const float dt = sigmas_[index + 1].item<float>() - sigmas_[index].item<float>();
  return GuardTorch("scheduler step", [&] {
    // dt rounded to v's dtype, product in v's dtype, sum in float32 (diffusers
    // scheduling_flow_match_euler_discrete.py).
    // Made on v's device (a fill, not a host-to-device copy, which would wait for the device).
    auto dt_t =
        torch::full({}, dt, torch::TensorOptions().dtype(v.scalar_type()).device(v.device()));
    auto prod = dt_t * v;
    return (x.to(torch::kFloat32) + prod.to(torch::kFloat32)).to(v.scalar_type());
  });
}

int StrengthFirstStep(int steps, double strength) {
  const double n = static_cast<double>(steps);
  const double init_timestep = std::min(n * strength, n);
  return static_cast<int>(std::max(n - init_timestep, 0.0));
}

}  // namespace ditserve::pipeline
