#include "pipeline/diffusion_pipeline.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/torch_guard.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/image_inputs.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"
#include "sharding/checkpoint.h"

namespace ditserve::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

// diffusers' default_sample_size of the three pipelines (x the VAE's scale factor).
constexpr int64_t kDefaultSampleSize = 128;

}  // namespace

struct DiffusionPipeline::JobState {
  explicit JobState(const FlowMatchSchedulerConfig& config) : scheduler(config) {}

  FlowMatchEulerScheduler scheduler;
  lora::LoraActivation adapters;  // the job's LoRA terms, cleared when the job ends
  LatentLayout layout;
  torch::Tensor cfg_scale;   // (B, 1, 1) true-CFG scales; undefined without true CFG
  torch::Tensor references;  // (B, R, in_channels) reference tokens; undefined without
  int first_step = 0;        // image-to-image: the schedule step the loop starts at
  // First Block Cache (job.cache_threshold > 0): the state of the prompt's passes and of the
  // negative prompt's (diffusers' cache contexts "cond" and "uncond"), fresh for every job.
  std::optional<models::FirstBlockCache> cache_cond, cache_uncond;
  uint32_t full_passes = 0;  // passes without a cache (with one, the caches count)
  std::vector<GenerationResult::CacheDecision> cache_decisions;  // with one, in pass order
};

// ---- Load ----

absl::Status DiffusionPipeline::LoadComponents(const sharding::PipelineIndex* index,
                                               std::string transformer_dir,
                                               const PipelineOptions& options,
                                               comm::Communicator* comm) {
  if (!parse_transformer_ || !load_vae_) {
    return absl::InternalError(
        absl::StrCat(family_.display_name, ": the family registered no transformer config or VAE"));
  }
  comm_ = comm;
  device_ = options.device;
  dtype_ = options.dtype;
  root_ = index != nullptr ? index->root : options.model_dir;
  if (index == nullptr && family_.published_scheduler_json == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(root_, ": ", family_.display_name,
                                                   " is served from its pipeline folder only"));
  }
  if (index != nullptr) {
    pipeline_class_ = index->class_name;
    ASSIGN_OR_RETURN(transformer_dir, index->ComponentDir("transformer"));
  }
  RETURN_IF_ERROR(LoadTransformerAndLoras(transformer_dir, options));
  ASSIGN_OR_RETURN(scheduler_config_, LoadScheduler(index));
  RETURN_IF_ERROR(LoadVaeIfAny(index, options));
  RETURN_IF_ERROR(LoadTextSide(index, options));
  FillSharedCard(options);
  FillCard(&card_);
  return absl::OkStatus();
}

absl::Status DiffusionPipeline::LoadTransformerAndLoras(const std::string& dir,
                                                        const PipelineOptions& options) {
  ASSIGN_OR_RETURN(LoadedTransformer t,
                   LoadTransformer(dir, options, comm_, [this](const nlohmann::json& config) {
                     absl::StatusOr<TransformerShape> shape = parse_transformer_(config);
                     if (shape.ok()) shape_ = *shape;
                     return shape.status();
                   }));
  transformer_ = std::move(t.model);
  weight_bytes_ += t.weight_bytes;
  ASSIGN_OR_RETURN(loras_, LoadLoras(options, *transformer_, *comm_));
  for (const lora::LoraCard& l : loras_->cards()) weight_bytes_ += l.bytes;
  return absl::OkStatus();
}

absl::StatusOr<FlowMatchSchedulerConfig> DiffusionPipeline::LoadScheduler(
    const sharding::PipelineIndex* index) const {
  if (index != nullptr) {
    ASSIGN_OR_RETURN(std::string scheduler_dir, index->ComponentDir("scheduler"));
    return LoadSchedulerConfig(scheduler_dir);
  }
  ASSIGN_OR_RETURN(nlohmann::json published, ParseJsonObject(family_.published_scheduler_json));
  return ParseFlowMatchSchedulerConfig(published);
}

