#include "models/flux2/flux2_transformer.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/model_checks.h"
#include "models/common/rope.h"
#include "models/tp/modulation_bank.h"
#include "models/tp/parallel_module_loader.h"

namespace ditserve::models::flux2 {

Flux2Transformer2DModel::Flux2Transformer2DModel(Flux2TransformerConfig config)
    : FluxFamilyTransformer(
          config, "Flux2Transformer2DModel", "FLUX.2",
          {{"hidden_states", &Flux2ForwardArgs::hidden_states},
           {"encoder_hidden_states", &Flux2ForwardArgs::encoder_hidden_states},
           {"timestep", &Flux2ForwardArgs::timestep},
           {"img_ids", &Flux2ForwardArgs::img_ids},
           {"txt_ids", &Flux2ForwardArgs::txt_ids},
           // Without a guidance embedder: accepted and ignored, as diffusers does.
           {"guidance", &Flux2ForwardArgs::guidance, /*required=*/config.guidance_embeds}}) {}

absl::Status Flux2Transformer2DModel::LoadLayers(const ModuleLoader& loader,
                                                 comm::Communicator* comm) {
  const sharding::ShardedStateDict& sd = loader.state_dict();
  const Flux2TransformerConfig& config = config_;
  RETURN_IF_ERROR(CheckCommunicator(comm, sd.rank(), sd.world_size()));
  const int64_t d = config.inner_dim(), hd = config.attention_head_dim;
  const int64_t mh = config.mlp_hidden_dim();

  ASSIGN_OR_RETURN(
      embedders_,
      FluxEmbedders::Load(loader,
                          {config.in_channels, config.joint_attention_dim, d, "time_guidance_embed",
                           config.timestep_guidance_channels, config.guidance_embeds}));
  TakeDtypeAndDevice(*embedders_.x_embedder);
  ASSIGN_OR_RETURN(mod_img_, Flux2Modulation::Load(loader, "double_stream_modulation_img", d, 2));
  ASSIGN_OR_RETURN(mod_txt_, Flux2Modulation::Load(loader, "double_stream_modulation_txt", d, 2));
  ASSIGN_OR_RETURN(mod_single_, Flux2Modulation::Load(loader, "single_stream_modulation", d, 1));

  for (int64_t i = 0; i < config.num_layers; ++i) {
    ASSIGN_OR_RETURN(
        auto block,
        Flux2DoubleBlock::Load(loader, absl::StrCat("transformer_blocks.", i), hd, config.eps));
    double_blocks_.push_back(std::move(block));
  }
  for (int64_t i = 0; i < config.num_single_layers; ++i) {
    ASSIGN_OR_RETURN(auto block,
                     Flux2SingleBlock::Load(loader, absl::StrCat("single_transformer_blocks.", i),
                                            hd, d, mh, config.eps));
    single_blocks_.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(norm_out_, AdaLayerNormContinuous::Load(loader, "norm_out", config.eps));
  // The three shared modulations and norm_out's in one GEMM (and one all-reduce when sharded).
  std::vector<tp::ModulationConsumer> modulation;
  for (Flux2Modulation* mod : {&*mod_img_, &*mod_txt_, &*mod_single_}) {
    modulation.push_back(
        {mod->linear(), [mod](ModulationSource s) { mod->set_modulation_source(std::move(s)); }});
  }
  AdaLayerNormContinuous& norm_out = *norm_out_;
  modulation.push_back({norm_out.linear(), [&norm_out](ModulationSource s) {
                          norm_out.set_modulation_source(std::move(s));
                        }});
  RETURN_IF_ERROR(tp::ShareModulation(modulation, comm, model_name()));
  ASSIGN_OR_RETURN(
      proj_out_, LoadFullWidthLinear(loader, "proj_out", d,
                                     config.patch_size * config.patch_size * config.out_channels));

  // Every block checked its own q/k/v against head_dim; the first one tells the local head count.
  const int64_t local_heads = config.num_layers > 0 ? double_blocks_.front().local_heads()
                              : config.num_single_layers > 0
                                  ? single_blocks_.front().local_heads()
                                  : config.num_attention_heads / sd.world_size();
  RETURN_IF_ERROR(SetLocalHeads(local_heads, config.num_attention_heads, sd.world_size()));
  for (const auto& b : double_blocks_) {
    if (b.local_heads() != local_heads_) {
      return absl::InvalidArgumentError("blocks disagree on local heads");
    }
  }
  for (const auto& b : single_blocks_) {
    if (b.local_heads() != local_heads_) {
      return absl::InvalidArgumentError("blocks disagree on local heads");
    }
  }
  return absl::OkStatus();
}

absl::Status Flux2Transformer2DModel::CheckArgs(const Flux2ForwardArgs& a) const {
  auto bad = [](const std::string& what, const torch::Tensor& t, const std::string& want) {
    return absl::InvalidArgumentError(
        absl::StrCat("FLUX.2 forward: ", what, " has shape ", ShapeString(t), ", expected ", want));
  };
  const auto& c = config_;
  if (!a.hidden_states.defined() || a.hidden_states.dim() != 3 ||
      a.hidden_states.size(2) != c.in_channels || a.hidden_states.size(1) == 0) {
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
  if (!a.timestep.defined() || a.timestep.numel() != b) {
    return bad("timestep", a.timestep, absl::StrCat("(", b, ",)"));
  }
  if (c.guidance_embeds && (!a.guidance.defined() || a.guidance.numel() != b)) {
    return bad("guidance", a.guidance, absl::StrCat("(", b, ",) (the model embeds guidance)"));
  }
  const int64_t axes = static_cast<int64_t>(c.axes_dims_rope.size());
  auto ids_ok = [&](const torch::Tensor& ids, int64_t len) {
    if (!ids.defined() || (ids.dim() != 2 && ids.dim() != 3)) return false;
    auto two = PositionIds2d(ids);
    return two.size(0) == len && two.size(1) >= axes;
  };
  if (!ids_ok(a.img_ids, n))
    return bad("img_ids", a.img_ids, absl::StrCat("(", n, ", ", axes, ")"));
  if (!ids_ok(a.txt_ids, t))
    return bad("txt_ids", a.txt_ids, absl::StrCat("(", t, ", ", axes, ")"));
  return absl::OkStatus();
}

Flux2Transformer2DModel::Pass Flux2Transformer2DModel::Prologue(const Flux2ForwardArgs& a) const {
  auto to_model = [&](const torch::Tensor& x) { return x.to(device_, dtype_); };
  TimestepProjectionOptions proj;
  proj.num_channels = config_.timestep_guidance_channels;

  // timestep * 1000 and guidance * 1000 in float32 (diffusers rounds them to the model dtype first;
  // see FloatConditioning), then the fp32 sinusoid is cast to the model dtype before linear_1.
  auto timestep = FloatConditioning(a.timestep, device_) * 1000;
  Pass pass;
  pass.temb = embedders_.timestep->Forward(TimestepProjection(timestep, proj).to(dtype_));
  if (embedders_.guidance) {
    auto guidance = FloatConditioning(a.guidance, device_) * 1000;
    pass.temb =
        pass.temb + embedders_.guidance->Forward(TimestepProjection(guidance, proj).to(dtype_));
  }
  // The shared modulation, once per forward.
  pass.mod_img = mod_img_->Forward(pass.temb);
  pass.mod_txt = mod_txt_->Forward(pass.temb);
  pass.mod_single = mod_single_->Forward(pass.temb);

  pass.h = embedders_.x_embedder->Forward(to_model(a.hidden_states));
  pass.context = embedders_.context_embedder->Forward(to_model(a.encoder_hidden_states));

  // RoPE evaluated separately on image and text ids, then [text, image].
  const auto img_rope = FluxRopeTables(PositionIds2d(a.img_ids).to(device_), config_.axes_dims_rope,
                                       config_.rope_theta);
  const auto txt_rope = FluxRopeTables(PositionIds2d(a.txt_ids).to(device_), config_.axes_dims_rope,
                                       config_.rope_theta);
  pass.rope = MakeRopeTables(torch::cat({txt_rope.cos, img_rope.cos}, 0),
                             torch::cat({txt_rope.sin, img_rope.sin}, 0));
  return pass;
}

std::pair<torch::Tensor, torch::Tensor> Flux2Transformer2DModel::RunDouble(
    const Flux2DoubleBlock& block, const torch::Tensor& h, const torch::Tensor& context,
    const Pass& pass) const {
  return block.Forward(h, context, pass.mod_img, pass.mod_txt, pass.rope);
}

torch::Tensor Flux2Transformer2DModel::RunSingle(const Flux2SingleBlock& block,
                                                 const torch::Tensor& x, const Pass& pass) const {
  return block.Forward(x, pass.mod_single[0], pass.rope);
}

}  // namespace ditserve::models::flux2
