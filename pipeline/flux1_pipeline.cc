#include "pipeline/flux1_pipeline.h"

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/vae/image_postprocess.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/image_output.h"
#include "pipeline/latents.h"
#include "pipeline/tensor_proto.h"
#include "sharding/checkpoint.h"
#include "sharding/loader.h"
#include "sharding/tp_plan.h"
#include "worker/comm/agree.h"

namespace ditserve::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// diffusers' FluxPipeline.default_sample_size.
constexpr int64_t kDefaultSampleSize = 128;

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not valid JSON"));
  return j;
}

const char* DtypeName(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bfloat16" : t == torch::kFloat16 ? "float16" : "float32";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Flux1Pipeline>> Flux1Pipeline::Load(
    const sharding::PipelineIndex& index, const PipelineOptions& options,
    comm::Communicator* comm) {
  std::unique_ptr<Flux1Pipeline> p(new Flux1Pipeline());
  p->name_ = ModelNameFromDir(index.root);
  p->comm_ = comm;
  p->device_ = options.device;
  p->dtype_ = options.dtype;

  sharding::LoadOptions lo;
  lo.device = options.device;
  lo.dtype = options.dtype;
  lo.staging_buffer_bytes = options.staging_buffer_bytes;
  lo.progress = options.on_load_progress;

  ASSIGN_OR_RETURN(std::string transformer_dir, index.ComponentDir("transformer"));
  ASSIGN_OR_RETURN(nlohmann::json tconfig, sharding::ReadComponentConfig(transformer_dir));
  ASSIGN_OR_RETURN(sharding::TpPlan plan,
                   sharding::BuiltinTpPlan(tconfig.value("_class_name", ""), tconfig));
  ASSIGN_OR_RETURN(sharding::ShardedStateDict sd,
                   sharding::LoadShard(transformer_dir, &plan, comm->rank(), comm->world_size(), lo));
  ASSIGN_OR_RETURN(models::flux1::FluxTransformerConfig cfg,
                   models::flux1::ParseFluxTransformerConfig(tconfig));
  ASSIGN_OR_RETURN(p->transformer_, models::flux1::FluxTransformer2DModel::Load(cfg, sd, comm));
  p->weight_bytes_ += sd.TotalBytes();

  ASSIGN_OR_RETURN(std::string scheduler_dir, index.ComponentDir("scheduler"));
  ASSIGN_OR_RETURN(nlohmann::json sconfig, ReadJsonFile(scheduler_dir + "/scheduler_config.json"));
  ASSIGN_OR_RETURN(p->scheduler_config_, ParseFlowMatchSchedulerConfig(sconfig));

  ASSIGN_OR_RETURN(std::string vae_dir, index.ComponentDir("vae"));
  ASSIGN_OR_RETURN(vae::AutoencoderKLConfig vae_config,
                   vae::LoadAutoencoderKLConfig(vae_dir + "/config.json"));
  p->vae_scale_factor_ = vae_config.scale_factor();
  if (vae_config.latent_channels * 4 != cfg.in_channels) {
    return absl::FailedPreconditionError(absl::StrCat(
        index.root, ": the VAE's latent_channels (", vae_config.latent_channels,
        ") x 4 does not match the transformer's in_channels (", cfg.in_channels, ")"));
  }

  if (comm->rank() == 0) {
    ASSIGN_OR_RETURN(p->encoder_, Flux1PromptEncoder::Load(index, options.device, options.dtype,
                                                           options.staging_buffer_bytes));
    sharding::LoadOptions vae_lo = lo;
    vae_lo.progress = nullptr;
    ASSIGN_OR_RETURN(sharding::ShardedStateDict vae_sd,
                     sharding::LoadShard(vae_dir, nullptr, 0, 1, vae_lo));
    ASSIGN_OR_RETURN(vae::AutoencoderKLDecoder decoder,
                     vae::AutoencoderKLDecoder::Create(vae_config, vae_sd));
    p->vae_.emplace(std::move(decoder));
    p->weight_bytes_ += p->encoder_->weight_bytes() + vae_sd.TotalBytes();
  }
  return p;
}

worker::v1::ModelDescription Flux1Pipeline::Describe() const {
  const auto& c = transformer_->config();
  worker::v1::ModelDescription d;
  d.set_name(name_);
  d.set_family("flux1");
  d.set_dtype(DtypeName(dtype_));
  d.set_device(device_.is_cuda() ? "cuda" : "cpu");
  d.set_guidance_distilled(c.guidance_embeds);
  auto* in = d.mutable_inputs();
  in->set_accepts_text_prompt(true);
  in->set_requires_prompt_embeddings(false);
  for (int64_t v : {int64_t{1}, int64_t{-1}, c.joint_attention_dim}) in->add_prompt_embeds_shape(v);
  for (int64_t v : {int64_t{1}, c.pooled_projection_dim}) in->add_pooled_prompt_embeds_shape(v);
  in->set_accepts_text_mask(false);
  auto* def = d.mutable_defaults();
  def->set_height(static_cast<uint32_t>(kDefaultSampleSize * vae_scale_factor_));
  def->set_width(static_cast<uint32_t>(kDefaultSampleSize * vae_scale_factor_));
  // FLUX.1-dev (guidance-distilled): 28 steps at guidance 3.5, diffusers' defaults.
  // FLUX.1-schnell (no guidance embedder): the 4-step, guidance-free regime it was distilled for.
  def->set_num_inference_steps(c.guidance_embeds ? 28 : 4);
  def->set_guidance_scale(c.guidance_embeds ? 3.5f : 0.0f);
  def->set_max_sequence_length(512);
  return d;
}

