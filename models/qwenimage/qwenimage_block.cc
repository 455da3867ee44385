#include "models/qwenimage/qwenimage_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/gated_residual.h"
#include "models/common/norm_modulate.h"

namespace ditserve::models::qwenimage {
namespace {

constexpr double kFp16Max = 65504.0;

absl::StatusOr<std::shared_ptr<LinearLayer>> LoadModulation(const ModuleLoader& loader,
                                                            const std::string& path, int64_t dim) {
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> linear, loader.LoadLinear(path));
  if (!sharding::IsFullInFullOut(linear->style())) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is planned ", sharding::TpStyleName(linear->style()),
                     "; the modulation needs the full output on every rank (replicate it or plan "
                     "it rowwise_split_input)"));
  }
  if (linear->in_features() != dim || linear->out_features() != 6 * dim) {
    return absl::InvalidArgumentError(absl::StrCat(path, " maps ", linear->in_features(), " → ",
                                                   linear->out_features(), ", expected ", dim,
                                                   " → ", 6 * dim));
  }
  return linear;
}

struct Mod {
  torch::Tensor shift, scale, gate;  // (B, D)
};

// s_mod.1(SiLU(temb)) → (mod1, mod2), each (shift, scale, gate); from the shared modulation GEMM
// when the model set a source.
std::pair<Mod, Mod> Modulation(const LinearLayer& linear, const ModulationSource& source,
                               const torch::Tensor& temb) {
  auto halves = ModulationOutput(source, linear, temb).chunk(2, -1);
  auto a = halves[0].chunk(3, -1), b = halves[1].chunk(3, -1);
  return {Mod{a[0], a[1], a[2]}, Mod{b[0], b[1], b[2]}};
}

// zero_cond_t: the first B rows of each part (the step's embedding) and, for the image stream, the
// last B (the timestep-0 one).
Mod Rows(const Mod& m, int64_t begin, int64_t count) {
  return Mod{m.shift.narrow(0, begin, count), m.scale.narrow(0, begin, count),
             m.gate.narrow(0, begin, count)};
}

// The image stream's modulated LN and gated residual, with tokens [0, cond_from) under `step` and
// the rest under `cond` when cond_from >= 0 (else all under `step`).
torch::Tensor ModulateSplit(const torch::Tensor& x, const Mod& step, const Mod& cond,
                            int64_t cond_from, double eps) {
  if (cond_from < 0) return NormModulate(x, step.scale, step.shift, eps);
  const int64_t n = x.size(1);
  auto head = NormModulate(x.narrow(1, 0, cond_from).contiguous(), step.scale, step.shift, eps);
  if (cond_from == n) return head;
  auto tail =
      NormModulate(x.narrow(1, cond_from, n - cond_from).contiguous(), cond.scale, cond.shift, eps);
  return torch::cat({head, tail}, 1);
}

torch::Tensor GatedResidualSplit(const torch::Tensor& x, const Mod& step, const Mod& cond,
                                 const torch::Tensor& y, int64_t cond_from) {
  if (cond_from < 0) return GatedResidual(x, step.gate, y);
  const int64_t n = x.size(1);
  auto head = GatedResidual(x.narrow(1, 0, cond_from), step.gate, y.narrow(1, 0, cond_from));
  if (cond_from == n) return head;
  auto tail = GatedResidual(x.narrow(1, cond_from, n - cond_from), cond.gate,
                            y.narrow(1, cond_from, n - cond_from));
  return torch::cat({head, tail}, 1);
}

// The image stream's gated residual under (res, res_cond) and the modulated LN of its result
// under (norm, norm_cond), the MLP's input: (residual, normed). One fused kernel where every token
// is under the step's modulation (cond_from < 0); the split pair of ops otherwise.
std::pair<torch::Tensor, torch::Tensor> GatedResidualModulateSplit(
    const torch::Tensor& x, const Mod& res, const Mod& res_cond, const torch::Tensor& y,
    const Mod& norm, const Mod& norm_cond, int64_t cond_from, double eps) {
  if (cond_from < 0) return GatedResidualNormModulate(x, res.gate, y, norm.scale, norm.shift, eps);
  torch::Tensor h = GatedResidualSplit(x, res, res_cond, y, cond_from);
  return {h, ModulateSplit(h, norm, norm_cond, cond_from, eps)};
}

}  // namespace

absl::StatusOr<QwenImageBlock> QwenImageBlock::Load(const ModuleLoader& loader,
                                                    const std::string& prefix, int64_t inner_dim,
                                                    int64_t head_dim, double eps) {
  ASSIGN_OR_RETURN(auto img_mod, LoadModulation(loader, JoinPath(prefix, "img_mod.1"), inner_dim));
  ASSIGN_OR_RETURN(auto txt_mod, LoadModulation(loader, JoinPath(prefix, "txt_mod.1"), inner_dim));
  ASSIGN_OR_RETURN(auto attn,
                   QwenImageAttention::Load(loader, JoinPath(prefix, "attn"), head_dim, eps));
  ASSIGN_OR_RETURN(auto img_mlp, FeedForward::Load(loader, JoinPath(prefix, "img_mlp")));
  ASSIGN_OR_RETURN(auto txt_mlp, FeedForward::Load(loader, JoinPath(prefix, "txt_mlp")));
  return QwenImageBlock(std::move(img_mod), std::move(txt_mod), std::move(attn), std::move(img_mlp),
                        std::move(txt_mlp), eps);
}

std::pair<torch::Tensor, torch::Tensor> QwenImageBlock::Forward(
    const torch::Tensor& hidden, const torch::Tensor& context, const torch::Tensor& temb,
    const QwenRopeFreqs& rope, const torch::Tensor& mask, int64_t cond_from) const {
  auto [img1, img2] = Modulation(*img_mod_, img_source_, temb);
  auto [txt1, txt2] = Modulation(*txt_mod_, txt_source_, temb);
  Mod cond1, cond2;  // zero_cond_t: the input images' (timestep 0)
  if (cond_from >= 0) {
    const int64_t b = hidden.size(0);
    cond1 = Rows(img1, b, b);
    cond2 = Rows(img2, b, b);
    img1 = Rows(img1, 0, b);
    img2 = Rows(img2, 0, b);
    txt1 = Rows(txt1, 0, b);
    txt2 = Rows(txt2, 0, b);
  }

  auto nh = ModulateSplit(hidden, img1, cond1, cond_from, eps_);
  auto nc = NormModulate(context, txt1.scale, txt1.shift, eps_);
  auto [attn_img, attn_txt] = attn_.Forward(nh, nc, rope, mask);

  auto [h, h_in] =
      GatedResidualModulateSplit(hidden, img1, cond1, attn_img, img2, cond2, cond_from, eps_);
  h = GatedResidualSplit(h, img2, cond2, img_mlp_.Forward(h_in), cond_from);

  auto [c, c_in] =
      GatedResidualNormModulate(context, txt1.gate, attn_txt, txt2.scale, txt2.shift, eps_);
  c = GatedResidual(c, txt2.gate, txt_mlp_.Forward(c_in));
  if (h.scalar_type() == torch::kFloat16) {
    h = h.clamp(-kFp16Max, kFp16Max);
    c = c.clamp(-kFp16Max, kFp16Max);
  }
  return {h, c};
}

}  // namespace ditserve::models::qwenimage
