#include "pipeline/embeddings_pipeline.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/transformer_factory.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/latents.h"
#include "pipeline/tensor_proto.h"
#include "sharding/checkpoint.h"
#include "sharding/loader.h"
#include "sharding/tp_plan.h"

namespace ditserve::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Both families use an 8x VAE and diffusers' default_sample_size 128.
constexpr int64_t kVaeScaleFactor = 8;
constexpr int64_t kDefaultSize = 1024;

// The published scheduler configurations (SPEC §3), used when the folder has none.
FlowMatchSchedulerConfig DefaultScheduler(EmbeddingsFamily family) {
  FlowMatchSchedulerConfig c;
  c.num_train_timesteps = 1000;
  c.use_dynamic_shifting = true;
  c.shift = 3.0;
  if (family == EmbeddingsFamily::kFlux2) {
    c.base_shift = 0.5;
    c.max_shift = 1.15;
    c.base_image_seq_len = 256;
    c.max_image_seq_len = 4096;
  } else {
    c.base_shift = 0.5;
    c.max_shift = 0.9;
    c.base_image_seq_len = 256;
    c.max_image_seq_len = 8192;
    c.shift_terminal = 0.02;
  }
  return c;
}

const char* DtypeName(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bfloat16" : t == torch::kFloat16 ? "float16" : "float32";
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingsPipeline>> EmbeddingsPipeline::Load(
    const std::string& name, const std::string& transformer_dir, const std::string& scheduler_dir,
    const PipelineOptions& options, comm::Communicator* comm) {
  std::unique_ptr<EmbeddingsPipeline> p(new EmbeddingsPipeline());
  p->name_ = name;
  p->comm_ = comm;
  p->device_ = options.device;
  p->dtype_ = options.dtype;
  ASSIGN_OR_RETURN(nlohmann::json config, sharding::ReadComponentConfig(transformer_dir));
  const std::string cls = config.value("_class_name", "");
  if (cls == "Flux2Transformer2DModel" || cls == "Flux2TransformerModel") {
    p->family_ = EmbeddingsFamily::kFlux2;
  } else if (cls == "QwenImageTransformer2DModel") {
    p->family_ = EmbeddingsFamily::kQwenImage;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        transformer_dir, ": transformer class '", cls,
        "' is not served from precomputed embeddings (FLUX.2 and Qwen-Image are)"));
  }
  p->in_channels_ = config.value("in_channels", int64_t{0});
  p->joint_attention_dim_ = config.value("joint_attention_dim", int64_t{0});
  p->guidance_embeds_ = config.value("guidance_embeds", false);

  sharding::LoadOptions lo;
  lo.device = options.device;
  lo.dtype = options.dtype;
  lo.staging_buffer_bytes = options.staging_buffer_bytes;
  lo.progress = options.on_load_progress;
  ASSIGN_OR_RETURN(sharding::TpPlan plan, sharding::BuiltinTpPlan(cls, config));
  ASSIGN_OR_RETURN(sharding::ShardedStateDict sd,
                   sharding::LoadShard(transformer_dir, &plan, comm->rank(), comm->world_size(), lo));
  ASSIGN_OR_RETURN(p->transformer_, models::CreateTransformer(config, sd, comm));
  p->weight_bytes_ = sd.TotalBytes();

  p->scheduler_config_ = DefaultScheduler(p->family_);
  if (!scheduler_dir.empty()) {
    const std::string path = scheduler_dir + "/scheduler_config.json";
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not valid JSON"));
    ASSIGN_OR_RETURN(p->scheduler_config_, ParseFlowMatchSchedulerConfig(j));
  }
  return p;
}

worker::v1::ModelDescription EmbeddingsPipeline::Describe() const {
  worker::v1::ModelDescription d;
  d.set_name(name_);
  d.set_family(family_ == EmbeddingsFamily::kFlux2 ? "flux2" : "qwenimage");
  d.set_dtype(DtypeName(dtype_));
  d.set_device(device_.is_cuda() ? "cuda" : "cpu");
  d.set_guidance_distilled(guidance_embeds_);
  auto* in = d.mutable_inputs();
  in->set_accepts_text_prompt(false);
  in->set_requires_prompt_embeddings(true);
  for (int64_t v : {int64_t{1}, int64_t{-1}, joint_attention_dim_}) in->add_prompt_embeds_shape(v);
  in->set_accepts_text_mask(family_ == EmbeddingsFamily::kQwenImage);
  in->add_output_formats(ditserve::v1::OUTPUT_FORMAT_LATENTS);
  auto* def = d.mutable_defaults();
  def->set_height(kDefaultSize);
  def->set_width(kDefaultSize);
  def->set_num_inference_steps(50);
  def->set_guidance_scale(family_ == EmbeddingsFamily::kFlux2 ? 4.0f : 0.0f);
  def->set_max_sequence_length(512);
  return d;
}

