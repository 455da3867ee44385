#include "models/flux1/flux1_transformer.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/model_checks.h"
#include "models/common/rope.h"
#include "models/tp/modulation_bank.h"
#include "models/tp/parallel_module_loader.h"

namespace ditserve::models::flux1 {
namespace {

constexpr double kRopeTheta = 10000.0;  // hard-coded in diffusers' FluxPosEmbed
constexpr int64_t kTimeProjChannels = 256;

}  // namespace

FluxTransformer2DModel::FluxTransformer2DModel(FluxTransformerConfig config)
    : FluxFamilyTransformer(
          config, "FluxTransformer2DModel", "FLUX.1",
          {{"hidden_states", &FluxForwardArgs::hidden_states},
           {"encoder_hidden_states", &FluxForwardArgs::encoder_hidden_states},
           {"pooled_projections", &FluxForwardArgs::pooled_projections},
           {"timestep", &FluxForwardArgs::timestep},
           {"img_ids", &FluxForwardArgs::img_ids},
           {"txt_ids", &FluxForwardArgs::txt_ids},
           // Without a guidance embedder: accepted and ignored, as diffusers does.
           {"guidance", &FluxForwardArgs::guidance, /*required=*/config.guidance_embeds}}) {}

absl::Status FluxTransformer2DModel::LoadLayers(const ModuleLoader& loader,
                                                comm::Communicator* comm) {
  const sharding::ShardedStateDict& sd = loader.state_dict();
  const FluxTransformerConfig& config = config_;
  // Local heads from the first attention's q rows (read before any layer is built: FP8 weights
  // release the state dict's tensors); the blocks check their own against head_dim.
  ASSIGN_OR_RETURN(auto q,
                   sd.Get(config.num_layers > 0 ? "transformer_blocks.0.attn.to_q.weight"
                                                : "single_transformer_blocks.0.attn.to_q.weight"));
  RETURN_IF_ERROR(SetLocalHeads(q.size(0) / config.attention_head_dim, config.num_attention_heads,
                                sd.world_size()));
  const int64_t d = config.inner_dim();

  ASSIGN_OR_RETURN(
      embedders_,
      FluxEmbedders::Load(loader, {config.in_channels, config.joint_attention_dim, d,
                                   "time_text_embed", kTimeProjChannels, config.guidance_embeds}));
  TakeDtypeAndDevice(*embedders_.x_embedder);
  ASSIGN_OR_RETURN(text_embedder_,
                   PixArtAlphaTextProjection::Load(loader, "time_text_embed.text_embedder"));
  if (text_embedder_->in_features() != config.pooled_projection_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_text_embed.text_embedder.linear_1 takes ", text_embedder_->in_features(),
                     " features, pooled_projection_dim is ", config.pooled_projection_dim));
  }

  for (int64_t i = 0; i < config.num_layers; ++i) {
    ASSIGN_OR_RETURN(auto block,
                     FluxDoubleBlock::Load(loader, absl::StrCat("transformer_blocks.", i),
                                           config.attention_head_dim));
    double_blocks_.push_back(std::move(block));
  }
  for (int64_t i = 0; i < config.num_single_layers; ++i) {
    ASSIGN_OR_RETURN(auto block,
                     FluxSingleBlock::Load(loader, absl::StrCat("single_transformer_blocks.", i),
                                           config.attention_head_dim));
    single_blocks_.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(norm_out_, AdaLayerNormContinuous::Load(loader, "norm_out"));
  // Every AdaLN modulation of a step in one GEMM (and one all-reduce when sharded).
  std::vector<tp::ModulationConsumer> modulation;
  auto adaln = [&modulation](auto& norm) {
    modulation.push_back(
        {norm.linear(), [&norm](ModulationSource s) { norm.set_modulation_source(std::move(s)); }});
  };
  for (FluxDoubleBlock& b : double_blocks_) {
    adaln(b.norm1());
    adaln(b.norm1_context());
  }
  for (FluxSingleBlock& b : single_blocks_) adaln(b.norm());
  adaln(*norm_out_);
  RETURN_IF_ERROR(tp::ShareModulation(modulation, comm, model_name()));
  ASSIGN_OR_RETURN(
      proj_out_, LoadFullWidthLinear(loader, "proj_out", d,
                                     config.patch_size * config.patch_size * config.out_channels));
  return absl::OkStatus();
}

