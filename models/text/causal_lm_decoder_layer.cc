#include "models/text/causal_lm_decoder_layer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/model_checks.h"

namespace ditserve::text {
namespace {

absl::Status CheckNormWidth(const models::DiffusersRmsNorm& norm, const std::string& path,
                            int64_t hidden) {
  if (norm.dim() != hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".weight has ", norm.dim(), " entries, hidden_size is ", hidden));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CausalLmDecoderLayer> CausalLmDecoderLayer::Load(
    const models::ModuleLoader& loader, const std::string& prefix, const CausalLmConfig& config,
    int world_size, LlmAttentionImplementation implementation) {
  CausalLmDecoderLayer l;
  const int64_t hidden = config.hidden_size, inter = config.intermediate_size;
  ASSIGN_OR_RETURN(l.input_layernorm_, models::DiffusersRmsNorm::Load(
                                           loader, prefix + ".input_layernorm", config.rms_norm_eps));
  RETURN_IF_ERROR(CheckNormWidth(*l.input_layernorm_, prefix + ".input_layernorm", hidden));
  ASSIGN_OR_RETURN(l.post_attention_layernorm_,
                   models::DiffusersRmsNorm::Load(loader, prefix + ".post_attention_layernorm",
                                                  config.rms_norm_eps));
  RETURN_IF_ERROR(
      CheckNormWidth(*l.post_attention_layernorm_, prefix + ".post_attention_layernorm", hidden));
  ASSIGN_OR_RETURN(l.self_attn_, CausalLmAttention::Load(loader, prefix + ".self_attn", config,
                                                         world_size, implementation));

  const std::string mlp = prefix + ".mlp";
  ASSIGN_OR_RETURN(l.gate_, loader.LoadLinear(mlp + ".gate_proj"));
  ASSIGN_OR_RETURN(l.up_, loader.LoadLinear(mlp + ".up_proj"));
  ASSIGN_OR_RETURN(l.down_, loader.LoadLinear(mlp + ".down_proj"));
  const bool sharded = l.gate_->style() != sharding::TpStyle::kReplicated;
  const bool styles_ok =
      sharded ? sharding::IsColwise(l.gate_->style()) && l.up_->style() == l.gate_->style() &&
                    sharding::IsRowwise(l.down_->style())
              : l.up_->style() == sharding::TpStyle::kReplicated &&
                    l.down_->style() == sharding::TpStyle::kReplicated;
  if (!styles_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        mlp, ": gate_proj / up_proj / down_proj are ", sharding::TpStyleName(l.gate_->style()),
        " / ", sharding::TpStyleName(l.up_->style()), " / ", sharding::TpStyleName(l.down_->style()),
        "; the MLP needs colwise gate/up with a rowwise down_proj, or all replicated"));
  }
  const int64_t div = sharded ? world_size : 1;
  if (inter % div != 0) {
    return absl::InvalidArgumentError(absl::StrCat(mlp, ": intermediate_size ", inter,
                                                   " is not divisible by the tensor-parallel degree ",
                                                   world_size));
  }
  RETURN_IF_ERROR(models::CheckLinearWidths(*l.gate_, mlp + ".gate_proj", hidden, inter / div));
  RETURN_IF_ERROR(models::CheckLinearWidths(*l.up_, mlp + ".up_proj", hidden, inter / div));
  RETURN_IF_ERROR(models::CheckLinearWidths(*l.down_, mlp + ".down_proj", inter / div, hidden));
  return l;
}

torch::Tensor CausalLmDecoderLayer::Forward(const torch::Tensor& x, const LlmRope& rope,
                                            const LlmAttendMask& mask) const {
  auto h = x + self_attn_->Forward(input_layernorm_->Forward(x), rope, mask);
  auto n = post_attention_layernorm_->Forward(h);
  return h + down_->Forward(torch::silu(gate_->Forward(n)) * up_->Forward(n));
}

}  // namespace ditserve::text
