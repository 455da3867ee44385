#include "models/common/flux_attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/attention.h"
#include "models/common/attention_inputs.h"

namespace ditserve::models {

absl::StatusOr<std::shared_ptr<TorchRmsNorm>> LoadQkNorm(const ModuleLoader& loader,
                                                         const std::string& path, int64_t head_dim,
                                                         double eps) {
  ASSIGN_OR_RETURN(auto norm, TorchRmsNorm::Load(loader, path, eps));
  if (norm.dim() != head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".weight has ", norm.dim(), " elements, expected head_dim ", head_dim));
  }
  return std::make_shared<TorchRmsNorm>(std::move(norm));
}

absl::StatusOr<FluxAttention> FluxAttention::Load(const ModuleLoader& loader,
                                                  const std::string& prefix, int64_t head_dim,
                                                  bool joint, double qk_norm_eps) {
  ASSIGN_OR_RETURN(JointProjections proj, JointProjections::Load(loader, prefix, head_dim, joint));
  FluxAttention a(std::move(proj));
  ASSIGN_OR_RETURN(a.norm_q_,
                   LoadQkNorm(loader, JoinPath(prefix, "norm_q"), head_dim, qk_norm_eps));
  ASSIGN_OR_RETURN(a.norm_k_,
                   LoadQkNorm(loader, JoinPath(prefix, "norm_k"), head_dim, qk_norm_eps));
  if (!joint) return a;
  ASSIGN_OR_RETURN(a.norm_added_q_,
                   LoadQkNorm(loader, JoinPath(prefix, "norm_added_q"), head_dim, qk_norm_eps));
  ASSIGN_OR_RETURN(a.norm_added_k_,
                   LoadQkNorm(loader, JoinPath(prefix, "norm_added_k"), head_dim, qk_norm_eps));
  return a;
}

std::pair<torch::Tensor, torch::Tensor> FluxAttention::ForwardJoint(const torch::Tensor& x,
                                                                    const torch::Tensor& context,
                                                                    const RopeTables& rope) const {
  const QkvViews img = proj_.Image(x);
  const QkvViews txt = proj_.Text(context);
  const JointQkv qkv =
      JointQkvHeadsFirst({{txt.q, norm_added_q_.get()}, {txt.k, norm_added_k_.get()}, {txt.v}},
                         {{img.q, norm_q_.get()}, {img.k, norm_k_.get()}, {img.v}}, rope);
  return proj_.Project(DotProductAttentionHeadsFirst(qkv.q, qkv.k, qkv.v), context.size(1));
}

torch::Tensor FluxAttention::ForwardSingle(const torch::Tensor& x, const RopeTables& rope) const {
  const QkvViews img = proj_.Image(x);
  const JointQkv qkv =
      JointQkvHeadsFirst({}, {{img.q, norm_q_.get()}, {img.k, norm_k_.get()}, {img.v}}, rope);
  return DotProductAttentionHeadsFirst(qkv.q, qkv.k, qkv.v);
}

}  // namespace ditserve::models
