// Flux2Pipeline: diffusers' Flux2Pipeline (FLUX.2-dev) for one rank. Every rank holds its shard of
// the transformer. The conditioning comes from the request's precomputed embeddings or from the
// Mistral text encoder (flux2_prompt_encoder.h: sharded over the ranks, or a replica on rank 0 that
// broadcasts); rank 0 decodes with the FLUX.2 VAE when the folder has one, else returns latents.
//
// Latent layout (diffusers' prepare_latents): noise drawn already patchified as
// (B, in_channels, H/16, W/16) for an 8x VAE, flattened row-major into (B, tokens, in_channels);
// image ids (0, y, x, 0), text ids (0, 0, 0, l); schedule: FluxSigmas with mu from
// compute_empirical_mu(tokens, steps); guidance embedded (guidance-distilled).
//
// Model folder: a Flux2Pipeline root, or a Flux2Transformer2DModel folder alone (latents only,
// the published scheduler configuration).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "models/transformer.h"
#include "models/vae/autoencoder_kl_flux2.h"
#include "pipeline/flux2_prompt_encoder.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

class Flux2Pipeline final : public Pipeline {
 public:
  // `index` is null for a transformer folder alone (`transformer_dir`).
  static absl::StatusOr<std::unique_ptr<Flux2Pipeline>> Load(const sharding::PipelineIndex* index,
                                                             const std::string& transformer_dir,
                                                             const PipelineOptions& options,
                                                             comm::Communicator* comm);

  const ModelCard& Card() const override { return card_; }
  absl::StatusOr<GenerationResult> Run(const GenerationJob& job, const StepCallback& on_step,
                                       const CancelPredicate& cancel_requested) override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  models::StepGraphStats transformer_graph_stats() const override {
    return transformer_->graph_stats();
  }

 private:
  Flux2Pipeline() = default;
  absl::StatusOr<torch::Tensor> Condition(const GenerationJob& job);
  absl::StatusOr<GenerationResult> RunUnguarded(const GenerationJob& job, const StepCallback& on_step,
                                                const CancelPredicate& cancel_requested);

  ModelCard card_;
  comm::Communicator* comm_ = nullptr;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  std::unique_ptr<models::DiffusionTransformer> transformer_;
  std::unique_ptr<lora::LoraLibrary> loras_;  // after transformer_: borrows its layers
  FlowMatchSchedulerConfig scheduler_config_;
  int64_t in_channels_ = 0;
  int64_t joint_attention_dim_ = 0;
  bool guidance_embeds_ = false;
  int64_t vae_scale_factor_ = 8;
  uint64_t weight_bytes_ = 0;
  // The text encoder: on every rank (sharded_encoder_) or on rank 0 only; null without one.
  std::unique_ptr<Flux2PromptEncoder> encoder_;
  bool sharded_encoder_ = false;
  bool has_encoder_ = false;              // the folder has one (every rank knows)
  std::optional<vae::AutoencoderKLFlux2> vae_;  // rank 0 only, when the folder has one
  bool has_vae_ = false;
};

}  // namespace ditserve::pipeline
