#include "models/common/attention.h"

#include "common/torch_compat.h"

namespace ditserve::models {

torch::Tensor DotProductAttentionHeadsFirst(const torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, const torch::Tensor& mask) {
  auto out = compat::ScaledDotProductAttention(q, k, v, mask);
  return out.permute({0, 2, 1, 3}).flatten(2, 3).to(q.scalar_type());
}

torch::Tensor DotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& mask) {
  return DotProductAttentionHeadsFirst(q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}),
                                       v.permute({0, 2, 1, 3}), mask);
}

}  // namespace ditserve::models
