// DiffusionPipeline: the one skeleton of the three families' pipelines (flux1_pipeline.h,
// flux2_pipeline.h, qwenimage_pipeline.h). It owns what they share: the components (transformer
// shard, LoRA adapters, scheduler configuration, rank 0's VAE), the ModelCard, and a job's flow
// (checks, text conditioning, image conditioning, the agreed preparation with LoRA activation,
// seeded noise and schedule, the denoising loop, rank 0's decode into the result). A family
// supplies only what differs: its transformer config and VAE (registered by its constructor:
// UseTransformerConfig, UseVae), and through the protected hooks its text encoders, its card
// fields, its text conditioning, its latent layout and position ids, how guidance combines, and its
// decode.
//
// Load (Create<Family> constructs it, then calls LoadComponents once on every rank):
//   1. transformer: config.json read by the family's parser (UseTransformerConfig, before any
//   weight),
//      this rank's shard through the built-in plan; 2. the LoRA adapters (options.loras);
//   3. the scheduler configuration: the folder's, or the family's published one for a transformer
//      folder alone; 4. the VAE when the folder has one (UseVae's: its config on every rank, since
//      it sets the latent grid; its weights on rank 0 only); 5. the text side (LoadTextSide);
//   6. the ModelCard (shared fields here, the family's in FillCard). Loading runs no collective
//      except what a sharded text encoder's own load does (the same on every rank).
//
// Run (every rank of the group, with the same job, concurrently; Pipeline's contract):
//   the job checks (no items, images from a latents-only model, the family's CheckJob: before any
//   collective, so every rank refuses alike) → GuardTorch → EncodeText for the prompts, and for the
//   negative prompts under true CFG (collective when rank 0 encodes and broadcasts or the encoder
//   is sharded) → ConditionOnImages (input images: rank 0 encodes, every rank receives) → the
//   preparation, agreed across the ranks ("preparing the latents"): LoRA activation, the schedule
//   (FluxSigmas shifted by ScheduleShift), BatchNoise of the grid's noise shape (one CPU generator
//   per item, in the job's order, after what the family drew from it first), image-to-image's
//   noised image latents and first step, LayOutLatents, the reference arguments, the true-CFG
//   scales → RunDenoiseLoop (per step one forward with the reference tokens appended, a second one
//   under true CFG combined by CombineGuidance; the per-step cancellation all-reduce first) →
//   rank 0 alone: CollectOutputs with Decode (images) or the latents.
//
// Threads: as Pipeline (one job at a time, on the rank's device thread; Card() and weight_bytes()
// immutable after Load). Ownership: owns its components; borrows the Communicator (must outlive
// it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "common/status_macros.h"
#include "models/lora/lora_library.h"
#include "models/transformer.h"
#include "pipeline/component_loading.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

// Named transformer arguments (models/transformer.h's Forward).
using ModelArgs = std::map<std::string, torch::Tensor>;

// What a family is, for the skeleton.
struct PipelineFamily {
  const char* display_name;  // "FLUX.1": names the job's torch errors ("FLUX.1 pipeline")
  const char* card_family;   // ModelCard::family ("flux1")
  bool requires_vae;         // the folder must have a VAE (else latents only without one)
  // The published scheduler_config.json, for a transformer folder alone; null: the family is
  // served from its pipeline folder only.
  const char* published_scheduler_json;
};

// What the skeleton needs of the family's transformer config.
struct TransformerShape {
  int64_t in_channels = 0;          // per latent token
  int64_t joint_attention_dim = 0;  // the prompt embeddings' width
};

// A job's latent grid as the family lays it out: a pure function of the job's size.
struct LatentGrid {
  std::vector<int64_t> noise_shape;  // one item's noise as BatchNoise draws it (leading dim 1)
  int64_t height = 0;                // the rows and columns the family's layout and decode use
  int64_t width = 0;
  int64_t tokens = 0;  // latent tokens per item (the schedule's sequence length)
};

// A batch's text conditioning, identical on every rank, in the model dtype on the device.
struct TextConditioning {
  torch::Tensor embeds;  // "encoder_hidden_states" (B, T, joint_attention_dim)
  ModelArgs extra;       // the family's other text arguments ("pooled_projections", a mask)
};

// The loop's starting point, as the family lays out the noise.
struct LatentLayout {
  torch::Tensor latents;  // (B, tokens, in_channels): what the loop denoises
  ModelArgs fixed;        // arguments fixed over the loop: position ids, guidance, shapes
};

