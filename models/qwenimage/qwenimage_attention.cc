#include "models/qwenimage/qwenimage_attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/attention.h"
#include "models/common/attention_inputs.h"

namespace ditserve::models::qwenimage {
namespace {

absl::StatusOr<std::shared_ptr<DiffusersRmsNorm>> LoadQkNorm(const ModuleLoader& loader,
                                                             const std::string& path,
                                                             int64_t head_dim, double eps) {
  ASSIGN_OR_RETURN(auto norm, DiffusersRmsNorm::Load(loader, path, eps));
  if (norm.dim() != head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".weight has ", norm.dim(), " elements, expected head_dim ", head_dim));
  }
  return std::make_shared<DiffusersRmsNorm>(std::move(norm));
}

}  // namespace

absl::StatusOr<QwenImageAttention> QwenImageAttention::Load(const ModuleLoader& loader,
                                                            const std::string& prefix,
                                                            int64_t head_dim, double eps) {
  ASSIGN_OR_RETURN(JointProjections proj,
                   JointProjections::Load(loader, prefix, head_dim, /*joint=*/true));
  QwenImageAttention a(std::move(proj));
  ASSIGN_OR_RETURN(a.norm_q_, LoadQkNorm(loader, JoinPath(prefix, "norm_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_k_, LoadQkNorm(loader, JoinPath(prefix, "norm_k"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_added_q_,
                   LoadQkNorm(loader, JoinPath(prefix, "norm_added_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_added_k_,
                   LoadQkNorm(loader, JoinPath(prefix, "norm_added_k"), head_dim, eps));
  return a;
}

std::pair<torch::Tensor, torch::Tensor> QwenImageAttention::Forward(
    const torch::Tensor& x, const torch::Tensor& context, const QwenRopeFreqs& rope,
    const torch::Tensor& mask) const {
  const QkvViews img = proj_.Image(x);
  const QkvViews txt = proj_.Text(context);
  // diffusers rotates each stream with its own table before the cat: the reference path's order.
  constexpr RopeOrder kOrder = RopeOrder::kPerStream;
  const JointQkv qkv = JointQkvHeadsFirst(
      {{txt.q, nullptr, norm_added_q_.get()}, {txt.k, nullptr, norm_added_k_.get()}, {txt.v}},
      {{img.q, nullptr, norm_q_.get()}, {img.k, nullptr, norm_k_.get()}, {img.v}}, rope.joint,
      kOrder);
  return proj_.Project(DotProductAttentionHeadsFirst(qkv.q, qkv.k, qkv.v, mask), context.size(1));
}

}  // namespace ditserve::models::qwenimage
