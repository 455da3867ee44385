#include "pipeline/flux2_pipeline.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "pipeline/component_loading.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"
#include "models/vae/image_postprocess.h"
#include "sharding/loader.h"

namespace ditserve::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

// diffusers' Flux2Pipeline.default_sample_size (x the VAE's 8) and the __call__ defaults.
constexpr int64_t kDefaultSampleSize = 128;
constexpr int64_t kDefaultSteps = 50;
constexpr float kDefaultGuidance = 4.0f;

// The published FLUX.2-dev scheduler configuration, for a transformer folder alone.
FlowMatchSchedulerConfig PublishedScheduler() {
  FlowMatchSchedulerConfig c;
  c.num_train_timesteps = 1000;
  c.use_dynamic_shifting = true;
  c.shift = 3.0;
  c.base_shift = 0.5;
  c.max_shift = 1.15;
  c.base_image_seq_len = 256;
  c.max_image_seq_len = 4096;
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Flux2Pipeline>> Flux2Pipeline::Load(
    const sharding::PipelineIndex* index, const std::string& transformer_dir,
    const PipelineOptions& options, comm::Communicator* comm) {
  std::unique_ptr<Flux2Pipeline> p(new Flux2Pipeline());
  p->comm_ = comm;
  p->device_ = options.device;
  p->dtype_ = options.dtype;
  ASSIGN_OR_RETURN(LoadedTransformer t, LoadTransformer(transformer_dir, options, comm));
  p->transformer_ = std::move(t.model);
  p->weight_bytes_ += t.weight_bytes;
  ASSIGN_OR_RETURN(p->loras_, LoadLoras(options, *p->transformer_, *comm));
  for (const lora::LoraCard& l : p->loras_->cards()) p->weight_bytes_ += l.bytes;
  p->in_channels_ = t.config.value("in_channels", int64_t{0});
  p->joint_attention_dim_ = t.config.value("joint_attention_dim", int64_t{0});
  p->guidance_embeds_ = t.config.value("guidance_embeds", false);

  std::string scheduler_dir;
  if (index != nullptr) {
    ASSIGN_OR_RETURN(scheduler_dir, index->ComponentDir("scheduler"));
  }
  ASSIGN_OR_RETURN(p->scheduler_config_, LoadSchedulerConfig(scheduler_dir, PublishedScheduler()));

  // The VAE (rank 0 decodes): its block count sets the latent grid on every rank.
  if (index != nullptr && index->ComponentDir("vae").ok()) {
    const std::string vae_dir = *index->ComponentDir("vae");
    ASSIGN_OR_RETURN(vae::AutoencoderKLFlux2Config vae_config,
                     vae::LoadAutoencoderKLFlux2Config(vae_dir + "/config.json"));
    p->vae_scale_factor_ = vae_config.pipeline_vae_scale_factor();
    if (vae_config.patchified_channels() != p->in_channels_) {
      return absl::FailedPreconditionError(absl::StrCat(
          index->root, ": the VAE's patchified latent channels (", vae_config.patchified_channels(),
          ") do not match the transformer's in_channels (", p->in_channels_, ")"));
    }
    p->has_vae_ = true;
    if (comm->rank() == 0) {
      sharding::LoadOptions vae_lo = ShardLoadOptions(options);
      vae_lo.progress = nullptr;
      ASSIGN_OR_RETURN(sharding::ShardedStateDict vae_sd,
                       sharding::LoadShard(vae_dir, nullptr, 0, 1, vae_lo));
      ASSIGN_OR_RETURN(vae::AutoencoderKLFlux2 vae, vae::AutoencoderKLFlux2::Create(vae_config, vae_sd));
      p->vae_.emplace(std::move(vae));
      p->weight_bytes_ += vae_sd.TotalBytes();
    }
  }

  // The text encoder: sharded over the ranks, or a replica on rank 0 (placement).
  if (index != nullptr && index->ComponentDir("text_encoder").ok() &&
      index->ComponentDir("tokenizer").ok()) {
    const std::string te_dir = *index->ComponentDir("text_encoder");
    const std::string tok_dir = *index->ComponentDir("tokenizer");
    ASSIGN_OR_RETURN(bool sharded,
                     ShardTextEncoder(te_dir, options.text_encoder_placement, options.dtype, *comm));
    p->sharded_encoder_ = sharded;
    p->has_encoder_ = true;
    if (sharded || comm->rank() == 0) {
      ASSIGN_OR_RETURN(p->encoder_, Flux2PromptEncoder::Load(tok_dir, te_dir, options, comm, sharded));
      p->weight_bytes_ += p->encoder_->weight_bytes();
      if (p->encoder_->embed_width() != p->joint_attention_dim_) {
        return absl::FailedPreconditionError(absl::StrCat(
            index->root, ": the text encoder gives ", p->encoder_->embed_width(),
            "-wide prompt embeddings (3 x hidden_size) but the transformer's joint_attention_dim is ",
            p->joint_attention_dim_));
      }
    }
  }

  ModelCard& card = p->card_;
  card.name = ModelNameFromDir(index != nullptr ? index->root : options.model_dir);
  card.family = "flux2";
  card.dtype = DtypeName(options.dtype);
  card.device = options.device.is_cuda() ? "cuda" : "cpu";
  card.guidance_distilled = p->guidance_embeds_;
  card.accepts_text_prompt = p->has_encoder_;
  card.requires_prompt_embeddings = !p->has_encoder_;
  card.prompt_embeds_shape = {1, -1, p->joint_attention_dim_};
  card.images_out = p->has_vae_;
  card.default_height = card.default_width = kDefaultSampleSize * p->vae_scale_factor_;
  card.default_steps = kDefaultSteps;
  card.default_guidance_scale = kDefaultGuidance;
  card.default_max_sequence_length = 512;
  card.loras = p->loras_->cards();
  return p;
}

absl::StatusOr<torch::Tensor> Flux2Pipeline::Condition(const GenerationJob& job) {
  if (job.items[0].embeddings.has_value() || !has_encoder_) {
    ASSIGN_OR_RETURN(torch::Tensor embeds,
                     StackEmbeddings(job, /*negative=*/false,
                                     [](const PromptEmbeddings& e) { return e.prompt_embeds; },
                                     "prompt_embeds"));
    return embeds.to(device_, dtype_);
  }
  std::vector<std::string> prompts;
  for (const JobItem& item : job.items) prompts.push_back(item.prompt);
  const int64_t seq = job.max_sequence_length;
  if (sharded_encoder_) {
    // Every rank tokenizes the same prompts; agree that it worked before the encoder's
    // collectives, so a bad prompt fails on every rank alike.
    absl::Status tokenized = encoder_->Tokenize(prompts, seq).status();
    RETURN_IF_ERROR(AgreeOnFailure(*comm_, tokenized, "tokenizing the prompt", device_));
    ASSIGN_OR_RETURN(torch::Tensor embeds, encoder_->Encode(prompts, seq));
    return embeds.to(device_, dtype_);
  }
  std::vector<torch::Tensor> tensors;
  RETURN_IF_ERROR(BroadcastFromRank0(
      *comm_,
      [&](std::vector<torch::Tensor>* out) -> absl::Status {
        ASSIGN_OR_RETURN(torch::Tensor embeds, encoder_->Encode(prompts, seq));
        out->push_back(embeds.to(device_, dtype_).contiguous());
        return absl::OkStatus();
      },
      {{static_cast<int64_t>(prompts.size()), seq, joint_attention_dim_}}, dtype_, device_, &tensors));
  return tensors[0];
}

absl::StatusOr<GenerationResult> Flux2Pipeline::Run(const GenerationJob& job,
                                                    const StepCallback& on_step,
                                                    const CancelPredicate& cancel_requested) {
  if (job.items.empty()) return absl::InvalidArgumentError("a job needs at least one item");
  if (job.output != JobOutput::kLatents && !card_.images_out) {
    return absl::InvalidArgumentError("this model can only return OUTPUT_FORMAT_LATENTS");
  }
  if (job.true_cfg()) {
    // diffusers' Flux2Pipeline has no negative prompt: FLUX.2-dev is guidance-distilled.
    return absl::InvalidArgumentError("true_cfg_scale: FLUX.2 takes no negative prompt (guidance-distilled)");
  }
  auto result = GuardTorch("FLUX.2 pipeline", [&] { return RunUnguarded(job, on_step, cancel_requested); });
  if (!result.ok()) return result.status();
  return *std::move(result);
}

absl::StatusOr<GenerationResult> Flux2Pipeline::RunUnguarded(const GenerationJob& job,
                                                             const StepCallback& on_step,
                                                             const CancelPredicate& cancel_requested) {
  const int64_t batch = static_cast<int64_t>(job.items.size());
  GenerationResult result;
  const auto t_encode = Clock::now();
  ASSIGN_OR_RETURN(torch::Tensor embeds, Condition(job));
  result.seconds.encode = SecondsSince(t_encode);

  const auto t_denoise = Clock::now();
  const int64_t h = LatentSide(job.height, vae_scale_factor_) / 2;
  const int64_t w = LatentSide(job.width, vae_scale_factor_) / 2;
  const int64_t tokens = h * w;
  const int steps = static_cast<int>(job.num_inference_steps);
  torch::Tensor latents;
  std::map<std::string, torch::Tensor> fixed;
  FlowMatchEulerScheduler scheduler(scheduler_config_);
  lora::LoraActivation adapters;  // the job's LoRA terms, cleared when the job ends
  absl::Status prepared = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(adapters, loras_->Activate(job.loras));
    ASSIGN_OR_RETURN(torch::Tensor noise, BatchNoise(job, {1, in_channels_, h, w}, dtype_, device_));
    latents = noise.reshape({batch, in_channels_, tokens}).permute({0, 2, 1}).contiguous();
    auto fopts = torch::TensorOptions().dtype(dtype_).device(device_);
    torch::Tensor ys = torch::arange(h, fopts).view({-1, 1}).expand({h, w}).reshape({-1});
    torch::Tensor xs = torch::arange(w, fopts).view({1, -1}).expand({h, w}).reshape({-1});
    torch::Tensor zeros = torch::zeros({tokens}, fopts);
    fixed["img_ids"] = torch::stack({zeros, ys, xs, zeros}, 1);
    const int64_t seq = embeds.size(1);
    torch::Tensor txt = torch::zeros({seq, 4}, fopts);
    txt.select(1, 3).copy_(torch::arange(seq, fopts));
    fixed["txt_ids"] = txt;
    if (guidance_embeds_) fixed["guidance"] = GuidanceScales(job, device_);
    return scheduler.SetTimesteps(FluxSigmas(steps), ComputeEmpiricalMu(tokens, steps));
  }();
  RETURN_IF_ERROR(AgreeOnFailure(*comm_, prepared, "preparing the latents", device_));

  auto velocity = [&](const torch::Tensor& x, int index) -> absl::StatusOr<torch::Tensor> {
    std::map<std::string, torch::Tensor> args = fixed;
    args["hidden_states"] = x;
    args["encoder_hidden_states"] = embeds;
    args["timestep"] = ModelTimestep(scheduler, index, batch, dtype_, device_);
    return transformer_->Forward(args);
  };
  ASSIGN_OR_RETURN(latents, RunDenoiseLoop(scheduler, latents, velocity, *comm_, on_step, cancel_requested));
  result.seconds.denoise = SecondsSince(t_denoise);
  if (comm_->rank() != 0) return result;
  RETURN_IF_ERROR(CollectOutputs(
      job, latents, [&](const torch::Tensor& l) { return vae_->DecodePackedLatents(l, h, w); }, &result));
  return result;
}

}  // namespace ditserve::pipeline