// What a job's input images add to it (ConditionOnImages, every rank alike):
//   * Reference images (FLUX.2, FLUX.1 Kontext; Qwen-Image-Edit later): encoded by the VAE
//     encoder on rank 0 and broadcast; their tokens are appended after the latents in every
//     forward and the velocity keeps the latents' tokens; `reference_ids` are their position ids,
//     by model argument, appended (dim 0) after the layout's argument of that name.
//   * Image-to-image (FLUX.1): the encoded image in the noise's layout, noised to the sigma of the
//     step where `strength` starts the schedule (diffusers' get_timesteps + scale_noise); the loop
//     starts at that step.
struct ImageConditioning {
  torch::Tensor reference_tokens;  // (B, R, in_channels), model dtype, on the device; or undefined
  ModelArgs reference_ids;         // e.g. "img_ids": (R, axes)
  // (B, ...) as the grid's noise, model dtype, on the device; or undefined.
  torch::Tensor image_latents;
  double strength = 0;  // with image_latents: (0, 1]
  // What the family drew from each item's generator before the noise (the VAE posterior's
  // sample, in the model dtype, which the VAE runs in too): BatchNoise draws the same first, so
  // the noise comes from the generator's next state.
  std::vector<std::vector<int64_t>> drawn_before_noise;
};

// How a family reads its VAE (DiffusionPipeline::UseVae): the config loader (config.json's path),
// the channels one transformer token holds from the latents (`channels_what` says how, for the
// message) and the image pixels per latent pixel.
template <typename Config>
struct VaeSpec {
  absl::StatusOr<Config> (*load_config)(const std::string& config_path);
  int64_t (*channels_per_token)(const Config& config);
  const char* channels_what;
  int64_t (*scale_factor)(const Config& config);
};

class DiffusionPipeline : public Pipeline {
 public:
  const ModelCard& Card() const final { return card_; }
  absl::StatusOr<GenerationResult> Run(const GenerationJob& job, const StepCallback& on_step,
                                       const CancelPredicate& cancel_requested) final;
  uint64_t weight_bytes() const final { return weight_bytes_; }
  models::StepGraphStats transformer_graph_stats() const final {
    return transformer_->graph_stats();
  }

  // The family pipeline P (which befriends DiffusionPipeline for its private constructor) with
  // its components loaded on this rank: from the pipeline folder `index` (its transformer
  // component), or, `index` null, from a transformer folder alone (`transformer_dir`).
  template <typename P>
  static absl::StatusOr<std::unique_ptr<P>> Create(const sharding::PipelineIndex* index,
                                                   const std::string& transformer_dir,
                                                   const PipelineOptions& options,
                                                   comm::Communicator* comm) {
    std::unique_ptr<P> p(new P());
    DiffusionPipeline& base = *p;
    RETURN_IF_ERROR(base.LoadComponents(index, transformer_dir, options, comm));
    return p;
  }

 protected:
  explicit DiffusionPipeline(const PipelineFamily& family) : family_(family) {}

  // The load sequence above. `index` is null for a transformer folder alone (`transformer_dir`);
  // with one, the transformer is its "transformer" component.
  absl::Status LoadComponents(const sharding::PipelineIndex* index, std::string transformer_dir,
                              const PipelineOptions& options, comm::Communicator* comm);

  // ---- Registered by the family's constructor (both required) ----
  // The family's transformer config: `parse` (config.json -> StatusOr<Config>) fills *out, a member
  // of the family, whose in_channels and joint_attention_dim give the transformer's shape. Its
  // errors get the file's path in front.
  template <typename Config, typename Parse>
  void UseTransformerConfig(Parse parse, Config* out) {
    parse_transformer_ = [parse,
                          out](const nlohmann::json& json) -> absl::StatusOr<TransformerShape> {
      absl::StatusOr<Config> parsed = parse(json);
      if (!parsed.ok()) return parsed.status();
      *out = *std::move(parsed);
      return TransformerShape{out->in_channels, out->joint_attention_dim};
    };
  }
  // The family's VAE when the folder has one: its config read from the folder by `spec` on every
  // rank, its latents' channels a transformer token checked against the transformer's in_channels
  // (FAILED_PRECONDITION naming both otherwise), loaded on rank 0 into *out (LoadOnRank0; `out`
  // outlives the pipeline's loading: a member of the family), its scale factor kept.
  template <typename Component, typename Config>
  void UseVae(const VaeSpec<Config>& spec, std::optional<Component>* out) {
    load_vae_ = [this, spec, out](const std::string& vae_dir,
                                  const PipelineOptions& options) -> absl::StatusOr<int64_t> {
      ASSIGN_OR_RETURN(const Config config, spec.load_config(vae_dir + "/config.json"));
      const int64_t channels = spec.channels_per_token(config);
      if (channels != shape_.in_channels) {
        return absl::FailedPreconditionError(absl::StrCat(
            root_, ": the VAE's ", spec.channels_what, " (", channels,
            ") do not match the transformer's in_channels (", shape_.in_channels, ")"));
      }
      RETURN_IF_ERROR(LoadOnRank0(vae_dir, config, options, out));
      return spec.scale_factor(config);
    };
  }