absl::StatusOr<Flux1Pipeline::Conditioning> Flux1Pipeline::FromEmbeddings(
    const worker::v1::RunRequest& request, bool negative) {
  std::vector<torch::Tensor> embeds, pooled;
  for (int i = 0; i < request.items_size(); ++i) {
    const auto& item = request.items(i);
    const auto& e = negative ? item.negative_prompt_embeddings() : item.prompt_embeddings();
    const std::string field = negative ? "negative_prompt_embeddings" : "prompt_embeddings";
    ASSIGN_OR_RETURN(torch::Tensor pe, TensorFromProto(e.prompt_embeds(), field + ".prompt_embeds"));
    ASSIGN_OR_RETURN(torch::Tensor pp, TensorFromProto(e.pooled_prompt_embeds(),
                                                       field + ".pooled_prompt_embeds"));
    embeds.push_back(pe);
    pooled.push_back(pp);
  }
  return compat::GuardTorch("prompt embeddings", [&] {
    return Conditioning{torch::cat(embeds, 0).to(device_, dtype_),
                        torch::cat(pooled, 0).to(device_, dtype_)};
  });
}

absl::StatusOr<Flux1Pipeline::Conditioning> Flux1Pipeline::Condition(
    const worker::v1::RunRequest& request, bool negative) {
  if (request.items(0).has_prompt_embeddings()) return FromEmbeddings(request, negative);
  const auto& c = transformer_->config();
  const int64_t batch = request.items_size();
  const int64_t seq = request.max_sequence_length();
  Conditioning out;
  absl::Status local;
  if (comm_->rank() == 0) {
    std::vector<std::string> prompts, prompts_2;
    for (const auto& item : request.items()) {
      prompts.push_back(negative ? item.negative_prompt() : item.prompt());
      prompts_2.push_back(negative ? item.negative_prompt_2() : item.prompt_2());
    }
    auto encoded = encoder_->Encode(prompts, prompts_2, static_cast<int>(seq));
    if (encoded.ok()) {
      out.prompt_embeds = encoded->prompt_embeds.to(device_, dtype_).contiguous();
      out.pooled = encoded->pooled_prompt_embeds.to(device_, dtype_).contiguous();
    } else {
      local = encoded.status();
    }
  }
  // Every rank learns whether rank 0 could encode before anyone enters the broadcast.
  ASSIGN_OR_RETURN(bool failed, comm::AgreeOnFlag(*comm_, !local.ok(), device_));
  if (failed) {
    return comm_->rank() == 0 ? local
                              : absl::InternalError("rank 0 failed to encode the prompt");
  }
  if (comm_->world_size() > 1) {
    if (comm_->rank() != 0) {
      auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
      out.prompt_embeds = torch::empty({batch, seq, c.joint_attention_dim}, opts);
      out.pooled = torch::empty({batch, c.pooled_projection_dim}, opts);
    }
    RETURN_IF_ERROR(comm_->Broadcast(out.prompt_embeds, 0));
    RETURN_IF_ERROR(comm_->Broadcast(out.pooled, 0));
  }
  return out;
}

