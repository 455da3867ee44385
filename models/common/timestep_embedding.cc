#include "models/common/timestep_embedding.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::models {

torch::Tensor TimestepProjection(const torch::Tensor& t, const TimestepProjectionOptions& opts) {
  const int64_t half = opts.num_channels / 2;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(t.device());
  // Same op sequence as get_timestep_embedding, each op rounded to fp32 like PyTorch's.
  auto exponent = torch::arange(0, half, f32) * (-std::log(opts.max_period));
  exponent = exponent / (static_cast<double>(half) - opts.downscale_freq_shift);
  auto freqs = torch::exp(exponent);
  auto args = t.reshape({-1, 1}).to(torch::kFloat32) * freqs.unsqueeze(0);
  args = opts.scale * args;
  auto sin = torch::sin(args), cos = torch::cos(args);
  auto emb = opts.flip_sin_to_cos ? torch::cat({cos, sin}, -1) : torch::cat({sin, cos}, -1);
  if (opts.num_channels % 2 == 1) emb = torch::constant_pad_nd(emb, {0, 1});
  return emb;
}

absl::StatusOr<TimestepEmbedding> TimestepEmbedding::Load(const ModuleLoader& loader,
                                                          const std::string& prefix) {
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> l1, loader.LoadLinear(JoinPath(prefix, "linear_1")));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> l2, loader.LoadLinear(JoinPath(prefix, "linear_2")));
  if (l2->in_features() != l1->out_features()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": linear_2 takes ", l2->in_features(),
                                                   " features, linear_1 gives ",
                                                   l1->out_features()));
  }
  return TimestepEmbedding(std::move(l1), std::move(l2));
}

torch::Tensor TimestepEmbedding::Forward(const torch::Tensor& x) const {
  return linear_2_->Forward(torch::silu(linear_1_->Forward(x)));
}

}  // namespace ditserve::models
