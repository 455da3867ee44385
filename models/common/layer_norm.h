// torch.nn.LayerNorm(D, elementwise_affine=False, eps) over the last dim (no weight, no bias).
#pragma once

#include <torch/torch.h>

namespace ditserve::models {

inline torch::Tensor LayerNormNoAffine(const torch::Tensor& x, double eps) {
  return torch::layer_norm(x, {x.size(-1)}, /*weight=*/{}, /*bias=*/{}, eps);
}

}  // namespace ditserve::models
