// FusedLinear: several local Linears that read the same input (attention's q/k/v, FLUX.2's
// q/k/v/mlp) run as one GEMM with the weights stacked along the output dim; Forward splits the
// result back into the parts (views, no copy). One large GEMM keeps the tensor cores busier than
// three small ones, and the input is read once.
//
// Only layers whose Forward is purely local may be fused (replicated, colwise, packed colwise:
// IsLocalLinear): a colwise shard's rows are this rank's rows, so stacking the local shards of
// q, k and v is exactly the local shard of the stacked projection, at every tp degree.
//
// Memory: Fuse copies the parts' weights into one buffer and re-points every part's weight and
// bias tensor (and therefore the ShardedStateDict entries that share them) at its slice of that
// buffer, so the separate copies are freed at once and a model never holds both. The parts stay
// usable (their Forward reads the views).
// LoRA: the parts stay the owners of their low-rank terms (LinearLayer::SetLoraTerms); Forward adds
// each part's delta to its output view after the one GEMM.
// FP8: parts quantized at load (LinearLayer::QuantizeToFp8) stack as FP8 with their scales, and
// the one GEMM is the FP8 one; parts must agree on it.
// Thread-safety: immutable after Fuse (the parts' LoRA terms change only between forwards).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"

namespace ditserve::models {

// Copies `parts` (same dtype and trailing dims) into one tensor along dim 0 and re-points each
// part's TensorImpl at its slice of it, so every handle to a part (a layer's, the state dict's)
// reads the slice and the separate copies are freed. FP8 parts are stacked as bytes.
torch::Tensor StackAndRebind(const std::vector<torch::Tensor>& parts);

class FusedLinear {
 public:
  // `what` names the module in errors. INVALID_ARGUMENT when a part is rowwise, the parts disagree
  // on in_features, dtype or device, or some have a bias and others not.
  static absl::StatusOr<FusedLinear> Fuse(const std::vector<std::shared_ptr<LinearLayer>>& parts,
                                          const std::string& what);

  // One output per part, in order: (..., out_features(i)) views of one GEMM result.
  std::vector<torch::Tensor> Forward(const torch::Tensor& x) const;
  int64_t in_features() const { return weight_.size(1); }
  int64_t out_features(size_t i) const { return widths_.at(i); }
  size_t parts() const { return widths_.size(); }

 private:
  FusedLinear(torch::Tensor w, torch::Tensor b, torch::Tensor fp8_scale, std::vector<int64_t> widths,
              std::vector<std::shared_ptr<LinearLayer>> parts)
      : weight_(std::move(w)),
        bias_(std::move(b)),
        fp8_scale_(std::move(fp8_scale)),
        widths_(std::move(widths)),
        parts_(std::move(parts)) {}
  torch::Tensor weight_, bias_;
  torch::Tensor fp8_scale_;  // defined: weight_ is FP8
  std::vector<int64_t> widths_;
  std::vector<std::shared_ptr<LinearLayer>> parts_;
};

}  // namespace ditserve::models
