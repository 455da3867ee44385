#include "models/text/qwen2_5_vl_vision.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/text/qwen2_5_vl_vision_attention.h"
#include "sharding/checkpoint.h"

namespace ditserve::text {
namespace {

// Qwen2RMSNorm(..., eps=1e-6) in the blocks (norm1, norm2) and the merger (ln_q).
constexpr double kNormEps = 1e-6;
constexpr char kProbe[] = "patch_embed.proj.weight";

// "visual." (Qwen-Image's checkpoint) or "model.visual." (transformers 5's save layout).
template <typename HasTensor>
absl::StatusOr<std::string> DetectPrefix(const HasTensor& has_tensor) {
  for (const char* prefix : {"visual.", "model.visual."}) {
    if (has_tensor(absl::StrCat(prefix, kProbe))) return std::string(prefix);
  }
  return absl::NotFoundError(absl::StrCat("no Qwen2.5-VL vision tower: neither visual.", kProbe,
                                          " nor model.visual.", kProbe));
}

// Qwen2RMSNorm: float32 statistics, cast back to x's dtype, times the weight (x's dtype here).
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) {
  return models::DiffusersRmsNormForward(x, weight, kNormEps);
}

// Qwen2_5_VisionRotaryEmbedding(dim = head_dim / 2).inv_freq, computed as transformers does in
// float32: 1.0 / (theta ** (arange(0, dim, 2) / dim)), Python's 1.0 / t being t.reciprocal().
torch::Tensor InverseFrequencies(int64_t head_dim, double theta) {
  const int64_t dim = head_dim / 2;
  const auto exponents = torch::arange(0, dim, 2, torch::kFloat32) / dim;
  return torch::pow(theta, exponents).reciprocal();
}

absl::Status WithPrefix(const absl::Status& s, const std::string& where) {
  return s.ok() ? s : absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

}  // namespace

absl::StatusOr<Qwen25VlVision> Qwen25VlVision::Load(const std::string& text_encoder_dir,
                                                    sharding::LoadOptions opts) {
  ASSIGN_OR_RETURN(auto ckpt, sharding::ComponentCheckpoint::Open(text_encoder_dir));
  ASSIGN_OR_RETURN(
      Qwen25VlVisionConfig config,
      ParseQwen25VlVisionConfig(ckpt->config().dump(), text_encoder_dir + "/config.json"));
  auto prefix =
      DetectPrefix([&](const std::string& name) { return ckpt->tensors().count(name) != 0; });
  if (!prefix.ok()) return WithPrefix(prefix.status(), text_encoder_dir);
  opts.select = [p = *prefix](const std::string& name) { return absl::StartsWith(name, p); };
  auto state = sharding::LoadShard(*ckpt, /*plan=*/nullptr, /*rank=*/0, /*world_size=*/1, opts);
  if (!state.ok()) return WithPrefix(state.status(), text_encoder_dir);
  auto model = Create(config, *state);
  if (!model.ok()) return WithPrefix(model.status(), text_encoder_dir);
  return model;
}

absl::StatusOr<Qwen25VlVision> Qwen25VlVision::Create(const Qwen25VlVisionConfig& config,
                                                      const sharding::ShardedStateDict& state) {
  ASSIGN_OR_RETURN(std::string prefix,
                   DetectPrefix([&](const std::string& name) { return state.Contains(name); }));
  const int64_t d = config.hidden_size, f = config.intermediate_size;
  const int64_t merged = d * config.spatial_merge_unit();

  Qwen25VlVision m;
  m.config_ = config;
  m.prefix_ = prefix;
  torch::Tensor first;
  auto get = [&](const std::string& name,
                 const std::vector<int64_t>& shape) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(torch::Tensor t, state.GetWithShape(prefix + name, shape));
    if (!first.defined()) first = t;
    if (!t.is_floating_point() || t.scalar_type() != first.scalar_type() ||
        t.device() != first.device()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, name, ": ", c10::toString(t.scalar_type()), " on ", t.device().str(),
                       "; every tensor of the tower must share one floating dtype and device (",
                       c10::toString(first.scalar_type()), " on ", first.device().str(), ")"));
    }
    m.weight_bytes_ += t.numel() * t.element_size();
    return t;
  };

  ASSIGN_OR_RETURN(auto patch, get(kProbe, {d, config.in_channels, config.temporal_patch_size,
                                            config.patch_size, config.patch_size}));
  // Conv3d with kernel = stride over an input of exactly one kernel per patch: a dot product of
  // each pixel_values row (C, T, P, P flattened) with each flattened filter.
  m.patch_w_ = patch.reshape({d, -1});
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string p = absl::StrCat("blocks.", i, ".");
    Block b;
    ASSIGN_OR_RETURN(b.norm1, get(p + "norm1.weight", {d}));
    ASSIGN_OR_RETURN(b.norm2, get(p + "norm2.weight", {d}));
    ASSIGN_OR_RETURN(b.qkv_w, get(p + "attn.qkv.weight", {3 * d, d}));
    ASSIGN_OR_RETURN(b.qkv_b, get(p + "attn.qkv.bias", {3 * d}));
    ASSIGN_OR_RETURN(b.proj_w, get(p + "attn.proj.weight", {d, d}));
    ASSIGN_OR_RETURN(b.proj_b, get(p + "attn.proj.bias", {d}));
    ASSIGN_OR_RETURN(b.gate_w, get(p + "mlp.gate_proj.weight", {f, d}));
    ASSIGN_OR_RETURN(b.gate_b, get(p + "mlp.gate_proj.bias", {f}));
    ASSIGN_OR_RETURN(b.up_w, get(p + "mlp.up_proj.weight", {f, d}));
    ASSIGN_OR_RETURN(b.up_b, get(p + "mlp.up_proj.bias", {f}));
    ASSIGN_OR_RETURN(b.down_w, get(p + "mlp.down_proj.weight", {d, f}));
    ASSIGN_OR_RETURN(b.down_b, get(p + "mlp.down_proj.bias", {d}));
    m.blocks_.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(m.ln_q_, get("merger.ln_q.weight", {d}));
  ASSIGN_OR_RETURN(m.merger_w0_, get("merger.mlp.0.weight", {merged, merged}));
  ASSIGN_OR_RETURN(m.merger_b0_, get("merger.mlp.0.bias", {merged}));
  ASSIGN_OR_RETURN(m.merger_w2_, get("merger.mlp.2.weight", {config.out_hidden_size, merged}));
  ASSIGN_OR_RETURN(m.merger_b2_, get("merger.mlp.2.bias", {config.out_hidden_size}));
  m.inv_freq_ = InverseFrequencies(config.head_dim(), config.rope_theta).to(patch.device());
  return m;
}

