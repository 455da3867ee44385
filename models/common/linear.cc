#include "models/common/linear.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/fp8_linear.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

absl::Status ReadLinearTensors(const sharding::ShardedStateDict& sd, const std::string& path,
                               torch::Tensor* weight, torch::Tensor* bias) {
  ASSIGN_OR_RETURN(*weight, sd.Get(path + ".weight"));
  if (weight->dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".weight: expected a 2-D tensor, got ", weight->dim(), "-D"));
  }
  *bias = torch::Tensor();
  if (sd.Contains(path + ".bias")) {
    ASSIGN_OR_RETURN(*bias, sd.Get(path + ".bias"));
    if (bias->dim() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".bias: expected a 1-D tensor, got ", bias->dim(), "-D"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Linear>> Linear::Load(const sharding::ShardedStateDict& sd,
                                                     const std::string& path) {
  torch::Tensor w, b;
  RETURN_IF_ERROR(ReadLinearTensors(sd, path, &w, &b));
  if (b.defined() && b.size(0) != w.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".bias has ", b.size(0),
                                                   " elements, the weight ", w.size(0), " rows"));
  }
  return std::make_unique<Linear>(std::move(w), std::move(b));
}

bool LinearLayer::QuantizeToFp8() {
  torch::Tensor& w = mutable_weight();
  if (is_fp8() || !Fp8Shape(w)) return false;
  torch::NoGradGuard no_grad;
  Fp8Weight f = QuantizeWeightFp8(w);
  torch::Tensor original = w;
  w = std::move(f.q);
  fp8_scale_ = std::move(f.scale);
  original.set_();  // the shared TensorImpl (state dict entry) lets go of the model-dtype bytes
  return true;
}

torch::Tensor LinearLayer::Gemm(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias) const {
  return StoredWeightLinear(x, weight, fp8_scale_, bias);
}

torch::Tensor LinearLayer::ForwardJoined(const std::vector<torch::Tensor>& parts) const {
  return Forward(parts.size() == 1 ? parts[0] : torch::cat(parts, -1));
}

torch::Tensor LinearLayer::BlockGemms(const std::vector<torch::Tensor>& parts,
                                      const torch::Tensor& weight, const torch::Tensor& bias) const {
  if (is_fp8() || has_lora() || parts.size() < 2) return {};
  int64_t total = 0;
  for (const torch::Tensor& p : parts) total += p.size(-1);
  if (weight.dim() != 2 || total != weight.size(1)) return {};
  std::vector<int64_t> sizes(parts[0].sizes().begin(), parts[0].sizes().end());
  sizes.back() = weight.size(0);
  torch::Tensor y;
  int64_t column = 0;
  for (const torch::Tensor& p : parts) {
    const int64_t width = p.size(-1);
    const torch::Tensor x2 = p.reshape({-1, width});
    const torch::Tensor wt = weight.narrow(1, column, width).t();  // a strided view, no copy
    if (!y.defined()) {
      y = bias.defined() ? torch::addmm(bias, x2, wt) : torch::mm(x2, wt);
    } else {
      y.addmm_(x2, wt);
    }
    column += width;
  }
  return y.view(sizes);
}

torch::Tensor Linear::ForwardJoined(const std::vector<torch::Tensor>& parts) const {
  torch::Tensor y = BlockGemms(parts, weight_, bias_);
  return y.defined() ? y : LinearLayer::ForwardJoined(parts);
}

torch::Tensor Linear::Forward(const torch::Tensor& x) const {
  torch::Tensor y = Gemm(x, weight_, bias_);
  AddLoraDelta(x, y);
  return y;
}

absl::StatusOr<std::unique_ptr<LinearLayer>> ReplicatedModuleLoader::LoadLinear(
    const std::string& path) const {
  const auto sharding = sd_.ShardingOf(path);
  if (sharding.style != sharding::TpStyle::kReplicated) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is planned ", sharding::TpStyleName(sharding.style),
                     "; a replicated loader cannot build it (use tp::ParallelModuleLoader)"));
  }
  ASSIGN_OR_RETURN(auto layer, Linear::Load(sd_, path));
  return std::unique_ptr<LinearLayer>(std::move(layer));
}

}  // namespace ditserve::models
