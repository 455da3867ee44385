#include "models/common/fused_linear.h"

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"
#include "models/common/fp8_linear.h"

namespace ditserve::models {

torch::Tensor StackAndRebind(const std::vector<torch::Tensor>& parts) {
  // FP8 weights are stacked as their bytes (the same rows; no float8 arithmetic needed).
  const torch::ScalarType type = parts.front().scalar_type();
  const bool fp8 = compat::IsFloat8(type);
  std::vector<torch::Tensor> sources;
  for (const torch::Tensor& p : parts) sources.push_back(fp8 ? p.view(torch::kUInt8) : p);
  torch::Tensor stacked = torch::cat(sources, 0);
  if (fp8) stacked = stacked.view(type);
  int64_t row = 0;
  for (const torch::Tensor& p : parts) {
    torch::Tensor view = stacked.narrow(0, row, p.size(0));
    row += p.size(0);
    // Tensor::set_ changes the shared TensorImpl: every handle to this weight (the layer's, the
    // state dict's) now reads the slice, and the old storage is released.
    p.set_(view.storage(), view.storage_offset(), view.sizes(), view.strides());
  }
  return stacked;
}

absl::StatusOr<FusedLinear> FusedLinear::Fuse(const std::vector<std::shared_ptr<LinearLayer>>& parts,
                                              const std::string& what) {
  if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": nothing to fuse"));
  const torch::Tensor& w0 = parts.front()->weight();
  const bool with_bias = parts.front()->bias().defined();
  std::vector<torch::Tensor> weights, biases;
  std::vector<int64_t> widths;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LinearLayer& p = *parts[i];
    if (!IsLocalLinear(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": part ", i, " is ", sharding::TpStyleName(p.style()),
          "; only replicated or colwise projections can share a GEMM"));
    }
    const torch::Tensor& w = p.weight();
    if (w.size(1) != w0.size(1) || w.scalar_type() != w0.scalar_type() ||
        w.device() != w0.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": part ", i, " has ", w.size(1), " input features (", c10::toString(w.scalar_type()),
          " on ", w.device().str(), "), part 0 has ", w0.size(1), " (",
          c10::toString(w0.scalar_type()), " on ", w0.device().str(), ")"));
    }
    if (p.is_fp8() != parts.front()->is_fp8()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": some projections have FP8 weights and others not"));
    }
    if (p.bias().defined() != with_bias) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": some projections have a bias and others not"));
    }
    weights.push_back(w);
    if (with_bias) biases.push_back(p.bias());
    widths.push_back(w.size(0));
  }
  torch::NoGradGuard no_grad;
  torch::Tensor weight = StackAndRebind(weights);
  torch::Tensor bias = with_bias ? StackAndRebind(biases) : torch::Tensor();
  torch::Tensor fp8_scale;
  if (parts.front()->is_fp8()) {
    std::vector<torch::Tensor> scales;
    for (const auto& p : parts) scales.push_back(p->fp8_scale());
    fp8_scale = StackAndRebind(scales);
  }
  return FusedLinear(std::move(weight), std::move(bias), std::move(fp8_scale), std::move(widths),
                     parts);
}

std::vector<torch::Tensor> FusedLinear::Forward(const torch::Tensor& x) const {
  torch::Tensor y = StoredWeightLinear(x, weight_, fp8_scale_, bias_);
  std::vector<torch::Tensor> out = y.split_with_sizes(widths_, -1);
  for (size_t i = 0; i < parts_.size(); ++i) parts_[i]->AddLoraDelta(x, out[i]);
  return out;
}

}  // namespace ditserve::models
