#include "models/flux1/flux1_single_block.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/common/feed_forward.h"

namespace ditserve::models::flux1 {
namespace {
constexpr double kNormEps = 1e-6;
constexpr double kFp16Max = 65504.0;
}  // namespace

absl::StatusOr<FluxSingleBlock> FluxSingleBlock::Load(const ModuleLoader& loader,
                                                      const std::string& prefix, int64_t head_dim) {
  ASSIGN_OR_RETURN(auto norm, AdaLayerNormZeroSingle::Load(loader, JoinPath(prefix, "norm"), kNormEps));
  ASSIGN_OR_RETURN(auto attn, FluxAttention::Load(loader, JoinPath(prefix, "attn"), head_dim,
                                                  /*joint=*/false));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> proj_mlp,
                   loader.LoadLinear(JoinPath(prefix, "proj_mlp")));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> proj_out,
                   loader.LoadLinear(JoinPath(prefix, "proj_out")));
  const int64_t attn_width = attn.local_heads() * head_dim;
  const int64_t mlp_width = proj_mlp->out_features();
  if (proj_out->in_features() != attn_width + mlp_width) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ".proj_out takes ", proj_out->in_features(), " features on this rank, but attention ",
        "and MLP give ", attn_width, " + ", mlp_width));
  }
  // Packed input blocks must line up with [attention | mlp] on this rank.
  const auto blocks = proj_out->local_blocks();
  if (!blocks.empty() && (blocks.size() != 2 || blocks[0] != attn_width || blocks[1] != mlp_width)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".proj_out: packed blocks [",
                                                   absl::StrJoin(blocks, ", "), "] do not match [",
                                                   attn_width, ", ", mlp_width, "]"));
  }
  return FluxSingleBlock(std::move(norm), std::move(attn), std::move(proj_mlp), std::move(proj_out));
}

torch::Tensor FluxSingleBlock::Forward(const torch::Tensor& x, const torch::Tensor& temb,
                                       const RopeTables& rope) const {
  auto n = norm_.Forward(x, temb);
  auto mlp = LinearThenGeluTanh(*proj_mlp_, n.x);
  auto attn = attn_.ForwardSingle(n.x, rope);
  // proj_out([attention | mlp]) without joining them: one GEMM per part (LinearLayer::ForwardJoined).
  auto out = GatedResidual(x, n.gate, proj_out_->ForwardJoined({attn, mlp}));
  if (out.scalar_type() == torch::kFloat16) out = out.clamp(-kFp16Max, kFp16Max);
  return out;
}

}  // namespace ditserve::models::flux1
