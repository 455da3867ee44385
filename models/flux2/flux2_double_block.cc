#include "models/flux2/flux2_double_block.h"

#include "common/status_macros.h"
#include "models/common/gated_residual.h"
#include "models/common/norm_modulate.h"

namespace ditserve::models::flux2 {
namespace {
constexpr double kFp16Max = 65504.0;
}  // namespace

absl::StatusOr<Flux2DoubleBlock> Flux2DoubleBlock::Load(const ModuleLoader& loader,
                                                        const std::string& prefix, int64_t head_dim,
                                                        double eps) {
  ASSIGN_OR_RETURN(auto attn, FluxAttention::Load(loader, JoinPath(prefix, "attn"), head_dim,
                                                  /*joint=*/true, eps));
  ASSIGN_OR_RETURN(auto ff, SwiGluFeedForward::Load(loader, JoinPath(prefix, "ff")));
  ASSIGN_OR_RETURN(auto ff_context,
                   SwiGluFeedForward::Load(loader, JoinPath(prefix, "ff_context")));
  return Flux2DoubleBlock(std::move(attn), std::move(ff), std::move(ff_context), eps);
}

std::pair<torch::Tensor, torch::Tensor> Flux2DoubleBlock::Forward(
    const torch::Tensor& hidden, const torch::Tensor& context,
    const std::vector<ModulationSet>& mod_img, const std::vector<ModulationSet>& mod_txt,
    const RopeTables& rope) const {
  const ModulationSet &img_msa = mod_img[0], &img_mlp = mod_img[1];
  const ModulationSet &txt_msa = mod_txt[0], &txt_mlp = mod_txt[1];
  auto nh = NormModulate(hidden, img_msa.scale, img_msa.shift, eps_);
  auto nc = NormModulate(context, txt_msa.scale, txt_msa.shift, eps_);
  auto [attn_img, attn_txt] = attn_.ForwardJoint(nh, nc, rope);

  auto [h, ff_in] =
      GatedResidualNormModulate(hidden, img_msa.gate, attn_img, img_mlp.scale, img_mlp.shift, eps_);
  h = GatedResidual(h, img_mlp.gate, ff_.Forward(ff_in));

  auto [c, ffc_in] = GatedResidualNormModulate(context, txt_msa.gate, attn_txt, txt_mlp.scale,
                                               txt_mlp.shift, eps_);
  c = GatedResidual(c, txt_mlp.gate, ff_context_.Forward(ffc_in));
  if (c.scalar_type() == torch::kFloat16) c = c.clamp(-kFp16Max, kFp16Max);
  return {h, c};
}

}  // namespace ditserve::models::flux2