absl::StatusOr<VisionLayout> Qwen25VlVision::LayoutOf(const std::vector<VisionGrid>& grids) const {
  return ComputeVisionLayout(grids, config_.spatial_merge_size, config_.merger_window_size());
}

absl::StatusOr<torch::Tensor> Qwen25VlVision::Forward(const torch::Tensor& pixel_values,
                                                      const torch::Tensor& grid_thw) const {
  return GuardTorch("Qwen2.5-VL vision forward", [&]() -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(std::vector<VisionGrid> grids,
                     GridsFromTensor(grid_thw, config_.spatial_merge_size));
    if (!pixel_values.defined() || pixel_values.dim() != 2 || !pixel_values.is_floating_point() ||
        pixel_values.size(1) != config_.patch_dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pixel_values must be a floating (num_patches, ", config_.patch_dim(),
          ") tensor (in_channels * temporal_patch_size * patch_size^2), got ",
          pixel_values.defined() ? c10::str(pixel_values.sizes(), " ", pixel_values.scalar_type())
                                 : std::string("none")));
    }
    if (pixel_values.size(0) != TotalPatches(grids)) {
      return absl::InvalidArgumentError(absl::StrCat("pixel_values has ", pixel_values.size(0),
                                                     " rows but grid_thw describes ",
                                                     TotalPatches(grids), " patches"));
    }
    ASSIGN_OR_RETURN(VisionLayout layout, LayoutOf(grids));
    return ForwardUnguarded(pixel_values, layout);
  });
}

torch::Tensor Qwen25VlVision::ForwardUnguarded(const torch::Tensor& pixel_values,
                                               const VisionLayout& layout) const {
  torch::NoGradGuard no_grad;
  const torch::Device dev = device();
  const int64_t n = layout.num_patches, unit = config_.spatial_merge_unit();
  auto on_device = [&](const std::vector<int64_t>& v) {
    return torch::tensor(v, torch::kLong).to(dev);
  };
  const auto window_index = on_device(layout.window_index);

  // get_image_features: pixel_values.type(visual.dtype); then the patch embedding.
  auto x = torch::linear(pixel_values.to(dev, dtype()).reshape({n, -1}), patch_w_);
  x = PermuteRowGroups(x, window_index, unit);

  // The rotary angles of every patch, (row freqs, column freqs), in float32, in window order.
  const auto positions = on_device(layout.position_ids).view({n, 2}).to(torch::kFloat32);
  auto angles = (positions.unsqueeze(-1) * inv_freq_).flatten(1);
  angles = PermuteRowGroups(angles, window_index, unit);
  const auto emb = torch::cat({angles, angles}, -1);
  const auto cos = emb.cos(), sin = emb.sin();

  const auto frames = VisionSegments::Build(layout.cu_seqlens, dev);
  const auto windows = VisionSegments::Build(layout.cu_window_seqlens, dev);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const bool full = config_.IsFullAttentionBlock(static_cast<int64_t>(i));
    x = BlockForward(blocks_[i], x, cos, sin, full ? frames : windows);
  }

  // Qwen2_5_VLPatchMerger, then the merged tokens back in input order.
  auto h = RmsNorm(x, ln_q_).reshape({n / unit, -1});
  h = torch::linear(torch::gelu(torch::linear(h, merger_w0_, merger_b0_)), merger_w2_, merger_b2_);
  return h.index_select(0, on_device(layout.reverse_index));
}

torch::Tensor Qwen25VlVision::BlockForward(const Block& b, const torch::Tensor& x,
                                           const torch::Tensor& cos, const torch::Tensor& sin,
                                           const VisionSegments& segments) const {
  const int64_t n = x.size(0);
  auto h = RmsNorm(x, b.norm1);
  const auto qkv =
      torch::linear(h, b.qkv_w, b.qkv_b).view({n, 3, config_.num_heads, config_.head_dim()});
  const auto q = ApplyVisionRope(qkv.select(1, 0), cos, sin);
  const auto k = ApplyVisionRope(qkv.select(1, 1), cos, sin);
  const auto attn = segments.Attend(q, k, qkv.select(1, 2));
  const auto y = x + torch::linear(attn, b.proj_w, b.proj_b);

  h = RmsNorm(y, b.norm2);
  const auto gate = Apply(config_.hidden_act, torch::linear(h, b.gate_w, b.gate_b));
  return y + torch::linear(gate * torch::linear(h, b.up_w, b.up_b), b.down_w, b.down_b);
}

}  // namespace ditserve::text
