// FeedForward(D, activation_fn="gelu-approximate") (diffusers attention.py):
// net.2(GELU_tanh(net.0.proj(x))), net.1 being a parameter-free dropout. Under tensor parallelism
// net.0.proj is colwise and net.2 rowwise (one all-reduce); Load checks that the local widths of
// the two layers agree, whatever the plan made of them.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

class FeedForward {
 public:
  static absl::StatusOr<FeedForward> Load(const ModuleLoader& loader, const std::string& prefix);
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  FeedForward(std::shared_ptr<LinearLayer> proj_in, std::shared_ptr<LinearLayer> proj_out)
      : proj_in_(std::move(proj_in)), proj_out_(std::move(proj_out)) {}
  std::shared_ptr<LinearLayer> proj_in_, proj_out_;
};

// 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))), torch's gelu(approximate="tanh").
inline torch::Tensor GeluTanh(const torch::Tensor& x) { return torch::gelu(x, "tanh"); }

// GeluTanh(layer.Forward(x)); one GEMM with a GELU epilogue where the layer is local (replicated
// or colwise: no collective between the product and the activation) and the device supports it.
torch::Tensor LinearThenGeluTanh(const LinearLayer& layer, const torch::Tensor& x);

}  // namespace ditserve::models
