#include "pipeline/qwenimage_pipeline.h"

#include <tuple>

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

// diffusers' QwenImagePipeline.default_sample_size (x the VAE's 8) and the __call__ defaults.
constexpr int64_t kDefaultSampleSize = 128;
constexpr int64_t kDefaultSteps = 50;

// The published Qwen-Image scheduler configuration, for a transformer folder alone.
FlowMatchSchedulerConfig PublishedScheduler() {
  FlowMatchSchedulerConfig c;
  c.num_train_timesteps = 1000;
  c.use_dynamic_shifting = true;
  c.shift = 1.0;
  c.base_shift = 0.5;
  c.max_shift = 0.9;
  c.base_image_seq_len = 256;
  c.max_image_seq_len = 8192;
  c.shift_terminal = 0.02;
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<QwenImagePipeline>> QwenImagePipeline::Load(
    const sharding::PipelineIndex* index, const std::string& transformer_dir,
    const PipelineOptions& options, comm::Communicator* comm) {
  std::unique_ptr<QwenImagePipeline> p(new QwenImagePipeline());
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

  std::string scheduler_dir;
  if (index != nullptr) {
    ASSIGN_OR_RETURN(scheduler_dir, index->ComponentDir("scheduler"));
  }
  ASSIGN_OR_RETURN(p->scheduler_config_, LoadSchedulerConfig(scheduler_dir, PublishedScheduler()));

  if (index != nullptr && index->ComponentDir("vae").ok()) {
    const std::string vae_dir = *index->ComponentDir("vae");
    ASSIGN_OR_RETURN(vae::AutoencoderKLQwenImageConfig vae_config,
                     vae::LoadAutoencoderKLQwenImageConfig(vae_dir + "/config.json"));
    p->vae_scale_factor_ = vae_config.scale_factor();
    p->has_vae_ = true;
    if (comm->rank() == 0) {
      sharding::LoadOptions vae_lo = ShardLoadOptions(options);
      vae_lo.progress = nullptr;
      ASSIGN_OR_RETURN(sharding::ShardedStateDict vae_sd,
                       sharding::LoadShard(vae_dir, nullptr, 0, 1, vae_lo));
      ASSIGN_OR_RETURN(vae::AutoencoderKLQwenImage vae,
                       vae::AutoencoderKLQwenImage::Create(vae_config, vae_sd));
      p->vae_.emplace(std::move(vae));
      p->weight_bytes_ += vae_sd.TotalBytes();
    }
  }
  if (index != nullptr && index->ComponentDir("text_encoder").ok() &&
      index->ComponentDir("tokenizer").ok()) {
    const std::string te_dir = *index->ComponentDir("text_encoder");
    ASSIGN_OR_RETURN(p->sharded_encoder_,
                     ShardTextEncoder(te_dir, options.text_encoder_placement, options.dtype, *comm));
    p->has_encoder_ = true;
    if (p->sharded_encoder_ || comm->rank() == 0) {
      ASSIGN_OR_RETURN(p->encoder_,
                       QwenImagePromptEncoder::Load(*index->ComponentDir("tokenizer"), te_dir, options,
                                                    comm, p->sharded_encoder_));
      p->weight_bytes_ += p->encoder_->weight_bytes();
      if (p->encoder_->hidden_size() != p->joint_attention_dim_) {
        return absl::FailedPreconditionError(absl::StrCat(
            index->root, ": the text encoder's hidden_size (", p->encoder_->hidden_size(),
            ") is not the transformer's joint_attention_dim (", p->joint_attention_dim_, ")"));
      }
    }
  }

  ModelCard& card = p->card_;
  card.name = ModelNameFromDir(index != nullptr ? index->root : options.model_dir);
  card.family = "qwenimage";
  card.dtype = DtypeName(options.dtype);
  card.device = options.device.is_cuda() ? "cuda" : "cpu";
  card.guidance_distilled = false;
  card.accepts_text_prompt = p->has_encoder_;
  card.requires_prompt_embeddings = !p->has_encoder_;
  card.prompt_embeds_shape = {1, -1, p->joint_attention_dim_};
  card.accepts_text_mask = true;
  card.images_out = p->has_vae_;
  card.default_height = card.default_width = kDefaultSampleSize * p->vae_scale_factor_;
  card.default_steps = kDefaultSteps;
  card.default_guidance_scale = 0.0f;
  card.default_true_cfg_scale = 4.0f;  // QwenImagePipeline.__call__'s true_cfg_scale
  card.default_max_sequence_length = 512;
  card.loras = p->loras_->cards();
  return p;
}

absl::StatusOr<QwenImagePipeline::Conditioning> QwenImagePipeline::Condition(const GenerationJob& job,
                                                                             bool negative) {
  const auto& first = negative ? job.items[0].negative_embeddings : job.items[0].embeddings;
  if (!first.has_value() && has_encoder_) return Encode(job, negative);
  ASSIGN_OR_RETURN(torch::Tensor embeds,
                   StackEmbeddings(job, negative, [](const PromptEmbeddings& e) { return e.prompt_embeds; },
                                   "prompt_embeds"));
  bool any_mask = false;
  for (const JobItem& item : job.items) {
    const auto& e = negative ? item.negative_embeddings : item.embeddings;
    any_mask = any_mask || (e.has_value() && e->text_mask.defined());
  }
  Conditioning out;
  out.embeds = embeds.to(device_, dtype_);
  if (any_mask) {
    // Items without a mask attend to every token.
    ASSIGN_OR_RETURN(torch::Tensor mask,
                     StackEmbeddings(job, negative,
                                     [](const PromptEmbeddings& e) {
                                       return e.text_mask.defined()
                                                  ? e.text_mask
                                                  : torch::ones({1, e.prompt_embeds.size(1)});
                                     },
                                     "text_mask"));
    out.mask = mask.to(device_);
  }
  return out;
}

absl::StatusOr<QwenImagePipeline::Conditioning> QwenImagePipeline::Encode(const GenerationJob& job,
                                                                          bool negative) {
  std::vector<std::string> prompts;
  for (const JobItem& item : job.items) prompts.push_back(negative ? item.negative_prompt : item.prompt);
  const int64_t batch = static_cast<int64_t>(prompts.size());
  torch::Tensor embeds, mask;
  if (sharded_encoder_) {
    absl::Status tokenized = encoder_->Tokenize(prompts).status();
    RETURN_IF_ERROR(AgreeOnFailure(*comm_, tokenized, "tokenizing the prompt", device_));
    ASSIGN_OR_RETURN(std::tie(embeds, mask), encoder_->Encode(prompts, job.max_sequence_length));
  } else {
    // The embeddings' length depends on the prompts: rank 0 broadcasts it first.
    std::vector<torch::Tensor> length;
    std::pair<torch::Tensor, torch::Tensor> encoded;
    RETURN_IF_ERROR(BroadcastFromRank0(
        *comm_,
        [&](std::vector<torch::Tensor>* out) -> absl::Status {
          ASSIGN_OR_RETURN(encoded, encoder_->Encode(prompts, job.max_sequence_length));
          out->push_back(torch::full({1}, encoded.first.size(1),
                                     torch::TensorOptions().dtype(torch::kInt64).device(device_)));
          return absl::OkStatus();
        },
        {{1}}, torch::kInt64, device_, &length));
    const int64_t seq = length[0].item<int64_t>();
    std::vector<torch::Tensor> tensors;
    RETURN_IF_ERROR(BroadcastFromRank0(
        *comm_,
        [&](std::vector<torch::Tensor>* out) -> absl::Status {
          out->push_back(encoded.first.to(device_, dtype_).contiguous());
          out->push_back(encoded.second.to(device_, dtype_).contiguous());
          return absl::OkStatus();
        },
        {{batch, seq, joint_attention_dim_}, {batch, seq}}, dtype_, device_, &tensors));
    embeds = tensors[0];
    mask = tensors[1];
  }
  Conditioning out;
  out.embeds = embeds.to(device_, dtype_);
  // diffusers passes no mask when every token is real.
  if (!mask.to(torch::kBool).all().item<bool>()) out.mask = mask.to(device_);
  return out;
}

absl::StatusOr<GenerationResult> QwenImagePipeline::Run(const GenerationJob& job,
                                                        const StepCallback& on_step,
                                                        const CancelPredicate& cancel_requested) {
  if (job.items.empty()) return absl::InvalidArgumentError("a job needs at least one item");
  if (job.output != JobOutput::kLatents && !card_.images_out) {
    return absl::InvalidArgumentError("this model can only return OUTPUT_FORMAT_LATENTS");
  }
  auto result =
      GuardTorch("Qwen-Image pipeline", [&] { return RunUnguarded(job, on_step, cancel_requested); });
  if (!result.ok()) return result.status();
  return *std::move(result);
}

absl::StatusOr<GenerationResult> QwenImagePipeline::RunUnguarded(
    const GenerationJob& job, const StepCallback& on_step, const CancelPredicate& cancel_requested) {
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
  const int64_t tokens = (h / 2) * (w / 2);
  const int steps = static_cast<int>(job.num_inference_steps);
  torch::Tensor latents, img_shapes, cfg_scale;
  FlowMatchEulerScheduler scheduler(scheduler_config_);
  lora::LoraActivation adapters;  // the job's LoRA terms, cleared when the job ends
  absl::Status prepared = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(adapters, loras_->Activate(job.loras));
    ASSIGN_OR_RETURN(torch::Tensor noise, BatchNoise(job, {1, in_channels_ / 4, h, w}, dtype_, device_));
    ASSIGN_OR_RETURN(latents, PackLatents(noise));
    img_shapes = torch::tensor({1.0f, static_cast<float>(h / 2), static_cast<float>(w / 2)})
                     .view({1, 3})
                     .expand({batch, 3})
                     .contiguous()
                     .to(device_);
    cfg_scale = TrueCfgScales(job, dtype_, device_);
    std::optional<double> mu;
    if (scheduler_config_.use_dynamic_shifting) mu = CalculateShift(tokens, scheduler_config_);
    return scheduler.SetTimesteps(FluxSigmas(steps), mu);
  }();
  RETURN_IF_ERROR(AgreeOnFailure(*comm_, prepared, "preparing the latents", device_));

  auto call = [&](const torch::Tensor& x, int index,
                  const Conditioning& c) -> absl::StatusOr<torch::Tensor> {
    std::map<std::string, torch::Tensor> args;
    args["hidden_states"] = x;
    args["encoder_hidden_states"] = c.embeds;
    args["timestep"] = ModelTimestep(scheduler, index, batch, dtype_, device_);
    args["img_shapes"] = img_shapes;
    if (c.mask.defined()) args["encoder_hidden_states_mask"] = c.mask;
    return transformer_->Forward(args);
  };
  auto velocity = [&](const torch::Tensor& x, int index) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(torch::Tensor v, call(x, index, cond));
    if (!true_cfg) return v;
    ASSIGN_OR_RETURN(torch::Tensor nv, call(x, index, neg));
    // The guided velocity, rescaled per token to the conditional prediction's norm.
    torch::Tensor comb = nv + cfg_scale * (v - nv);
    torch::Tensor cond_norm = torch::norm(v, 2, {-1}, /*keepdim=*/true);
    torch::Tensor comb_norm = torch::norm(comb, 2, {-1}, /*keepdim=*/true);
    return comb * (cond_norm / comb_norm);
  };
  ASSIGN_OR_RETURN(latents, RunDenoiseLoop(scheduler, latents, velocity, *comm_, on_step, cancel_requested));
  result.seconds.denoise = SecondsSince(t_denoise);
  if (comm_->rank() != 0) return result;
  RETURN_IF_ERROR(CollectOutputs(
      job, latents, [&](const torch::Tensor& l) { return vae_->DecodePackedLatents(l, h, w); }, &result));
  return result;
}

}  // namespace ditserve::pipeline
