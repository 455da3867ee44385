// The attention op as diffusers' "native" backend runs it: scaled-dot-product attention over q, k,
// v (B, heads, S, hd) (heads first, e.g. from JointHeadsFirst) with the default scale 1/sqrt(hd),
// no dropout, not causal, and the result comes back as (B, S, heads·hd) in q's dtype (diffusers
// permutes its (B, S, heads, hd) projections to that layout and back). Heads are whatever this
// rank holds (local heads under tensor parallelism).
#pragma once

#include <torch/torch.h>

namespace ditserve::models {

// `mask`: empty, or boolean broadcastable to (B, heads, S_q, S_k), true = attend.
torch::Tensor DotProductAttentionHeadsFirst(const torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, const torch::Tensor& mask = {});

// Writes DotProductAttentionHeadsFirst(q, k, v) into the first
// heads·hd columns of `joined` (B, S, heads·hd + M, contiguous, q's dtype); the caller writes the
// rest (FLUX.2's single blocks: the SwiGLU straight into it, models/common/swiglu_feed_forward.h).
void DotProductAttentionHeadsFirstInto(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, torch::Tensor& joined);

}  // namespace ditserve::models