absl::Status DiffusionPipeline::LoadVaeIfAny(const sharding::PipelineIndex* index,
                                             const PipelineOptions& options) {
  absl::StatusOr<std::string> vae_dir =
      index != nullptr
          ? index->ComponentDir("vae")
          : absl::NotFoundError(absl::StrCat(root_, ": not a pipeline folder, no VAE"));
  if (!vae_dir.ok()) return family_.requires_vae ? vae_dir.status() : absl::OkStatus();
  ASSIGN_OR_RETURN(vae_scale_factor_, load_vae_(*vae_dir, options));
  has_vae_ = true;
  ASSIGN_OR_RETURN(std::unique_ptr<sharding::ComponentCheckpoint> checkpoint,
                   sharding::ComponentCheckpoint::Open(*vae_dir));
  vae_encodes_ = checkpoint->Find("encoder.conv_in.weight").ok();
  return absl::OkStatus();
}

void DiffusionPipeline::FillSharedCard(const PipelineOptions& options) {
  card_.name = ModelNameFromDir(root_);
  card_.family = family_.card_family;
  card_.dtype = DtypeName(options.dtype);
  card_.device = options.device.is_cuda() ? "cuda" : "cpu";
  card_.prompt_embeds_shape = {1, -1, shape_.joint_attention_dim};
  card_.images_out = has_vae_;
  card_.default_height = card_.default_width = kDefaultSampleSize * vae_scale_factor_;
  card_.default_max_sequence_length = 512;
  card_.loras = loras_->cards();
}

// ---- Run ----

absl::Status DiffusionPipeline::CheckJob(const GenerationJob&) const {
  return absl::OkStatus();
}

absl::StatusOr<ImageConditioning> DiffusionPipeline::ConditionOnImages(const GenerationJob&,
                                                                       const LatentGrid&) {
  return absl::InvalidArgumentError(
      absl::StrCat("images: ", family_.display_name, " takes no input image"));
}

std::optional<double> DiffusionPipeline::ScheduleShift(const LatentGrid& grid, int) const {
  if (!scheduler_config_.use_dynamic_shifting) return std::nullopt;
  return CalculateShift(grid.tokens, scheduler_config_);
}

torch::Tensor DiffusionPipeline::CombineGuidance(const torch::Tensor& cond,
                                                 const torch::Tensor& uncond,
                                                 const torch::Tensor& scale) const {
  return uncond + scale * (cond - uncond);
}

LatentGrid DiffusionPipeline::Grid(const GenerationJob& job) const {
  LatentGrid grid;
  grid.height = LatentSide(job.height, vae_scale_factor_);
  grid.width = LatentSide(job.width, vae_scale_factor_);
  grid.noise_shape = {1, shape_.in_channels / 4, grid.height, grid.width};
  grid.tokens = (grid.height / 2) * (grid.width / 2);
  return grid;
}

absl::StatusOr<torch::Tensor> DiffusionPipeline::BroadcastImageEncodings(
    const GenerationJob& job, std::vector<int64_t> item_shape,
    const std::function<absl::StatusOr<torch::Tensor>(const JobItem&)>& encode) {
  std::vector<int64_t> shape = std::move(item_shape);
  shape[0] = static_cast<int64_t>(job.items.size());
  std::vector<torch::Tensor> tensors;
  RETURN_IF_ERROR(BroadcastFromRank0(
      *comm_, "rank 0's image encoding",
      [&](std::vector<torch::Tensor>* out) -> absl::Status {
        std::vector<torch::Tensor> rows;
        for (const JobItem& item : job.items) {
          ASSIGN_OR_RETURN(torch::Tensor encoded, encode(item));
          rows.push_back(std::move(encoded));
        }
        torch::Tensor batch = torch::cat(rows, 0).to(device_, dtype_).contiguous();
        if (!batch.sizes().equals(shape)) {
          return absl::InternalError(absl::StrCat("the encoded images have the shape ",
                                                  c10::str(batch.sizes()), ", not ",
                                                  c10::str(shape)));
        }
        out->push_back(std::move(batch));
        return absl::OkStatus();
      },
      {shape}, dtype_, device_, &tensors));
  return tensors[0];
}

absl::StatusOr<torch::Tensor> DiffusionPipeline::BroadcastReferenceTokens(
    const GenerationJob& job,
    const std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor& pixels)>& encode) {
  int64_t total = 0;  // CheckRun: the same image sizes in every item
  for (const torch::Tensor& rgb : job.items[0].images)
    total += ImageTokenGrid(rgb, vae_scale_factor_ * 2).tokens();
  return BroadcastImageEncodings(job, {1, total, shape_.in_channels},
                                 [&](const JobItem& item) -> absl::StatusOr<torch::Tensor> {
                                   std::vector<torch::Tensor> tokens;
                                   for (const torch::Tensor& rgb : item.images) {
                                     ASSIGN_OR_RETURN(torch::Tensor t, encode(rgb));
                                     tokens.push_back(std::move(t));
                                   }
                                   return torch::cat(tokens, 1);
                                 });
}

