#include "models/common/joint_projections.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::models {
namespace {

absl::StatusOr<std::shared_ptr<FusedLinear>> LoadQkv(const ModuleLoader& loader,
                                                     const std::string& prefix,
                                                     const std::vector<std::string>& names,
                                                     int64_t head_dim, int64_t* width) {
  std::vector<std::shared_ptr<LinearLayer>> parts;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> p, loader.LoadLinear(JoinPath(prefix, name)));
    parts.push_back(std::move(p));
  }
  if (*width < 0) *width = parts.front()->out_features();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->out_features() != *width || *width % head_dim != 0 || *width == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ".", names[i], " gives ", parts[i]->out_features(), " features on this rank; ",
          "the q/k/v projections must agree (", *width, ") and be a positive multiple of head_dim ",
          head_dim));
    }
  }
  ASSIGN_OR_RETURN(FusedLinear fused, FusedLinear::Fuse(parts, JoinPath(prefix, names.front())));
  return std::make_shared<FusedLinear>(std::move(fused));
}

}  // namespace

absl::StatusOr<JointProjections> JointProjections::Load(const ModuleLoader& loader,
                                                        const std::string& prefix,
                                                        int64_t head_dim, bool joint) {
  if (head_dim <= 0) return absl::InvalidArgumentError(absl::StrCat(prefix, ": head_dim must be > 0"));
  JointProjections p;
  p.head_dim_ = head_dim;
  int64_t width = -1;
  ASSIGN_OR_RETURN(p.image_qkv_, LoadQkv(loader, prefix, {"to_q", "to_k", "to_v"}, head_dim, &width));
  p.local_heads_ = width / head_dim;
  if (!joint) return p;
  ASSIGN_OR_RETURN(p.text_qkv_, LoadQkv(loader, prefix, {"add_q_proj", "add_k_proj", "add_v_proj"},
                                        head_dim, &width));
  ASSIGN_OR_RETURN(p.to_out_, loader.LoadLinear(JoinPath(prefix, "to_out.0")));
  ASSIGN_OR_RETURN(p.to_add_out_, loader.LoadLinear(JoinPath(prefix, "to_add_out")));
  for (const auto* out : {&p.to_out_, &p.to_add_out_}) {
    if ((*out)->in_features() != width) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ": an output projection takes ", (*out)->in_features(),
          " features on this rank, the attention gives ", width));
    }
  }
  return p;
}

QkvViews JointProjections::Split(const FusedLinear& qkv, const torch::Tensor& x) const {
  const auto parts = qkv.Forward(x);
  auto heads = [&](const torch::Tensor& t) {
    return t.reshape({t.size(0), t.size(1), local_heads_, head_dim_});
  };
  return QkvViews{heads(parts[0]), heads(parts[1]), heads(parts[2])};
}

std::pair<torch::Tensor, torch::Tensor> JointProjections::Project(const torch::Tensor& out,
                                                                  int64_t text_len) const {
  auto text = out.narrow(1, 0, text_len);
  auto image = out.narrow(1, text_len, out.size(1) - text_len);
  return {to_out_->Forward(image), to_add_out_->Forward(text)};
}

}  // namespace ditserve::models
