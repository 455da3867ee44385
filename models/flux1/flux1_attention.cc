#include "models/flux1/flux1_attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/attention.h"

namespace ditserve::models::flux1 {
namespace {

constexpr double kQkNormEps = 1e-6;

absl::StatusOr<std::shared_ptr<TorchRmsNorm>> LoadNorm(const ModuleLoader& loader,
                                                       const std::string& path, int64_t head_dim) {
  ASSIGN_OR_RETURN(auto norm, TorchRmsNorm::Load(loader, path, kQkNormEps));
  if (norm.dim() != head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".weight has ", norm.dim(), " elements, expected head_dim ", head_dim));
  }
  return std::make_shared<TorchRmsNorm>(std::move(norm));
}

// Loads q/k/v projections that must agree on their local width, a multiple of head_dim.
absl::Status LoadQkv(const ModuleLoader& loader, const std::string& prefix,
                     const std::string (&names)[3], int64_t head_dim,
                     std::shared_ptr<LinearLayer>* out[3]) {
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(*out[i], loader.LoadLinear(JoinPath(prefix, names[i])));
  }
  const int64_t width = (*out[0])->out_features();
  for (int i = 0; i < 3; ++i) {
    if ((*out[i])->out_features() != width || width % head_dim != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ": ", names[i], " gives ", (*out[i])->out_features(),
          " features on this rank; q/k/v must agree and be a multiple of head_dim ", head_dim));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FluxAttention> FluxAttention::Load(const ModuleLoader& loader,
                                                  const std::string& prefix, int64_t head_dim,
                                                  bool joint) {
  FluxAttention a;
  a.head_dim_ = head_dim;
  {
    const std::string names[3] = {"to_q", "to_k", "to_v"};
    std::shared_ptr<LinearLayer>* outs[3] = {&a.to_q_, &a.to_k_, &a.to_v_};
    RETURN_IF_ERROR(LoadQkv(loader, prefix, names, head_dim, outs));
  }
  a.local_heads_ = a.to_q_->out_features() / head_dim;
  ASSIGN_OR_RETURN(a.norm_q_, LoadNorm(loader, JoinPath(prefix, "norm_q"), head_dim));
  ASSIGN_OR_RETURN(a.norm_k_, LoadNorm(loader, JoinPath(prefix, "norm_k"), head_dim));
  if (!joint) return a;

  {
    const std::string names[3] = {"add_q_proj", "add_k_proj", "add_v_proj"};
    std::shared_ptr<LinearLayer>* outs[3] = {&a.add_q_, &a.add_k_, &a.add_v_};
    RETURN_IF_ERROR(LoadQkv(loader, prefix, names, head_dim, outs));
  }
  if (a.add_q_->out_features() != a.to_q_->out_features()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": text and image projections hold ",
                                                   "different head counts on this rank"));
  }
  ASSIGN_OR_RETURN(a.norm_added_q_, LoadNorm(loader, JoinPath(prefix, "norm_added_q"), head_dim));
  ASSIGN_OR_RETURN(a.norm_added_k_, LoadNorm(loader, JoinPath(prefix, "norm_added_k"), head_dim));
  ASSIGN_OR_RETURN(a.to_out_, loader.LoadLinear(JoinPath(prefix, "to_out.0")));
  ASSIGN_OR_RETURN(a.to_add_out_, loader.LoadLinear(JoinPath(prefix, "to_add_out")));
  for (const auto* out : {&a.to_out_, &a.to_add_out_}) {
    if ((*out)->in_features() != a.to_q_->out_features()) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ": an output projection takes ", (*out)->in_features(),
          " features on this rank, the attention gives ", a.to_q_->out_features()));
    }
  }
  return a;
}

torch::Tensor FluxAttention::Heads(const torch::Tensor& t) const {
  return t.reshape({t.size(0), t.size(1), local_heads_, head_dim_});
}

std::pair<torch::Tensor, torch::Tensor> FluxAttention::ForwardJoint(const torch::Tensor& x,
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

torch::Tensor FluxAttention::ForwardSingle(const torch::Tensor& x, const RopeTables& rope) const {
  auto q = ApplyRotaryEmbInterleaved(norm_q_->Forward(Heads(to_q_->Forward(x))), rope);
  auto k = ApplyRotaryEmbInterleaved(norm_k_->Forward(Heads(to_k_->Forward(x))), rope);
  auto v = Heads(to_v_->Forward(x));
  return DotProductAttention(q, k, v);
}

}  // namespace ditserve::models::flux1