absl::StatusOr<ImageConditioning> DiffusionPipeline::ImageToImageConditioning(
    const GenerationJob& job, const LatentGrid& grid, std::vector<int64_t> drawn,
    const std::function<absl::StatusOr<torch::Tensor>(const JobItem&)>& encode) {
  const torch::Tensor& rgb = job.items[0].images[0];
  if (rgb.size(0) != grid.height * vae_scale_factor_ ||
      rgb.size(1) != grid.width * vae_scale_factor_) {
    return absl::InvalidArgumentError(
        absl::StrCat("images[0]: image-to-image needs the image at the output's size (",
                     grid.width * vae_scale_factor_, "x", grid.height * vae_scale_factor_,
                     "), got ", rgb.size(1), "x", rgb.size(0)));
  }
  ImageConditioning images;
  ASSIGN_OR_RETURN(images.image_latents, BroadcastImageEncodings(job, grid.noise_shape, encode));
  images.strength = job.items[0].strength;
  // Every rank draws the posterior's sample too (and drops it) before the noise.
  images.drawn_before_noise = {std::move(drawn)};
  return images;
}

absl::Status DiffusionPipeline::AgreeOnTokenizing(const absl::Status& local) {
  return AgreeOnFailure(*comm_, local, "tokenizing the prompt", device_);
}

absl::Status DiffusionPipeline::CheckRun(const GenerationJob& job) const {
  if (job.items.empty()) return absl::InvalidArgumentError("a job needs at least one item");
  if (job.output != JobOutput::kLatents && !card_.images_out) {
    return absl::InvalidArgumentError("this model can only return OUTPUT_FORMAT_LATENTS");
  }
  if (!(job.cache_threshold >= 0 && job.cache_threshold <= card_.max_cache_threshold)) {
    return absl::InvalidArgumentError(absl::StrCat("cache_threshold must be in [0, ",
                                                   card_.max_cache_threshold, "], got ",
                                                   job.cache_threshold));
  }
  RETURN_IF_ERROR(CheckImages(job));
  return CheckJob(job);
}

