#include "models/common/attention.h"

#include "common/torch_compat.h"

namespace ditserve::models {

torch::Tensor DotProductAttentionHeadsFirst(const torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, const torch::Tensor& mask) {
  auto out = compat::ScaledDotProductAttention(q, k, v, mask);
  return out.permute({0, 2, 1, 3}).flatten(2, 3).to(q.scalar_type());
}

void DotProductAttentionHeadsFirstInto(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, torch::Tensor& joined) {
  const torch::Tensor out = compat::ScaledDotProductAttention(q, k, v);  // (B, H, S, D)
  const int64_t b = out.size(0), h = out.size(1), s = out.size(2), d = out.size(3);
  TORCH_CHECK(joined.dim() == 3 && joined.size(0) == b && joined.size(1) == s &&
                  joined.size(2) >= h * d && joined.is_contiguous(),
              "attention join: the buffer must be contiguous (B, S, >= heads·hd)");
  joined.narrow(2, 0, h * d).view({b, s, h, d}).copy_(out.permute({0, 2, 1, 3}));
}

}  // namespace ditserve::models
