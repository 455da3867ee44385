#include "pipeline/flux1_pipeline.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/vae/image_postprocess.h"
#include "pipeline/component_loading.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"
#include "sharding/checkpoint.h"
#include "sharding/loader.h"
#include "sharding/tp_plan.h"

namespace ditserve::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

// diffusers' FluxPipeline.default_sample_size.
constexpr int64_t kDefaultSampleSize = 128;

}  // namespace

absl::StatusOr<std::unique_ptr<Flux1Pipeline>> Flux1Pipeline::Load(
    const sharding::PipelineIndex& index, const PipelineOptions& options,
    comm::Communicator* comm) {
  std::unique_ptr<Flux1Pipeline> p(new Flux1Pipeline());
  p->comm_ = comm;
  p->device_ = options.device;
  p->dtype_ = options.dtype;

  const sharding::LoadOptions lo = ShardLoadOptions(options);

  ASSIGN_OR_RETURN(std::string transformer_dir, index.ComponentDir("transformer"));
  ASSIGN_OR_RETURN(nlohmann::json tconfig, sharding::ReadComponentConfig(transformer_dir));
  ASSIGN_OR_RETURN(sharding::TpPlan plan,
                   sharding::BuiltinTpPlan(tconfig.value("_class_name", ""), tconfig));
  // At tp 1 there is nothing to split (and the replicated layer is one addmm).
  if (options.shard_modulation && comm->world_size() > 1) sharding::AddModulationSharding(&plan);
  ASSIGN_OR_RETURN(sharding::ShardedStateDict sd,
                   sharding::LoadShard(transformer_dir, &plan, comm->rank(), comm->world_size(), lo));
  ASSIGN_OR_RETURN(models::flux1::FluxTransformerConfig cfg,
                   models::flux1::ParseFluxTransformerConfig(tconfig));
  ASSIGN_OR_RETURN(p->transformer_, models::flux1::FluxTransformer2DModel::Load(
                                        cfg, sd, comm, TransformerOptions(options)));
  p->weight_bytes_ += TransformerWeightBytes(sd, *p->transformer_);
  ASSIGN_OR_RETURN(p->loras_, LoadLoras(options, *p->transformer_, *comm));

  ASSIGN_OR_RETURN(std::string scheduler_dir, index.ComponentDir("scheduler"));
  ASSIGN_OR_RETURN(p->scheduler_config_, LoadSchedulerConfig(scheduler_dir, {}));

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

  ModelCard& card = p->card_;
  card.name = ModelNameFromDir(index.root);
  card.family = "flux1";
  card.dtype = DtypeName(options.dtype);
  card.device = options.device.is_cuda() ? "cuda" : "cpu";
  card.guidance_distilled = cfg.guidance_embeds;
  card.accepts_text_prompt = true;
  card.prompt_embeds_shape = {1, -1, cfg.joint_attention_dim};
  card.pooled_prompt_embeds_shape = {1, cfg.pooled_projection_dim};
  card.default_height = card.default_width = kDefaultSampleSize * p->vae_scale_factor_;
  // FLUX.1-dev (guidance-distilled): 28 steps at guidance 3.5, diffusers' defaults.
  // FLUX.1-schnell (no guidance embedder): the 4-step, guidance-free regime it was distilled for.
  card.default_steps = cfg.guidance_embeds ? 28 : 4;
  card.default_guidance_scale = cfg.guidance_embeds ? 3.5f : 0.0f;
  card.default_max_sequence_length = 512;
  card.loras = p->loras_->cards();
  for (const lora::LoraCard& l : card.loras) p->weight_bytes_ += l.bytes;
  return p;
}

