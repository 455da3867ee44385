#include "models/flux1/flux1_double_block.h"

#include "common/status_macros.h"
#include "models/common/gated_residual.h"

namespace ditserve::models::flux1 {
namespace {
constexpr double kNormEps = 1e-6;
constexpr double kFp16Max = 65504.0;
}  // namespace

absl::StatusOr<FluxDoubleBlock> FluxDoubleBlock::Load(const ModuleLoader& loader,
                                                      const std::string& prefix, int64_t head_dim) {
  ASSIGN_OR_RETURN(auto norm1, AdaLayerNormZero::Load(loader, JoinPath(prefix, "norm1"), kNormEps));
  ASSIGN_OR_RETURN(auto norm1_context,
                   AdaLayerNormZero::Load(loader, JoinPath(prefix, "norm1_context"), kNormEps));
  ASSIGN_OR_RETURN(auto attn, FluxAttention::Load(loader, JoinPath(prefix, "attn"), head_dim,
                                                  /*joint=*/true));
  ASSIGN_OR_RETURN(auto ff, FeedForward::Load(loader, JoinPath(prefix, "ff")));
  ASSIGN_OR_RETURN(auto ff_context, FeedForward::Load(loader, JoinPath(prefix, "ff_context")));
  return FluxDoubleBlock(std::move(norm1), std::move(norm1_context), std::move(attn), std::move(ff),
                         std::move(ff_context));
}

std::pair<torch::Tensor, torch::Tensor> FluxDoubleBlock::Forward(const torch::Tensor& hidden,
                                                                 const torch::Tensor& context,
                                                                 const torch::Tensor& temb,
                                                                 const RopeTables& rope) const {
  auto n = norm1_.Forward(hidden, temb);
  auto nc = norm1_context_.Forward(context, temb);
  auto [attn_img, attn_txt] = attn_.ForwardJoint(n.x, nc.x, rope);

  auto [h, ff_in] =
      GatedResidualNormModulate(hidden, n.gate_msa, attn_img, n.scale_mlp, n.shift_mlp, kNormEps);
  h = GatedResidual(h, n.gate_mlp, ff_.Forward(ff_in));

  auto [c, ffc_in] = GatedResidualNormModulate(context, nc.gate_msa, attn_txt, nc.scale_mlp,
                                               nc.shift_mlp, kNormEps);
  c = GatedResidual(c, nc.gate_mlp, ff_context_.Forward(ffc_in));
  if (c.scalar_type() == torch::kFloat16) c = c.clamp(-kFp16Max, kFp16Max);
  return {h, c};
}

}  // namespace ditserve::models::flux1
