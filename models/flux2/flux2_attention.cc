#include "models/flux2/flux2_attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/attention.h"

namespace ditserve::models::flux2 {

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

absl::StatusOr<Flux2Attention> Flux2Attention::Load(const ModuleLoader& loader,
                                                    const std::string& prefix, int64_t head_dim,
                                                    double eps) {
  Flux2Attention a;
  a.head_dim_ = head_dim;
  const std::pair<const char*, std::shared_ptr<LinearLayer>*> projections[] = {
      {"to_q", &a.to_q_},         {"to_k", &a.to_k_},         {"to_v", &a.to_v_},
      {"add_q_proj", &a.add_q_}, {"add_k_proj", &a.add_k_}, {"add_v_proj", &a.add_v_}};
  for (const auto& [name, slot] : projections) {
    ASSIGN_OR_RETURN(*slot, loader.LoadLinear(JoinPath(prefix, name)));
  }
  const int64_t width = a.to_q_->out_features();
  for (const auto& [name, slot] : projections) {
    if ((*slot)->out_features() != width || width % head_dim != 0 || width == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ".", name, " gives ", (*slot)->out_features(), " features on this rank; the six ",
          "q/k/v projections must agree and be a positive multiple of head_dim ", head_dim));
    }
  }
  a.local_heads_ = width / head_dim;
  ASSIGN_OR_RETURN(a.norm_q_, LoadQkNorm(loader, JoinPath(prefix, "norm_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_k_, LoadQkNorm(loader, JoinPath(prefix, "norm_k"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_added_q_, LoadQkNorm(loader, JoinPath(prefix, "norm_added_q"), head_dim, eps));
  ASSIGN_OR_RETURN(a.norm_added_k_, LoadQkNorm(loader, JoinPath(prefix, "norm_added_k"), head_dim, eps));
  ASSIGN_OR_RETURN(a.to_out_, loader.LoadLinear(JoinPath(prefix, "to_out.0")));
  ASSIGN_OR_RETURN(a.to_add_out_, loader.LoadLinear(JoinPath(prefix, "to_add_out")));
  for (const auto* out : {&a.to_out_, &a.to_add_out_}) {
    if ((*out)->in_features() != width) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ": an output projection takes ", (*out)->in_features(),
          " features on this rank, the attention gives ", width));
    }
  }
  return a;
}

torch::Tensor Flux2Attention::Heads(const torch::Tensor& t) const {
  return t.reshape({t.size(0), t.size(1), local_heads_, head_dim_});
}

std::pair<torch::Tensor, torch::Tensor> Flux2Attention::Forward(const torch::Tensor& x,
                                                                const torch::Tensor& context,
                                                                const RopeTables& rope) const {
  auto q = norm_q_->Forward(Heads(to_q_->Forward(x)));
  auto k = norm_k_->Forward(Heads(to_k_->Forward(x)));
  auto v = Heads(to_v_->Forward(x));
  auto cq = norm_added_q_->Forward(Heads(add_q_->Forward(context)));
  auto ck = norm_added_k_->Forward(Heads(add_k_->Forward(context)));
  auto cv = Heads(add_v_->Forward(context));
  q = ApplyRotaryEmbInterleaved(torch::cat({cq, q}, 1), rope);
  k = ApplyRotaryEmbInterleaved(torch::cat({ck, k}, 1), rope);
  v = torch::cat({cv, v}, 1);
  auto out = DotProductAttention(q, k, v);
  const int64_t text_len = context.size(1);
  auto text = out.narrow(1, 0, text_len);
  auto image = out.narrow(1, text_len, out.size(1) - text_len);
  return {to_out_->Forward(image), to_add_out_->Forward(text)};
}

}  // namespace ditserve::models::flux2