absl::StatusOr<Flux1Pipeline::Conditioning> Flux1Pipeline::Condition(const GenerationJob& job,
                                                                     bool negative) {
  if (job.items[0].embeddings.has_value()) {
    ASSIGN_OR_RETURN(torch::Tensor embeds,
                     StackEmbeddings(job, negative, [](const PromptEmbeddings& e) { return e.prompt_embeds; },
                                     "prompt_embeds"));
    ASSIGN_OR_RETURN(torch::Tensor pooled,
                     StackEmbeddings(job, negative,
                                     [](const PromptEmbeddings& e) { return e.pooled_prompt_embeds; },
                                     "pooled_prompt_embeds"));
    return GuardTorch("prompt embeddings", [&] {
      return Conditioning{embeds.to(device_, dtype_), pooled.to(device_, dtype_)};
    });
  }
  const auto& c = transformer_->config();
  const int64_t batch = static_cast<int64_t>(job.items.size());
  const int64_t seq = job.max_sequence_length;
  std::vector<torch::Tensor> tensors;
  RETURN_IF_ERROR(BroadcastFromRank0(
      *comm_,
      [&](std::vector<torch::Tensor>* out) -> absl::Status {
        std::vector<std::string> prompts, prompts_2;
        for (const JobItem& item : job.items) {
          prompts.push_back(negative ? item.negative_prompt : item.prompt);
          prompts_2.push_back(negative ? item.negative_prompt_2 : item.prompt_2);
        }
        ASSIGN_OR_RETURN(Flux1PromptEmbeds encoded,
                         encoder_->Encode(prompts, prompts_2, static_cast<int>(seq)));
        return GuardTorchStatus("prompt embeddings", [&] {
          out->push_back(encoded.prompt_embeds.to(device_, dtype_).contiguous());
          out->push_back(encoded.pooled_prompt_embeds.to(device_, dtype_).contiguous());
        });
      },
      {{batch, seq, c.joint_attention_dim}, {batch, c.pooled_projection_dim}}, dtype_, device_,
      &tensors));
  return Conditioning{tensors[0], tensors[1]};
}

absl::StatusOr<GenerationResult> Flux1Pipeline::Run(const GenerationJob& job,
                                                    const StepCallback& on_step,
                                                    const CancelPredicate& cancel_requested) {
  if (job.items.empty()) return absl::InvalidArgumentError("a job needs at least one item");
  auto result = GuardTorch("FLUX.1 pipeline", [&] { return RunUnguarded(job, on_step, cancel_requested); });
  if (!result.ok()) return result.status();
  return *std::move(result);
}

absl::StatusOr<GenerationResult> Flux1Pipeline::RunUnguarded(const GenerationJob& job,
                                                             const StepCallback& on_step,
                                                             const CancelPredicate& cancel_requested) {
  const auto& c = transformer_->config();
  const int64_t batch = static_cast<int64_t>(job.items.size());
  const bool true_cfg = job.true_cfg();
  GenerationResult result;

  const auto t_encode = Clock::now();
  ASSIGN_OR_RETURN(Conditioning cond, Condition(job, /*negative=*/false));
  Conditioning neg;
  if (true_cfg) {
    ASSIGN_OR_RETURN(neg, Condition(job, /*negative=*/true));
  }
  result.seconds.encode = SecondsSince(t_encode);

  const auto t_denoise = Clock::now();
  const int64_t h = LatentSide(job.height, vae_scale_factor_);
  const int64_t w = LatentSide(job.width, vae_scale_factor_);
  torch::Tensor latents, img_ids, txt_ids, guidance, cfg_scale;
  FlowMatchEulerScheduler scheduler(scheduler_config_);
  // Everything a step needs is allocated before the loop, and the ranks agree that it worked, so
  // running out of memory here fails the job on every rank and leaves the group usable.
  lora::LoraActivation adapters;  // the job's LoRA terms, cleared when the job ends
  absl::Status prepared = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(adapters, loras_->Activate(job.loras));
    ASSIGN_OR_RETURN(torch::Tensor noise, BatchNoise(job, {1, c.in_channels / 4, h, w}, dtype_, device_));
    ASSIGN_OR_RETURN(latents, PackLatents(noise));
    img_ids = LatentImageIds(h / 2, w / 2, dtype_, device_);
    txt_ids = torch::zeros({cond.prompt_embeds.size(1), 3},
                           torch::TensorOptions().dtype(dtype_).device(device_));
    guidance = GuidanceScales(job, device_);
    cfg_scale = TrueCfgScales(job, dtype_, device_);
    std::optional<double> mu;
    if (scheduler_config_.use_dynamic_shifting) mu = CalculateShift((h / 2) * (w / 2), scheduler_config_);
    return scheduler.SetTimesteps(FluxSigmas(static_cast<int>(job.num_inference_steps)), mu);
  }();
  RETURN_IF_ERROR(AgreeOnFailure(*comm_, prepared, "preparing the latents", device_));

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
    return nv + cfg_scale * (v - nv);
  };
  ASSIGN_OR_RETURN(latents, RunDenoiseLoop(scheduler, latents, velocity, *comm_, on_step,
                                           cancel_requested));
  result.seconds.denoise = SecondsSince(t_denoise);
  if (comm_->rank() != 0) return result;

  RETURN_IF_ERROR(CollectOutputs(job, latents, [&](const torch::Tensor& l) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(torch::Tensor unpacked, UnpackLatents(l, h, w));
    return vae_->DecodeLatents(unpacked);
  }, &result));
  return result;
}

}  // namespace ditserve::pipeline
