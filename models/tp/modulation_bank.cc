#include "models/tp/modulation_bank.h"

#include "absl/strings/str_cat.h"
#include "common/torch_guard.h"
#include "models/common/fused_linear.h"

namespace ditserve::models::tp {

absl::StatusOr<std::shared_ptr<ModulationBank>> ModulationBank::Stack(
    const std::vector<std::shared_ptr<LinearLayer>>& parts, comm::Communicator* comm,
    const std::string& what) {
  if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no modulation layers"));
  const LinearLayer& first = *parts.front();
  const sharding::TpStyle style = first.style();
  if (style != sharding::TpStyle::kReplicated && style != sharding::TpStyle::kRowwiseSplitInput) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": modulation layers must be replicated or rowwise_split_input, not ",
        sharding::TpStyleName(style)));
  }
  if (style == sharding::TpStyle::kRowwiseSplitInput && comm == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": split modulation needs a communicator"));
  }
  std::shared_ptr<ModulationBank> bank(new ModulationBank());
  bank->split_input_ = style == sharding::TpStyle::kRowwiseSplitInput;
  bank->comm_ = comm;
  const bool with_bias = first.bias().defined();
  std::vector<torch::Tensor> weights, biases;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LinearLayer& p = *parts[i];
    const torch::Tensor& w = p.weight();
    if (p.style() != style || p.is_fp8() || w.size(1) != first.weight().size(1) ||
        w.scalar_type() != first.weight().scalar_type() || w.device() != first.weight().device() ||
        p.bias().defined() != with_bias) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": modulation layer ", i, " (", sharding::TpStyleName(p.style()), ", ", w.size(1),
          " input columns, ", c10::toString(w.scalar_type()), (p.is_fp8() ? ", FP8" : ""),
          ") cannot share a GEMM with layer 0 (", sharding::TpStyleName(style), ", ",
          first.weight().size(1), ", ", c10::toString(first.weight().scalar_type()), ")"));
    }
    weights.push_back(w);
    if (with_bias) biases.push_back(p.bias());
    bank->widths_.push_back(w.size(0));
  }
  auto stacked = GuardTorch("stacking the modulation layers", [&] {
    torch::NoGradGuard no_grad;
    bank->weight_ = StackAndRebind(weights);
    if (with_bias) bank->bias_ = StackAndRebind(biases);
    return true;
  });
  if (!stacked.ok()) return stacked.status();
  bank->parts_ = parts;
  return bank;
}

void ModulationBank::Compute(const torch::Tensor& temb) const {
  cached_temb_ = torch::Tensor();  // nothing cached until this finishes (it may throw)
  const torch::Tensor x = torch::silu(temb);
  torch::Tensor in = x;
  if (split_input_) {
    const int64_t width = weight_.size(1);
    TORCH_CHECK(x.size(-1) == width * comm_->world_size(), "modulation input has ", x.size(-1),
                " features, expected ", width * comm_->world_size());
    in = x.narrow(-1, comm_->rank() * width, width);
  }
  // Split parts: the bias once, after the sum of the partial products.
  torch::Tensor y = torch::linear(in, weight_, split_input_ ? torch::Tensor() : bias_).contiguous();
  cached_ = y.split_with_sizes(widths_, -1);
  // LoRA deltas into each part's view; a split part's (A's columns) join the partial products in
  // the one all-reduce.
  for (size_t i = 0; i < parts_.size(); ++i) parts_[i]->AddLoraDelta(in, cached_[i]);
  if (split_input_) {
    if (comm_->world_size() > 1) ThrowIfError(comm_->AllReduceSum(y));
    if (bias_.defined()) y.add_(bias_);
  }
  cached_temb_ = temb;
}

torch::Tensor ModulationBank::Output(size_t part, const torch::Tensor& temb) const {
  if (!cached_temb_.defined() || !cached_temb_.is_same(temb)) Compute(temb);
  return cached_.at(part);
}

absl::Status ShareModulation(const std::vector<ModulationConsumer>& consumers,
                             comm::Communicator* comm, const std::string& what) {
  std::vector<std::shared_ptr<LinearLayer>> layers;
  for (const ModulationConsumer& c : consumers) layers.push_back(c.layer);
  auto bank = ModulationBank::Stack(layers, comm, what);
  if (!bank.ok()) return bank.status();
  std::shared_ptr<const ModulationBank> shared = *std::move(bank);
  for (size_t i = 0; i < consumers.size(); ++i) {
    consumers[i].attach([shared, i](const torch::Tensor& temb) { return shared->Output(i, temb); });
  }
  return absl::OkStatus();
}

}  // namespace ditserve::models::tp
