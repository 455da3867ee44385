// Flux2FeedForward(D, mult) (diffusers transformer_flux2.py):
// linear_out(silu(g) · v) with [g | v] = linear_in(x), the gate half first; no biases in FLUX.2.
//
// Tensor parallelism: linear_in is PackedColwiseParallel([1, 1]) in FLUX.2's plan, so this rank's
// output is [g_r | v_r] (its slice of each half, in block order) and halving the local output
// pairs every gate with its own value; linear_out is rowwise (one all-reduce). Replicated
// (tp = 1): the full [g | v]. Load refuses a plain colwise linear_in, whose local output would be
// a contiguous slice of [g | v] and mix the halves (diffusers hooks/tensor_parallel.py).
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

// silu(x[..., :W/2]) * x[..., W/2:] over the last dim (Flux2SwiGLU): our fused kernel on CUDA
// (models/cuda/swiglu.h; bit-identical to the reference), SwiGluReference elsewhere.
torch::Tensor SwiGlu(const torch::Tensor& x);
// The same written into `out` (x's shape with W/2 last, x's dtype and device, a contiguous last
// dim: e.g. the tail of the single blocks' [attention | mlp] buffer).
void SwiGluInto(const torch::Tensor& x, torch::Tensor& out);
// The reference op sequence: torch::silu of the first half times the second.
torch::Tensor SwiGluReference(const torch::Tensor& x);

class SwiGluFeedForward {
 public:
  // Reads "<prefix>.linear_in" and "<prefix>.linear_out".
  static absl::StatusOr<SwiGluFeedForward> Load(const ModuleLoader& loader, const std::string& prefix);
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  SwiGluFeedForward(std::shared_ptr<LinearLayer> in, std::shared_ptr<LinearLayer> out)
      : linear_in_(std::move(in)), linear_out_(std::move(out)) {}
  std::shared_ptr<LinearLayer> linear_in_, linear_out_;
};

}  // namespace ditserve::models