absl::StatusOr<worker::v1::RunResult> EmbeddingsPipeline::Run(
    const worker::v1::RunRequest& request, const std::function<void(const StepEvent&)>& on_step,
    const std::function<bool()>& cancel_requested) {
  if (request.items_size() == 0) return absl::InvalidArgumentError("a job needs at least one item");
  if (request.output_format() != ditserve::v1::OUTPUT_FORMAT_LATENTS) {
    return absl::InvalidArgumentError("this model can only return OUTPUT_FORMAT_LATENTS");
  }
  const int64_t batch = request.items_size();
  const bool true_cfg = request.items(0).true_cfg_scale() > 1.0f;
  worker::v1::RunResult result;

  // Conditioning: every rank received the embeddings with the request.
  const auto t_encode = Clock::now();
  auto gather = [&](bool negative, torch::Tensor* embeds, torch::Tensor* mask) -> absl::Status {
    std::vector<torch::Tensor> e, m;
    bool any_mask = false;
    for (const auto& item : request.items()) {
      const auto& pe = negative ? item.negative_prompt_embeddings() : item.prompt_embeddings();
      ASSIGN_OR_RETURN(torch::Tensor t, TensorFromProto(pe.prompt_embeds(), "prompt_embeds"));
      e.push_back(t);
      if (pe.has_text_mask()) {
        ASSIGN_OR_RETURN(torch::Tensor mk, TensorFromProto(pe.text_mask(), "text_mask"));
        m.push_back(mk);
        any_mask = true;
      } else {
        m.push_back(torch::ones({1, t.size(1)}, torch::kFloat32));
      }
    }
    return compat::GuardTorchStatus("embeddings", [&] {
      *embeds = torch::cat(e, 0).to(device_, dtype_);
      // diffusers passes no mask when nothing is masked.
      if (any_mask && family_ == EmbeddingsFamily::kQwenImage) *mask = torch::cat(m, 0).to(device_);
    });
  };
  torch::Tensor embeds, mask, neg_embeds, neg_mask;
  RETURN_IF_ERROR(gather(false, &embeds, &mask));
  if (true_cfg) RETURN_IF_ERROR(gather(true, &neg_embeds, &neg_mask));
  result.set_encode_seconds(Since(t_encode));

  const auto t_denoise = Clock::now();
  const int64_t h = LatentSide(request.height(), kVaeScaleFactor);
  const int64_t w = LatentSide(request.width(), kVaeScaleFactor);
  const int64_t tokens = (h / 2) * (w / 2);
  auto fopts = torch::TensorOptions().dtype(dtype_).device(device_);
  torch::Tensor latents;
  std::map<std::string, torch::Tensor> fixed;
  std::optional<double> mu;
  const int steps = static_cast<int>(request.num_inference_steps());
  if (family_ == EmbeddingsFamily::kFlux2) {
    // Latents are drawn already patchified: (B, in_channels, h/2, w/2), tokens row-major.
    std::vector<torch::Tensor> noise;
    for (const auto& item : request.items()) {
      ASSIGN_OR_RETURN(torch::Tensor n, InitialNoise({1, in_channels_, h / 2, w / 2}, item.seed(), dtype_, device_));
      noise.push_back(n);
    }
    latents = torch::cat(noise, 0).reshape({batch, in_channels_, tokens}).permute({0, 2, 1}).contiguous();
    torch::Tensor ys = torch::arange(h / 2, fopts).view({-1, 1}).expand({h / 2, w / 2}).reshape({-1});
    torch::Tensor xs = torch::arange(w / 2, fopts).view({1, -1}).expand({h / 2, w / 2}).reshape({-1});
    torch::Tensor zeros = torch::zeros({tokens}, fopts);
    fixed["img_ids"] = torch::stack({zeros, ys, xs, zeros}, 1);
    const int64_t seq = embeds.size(1);
    torch::Tensor txt = torch::zeros({seq, 4}, fopts);
    txt.select(1, 3).copy_(torch::arange(seq, fopts));
    fixed["txt_ids"] = txt;
    if (guidance_embeds_) {
      std::vector<float> g;
      for (const auto& item : request.items()) g.push_back(item.guidance_scale());
      fixed["guidance"] = torch::tensor(g, torch::kFloat32).to(device_);
    }
    mu = ComputeEmpiricalMu(tokens, steps);
  } else {
    std::vector<torch::Tensor> noise;
    const int64_t channels = in_channels_ / 4;
    for (const auto& item : request.items()) {
      ASSIGN_OR_RETURN(torch::Tensor n, InitialNoise({1, channels, h, w}, item.seed(), dtype_, device_));
      noise.push_back(n);
    }
    ASSIGN_OR_RETURN(latents, PackLatents(torch::cat(noise, 0)));
    fixed["img_shapes"] = torch::tensor({1.0f, static_cast<float>(h / 2), static_cast<float>(w / 2)})
                              .view({1, 3}).expand({batch, 3}).contiguous().to(device_);
    if (scheduler_config_.use_dynamic_shifting) mu = CalculateShift(tokens, scheduler_config_);
  }
  FlowMatchEulerScheduler scheduler(scheduler_config_);
  RETURN_IF_ERROR(scheduler.SetTimesteps(FluxSigmas(steps), mu));

  std::vector<float> cfg_values;
  for (const auto& item : request.items()) cfg_values.push_back(item.true_cfg_scale());
  torch::Tensor cfg_scale = torch::tensor(cfg_values, torch::kFloat32).to(device_, dtype_).view({batch, 1, 1});
  auto call = [&](const torch::Tensor& x, int index, const torch::Tensor& e,
                  const torch::Tensor& m) -> absl::StatusOr<torch::Tensor> {
    std::map<std::string, torch::Tensor> args = fixed;
    args["hidden_states"] = x;
    args["encoder_hidden_states"] = e;
    args["timestep"] = ModelTimestep(scheduler, index, batch, dtype_, device_);
    if (m.defined()) args["encoder_hidden_states_mask"] = m;
    return transformer_->Forward(args);
  };
  auto velocity = [&](const torch::Tensor& x, int index) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(torch::Tensor v, call(x, index, embeds, mask));
    if (!true_cfg) return v;
    ASSIGN_OR_RETURN(torch::Tensor nv, call(x, index, neg_embeds, neg_mask));
    return compat::GuardTorch("true CFG", [&] {
      torch::Tensor comb = nv + cfg_scale * (v - nv);
      if (family_ != EmbeddingsFamily::kQwenImage) return comb;
      // Qwen-Image rescales the guided velocity per token to the conditional norm.
      torch::Tensor cond_norm = torch::norm(v, 2, {-1}, /*keepdim=*/true);
      torch::Tensor comb_norm = torch::norm(comb, 2, {-1}, /*keepdim=*/true);
      return comb * (cond_norm / comb_norm);
    });
  };
  ASSIGN_OR_RETURN(latents, RunDenoiseLoop(scheduler, latents, velocity, *comm_, on_step, cancel_requested));
  result.set_denoise_seconds(Since(t_denoise));
  if (comm_->rank() != 0) return result;
  for (int64_t i = 0; i < batch; ++i) {
    const auto& item = request.items(static_cast<int>(i));
    auto* out = result.add_items();
    out->set_request_id(item.request_id());
    out->set_format(ditserve::v1::OUTPUT_FORMAT_LATENTS);
    out->set_height(request.height());
    out->set_width(request.width());
    out->set_seed(item.seed());
    out->set_num_inference_steps(request.num_inference_steps());
    *out->mutable_latents() = TensorToProto(latents.slice(0, i, i + 1));
  }
  return result;
}

absl::StatusOr<torch::Tensor> EmbeddingsPipeline::Forward(
    const std::map<std::string, torch::Tensor>& inputs) {
  std::map<std::string, torch::Tensor> args;
  for (const auto& [name, t] : inputs) {
    // Shapes and masks keep their own type; activations move to the model dtype.
    const bool structural = name == "img_shapes" || name == "encoder_hidden_states_mask";
    args[name] = structural ? t.to(device_) : t.to(device_, dtype_);
  }
  return transformer_->Forward(args);
}

}  // namespace ditserve::pipeline
