// The interface every linear layer of a model implements: a plain replicated Linear
// (models/common/linear.h) or a tensor-parallel one (models/tp/). Model code holds LinearLayers and
// never knows which style a layer has: the plan decides, through a ModuleLoader.
//
// Forward throws (c10::Error, or StatusError for a failed collective); model entry points catch
// with GuardTorch (common/torch_guard.h). Thread-safety: Forward is const but a
// tensor-parallel layer drives its Communicator, so one thread at a time per model.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "sharding/tp_style.h"

namespace ditserve::models {

class LinearLayer {
 public:
  virtual ~LinearLayer() = default;

  // y = x · Wᵀ + b with this layer's tensor-parallel semantics (see models/tp/).
  virtual torch::Tensor Forward(const torch::Tensor& x) const = 0;

  // Width of the last dim this rank feeds in, and of the output this rank gets back (local widths:
  // a colwise layer's output and a rowwise layer's input are this rank's shard).
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  virtual sharding::TpStyle style() const = 0;
  // Packed styles: this rank's block sizes along the sliced dim (output for packed colwise, input
  // for packed rowwise); empty otherwise.
  virtual std::vector<int64_t> local_blocks() const { return {}; }
  virtual const torch::Tensor& weight() const = 0;
  // This rank's bias (undefined when the layer has none). For a rowwise layer it is the full bias,
  // added once after the reduction.
  virtual const torch::Tensor& bias() const = 0;
};

// True for styles whose Forward is a plain local x · Wᵀ + b with no communication (replicated,
// colwise, packed colwise): such layers may be fused or given a GEMM epilogue.
inline bool IsLocalLinear(const LinearLayer& layer) {
  return !sharding::IsRowwise(layer.style());
}

}  // namespace ditserve::models
