#include "models/flux2/flux2_single_block.h"

#include "models/common/norm_modulate.h"
#include "common/status_macros.h"
#include "models/common/ada_layer_norm.h"

namespace ditserve::models::flux2 {
namespace {
constexpr double kFp16Max = 65504.0;
}  // namespace

absl::StatusOr<Flux2SingleBlock> Flux2SingleBlock::Load(const ModuleLoader& loader,
                                                        const std::string& prefix, int64_t head_dim,
                                                        int64_t inner_dim, int64_t mlp_hidden_dim,
                                                        double eps) {
  ASSIGN_OR_RETURN(auto attn, Flux2ParallelSelfAttention::Load(loader, JoinPath(prefix, "attn"),
                                                               head_dim, inner_dim, mlp_hidden_dim,
                                                               eps));
  return Flux2SingleBlock(std::move(attn), eps);
}

torch::Tensor Flux2SingleBlock::Forward(const torch::Tensor& x, const ModulationSet& mod,
                                        const RopeTables& rope) const {
  auto nx = NormModulate(x, mod.scale, mod.shift, eps_);
  auto out = GatedResidual(x, mod.gate, attn_.Forward(nx, rope));
  if (out.scalar_type() == torch::kFloat16) out = out.clamp(-kFp16Max, kFp16Max);
  return out;
}

}  // namespace ditserve::models::flux2
