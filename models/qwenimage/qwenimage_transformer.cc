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

absl::StatusOr<std::unique_ptr<QwenImageTransformer2DModel>> QwenImageTransformer2DModel::Load(
    const QwenImageTransformerConfig& config, const sharding::ShardedStateDict& sd,
    comm::Communicator* comm, const TransformerLoadOptions& options) {
  if (config.num_attention_heads % sd.world_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tp degree ", sd.world_size(),
                                                   " must divide the number of attention heads (",
                                                   config.num_attention_heads, ")"));
  }
  if (comm == nullptr || comm->world_size() != sd.world_size() || comm->rank() != sd.rank()) {
    return absl::InvalidArgumentError(
        "Qwen-Image: the communicator does not match the state dict's rank/size");
  }
  std::unique_ptr<QwenImageTransformer2DModel> m(new QwenImageTransformer2DModel(config));
  tp::ParallelModuleLoader loader(sd, comm, &m->linears_, options.weights);
  const int64_t d = config.inner_dim();
  const double eps = QwenImageTransformerConfig::kEps;

  ASSIGN_OR_RETURN(m->img_in_, loader.LoadLinear("img_in"));
  RETURN_IF_ERROR(CheckLinearWidths(*m->img_in_, "img_in", config.in_channels, d));
  m->dtype_ = m->img_in_->weight().scalar_type();
  m->device_ = m->img_in_->weight().device();
  ASSIGN_OR_RETURN(m->txt_norm_, DiffusersRmsNorm::Load(loader, "txt_norm", eps));
  if (m->txt_norm_->dim() != config.joint_attention_dim) {
    return absl::InvalidArgumentError(absl::StrCat("txt_norm.weight has ", m->txt_norm_->dim(),
                                                   " elements, joint_attention_dim is ",
                                                   config.joint_attention_dim));
  }
  ASSIGN_OR_RETURN(m->txt_in_, loader.LoadLinear("txt_in"));
  RETURN_IF_ERROR(CheckLinearWidths(*m->txt_in_, "txt_in", config.joint_attention_dim, d));
  ASSIGN_OR_RETURN(m->timestep_embedder_,
                   TimestepEmbedding::Load(loader, "time_text_embed.timestep_embedder"));
  if (m->timestep_embedder_->in_features() != kTimeProjChannels) {
    return absl::InvalidArgumentError(
        "time_text_embed.timestep_embedder.linear_1 must take 256 features");
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    ASSIGN_OR_RETURN(auto block, QwenImageBlock::Load(loader, absl::StrCat("transformer_blocks.", i),
                                                      d, config.attention_head_dim, eps));
    m->blocks_.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(m->norm_out_, AdaLayerNormContinuous::Load(loader, "norm_out", eps));
  // Every modulation of a step in one GEMM (and one all-reduce when sharded).
  std::vector<tp::ModulationConsumer> modulation;
  for (QwenImageBlock& b : m->blocks_) {
    modulation.push_back({b.img_mod(), [&b](ModulationSource s) { b.set_img_modulation_source(std::move(s)); }});
    modulation.push_back({b.txt_mod(), [&b](ModulationSource s) { b.set_txt_modulation_source(std::move(s)); }});
  }
  AdaLayerNormContinuous& norm_out = *m->norm_out_;
  modulation.push_back(
      {norm_out.linear(), [&norm_out](ModulationSource s) { norm_out.set_modulation_source(std::move(s)); }});
  RETURN_IF_ERROR(tp::ShareModulation(modulation, comm, "Qwen-Image transformer"));
  ASSIGN_OR_RETURN(m->proj_out_, loader.LoadLinear("proj_out"));
  RETURN_IF_ERROR(CheckLinearWidths(*m->proj_out_, "proj_out", d, config.proj_out_channels()));

  m->local_heads_ = m->blocks_.empty() ? config.num_attention_heads / sd.world_size()
                                       : m->blocks_.front().local_heads();
  if (m->local_heads_ * sd.world_size() != config.num_attention_heads &&
      m->local_heads_ != config.num_attention_heads) {
    return absl::InvalidArgumentError(absl::StrCat("this rank holds ", m->local_heads_,
                                                   " heads of ", config.num_attention_heads,
                                                   " at tp degree ", sd.world_size()));
  }
  for (const auto& b : m->blocks_) {
    if (b.local_heads() != m->local_heads_) {
      return absl::InvalidArgumentError("blocks disagree on the local head count");
    }
  }
  m->graphs_ = MakeStepGraphs("Qwen-Image transformer", &m->linears_, comm, m->device_,
                              options.cuda_graphs);
  return m;
}

std::vector<std::string> QwenImageTransformer2DModel::RequiredArguments() const {
  return {"hidden_states", "encoder_hidden_states", "timestep"};
}