absl::Status FluxTransformer2DModel::CheckArgs(const FluxForwardArgs& a) const {
  auto bad = [](const std::string& what, const torch::Tensor& t, const std::string& want) {
    return absl::InvalidArgumentError(
        absl::StrCat("FLUX.1 forward: ", what, " has shape ", ShapeString(t), ", expected ", want));
  };
  const auto& c = config_;
  if (!a.hidden_states.defined() || a.hidden_states.dim() != 3 ||
      a.hidden_states.size(2) != c.in_channels) {
    return bad("hidden_states", a.hidden_states, absl::StrCat("(B, N, ", c.in_channels, ")"));
  }
  const int64_t b = a.hidden_states.size(0), n = a.hidden_states.size(1);
  if (!a.encoder_hidden_states.defined() || a.encoder_hidden_states.dim() != 3 ||
      a.encoder_hidden_states.size(0) != b ||
      a.encoder_hidden_states.size(2) != c.joint_attention_dim) {
    return bad("encoder_hidden_states", a.encoder_hidden_states,
               absl::StrCat("(", b, ", T, ", c.joint_attention_dim, ")"));
  }
  const int64_t t = a.encoder_hidden_states.size(1);
  if (!a.pooled_projections.defined() || a.pooled_projections.dim() != 2 ||
      a.pooled_projections.size(0) != b ||
      a.pooled_projections.size(1) != c.pooled_projection_dim) {
    return bad("pooled_projections", a.pooled_projections,
               absl::StrCat("(", b, ", ", c.pooled_projection_dim, ")"));
  }
  if (!a.timestep.defined() || a.timestep.numel() != b) {
    return bad("timestep", a.timestep, absl::StrCat("(", b, ",)"));
  }
  if (c.guidance_embeds && (!a.guidance.defined() || a.guidance.numel() != b)) {
    return bad("guidance", a.guidance, absl::StrCat("(", b, ",) (the model embeds guidance)"));
  }
  const int64_t axes = static_cast<int64_t>(c.axes_dims_rope.size());
  auto img = a.img_ids.defined() ? PositionIds2d(a.img_ids) : a.img_ids;
  auto txt = a.txt_ids.defined() ? PositionIds2d(a.txt_ids) : a.txt_ids;
  if (!img.defined() || img.dim() != 2 || img.size(0) != n || img.size(1) < axes) {
    return bad("img_ids", a.img_ids, absl::StrCat("(", n, ", ", axes, ")"));
  }
  if (!txt.defined() || txt.dim() != 2 || txt.size(0) != t || txt.size(1) != img.size(1)) {
    return bad("txt_ids", a.txt_ids, absl::StrCat("(", t, ", ", img.size(1), ")"));
  }
  return absl::OkStatus();
}

FluxTransformer2DModel::Pass FluxTransformer2DModel::Prologue(const FluxForwardArgs& a) const {
  auto to_model = [&](const torch::Tensor& x) { return x.to(device_, dtype_); };
  Pass pass;
  pass.h = embedders_.x_embedder->Forward(to_model(a.hidden_states));
  const auto b = pass.h.size(0);
  // Deliberate divergence from diffusers: timestep and guidance stay float32 up to the sinusoid
  // (diffusers computes `.to(h.dtype) * 1000`, which in bf16 turns guidance 3500 into 3504 and
  // shifts every high-frequency phase). In float32 the two are identical; in bf16 ours is closer
  // to the float32 reference. See FloatConditioning in models/common.
  auto timestep = FloatConditioning(a.timestep, device_) * 1000;
  auto pooled = to_model(a.pooled_projections);
  auto temb = embedders_.timestep->Forward(TimestepProjection(timestep).to(pooled.scalar_type()));
  if (embedders_.guidance) {
    auto guidance = FloatConditioning(a.guidance, device_) * 1000;
    temb =
        temb + embedders_.guidance->Forward(TimestepProjection(guidance).to(pooled.scalar_type()));
  }
  pass.temb = temb + text_embedder_->Forward(pooled);
  TORCH_CHECK(pass.temb.size(0) == b, "conditioning batch mismatch");

  pass.context = embedders_.context_embedder->Forward(to_model(a.encoder_hidden_states));
  auto ids =
      torch::cat({PositionIds2d(a.txt_ids).to(device_), PositionIds2d(a.img_ids).to(device_)}, 0);
  pass.rope = FluxRopeTables(ids, config_.axes_dims_rope, kRopeTheta);
  return pass;
}

std::pair<torch::Tensor, torch::Tensor> FluxTransformer2DModel::RunDouble(
    const FluxDoubleBlock& block, const torch::Tensor& h, const torch::Tensor& context,
    const Pass& pass) const {
  return block.Forward(h, context, pass.temb, pass.rope);
}

torch::Tensor FluxTransformer2DModel::RunSingle(const FluxSingleBlock& block,
                                                const torch::Tensor& x, const Pass& pass) const {
  return block.Forward(x, pass.temb, pass.rope);
}

}  // namespace ditserve::models::flux1