absl::StatusOr<worker::v1::RunResult> Flux1Pipeline::Run(
    const worker::v1::RunRequest& request, const std::function<void(const StepEvent&)>& on_step,
    const std::function<bool()>& cancel_requested) {
  if (request.items_size() == 0) return absl::InvalidArgumentError("a job needs at least one item");
  const auto& c = transformer_->config();
  const int64_t batch = request.items_size();
  const bool true_cfg = request.items(0).true_cfg_scale() > 1.0f;
  worker::v1::RunResult result;

  const auto t_encode = Clock::now();
  ASSIGN_OR_RETURN(Conditioning cond, Condition(request, /*negative=*/false));
  Conditioning neg;
  if (true_cfg) {
    ASSIGN_OR_RETURN(neg, Condition(request, /*negative=*/true));
  }
  result.set_encode_seconds(Since(t_encode));

  const auto t_denoise = Clock::now();
  const int64_t h = LatentSide(request.height(), vae_scale_factor_);
  const int64_t w = LatentSide(request.width(), vae_scale_factor_);
  const int64_t channels = c.in_channels / 4;
  std::vector<torch::Tensor> noise;
  for (const auto& item : request.items()) {
    ASSIGN_OR_RETURN(torch::Tensor n, InitialNoise({1, channels, h, w}, item.seed(), dtype_, device_));
    noise.push_back(n);
  }
  ASSIGN_OR_RETURN(torch::Tensor latents, PackLatents(torch::cat(noise, 0)));
  const int64_t seq = cond.prompt_embeds.size(1);
  auto fopts = torch::TensorOptions().dtype(dtype_).device(device_);
  torch::Tensor img_ids = LatentImageIds(h / 2, w / 2, dtype_, device_);
  torch::Tensor txt_ids = torch::zeros({seq, 3}, fopts);
  std::vector<float> guidance_values, cfg_values;
  for (const auto& item : request.items()) {
    guidance_values.push_back(item.guidance_scale());
    cfg_values.push_back(item.true_cfg_scale());
  }
  torch::Tensor guidance = torch::tensor(guidance_values, torch::kFloat32).to(device_);
  torch::Tensor cfg_scale = torch::tensor(cfg_values, torch::kFloat32).to(device_, dtype_).view({batch, 1, 1});

  FlowMatchEulerScheduler scheduler(scheduler_config_);
  std::optional<double> mu;
  if (scheduler_config_.use_dynamic_shifting) mu = CalculateShift((h / 2) * (w / 2), scheduler_config_);
  RETURN_IF_ERROR(scheduler.SetTimesteps(FluxSigmas(static_cast<int>(request.num_inference_steps())), mu));

  auto velocity = [&](const torch::Tensor& x, int index) -> absl::StatusOr<torch::Tensor> {
    models::flux1::FluxForwardArgs args;
    args.hidden_states = x;
    args.encoder_hidden_states = cond.prompt_embeds;
    args.pooled_projections = cond.pooled;
    args.timestep = ModelTimestep(scheduler, index, batch, dtype_, device_);
    args.img_ids = img_ids;
    args.txt_ids = txt_ids;
    if (c.guidance_embeds) args.guidance = guidance;
    ASSIGN_OR_RETURN(torch::Tensor v, transformer_->Forward(args));
    if (!true_cfg) return v;
    args.encoder_hidden_states = neg.prompt_embeds;
    args.pooled_projections = neg.pooled;
    ASSIGN_OR_RETURN(torch::Tensor nv, transformer_->Forward(args));
    return compat::GuardTorch("true CFG", [&] { return nv + cfg_scale * (v - nv); });
  };
  ASSIGN_OR_RETURN(latents, RunDenoiseLoop(scheduler, latents, velocity, *comm_, on_step,
                                           cancel_requested));
  result.set_denoise_seconds(Since(t_denoise));
  if (comm_->rank() != 0) return result;

  const auto t_decode = Clock::now();
  const auto format = request.output_format();
  torch::Tensor images;
  if (format != ditserve::v1::OUTPUT_FORMAT_LATENTS) {
    ASSIGN_OR_RETURN(torch::Tensor unpacked, UnpackLatents(latents, h, w));
    ASSIGN_OR_RETURN(torch::Tensor decoded, vae_->DecodeLatents(unpacked));
    ASSIGN_OR_RETURN(images, vae::PostprocessImage(decoded));
  }
  for (int64_t i = 0; i < batch; ++i) {
    const auto& item = request.items(static_cast<int>(i));
    ditserve::v1::GenerateResponse* out = result.add_items();
    out->set_request_id(item.request_id());
    out->set_format(format == ditserve::v1::OUTPUT_FORMAT_UNSPECIFIED ? ditserve::v1::OUTPUT_FORMAT_PNG : format);
    out->set_height(request.height());
    out->set_width(request.width());
    out->set_seed(item.seed());
    out->set_num_inference_steps(request.num_inference_steps());
    if (format == ditserve::v1::OUTPUT_FORMAT_LATENTS) {
      *out->mutable_latents() = TensorToProto(latents.slice(0, i, i + 1));
      continue;
    }
    std::vector<std::pair<std::string, std::string>> text = {
        {"Software", absl::StrCat("ditserve ", DITSERVE_VERSION)},
        {"Model", name_},
        {"Prompt", item.prompt()},
        {"Seed", std::to_string(item.seed())},
        {"Steps", std::to_string(request.num_inference_steps())},
        {"Guidance", absl::StrFormat("%g", item.guidance_scale())},
        {"Size", absl::StrCat(request.width(), "x", request.height())}};
    if (item.prompt_2() != item.prompt()) text.emplace_back("Prompt 2", item.prompt_2());
    if (true_cfg) {
      text.emplace_back("Negative prompt", item.negative_prompt());
      text.emplace_back("True CFG scale", absl::StrFormat("%g", item.true_cfg_scale()));
    }
    ASSIGN_OR_RETURN(std::string bytes, EncodeImage(images[i], format, text));
    out->set_image(std::move(bytes));
  }
  result.set_decode_seconds(Since(t_decode));
  return result;
}

absl::StatusOr<torch::Tensor> Flux1Pipeline::Forward(
    const std::map<std::string, torch::Tensor>& inputs) {
  std::map<std::string, torch::Tensor> args;
  for (const auto& [name, t] : inputs) args[name] = t.to(device_, dtype_);
  return transformer_->Forward(args);
}

}  // namespace ditserve::pipeline
