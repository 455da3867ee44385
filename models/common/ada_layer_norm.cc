#include "models/common/ada_layer_norm.h"

#include "models/common/norm_modulate.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::models {
namespace {

// The modulation Linear, checked to yield `chunks` full-width chunks.
absl::StatusOr<std::shared_ptr<LinearLayer>> LoadModulation(const ModuleLoader& loader,
                                                            const std::string& prefix, int chunks) {
  const std::string path = JoinPath(prefix, "linear");
  ASSIGN_OR_RETURN(auto linear, loader.LoadLinear(path));
  if (!sharding::IsFullInFullOut(linear->style())) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is planned ", sharding::TpStyleName(linear->style()),
                     "; AdaLN modulation needs the full output on every rank (replicate it or "
                     "plan it rowwise_split_input)"));
  }
  if (linear->out_features() % chunks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", linear->out_features(),
                                                   " outputs, not a multiple of ", chunks));
  }
  return std::shared_ptr<LinearLayer>(std::move(linear));
}

}  // namespace

torch::Tensor Modulate(const torch::Tensor& normed, const torch::Tensor& scale,
                       const torch::Tensor& shift) {
  // normed·(1 + scale) + shift in one pass (the (1 + scale) factor is only (B, D)).
  return torch::addcmul(shift.unsqueeze(1), normed, 1 + scale.unsqueeze(1));
}

absl::StatusOr<AdaLayerNormZero> AdaLayerNormZero::Load(const ModuleLoader& loader,
                                                        const std::string& prefix, double eps) {
  ASSIGN_OR_RETURN(auto linear, LoadModulation(loader, prefix, 6));
  return AdaLayerNormZero(std::move(linear), eps);
}

torch::Tensor AdaLayerNormZero::Modulation(const torch::Tensor& temb) const {
  return ModulationOutput(source_, *linear_, temb);
}

AdaLayerNormZero::Output AdaLayerNormZero::Forward(const torch::Tensor& x,
                                                   const torch::Tensor& temb) const {
  auto emb = Modulation(temb);
  auto c = emb.chunk(6, /*dim=*/1);
  // c: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  Output out;
  out.x = NormModulate(x, c[1], c[0], eps_);
  out.gate_msa = c[2];
  out.shift_mlp = c[3];
  out.scale_mlp = c[4];
  out.gate_mlp = c[5];
  return out;
}

absl::StatusOr<AdaLayerNormZeroSingle> AdaLayerNormZeroSingle::Load(const ModuleLoader& loader,
                                                                    const std::string& prefix,
                                                                    double eps) {
  ASSIGN_OR_RETURN(auto linear, LoadModulation(loader, prefix, 3));
  return AdaLayerNormZeroSingle(std::move(linear), eps);
}

torch::Tensor AdaLayerNormZeroSingle::Modulation(const torch::Tensor& temb) const {
  return ModulationOutput(source_, *linear_, temb);
}

AdaLayerNormZeroSingle::Output AdaLayerNormZeroSingle::Forward(const torch::Tensor& x,
                                                               const torch::Tensor& temb) const {
  auto emb = Modulation(temb);
  auto c = emb.chunk(3, /*dim=*/1);  // shift, scale, gate
  return Output{NormModulate(x, c[1], c[0], eps_), c[2]};
}

absl::StatusOr<AdaLayerNormContinuous> AdaLayerNormContinuous::Load(const ModuleLoader& loader,
                                                                    const std::string& prefix,
                                                                    double eps) {
  ASSIGN_OR_RETURN(auto linear, LoadModulation(loader, prefix, 2));
  return AdaLayerNormContinuous(std::move(linear), eps);
}

torch::Tensor AdaLayerNormContinuous::Modulation(const torch::Tensor& cond,
                                                 torch::ScalarType dtype) const {
  // diffusers: linear(silu(cond).to(x.dtype)); the shared source computes SiLU in cond's dtype, so
  // it serves only when that is already x's.
  if (source_ && cond.scalar_type() == dtype) return source_(cond);
  return linear_->Forward(torch::silu(cond).to(dtype));
}

torch::Tensor AdaLayerNormContinuous::Forward(const torch::Tensor& x,
                                              const torch::Tensor& cond) const {
  auto emb = Modulation(cond, x.scalar_type());
  auto c = emb.chunk(2, /*dim=*/1);  // scale, shift (this order is the checkpoint's)
  return NormModulate(x, c[0], c[1], eps_);
}

}  // namespace ditserve::models