std::vector<std::string> QwenImageTransformer2DModel::OptionalArguments() const {
  return {"encoder_hidden_states_mask", "img_shapes"};
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

torch::Tensor QwenImageTransformer2DModel::ForwardImpl(const QwenImageForwardArgs& a,
                                                       const QwenRopeFreqs& rope) const {
  torch::NoGradGuard no_grad;
  auto to_model = [&](const torch::Tensor& x) { return x.to(device_, dtype_); };

  auto h = img_in_->Forward(to_model(a.hidden_states));
  // timestep in float32 (diffusers rounds it to the model dtype first; see FloatConditioning),
  // then ×1000 inside the fp32 sinusoid.
  auto timestep = FloatConditioning(a.timestep, device_);
  auto context = txt_in_->Forward(txt_norm_->Forward(to_model(a.encoder_hidden_states)));
  TimestepProjectionOptions proj;
  proj.num_channels = kTimeProjChannels;
  proj.scale = kTimeProjScale;
  auto temb = timestep_embedder_->Forward(TimestepProjection(timestep, proj).to(dtype_));

  // Keys: [text mask, all image tokens]; (B, 1, 1, T + N) broadcast over heads and queries.
  torch::Tensor mask;
  if (a.encoder_hidden_states_mask.defined()) {
    auto text = a.encoder_hidden_states_mask.to(device_).to(torch::kBool);
    auto image = torch::ones({text.size(0), h.size(1)},
                             torch::TensorOptions().dtype(torch::kBool).device(device_));
    mask = torch::cat({text, image}, 1).unsqueeze(1).unsqueeze(1);
  }

  for (const auto& block : blocks_) {
    std::tie(h, context) = block.Forward(h, context, temb, rope, mask);
  }
  h = norm_out_->Forward(h, temb);
  return proj_out_->Forward(h);
}

absl::StatusOr<torch::Tensor> QwenImageTransformer2DModel::Forward(const QwenImageForwardArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args));
  const int64_t b = args.hidden_states.size(0), n = args.hidden_states.size(1);
  auto parsed = GuardTorch("Qwen-Image img_shapes", [&]() -> absl::StatusOr<std::vector<ImageShape>> {
    return ImageShapesFromTensor(args.img_shapes, b, n);
  });
  if (!parsed.ok()) return parsed.status();
  if (!parsed->ok()) return parsed->status();
  const std::vector<ImageShape> shapes = **std::move(parsed);
  const int64_t text_len = args.encoder_hidden_states.size(1);
  if (!rope_cache_ || rope_cache_->text_len != text_len || rope_cache_->shapes != shapes) {
    rope_cache_.reset();
    auto rope = GuardTorch("Qwen-Image RoPE", [&]() -> absl::StatusOr<QwenRopeFreqs> {
      return QwenRopeFrequencies(shapes, text_len, config_.axes_dims_rope,
                                 QwenImageTransformerConfig::kRopeTheta, device_);
    });
    if (!rope.ok()) return rope.status();
    if (!rope->ok()) return rope->status();
    rope_cache_ = RopeCacheEntry{shapes, text_len, **std::move(rope)};
  }
  const QwenRopeFreqs& freqs = rope_cache_->freqs;
  return GuardTorch("Qwen-Image transformer forward", [&] {
    // The host reads the image grid and the text length (the RoPE tables); a graph keeps the
    // tables it read alive after the cache moves on.
    std::string host_key = absl::StrCat("text ", text_len);
    for (const ImageShape& s : shapes) absl::StrAppend(&host_key, " ", s.frames, "x", s.height, "x", s.width);
    const std::vector<torch::Tensor> inputs = {args.hidden_states, args.encoder_hidden_states,
                                               args.encoder_hidden_states_mask, args.timestep};
    const std::vector<torch::Tensor> tables = {freqs.image, freqs.text, freqs.joint.cos,
                                               freqs.joint.sin, freqs.joint.freqs};
    return graphs_->Run(inputs, device_, host_key, tables,
                        [this, &freqs, &args](const std::vector<torch::Tensor>& in) {
                          QwenImageForwardArgs staged;
                          staged.hidden_states = in[0];
                          staged.encoder_hidden_states = in[1];
                          staged.encoder_hidden_states_mask = in[2];
                          staged.timestep = in[3];
                          staged.img_shapes = args.img_shapes;
                          return ForwardImpl(staged, freqs);
                        });
  });
}

absl::StatusOr<torch::Tensor> QwenImageTransformer2DModel::Forward(
    const std::map<std::string, torch::Tensor>& args) {
  RETURN_IF_ERROR(CheckArgumentNames(*this, args, "Qwen-Image"));
  auto get = [&](const char* name) { return ArgumentOrUndefined(args, name); };
  QwenImageForwardArgs a;
  a.hidden_states = get("hidden_states");
  a.encoder_hidden_states = get("encoder_hidden_states");
  a.encoder_hidden_states_mask = get("encoder_hidden_states_mask");
  a.timestep = get("timestep");
  a.img_shapes = get("img_shapes");
  return Forward(a);
}

}  // namespace ditserve::models::qwenimage
