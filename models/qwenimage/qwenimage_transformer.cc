#include "models/qwenimage/qwenimage_transformer.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/model_checks.h"
#include "common/torch_guard.h"
#include "models/tp/modulation_bank.h"
#include "models/tp/parallel_module_loader.h"

namespace ditserve::models::qwenimage {
namespace {

constexpr int64_t kTimeProjChannels = 256;
constexpr double kTimeProjScale = 1000.0;  // Timesteps(..., scale=1000): inside the fp32 sinusoid

}  // namespace

QwenImageTransformer2DModel::QwenImageTransformer2DModel(QwenImageTransformerConfig config)
    : DiffusionTransformerBase(
          std::move(config), "QwenImageTransformer2DModel", "Qwen-Image",
          {{"hidden_states", &QwenImageForwardArgs::hidden_states},
           {"encoder_hidden_states", &QwenImageForwardArgs::encoder_hidden_states},
           {"encoder_hidden_states_mask", &QwenImageForwardArgs::encoder_hidden_states_mask,
            /*required=*/false},
           {"timestep", &QwenImageForwardArgs::timestep},
           {"img_shapes", &QwenImageForwardArgs::img_shapes, /*required=*/false,
            /*device_input=*/false}}) {}

absl::Status QwenImageTransformer2DModel::LoadLayers(const ModuleLoader& loader,
                                                     comm::Communicator* comm) {
  const sharding::ShardedStateDict& sd = loader.state_dict();
  const QwenImageTransformerConfig& config = config_;
  RETURN_IF_ERROR(CheckCommunicator(comm, sd.rank(), sd.world_size()));
  const int64_t d = config.inner_dim();
  const double eps = QwenImageTransformerConfig::kEps;

  ASSIGN_OR_RETURN(img_in_, LoadFullWidthLinear(loader, "img_in", config.in_channels, d));
  TakeDtypeAndDevice(*img_in_);
  ASSIGN_OR_RETURN(txt_norm_, DiffusersRmsNorm::Load(loader, "txt_norm", eps));
  if (txt_norm_->dim() != config.joint_attention_dim) {
    return absl::InvalidArgumentError(absl::StrCat("txt_norm.weight has ", txt_norm_->dim(),
                                                   " elements, joint_attention_dim is ",
                                                   config.joint_attention_dim));
  }
  ASSIGN_OR_RETURN(txt_in_, LoadFullWidthLinear(loader, "txt_in", config.joint_attention_dim, d));
  ASSIGN_OR_RETURN(timestep_embedder_,
                   TimestepEmbedding::Load(loader, "time_text_embed.timestep_embedder"));
  if (timestep_embedder_->in_features() != kTimeProjChannels) {
    return absl::InvalidArgumentError(
        "time_text_embed.timestep_embedder.linear_1 must take 256 features");
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    ASSIGN_OR_RETURN(auto block, QwenImageBlock::Load(loader, absl::StrCat("transformer_blocks.", i),
                                                      d, config.attention_head_dim, eps));
    blocks_.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(norm_out_, AdaLayerNormContinuous::Load(loader, "norm_out", eps));
  // Every modulation of a step in one GEMM (and one all-reduce when sharded).
  std::vector<tp::ModulationConsumer> modulation;
  for (QwenImageBlock& b : blocks_) {
    modulation.push_back({b.img_mod(), [&b](ModulationSource s) { b.set_img_modulation_source(std::move(s)); }});
    modulation.push_back({b.txt_mod(), [&b](ModulationSource s) { b.set_txt_modulation_source(std::move(s)); }});
  }
  AdaLayerNormContinuous& norm_out = *norm_out_;
  // zero_cond_t: the step's temb rows go in twice as many (the step's, then timestep 0's); norm_out
  // takes the first half of its output, the step's.
  const bool zero_cond_t = config.zero_cond_t;
  modulation.push_back({norm_out.linear(), [&norm_out, zero_cond_t](ModulationSource s) {
                          if (zero_cond_t) {
                            s = [all = std::move(s)](const torch::Tensor& temb) {
                              torch::Tensor out = all(temb);
                              return out.narrow(0, 0, out.size(0) / 2);
                            };
                          }
                          norm_out.set_modulation_source(std::move(s));
                        }});
  RETURN_IF_ERROR(tp::ShareModulation(modulation, comm, model_name()));
  ASSIGN_OR_RETURN(proj_out_,
                   LoadFullWidthLinear(loader, "proj_out", d, config.proj_out_channels()));

  const int64_t local_heads = blocks_.empty() ? config.num_attention_heads / sd.world_size()
                                              : blocks_.front().local_heads();
  RETURN_IF_ERROR(SetLocalHeads(local_heads, config.num_attention_heads, sd.world_size()));
  for (const auto& b : blocks_) {
    if (b.local_heads() != local_heads_) {
      return absl::InvalidArgumentError("blocks disagree on the local head count");
    }
  }
  return absl::OkStatus();
}

absl::Status QwenImageTransformer2DModel::CheckArgs(const QwenImageForwardArgs& a) const {
  auto bad = [](const std::string& what, const torch::Tensor& t, const std::string& want) {
    return absl::InvalidArgumentError(absl::StrCat("Qwen-Image forward: ", what, " has shape ",
                                                   ShapeString(t), ", expected ", want));
  };
  const auto& c = config_;
  if (!a.hidden_states.defined() || a.hidden_states.dim() != 3 ||
      a.hidden_states.size(2) != c.in_channels || a.hidden_states.size(1) == 0) {
    return bad("hidden_states", a.hidden_states, absl::StrCat("(B, N, ", c.in_channels, ")"));
  }
  const int64_t b = a.hidden_states.size(0);
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
  if (a.encoder_hidden_states_mask.defined() &&
      (a.encoder_hidden_states_mask.dim() != 2 || a.encoder_hidden_states_mask.size(0) != b ||
       a.encoder_hidden_states_mask.size(1) != t)) {
    return bad("encoder_hidden_states_mask", a.encoder_hidden_states_mask,
               absl::StrCat("(", b, ", ", t, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostInputs> QwenImageTransformer2DModel::ReadHostInputs(
    const QwenImageForwardArgs& args) {
  const int64_t b = args.hidden_states.size(0), n = args.hidden_states.size(1);
  auto parsed =
      GuardTorch("Qwen-Image img_shapes", [&]() -> absl::StatusOr<std::vector<ImageShape>> {
        return ImageShapesFromTensor(args.img_shapes, b, n);
      });
  if (!parsed.ok()) return parsed.status();
  const std::vector<ImageShape> shapes = *std::move(parsed);
  const int64_t text_len = args.encoder_hidden_states.size(1);
  if (!rope_cache_ || rope_cache_->text_len != text_len || rope_cache_->shapes != shapes) {
    rope_cache_.reset();
    auto rope = GuardTorch("Qwen-Image RoPE", [&]() -> absl::StatusOr<QwenRopeFreqs> {
      return QwenRopeFrequencies(shapes, text_len, config_.axes_dims_rope,
                                 QwenImageTransformerConfig::kRopeTheta, device_);
    });
    if (!rope.ok()) return rope.status();
    rope_cache_ = RopeCacheEntry{shapes, text_len, *std::move(rope)};
  }
  // The host reads the image grid and the text length (the RoPE tables); a graph keeps the tables
  // it read alive after the cache moves on.
  const QwenRopeFreqs& freqs = rope_cache_->freqs;
  HostInputs host;
  host.key = absl::StrCat("text ", text_len);
  for (const ImageShape& s : shapes)
    absl::StrAppend(&host.key, " ", s.frames, "x", s.height, "x", s.width);
  host.keep_alive = {freqs.image, freqs.text, freqs.joint.cos, freqs.joint.sin, freqs.joint.freqs};
  return host;
}

QwenImageTransformer2DModel::Pass QwenImageTransformer2DModel::Prologue(
    const QwenImageForwardArgs& a) const {
  auto to_model = [&](const torch::Tensor& x) { return x.to(device_, dtype_); };
  Pass pass;
  pass.h = img_in_->Forward(to_model(a.hidden_states));
  // timestep in float32 (diffusers rounds it to the model dtype first; see FloatConditioning),
  // then ×1000 inside the fp32 sinusoid.
  auto timestep = FloatConditioning(a.timestep, device_);
  pass.context = txt_in_->Forward(txt_norm_->Forward(to_model(a.encoder_hidden_states)));
  TimestepProjectionOptions proj;
  proj.num_channels = kTimeProjChannels;
  proj.scale = kTimeProjScale;
  if (config_.zero_cond_t) {
    // Qwen-Image-Edit-2511: the input images' tokens see timestep 0 (diffusers' cat([t, t * 0])).
    timestep = torch::cat({timestep, timestep * 0}, 0);
    const ImageShape& out = rope_cache_->shapes.front();
    pass.cond_from = out.frames * out.height * out.width;
  }
  pass.temb = timestep_embedder_->Forward(TimestepProjection(timestep, proj).to(dtype_));

  // Keys: [text mask, all image tokens]; (B, 1, 1, T + N) broadcast over heads and queries.
  if (a.encoder_hidden_states_mask.defined()) {
    auto text = a.encoder_hidden_states_mask.to(device_).to(torch::kBool);
    auto image = torch::ones({text.size(0), pass.h.size(1)},
                             torch::TensorOptions().dtype(torch::kBool).device(device_));
    pass.mask = torch::cat({text, image}, 1).unsqueeze(1).unsqueeze(1);
  }
  return pass;
}

void QwenImageTransformer2DModel::RunBlocks(size_t begin, size_t end, Pass& pass) const {
  const QwenRopeFreqs& rope = rope_cache_->freqs;
  for (size_t i = begin; i < end && i < blocks_.size(); ++i) {
    std::tie(pass.h, pass.context) =
        blocks_[i].Forward(pass.h, pass.context, pass.temb, rope, pass.mask, pass.cond_from);
  }
}

void QwenImageTransformer2DModel::HeadBlock(Pass& pass) const {
  RunBlocks(0, 1, pass);
}

void QwenImageTransformer2DModel::RemainingBlocks(Pass& pass) const {
  RunBlocks(1, blocks_.size(), pass);
}

torch::Tensor QwenImageTransformer2DModel::Epilogue(const Pass& pass) const {
  return proj_out_->Forward(norm_out_->Forward(pass.h, pass.temb));
}

}  // namespace ditserve::models::qwenimage
