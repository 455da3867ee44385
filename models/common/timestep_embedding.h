// Timestep embeddings (diffusers embeddings.py).
//   TimestepProjection: the sinusoid of Timesteps(num_channels, flip_sin_to_cos, shift, scale),
//     f_k = exp(-ln(max_period) * k / (half - shift)) in fp32, a_k = scale * (float32(t) * f_k),
//     output [cos(a) | sin(a)] when flipped (FLUX, Qwen), fp32, shape (B, num_channels).
//   TimestepEmbedding: linear_2(SiLU(linear_1(x))), loaded from "<prefix>.linear_{1,2}".
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

struct TimestepProjectionOptions {
  int64_t num_channels = 256;
  bool flip_sin_to_cos = true;
  double downscale_freq_shift = 0;
  double scale = 1;
  double max_period = 10000;
};

// A timestep / guidance argument as the float32 (B,) vector the sinusoid takes, on `device`.
// Deliberate divergence from diffusers, which first rounds it to the model dtype (`.to(dtype)`):
// in bf16 that turns guidance 3.5 * 1000 into 3504 and sigma 0.7 into 0.69921875, and the
// sinusoid's high frequencies amplify the rounding into a visibly different conditioning. In
// float32 both are identical; in bf16 ours stays within the float32 reference's tolerance.
inline torch::Tensor FloatConditioning(const torch::Tensor& t, const torch::Device& device) {
  return t.reshape({-1}).to(device, torch::kFloat32);
}

// t: (B,) of any floating dtype. Returns float32 (B, num_channels).
torch::Tensor TimestepProjection(const torch::Tensor& t, const TimestepProjectionOptions& opts = {});

class TimestepEmbedding {
 public:
  static absl::StatusOr<TimestepEmbedding> Load(const ModuleLoader& loader, const std::string& prefix);
  torch::Tensor Forward(const torch::Tensor& x) const;
  int64_t in_features() const { return linear_1_->in_features(); }

 private:
  TimestepEmbedding(std::shared_ptr<LinearLayer> l1, std::shared_ptr<LinearLayer> l2)
      : linear_1_(std::move(l1)), linear_2_(std::move(l2)) {}
  std::shared_ptr<LinearLayer> linear_1_, linear_2_;
};

}  // namespace ditserve::models