  // ---- Load hooks (called once, in LoadComponents' order, on every rank) ----
  // The text encoders, where the family places them. `index` as in LoadComponents.
  virtual absl::Status LoadTextSide(const sharding::PipelineIndex* index,
                                    const PipelineOptions& options) = 0;
  // The family's ModelCard fields (the shared ones, prompt_embeds_shape included, are set already).
  virtual void FillCard(ModelCard* card) const = 0;

  // ---- Job hooks (every rank, in Run's order) ----
  // Refusals of the family, before any collective (default: none).
  virtual absl::Status CheckJob(const GenerationJob& job) const;
  // The items' conditioning (negative: the negative prompts, true CFG only): from the request's
  // embeddings, or encoded (a collective: rank 0 broadcasts, or the sharded encoder runs).
  virtual absl::StatusOr<TextConditioning> EncodeText(const GenerationJob& job, bool negative) = 0;
  // The job's grid (default: 2x2-packed latents as FLUX.1 and Qwen-Image lay them out: latent
  // sides h, w (LatentSide of the image's), noise (1, in_channels / 4, h, w), (h/2)(w/2) tokens).
  virtual LatentGrid Grid(const GenerationJob& job) const;
  // The job's input images as conditioning (see ImageConditioning): after the text, before the
  // preparation, on every rank; may run collectives in the same order on every rank (rank 0's VAE
  // encoding, broadcast). Called only for a job with images (CheckRun has checked them against the
  // card); the default refuses (a family whose card takes none never gets here).
  virtual absl::StatusOr<ImageConditioning> ConditionOnImages(const GenerationJob& job,
                                                              const LatentGrid& grid);
  // Inside the agreed preparation: the batch's noise (B, ...) laid out for the loop, with the
  // arguments fixed over it (`text`: the prompts' conditioning, for text position ids).
  virtual absl::StatusOr<LatentLayout> LayOutLatents(const GenerationJob& job,
                                                     const LatentGrid& grid,
                                                     const torch::Tensor& noise,
                                                     const TextConditioning& text) = 0;
  // mu of dynamic shifting for the schedule (default: calculate_shift over grid.tokens when the
  // scheduler shifts dynamically, else none).
  virtual std::optional<double> ScheduleShift(const LatentGrid& grid, int steps) const;
  // True CFG: the guided velocity from the conditional and unconditional ones and the (B, 1, 1)
  // scales (default: uncond + scale · (cond − uncond)).
  virtual torch::Tensor CombineGuidance(const torch::Tensor& cond, const torch::Tensor& uncond,
                                        const torch::Tensor& scale) const;
  // Rank 0 only: the final latents → (B, C, H, W) images in about [-1, 1].
  virtual absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& latents,
                                               const LatentGrid& grid) const = 0;

  // ---- For the hooks ----
  // Rank 0's copy of a component built whole from `dir` by Component::Create(config, state dict)
  // (a VAE) into *out, its bytes counted; the other ranks leave *out empty.
  template <typename Component, typename Config>
  absl::Status LoadOnRank0(const std::string& dir, const Config& config,
                           const PipelineOptions& options, std::optional<Component>* out) {
    if (comm_->rank() != 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(sharding::ShardedStateDict sd, LoadWholeComponent(dir, options));
    ASSIGN_OR_RETURN(Component component, Component::Create(config, sd));
    out->emplace(std::move(component));
    weight_bytes_ += sd.TotalBytes();
    return absl::OkStatus();
  }
  // A job's input images encoded on rank 0 and broadcast (a collective; call on every rank): rank
  // 0 runs `encode` on each item (its images -> a tensor of `item_shape`, leading dim 1), and
  // every rank gets the (B, ...) batch in the model dtype on the device.
  absl::StatusOr<torch::Tensor> BroadcastImageEncodings(
      const GenerationJob& job, std::vector<int64_t> item_shape,
      const std::function<absl::StatusOr<torch::Tensor>(const JobItem&)>& encode);
  // Reference images (FLUX.2, Qwen-Image-Edit; a collective): rank 0 turns each image of each item
  // into its (1, tokens, in_channels) tokens by `encode` (the prepared uint8 pixels in), where an
  // image has ImageTokenGrid(pixels, vae_scale_factor() * 2) tokens; every rank gets (B, Σ tokens,
  // in_channels), an item's images one after the other.
  absl::StatusOr<torch::Tensor> BroadcastReferenceTokens(
      const GenerationJob& job,
      const std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor& pixels)>& encode);
  // Image to image (FLUX.1, Qwen-Image; a collective): the item's one image, which must be at the
  // output's size (INVALID_ARGUMENT naming images[0] otherwise), through `encode` on rank 0 (the
  // item → its latents in grid.noise_shape, having drawn a sample of `drawn` from the item's
  // generator first, SamplePosterior); the strength and the draw kept for the noise.
  absl::StatusOr<ImageConditioning> ImageToImageConditioning(
      const GenerationJob& job, const LatentGrid& grid, std::vector<int64_t> drawn,
      const std::function<absl::StatusOr<torch::Tensor>(const JobItem&)>& encode);
  // AgreeOnFailure of every rank's tokenizing, before a sharded encoder's collectives.
  absl::Status AgreeOnTokenizing(const absl::Status& local);
  void AddWeightBytes(uint64_t bytes) { weight_bytes_ += bytes; }

  comm::Communicator& comm() const { return *comm_; }
  torch::Device device() const { return device_; }
  torch::ScalarType dtype() const { return dtype_; }
  const std::string& root() const { return root_; }  // the model folder (errors, card name)
  // model_index.json's "_class_name" ("FluxKontextPipeline"); empty for a transformer folder.
  const std::string& pipeline_class() const { return pipeline_class_; }
  const FlowMatchSchedulerConfig& scheduler_config() const { return scheduler_config_; }
  int64_t vae_scale_factor() const { return vae_scale_factor_; }
  // The folder's VAE has its encoder (every rank knows: read from the checkpoint's header), so the
  // model can take input images.
  bool vae_encodes() const { return vae_encodes_; }
  const TransformerShape& transformer_shape() const { return shape_; }

 private:
  // The state of one job on this rank, from the preparation to the decode.
  struct JobState;

  absl::StatusOr<FlowMatchSchedulerConfig> LoadScheduler(
      const sharding::PipelineIndex* index) const;
  absl::Status LoadTransformerAndLoras(const std::string& dir, const PipelineOptions& options);
  absl::Status LoadVaeIfAny(const sharding::PipelineIndex* index, const PipelineOptions& options);
  void FillSharedCard(const PipelineOptions& options);
  absl::Status CheckRun(const GenerationJob& job) const;
  absl::Status CheckImages(const GenerationJob& job) const;
  absl::StatusOr<GenerationResult> RunUnguarded(const GenerationJob& job,
                                                const StepCallback& on_step,
                                                const CancelPredicate& cancel_requested);
  absl::Status Prepare(const GenerationJob& job, const LatentGrid& grid,
                       const TextConditioning& text, const ImageConditioning& images,
                       JobState* state);
  // The loop; with job.preview_images, rank 0 decodes previews of the predicted clean latents.
  absl::StatusOr<torch::Tensor> Denoise(const GenerationJob& job, const LatentGrid& grid,
                                        JobState* state, const TextConditioning& cond,
                                        const TextConditioning& neg, const StepCallback& on_step,
                                        const CancelPredicate& cancel_requested);
  // One forward: the loop's fixed arguments, `text`'s, the latents (with the reference tokens
  // appended, the velocity narrowed back to the latents' tokens) and the step's timestep; through
  // the First Block Cache context of the prompt's passes, or of the negative prompt's (`negative`),
  // when the job has one (else every block, counted in `state`).
  absl::StatusOr<torch::Tensor> Forward(JobState* state, const torch::Tensor& latents,
                                        const torch::Tensor& timestep, const TextConditioning& text,
                                        bool negative);

  const PipelineFamily family_;
  std::function<absl::StatusOr<TransformerShape>(const nlohmann::json&)> parse_transformer_;
  std::function<absl::StatusOr<int64_t>(const std::string&, const PipelineOptions&)> load_vae_;
  ModelCard card_;
  comm::Communicator* comm_ = nullptr;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  std::string root_;
  std::string pipeline_class_;
  TransformerShape shape_;
  std::unique_ptr<models::DiffusionTransformer> transformer_;
  std::unique_ptr<lora::LoraLibrary> loras_;  // after transformer_: borrows its layers
  FlowMatchSchedulerConfig scheduler_config_;
  int64_t vae_scale_factor_ = 8;
  bool has_vae_ = false;  // the folder has a VAE (every rank knows; rank 0 holds it)
  bool vae_encodes_ = false;
  uint64_t weight_bytes_ = 0;
};

}  // namespace ditserve::pipeline
