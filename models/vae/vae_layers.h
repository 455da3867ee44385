// The primitive layers of the VAE decoder as plain weight holders with a const forward: 2-D
// convolution, affine GroupNorm and the activation. Internal to models/vae.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_config.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

// Conv2d with bias, stride 1, "same" padding (k / 2), as every decoder conv is.
struct Conv2d {
  torch::Tensor weight, bias;
  static absl::StatusOr<Conv2d> Load(const sharding::ShardedStateDict& state,
                                     const std::string& prefix, int64_t in, int64_t out,
                                     int64_t kernel);
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// The encoders' 2x downsampling (diffusers' Downsample2D(padding=0), and the Qwen-Image VAE's
// "downsample2d" resample: nn.ZeroPad2d((0, 1, 0, 1))): `x` padded with one zero column on the
// right and one zero row at the bottom, then `conv` with stride 2 and no padding of its own.
torch::Tensor PadRightBottomStride2(const torch::Tensor& x, const Conv2d& conv);

// Affine GroupNorm over (B, C, ...) inputs.
struct GroupNorm {
  torch::Tensor weight, bias;
  int64_t groups = 0;
  double eps = 0;
  static absl::StatusOr<GroupNorm> Load(const sharding::ShardedStateDict& state,
                                        const std::string& prefix, int64_t channels,
                                        int64_t groups, double eps);
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// diffusers.models.activations.get_activation for the names the config parser accepts.
torch::Tensor Activate(VaeActivation act, const torch::Tensor& x);

// Every GroupNorm of diffusers' VAE Decoder uses this epsilon (resnet_eps / conv_norm_out).
inline constexpr double kVaeNormEps = 1e-6;

}  // namespace ditserve::vae
