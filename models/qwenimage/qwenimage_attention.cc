#include "models/qwenimage/qwenimage_attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/attention.h"
#include "models/common/complex_rope.h"

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
  ASSIGN_OR_RETURN(JointProjections proj, JointProjections::Load(loader, prefix, head_dim, /*joint=*/true));
  QwenImageAttention a(std::move(proj));
  ASSIGN_OR_RETURN(a.norm_q_, LoadQkNorm(loader, JoinPath(prefix, "norm_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_k_, LoadQkNorm(loader, JoinPath(prefix, "norm_k"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_added_q_, LoadQkNorm(loader, JoinPath(prefix, "norm_added_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_added_k_, LoadQkNorm(loader, JoinPath(prefix, "norm_added_k"), head_dim, eps));
  return a;
}

std::pair<torch::Tensor, torch::Tensor> QwenImageAttention::Forward(const torch::Tensor& x,
                                                                    const torch::Tensor& context,
                                                                    const QwenRopeFreqs& rope,
                                                                    const torch::Tensor& mask) const {
  const QkvViews img = proj_.Image(x);
  const QkvViews txt = proj_.Text(context);
  auto q = ApplyRotaryEmbComplex(norm_q_->Forward(img.q), rope.image);
  auto k = ApplyRotaryEmbComplex(norm_k_->Forward(img.k), rope.image);
  auto cq = ApplyRotaryEmbComplex(norm_added_q_->Forward(txt.q), rope.text);
  auto ck = ApplyRotaryEmbComplex(norm_added_k_->Forward(txt.k), rope.text);
  auto joint_q = torch::cat({cq, q}, 1);
  auto out = DotProductAttention(joint_q, torch::cat({ck, k}, 1), torch::cat({txt.v, img.v}, 1), mask)
                 .to(joint_q.scalar_type());
  return proj_.Project(out, context.size(1));
}

}  // namespace ditserve::models::qwenimage