// The frontend prepared the images by the card; a job that disagrees with it is refused here, on
// every rank alike, before any collective.
absl::Status DiffusionPipeline::CheckImages(const GenerationJob& job) const {
  const ImageInputCard& spec = card_.image_inputs;
  const JobItem& first = job.items[0];
  for (size_t i = 0; i < job.items.size(); ++i) {
    const JobItem& item = job.items[i];
    if (static_cast<int>(item.images.size()) < spec.min_images) {
      return absl::InvalidArgumentError(
          absl::StrCat("images: ", card_.name, " needs at least ", spec.min_images, " input image",
                       spec.min_images == 1 ? "" : "s", ", got ", item.images.size()));
    }
    if (!item.condition_images.empty() &&
        (spec.use != ImageUse::kQwenEdit || item.condition_images.size() != item.images.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "item ", i, ": condition_images come with a Qwen-Image-Edit model's images, one each"));
    }
    for (size_t k = 0; k < item.condition_images.size(); ++k) {
      const torch::Tensor& px = item.condition_images[k];
      if (!px.defined() || px.dim() != 3 || px.size(2) != 3 || px.scalar_type() != torch::kUInt8 ||
          px.size(0) < 1 || px.size(1) < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("item ", i, ": condition_images[", k, "] must be uint8 (H, W, 3)"));
      }
    }
    if (item.images.empty() && item.strength == 0) continue;
    if (spec.use == ImageUse::kNone) {
      return absl::InvalidArgumentError(
          absl::StrCat("images: ", card_.name, " takes no input image"));
    }
    if (static_cast<int>(item.images.size()) > spec.max_images) {
      return absl::InvalidArgumentError(absl::StrCat("images: ", card_.name, " takes at most ",
                                                     spec.max_images, " input images, got ",
                                                     item.images.size()));
    }
    if (item.images.size() != first.images.size() || item.strength != first.strength) {
      return absl::InvalidArgumentError(absl::StrCat(
          "item ", i, ": a job's items must have the same number of images and strength"));
    }
    for (size_t k = 0; k < item.images.size(); ++k) {
      const torch::Tensor& px = item.images[k];
      const bool shaped = px.defined() && px.dim() == 3 && px.size(2) == 3 &&
                          px.scalar_type() == torch::kUInt8 &&
                          px.size(0) % spec.size_multiple == 0 &&
                          px.size(1) % spec.size_multiple == 0 && px.size(0) > 0 && px.size(1) > 0;
      if (!shaped || !px.sizes().equals(first.images[k].sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "item ", i, ": images[", k, "] must be uint8 (H, W, 3) with H and W multiples of ",
            spec.size_multiple, ", the same size in every item of a job"));
      }
    }
    if (spec.use == ImageUse::kImageToImage) {
      if (item.images.empty() || !(item.strength > 0 && item.strength <= 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "item ", i, ": image-to-image needs an image and a strength in (0, 1], got ",
            item.strength));
      }
    } else if (item.strength != 0) {
      return absl::InvalidArgumentError("strength: only image-to-image models take a strength");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerationResult> DiffusionPipeline::Run(const GenerationJob& job,
                                                        const StepCallback& on_step,
                                                        const CancelPredicate& cancel_requested) {
  RETURN_IF_ERROR(CheckRun(job));
  return GuardTorch(absl::StrCat(family_.display_name, " pipeline").c_str(),
                    [&] { return RunUnguarded(job, on_step, cancel_requested); });
}

absl::StatusOr<GenerationResult> DiffusionPipeline::RunUnguarded(
    const GenerationJob& job, const StepCallback& on_step,
    const CancelPredicate& cancel_requested) {
  GenerationResult result;
  const auto t_encode = Clock::now();
  ASSIGN_OR_RETURN(TextConditioning cond, EncodeText(job, /*negative=*/false));
  TextConditioning neg;
  if (job.true_cfg()) {
    ASSIGN_OR_RETURN(neg, EncodeText(job, /*negative=*/true));
  }
  const LatentGrid grid = Grid(job);
  ImageConditioning images;
  if (!job.items[0].images.empty()) {
    ASSIGN_OR_RETURN(images, ConditionOnImages(job, grid));
  }
  result.seconds.encode = SecondsSince(t_encode);

  const auto t_denoise = Clock::now();
  JobState state(scheduler_config_);
  // Everything a step needs is allocated before the loop, and the ranks agree that it worked, so
  // running out of memory here fails the job on every rank and leaves the group usable.
  // Guarded here: an exception on one rank (out of memory) must still reach the agreement.
  const absl::Status prepared = GuardTorchStatus(
      "preparing the latents", [&] { return Prepare(job, grid, cond, images, &state); });
  RETURN_IF_ERROR(AgreeOnFailure(*comm_, prepared, "preparing the latents", device_));
  ASSIGN_OR_RETURN(torch::Tensor latents,
                   Denoise(job, grid, &state, cond, neg, on_step, cancel_requested));
  result.seconds.denoise = SecondsSince(t_denoise);
  result.full_steps = state.full_passes;
  result.cache_decisions = std::move(state.cache_decisions);
  for (const auto* cache : {&state.cache_cond, &state.cache_uncond}) {
    if (!cache->has_value()) continue;
    result.full_steps += (*cache)->full_passes();
    result.cached_steps += (*cache)->cached_passes();
  }
  if (comm_->rank() != 0) return result;
  RETURN_IF_ERROR(CollectOutputs(
      job, latents, [&](const torch::Tensor& l) { return Decode(l, grid); }, &result));
  return result;
}

absl::Status DiffusionPipeline::Prepare(const GenerationJob& job, const LatentGrid& grid,
                                        const TextConditioning& text,
                                        const ImageConditioning& images, JobState* state) {
  ASSIGN_OR_RETURN(state->adapters, loras_->Activate(job.loras));
  const int steps = static_cast<int>(job.num_inference_steps);
  RETURN_IF_ERROR(state->scheduler.SetTimesteps(FluxSigmas(steps), ScheduleShift(grid, steps)));
  ASSIGN_OR_RETURN(torch::Tensor noise,
                   BatchNoise(job, grid.noise_shape, dtype_, device_, images.drawn_before_noise));
  if (images.image_latents.defined()) {
    // diffusers' get_timesteps (the loop starts at t_start) and scale_noise at that step's sigma,
    // in the latents' dtype: sigma * noise + (1 - sigma) * image_latents.
    state->first_step = StrengthFirstStep(steps, images.strength);
    const torch::Tensor sigma = state->scheduler.sigmas()[state->first_step].to(device_, dtype_);
    noise = sigma * noise + (1.0 - sigma) * images.image_latents;
  }
  ASSIGN_OR_RETURN(state->layout, LayOutLatents(job, grid, noise, text));
  for (const auto& [name, ids] : images.reference_ids) {
    auto it = state->layout.fixed.find(name);
    if (it == state->layout.fixed.end()) {
      return absl::InternalError(
          absl::StrCat("reference ids for '", name, "', which the layout lacks"));
    }
    it->second = torch::cat({it->second, ids}, 0);
  }
  state->references = images.reference_tokens;
  if (job.true_cfg()) state->cfg_scale = TrueCfgScales(job, dtype_, device_);
  if (job.cache_threshold > 0) {
    state->cache_cond.emplace(job.cache_threshold);
    if (job.true_cfg()) state->cache_uncond.emplace(job.cache_threshold);
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> DiffusionPipeline::Denoise(const GenerationJob& job,
                                                         const LatentGrid& grid, JobState* state,
                                                         const TextConditioning& cond,
                                                         const TextConditioning& neg,
                                                         const StepCallback& on_step,
                                                         const CancelPredicate& cancel_requested) {
  const int64_t batch = static_cast<int64_t>(job.items.size());
  const bool true_cfg = job.true_cfg();
  ASSIGN_OR_RETURN(const torch::Tensor timesteps, GuardTorch("timesteps", [&] {
                     return state->scheduler.timesteps().to(device_);
                   }));
  auto velocity = [&](const torch::Tensor& x, int index) -> absl::StatusOr<torch::Tensor> {
    const torch::Tensor t = ModelTimestep(timesteps, index, batch, dtype_);
    ASSIGN_OR_RETURN(torch::Tensor v, Forward(state, x, t, cond, /*negative=*/false));
    if (!true_cfg) return v;
    ASSIGN_OR_RETURN(torch::Tensor nv, Forward(state, x, t, neg, /*negative=*/true));
    return CombineGuidance(v, nv, state->cfg_scale);
  };
  LoopPreviews previews;
  const bool preview = job.preview_images > 0 && job.output == JobOutput::kImage && has_vae_;
  if (preview && comm_->rank() == 0) {
    previews.after_steps =
        PreviewSteps(state->scheduler.num_steps() - state->first_step,
                     std::min(job.preview_images, GenerationJob::kMaxPreviewImages));
    previews.decode = [&](const torch::Tensor& x0) {
      return DecodeImages(x0, [&](const torch::Tensor& l) { return Decode(l, grid); });
    };
  }
  return RunDenoiseLoop(state->scheduler, state->layout.latents, velocity, *comm_, on_step,
                        cancel_requested, state->first_step, preview ? &previews : nullptr);
}

absl::StatusOr<torch::Tensor> DiffusionPipeline::Forward(JobState* state,
                                                         const torch::Tensor& latents,
                                                         const torch::Tensor& timestep,
                                                         const TextConditioning& text,
                                                         bool negative) {
  ModelArgs args = state->layout.fixed;
  args.insert(text.extra.begin(), text.extra.end());
  args["hidden_states"] =
      state->references.defined() ? torch::cat({latents, state->references}, 1) : latents;
  args["encoder_hidden_states"] = text.embeds;
  args["timestep"] = timestep;
  std::optional<models::FirstBlockCache>& cache =
      negative ? state->cache_uncond : state->cache_cond;
  models::FirstBlockCache* context = cache.has_value() ? &*cache : nullptr;
  if (context == nullptr) ++state->full_passes;
  const uint32_t full_before = context != nullptr ? context->full_passes() : 0;
  ASSIGN_OR_RETURN(torch::Tensor velocity, transformer_->Forward(args, context));
  if (context != nullptr) {
    state->cache_decisions.push_back(
        {negative, context->full_passes() > full_before, context->last_compared()});
  }
  if (!state->references.defined()) return velocity;
  return velocity.narrow(1, 0, latents.size(1));  // diffusers: noise_pred[:, : latents.size(1)]
}

}  // namespace ditserve::pipeline
