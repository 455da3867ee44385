// ModulationBank: all of a transformer's AdaLN modulation projections as one GEMM per step, and at
// most one all-reduce. Every one of them (FLUX.1's norm1 / norm1_context / norm, Qwen-Image's
// img_mod / txt_mod, FLUX.2's three shared modulations, every model's norm_out) reads the same
// SiLU(temb), so the step can compute them together: one weight read, one launch, and — when they
// are planned rowwise_split_input (sharding::AddModulationSharding, tp > 1) — one all-reduce
// instead of one per layer (FLUX.1-dev: 77 → 1, Qwen-Image: 121 → 1, FLUX.2-dev: 4 → 1).
//
// Stack copies the parts' weights into one buffer (rows in part order) and re-points each part's
// weight and bias at its slice (StackAndRebind), so memory does not grow and a part's own Forward
// still works. Parts must all be replicated, or all rowwise_split_input on `comm`'s group, with
// the same input width, dtype and device, and all with a bias or none.
//
// Output(i, temb) gives part i's (B, out_i) result for the modulation input SiLU(temb): the first
// call with a given temb tensor computes every part (the SiLU, the GEMM, the parts' LoRA deltas —
// before the all-reduce for split parts, as RowParallelLinear adds them — the all-reduce, the
// bias) and keeps the result with a reference to temb; calls with that same tensor return views of
// it; a call with another tensor recomputes. So the AdaLN modules keep their interfaces and the
// first one of a step pays for all.
//
// Call order across ranks: the computing call is a collective when split: every rank reaches it at
// the same point of the forward (the first AdaLN of the step). One thread at a time (a model runs
// one forward at a time); LoRA terms change only between forwards. Ownership: shares the parts;
// borrows the communicator, which must outlive the bank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/status/status.h"
#include "comm/communicator.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/linear_layer.h"

namespace ditserve::models::tp {

class ModulationBank {
 public:
  // `what` names the model in errors. INVALID_ARGUMENT when the parts disagree (style, width,
  // dtype, device, bias) or one is neither replicated nor rowwise_split_input, or is FP8.
  static absl::StatusOr<std::shared_ptr<ModulationBank>> Stack(
      const std::vector<std::shared_ptr<LinearLayer>>& parts, comm::Communicator* comm,
      const std::string& what);

  // Part `part`'s output for the input SiLU(temb), temb (B, in_features) in the parts' dtype.
  torch::Tensor Output(size_t part, const torch::Tensor& temb) const;

  size_t parts() const { return parts_.size(); }

 private:
  ModulationBank() = default;
  void Compute(const torch::Tensor& temb) const;

  std::vector<std::shared_ptr<LinearLayer>> parts_;
  std::vector<int64_t> widths_;
  torch::Tensor weight_, bias_;  // stacked rows; for split parts this rank's columns
  bool split_input_ = false;
  comm::Communicator* comm_ = nullptr;
  // The last computation: the temb it was for (held, so its identity cannot be reused) and the
  // parts' outputs (views of one tensor).
  mutable torch::Tensor cached_temb_;
  mutable std::vector<torch::Tensor> cached_;
};

// One modulation layer and where its shared output goes (an AdaLN's set_modulation_source, or a
// block's).
struct ModulationConsumer {
  std::shared_ptr<LinearLayer> layer;
  std::function<void(ModulationSource)> attach;
};

// Stacks the consumers' layers into one bank and gives each consumer its source. At load, after
// every layer is built (and before LoRA adapters are loaded: they find the layers as usual).
absl::Status ShareModulation(const std::vector<ModulationConsumer>& consumers,
                             comm::Communicator* comm, const std::string& what);

}  // namespace ditserve::models::tp
