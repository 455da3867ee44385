#include "models/vae/mid_block_attention.h"

#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::vae {

absl::StatusOr<MidBlockAttention> MidBlockAttention::Load(const sharding::ShardedStateDict& state,
                                                          const std::string& prefix,
                                                          int64_t channels, int64_t groups) {
  const int64_t c = channels;
  MidBlockAttention a;
  ASSIGN_OR_RETURN(a.norm_, GroupNorm::Load(state, prefix + ".group_norm", c, groups, kVaeNormEps));
  ASSIGN_OR_RETURN(a.q_w_, state.GetWithShape(prefix + ".to_q.weight", {c, c}));
  ASSIGN_OR_RETURN(a.q_b_, state.GetWithShape(prefix + ".to_q.bias", {c}));
  ASSIGN_OR_RETURN(a.k_w_, state.GetWithShape(prefix + ".to_k.weight", {c, c}));
  ASSIGN_OR_RETURN(a.k_b_, state.GetWithShape(prefix + ".to_k.bias", {c}));
  ASSIGN_OR_RETURN(a.v_w_, state.GetWithShape(prefix + ".to_v.weight", {c, c}));
  ASSIGN_OR_RETURN(a.v_b_, state.GetWithShape(prefix + ".to_v.bias", {c}));
  ASSIGN_OR_RETURN(a.out_w_, state.GetWithShape(prefix + ".to_out.0.weight", {c, c}));
  ASSIGN_OR_RETURN(a.out_b_, state.GetWithShape(prefix + ".to_out.0.bias", {c}));
  return a;
}

torch::Tensor MidBlockAttention::Forward(const torch::Tensor& x) const {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  // GroupNorm statistics over (C/G, h, w) are the same on (B, C, h*w) as on the 4-D map.
  auto tokens = norm_(x).view({b, c, h * w}).transpose(1, 2);  // (B, hw, C)
  auto q = torch::linear(tokens, q_w_, q_b_).unsqueeze(1);      // one head: (B, 1, hw, C)
  auto k = torch::linear(tokens, k_w_, k_b_).unsqueeze(1);
  auto v = torch::linear(tokens, v_w_, v_b_).unsqueeze(1);
  auto o = compat::ScaledDotProductAttention(q, k, v).squeeze(1);
  o = torch::linear(o, out_w_, out_b_);
  return o.transpose(1, 2).reshape({b, c, h, w}) + x;
}

}  // namespace ditserve::vae
