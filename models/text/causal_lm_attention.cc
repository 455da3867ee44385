#include "models/text/causal_lm_attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/attention.h"
#include "models/common/model_checks.h"

namespace ditserve::text {

LlmAttendMask PrepareAttendMask(const torch::Tensor& attend) {
  auto has_key = attend.any(-1, /*keepdim=*/true);  // (B, 1, T, 1)
  LlmAttendMask m;
  // A fully masked row gets every key opened so that no backend produces NaN; its result is then
  // replaced (zeros / mean of v) after the attention.
  m.attend = attend.logical_or(has_key.logical_not());
  m.has_key = has_key.squeeze(1);  // (B, T, 1)
  return m;
}

absl::StatusOr<CausalLmAttention> CausalLmAttention::Load(
    const models::ModuleLoader& loader, const std::string& prefix, const CausalLmConfig& config,
    int world_size, LlmAttentionImplementation implementation) {
  CausalLmAttention a;
  a.head_dim_ = config.head_dim;
  a.implementation_ = implementation;
  const int64_t hidden = config.hidden_size, hd = config.head_dim;
  const int64_t heads = config.num_attention_heads, kv = config.num_key_value_heads;

  ASSIGN_OR_RETURN(a.q_, loader.LoadLinear(prefix + ".q_proj"));
  ASSIGN_OR_RETURN(a.k_, loader.LoadLinear(prefix + ".k_proj"));
  ASSIGN_OR_RETURN(a.v_, loader.LoadLinear(prefix + ".v_proj"));
  ASSIGN_OR_RETURN(a.o_, loader.LoadLinear(prefix + ".o_proj"));

  const bool sharded = a.q_->style() != sharding::TpStyle::kReplicated;
  if (sharded && (heads % world_size != 0 || kv % world_size != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": tensor-parallel degree ", world_size,
        " must divide both the number of attention heads (", heads,
        ") and the number of key/value heads (", kv, "): every rank keeps whole key/value groups"));
  }
  const int64_t div = sharded ? world_size : 1;
  a.local_heads_ = heads / div;
  a.local_kv_heads_ = kv / div;
  for (const auto& [layer, name] : {std::pair{a.k_.get(), "k_proj"}, std::pair{a.v_.get(), "v_proj"}}) {
    if (layer->style() != a.q_->style()) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ".", name, " is ", sharding::TpStyleName(layer->style()), " but q_proj is ",
          sharding::TpStyleName(a.q_->style()), ": q, k and v must be sliced alike"));
    }
  }
  const bool o_ok = sharded ? sharding::IsRowwise(a.o_->style())
                            : a.o_->style() == sharding::TpStyle::kReplicated;
  if (!o_ok || (sharded && !sharding::IsColwise(a.q_->style()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": q_proj is ", sharding::TpStyleName(a.q_->style()), " and o_proj ",
        sharding::TpStyleName(a.o_->style()),
        "; attention needs colwise q/k/v with a rowwise o_proj, or all replicated"));
  }
  RETURN_IF_ERROR(models::CheckLinearWidths(*a.q_, prefix + ".q_proj", hidden, a.local_heads_ * hd));
  RETURN_IF_ERROR(
      models::CheckLinearWidths(*a.k_, prefix + ".k_proj", hidden, a.local_kv_heads_ * hd));
  RETURN_IF_ERROR(
      models::CheckLinearWidths(*a.v_, prefix + ".v_proj", hidden, a.local_kv_heads_ * hd));
  RETURN_IF_ERROR(models::CheckLinearWidths(*a.o_, prefix + ".o_proj", a.local_heads_ * hd, hidden));
  if (config.attention_bias) {
    for (const auto& [layer, name] :
         {std::pair{a.q_.get(), "q_proj"}, std::pair{a.k_.get(), "k_proj"},
          std::pair{a.v_.get(), "v_proj"}}) {
      if (!layer->bias().defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, ".", name, ".bias is missing (this model's q/k/v have biases)"));
      }
    }
  }
  return a;
}

torch::Tensor CausalLmAttention::Forward(const torch::Tensor& x, const LlmRope& rope,
                                         const LlmAttendMask& mask) const {
  const int64_t b = x.size(0), t = x.size(1), hd = head_dim_;
  auto heads_first = [&](const torch::Tensor& y, int64_t n) {
    return y.view({b, t, n, hd}).transpose(1, 2);
  };
  auto q = ApplyLlmRope(heads_first(q_->Forward(x), local_heads_), rope);
  auto k = ApplyLlmRope(heads_first(k_->Forward(x), local_kv_heads_), rope);
  auto v = heads_first(v_->Forward(x), local_kv_heads_);
  const int64_t groups = local_heads_ / local_kv_heads_;
  if (groups > 1) {  // repeat_kv: query head i uses key/value head i / groups
    auto repeat = [&](const torch::Tensor& y) {
      return y.unsqueeze(2).expand({b, local_kv_heads_, groups, t, hd}).reshape({b, local_heads_, t, hd});
    };
    k = repeat(k);
    v = repeat(v);
  }
  auto out = models::DotProductAttentionHeadsFirst(q, k, v, mask.attend);  // (B, T, Hl·hd)
  if (implementation_ == LlmAttentionImplementation::kSdpa) {
    out = out.masked_fill(mask.has_key.logical_not(), 0);
  } else {
    auto v_mean = v.to(torch::kFloat).mean(2).reshape({b, 1, local_heads_ * hd}).to(out.scalar_type());
    out = torch::where(mask.has_key, out, v_mean);
  }
  return o_->Forward(out);
}

}  // namespace ditserve::text
