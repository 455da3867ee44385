#include "models/flux2/flux2_parallel_self_attention.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/common/attention.h"
#include "models/common/attention_inputs.h"
#include "models/common/flux_attention.h"
#include "models/common/swiglu_feed_forward.h"

namespace ditserve::models::flux2 {

absl::StatusOr<Flux2ParallelSelfAttention> Flux2ParallelSelfAttention::Load(
    const ModuleLoader& loader, const std::string& prefix, int64_t head_dim, int64_t inner_dim,
    int64_t mlp_hidden_dim, double eps) {
  Flux2ParallelSelfAttention a;
  a.head_dim_ = head_dim;
  const std::string proj_path = JoinPath(prefix, "to_qkv_mlp_proj");
  const std::string out_path = JoinPath(prefix, "to_out");
  ASSIGN_OR_RETURN(a.to_qkv_mlp_proj_, loader.LoadLinear(proj_path));
  ASSIGN_OR_RETURN(a.to_out_, loader.LoadLinear(out_path));

  const auto proj_style = a.to_qkv_mlp_proj_->style();
  std::vector<int64_t> blocks;
  if (proj_style == sharding::TpStyle::kPackedColwise) {
    blocks = a.to_qkv_mlp_proj_->local_blocks();
  } else if (proj_style == sharding::TpStyle::kReplicated) {
    blocks = {inner_dim, inner_dim, inner_dim, mlp_hidden_dim, mlp_hidden_dim};
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat(proj_path, " is planned ", sharding::TpStyleName(proj_style),
                     "; the fused projection needs packed_colwise with blocks [D, D, D, Mh, Mh] "
                     "(or replication)"));
  }
  if (blocks.size() != 5 || blocks[0] != blocks[1] || blocks[1] != blocks[2] ||
      blocks[3] != blocks[4] || blocks[0] <= 0 || blocks[0] % head_dim != 0 || blocks[3] <= 0 ||
      blocks[0] * 3 + blocks[3] * 2 != a.to_qkv_mlp_proj_->out_features()) {
    return absl::InvalidArgumentError(
        absl::StrCat(proj_path, ": local blocks [", absl::StrJoin(blocks, ", "), "] for ",
                     a.to_qkv_mlp_proj_->out_features(),
                     " local rows are not [q, k, v, gate, value] with equal ",
                     "q/k/v (a multiple of head_dim ", head_dim, ") and equal gate/value"));
  }
  // Every rank keeps the global proportions: local q/k/v : gate/value = D : Mh.
  if (blocks[0] * mlp_hidden_dim != blocks[3] * inner_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(proj_path, ": local blocks [", absl::StrJoin(blocks, ", "),
                     "] break the ratio D : Mh = ", inner_dim, " : ", mlp_hidden_dim));
  }
  a.local_qkv_ = blocks[0];
  a.local_mlp_ = blocks[3];

  const auto out_style = a.to_out_->style();
  if (out_style != sharding::TpStyle::kPackedRowwise &&
      out_style != sharding::TpStyle::kReplicated) {
    return absl::FailedPreconditionError(
        absl::StrCat(out_path, " is planned ", sharding::TpStyleName(out_style),
                     "; it takes [attention | mlp] and needs packed_rowwise with blocks [D, Mh] "
                     "(or replication)"));
  }
  const auto out_blocks = a.to_out_->local_blocks();
  if (a.to_out_->in_features() != a.local_qkv_ + a.local_mlp_ ||
      (out_style == sharding::TpStyle::kPackedRowwise &&
       out_blocks != std::vector<int64_t>{a.local_qkv_, a.local_mlp_})) {
    return absl::InvalidArgumentError(
        absl::StrCat(out_path, " takes ", a.to_out_->in_features(),
                     " features on this rank in blocks [", absl::StrJoin(out_blocks, ", "),
                     "], but attention and MLP give [", a.local_qkv_, ", ", a.local_mlp_, "]"));
  }
  if (a.to_out_->out_features() != inner_dim) {
    return absl::InvalidArgumentError(absl::StrCat(out_path, " gives ", a.to_out_->out_features(),
                                                   " features, expected ", inner_dim));
  }
  ASSIGN_OR_RETURN(a.norm_q_, LoadQkNorm(loader, JoinPath(prefix, "norm_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_k_, LoadQkNorm(loader, JoinPath(prefix, "norm_k"), head_dim, eps));
  return a;
}

torch::Tensor Flux2ParallelSelfAttention::Heads(const torch::Tensor& t) const {
  return t.reshape({t.size(0), t.size(1), local_qkv_ / head_dim_, head_dim_});
}

torch::Tensor Flux2ParallelSelfAttention::Forward(const torch::Tensor& x,
                                                  const RopeTables& rope) const {
  auto z = to_qkv_mlp_proj_->Forward(x);
  // QK-norm + RoPE + the heads-first layout: one fused kernel launch for q, k and v on CUDA
  // (models/common/attention_inputs.h), the reference sequence elsewhere.
  const JointQkv qkv =
      JointQkvHeadsFirst({},
                         {{Heads(z.narrow(-1, 0, local_qkv_)), norm_q_.get()},
                          {Heads(z.narrow(-1, local_qkv_, local_qkv_)), norm_k_.get()},
                          {Heads(z.narrow(-1, 2 * local_qkv_, local_qkv_))}},
                         rope);
  const torch::Tensor &q = qkv.q, &k = qkv.k, &v = qkv.v;
  // [attention | mlp] for the output projection: the SwiGLU and the attention each written
  // straight into their part of one buffer.
  const int64_t attention_width = q.size(1) * v.size(3);
  torch::Tensor joined =
      torch::empty({z.size(0), z.size(1), attention_width + local_mlp_}, z.options());
  torch::Tensor mlp = joined.narrow(2, attention_width, local_mlp_);
  SwiGluInto(z.narrow(-1, 3 * local_qkv_, 2 * local_mlp_), mlp);
  DotProductAttentionHeadsFirstInto(q, k, v, joined);
  return to_out_->Forward(joined);
}

}  // namespace ditserve::models::flux2
